# Makes tests/fixtures/onnx_train/: two small models exported from PyTorch to
# ONNX, a fixed data set, and the loss of every step of fine-tuning them in
# PyTorch, which tests/onnx/test_onnx_train.cpp repeats in Ember on the
# imported models.
#
#   unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
#   /usr/bin/python3 tools/onnx_torch_models.py [OUT_DIR]
#
# Needs PyTorch (1.13) and the onnx module (Debian's python3-onnx) for the
# checks below; with node and onnxruntime-node (scripts/setup.sh) it also
# runs each exported model through tools/onnx_run.js and compares it with
# PyTorch. Ember never needs Python: the files are committed.
#
# The models:
#   cnn:     Conv2d(1,4,3,pad 1)-ReLU-MaxPool(2)-Conv2d(4,8,3)-ReLU-flatten-Linear(128,10), on 1x12x12 images.
#   encoder: Linear(6,16) input projection, two TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32,
#            dropout=0, batch_first) with mean pooling over the 8 positions and a Linear(16,4) head.
#
# Export keeps the graph the function PyTorch trains: opset 17,
# do_constant_folding=False, so every weight stays an initializer under its
# state-dict name (folding would replace a transposed weight by a new,
# anonymously named constant), and nothing depends on the mode: no BatchNorm,
# dropout 0. TransformerEncoderLayer has a fused "fast path" in eval mode
# without gradients (torch._transformer_encoder_layer_fwd); PyTorch trains in
# train mode, which never takes it, and the export is checked to have traced
# the ordinary ops (MatMul, Softmax, LayerNormalization), not a fused one.
#
# Fine-tuning: 20 steps of torch.optim.AdamW(lr=1e-3) with PyTorch's other
# defaults, on batches of 8 taken in order from 32 samples (4 batches, 5
# passes), mean cross-entropy. Done once in float32 (the losses Ember's
# float32 run is held to) and once in float64 from the same weights (the
# losses Ember's float64 run is held to, far more tightly). The file holds two
# numbers only as float32 that PyTorch's float64 run holds as doubles: the
# attention scale sqrt(head_dim) (a float Constant the queries are divided
# by) and LayerNorm's epsilon (a float attribute). sqrt(8) rounded to float32
# is 1.7e-8 larger in relative terms, which moves the encoder's float64
# losses by up to 3e-10, so the float64 run uses the float32 values, and
# computes what the file says (float32_constants below).
import contextlib
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import types

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    import onnx
    import onnx.numpy_helper
except ImportError:
    sys.exit("onnx_torch_models.py: needs the onnx module (apt-get install python3-onnx)")

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "tests", "fixtures", "onnx_train")
STEPS, BATCH, SAMPLES = 20, 8, 32
ADAMW = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, amsgrad=False)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(4, 8, 3)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = F.relu(self.conv2(x))
        return self.fc(torch.flatten(x, 1))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(6, 16)
        layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)
        # enable_nested_tensor=False: the other fast path, which no padding mask here would take anyway.
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(16, 4)
        # The model stands for a pretrained one, each parameter with values of
        # its own: a fresh TransformerEncoder's layers are copies of one another
        # and its biases and norms constants, and the exporter would merge equal
        # initializers into one (under one of the names). So the second layer
        # is initialised anew and the constant ones get noise.
        second = self.encoder.layers[1]
        second.self_attn._reset_parameters()
        for m in (second.self_attn.out_proj, second.linear1, second.linear2):
            m.reset_parameters()
        with torch.no_grad():
            for k, p in self.named_parameters():
                if k.endswith("_bias") or "norm" in k or "out_proj.bias" in k:
                    p.add_(0.1 * torch.randn_like(p))

    def forward(self, x):
        h = self.encoder(self.proj(x))
        return self.head(h.mean(dim=1))


