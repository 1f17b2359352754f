# GPT-2 training in PyTorch 1.13 at llm.c's CPU setting, written from the
# published architecture (Radford et al. 2019) independently of Ember and of
# llm.c's code: it reads llm.c's checkpoint file (header magic 20240326,
# version 3, float32 weights stored (out, in), vocabulary padded to Vp) and a
# token file in llm.c's format (magic 20240520, uint16 tokens), then trains
# for --steps steps on the file's batches in order (batch k: tokens
# [k B T, k B T + B T + 1), inputs and targets one apart; wrapping around)
# with AdamW as train_gpt2.c runs it: lr 1e-4, betas 0.9 / 0.999, eps 1e-8, no
# weight decay, no gradient clipping. It prints and writes each step's loss
# and time. tools/gpt2_compare.py runs it beside llm.c and Ember.
#   /usr/bin/python3 tools/gpt2_torch.py CHECKPOINT TOKENS [--batch 4 --seq 64 --steps 20 --threads 1 --json FILE]
#
# The padded vocabulary: wte holds Vp rows (the rows past V are zero); the
# logits are computed over all Vp rows, as llm.c's matmul does, and the loss
# is the cross-entropy over the first V only (llm.c's softmax stops at V), so
# the padded rows get no gradient and stay zero.
import argparse, json, math, os, resource, time
import numpy as np
import torch
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("checkpoint"); ap.add_argument("tokens")
ap.add_argument("--batch", type=int, default=4); ap.add_argument("--seq", type=int, default=64)
ap.add_argument("--steps", type=int, default=20); ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--json")
a = ap.parse_args()
torch.set_num_threads(a.threads)


def read_checkpoint(path):
    header = np.fromfile(path, dtype=np.int32, count=256)
    if header.size < 256 or header[0] != 20240326 or header[1] != 3:
        raise SystemExit(f"gpt2_torch: '{path}' is not an llm.c checkpoint (magic 20240326, version 3)")
    T, V, L, H, C, Vp = (int(x) for x in header[2:8])
    data = np.fromfile(path, dtype=np.float32, offset=256 * 4)  # one array; the tensors below are views of it
    shapes = [("wte", (Vp, C)), ("wpe", (T, C)), ("ln_1.weight", (L, C)), ("ln_1.bias", (L, C)),
              ("attn.c_attn.weight", (L, 3 * C, C)), ("attn.c_attn.bias", (L, 3 * C)),
              ("attn.c_proj.weight", (L, C, C)), ("attn.c_proj.bias", (L, C)), ("ln_2.weight", (L, C)),
              ("ln_2.bias", (L, C)), ("mlp.c_fc.weight", (L, 4 * C, C)), ("mlp.c_fc.bias", (L, 4 * C)),
              ("mlp.c_proj.weight", (L, C, 4 * C)), ("mlp.c_proj.bias", (L, C)), ("ln_f.weight", (C,)),
              ("ln_f.bias", (C,))]
    need = sum(math.prod(s) for _, s in shapes)
    if data.size != need:
        raise SystemExit(f"gpt2_torch: '{path}' holds {data.size} floats after its header, expected {need}")
    params, off = {}, 0
    for name, shape in shapes:
        n = math.prod(shape)
        t = torch.from_numpy(data[off:off + n]).view(shape)
        off += n
        if name.startswith(("attn.", "mlp.", "ln_1", "ln_2")):  # one tensor per layer, HF's names
            for i in range(L):
                params[f"h.{i}.{name}"] = torch.nn.Parameter(t[i])
        else:
            params[{"wte": "wte.weight", "wpe": "wpe.weight"}.get(name, name)] = torch.nn.Parameter(t)
    return dict(T=T, V=V, L=L, H=H, C=C, Vp=Vp), params


def read_tokens(path):
    header = np.fromfile(path, dtype=np.int32, count=256)
    if header.size < 256 or header[0] != 20240520 or header[1] != 1:
        raise SystemExit(f"gpt2_torch: '{path}' is not an llm.c token file (magic 20240520, version 1)")
    toks = np.fromfile(path, dtype=np.uint16, offset=256 * 4)
    if toks.size != header[2]:
        raise SystemExit(f"gpt2_torch: '{path}': header says {header[2]} tokens, the file holds {toks.size}")
    return torch.from_numpy(toks.astype(np.int64))


cfg, w = read_checkpoint(a.checkpoint)
tokens = read_tokens(a.tokens)
B, T, C, H, V = a.batch, a.seq, cfg["C"], cfg["H"], cfg["V"]
assert T <= cfg["T"] and tokens.numel() >= B * T + 1
nb = (tokens.numel() - 1) // (B * T)
mask = torch.tril(torch.ones(T, T, dtype=torch.bool))


def forward_loss(idx, targets):
    x = w["wte.weight"][idx] + w["wpe.weight"][:T]
    for i in range(cfg["L"]):
        p = f"h.{i}."
        h = F.layer_norm(x, (C,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], 1e-5)
        q, k, v = F.linear(h, w[p + "attn.c_attn.weight"], w[p + "attn.c_attn.bias"]).split(C, dim=2)
        heads = lambda z: z.view(B, T, H, C // H).transpose(1, 2)
        s = heads(q) @ heads(k).transpose(-2, -1) * (1.0 / math.sqrt(C // H))
        y = torch.softmax(s.masked_fill(~mask, float("-inf")), -1) @ heads(v)
        x = x + F.linear(y.transpose(1, 2).reshape(B, T, C), w[p + "attn.c_proj.weight"], w[p + "attn.c_proj.bias"])
        h = F.layer_norm(x, (C,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], 1e-5)
        h = F.gelu(F.linear(h, w[p + "mlp.c_fc.weight"], w[p + "mlp.c_fc.bias"]), approximate="tanh")
        x = x + F.linear(h, w[p + "mlp.c_proj.weight"], w[p + "mlp.c_proj.bias"])
    logits = F.layer_norm(x, (C,), w["ln_f.weight"], w["ln_f.bias"], 1e-5) @ w["wte.weight"].T  # (B, T, Vp)
    return F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))


opt = torch.optim.AdamW(list(w.values()), lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
losses, step_ms = [], []
for step in range(a.steps):
    k = step % nb
    buf = tokens[k * B * T:k * B * T + B * T + 1]
    idx, targets = buf[:-1].view(B, T), buf[1:].view(B, T)
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = forward_loss(idx, targets)
    loss.backward()
    opt.step()
    ms = (time.perf_counter() - t0) * 1e3
    losses.append(loss.item()); step_ms.append(ms)
    print(f"step {step}: train loss {losses[-1]:.6f} (took {ms:.3f} ms)", flush=True)
peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
if a.json:
    with open(a.json, "w") as f:
        json.dump({"framework": f"pytorch {torch.__version__}", "threads": a.threads, "batch": B, "seq": T,
                   "losses": losses, "step_ms": step_ms, "peak_rss_mb": peak_mb}, f, indent=1)
