# write_f32(path, tensors): a name -> torch tensor dict as a float32
# safetensors file, serialised as the spec says (torch 1.13 predates the
# safetensors package); used by the fixture scripts in tools/.
import json, struct


def write_f32(path, tensors):
    header, blobs, off = {}, [], 0
    for k, t in tensors.items():
        b = t.float().contiguous().numpy().tobytes()
        header[k] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b); off += len(b)
    h = json.dumps(header).encode(); h += b" " * ((8 - len(h) % 8) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    return off
