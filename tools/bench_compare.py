# make bench: Ember's build/bin/bench and PyTorch 1.13 (tools/bench_torch.py)
# on the same training-step workloads, alternating workload by workload, each
# framework at its best thread setting (1 or all cores, whichever is faster),
# then the table of Ember/PyTorch step-time ratios. Without python3-torch
# only Ember's full table is printed.
#   /usr/bin/python3 tools/bench_compare.py [--build build] [--steps 20]
import argparse, json, os, subprocess, sys, tempfile

p = argparse.ArgumentParser()
p.add_argument("--build", default="build")
p.add_argument("--steps", type=int, default=20)
a = p.parse_args()
bench = os.path.join(a.build, "bin", "bench")
cores = os.cpu_count() or 1
threads = sorted({1, cores})


# PyTorch's CPU tensors come from glibc malloc: keep freed memory rather than
# unmapping it every step (PyTorch's best setting here; Ember has its own
# caching allocator and ignores these).
TORCH_ENV = dict(os.environ, MALLOC_MMAP_THRESHOLD_="1000000000", MALLOC_TRIM_THRESHOLD_="1000000000")


def run(cmd):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run(cmd + ["--json", f.name], check=True, stdout=subprocess.DEVNULL, env=TORCH_ENV)
        return json.load(open(f.name))["records"]


try:
    import torch  # noqa: F401
    have_torch = True
except ImportError:
    have_torch = False

subprocess.run([bench, "--steps", str(a.steps)], check=True)  # Ember's full table first
if not have_torch:
    print("\npython3-torch not found: no PyTorch comparison (apt-get install python3-torch)")
    sys.exit(0)

best = {}  # (framework, workload, batch) -> (median_ms, threads, peak_rss_mb, rss_growth_mb)
for workload in ("attention_regression", "vit"):
    for t in threads:
        for fw, cmd in (("ember", [bench, "--workload", workload, "--threads", str(t), "--steps", str(a.steps)]),
                        ("pytorch", [sys.executable, "tools/bench_torch.py", "--workload", workload, "--threads",
                                     str(t), "--steps", str(a.steps)])):
            for r in run(cmd):
                if r["workload"].endswith("train step"):
                    k = (fw, r["workload"], r["batch"])
                    if k not in best or r["median_ms"] < best[k][0]:
                        best[k] = (r["median_ms"], t, r["peak_rss_mb"], r["rss_growth_mb"])

print(f"\nside by side, median step time at each framework's best thread setting ({cores} cores)")
print("(peak RSS of the process during the workload, and in brackets its growth over the RSS before it)")
print(f"{'workload':34s} {'batch':>6s} {'ember ms':>10s} {'thr':>4s} {'pytorch ms':>11s} {'thr':>4s} {'speed-up':>9s}"
      f" {'ember MB':>14s} {'pytorch MB':>14s}")
for (fw, w, b), (ms, t, rss, grow) in sorted(best.items()):
    if fw != "ember" or ("pytorch", w, b) not in best:
        continue
    pms, pt, prss, pgrow = best[("pytorch", w, b)]
    print(f"{w:34s} {b:6d} {ms:10.2f} {t:4d} {pms:11.2f} {pt:4d} {pms / ms:8.2f}x"
          f" {rss:7.0f} ({grow:4.0f}) {prss:7.0f} ({pgrow:4.0f})")
