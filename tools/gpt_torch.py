# The GPT of nn/gpt.h in PyTorch 1.13 (nanoGPT's model.py and train.py, with
# Ember's parameter names), for two uses:
#   /usr/bin/python3 tools/gpt_torch.py --fixture
#       writes tests/fixtures/gpt_small.safetensors: a small model's weights,
#       input ids, targets, logits, loss and every parameter's gradient, which
#       tests/test_gpt.cpp loads into Ember's GPT and compares;
#   env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 tools/gpt_torch.py \
#       --data /work/shared/data/tinyshakespeare.txt [--threads N]
#       trains nanoGPT's CPU configuration (4 layers, 4 heads, width 128,
#       context 64, batch 12, 2000 iterations, AdamW 1e-3 -> 1e-4 cosine after
#       100 warm-up steps, beta2 0.99, weight decay 0.1 on 2-D weights, clip 1,
#       no dropout) with nanoGPT's get_batch, and prints train seconds and the
#       loss over the whole validation split (the same windows as build/bin/gpt).
import argparse, json, math, struct, sys, time
import torch
import torch.nn as nn
import torch.nn.functional as F


class Attn(nn.Module):
    def __init__(s, c):
        super().__init__()
        s.c_attn = nn.Linear(c["n_embd"], 3 * c["n_embd"], bias=c["bias"])
        s.c_proj = nn.Linear(c["n_embd"], c["n_embd"], bias=c["bias"])
        s.h, s.p = c["n_head"], c["dropout"]
        s.drop_w, s.drop_r = nn.Dropout(s.p), nn.Dropout(s.p)
        T = c["block_size"]
        s.register_buffer("mask", torch.tril(torch.ones(T, T)).view(1, 1, T, T), persistent=False)

    def forward(s, x):  # nanoGPT's attention without flash (torch 1.13 has no scaled_dot_product_attention)
        B, T, C = x.shape
        q, k, v = s.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, s.h, C // s.h).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(s.mask[:, :, :T, :T] == 0, float("-inf"))
        att = s.drop_w(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return s.drop_r(s.c_proj(y))


class MLP(nn.Module):
    def __init__(s, c):
        super().__init__()
        s.c_fc = nn.Linear(c["n_embd"], 4 * c["n_embd"], bias=c["bias"])
        s.c_proj = nn.Linear(4 * c["n_embd"], c["n_embd"], bias=c["bias"])
        s.dropout = nn.Dropout(c["dropout"])

    def forward(s, x):
        return s.dropout(s.c_proj(F.gelu(s.c_fc(x))))


class Block(nn.Module):
    def __init__(s, c):
        super().__init__()
        s.ln_1, s.attn, s.ln_2, s.mlp = nn.LayerNorm(c["n_embd"]), Attn(c), nn.LayerNorm(c["n_embd"]), MLP(c)

    def forward(s, x):
        x = x + s.attn(s.ln_1(x))
        return x + s.mlp(s.ln_2(x))


class GPT(nn.Module):
    def __init__(s, c):
        super().__init__()
        s.c = c
        s.wte = nn.Embedding(c["vocab_size"], c["n_embd"])
        s.wpe = nn.Embedding(c["block_size"], c["n_embd"])
        s.drop = nn.Dropout(c["dropout"])
        s.h = nn.ModuleList([Block(c) for _ in range(c["n_layer"])])
        s.ln_f = nn.LayerNorm(c["n_embd"])
        for n, p in s.named_parameters():  # nanoGPT's init
            if p.dim() == 1:
                if n.endswith("bias"):
                    nn.init.zeros_(p)
            else:
                std = 0.02 / math.sqrt(2 * c["n_layer"]) if n.endswith("c_proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(s, idx, targets=None):
        T = idx.size(1)
        x = s.drop(s.wte(idx) + s.wpe(torch.arange(T)))
        for b in s.h:
            x = b(x)
        logits = F.linear(s.ln_f(x), s.wte.weight)  # the head tied to wte
        if targets is None:
            return logits
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for k, t in tensors.items():
        b = t.detach().contiguous().float().numpy().tobytes()
        header[k] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def fixture():
    torch.manual_seed(0)
    c = dict(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=16, dropout=0.0, bias=True)
    m = GPT(c)
    with torch.no_grad():  # LayerNorm affine and biases visible, so they matter in the test
        for n, p in m.named_parameters():
            if p.dim() == 1:
                p.add_(torch.randn(p.shape) * 0.1)
    idx = torch.randint(0, 11, (2, 7))
    tgt = torch.randint(0, 11, (2, 7))
    logits, loss = m(idx, tgt)
    loss.backward()
    out = {n: p for n, p in m.named_parameters()}
    out.update({"idx": idx.float(), "targets": tgt.float(), "logits": logits, "loss": loss.reshape(1)})
    out.update({"grad." + n: p.grad for n, p in m.named_parameters()})
    write_safetensors("tests/fixtures/gpt_small.safetensors", out)
    print(len(out), "tensors; loss", loss.item())


def train(a):
    torch.manual_seed(a.seed)
    if a.threads:
        torch.set_num_threads(a.threads)
    text = open(a.data, "rb").read().decode("utf-8")
    chars = sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(chars)}
    data = torch.tensor([stoi[ch] for ch in text], dtype=torch.long)
    n = int(0.9 * len(data))
    train_data, val_data = data[:n], data[n:]
    c = dict(vocab_size=len(chars), block_size=64, n_layer=4, n_head=4, n_embd=128, dropout=0.0, bias=True)
    B, T, iters, lr, min_lr, warm = 12, 64, a.iters, 1e-3, 1e-4, 100
    m = GPT(c)
    decay = [p for p in m.parameters() if p.dim() >= 2]
    nodecay = [p for p in m.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.99))

    def get_lr(it):  # nanoGPT's schedule, lr_decay_iters = max_iters
        if it < warm:
            return lr * (it + 1) / (warm + 1)
        ratio = (it - warm) / (iters - warm)
        return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)

    def get_batch(d):
        ix = torch.randint(len(d) - T, (B,))
        return torch.stack([d[i:i + T] for i in ix]), torch.stack([d[i + 1:i + 1 + T] for i in ix])

    t0, c0 = time.time(), time.process_time()
    for it in range(iters):
        for g in opt.param_groups:
            g["lr"] = get_lr(it)
        x, y = get_batch(train_data)
        _, loss = m(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        if it % 500 == 0:
            print(f"iter {it} loss {loss.item():.4f}", file=sys.stderr)
    train_s, train_cpu = time.time() - t0, time.process_time() - c0
    # The whole validation split in consecutive windows of T (the last one shorter).
    m.eval()
    tot, cnt = 0.0, 0
    if a.no_val:
        val_data = val_data[:2]
    with torch.no_grad():
        for s in range(0, len(val_data) - 1, T):
            w = min(T, len(val_data) - 1 - s)
            x = val_data[s:s + w].view(1, w)
            y = val_data[s + 1:s + 1 + w].view(1, w)
            _, l = m(x, y)
            tot += l.item() * w
            cnt += w
    print(json.dumps({"train_seconds": train_s, "train_cpu_seconds": train_cpu, "final_val_loss": tot / cnt, "iters": iters,
                      "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--fixture", action="store_true")
    p.add_argument("--data")
    p.add_argument("--iters", type=int, default=2000)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--no-val", action="store_true", help="skip the whole-split validation pass (timing runs)")
    a = p.parse_args()
    fixture() if a.fixture else train(a)
