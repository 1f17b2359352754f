# Reference values for tests/test_attention.cpp from PyTorch 1.13:
#   /usr/bin/python3 tools/reference_attention.py
# Parameters are set deterministically by name order: param k, element i
# gets 0.3 * sin(0.5 i + 1.7 k); inputs are 0.5 * cos(0.3 i + offset).
import torch
torch.set_default_dtype(torch.float64)

def fill(m):
    for k, (n, p) in enumerate(m.named_parameters()):
        i = torch.arange(p.numel(), dtype=torch.float64)
        with torch.no_grad():
            p.copy_((0.3 * torch.sin(0.5 * i + 1.7 * k)).reshape(p.shape))

def inp(shape, off):
    i = torch.arange(torch.Size(shape).numel(), dtype=torch.float64)
    return (0.5 * torch.cos(0.3 * i + off)).reshape(shape).requires_grad_()

def r(t):
    return [round(v, 10) for v in t.detach().flatten().tolist()]

mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)
fill(mha)
x = inp((2, 3, 8), 0.0)
kpm = torch.tensor([[False, False, True], [False, False, False]])
out, w = mha(x, x, x, key_padding_mask=kpm)
print("names", [n for n, _ in mha.named_parameters()])
print("out", r(out))
print("weights", r(w))
g = inp((2, 3, 8), 1.0).detach()
(out * g).sum().backward()
print("grad x", r(x.grad))
for n, p in mha.named_parameters():
    print("grad", n, round((p.grad * torch.arange(p.numel()).reshape(p.shape).cos()).sum().item(), 10))

mha2 = torch.nn.MultiheadAttention(8, 2, kdim=4, vdim=6)
fill(mha2)
q = inp((3, 2, 8), 0.2); k = inp((5, 2, 4), 0.4); v = inp((5, 2, 6), 0.6)
o2, w2 = mha2(q, k, v, attn_mask=torch.triu(torch.ones(3, 5, dtype=torch.bool), 1), average_attn_weights=False)
print("names2", [n for n, _ in mha2.named_parameters()])
print("out2", r(o2))
print("w2 shape", list(w2.shape), "w2[1,0]", r(w2[1, 0]))
