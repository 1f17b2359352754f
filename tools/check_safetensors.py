# Reads a safetensors file with the rules of the reference implementation
# (header a JSON object, padded, offsets sorted, contiguous and covering the
# whole data buffer with no holes) into PyTorch tensors, and prints them.
# Used to check files written by Ember:
#   /usr/bin/python3 tools/check_safetensors.py FILE
import json, struct, sys, torch
DT = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64, "BOOL": torch.bool,
      "F16": torch.float16, "BF16": torch.bfloat16}
raw = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
header = json.loads(raw[8:8 + n])
data = raw[8 + n:]
meta = header.pop("__metadata__", {})
entries = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"])
pos = 0
for name, e in entries:
    b, end = e["data_offsets"]
    assert b == pos, f"{name}: hole or overlap at {pos}"
    pos = end
assert pos == len(data), "the data buffer is not entirely indexed"
for name, e in header.items():
    b, end = e["data_offsets"]
    t = torch.frombuffer(bytearray(data[b:end]), dtype=DT[e["dtype"]]) if end > b else torch.empty(0, dtype=DT[e["dtype"]])
    print(name, e["dtype"], list(t.reshape(e["shape"]).shape), t.reshape(e["shape"]).flatten()[:4].tolist())
print("metadata", meta, "ok")
