# The seq2seq demo's recipe in PyTorch 1.13, to compare accuracy and time
# with build/bin/seq2seq on the same machine:
#   /usr/bin/python3 tools/seq2seq_torch.py [--epochs 6] [--threads 2]
# Same task (the 20 date formats of apps/seq2seq/dates.h, dates 1950-2049,
# 12,000 / 2,000 / 2,000 distinct strings), same model (embedding 32,
# bidirectional GRU encoder 2 x 32, additive attention 64, decoder GRU 64 on
# [embedding, context], linear to the vocabulary), same training (Adam 3e-3
# with per-step cosine decay, clipping at 1, batch 64 bucketed by source
# length within pools of 32 batches), greedy decoding. The data come from
# Python's random with the same seed, so they are drawn alike, not
# identical.
import argparse, datetime, json, math, os, random, sys, time
# PyTorch's best settings here (as tools/bench_compare.py): OpenBLAS on one
# thread (torch's own pool does the parallel work; two pools fight over the
# cores, 3-8x slower here) and glibc malloc keeping freed memory. Re-run
# this script with them when the caller did not set them.
if "OPENBLAS_NUM_THREADS" not in os.environ:
    os.environ.update(OPENBLAS_NUM_THREADS="1", MALLOC_MMAP_THRESHOLD_="1000000000",
                      MALLOC_TRIM_THRESHOLD_="1000000000")
    os.execv(sys.executable, [sys.executable] + sys.argv)
import torch
from torch import nn

MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]

def ordinal(d):
    sfx = "th" if 11 <= d % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(d % 10, "th")
    return f"{d}{sfx}"

def fmt(dt, f):
    M = MONTHS[dt.month - 1]; Mon = M[:3]; W = DAYS[dt.weekday()]; Wd = W[:3]
    d, m, Y, yy = dt.day, dt.month, str(dt.year), f"{dt.year % 100:02d}"
    return [f"{d} {M} {Y}", f"{d:02d} {M} {Y}", f"{M} {d}, {Y}", f"{M} {ordinal(d)} {Y}",
            f"{W}, {M} {ordinal(d)} {Y}", f"{Wd}, {d} {Mon} {Y}", f"{m:02d}/{d:02d}/{yy}", f"{m}/{d}/{Y}",
            f"{d:02d}.{m:02d}.{Y}", f"{d} {Mon.lower()} {yy}", f"{M.upper()} {d}, {Y}", f"{ordinal(d)} of {M}, {Y}",
            dt.isoformat(), f"{W} {d} {M} {Y}", f"{Mon} {d:02d} {Y}", f"{d}-{Mon}-{yy}", f"{Y}{m:02d}{d:02d}",
            f"{Y}/{m:02d}/{d:02d}", f"{Wd.lower()} {Mon.lower()} {d} {Y}", f"{Mon.upper()} {d:02d} {yy}"][f]

def splits(seed, sizes):
    rng = random.Random(seed)
    first = datetime.date(1950, 1, 1); span = (datetime.date(2049, 12, 31) - first).days + 1
    seen, out = set(), []
    for n in sizes:
        part = []
        while len(part) < n:
            dt = first + datetime.timedelta(days=rng.randrange(span))
            s = fmt(dt, rng.randrange(20))
            if s not in seen:
                seen.add(s); part.append((s, dt.isoformat()))
        out.append(part)
    return out

TGT = "0123456789-"
PAD, BOS, EOS = 0, 1, 2

