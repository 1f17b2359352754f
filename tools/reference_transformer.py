# Reference values for tests/test_transformer.cpp from PyTorch 1.13:
#   /usr/bin/python3 tools/reference_transformer.py
# Same deterministic parameter fill as tools/reference_attention.py.
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

for norm_first, act in [(False, "relu"), (True, "gelu")]:
    layer = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.1, activation=act,
                                             batch_first=True, norm_first=norm_first)
    layer.eval()
    fill(layer)
    x = inp((2, 3, 8), 0.0)
    y = layer(x, src_key_padding_mask=torch.tensor([[False, False, True], [False, False, False]]))
    (y * inp((2, 3, 8), 1.0).detach()).sum().backward()
    print("norm_first", norm_first, "names", [n for n, _ in layer.named_parameters()])
    print("y[0,0]", [round(v, 10) for v in y[0, 0].tolist()])
    print("y[1,2]", [round(v, 10) for v in y[1, 2].tolist()])
    print("grads", [round((p.grad * torch.arange(p.numel()).reshape(p.shape).cos()).sum().item(), 10)
                    for _, p in layer.named_parameters()])
