# Reference values for tests/test_pool.cpp (pooling and BatchNorm2d), from
# PyTorch 1.13: /usr/bin/python3 tools/reference_pool.py
import torch
import torch.nn.functional as F

torch.set_printoptions(precision=10)
def show(name, t):
    print(name, list(t.shape), [round(v, 10) for v in t.flatten().tolist()])

# A 1x2x5x6 input with distinct values in a scrambled order (no ties).
x = ((torch.arange(60, dtype=torch.float64) * 37) % 61).reshape(1, 2, 5, 6) / 10 - 3
y, idx = F.max_pool2d(x, (3, 2), stride=(2, 2), padding=(1, 1), return_indices=True)
show("max_pool2d k(3,2) s(2,2) p(1,1)", y)
print("indices", idx.flatten().tolist())
show("avg_pool2d k(3,3) s(2,2) p(1,1) count_include_pad", F.avg_pool2d(x, 3, 2, 1))
show("avg_pool2d k(3,3) s(2,2) p(1,1) exclude pad", F.avg_pool2d(x, 3, 2, 1, count_include_pad=False))
show("adaptive_avg_pool2d (3,4)", F.adaptive_avg_pool2d(x, (3, 4)))
show("adaptive_avg_pool2d (1,1)", F.adaptive_avg_pool2d(x, 1))
# Gradients of sum(out * w) with w = (1, 2, 3, ...) / 10 (test::weighted_backward).
xr = x.clone().requires_grad_()
o = F.avg_pool2d(xr, 3, 2, 1)
(o * (torch.arange(o.numel(), dtype=torch.float64).reshape(o.shape) + 1) / 10).sum().backward()
show("avg_pool2d grad", xr.grad)

# BatchNorm2d: two training steps then eval, momentum 0.1, eps 1e-5.
bn = torch.nn.BatchNorm2d(3).double()
with torch.no_grad():
    bn.weight.copy_(torch.tensor([1.5, -0.5, 2.0], dtype=torch.float64))
    bn.bias.copy_(torch.tensor([0.1, 0.2, -0.3], dtype=torch.float64))
a = ((torch.arange(48, dtype=torch.float64) * 13) % 17).reshape(2, 3, 2, 4) / 4 - 1
b = a.flip(0) * 2 + 0.5
show("bn2d train step 1", bn(a))
bn(b)
show("running_mean", bn.running_mean)
show("running_var", bn.running_var)
print("num_batches_tracked", bn.num_batches_tracked.item())
bn.eval()
show("bn2d eval", bn(a))
print("state_dict", list(bn.state_dict().keys()))
