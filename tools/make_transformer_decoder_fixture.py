# Writes the PyTorch 1.13 fixtures of tests/test_transformer_decoder.cpp:
#   tests/fixtures/decoder_layer_{post_relu,pre_gelu}.safetensors  (nn.TransformerDecoderLayer)
#   tests/fixtures/transformer_{post_relu,pre_gelu}.safetensors    (nn.Transformer)
# Each holds the module's state dict under PyTorch's own names (the Ember test
# loads it by name with nn::load), the inputs, the output, the weight w of the
# loss sum(output * w), and the gradients of the inputs ("grad.input.*") and
# of every parameter ("grad.<name>"). Masks are not stored: the test builds
# the same ones (written out below). Modules in eval mode (no dropout).
#   /usr/bin/python3 tools/make_transformer_decoder_fixture.py
import torch
from safetensors_writer import write_f32
torch.manual_seed(0)
torch.set_default_dtype(torch.float32)
N, S, T, E, H, FF = 2, 5, 4, 8, 2, 16
# true = masked out: entry 1's last two source positions, entry 0's last target position
src_kpm = torch.tensor([[False] * 5, [False, False, False, True, True]])
tgt_kpm = torch.tensor([[False, False, False, True], [False] * 4])
causal = torch.nn.Transformer.generate_square_subsequent_mask(T)

def save(path, module, inputs, y):
    w = torch.randn(y.shape)
    (y * w).sum().backward()
    out = {n: t.detach() for n, t in module.state_dict().items()}
    out.update({"input." + k: v.detach() for k, v in inputs.items()})
    out.update({"grad.input." + k: v.grad for k, v in inputs.items()})
    out.update({"output": y.detach(), "output_weight": w})
    out.update({"grad." + n: p.grad for n, p in module.named_parameters()})
    print(path, len(out), "tensors", write_f32(path, out), "bytes")

def shaped(batch_first, n, l):
    return (n, l, E) if batch_first else (l, n, E)

# post-norm / relu / sequence first / float causal tgt_mask;
# pre-norm / gelu / batch first / tgt_is_causal (the Ember test passes the flag; here the same mask)
for name, norm_first, act, bf in [("post_relu", False, "relu", False), ("pre_gelu", True, "gelu", True)]:
    layer = torch.nn.TransformerDecoderLayer(E, H, FF, 0.1, act, 1e-5, batch_first=bf, norm_first=norm_first).eval()
    with torch.no_grad():  # visible biases and norm parameters, so they matter
        for p in layer.parameters():
            if p.dim() == 1:
                p.add_(torch.randn(p.shape) * 0.3)
    tgt = torch.randn(shaped(bf, N, T), requires_grad=True)
    memory = torch.randn(shaped(bf, N, S), requires_grad=True)
    y = layer(tgt, memory, tgt_mask=causal, tgt_key_padding_mask=tgt_kpm, memory_key_padding_mask=src_kpm)
    save(f"tests/fixtures/decoder_layer_{name}.safetensors", layer, {"tgt": tgt, "memory": memory}, y)

    model = torch.nn.Transformer(E, H, 2, 2, FF, 0.1, act, layer_norm_eps=1e-5, batch_first=bf,
                                 norm_first=norm_first).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(torch.randn(p.shape) * 0.3)
    src = torch.randn(shaped(bf, N, S), requires_grad=True)
    tgt = torch.randn(shaped(bf, N, T), requires_grad=True)
    y = model(src, tgt, tgt_mask=causal, src_key_padding_mask=src_kpm, tgt_key_padding_mask=tgt_kpm,
              memory_key_padding_mask=src_kpm)
    save(f"tests/fixtures/transformer_{name}.safetensors", model, {"src": src, "tgt": tgt}, y)