def write_safetensors(path, tensors):
    """name -> numpy array as a safetensors file (F32, F64 or I64), as the spec lays it out."""
    kinds = {np.dtype(np.float32): "F32", np.dtype(np.float64): "F64", np.dtype(np.int64): "I64"}
    header, blobs, off = {}, [], 0
    for k, a in tensors.items():
        a = np.ascontiguousarray(a)
        b = a.astype(a.dtype.newbyteorder("<")).tobytes()
        header[k] = {"dtype": kinds[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    kinds = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "BOOL": np.bool_}
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    header = json.loads(b[8 : 8 + n])
    out = {}
    for k, e in header.items():
        if k == "__metadata__":
            continue
        lo, hi = e["data_offsets"]
        out[k] = np.frombuffer(b[8 + n + lo : 8 + n + hi], kinds[e["dtype"]]).reshape(e["shape"])
    return out


def make_data():
    g = torch.Generator().manual_seed(1234)
    return {
        "cnn.x": torch.randn(SAMPLES, 1, 12, 12, generator=g),
        "cnn.y": torch.randint(0, 10, (SAMPLES,), generator=g),
        "encoder.x": torch.randn(SAMPLES, 8, 6, generator=g),
        "encoder.y": torch.randint(0, 4, (SAMPLES,), generator=g),
    }


def export(model, example, path):
    model.eval()
    torch.onnx.export(model, (example,), path, opset_version=17, do_constant_folding=False,
                      input_names=["input"], output_names=["logits"], dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
    model.train()
    m = onnx.load(path)
    onnx.checker.check_model(m, full_check=True)
    # Every parameter an initializer under its state-dict name with its value, and nothing else stored.
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}
    params = {k: v.detach().numpy() for k, v in model.named_parameters()}
    if set(inits) != set(params):
        sys.exit(f"{path}: initializers {sorted(set(inits) ^ set(params))} differ from the parameters")
    for k, v in params.items():
        assert np.array_equal(inits[k], v), k
    ops = sorted({n.op_type for n in m.graph.node})
    fused = [o for o in ops if "transformer" in o.lower() or "attention" in o.lower()]
    if fused:
        sys.exit(f"{path}: the export traced fused ops {fused}")
    return m, ops


def check_with_onnxruntime(path, model, x):
    """The exported graph against PyTorch on x, through tools/onnx_run.js (skipped without node)."""
    with tempfile.TemporaryDirectory() as d:
        write_safetensors(os.path.join(d, "in.safetensors"), {"input": x.numpy()})
        r = subprocess.run(["node", os.path.join(HERE, "onnx_run.js"), path, os.path.join(d, "in.safetensors"),
                            os.path.join(d, "out.safetensors")], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"  onnxruntime check skipped: {r.stderr.strip()}")
            return None
        got = read_safetensors(os.path.join(d, "out.safetensors"))["logits"]
    with torch.no_grad():
        want = model(x).numpy()
    err = float(np.abs(got - want).max())
    print(f"  onnxruntime vs PyTorch on {tuple(x.shape)}: max |diff| {err:.3g}")
    assert err < 1e-5, err
    return err


@contextlib.contextmanager
def float32_constants(model, onnx_model):
    """Within it, model's float64 forward uses the float32 constants of the exported graph."""
    # F.multi_head_attention_forward divides q by math.sqrt(head_dim) (torch 1.13's
    # functional.py); the file holds that as a float32 Constant, checked here.
    scales = [onnx.numpy_helper.to_array(a.t) for n in onnx_model.graph.node if n.op_type == "Constant"
              for a in n.attribute if a.t.data_type == onnx.TensorProto.FLOAT]
    f32_sqrt = lambda v: float(np.float32(math.sqrt(v)))
    mhas = [m for m in model.modules() if isinstance(m, nn.MultiheadAttention)]
    assert bool(scales) == bool(mhas) and all(float(s) == f32_sqrt(m.head_dim) for s in scales for m in mhas), scales
    norms = [m for m in model.modules() if isinstance(m, nn.LayerNorm)]
    eps = [m.eps for m in norms]
    shim = types.SimpleNamespace(**{k: getattr(math, k) for k in dir(math) if not k.startswith("_")})
    shim.sqrt = f32_sqrt
    try:
        F.math = shim
        for m in norms:
            m.eps = float(np.float32(m.eps))
        yield
    finally:
        F.math = math
        for m, e in zip(norms, eps):
            m.eps = e


def fine_tune(model, x, y, dtype):
    model = model.to(dtype)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), **ADAMW)
    losses = []
    for step in range(STEPS):
        i = (step * BATCH) % SAMPLES
        loss = F.cross_entropy(model(x[i : i + BATCH].to(dtype)), y[i : i + BATCH])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main():
    torch.set_num_threads(1)  # one summation order, run to run
    os.makedirs(OUT, exist_ok=True)
    data = make_data()
    write_safetensors(os.path.join(OUT, "data.safetensors"), {k: v.numpy() for k, v in data.items()})
    report = {
        "steps": STEPS,
        "batch": BATCH,
        "samples": SAMPLES,
        "batches": "x[i:i+batch], y[i:i+batch] for i = (step * batch) % samples",
        "loss": "cross_entropy, mean over the batch",
        "optimizer": "AdamW",
        "settings": dict(ADAMW, betas=list(ADAMW["betas"])),
        "torch": torch.__version__,
    }
    for name, cls, seed in (("cnn", CNN, 0), ("encoder", Encoder, 1)):
        torch.manual_seed(seed)
        model = cls()
        x, y = data[name + ".x"], data[name + ".y"]
        path = os.path.join(OUT, name + ".onnx")
        onnx_model, ops = export(model, x[:2], path)
        print(f"{name}: {os.path.getsize(path)} bytes, {sum(p.numel() for p in model.parameters())} parameters, ops {ops}")
        check_with_onnxruntime(path, model, x[:BATCH])
        start = {k: v.clone() for k, v in model.state_dict().items()}
        f32 = fine_tune(model, x, y, torch.float32)
        model.load_state_dict(start)
        with float32_constants(model, onnx_model):
            f64 = fine_tune(model, x, y, torch.float64)
        print(f"  losses float32 {f32[0]:.6f} -> {f32[-1]:.6f}, float64 - float32 at most {max(abs(a - b) for a, b in zip(f32, f64)):.3g}")
        report[name] = {"input": name + ".x", "target": name + ".y", "ops": ops, "losses_float32": f32, "losses_float64": f64}
    with open(os.path.join(OUT, "losses.json"), "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
