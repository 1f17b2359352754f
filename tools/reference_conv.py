# Reference values for tests/test_join_conv.cpp, from PyTorch 1.13:
# /usr/bin/python3 tools/reference_conv.py
import torch
x = torch.arange(40, dtype=torch.float64).reshape(1, 2, 5, 4) / 10 - 1
w = torch.arange(36, dtype=torch.float64).reshape(3, 2, 3, 2) / 20 - 0.8
b = torch.tensor([0.1, -0.2, 0.3], dtype=torch.float64)
y = torch.nn.functional.conv2d(x, w, b, stride=(2, 1), padding=(1, 0))
print("conv2d shape", list(y.shape))
print("conv2d", [round(v, 10) for v in y.flatten().tolist()])
u = torch.nn.functional.unfold(x, (3, 2), stride=(2, 1), padding=(1, 0))
print("unfold shape", list(u.shape))
print("unfold row 7", [round(v, 10) for v in u[0, 7].tolist()])
