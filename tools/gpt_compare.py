# Side-by-side timing of the nanogpt-cpu training loop: build/bin/gpt and
# tools/gpt_torch.py (PyTorch 1.13) alternating run by run, each at 1 and at
# all cores' threads, for --rounds rounds of --iters steps; prints per-step
# wall and CPU milliseconds of the training steps alone, each framework's
# best thread setting, and the ratio, with the load average the runs saw.
#   /usr/bin/python3 tools/gpt_compare.py --data /work/shared/data/tinyshakespeare.txt [--iters 150] [--rounds 2]
import argparse, json, os, statistics, subprocess, tempfile

p = argparse.ArgumentParser()
p.add_argument("--data", required=True)
p.add_argument("--build", default="build")
p.add_argument("--iters", type=int, default=150)
p.add_argument("--rounds", type=int, default=2)
p.add_argument("--threads", default="", help="comma-separated thread counts (default: 1 and all cores)")
a = p.parse_args()
threads = [int(t) for t in a.threads.split(",")] if a.threads else sorted({1, os.cpu_count() or 1})
# PyTorch at its best: OpenBLAS tuning variables unset, glibc malloc keeping freed memory (tools/bench_compare.py).
torch_env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
torch_env.update(MALLOC_MMAP_THRESHOLD_="1000000000", MALLOC_TRIM_THRESHOLD_="1000000000")
model = ["--layers", "4", "--heads", "4", "--width", "128", "--context", "64", "--batch-size", "12", "--dropout", "0"]
res = {}  # (framework, threads) -> [(wall ms/step, cpu ms/step)]
loads = []
for r in range(a.rounds):
    for t in threads:
        loads.append(os.getloadavg()[0])
        with tempfile.TemporaryDirectory() as d:
            subprocess.run([os.path.join(a.build, "bin", "gpt"), "--data", a.data, *model, "--iters", str(a.iters),
                            "--eval-interval", "0", "--eval-iters", "1", "--sample-tokens", "0", "--threads", str(t),
                            "--quiet", "--out", d], check=True, stdout=subprocess.DEVNULL)
            m = json.load(open(os.path.join(d, "metrics.json")))
        res.setdefault(("ember", t), []).append((1e3 * m["train_seconds"] / a.iters, 1e3 * m["train_cpu_seconds"] / a.iters))
        loads.append(os.getloadavg()[0])
        out = subprocess.run(["/usr/bin/python3", "tools/gpt_torch.py", "--data", a.data, "--iters", str(a.iters),
                              "--threads", str(t), "--no-val"], check=True, capture_output=True, text=True, env=torch_env)
        m = json.loads(out.stdout.strip().splitlines()[-1])
        res.setdefault(("pytorch", t), []).append((1e3 * m["train_seconds"] / a.iters, 1e3 * m["train_cpu_seconds"] / a.iters))
print(f"load average during the runs: {min(loads):.1f} - {max(loads):.1f} (2 cores)")
print(f"{'framework':10s} {'threads':>7s} {'wall ms/step':>13s} {'cpu ms/step':>12s}   (median of {a.rounds} rounds)")
best = {}
for (fw, t), v in sorted(res.items()):
    w, c = statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)
    print(f"{fw:10s} {t:7d} {w:13.1f} {c:12.1f}")
    if fw not in best or w < best[fw][0]:
        best[fw] = (w, c, t)
e, q = best["ember"], best["pytorch"]
print(f"best wall: ember {e[0]:.1f} ms ({e[2]} thr), pytorch {q[0]:.1f} ms ({q[2]} thr): {q[0] / e[0]:.2f}x; "
      f"cpu ms/step at {threads[0]} thread(s): ember {statistics.median(x[1] for x in res[('ember', threads[0])]):.1f}, "
      f"pytorch {statistics.median(x[1] for x in res[('pytorch', threads[0])]):.1f}")
