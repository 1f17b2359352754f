# Writes tests/fixtures/vit_small.safetensors: the weights of a small Vision
# Transformer built in PyTorch 1.13 with Ember's structure and parameter
# names, plus its input, output and parameter gradients, so the Ember test
# loads the weights through nn::load and compares everything.
#   /usr/bin/python3 tools/make_vit_fixture.py
import torch
from safetensors_writer import write_f32
torch.manual_seed(0)
torch.set_default_dtype(torch.float32)

class ViT(torch.nn.Module):
    def __init__(self, img=(8, 12), patch=(4, 3), ch=3, classes=5, e=16, depth=2, heads=2, mlp=32):
        super().__init__()
        n = (img[0] // patch[0]) * (img[1] // patch[1])
        self.cls_token = torch.nn.Parameter(torch.randn(1, 1, e) * 0.02)
        self.pos_embed = torch.nn.Parameter(torch.randn(1, n + 1, e) * 0.02)
        self.patch_embed = torch.nn.Module()
        self.patch_embed.proj = torch.nn.Conv2d(ch, e, patch, patch)
        self.blocks = torch.nn.ModuleList([torch.nn.TransformerEncoderLayer(
            e, heads, mlp, 0.0, "gelu", 1e-6, batch_first=True, norm_first=True) for _ in range(depth)])
        self.norm = torch.nn.LayerNorm(e, eps=1e-6)
        self.head = torch.nn.Linear(e, classes)

    def forward(self, x):
        x = self.patch_embed.proj(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], 1) + self.pos_embed
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x)[:, 0])

m = ViT()
with torch.no_grad():  # visible cls/pos values, so they matter in the test
    m.cls_token.normal_(0, 0.5)
    m.pos_embed.normal_(0, 0.5)
x = torch.randn(2, 3, 8, 12, requires_grad=True)
y = m(x)
w = torch.randn(y.shape)
(y * w).sum().backward()
out = {n: p.detach() for n, p in m.named_parameters()}
out.update({"input": x.detach(), "output": y.detach(), "output_weight": w, "input.grad": x.grad})
out.update({"grad." + n: p.grad for n, p in m.named_parameters()})
off = write_f32("tests/fixtures/vit_small.safetensors", out)
print([n for n, _ in m.named_parameters()][:6], len(out), off)
