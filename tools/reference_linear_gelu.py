# Run with /usr/bin/python3 (the system Python has torch).
# Reference values for tests/test_linear_gelu.cpp (PyTorch 1.13, float64):
# gelu(linear(x, w, b)) in both forms, with the gradients of sum(y * g).
import torch

torch.set_printoptions(precision=10)
d = torch.float64

for approximate in ("none", "tanh"):
    x = torch.tensor([[[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]]], dtype=d, requires_grad=True)  # (1, 2, 3)
    w = torch.tensor([[0.2, -0.4, 0.6], [-1.0, 0.5, 0.3]], dtype=d, requires_grad=True)       # (2, 3)
    b = torch.tensor([0.1, -0.2], dtype=d, requires_grad=True)
    g = torch.tensor([[[1.0, -2.0], [0.5, 3.0]]], dtype=d)
    y = torch.nn.functional.gelu(torch.nn.functional.linear(x, w, b), approximate=approximate)
    (y * g).sum().backward()
    print(approximate, "y", y.flatten().tolist())
    print(approximate, "dx", x.grad.flatten().tolist())
    print(approximate, "dw", w.grad.flatten().tolist())
    print(approximate, "db", b.grad.flatten().tolist())
