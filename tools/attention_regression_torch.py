# The attention_regression `transformer` recipe in PyTorch 1.13, as in the
# reference notes (seeds 002, "ImprovedTransformer"), for comparing test MSE and
# time per epoch with Ember:
#   /usr/bin/python3 tools/attention_regression_torch.py [epochs] [threads] [seed] [fp32|bf16]
# bf16: forward and loss in torch.autocast("cpu", dtype=torch.bfloat16), float32
# master weights (Ember's --precision bf16), training and evaluation alike.
# Data: 250 sequences of 50 unsorted x ~ U[0,5), 125 over [1.5,3.5), 125 over
# [3,5); y = f(x) + 0.01 noise. Validation: linspace(0,5,50) x100 + 0.01 noise.
import math, sys, time, torch
import torch.nn.functional as F
epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 200
torch.set_num_threads(int(sys.argv[2]) if len(sys.argv) > 2 else 2)
torch.manual_seed(int(sys.argv[3]) if len(sys.argv) > 3 else 42)
precision = sys.argv[4] if len(sys.argv) > 4 else "fp32"
if precision not in ("fp32", "bf16"):
    sys.exit(f"attention_regression_torch.py: precision must be fp32 or bf16, got '{precision}'")
region = lambda: torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")
T, D, H = 50, 64, 4
f = lambda x: 2 * torch.sin(x) + x ** 0.8
xtr = torch.cat([torch.rand(250, T) * 5, torch.rand(125, T) * 2 + 1.5, torch.rand(125, T) * 2 + 3])
ytr = f(xtr) + 0.01 * torch.randn_like(xtr)
xva = torch.linspace(0, 5, T).repeat(100, 1)
yva = f(xva) + 0.01 * torch.randn_like(xva)
xte = torch.linspace(0, 5, T)[None]

class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        L = torch.nn.Linear
        self.pos = torch.nn.Embedding(T, D)          # N(0, 1), as nn.Embedding
        self.embed = L(1, D)
        self.q, self.k, self.v, self.o = L(D, D), L(D, D), L(D, D), L(D, D)
        self.ff1, self.ff2 = L(D, 4 * D), L(4 * D, D)
        self.n1, self.n2 = torch.nn.LayerNorm(D), torch.nn.LayerNorm(D)
        self.out = L(D, 1)
        self.drop = torch.nn.Dropout(0.1)
        for m in self.modules():
            if isinstance(m, L):
                torch.nn.init.xavier_uniform_(m.weight); torch.nn.init.zeros_(m.bias)
    def forward(self, x):
        B = x.shape[0]
        h = self.embed(x[..., None]) + self.pos.weight
        r = h; h = self.n1(h)
        split = lambda t: t.view(B, T, H, D // H).transpose(1, 2)
        q, k, v = split(self.q(h)), split(self.k(h)), split(self.v(h))
        a = self.drop(F.softmax(q @ k.transpose(-1, -2) / math.sqrt(D // H), -1))
        h = r + self.o((a @ v).transpose(1, 2).reshape(B, T, D))
        r = h
        h = r + self.drop(self.ff2(self.drop(F.gelu(self.ff1(self.n2(h))))))
        return self.out(h).squeeze(-1)

m = M()
opt = torch.optim.Adam(m.parameters(), lr=1e-3, weight_decay=1e-6)
sch = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=10, min_lr=1e-6)
best, best_state, since, t0 = math.inf, None, 0, time.time()
for ep in range(1, epochs + 1):
    m.train()
    perm = torch.randperm(len(xtr))
    tl, nb = 0.0, 0
    for s in range(0, len(xtr), 32):
        i = perm[s:s + 32]
        opt.zero_grad()
        with region():
            loss = F.mse_loss(m(xtr[i]), ytr[i])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        tl += loss.item(); nb += 1
    m.eval()
    with torch.no_grad(), region():
        val = F.mse_loss(m(xva), yva).item()
    sch.step(val)
    if val < best:
        best, best_state, since, best_ep = val, {k: v.clone() for k, v in m.state_dict().items()}, 0, ep
    else:
        since += 1
        if since >= 20:
            break
    if ep % 20 == 0 or ep == 1:
        print(f"epoch {ep:3d} train {tl/nb:.6f} val {val:.6f} lr {opt.param_groups[0]['lr']:.2e} {time.time()-t0:.1f}s")
sec = time.time() - t0
m.load_state_dict(best_state); m.eval()
with torch.no_grad(), region():
    mse = F.mse_loss(m(xte), f(xte)).item()
print(f"pytorch transformer {precision}: test_mse {mse:.6f} ({ep} epochs, best {best_ep}, {sec:.2f}s, {sec/ep:.3f}s/epoch)")
