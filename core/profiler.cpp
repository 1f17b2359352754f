// The profiler's counters and its report.
#include <ember/core/profiler.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>

namespace ember::profiler {

namespace detail {
std::atomic<uint64_t> g_matmul_flops{0};
std::atomic<uint64_t> g_device_launches{0};
}  // namespace detail

namespace {

std::mutex& mu() {
  static std::mutex m;
  return m;
}
// Keyed by the table's (op's) name; few distinct kernels and ops.
std::map<std::string, Row>& table() {
  static auto* t = new std::map<std::string, Row>;
  return *t;
}
std::map<std::string, Row>& op_table() {
  static auto* t = new std::map<std::string, Row>;
  return *t;
}

std::vector<Row> sorted(const std::map<std::string, Row>& m) {
  std::vector<Row> out;
  for (auto& [k, r] : m) out.push_back(r);
  std::sort(out.begin(), out.end(), [](const Row& a, const Row& b) { return a.seconds > b.seconds; });
  return out;
}

// EMBER_PROFILE=1: profile the whole run and print the table at exit.
struct EnvSwitch {
  EnvSwitch() {
    const char* e = std::getenv("EMBER_PROFILE");
    if (e && *e && std::string(e) != "0") {
      ember::detail::set_kernel_hook(ember::detail::kHookProfiler, true);
      std::atexit([] { std::fputs(report().c_str(), stderr); });
    }
  }
} env_switch;

}  // namespace

namespace {
std::atomic<bool> g_synchronizing{false};
std::atomic<void (*)(int)> g_wait[kNumDeviceTypes] = {};
}  // namespace

void set_synchronizing(bool on) { g_synchronizing.store(on); }
bool synchronizing() { return g_synchronizing.load(std::memory_order_relaxed); }

void detail::register_synchronize(DeviceType type, void (*wait)(int device)) {
  g_wait[static_cast<int>(type)].store(wait);
}

void detail::synchronize(Device device) {
  if (void (*wait)(int) = g_wait[static_cast<int>(device.type)].load()) wait(device.index);
}

void enable(bool on) { ember::detail::set_kernel_hook(ember::detail::kHookProfiler, on); }

void record_kernel(const char* name, double seconds) {
  std::lock_guard<std::mutex> lock(mu());
  Row& r = table()[name];
  if (r.name.empty()) r.name = name;
  ++r.calls;
  r.seconds += seconds;
}

void record_op(const char* name, double seconds, int64_t flops) {
  std::lock_guard<std::mutex> lock(mu());
  Row& r = op_table()[name];
  if (r.name.empty()) r.name = name;
  ++r.calls;
  r.seconds += seconds;
  r.flops += flops;
}

std::vector<Row> rows() {
  std::lock_guard<std::mutex> lock(mu());
  return sorted(table());
}

std::vector<Row> op_rows() {
  std::lock_guard<std::mutex> lock(mu());
  return sorted(op_table());
}

void reset() {
  std::lock_guard<std::mutex> lock(mu());
  table().clear();
  op_table().clear();
}

std::string report() {
  const std::vector<Row> rs = rows();
  double total = 0;
  for (const Row& r : rs) total += r.seconds;
  std::string s;
  char line[160];
  std::snprintf(line, sizeof line, "%-28s %9s %11s %7s %11s\n", "kernel", "calls", "total ms", "%", "us/call");
  s += line;
  for (const Row& r : rs) {
    std::snprintf(line, sizeof line, "%-28s %9lld %11.3f %6.1f%% %11.2f\n", r.name.c_str(),
                  static_cast<long long>(r.calls), r.seconds * 1e3, total > 0 ? 100 * r.seconds / total : 0.0,
                  r.calls ? r.seconds * 1e6 / static_cast<double>(r.calls) : 0.0);
    s += line;
  }
  std::snprintf(line, sizeof line, "%-28s %9s %11.3f   (kernels only; matmul %.3f GFLOP so far)\n", "total", "",
                total * 1e3, static_cast<double>(matmul_flops()) * 1e-9);
  s += line;
  const std::vector<Row> ops = op_rows();
  if (ops.empty()) return s;
  // Op times include their nested ops and kernels, so they do not add up.
  std::snprintf(line, sizeof line, "\n%-28s %9s %11s %11s %10s\n", "op (inner calls included)", "calls", "total ms",
                "us/call", "GFLOP/s");
  s += line;
  for (const Row& r : ops) {
    char rate[16] = "-";
    if (r.flops > 0 && r.seconds > 0)
      std::snprintf(rate, sizeof rate, "%.2f", static_cast<double>(r.flops) * 1e-9 / r.seconds);
    std::snprintf(line, sizeof line, "%-28s %9lld %11.3f %11.2f %10s\n", r.name.c_str(),
                  static_cast<long long>(r.calls), r.seconds * 1e3,
                  r.calls ? r.seconds * 1e6 / static_cast<double>(r.calls) : 0.0, rate);
    s += line;
  }
  return s;
}

}  // namespace ember::profiler
