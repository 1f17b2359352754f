# make bench: Ember's build/bin/bench and PyTorch 1.13 (tools/bench_torch.py)
# on the same training-step workloads, alternating run by run (Ember, then
# PyTorch, for each workload and thread count, for several rounds), each
# framework at its best thread setting (1 or all cores, whichever is faster),
# then the table of Ember/PyTorch step-time ratios with the load average the
# runs saw. Without python3-torch only Ember's full table is printed.
#   /usr/bin/python3 tools/bench_compare.py [--build build] [--steps 20] [--rounds 5]
import argparse, json, os, statistics, subprocess, sys, tempfile

p = argparse.ArgumentParser()
p.add_argument("--build", default="build")
p.add_argument("--steps", type=int, default=20)
p.add_argument("--rounds", type=int, default=5, help="alternating rounds; the speed-up is the median of the rounds' ratios")
p.add_argument("--skip-table", action="store_true", help="only the side-by-side comparison")
a = p.parse_args()
bench = os.path.join(a.build, "bin", "bench")
cores = os.cpu_count() or 1
threads = sorted({1, cores})


# PyTorch's CPU tensors come from glibc malloc: keep freed memory rather than
# unmapping it every step (PyTorch's best setting here). Ember runs in the
# plain environment: it has its own caching allocator, and these settings
# would keep its machine measurement's 800 MB of freed arrays resident,
# hiding its workloads' RSS growth.
TORCH_ENV = dict(os.environ, MALLOC_MMAP_THRESHOLD_="1000000000", MALLOC_TRIM_THRESHOLD_="1000000000")


def run(cmd, env=None):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run(cmd + ["--json", f.name], check=True, stdout=subprocess.DEVNULL, env=env)
        return json.load(open(f.name))["records"]


try:
    import torch  # noqa: F401
    have_torch = True
except ImportError:
    have_torch = False

if not a.skip_table:
    print(f"load average before the table: {os.getloadavg()[0]:.2f}")
    subprocess.run([bench, "--steps", str(a.steps)], check=True)  # Ember's full table first
if not have_torch:
    print("\npython3-torch not found: no PyTorch comparison (apt-get install python3-torch)")
    sys.exit(0)

# (framework, workload, batch, threads) -> one (median_ms, peak_rss_mb, rss_growth_mb) per round
runs = {}
paired = {}  # (workload, batch) -> per round: (ember best median, pytorch best median) over thread settings
per_round = []  # per (round, workload run): (framework, workload, batch) -> best median over thread settings
loads = []
for rnd in range(a.rounds):
    for workload in ("attention_regression", "vit", "conv"):
        best_round = {}
        for t in threads:
            for fw, cmd, env in (
                    ("ember", [bench, "--workload", workload, "--threads", str(t), "--steps", str(a.steps)], None),
                    ("pytorch", [sys.executable, "tools/bench_torch.py", "--workload", workload, "--threads", str(t),
                                 "--steps", str(a.steps)], TORCH_ENV)):
                loads.append(os.getloadavg()[0])
                for r in run(cmd, env):
                    if not ("train step" in r["workload"] or r["workload"].startswith("conv2d")):
                        continue
                    k = (fw, r["workload"], r["batch"])
                    runs.setdefault(k + (t,), []).append(
                        (r["median_ms"], r["peak_rss_mb"], r["rss_growth_mb"], r.get("cpu_ms", 0.0)))
                    best_round[k] = min(best_round.get(k, float("inf")), r["median_ms"])
        per_round.append(best_round)
        for (fw, w, b), ms in best_round.items():
            if fw == "ember" and ("pytorch", w, b) in best_round:
                paired.setdefault((w, b), []).append((ms, best_round[("pytorch", w, b)]))
loads.append(os.getloadavg()[0])


