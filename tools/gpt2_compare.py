# GPT-2 124M training side by side in llm.c's CPU trainer, PyTorch 1.13 and
# Ember, at llm.c's setting (batch 4, context 64, float32, AdamW lr 1e-4
# without weight decay or clipping), from the same random-init weights on the
# same tokens: each step's loss against llm.c's, the median step times, peak
# memory. llm.c is an anchor to measure against, built here from
# ../shared/anchors/llm.c (a copy of its source, MIT) into BUILD/gpt2_compare;
# nothing of it is part of Ember.
#   /usr/bin/python3 tools/gpt2_compare.py [--build build] [--steps 20] [--threads 2] [--torch-threads 1,2]
#                                          [--bf16] [--json FILE]
#
# The inputs: llm.c's make_inputs.py writes the checkpoint (GPT-2's init,
# llm.c's format, which Ember's bench and tools/gpt2_torch.py read too) and the
# validation tokens (one token per byte of tinyshakespeare). The training
# tokens, and Ember's and PyTorch's copy of them in the order llm.c's loader
# visits them, are written by tools/llmc_files.py.
#
# llm.c prints "step N: train loss L (took T ms)" per step; it is stopped
# after step N-1 (its loop runs 40 steps, with a validation pass every 10 and
# sampling at 20). Peak RSS is each process's own (wait4). PyTorch runs with
# OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset and glibc's malloc keeping
# freed memory (tools/bench_compare.py's setting), at each --torch-threads
# count; the fastest is its row. Exits 1 when Ember's losses are more than
# 1e-3 from llm.c's.
import argparse, json, os, re, shutil, statistics, subprocess, sys, time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ANCHOR = os.path.normpath(os.path.join(REPO, "..", "shared", "anchors", "llm.c"))
TEXT = os.path.normpath(os.path.join(REPO, "..", "shared", "data", "tinyshakespeare.txt"))
TOL = 1e-3

p = argparse.ArgumentParser()
p.add_argument("--build", default="build")
p.add_argument("--steps", type=int, default=20, help="training steps (at most 40, llm.c's loop)")
p.add_argument("--threads", type=int, default=2, help="llm.c's OpenMP threads and Ember's")
p.add_argument("--torch-threads", default="1,2", help="PyTorch's thread counts to try")
p.add_argument("--bf16", action="store_true", help="also Ember in bf16 autocast")
p.add_argument("--json", help="default BUILD/gpt2_compare/compare.json")
a = p.parse_args()
B, T, N = 4, 64, a.steps
if not 1 <= N <= 40:
    sys.exit("gpt2_compare: --steps must be from 1 to 40 (train_gpt2.c's loop runs 40)")
work = os.path.abspath(os.path.join(a.build, "gpt2_compare"))
bench = os.path.abspath(os.path.join(a.build, "bin", "bench"))
out_json = a.json or os.path.join(work, "compare.json")


def skip(why):
    print(f"gpt2_compare: skipped: {why}")
    sys.exit(0)


if not os.path.isfile(os.path.join(ANCHOR, "train_gpt2.c")):
    skip(f"llm.c's anchor is not at {ANCHOR} (a copy of karpathy/llm.c's source)")
if not shutil.which("gcc"):
    skip("no gcc to build llm.c with")
try:
    import numpy as np
except ImportError:
    skip("numpy is missing (make_inputs.py needs it)")
try:
    import torch  # noqa: F401
    have_torch = True
except ImportError:
    have_torch = False
if not os.path.isfile(TEXT):
    sys.exit(f"gpt2_compare: the training text {TEXT} is missing (tinyshakespeare; scripts/setup.sh puts it there)")
if not os.access(bench, os.X_OK):
    sys.exit(f"gpt2_compare: {bench} is missing: build it first (cmake --build {a.build} --target bench)")
os.makedirs(work, exist_ok=True)
from llmc_files import batch_files  # noqa: E402 (needs numpy)


