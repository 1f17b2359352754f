# A GPT-2 reference written from the published architecture (Radford et al.
# 2019; Hugging Face's modeling_gpt2 names and Conv1D layout), independent of
# Ember, in PyTorch 1.13: it makes a random-init checkpoint of any config in
# Hugging Face's layout (config.json + model.safetensors) and in llm.c's
# (header magic 20240326, version 3, float32, vocabulary padded to a multiple
# of 128 with zero rows), and the reference logits, loss and greedy tokens of
# a fixed batch, for tests/test_gpt2_checkpoint.cpp.
#   /usr/bin/python3 tools/gpt2_reference.py OUT_DIR [--layers 2 --heads 2 --width 32 --vocab 96 --ctx 16]
# writes OUT_DIR/config.json, model.safetensors (with the attn.bias and
# attn.masked_bias buffers older transformers versions saved), llmc.bin and
# reference.safetensors (idx, targets, logits and loss in float64 from the
# float32 weights, prompt and greedy tokens).
#
# GPT-2, with Conv1D(x) = x W + b and W stored (in, out):
#   x = wte[idx] + wpe[pos]; per block:
#   x += c_proj(attn(split_heads(c_attn(ln_1(x))))), causal, scores / sqrt(head size)
#   x += mlp.c_proj(gelu_new(mlp.c_fc(ln_2(x))))
#   logits = ln_f(x) wte^T; gelu_new(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
import argparse, json, math, os, struct
import numpy as np
import torch

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--layers", type=int, default=2); ap.add_argument("--heads", type=int, default=2)
ap.add_argument("--width", type=int, default=32); ap.add_argument("--vocab", type=int, default=96)
ap.add_argument("--ctx", type=int, default=16); ap.add_argument("--eps", type=float, default=1e-5)
ap.add_argument("--seed", type=int, default=1234)
a = ap.parse_args()
L, H, E, V, T = a.layers, a.heads, a.width, a.vocab, a.ctx
g = torch.Generator().manual_seed(a.seed)


def randn(*s, std=0.02):
    return (torch.randn(*s, generator=g) * std).float()


# Random weights of GPT-2's shapes, not its init (std 0.02 makes a tiny model
# repeat its last token for ever): every projection and embedding large
# enough that greedy decoding moves, and the LayerNorms and biases drawn too,
# so that a transposed or misplaced tensor shows in the logits.
sd = {"wte.weight": randn(V, E, std=0.1), "wpe.weight": randn(T, E, std=0.5)}
for i in range(L):
    p = f"h.{i}."
    sd.update({
        p + "ln_1.weight": 1 + randn(E, std=0.1), p + "ln_1.bias": randn(E, std=0.1),
        p + "attn.bias": torch.tril(torch.ones(T, T)).view(1, 1, T, T), p + "attn.masked_bias": torch.tensor(-1e4),
        p + "attn.c_attn.weight": randn(E, 3 * E, std=0.3), p + "attn.c_attn.bias": randn(3 * E),
        p + "attn.c_proj.weight": randn(E, E, std=0.3), p + "attn.c_proj.bias": randn(E),
        p + "ln_2.weight": 1 + randn(E, std=0.1), p + "ln_2.bias": randn(E, std=0.1),
        p + "mlp.c_fc.weight": randn(E, 4 * E, std=0.3), p + "mlp.c_fc.bias": randn(4 * E),
        p + "mlp.c_proj.weight": randn(4 * E, E, std=0.3), p + "mlp.c_proj.bias": randn(E)})
sd.update({"ln_f.weight": 1 + randn(E, std=0.1), "ln_f.bias": randn(E, std=0.1)})