def best_setting(fw, w, b):
    """The thread count with the lowest median (over rounds) of the run medians, and its figures."""
    best = None
    for t in threads:
        rs = runs.get((fw, w, b, t))
        if not rs:
            continue
        med = statistics.median(x[0] for x in rs)
        if best is None or med < best[0]:
            best = (med, t, max(x[1] for x in rs), max(x[2] for x in rs))
    return best


print(f"\nside by side: median over {a.rounds} alternating round(s) of each run's median step time, each framework "
      f"at its best thread setting ({cores} cores); load average {min(loads):.1f}-{max(loads):.1f} during the runs")
print("(peak RSS of the process during the workload, and in brackets its growth over the RSS before it;"
      " speed-up = PyTorch ms / Ember ms in each round, both at their best thread count in that round,"
      " median over the rounds and its range: pairing runs made a minute apart cancels most of the"
      " machine's drift; the ms columns are medians over rounds at the best setting overall)")
print(f"{'workload':34s} {'batch':>6s} {'ember ms':>10s} {'thr':>4s} {'pytorch ms':>11s} {'thr':>4s} {'speed-up':>9s}"
      f" {'range':>13s} {'ember MB':>14s} {'pytorch MB':>14s}")
for (w, b) in sorted(paired):
    e, p_ = best_setting("ember", w, b), best_setting("pytorch", w, b)
    ratios = [pt / em for em, pt in paired[(w, b)]]
    print(f"{w:34s} {b:6d} {e[0]:10.2f} {e[1]:4d} {p_[0]:11.2f} {p_[1]:4d} {statistics.median(ratios):8.2f}x"
          f" {min(ratios):5.2f}-{max(ratios):5.2f}x {e[2]:7.0f} ({e[3]:4.0f}) {p_[2]:7.0f} ({p_[3]:4.0f})")

# CPU time per step on one thread: the work each framework does for a step,
# which a busy machine inflates far less than the wall time above.
print(f"\nCPU time per step on 1 thread (median over rounds): the frameworks' work, little affected by load")
print(f"{'workload':34s} {'batch':>6s} {'ember cpu ms':>13s} {'pytorch cpu ms':>15s} {'ratio':>7s}")
for (w, b) in sorted(paired):
    e, p_ = runs.get(("ember", w, b, 1)), runs.get(("pytorch", w, b, 1))
    if not e or not p_:
        continue
    ec, pc = statistics.median(x[3] for x in e), statistics.median(x[3] for x in p_)
    if ec > 0 and pc > 0:
        print(f"{w:34s} {b:6d} {ec:13.2f} {pc:15.2f} {pc / ec:6.2f}x")

# Each framework's 16-bit step against its own float32 step, paired within a
# round (the targets: Ember bf16 at least 1.7x its fp32 on the ViT,
# 1.5x on attention regression batch 256).
lowp = sorted({(fw, w, b) for rd in per_round for (fw, w, b) in rd if w.endswith((" bf16", " fp16"))})
if lowp:
    print(f"\n16-bit steps against the same framework's float32 step (median of per-round ratios fp32 ms / 16-bit ms)")
    print(f"{'framework':10s} {'workload':34s} {'batch':>6s} {'fp32 ms':>9s} {'16-bit ms':>10s} {'speed-up':>9s} {'range':>13s}")
    for fw, w, b in lowp:
        base = w.rsplit(" ", 1)[0]
        ratios = [rd[(fw, base, b)] / rd[(fw, w, b)] for rd in per_round if (fw, w, b) in rd and (fw, base, b) in rd]
        if not ratios:
            continue
        f32 = statistics.median(rd[(fw, base, b)] for rd in per_round if (fw, base, b) in rd)
        f16 = statistics.median(rd[(fw, w, b)] for rd in per_round if (fw, w, b) in rd)
        print(f"{fw:10s} {w:34s} {b:6d} {f32:9.2f} {f16:10.2f} {statistics.median(ratios):8.2f}x"
              f" {min(ratios):5.2f}-{max(ratios):5.2f}x")
