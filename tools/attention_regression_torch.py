# The attention_regression `transformer` recipe in PyTorch 1.13, with the same
# data construction as apps/attention_regression, for comparing test MSE and
# time per epoch:  /usr/bin/python3 tools/attention_regression_torch.py [epochs] [threads]
import math, sys, time, torch
epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 200
torch.set_num_threads(int(sys.argv[2]) if len(sys.argv) > 2 else 2)
torch.manual_seed(0)
T = 50
f = lambda x: 2 * torch.sin(x) + x ** 0.8
def seqs(n, lo, hi):
    return torch.sort(torch.rand(n, T) * (hi - lo) + lo, dim=1).values
xtr = torch.cat([seqs(250, 0, 5), seqs(125, 1.5, 3.5), seqs(125, 3, 5)])
ytr = f(xtr) + 0.01 * torch.randn_like(xtr)
xva = torch.linspace(0, 5, T).repeat(100, 1)
yva = f(xva) + 0.01 * torch.randn_like(xva)
xte = torch.linspace(0, 5, T)[None]

class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(1, 64)
        self.pos = torch.nn.Parameter(torch.randn(1, T, 64) * 0.02)
        self.drop = torch.nn.Dropout(0.1)
        self.block = torch.nn.TransformerEncoderLayer(64, 4, 256, 0.1, "gelu", batch_first=True, norm_first=True)
        self.out = torch.nn.Linear(64, 1)
        for n, p in self.named_parameters():
            if n == "pos": continue
            if p.dim() >= 2: torch.nn.init.xavier_uniform_(p)
            else: torch.nn.init.zeros_(p)
    def forward(self, x):
        return self.out(self.block(self.drop(self.embed(x[..., None]) + self.pos))).squeeze(-1)

m = M()
opt = torch.optim.Adam(m.parameters(), lr=1e-3, weight_decay=1e-6)
sch = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=10, min_lr=1e-6)
best, best_state, since, t0 = math.inf, None, 0, time.time()
for ep in range(1, epochs + 1):
    m.train()
    perm = torch.randperm(len(xtr))
    for s in range(0, len(xtr), 32):
        i = perm[s:s + 32]
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(m(xtr[i]), ytr[i])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
    m.eval()
    with torch.no_grad():
        val = torch.nn.functional.mse_loss(m(xva), yva).item()
    sch.step(val)
    if val < best:
        best, best_state, since, best_ep = val, {k: v.clone() for k, v in m.state_dict().items()}, 0, ep
    else:
        since += 1
        if since >= 20:
            break
    if ep % 10 == 0 or ep == 1:
        print(f"epoch {ep:3d} train {loss.item():.6f} val {val:.6f} lr {opt.param_groups[0]['lr']:.2e} {time.time()-t0:.1f}s")
sec = time.time() - t0
m.load_state_dict(best_state); m.eval()
with torch.no_grad():
    mse = torch.nn.functional.mse_loss(m(xte), f(xte)).item()
print(f"pytorch transformer: test_mse {mse:.6f} ({ep} epochs, best {best_ep}, {sec:.2f}s, {sec/ep:.3f}s/epoch)")
