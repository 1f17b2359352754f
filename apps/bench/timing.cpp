// How the bench times a workload and records it: the device sync after each
// timed call, wall and CPU time, peak resident memory, the table rows and
// JSON records, and the machine's reference figures (SGEMM peak, triad or
// device-copy bandwidth, the register-only bf16 and float32 peaks) that
// every "of peak" is taken against.
#include <cblas.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#include <ember/ops/bgemm_avx512.h>  // bf16_peak_gflops

#include "bench.h"

namespace ember::bench {

// --device: where every workload's tensors and models live. On a GPU each
// timed call ends by reading one element back, which waits for the stream
// (that small copy is included in the times).
Device g_dev = kCPU;
TensorOptions on_dev(DType dt) { return TensorOptions(dt, g_dev); }
void sync_device() {
  if (g_dev.is_cpu()) return;
  static const Tensor probe = zeros({1}, on_dev());
  (void)probe.item();
}

namespace {

double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

}  // namespace

// The 1-minute load average (the neighbours' builds on the shared machine); -1 when unknown.
double load_average() {
  double l[1] = {-1};
  return getloadavg(l, 1) == 1 ? l[0] : -1;
}

// warmup untimed calls, then each of steps calls timed on its own.
Timing time_steps(int warmup, int steps, const std::function<void()>& body) {
  for (int i = 0; i < warmup; ++i) body();
  sync_device();
  std::vector<double> ms;
  const double cpu0 = process_cpu_ms();
  for (int i = 0; i < steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    body();
    sync_device();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  const double cpu = (process_cpu_ms() - cpu0) / steps;
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front(), ms.back(), cpu};
}

// Peak resident memory since the last reset_peak_rss(): Linux's VmHWM, which
// writing "5" to /proc/self/clear_refs resets to the current RSS. Each
// workload resets it first, so the machine measurement's large arrays and the
// workloads before it don't count against it (PyTorch's side does the same).
namespace {

// A field of /proc/self/status in MB, or -1 where there is none.
double status_mb(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(field, 0) == 0) return std::stod(line.substr(std::strlen(field))) / 1024.0;  // kB
  return -1;
}

double rss_at_reset_mb = 0;  // RSS when the peak was last reset

}  // namespace

void reset_peak_rss() {
  std::ofstream("/proc/self/clear_refs") << "5";
  rss_at_reset_mb = std::max(0.0, status_mb("VmRSS:"));
}

double peak_rss_mb() {
  const double hwm = status_mb("VmHWM:");
  if (hwm >= 0) return hwm;
  rusage u{};  // no /proc: the process-wide peak
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

void Bench::record(const std::string& workload, int64_t batch, const Timing& t, double gflop_per_step,
                   double extra_mb) {
  const double gflops = t.median_ms > 0 ? gflop_per_step / (t.median_ms * 1e-3) : 0;
  const double fraction = peak > 0 ? gflops / peak : 0;
  nlohmann::ordered_json r = {{"workload", workload},
                              {"batch", batch},
                              {"median_ms", t.median_ms},
                              {"min_ms", t.min_ms},
                              {"max_ms", t.max_ms},
                              {"cpu_ms", t.cpu_ms},
                              {"gflops", gflops},
                              {"fraction_of_sgemm_peak", fraction},
                              {"peak_tensor_mb", extra_mb},
                              {"peak_rss_mb", peak_rss_mb()},
                              {"rss_growth_mb", peak_rss_mb() - rss_at_reset_mb},
                              {"threads", num_threads()}};
  records.push_back(r);
  std::printf("%-34s %6lld %9.3f %9.3f %9.3f %9.3f %9.1f %6.0f%% %9.1f %9.1f\n", workload.c_str(),
              static_cast<long long>(batch), t.median_ms, t.min_ms, t.max_ms, t.cpu_ms, gflops, 100 * fraction,
              extra_mb, peak_rss_mb());
}

void Bench::table_header(const char* what) {
  std::printf("\n%s\n%-34s %6s %9s %9s %9s %9s %9s %7s %9s %9s\n", what, "workload", "batch", "median", "min", "max",
              "cpu ms", "GFLOP/s", "of peak", "tensorMB", "rssMB");
}

// The machine: SGEMM peak (2048^3, OpenBLAS on num_threads threads) and triad bandwidth.
void Bench::measure_machine() {
  const int64_t n = 2048;
  std::vector<float> a(n * n, 1.0f), b(n * n, 0.5f), c(n * n);
  openblas_set_num_threads(num_threads());
  // Both references are medians over 7 runs, as every workload's time is a
  // median: on this shared machine a best-of-N reference taken in a quiet
  // moment and a median workload time taken in a busy one would make the
  // fractions of peak swing with the neighbours' load.
  const Timing t = time_steps(1, 7, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  });
  openblas_set_num_threads(1);  // Ember's own pool is the only set of threads
  sgemm_peak = 2.0 * n * n * n / (t.median_ms * 1e-3) * 1e-9;
  const int64_t m = 1 << 26;  // 256 MB per array: far beyond any last-level cache
  std::vector<float> x(m, 1.0f), y(m, 2.0f), z(m);
  const Timing tt = time_steps(1, 7, [&] {
    parallel_for(0, m, 1 << 16, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) z[i] = x[i] + 3.0f * y[i];
    });
  });
  triad_gbs = 3.0 * 4 * m / (tt.median_ms * 1e-3) * 1e-9;  // STREAM's count: 3 arrays, no write-allocate
  // Ember's own kernel at its best shape: on an AVX-512 machine it outruns
  // OpenBLAS's Haswell kernel (docs/PERFORMANCE.md), so "of peak" (against
  // OpenBLAS, the reference the targets name) can pass 100% on a single GEMM.
  {
    const Tensor ea = randn({16384, 256}), eb = randn({256, 256});
    const Timing te = time_steps(1, 7, [&] { (void)matmul(ea, eb); });
    ember_gemm = 2.0 * 16384 * 256 * 256 / (te.median_ms * 1e-3) * 1e-9;
  }
  empty_cache();  // its 32 MB must not count in the workloads' peak RSS
  // The best of short windows: on the shared machine a window that got the
  // core to itself is the core's rate; longer ones average in the neighbours.
  for (int i = 0; i < 20; ++i) {
    bf16_peak = std::max(bf16_peak, cpu::bf16_peak_gflops(0.002));
    fp32_fma_peak = std::max(fp32_fma_peak, cpu::fp32_peak_gflops(0.002));
  }
  std::printf(
      "machine: SGEMM peak %.1f GFLOP/s (OpenBLAS, 2048^3, %d thread(s)); Ember's matmul %.1f GFLOP/s "
      "(16384x256 @ 256x256); triad %.1f GB/s; one core's register-only loops: bf16 %.1f GFLOP/s "
      "(vdpbf16ps), fp32 %.1f (vfmadd231ps)\n",
      sgemm_peak, num_threads(), ember_gemm, triad_gbs, bf16_peak, fp32_fma_peak);
  peak = sgemm_peak;
  bandwidth = triad_gbs;
}

