# GPT-2 124M training on a GPU, side by side in llm.c's CUDA trainer
# (train_gpt2.cu: bf16 activations, float32 master weights, cuBLASLt and its
# fused kernels) and Ember (a bf16 autocast region over float32 weights), from
# the same random-init weights on the same tokens: each step's loss, the
# relative difference of the last one, and each trainer's median step time.
# llm.c is an anchor to measure against (its source is in
# ../shared/anchors/llm.c, MIT); nothing of it is part of Ember.
#   python3 tools/gpt2_compare_cuda.py --bench BIN --llmc TRAIN_GPT2CU --make-inputs MAKE_INPUTS_PY
#                                      [--text FILE] [--steps 50] [--batch 16] [--seq 1024] [--work DIR] [--json FILE]
#
# The weights: llm.c's make_inputs.py writes GPT-2's initialisation in llm.c's
# float32 format (version 3); every weight is rounded to bf16 (to nearest,
# ties to even) and written twice, as float32 for Ember (version 3) and as
# bf16 for train_gpt2.cu (version 5, the only one its bf16 build loads), so
# both start from the same numbers. The tokens: tools/llmc_files.py (one
# token per byte of the text; Ember reads the batches in the order llm.c's
# shuffling loader visits them). The recipe is train_gpt2.cu's at -l 3e-4
# -c 0 (AdamW, betas 0.9 / 0.95, eps 1e-8, no weight decay, a constant
# rate, the gradients' norm clipped at 1), Ember's --gpt2-recipe llmc-cuda.
# Exits 1 when the last step's losses differ by more than 1%.
import argparse, json, os, re, statistics, subprocess, sys, time

import numpy as np

from llmc_files import batch_files

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOL = 0.01

p = argparse.ArgumentParser()
p.add_argument("--bench", required=True, help="Ember's bench, built with CUDA")
p.add_argument("--llmc", required=True, help="llm.c's train_gpt2cu (its default bf16 build)")
p.add_argument("--make-inputs", required=True, help="llm.c's make_inputs.py (../shared/anchors/llm.c)")
p.add_argument("--text", default=os.path.normpath(os.path.join(REPO, "..", "shared", "data", "tinyshakespeare.txt")))
p.add_argument("--steps", type=int, default=50)
p.add_argument("--batch", type=int, default=16)
p.add_argument("--seq", type=int, default=1024)
p.add_argument("--work", default="out/gpt2_compare_cuda")
p.add_argument("--json", help="default WORK/compare.json")
a = p.parse_args()
B, T, N = a.batch, a.seq, a.steps
work = os.path.abspath(a.work)
os.makedirs(work, exist_ok=True)
out_json = a.json or os.path.join(work, "compare.json")


def log(*x):
    print(*x, flush=True)


# The weights, rounded to bf16 once, in both formats.
subprocess.run([sys.executable, a.make_inputs, a.text, work, "--ctx", "1024"], check=True, stdout=subprocess.DEVNULL)
raw = np.fromfile(os.path.join(work, "gpt2_124M.bin"), np.uint8)
header = raw[:1024].view(np.int32).copy()
if header[0] != 20240326 or header[1] != 3:
    sys.exit(f"gpt2_compare_cuda: make_inputs.py wrote header {header[:2]}, expected magic 20240326 version 3")
bits = raw[1024:].view(np.uint32)
bf16 = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest, ties to even
del raw, bits
ember_ckpt = os.path.join(work, "gpt2_124M_rounded.bin")
with open(ember_ckpt, "wb") as f:
    f.write(header.tobytes())
    f.write((bf16.astype(np.uint32) << 16).tobytes())
llmc_ckpt = os.path.join(work, "gpt2_124M_bf16.bin")
header[1] = 5
with open(llmc_ckpt, "wb") as f:
    f.write(header.tobytes())
    f.write(bf16.tobytes())
del bf16
os.remove(os.path.join(work, "gpt2_124M.bin"))

train = os.path.join(work, "train.bin")
val = os.path.join(work, "dev/data/tinyshakespeare/tiny_shakespeare_val.bin")
in_order = os.path.join(work, "tokens_in_llmc_order.bin")
order = batch_files(a.text, N, B, T, train, in_order)
if order is None:
    sys.exit(f"gpt2_compare_cuda: {a.text} has too few lines for {N} batches of {B} x {T}")


