# The training-step workloads of build/bin/bench in PyTorch 1.13, with the same
# models, batch sizes and optimizers, for side-by-side ratios (make bench).
#   /usr/bin/python3 tools/bench_torch.py --threads N --steps S --warmup W --json FILE [--workload W]
#       [--precision fp32,bf16,fp16]
# 16-bit steps run the forward and loss under torch.autocast("cpu", dtype) and
# backward outside it (PyTorch's recipe), and their workload names end in
# " bf16" / " fp16", as bench's. PyTorch 1.13's CPU autocast supports bfloat16
# only: asked for float16 it warns and disables itself, so its fp16 rows are
# float32 steps.
# Prints the same records as bench --json: workload, batch, median_ms, min_ms,
# max_ms, cpu_ms (process CPU time per step), gflops (model matmul FLOPs
# counted analytically), peak_rss_mb, rss_growth_mb.
import argparse, json, math, resource, time
import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=1)
p.add_argument("--steps", type=int, default=20)
p.add_argument("--warmup", type=int, default=20)
p.add_argument("--workload", default="all")
p.add_argument("--json", default="")
p.add_argument("--precision", default="fp32,bf16")
a = p.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(0)
# PyTorch's best settings here: denormals flushed, and (set by the caller,
# tools/bench_compare.py) glibc malloc keeping freed memory, without which
# PyTorch pays mmap/munmap page faults every step (2-3x slower at batch 32).
torch.set_flush_denormal(True)


class TokenTransformer(nn.Module):  # apps/attention_regression/models.h
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(1, 64)
        self.pos = nn.Parameter(torch.randn(1, 50, 64))
        self.block = nn.TransformerEncoderLayer(64, 4, 256, 0.1, "gelu", batch_first=True, norm_first=True)
        self.out = nn.Linear(64, 1)

    def forward(self, x):
        return self.out(self.block(self.embed(x[..., None]) + self.pos)).squeeze(-1)


