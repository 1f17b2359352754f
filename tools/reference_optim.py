# Reference parameters for tests/test_optim.cpp: 5 steps of each optimizer on
# loss = sum(c * p^2 + d * p^3) from p0, with PyTorch 1.13:
#   /usr/bin/python3 tools/reference_optim.py
import torch
torch.set_default_dtype(torch.float64)
p0 = [[0.5, -1.0, 2.0], [1.5, -0.3, 0.7]]
c = torch.tensor([[1.0, 2.0, 0.5], [0.3, 1.5, 2.5]])
d = torch.tensor([[0.1, -0.2, 0.05], [0.0, 0.3, -0.1]])
q0 = [0.2, -0.4]

def run(make):
    p = torch.tensor(p0, requires_grad=True)
    q = torch.tensor(q0, requires_grad=True)
    opt = make(p, q)
    for _ in range(5):
        opt.zero_grad()
        loss = (c * p ** 2 + d * p ** 3).sum() + (q ** 2).sum() * 3
        loss.backward()
        opt.step()
    return [round(v, 12) for v in p.detach().flatten().tolist() + q.detach().tolist()]

print("sgd_momentum", run(lambda p, q: torch.optim.SGD([p, q], lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01)))
print("sgd_nesterov", run(lambda p, q: torch.optim.SGD([p, q], lr=0.05, momentum=0.9, nesterov=True)))
print("adam", run(lambda p, q: torch.optim.Adam([p, q], lr=0.1, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.01)))
print("adamw_groups", run(lambda p, q: torch.optim.AdamW([{"params": [p]}, {"params": [q], "lr": 0.01, "weight_decay": 0.0}], lr=0.1, weight_decay=0.1)))
p = torch.tensor(p0, requires_grad=True)
((c * p ** 2).sum()).backward()
n = torch.nn.utils.clip_grad_norm_([p], 1.0)
print("clip_norm", round(n.item(), 12), [round(v, 12) for v in p.grad.flatten().tolist()])