def run(name, cmd):
    log(f"\n== {name}: {' '.join(cmd)}")
    t0 = time.time()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = proc.stdout.splitlines()
    for x in lines:
        if x.startswith("step") or "error" in x.lower():
            log("  " + x)
    if proc.returncode != 0:
        sys.exit(f"gpt2_compare_cuda: {name} exited with {proc.returncode}:\n" + "\n".join(lines[-20:]))
    return lines, time.time() - t0


# llm.c: -e the bf16 checkpoint; no weight decay, no warm-up, a constant rate
# (-q 1), one validation pass only at step 0 (-v), no sampling or HellaSwag.
lines, llmc_s = run("llm.c", [a.llmc, "-e", llmc_ckpt, "-i", train, "-j", val, "-b", str(B), "-t", str(T),
                              "-x", str(N), "-l", "3e-4", "-c", "0.0", "-u", "0", "-q", "1.0", "-v", "100000",
                              "-s", "0", "-h", "0"])
# "step    1/50 | loss 10.993 (+nanz)| norm 9.1 (+nanz)| lr 3.00e-04 | 46.10 ms | 40.1% bf16 MFU | 355407 tok/s"
STEP = re.compile(r"step\s+(\d+)/\d+ \| loss ([-+0-9.eE]+|nan|inf).*?\| ([0-9.]+) ms")
llmc_steps = [(int(m.group(1)), float(m.group(2)), float(m.group(3))) for m in map(STEP.match, lines) if m]
if [s for s, _, _ in llmc_steps] != list(range(1, N + 1)):
    sys.exit(f"gpt2_compare_cuda: llm.c printed {len(llmc_steps)} step lines, expected {N}:\n" + "\n".join(lines[-20:]))
llmc_losses = [x for _, x, _ in llmc_steps]
llmc_ms = [x for _, _, x in llmc_steps]

ember_json = os.path.join(work, "ember.json")
_, ember_s = run("Ember bf16", [a.bench, "--device", "cuda", "--workload", "gpt2", "--gpt2-checkpoint", ember_ckpt,
                                "--gpt2-tokens", in_order, "--gpt2-recipe", "llmc-cuda", "--gpt2-batch", str(B),
                                "--gpt2-seq", str(T), "--steps", str(N), "--precision", "bf16", "--json", ember_json])
rec = json.load(open(ember_json))["records"][0]
ember_losses, ember_ms = rec["losses"], rec["step_ms"]

log(f"\nGPT-2 124M, batch {B}, context {T}, bf16, AdamW lr 3e-4 betas 0.9/0.95 (train_gpt2.cu's recipe), {N} steps "
    f"from the same bf16-rounded weights on the same tokens")
log(f"{'step':>4}{'llm.c':>12}{'Ember':>12}{'relative':>12}")
rel = [(e - c) / c for e, c in zip(ember_losses, llmc_losses)]
for s in range(N):
    if s < 5 or s % 5 == 4 or s == N - 1:
        log(f"{s:4d}{llmc_losses[s]:12.6f}{ember_losses[s]:12.6f}{rel[s]:12.2e}")
# The median over the steps after the first 10 (both warm up: cuBLAS's heuristics, the caching allocator).
med_llmc, med_ember = statistics.median(llmc_ms[10:] or llmc_ms), statistics.median(ember_ms[10:] or ember_ms)
ok = abs(rel[-1]) <= TOL
log(f"last step's loss: llm.c {llmc_losses[-1]:.6f}, Ember {ember_losses[-1]:.6f}, relative difference "
    f"{rel[-1]:+.2e} ({'within' if ok else 'NOT within'} {TOL:.0%}); largest over the run {max(map(abs, rel)):.2e}")
log(f"median step (steps 10-{N - 1}): llm.c {med_llmc:.1f} ms ({B * T / med_llmc * 1e3:,.0f} tokens/s), Ember eager "
    f"{med_ember:.1f} ms ({B * T / med_ember * 1e3:,.0f} tokens/s): Ember at {med_llmc / med_ember:.0%} of llm.c's "
    f"tokens/s")
with open(out_json, "w") as f:
    json.dump({"date": time.strftime("%Y-%m-%d %H:%M:%S"), "batch": B, "context": T, "steps": N,
               "llmc_batch_order": order, "llmc_losses": llmc_losses, "llmc_step_ms": llmc_ms,
               "ember_losses": ember_losses, "ember_step_ms": ember_ms, "relative_difference": rel,
               "last_step_within_tolerance": ok, "median_ms": {"llmc": med_llmc, "ember": med_ember},
               "wall_seconds": {"llmc": llmc_s, "ember": ember_s}}, f, indent=1)
log(f"wrote {out_json}")
sys.exit(0 if ok else 1)