// On a GPU: float32 GEMM peak through Ember's matmul (cuBLAS, 4096^3) and
// memory bandwidth as a 256 MB device-to-device copy (read + write).
void Bench::measure_device() {
  const int64_t n = 4096;
  const Tensor a = randn({n, n}, on_dev()), b = randn({n, n}, on_dev());
  const Timing t = time_steps(1, 5, [&] { matmul(a, b); });
  peak = 2.0 * n * n * n / (t.min_ms * 1e-3) * 1e-9;
  const int64_t m = 1 << 26;
  const Tensor x = randn({m}, on_dev());
  Tensor y = empty({m}, on_dev());
  const Timing tc = time_steps(1, 5, [&] { y.copy_(x); });
  bandwidth = 2.0 * 4 * m / (tc.min_ms * 1e-3) * 1e-9;
  bandwidth_name = "device copy";
  std::printf(
      "device %s: SGEMM peak %.1f GFLOP/s (cuBLAS through matmul, 4096^3); copy %.1f GB/s; the fractions "
      "below are of these\n",
      g_dev.str().c_str(), peak, bandwidth);
}

// One step with the profiler on (on a GPU, each kernel timed from an idle
// device to its end): the kernels that take most of it.
void Bench::profile_step(const std::string& name, const std::function<void()>& body) {
  profiler::reset();
  profiler::set_synchronizing(true);
  {
    profiler::Guard on;
    body();
    sync_device();
  }
  profiler::set_synchronizing(false);
  std::vector<profiler::Row> rows = profiler::rows();
  double total = 0;
  for (const profiler::Row& r : rows) total += r.seconds;
  std::printf("  %s, one profiled step: %.3f ms in kernels; the largest:\n", name.c_str(), total * 1e3);
  for (size_t i = 0; i < rows.size() && i < 12; ++i)
    std::printf("    %-40s %6lld calls %9.3f ms %5.1f%%\n", rows[i].name.c_str(), static_cast<long long>(rows[i].calls),
                rows[i].seconds * 1e3, 100 * rows[i].seconds / total);
}

// A training step; FLOPs from Ember's matmul counter over one step.
void Bench::step(const std::string& name, int64_t batch, const std::function<void()>& body) {
  reset_peak_rss();
  body();
  const uint64_t f0 = profiler::matmul_flops(), l0 = profiler::device_launches();
  body();
  const double gflop = static_cast<double>(profiler::matmul_flops() - f0) * 1e-9;
  const uint64_t launches = profiler::device_launches() - l0;
  reset_peak_memory_stats(g_dev);
  const Timing t = time_steps(warmup, steps, body);
  record(name, batch, t, gflop, static_cast<double>(memory_stats(g_dev).peak_allocated) / 1048576.0);
  if (!g_dev.is_cpu()) {
    // Each launch costs host time to issue: at a few microseconds each, a
    // step of hundreds of small kernels is bound by them, not by the GPU.
    records.back()["launches_per_step"] = launches;
    std::printf("%-34s %6s launches per step: %llu (kernels, cuBLAS calls, copies)\n", "", "",
                static_cast<unsigned long long>(launches));
  }
}

}  // namespace ember::bench
