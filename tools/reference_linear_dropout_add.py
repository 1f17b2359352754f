# Run with /usr/bin/python3 (the system Python has torch).
# Reference values for tests/test_linear_dropout_add.cpp (PyTorch 1.13,
# float64): r + dropout(linear(x, w, b), p) with the gradients of
# sum(y * g). PyTorch's dropout draws from its own generator, so the keep
# mask is given: the one ember's dropout draws from Generator(21) for these
# 8 elements (the test checks that it still does), applied as dropout
# applies it, mask / (1 - p).
import torch

torch.set_printoptions(precision=10)
d = torch.float64
p = 0.5
keep = torch.tensor([[[0, 0, 1, 0], [1, 1, 0, 0]]], dtype=d)  # (1, 2, 4), Generator(21)

for name, mask in (("train", keep / (1 - p)), ("eval", torch.ones_like(keep))):
    x = torch.tensor([[[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]]], dtype=d, requires_grad=True)  # (1, 2, 3)
    w = torch.tensor([[0.2, -0.4, 0.6], [-1.0, 0.5, 0.3], [0.7, 0.1, -0.2], [0.05, -0.3, 0.9]], dtype=d,
                     requires_grad=True)  # (4, 3)
    b = torch.tensor([0.1, -0.2, 0.3, -0.4], dtype=d, requires_grad=True)
    r = torch.tensor([[[1.0, 2.0, -3.0, 0.5], [-0.25, 0.75, 1.5, -2.0]]], dtype=d, requires_grad=True)
    g = torch.tensor([[[1.0, -2.0, 0.5, 3.0], [-1.5, 0.25, 2.0, -0.5]]], dtype=d)
    y = r + torch.nn.functional.linear(x, w, b) * mask
    (y * g).sum().backward()
    print(name, "y", y.flatten().tolist())
    print(name, "dx", x.grad.flatten().tolist())
    print(name, "dw", w.grad.flatten().tolist())
    print(name, "db", b.grad.flatten().tolist())
    print(name, "dr", r.grad.flatten().tolist())
