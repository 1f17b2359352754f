# Float32 -> bfloat16 / float16 rounding cases converted by PyTorch 1.13, for
# tests/test_half.cpp:
#   /usr/bin/python3 tools/make_half_fixture.py > tests/fixtures/half_rounding.txt
# Each line: float32 bits, torch's bfloat16 bits, torch's float16 bits (hex).
# The values sit where rounding decides: bfloat16 halfway cases of both
# parities and their neighbours, float16 midpoints between neighbours
# (normal and subnormal), the overflow thresholds (float16 65504/65520,
# bfloat16's largest finite), float32 subnormals, zeros, Inf and NaNs.
# Each value is converted one at a time (torch's scalar path, c10's
# round_to_nearest_even / fp16_ieee_from_fp32_value); lines where the
# whole-tensor conversion disagrees are reported on stderr.
import random
import sys

import numpy as np
import torch

rng = random.Random(19)
bits = set()


def f32(b):
    return np.array([b], dtype=np.uint32).view(np.float32)[0]


def f32_bits(x):
    return int(np.array([x], dtype=np.float32).view(np.uint32)[0])


# bfloat16: the dropped low half at 0x7FFF / 0x8000 / 0x8001 (halfway is
# 0x8000), for kept parts of either parity, over all exponents.
for _ in range(400):
    hi = rng.randrange(0, 0x10000)
    if (hi & 0x7F80) == 0x7F80:
        continue
    for lo in (0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF):
        bits.add((hi << 16) | lo)

# float16: midpoints between neighbouring finite halves and one float32 ulp
# either side, normal and subnormal.
for _ in range(400):
    h = rng.randrange(0, 0x7BFF)
    if rng.random() < 0.3:
        h = rng.randrange(0, 0x0400)  # subnormal
    a = float(np.array([h], dtype=np.uint16).view(np.float16)[0])
    b = float(np.array([h + 1], dtype=np.uint16).view(np.float16)[0])
    mid = f32_bits((a + b) / 2)  # exact in float32
    sign = 0x80000000 if rng.random() < 0.5 else 0
    for d in (-1, 0, 1):
        bits.add(sign | (mid + d))

special = [
    0x00000000, 0x80000000,                          # zeros
    0x00000001, 0x80000001, 0x00007FFF, 0x00008000,  # float32 subnormals
    0x00008001, 0x00018000, 0x007FFFFF, 0x807FFFFF, 0x00800000,
    0x33000000, 0x33000001, 0x32FFFFFF, 0x33800000,  # float16: 2^-25, 2^-24
    0x33C00000, 0x387FC000, 0x387FE000, 0x387FFFFF, 0x38800000,  # around 2^-14
    0x477FE000, 0x477FEFFF, 0x477FF000, 0x477FF001, 0x47800000,  # 65504 .. 65536
    0xC77FF000, 0xC77FEFFF,
    0x7F7F7FFF, 0x7F7F8000, 0x7F7FFFFF, 0xFF7F8000,  # bfloat16's largest finite
    0x7F800000, 0xFF800000,                          # Inf
    0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF812345, 0x7FFFFFFF, 0x7FA00000,  # NaNs
]
bits.update(special)
bits = sorted(bits)

x = torch.from_numpy(np.array(bits, dtype=np.uint32).view(np.float32).copy())
whole_bf = x.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
whole_h = x.to(torch.float16).view(torch.int16).numpy().view(np.uint16)
out = []
for i, b in enumerate(bits):
    s = torch.tensor(f32(b), dtype=torch.float32)
    bf = int(s.to(torch.bfloat16).view(torch.int16).item()) & 0xFFFF
    h = int(s.to(torch.float16).view(torch.int16).item()) & 0xFFFF
    if bf != whole_bf[i] or h != whole_h[i]:
        print(f"whole-tensor conversion differs at {b:08x}: bf16 {bf:04x} vs {whole_bf[i]:04x}, "
              f"f16 {h:04x} vs {whole_h[i]:04x}", file=sys.stderr)
    out.append(f"{b:08x} {bf:04x} {h:04x}")
print(f"# {len(out)} float32 values: bits, torch {torch.__version__} bfloat16 bits, float16 bits")
print("\n".join(out))
