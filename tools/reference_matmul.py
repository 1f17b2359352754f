# Run with /usr/bin/python3 (the system Python has torch).
# Reference values for tests/test_matmul.cpp (PyTorch 1.13, float64).
import math
import torch

torch.set_printoptions(precision=10)
d = torch.float64

# Self-attention worked example.
X = torch.tensor([[1., 0.], [0., 1.]], dtype=d)
Wq = torch.eye(2, dtype=d)
Wk = torch.eye(2, dtype=d)
Wv = torch.tensor([[1., 2.], [3., 4.]], dtype=d)
Q, K, V = X @ Wq, X @ Wk, X @ Wv
print("unscaled", torch.softmax(Q @ K.T, dim=1) @ V)
print("scaled", torch.softmax(Q @ K.T / math.sqrt(2), dim=1) @ V)

# Small known answers with gradients of sum(C * W).
A = torch.tensor([[1., 2., 3.], [4., 5., 6.]], dtype=d, requires_grad=True)
B = torch.tensor([[7., 8.], [9., 10.], [11., 12.]], dtype=d, requires_grad=True)
Wt = torch.tensor([[1., -1.], [2., 0.5]], dtype=d)
C = A @ B
(C * Wt).sum().backward()
print("C", C)
print("dA", A.grad)
print("dB", B.grad)

# 1-D @ 2-D and dot.
v = torch.tensor([1., -2., 3.], dtype=d, requires_grad=True)
print("v@B", v @ B.detach())
print("dot", v.detach() @ torch.tensor([4., 5., 6.], dtype=d))

# linear with bias, 3-D input.
x = torch.tensor([[[1., 2.], [3., 4.], [5., 6.]]], dtype=d, requires_grad=True)  # (1, 3, 2)
w = torch.tensor([[1., 0.], [0., 1.], [1., 1.]], dtype=d, requires_grad=True)    # (3, 2)
b = torch.tensor([0.5, -0.5, 1.], dtype=d, requires_grad=True)
y = torch.nn.functional.linear(x, w, b)
y.sum().backward()
print("linear y", y)
print("linear dx", x.grad)
print("linear dw", w.grad)
print("linear db", b.grad)