class ViT(nn.Module):  # nn::VisionTransformer with its default options
    def __init__(self, dim=64, depth=4, heads=4, mlp=128, classes=10):
        super().__init__()
        self.proj = nn.Conv2d(1, dim, 7, 7)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, 17, dim) * 0.02)
        self.blocks = nn.ModuleList(
            [nn.TransformerEncoderLayer(dim, heads, mlp, 0.1, "gelu", batch_first=True, norm_first=True) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        h = self.proj(x).flatten(2).transpose(1, 2)
        h = torch.cat([self.cls.expand(h.shape[0], -1, -1), h], 1) + self.pos
        for b in self.blocks:
            h = b(h)
        return self.head(self.norm(h)[:, 0])


def linear_flops(tokens, i, o):
    return 2 * tokens * i * o


def encoder_flops(n, L, d, heads, ff):  # forward matmul FLOPs of one pre-norm layer
    t = n * L
    return linear_flops(t, d, 3 * d) + linear_flops(t, d, d) + linear_flops(t, d, ff) + linear_flops(t, ff, d) + 2 * 2 * n * L * L * d


def status_mb(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) / 1024
    return -1


rss_at_reset = [0.0]


def reset_peak_rss():  # VmHWM back to the current RSS, as bench does per workload
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    rss_at_reset[0] = status_mb("VmRSS:")


def peak_rss_mb():
    hwm = status_mb("VmHWM:")
    return hwm if hwm >= 0 else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def time_steps(body):
    """Median, min and max wall ms per step, and the process CPU ms per step
    (all threads), as bench reports them."""
    reset_peak_rss()
    for _ in range(a.warmup):
        body()
    ms = []
    cpu0 = time.process_time()
    for _ in range(a.steps):
        t0 = time.perf_counter()
        body()
        ms.append((time.perf_counter() - t0) * 1e3)
    cpu = (time.process_time() - cpu0) * 1e3 / a.steps
    ms.sort()
    return ms[len(ms) // 2], ms[0], ms[-1], cpu


records = []
precisions = a.precision.split(",")


def autocast(prec):
    if prec == "fp32":
        return torch.autocast("cpu", enabled=False)
    return torch.autocast("cpu", dtype=torch.bfloat16 if prec == "bf16" else torch.float16)


def suffix(prec):
    return "" if prec == "fp32" else " " + prec


def record(name, batch, t, gflop):
    med, lo, hi, cpu = t
    r = dict(workload=name, batch=batch, median_ms=med, min_ms=lo, max_ms=hi, cpu_ms=cpu, gflops=gflop / (med * 1e-3),
             peak_rss_mb=peak_rss_mb(), rss_growth_mb=peak_rss_mb() - rss_at_reset[0], threads=a.threads)
    records.append(r)
    print(f"{name:34s} {batch:6d} {med:9.3f} {lo:9.3f} {hi:9.3f} {cpu:9.3f} {r['gflops']:9.1f}")


if a.workload in ("all", "attention_regression"):
    for batch, prec in ((b, pr) for b in (32, 256) for pr in precisions):
        m = TokenTransformer()
        opt = torch.optim.Adam(m.parameters(), lr=1e-3, weight_decay=1e-6)
        xs = [torch.rand(batch, 50) * 5 for _ in range(8)]  # 8 batches in turn, as in bench
        it = [0]

        def step():
            x = xs[it[0] % 8]
            it[0] += 1
            y = 2 * torch.sin(x) + x ** 0.8
            opt.zero_grad()
            with autocast(prec):
                loss = F.mse_loss(m(x), y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opt.step()

        fl = 3 * (encoder_flops(batch, 50, 64, 4, 256) + linear_flops(batch * 50, 1, 64) + linear_flops(batch * 50, 64, 1))
        record("attention_regression train step" + suffix(prec), batch, time_steps(step), fl * 1e-9)

if a.workload in ("all", "vit"):
    for prec in precisions:
        batch = 128
        m = ViT()
        decay = [p for n, p in m.named_parameters() if p.dim() >= 2 and n not in ("cls", "pos")]
        no_decay = [p for n, p in m.named_parameters() if not (p.dim() >= 2 and n not in ("cls", "pos"))]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}])
        xs = [(torch.randn(batch, 1, 28, 28), torch.randint(0, 10, (batch,))) for _ in range(8)]
        it = [0]

        def step():
            x, t = xs[it[0] % 8]
            it[0] += 1
            opt.zero_grad()
            with autocast(prec):
                loss = F.cross_entropy(m(x), t, label_smoothing=0.1)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opt.step()

        fl = 3 * (4 * encoder_flops(batch, 17, 64, 4, 128) + linear_flops(batch * 16, 49, 64) + linear_flops(batch, 64, 10))
        record("vit train step" + suffix(prec), batch, time_steps(step), fl * 1e-9)

if a.workload in ("all", "conv"):
    # conv2d forward+backward at the CNN teacher's shapes, then its training
    # step (nn::ResNet's defaults, apps/bench's conv workload).
    batch = 128
    for cin, cout, hw, stride in ((1, 32, 28, 1), (32, 32, 28, 1), (32, 64, 28, 2), (64, 64, 14, 1), (64, 128, 14, 2),
                                  (128, 128, 7, 1)):
        x = torch.randn(batch, cin, hw, hw, requires_grad=True)
        w = (torch.randn(cout, cin, 3, 3) * 0.1).requires_grad_()
        b = torch.zeros(cout, requires_grad=True)
        def step():
            F.conv2d(x, w, b, stride, 1).sum().backward()
        ho = (hw + 2 - 3) // stride + 1
        record(f"conv2d fwd+bwd {cin}->{cout} {hw}x{hw} s{stride}", batch, time_steps(step),
               3 * 2.0 * batch * cout * ho * ho * cin * 9 * 1e-9)

    class BasicBlock(nn.Module):  # nn::BasicBlock (torchvision's)
        def __init__(self, cin, c, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, c, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(c)
            self.conv2 = nn.Conv2d(c, c, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(c)
            self.downsample = None
            if stride != 1 or cin != c:
                self.downsample = nn.Sequential(nn.Conv2d(cin, c, 1, stride, bias=False), nn.BatchNorm2d(c))
        def forward(self, x):
            h = F.relu(self.bn1(self.conv1(x)))
            h = self.bn2(self.conv2(h))
            return F.relu(h + (self.downsample(x) if self.downsample is not None else x))

    class ResNet(nn.Module):  # nn::ResNet with its default options
        def __init__(self, widths=(32, 64, 128)):
            super().__init__()
            self.conv1 = nn.Conv2d(1, widths[0], 3, 1, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(widths[0])
            cin, layers = widths[0], []
            for i, c in enumerate(widths):
                layers.append(nn.Sequential(BasicBlock(cin, c, 2 if i > 0 else 1)))
                cin = c
            self.layers = nn.ModuleList(layers)
            self.fc = nn.Linear(cin, 10)
        def forward(self, x):
            h = F.relu(self.bn1(self.conv1(x)))
            for l in self.layers:
                h = l(h)
            return self.fc(F.adaptive_avg_pool2d(h, 1).flatten(1))

    m = ResNet()
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4, nesterov=True)
    xs = [(torch.randn(batch, 1, 28, 28), torch.randint(0, 10, (batch,))) for _ in range(4)]
    it = [0]
    def step():
        x, t = xs[it[0] % 4]
        it[0] += 1
        opt.zero_grad()
        F.cross_entropy(m(x), t).backward()
        opt.step()
    # 3x the forward FLOPs of the convs (the same count bench takes from its matmul counter)
    fl, hw, cin = 3 * 2.0 * batch * 28 * 28 * 1 * 32 * 9, 28, 32
    for i, c in enumerate((32, 64, 128)):
        s = 2 if i > 0 else 1
        ho = hw // s
        fl += 3 * 2.0 * batch * ho * ho * (cin * c * 9 + c * c * 9 + (cin * c if s != 1 or cin != c else 0))
        hw, cin = ho, c
    record("resnet teacher train step", batch, time_steps(step), fl * 1e-9)

if a.json:
    with open(a.json, "w") as f:
        json.dump(dict(threads=a.threads, records=records), f, indent=2)
