# Reference values for tests/test_half.cpp from PyTorch 1.13:
#   /usr/bin/python3 tools/reference_half.py
# torch.result_type for every pair of Ember's dtypes, each operand either a
# 1-dim tensor or a 0-dim one.
import torch

dts = [("kBool", torch.bool), ("kInt64", torch.int64), ("kBFloat16", torch.bfloat16),
       ("kFloat16", torch.float16), ("kFloat32", torch.float32), ("kFloat64", torch.float64)]
name = {t: n for n, t in dts}
for an, at in dts:
    for bn, bt in dts:
        row = []
        for a0, b0 in ((False, False), (False, True), (True, False), (True, True)):
            a = torch.ones(() if a0 else (2,), dtype=at)
            b = torch.ones(() if b0 else (2,), dtype=bt)
            row.append(name[torch.result_type(a, b)])
        print(f"    {{{an}, {bn}, {{{', '.join(row)}}}}},")
