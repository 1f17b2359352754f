# Writes tests/fixtures/pytorch_mixed.safetensors: tensors made by PyTorch
# 1.13 in F32, F64, F16, BF16 and I64, serialised exactly as the safetensors
# spec says (torch 1.13 predates the safetensors package), with metadata.
#   /usr/bin/python3 tools/make_safetensors_fixture.py
import json, struct, torch
tensors = {
    "w32": torch.arange(6, dtype=torch.float32).reshape(2, 3) / 4 - 0.5,
    "w64": torch.tensor([1.0 / 3, -2.5], dtype=torch.float64),
    "h16": torch.tensor([0.5, -1.25, 65504.0, 6e-8], dtype=torch.float16),
    "b16": torch.tensor([[1.5, -3.0], [0.0078125, 1e30]], dtype=torch.bfloat16),
    "idx": torch.tensor([3, -1, 1 << 40], dtype=torch.int64),
}
names = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16", torch.bfloat16: "BF16", torch.int64: "I64"}
header, blobs, off = {"__metadata__": {"format": "pt", "source": "tools/make_safetensors_fixture.py"}}, [], 0
for k in sorted(tensors, reverse=True):  # data order differs from name order
    t = tensors[k].contiguous()
    b = t.view(torch.int16).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
    header[k] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
    blobs.append(b); off += len(b)
h = json.dumps(header).encode()
h += b" " * ((8 - len(h) % 8) % 8)
with open("tests/fixtures/pytorch_mixed.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
for k, t in tensors.items():
    print(k, t.float().tolist() if t.dtype != torch.int64 else t.tolist())
