#!/usr/bin/python3
# Reference values for tests/test_indexing.cpp, computed with PyTorch (1.13)
# in float64. Run: /usr/bin/python3 tools/reference_indexing.py
import torch
import torch.nn.functional as F


def show(name, t):
    vals = ", ".join(repr(float(v)) for v in t.detach().reshape(-1).tolist())
    print(f"{name} (shape {list(t.shape)}): {{{vals}}}")


def weighted(out):
    # Backward seed used by the tests: sum(out * w) with w = 1, 2, 3, ... / 10.
    w = torch.arange(1, out.numel() + 1, dtype=torch.float64).reshape(out.shape) / 10
    return (out * w).sum()


x34 = torch.arange(12, dtype=torch.float64).reshape(3, 4)

print("== index_select")
for dim, idx in [(0, [2, 0, 2]), (1, [3, 1, 1, 0, 3]), (-1, [0])]:
    x = x34.clone().requires_grad_()
    out = torch.index_select(x, dim, torch.tensor(idx))
    show(f"dim {dim} index {idx} out", out)
    weighted(out).backward()
    show(f"dim {dim} index {idx} grad", x.grad)

print("== gather")
for dim, idx in [(0, [[2, 0, 1, 2], [0, 0, 2, 1]]), (1, [[3, 3], [0, 1], [2, 0]])]:
    x = x34.clone().requires_grad_()
    out = torch.gather(x, dim, torch.tensor(idx))
    show(f"dim {dim} out", out)
    weighted(out).backward()
    show(f"dim {dim} grad", x.grad)
# index smaller than x in a non-gathered dim
x = x34.clone().requires_grad_()
out = torch.gather(x, 0, torch.tensor([[1, 2], [2, 2]]))
show("dim 0 small out", out)
weighted(out).backward()
show("dim 0 small grad", x.grad)

print("== scatter_add")
x = torch.zeros(3, 4, dtype=torch.float64).requires_grad_()
src = (torch.arange(8, dtype=torch.float64).reshape(2, 4) + 1).requires_grad_()
out = torch.scatter_add(x, 0, torch.tensor([[2, 0, 2, 1], [2, 1, 0, 1]]), src)
show("out", out)
weighted(out).backward()
show("grad x", x.grad)
show("grad src", src.grad)
# src larger than index
src2 = (torch.arange(9, dtype=torch.float64).reshape(3, 3) + 1).requires_grad_()
x = x34.clone().requires_grad_()
out = torch.scatter_add(x, 1, torch.tensor([[3, 3], [0, 1]]), src2)
show("partial out", out)
# PyTorch 1.13's ScatterAddBackward0 fails when src is larger than index
# ("invalid gradient ... got [2, 2]"); the gradient of src is gather(g) on the
# part index covers and zero elsewhere, computed here directly.
g = torch.arange(1, 13, dtype=torch.float64).reshape(3, 4) / 10
gs = torch.zeros(3, 3, dtype=torch.float64)
gs[:2, :2] = torch.gather(g, 1, torch.tensor([[3, 3], [0, 1]]))
show("partial grad src", gs)

print("== index_add")
x = x34.clone().requires_grad_()
src = (torch.arange(12, dtype=torch.float64).reshape(3, 4) * -0.5).requires_grad_()
out = torch.index_add(x, 0, torch.tensor([1, 1, 0]), src)
show("out", out)
weighted(out).backward()
show("grad x", x.grad)
show("grad src", src.grad)

print("== embedding")
weight = (torch.arange(15, dtype=torch.float64).reshape(5, 3) * 0.5 - 1)
idx = torch.tensor([[0, 2, 4], [2, 2, 1]])
for pad in [None, 2, -1]:
    w = weight.clone().requires_grad_()
    out = F.embedding(idx, w, padding_idx=pad)
    show(f"padding_idx {pad} out", out)
    weighted(out).backward()
    show(f"padding_idx {pad} grad", w.grad)

print("== one_hot")
print(F.one_hot(torch.tensor([0, 2, 1])).tolist())
print(F.one_hot(torch.tensor([[0, 3], [1, 0]]), 5).tolist())