def cpu_seconds(pid):
    """The process's CPU time so far, all threads (/proc/PID/stat's utime + stime)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def run(name, cmd, cwd=None, env=None, stop=None):
    """Runs cmd, echoing its step lines; stops it after a line matching stop. Returns (lines, peak RSS MB, load,
    CPU ms per step): the last, the process's CPU time between consecutive step lines (each line is printed as
    its step ends), the one figure a loaded machine leaves nearly alone."""
    print(f"\n== {name}: {' '.join(cmd)}", flush=True)
    load0 = os.getloadavg()[0]
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, cpu_at_step = [], []
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if line.startswith("step "):
            cpu_at_step.append(cpu_seconds(proc.pid))
            print("  " + line.rstrip("\n"), flush=True)
        if stop and re.match(stop, line):
            proc.terminate()
            break
    proc.stdout.close()
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0 and not (stop and proc.returncode == -15):
        sys.exit(f"gpt2_compare: {name} exited with {proc.returncode}:\n" + "\n".join(lines[-20:]))
    cpu_ms = [1e3 * (y - x) for x, y in zip(cpu_at_step, cpu_at_step[1:])]
    return lines, ru.ru_maxrss / 1024.0, (load0 + os.getloadavg()[0]) / 2, cpu_ms


# llm.c, built once (again when its source is newer).
llmc = os.path.join(work, "train_gpt2")
if not os.path.exists(llmc) or os.path.getmtime(llmc) < os.path.getmtime(os.path.join(ANCHOR, "train_gpt2.c")):
    cmd = ["gcc", "-Ofast", "-march=native", "-fopenmp", "-DOMP", "train_gpt2.c", "-lm", "-o", llmc]
    print("building llm.c:", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=ANCHOR, check=True)

# The inputs: the checkpoint once, the token files each run.
rundir = os.path.join(work, "run")
ckpt = os.path.join(rundir, "gpt2_124M.bin")
if not os.path.exists(ckpt):
    subprocess.run([sys.executable, os.path.join(ANCHOR, "make_inputs.py"), TEXT, rundir], check=True)
order = batch_files(TEXT, N, B, T, os.path.join(rundir, "dev/data/tinyshakespeare/tiny_shakespeare_train.bin"),
                    os.path.join(work, "tokens_in_llmc_order.bin"))
if order is None:
    sys.exit(f"gpt2_compare: {TEXT} has too few lines for {N} batches")
in_order = os.path.join(work, "tokens_in_llmc_order.bin")

STEP = re.compile(r"step (\d+): train loss ([-+0-9.eE]+|nan|inf) \(took ([0-9.]+) ms\)")


def steps_of(lines):
    got = [STEP.match(x) for x in lines]
    got = [(float(m.group(2)), float(m.group(3))) for m in got if m]
    if len(got) < N:
        sys.exit(f"gpt2_compare: {len(got)} step lines, expected {N}:\n" + "\n".join(lines[-20:]))
    return [g[0] for g in got[:N]], [g[1] for g in got[:N]]


rows, machine = {}, {}
load_start = os.getloadavg()


def ember(prec):
    js = os.path.join(work, f"ember_{prec}.json")
    cmd = [bench, "--workload", "gpt2", "--gpt2-checkpoint", ckpt, "--gpt2-tokens", in_order, "--gpt2-recipe", "llmc",
           "--steps", str(N), "--threads", str(a.threads), "--precision", prec, "--json", js]
    lines, rss, load, cpu = run(f"Ember {prec}", cmd)
    doc = json.load(open(js))
    r = doc["records"][0]
    machine.update({k: doc[k] for k in ("sgemm_peak_gflops", "fp32_register_peak_gflops", "threads")})
    machine["line"] = next((x for x in lines if x.startswith("machine:")), "")
    rows[f"ember {prec}"] = dict(losses=r["losses"], step_ms=r["step_ms"], rss_mb=rss, load=load, cpu_ms=cpu,
                                 threads=a.threads, counted_gflop=r["gflops"] * r["median_ms"] * 1e-3,
                                 parameters=r["parameters"])


ember("fp32")
if a.bf16:
    ember("bf16")
if have_torch:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="1000000000", MALLOC_TRIM_THRESHOLD_="1000000000")
    for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        env.pop(k, None)
    for th in [int(x) for x in a.torch_threads.split(",")]:
        lines, rss, load, cpu = run(f"PyTorch {th} thread(s)",
                               ["/usr/bin/python3", os.path.join(REPO, "tools", "gpt2_torch.py"), ckpt, in_order,
                                "--batch", str(B), "--seq", str(T), "--steps", str(N), "--threads", str(th)], env=env)
        losses, ms = steps_of(lines)
        rows[f"pytorch {th}t"] = dict(losses=losses, step_ms=ms, rss_mb=rss, load=load, cpu_ms=cpu, threads=th)
else:
    print("\ngpt2_compare: PyTorch is not installed (python3-torch): its column is left out")
# stdbuf: llm.c's printf into a pipe is block-buffered; line by line, it can be stopped at step N-1.
lines, rss, load, cpu = run("llm.c", ["stdbuf", "-oL", llmc], cwd=rundir,
                            env=dict(os.environ, OMP_NUM_THREADS=str(a.threads)), stop=rf"step {N - 1}: ")
losses, ms = steps_of(lines)
rows["llm.c"] = dict(losses=losses, step_ms=ms, rss_mb=rss, load=load, cpu_ms=cpu, threads=a.threads)

# The report.
for r in rows.values():
    r["median_ms"], r["min_ms"] = statistics.median(r["step_ms"]), min(r["step_ms"])
    # llm.c's validation passes (before steps 0 and 10) fall between two step lines: the median leaves them out.
    r["median_cpu_ms"] = statistics.median(r["cpu_ms"]) if r["cpu_ms"] else float("nan")
    r["max_abs_diff_vs_llmc"] = max(abs(x - y) for x, y in zip(r["losses"], rows["llm.c"]["losses"]))
torch_rows = [k for k in rows if k.startswith("pytorch")]
best_torch = min(torch_rows, key=lambda k: rows[k]["median_ms"]) if torch_rows else None
cols = ["llm.c"] + ([best_torch] if best_torch else []) + ["ember fp32"] + (["ember bf16"] if a.bf16 else [])
print(f"\nGPT-2 124M, batch {B}, context {T}, float32, AdamW lr 1e-4 (train_gpt2.c's recipe), {N} steps from the "
      f"same weights on the same tokens")
print("step " + "".join(f"{c:>14}" for c in cols) + "".join(f"{c + ' - llm.c':>20}" for c in cols[1:]))
for s in range(N):
    ref = rows["llm.c"]["losses"][s]
    print(f"{s:4d} " + "".join(f"{rows[c]['losses'][s]:14.6f}" for c in cols) +
          "".join(f"{rows[c]['losses'][s] - ref:20.2e}" for c in cols[1:]))
print("max |diff| against llm.c: " + ", ".join(f"{c} {rows[c]['max_abs_diff_vs_llmc']:.2e}" for c in cols[1:]) +
      f" (limit {TOL:g} for fp32)")
model_gflop = 6 * rows["ember fp32"]["parameters"] * B * T * 1e-9
# The fp32 peak of --threads cores: one core's register-only FMA loop, as
# bench measures it, times the threads (a Zen 4 core gives about 118 GFLOP/s,
# a Zen 5 core, with whole 512-bit FMA units, about 230).
peak = machine.get("fp32_register_peak_gflops", 0.0) * a.threads
print(f"\n{machine.get('line', '')}")
print(f"fp32 peak: {peak:.0f} GFLOP/s (one core's register-only FMA loop x {a.threads} threads)")
print(f"{'':16}{'median ms':>10}{'min ms':>10}{'CPU ms':>10}{'peak RSS':>10}{'load':>7}   model GFLOP/s (median)")
for k in ["llm.c"] + torch_rows + [c for c in cols if c.startswith("ember")]:
    r = rows[k]
    gf = model_gflop / (r["median_ms"] * 1e-3)
    r["model_gflops"] = gf
    print(f"  {k:<14}{r['median_ms']:10.0f}{r['min_ms']:10.0f}{r['median_cpu_ms']:10.0f}{r['rss_mb']:8.0f} MB"
          f"{r['load']:7.2f}   {gf:6.1f} = {100 * gf / max(peak, 1e-9):4.1f}% of {peak:.0f} "
          f"({r['threads']} thread(s))")
print("(CPU ms: the process's CPU time per step, all threads, median; a loaded machine stretches the wall time far "
      "more than it)")
e = rows["ember fp32"]
speedup = {"over_llmc": rows["llm.c"]["median_ms"] / e["median_ms"],
           "over_llmc_cpu_time": rows["llm.c"]["median_cpu_ms"] / e["median_cpu_ms"]}
if best_torch:
    speedup["over_pytorch_best"] = rows[best_torch]["median_ms"] / e["median_ms"]
    speedup["over_pytorch_best_cpu_time"] = rows[best_torch]["median_cpu_ms"] / e["median_cpu_ms"]
print(f"Ember fp32: {speedup['over_llmc']:.2f}x llm.c's speed" +
      (f", {speedup['over_pytorch_best']:.2f}x PyTorch's best ({best_torch})" if best_torch else "") +
      f"; model FLOPs 6 N B T = {model_gflop:.1f} GFLOP per step (N = {e['parameters']}), counted matmul FLOPs "
      f"{e['counted_gflop']:.1f}; of the measured SGEMM peak ({machine.get('sgemm_peak_gflops', 0):.1f} GFLOP/s): "
      f"{100 * e['model_gflops'] / max(machine.get('sgemm_peak_gflops', 0), 1e-9):.0f}%")
print(f"by CPU time per step: {speedup['over_llmc_cpu_time']:.2f}x llm.c" +
      (f", {speedup['over_pytorch_best_cpu_time']:.2f}x PyTorch ({best_torch})" if best_torch else ""))
if a.bf16:
    print(f"Ember bf16: {e['median_ms'] / rows['ember bf16']['median_ms']:.2f}x Ember fp32's speed (CPU time: "
          f"{e['median_cpu_ms'] / rows['ember bf16']['median_cpu_ms']:.2f}x)")
ok = e["max_abs_diff_vs_llmc"] <= TOL
print(f"loss curve within {TOL:g} of llm.c's: {'yes' if ok else 'NO'}; load average at the start "
      f"{load_start[0]:.2f} / {load_start[1]:.2f} / {load_start[2]:.2f}, at the end "
      + " / ".join(f"{x:.2f}" for x in os.getloadavg()))
os.makedirs(os.path.dirname(os.path.abspath(out_json)), exist_ok=True)
with open(out_json, "w") as f:
    json.dump({"date": time.strftime("%Y-%m-%d %H:%M:%S"), "batch": B, "context": T, "steps": N,
               "llmc_batch_order": order, "machine": machine, "fp32_peak_gflops": peak,
               "model_gflop_per_step": model_gflop, "speedup": speedup, "losses_within_tolerance": ok,
               "load_average_start": load_start, "load_average_end": os.getloadavg(), "runs": rows}, f, indent=1)
print(f"wrote {out_json}")
sys.exit(0 if ok else 1)
