# How far PyTorch 1.13's bfloat16 optimizer steps on the CPU lie from
# Ember's (float32 math, each stored value rounded once to nearest even;
# docs/PRECISION.md, "Training 16-bit parameters"). Each step starts both
# from torch's own bfloat16 state (p, and the moments or momentum buffer),
# so the differences are one step's, not accumulated:
#   /usr/bin/python3 tools/compare_bf16_optim_torch.py
# torch 1.13 steps a bfloat16 parameter with a chain of bfloat16 ops, each
# rounding its result, so it differs by a unit in the last place or more
# (many more where a moment's terms nearly cancel and torch rounded each).
import math

import torch

torch.manual_seed(0)
n, steps = 4096, 3


def ulps(a, b):
    # Distance in representable bfloat16 values (sign-magnitude order).
    def key(t):
        bits = t.view(torch.int16).int() & 0xFFFF
        return torch.where(bits >= 0x8000, -(bits & 0x7FFF), bits)
    return (key(a) - key(b)).abs()


def report(name, t, pairs):
    line = [f"{name} step {t}:"]
    for what, a, b in pairs:
        d = ulps(a, b)
        line.append(f"{what}: {100 * (d == 0).float().mean().item():.1f}% equal, "
                    f"{100 * (d <= 1).float().mean().item():.1f}% within 1 ulp")
    print("  ".join(line))


def f32(t):
    return t.float()


def adamw():
    lr, b1, b2, eps, wd = 0.01, 0.9, 0.99, 1e-6, 0.1
    p = torch.randn(n).bfloat16().requires_grad_()
    opt = torch.optim.AdamW([p], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    for t in range(1, steps + 1):
        g = (torch.randn(n) * 0.5).bfloat16()
        st = opt.state.get(p, {})
        m0 = f32(st["exp_avg"]) if st else torch.zeros(n)
        v0 = f32(st["exp_avg_sq"]) if st else torch.zeros(n)
        p0 = f32(p.detach())
        p.grad = g
        opt.step()
        # Ember's kernel, term by term, in float32 (scalars rounded to float32).
        fb1, fb2 = torch.tensor(b1, dtype=torch.float32), torch.tensor(b2, dtype=torch.float32)
        param = p0 * torch.tensor(1.0 - lr * wd, dtype=torch.float32)
        gr = f32(g)
        mi = fb1 * m0 + (1 - fb1) * gr
        vi = fb2 * v0 + (1 - fb2) * gr * gr
        step_size = torch.tensor(lr / (1 - b1 ** t), dtype=torch.float32)
        bc2_sqrt = torch.tensor(math.sqrt(1 - b2 ** t), dtype=torch.float32)
        pn = param - step_size * mi / (vi.sqrt() / bc2_sqrt + torch.tensor(eps, dtype=torch.float32))
        st = opt.state[p]
        report("AdamW", t, [("p", p.detach(), pn.bfloat16()), ("exp_avg", st["exp_avg"], mi.bfloat16()),
                            ("exp_avg_sq", st["exp_avg_sq"], vi.bfloat16())])


def sgd():
    lr, mom, damp, wd = 0.05, 0.9, 0.1, 0.01
    p = torch.randn(n).bfloat16().requires_grad_()
    opt = torch.optim.SGD([p], lr=lr, momentum=mom, dampening=damp, weight_decay=wd)
    for t in range(1, steps + 1):
        g = (torch.randn(n) * 0.5).bfloat16()
        st = opt.state.get(p, {})
        buf0 = st["momentum_buffer"].clone() if st else None
        p0 = f32(p.detach())
        p.grad = g
        opt.step()
        d = f32(g) + torch.tensor(wd, dtype=torch.float32) * p0
        b = d if buf0 is None else torch.tensor(mom, dtype=torch.float32) * f32(buf0) + torch.tensor(
            1 - damp, dtype=torch.float32) * d
        pn = p0 - torch.tensor(lr, dtype=torch.float32) * b
        report("SGD", t, [("p", p.detach(), pn.bfloat16()), ("momentum_buffer", opt.state[p]["momentum_buffer"],
                                                              b.bfloat16())])


print("torch", torch.__version__)
adamw()
sgd()