class Model(nn.Module):
    def __init__(self, src_vocab, tgt_vocab, E=32, H=64):
        super().__init__()
        self.src_emb = nn.Embedding(src_vocab, E)
        self.enc = nn.GRU(E, H // 2, batch_first=True, bidirectional=True)
        self.tgt_emb = nn.Embedding(tgt_vocab, E)
        self.W_k = nn.Linear(H, H, bias=False); self.W_q = nn.Linear(H, H, bias=False)
        self.w_v = nn.Linear(H, 1, bias=False)
        self.dec = nn.GRU(E + H, H)
        self.dense = nn.Linear(H, tgt_vocab)

    def encode(self, src, lens):
        packed = nn.utils.rnn.pack_padded_sequence(self.src_emb(src), lens, batch_first=True, enforce_sorted=False)
        out, h = self.enc(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=src.shape[1])
        h = torch.cat([h[0], h[1]], -1).unsqueeze(0)  # (1, B, H)
        mask = torch.arange(src.shape[1])[None, :] >= lens[:, None]
        return out, self.W_k(out), mask, h

    def step(self, emb, state):
        out, keys, mask, h = state
        scores = self.w_v(torch.tanh(self.W_q(h[-1]).unsqueeze(1) + keys)).squeeze(-1)
        w = torch.softmax(scores.masked_fill(mask, -1e9), -1)
        ctx = torch.bmm(w.unsqueeze(1), out).squeeze(1)
        y, h = self.dec(torch.cat([emb, ctx], -1).unsqueeze(0), h)
        return y.squeeze(0), (out, keys, mask, h)

    def forward(self, src, lens, tgt_in):
        state = self.encode(src, lens)
        emb = self.tgt_emb(tgt_in)
        ys = []
        for t in range(tgt_in.shape[1]):
            y, state = self.step(emb[:, t], state)
            ys.append(y)
        return self.dense(torch.stack(ys, 1))

    @torch.no_grad()
    def greedy(self, src, lens, steps=11):
        state = self.encode(src, lens)
        prev = torch.full((src.shape[0],), BOS, dtype=torch.long)
        toks = []
        for _ in range(steps):
            y, state = self.step(self.tgt_emb(prev), state)
            prev = self.dense(y).argmax(-1)
            toks.append(prev)
        return torch.stack(toks, 1)

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=6); ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2); ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--train-size", type=int, default=12000); ap.add_argument("--test-size", type=int, default=2000)
    a = ap.parse_args()
    torch.set_num_threads(a.threads); torch.manual_seed(a.seed); torch.set_flush_denormal(True)
    train, val, test = splits(a.seed, [a.train_size, a.test_size, a.test_size])
    alphabet = sorted({c for s, _ in train + val + test for c in s})
    sid = {c: i + 1 for i, c in enumerate(alphabet)}
    L = max(len(s) for s, _ in train + val + test)

    def encode(data):
        src = torch.zeros(len(data), L, dtype=torch.long)
        for i, (s, _) in enumerate(data):
            src[i, :len(s)] = torch.tensor([sid[c] for c in s])
        lens = torch.tensor([len(s) for s, _ in data])
        tout = torch.tensor([[3 + TGT.index(c) for c in t] + [EOS] for _, t in data])
        tin = torch.cat([torch.full((len(data), 1), BOS), tout[:, :-1]], 1)
        return src, lens, tin, tout

    tr, va, te = encode(train), encode(val), encode(test)
    model = Model(len(alphabet) + 1, 3 + len(TGT))
    opt = torch.optim.Adam(model.parameters(), 3e-3)
    n = len(train); B = a.batch_size; nb = (n + B - 1) // B
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, nb * a.epochs)

    def batch(d, idx):
        src, lens, tin, tout = (x[idx] for x in d)
        return src[:, :int(lens.max())], lens, tin, tout

    def exact(d, data):
        model.eval(); right = 0
        order = torch.argsort(d[1], stable=True)
        for s in range(0, len(data), 500):
            idx = order[s:s + 500]
            src, lens, _, tout = batch(d, idx)
            right += int((model.greedy(src, lens) == tout).all(1).sum())
        model.train(); return right / len(data)

    train_s = 0.0
    for epoch in range(1, a.epochs + 1):
        t0 = time.perf_counter()
        perm = torch.randperm(n).tolist(); lens = tr[1].tolist()
        for p in range(0, n, 32 * B):
            perm[p:p + 32 * B] = sorted(perm[p:p + 32 * B], key=lambda i: lens[i])
        batches = [perm[s:s + B] for s in range(0, n, B)]
        random.Random(epoch).shuffle(batches)
        total = 0.0
        for idx in batches:
            src, ln, tin, tout = batch(tr, torch.tensor(idx))
            loss = nn.functional.cross_entropy(model(src, ln, tin).reshape(-1, 3 + len(TGT)), tout.reshape(-1))
            opt.zero_grad(); loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0); opt.step(); sched.step()
            total += loss.item()
        train_s += time.perf_counter() - t0
        print(f"epoch {epoch}  train loss {total / nb:.4f}  val exact match {exact(va, val):.4f}  trained {train_s:.1f}s",
              flush=True)
    print(json.dumps({"framework": "pytorch " + torch.__version__, "test_exact_match": exact(te, test),
                      "train_seconds": round(train_s, 1), "threads": a.threads}))

if __name__ == "__main__":
    main()
