#!/usr/bin/python3
# Reference values for tests/test_loss.cpp, computed with PyTorch (1.13) in
# float64. Run: /usr/bin/python3 tools/reference_loss.py
import torch
import torch.nn.functional as F

torch.set_printoptions(precision=17)


def show(name, t):
    vals = ", ".join(repr(float(v)) for v in t.detach().reshape(-1).tolist())
    print(f"{name} (shape {list(t.shape)}): {{{vals}}}")


def weighted(out):
    # Backward seed used by the tests: sum(out * w) with w = 1, 2, 3, ... / 10.
    w = torch.arange(1, out.numel() + 1, dtype=torch.float64).reshape(out.shape) / 10
    return (out * w).sum()


logits = torch.tensor([[0.5, -1.0, 2.0, 0.0, 1.5],
                       [1.0, 1.0, -2.0, 0.5, 0.0],
                       [-0.5, 2.5, 0.0, 1.0, -1.5],
                       [3.0, -0.5, 0.5, -1.0, 2.0]], dtype=torch.float64)
target = torch.tensor([1, 0, 4, 2])
target_ign = torch.tensor([1, -100, 4, 2])

print("== cross_entropy (4, 5), no smoothing")
for red in ["none", "sum", "mean"]:
    x = logits.clone().requires_grad_()
    out = F.cross_entropy(x, target, reduction=red)
    show(f"loss {red}", out)
    weighted(out).backward()
    show(f"grad {red}", x.grad)

print("== cross_entropy (4, 5), label_smoothing 0.1, ignore_index -100 on row 1")
for red in ["none", "sum", "mean"]:
    x = logits.clone().requires_grad_()
    out = F.cross_entropy(x, target_ign, reduction=red, label_smoothing=0.1)
    show(f"loss {red}", out)
    weighted(out).backward()
    show(f"grad {red}", x.grad)

print("== cross_entropy ignore_index=2 (a real class), mean")
x = logits.clone().requires_grad_()
out = F.cross_entropy(x, target, ignore_index=2)
show("loss", out)
out.backward()
show("grad", x.grad)

print("== cross_entropy (2, 3, 4) logits, label_smoothing 0.2, one ignored target")
logits3 = (torch.arange(24, dtype=torch.float64).reshape(2, 3, 4) * 0.37).sin() * 2
target3 = torch.tensor([[0, 2, 1, -100], [2, 2, 0, 1]])
show("logits3", logits3)
for red in ["none", "mean"]:
    x = logits3.clone().requires_grad_()
    out = F.cross_entropy(x, target3, reduction=red, label_smoothing=0.2)
    show(f"loss {red}", out)
    weighted(out).backward()
    show(f"grad {red}", x.grad)

print("== cross_entropy 1-D logits, 0-dim target")
x = torch.tensor([0.2, -0.3, 1.1], dtype=torch.float64, requires_grad=True)
out = F.cross_entropy(x, torch.tensor(2))
show("loss", out)
out.backward()
show("grad", x.grad)

print("== cross_entropy float32, large logits")
x = torch.tensor([[1000.0, 0.0, -1000.0], [50.0, 51.0, 52.0]], dtype=torch.float32)
show("loss", F.cross_entropy(x, torch.tensor([2, 0]), reduction="none"))

print("== nll_loss")
lp = torch.tensor([[-0.2, -1.9, -3.0], [-1.2, -0.4, -2.2], [-2.5, -0.9, -0.7]], dtype=torch.float64)
tg = torch.tensor([0, 2, -100])
for red in ["none", "sum", "mean"]:
    x = lp.clone().requires_grad_()
    out = F.nll_loss(x, tg, reduction=red)
    show(f"loss {red}", out)
    weighted(out).backward()
    show(f"grad {red}", x.grad)

print("== mse_loss")
a = torch.tensor([[0.5, -1.0, 2.0], [1.5, 0.0, -0.25]], dtype=torch.float64)
b = torch.tensor([[1.0, 1.0, 1.5], [-0.5, 0.25, 0.0]], dtype=torch.float64)
for red in ["none", "sum", "mean"]:
    x = a.clone().requires_grad_()
    out = F.mse_loss(x, b, reduction=red)
    show(f"loss {red}", out)
    weighted(out).backward()
    show(f"grad {red}", x.grad)

print("== binary_cross_entropy_with_logits")
xb = torch.tensor([-100.0, -3.0, -0.5, 0.0, 0.5, 3.0, 100.0], dtype=torch.float64)
tb = torch.tensor([1.0, 1.0, 0.3, 1.0, 0.0, 1.0, 0.0], dtype=torch.float64)
for red in ["none", "sum", "mean"]:
    x = xb.clone().requires_grad_()
    t = tb.clone().requires_grad_()
    out = F.binary_cross_entropy_with_logits(x, t, reduction=red)
    show(f"loss {red}", out)
    weighted(out).backward()
    show(f"grad input {red}", x.grad)
    show(f"grad target {red}", t.grad)

print("== binary_cross_entropy_with_logits with pos_weight (2, 3) / (3)")
xp = torch.tensor([[0.3, -1.2, 2.0], [-0.7, 0.0, 1.5]], dtype=torch.float64, requires_grad=True)
tp = torch.tensor([[1.0, 0.0, 0.5], [0.0, 1.0, 1.0]], dtype=torch.float64, requires_grad=True)
pw = torch.tensor([2.0, 0.5, 3.0], dtype=torch.float64)
out = F.binary_cross_entropy_with_logits(xp, tp, reduction="none", pos_weight=pw)
show("loss none", out)
weighted(out).backward()
show("grad input", xp.grad)
show("grad target", tp.grad)
# PyTorch 1.13 does not differentiate pos_weight; its gradient from the same
# formula written with differentiable ops.
pwg = pw.clone().requires_grad_()
manual = (1 - tp.detach()) * xp.detach() + (1 + (pwg - 1) * tp.detach()) * F.softplus(-xp.detach())
assert torch.allclose(manual, out.detach())
weighted(manual).backward()
show("grad pos_weight", pwg.grad)
x = torch.tensor([[-100.0, 100.0]], dtype=torch.float32)
show("float32 |x| = 100, t = [1, 0], pos_weight 2", F.binary_cross_entropy_with_logits(
    x, torch.tensor([[1.0, 0.0]]), reduction="none", pos_weight=torch.tensor([2.0])))