def gelu_new(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(idx, w):
    B, t = idx.shape
    ln = lambda x, n: torch.nn.functional.layer_norm(x, (E,), w[n + ".weight"], w[n + ".bias"], a.eps)
    conv1d = lambda x, n: x @ w[n + ".weight"] + w[n + ".bias"]
    x = w["wte.weight"][idx] + w["wpe.weight"][:t]
    mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
    for i in range(L):
        p = f"h.{i}."
        q, k, v = conv1d(ln(x, p + "ln_1"), p + "attn.c_attn").split(E, dim=2)
        heads = lambda z: z.view(B, t, H, E // H).transpose(1, 2)
        s = heads(q) @ heads(k).transpose(-2, -1) / math.sqrt(E // H)
        y = torch.softmax(s.masked_fill(~mask, float("-inf")), -1) @ heads(v)
        x = x + conv1d(y.transpose(1, 2).reshape(B, t, E), p + "attn.c_proj")
        x = x + conv1d(gelu_new(conv1d(ln(x, p + "ln_2"), p + "mlp.c_fc")), p + "mlp.c_proj")
    return ln(x, "ln_f") @ w["wte.weight"].T


def write_safetensors(path, tensors, metadata=None):
    codes = {torch.float32: "F32", torch.float64: "F64", torch.int64: "I64"}
    header, blobs, off = ({"__metadata__": metadata} if metadata else {}), [], 0
    for k, t in tensors.items():
        b = t.contiguous().numpy().tobytes()
        header[k] = {"dtype": codes[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b); off += len(b)
    h = json.dumps(header).encode(); h += b" " * ((8 - len(h) % 8) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


os.makedirs(a.out, exist_ok=True)
config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V, "n_positions": T, "n_ctx": T,
          "n_embd": E, "n_layer": L, "n_head": H, "n_inner": None, "activation_function": "gelu_new",
          "layer_norm_epsilon": a.eps, "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1,
          "initializer_range": 0.02, "tie_word_embeddings": True}
with open(os.path.join(a.out, "config.json"), "w") as f:
    json.dump(config, f, indent=2)
write_safetensors(os.path.join(a.out, "model.safetensors"), sd, {"format": "pt"})

# llm.c: its weights are (out, in), nn.Linear's, so the Conv1D weights are transposed here.
Vp = (V + 127) // 128 * 128
wte = torch.zeros(Vp, E); wte[:V] = sd["wte.weight"]
stack = lambda n, tr=False: torch.stack([sd[f"h.{i}.{n}"].T if tr else sd[f"h.{i}.{n}"] for i in range(L)])
arrays = [wte, sd["wpe.weight"], stack("ln_1.weight"), stack("ln_1.bias"), stack("attn.c_attn.weight", True),
          stack("attn.c_attn.bias"), stack("attn.c_proj.weight", True), stack("attn.c_proj.bias"),
          stack("ln_2.weight"), stack("ln_2.bias"), stack("mlp.c_fc.weight", True), stack("mlp.c_fc.bias"),
          stack("mlp.c_proj.weight", True), stack("mlp.c_proj.bias"), sd["ln_f.weight"], sd["ln_f.bias"]]
header = np.zeros(256, np.int32); header[:8] = [20240326, 3, T, V, L, H, E, Vp]
with open(os.path.join(a.out, "llmc.bin"), "wb") as f:
    f.write(header.tobytes())
    for t in arrays:
        f.write(t.float().contiguous().numpy().tobytes())

# The batch, in float64 from the float32 weights.
w64 = {k: v.double() for k, v in sd.items()}
idx = torch.randint(0, V, (2, T), generator=g)
targets = torch.randint(0, V, (2, T), generator=g)
with torch.no_grad():
    logits = forward(idx, w64)
    loss = torch.nn.functional.cross_entropy(logits.view(-1, V), targets.view(-1))
    # Greedy decoding past the context: the last T tokens each step (nanoGPT's generate).
    prompt = idx[0, :4].tolist()
    seq = list(prompt)
    margin = float("inf")  # the closest call between the best and second-best token
    for _ in range(2 * T):
        top = forward(torch.tensor([seq[-T:]]), w64)[0, -1].topk(2).values
        margin = min(margin, float(top[0] - top[1]))
        seq.append(int(forward(torch.tensor([seq[-T:]]), w64)[0, -1].argmax()))
write_safetensors(os.path.join(a.out, "reference.safetensors"),
                  {"idx": idx, "targets": targets, "logits": logits, "loss": loss.view(1),
                   "prompt": torch.tensor(prompt), "greedy": torch.tensor(seq[len(prompt):])})
print(f"wrote {a.out}: loss {loss.item():.6f}, greedy {seq[len(prompt):]}, smallest top-2 margin {margin:.2e}")
