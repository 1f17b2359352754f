# Writes tests/fixtures/mha_float64.safetensors for tests/test_half.cpp: a
# float64 torch.nn.MultiheadAttention (embed 8, 2 heads, batch_first) with
# random weights under PyTorch's names, its inputs (query 2x3x8, key and
# value 2x4x8, a key padding mask as float64 0/1), its output, head-averaged
# attention weights and the query's gradient of sum(output * cos(index)),
# all F64 (serialised by hand as tools/make_safetensors_fixture.py does;
# torch 1.13 predates the safetensors package).
#   /usr/bin/python3 tools/make_mha_float64_fixture.py
import json, struct, torch
torch.manual_seed(19)
mha = torch.nn.MultiheadAttention(8, 2, batch_first=True, dtype=torch.float64)
with torch.no_grad():
    for p in mha.parameters():
        p.copy_(torch.randn_like(p) * 0.4)
q = torch.randn(2, 3, 8, dtype=torch.float64, requires_grad=True)
k = torch.randn(2, 4, 8, dtype=torch.float64)
v = torch.randn(2, 4, 8, dtype=torch.float64)
pad = torch.tensor([[False, False, False, True], [False, False, False, False]])
out, w = mha(q, k, v, key_padding_mask=pad)
(out * torch.arange(out.numel(), dtype=torch.float64).reshape(out.shape).cos()).sum().backward()
tensors = dict(mha.state_dict())
tensors.update({"input.query": q.detach(), "input.key": k, "input.value": v, "input.key_padding_mask": pad.double(),
                "output": out.detach(), "weights": w.detach(), "grad.query": q.grad})
header, blobs, off = {"__metadata__": {"source": "tools/make_mha_float64_fixture.py"}}, [], 0
for name, t in tensors.items():
    b = t.contiguous().numpy().tobytes()
    header[name] = {"dtype": "F64", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
    blobs.append(b)
    off += len(b)
h = json.dumps(header).encode()
h += b" " * ((8 - len(h) % 8) % 8)
with open("tests/fixtures/mha_float64.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
print(sorted(tensors))
