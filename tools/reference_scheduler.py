# Learning-rate sequences for tests/test_scheduler.cpp from PyTorch 1.13:
#   /usr/bin/python3 tools/reference_scheduler.py
import warnings
import torch
warnings.filterwarnings("ignore")

def seq(make, n, base=0.1, metric=None):
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=base)
    s = make(opt)
    out = []
    for i in range(n):
        out.append(round(opt.param_groups[0]["lr"], 14))
        opt.step()
        if metric is None:
            s.step()
        else:
            s.step(metric[i])
    return out

S = torch.optim.lr_scheduler
print("step", seq(lambda o: S.StepLR(o, 3, 0.5), 10))
print("multistep", seq(lambda o: S.MultiStepLR(o, [2, 5, 6], 0.1), 8))
print("exponential", seq(lambda o: S.ExponentialLR(o, 0.9), 6))
print("cosine", seq(lambda o: S.CosineAnnealingLR(o, 5, 0.01), 12))
print("linear", seq(lambda o: S.LinearLR(o, 0.25, 1.0, 4), 7))
print("onecycle", seq(lambda o: S.OneCycleLR(o, 1.0, total_steps=10, pct_start=0.25, cycle_momentum=False), 10))
print("onecycle_linear", seq(lambda o: S.OneCycleLR(o, 1.0, total_steps=10, anneal_strategy="linear", cycle_momentum=False), 10))
print("warmup_cosine", seq(lambda o: S.SequentialLR(o, [S.LinearLR(o, 0.1, 1.0, 3), S.CosineAnnealingLR(o, 7, 0.001)], milestones=[3]), 10))
m = [1.0, 0.9, 0.95, 0.95, 0.96, 0.97, 0.5, 0.6, 0.6, 0.6, 0.6, 0.6]
print("plateau", seq(lambda o: S.ReduceLROnPlateau(o, factor=0.5, patience=2, cooldown=1, min_lr=0.02), len(m), metric=m))
