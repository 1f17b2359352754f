# Reference values for tests/test_activation_reduce.cpp, from PyTorch 1.13
# (Debian python3-torch): /usr/bin/python3 tools/reference_activation_reduce.py
import torch
torch.set_printoptions(precision=8)
x = torch.tensor([-2.0, -0.5, 0.0, 1.0, 3.0], dtype=torch.float64)
print("gelu none", torch.nn.functional.gelu(x).tolist())
print("gelu tanh", torch.nn.functional.gelu(x, approximate="tanh").tolist())
print("softplus", torch.nn.functional.softplus(x).tolist())
print("softplus beta2 thr1", torch.nn.functional.softplus(x, beta=2, threshold=1).tolist())
print("silu", torch.nn.functional.silu(x).tolist())
print("sigmoid(0.2)", torch.sigmoid(torch.tensor(0.2)).item())
m = torch.tensor([[1., 2., 3.], [4., 5., 7.]], dtype=torch.float64)
print("var c1 dim1", torch.var(m, 1).tolist(), "c0", torch.var(m, 1, unbiased=False).tolist())
print("std c1 all", torch.std(m).item())
print("logsumexp dim1", torch.logsumexp(m, 1).tolist())
