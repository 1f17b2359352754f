# Writes the PyTorch-exported models of tests/onnx/test_onnx_import_torch.cpp
# and their reference values: a small CNN (conv, batch norm, pooling, GELU,
# log-softmax), a Transformer encoder layer and a two-layer LSTM, exported by
# torch.onnx.export (PyTorch 1.13, opset 17) with a symbolic batch (and
# sequence) axis, and each run by PyTorch at two batch sizes. The inputs and
# outputs go to <name>.safetensors (keys x_b<batch>, y_b<batch>, ...), and
# the parameters to <name>_params.safetensors under their state-dict names.
# Run with /usr/bin/python3 from this folder; Ember never needs Python.
import json
import struct

import torch
import torch.nn as nn


def save_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous()
        dtype = {torch.float32: "F32", torch.int64: "I64"}[t.dtype]
        data = t.numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 8, 3, stride=2)
        self.fc = nn.Linear(8 * 3 * 3, 5)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv1(x)))
        x = torch.max_pool2d(x, 2)
        x = nn.functional.gelu(self.conv2(x))
        return torch.log_softmax(self.fc(x.flatten(1)), -1)


def main():
    torch.manual_seed(0)
    cnn = CNN().eval()
    with torch.no_grad():  # running statistics that are not the defaults
        cnn.bn.running_mean.uniform_(-0.5, 0.5)
        cnn.bn.running_var.uniform_(0.5, 2.0)
    enc = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True).eval()
    lstm = nn.LSTM(4, 6, num_layers=2, batch_first=True).eval()
    cases = [
        ("cnn", cnn, lambda b: (torch.randn(b, 1, 14, 14),), ["x"], ["y"], {"x": {0: "batch"}, "y": {0: "batch"}}),
        ("encoder", enc, lambda b: (torch.randn(b, 5, 16),), ["x"], ["y"], {"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}}),
        ("lstm", lstm, lambda b: (torch.randn(b, 7, 4),), ["x"], ["y", "h", "c"], {"x": {0: "batch"}, "y": {0: "batch"}}),
    ]
    for name, model, make, ins, outs, axes in cases:
        torch.onnx.export(model, make(2), name + ".onnx", input_names=ins, output_names=outs, dynamic_axes=axes,
                          opset_version=17)
        ref = {}
        for b in (2, 5):
            x = make(b)
            with torch.no_grad():
                y = model(*x)
            ys = y if isinstance(y, tuple) else (y,)
            flat = []
            for v in ys:
                flat.extend(v if isinstance(v, tuple) else (v,))
            for n, v in zip(ins, x):
                ref[f"{n}_b{b}"] = v
            for n, v in zip(outs, flat):
                ref[f"{n}_b{b}"] = v
        save_safetensors(name + ".safetensors", ref)
        save_safetensors(name + "_params.safetensors", {k: v for k, v in model.state_dict().items()
                                                          if v.dtype in (torch.float32, torch.int64)})


if __name__ == "__main__":
    main()
