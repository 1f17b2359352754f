// The thread pool behind parallel_for: workers sleep on a condition variable
// between jobs after a short spin, and the calling thread takes a share.
#include <ember/core/parallel.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include <ember/core/error.h>

namespace ember {
namespace {

thread_local bool t_in_parallel = false;

// A job is cut into up to this many chunks per thread, taken in turn from a
// shared counter: a thread that runs slower or that the OS deschedules (a
// shared machine) leaves its remaining chunks to the others instead of
// holding up the whole job.
constexpr int64_t kChunksPerThread = 4;
// Spins, in pause instructions: a caller waiting for the last chunks spins
// twice as long before it yields as an idle worker spins for the next job
// before it sleeps on the condition variable. Short spins keep back-to-back
// ops free of wake-up latency; long ones burn the time slice a busy machine
// would give to the thread that has work. The counts were chosen for tens of
// microseconds on the build machine, where a step with spins ten times
// longer took much longer under load (docs/PERFORMANCE.md, "Figures behind
// the code's comments": the pause's cost and the timings).
constexpr int kSpinsBeforeYield = 2000;
constexpr int kWorkerSpins = 1000;

// One parallel_for call. It lives on the caller's stack; workers pick it up
// under the mutex and the caller waits until none is still inside it.
struct Job {
  const std::function<void(int64_t, int64_t)>* fn;
  int64_t begin, end, per, chunks;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> pending{0};
  std::exception_ptr error;
  std::mutex error_mutex;
};

class Pool {
 public:
  explicit Pool(int n) { resize(n); }
  ~Pool() { stop_all(); }

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Threads the system refuses to start (ulimit -u, cgroup pids.max) throw
  // std::system_error from std::thread; the workers started so far are
  // stopped and the pool keeps `fallback` threads instead, and the caller
  // gets an Ember error naming the count.
  void resize(int n, int fallback = 1) {
    stop_all();
    stop_ = false;
    try {
      for (int i = 0; i < n - 1; ++i) workers_.emplace_back([this] { loop(); });
    } catch (const std::system_error& e) {
      const int started = static_cast<int>(workers_.size()) + 1;
      stop_all();
      stop_ = false;
      for (int i = 0; i < fallback - 1; ++i) workers_.emplace_back([this] { loop(); });
      throw ValueError(detail::cat_str("set_num_threads(", n, "): the system could not start thread ", started + 1,
                                       " (", e.what(), "); the pool keeps ", fallback, " thread(s)"));
    }
  }

  void run(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& f) {
    std::lock_guard<std::mutex> job_lock(job_mutex_);  // one job at a time
    const int64_t n = end - begin;
    const int64_t max_chunks = std::max<int64_t>(1, n / std::max<int64_t>(grain, 1));
    const int64_t chunks = std::min<int64_t>(size() * kChunksPerThread, max_chunks);
    Job job;
    job.fn = &f;
    job.begin = begin;
    job.end = end;
    job.per = (n + chunks - 1) / chunks;
    job.chunks = chunks;
    job.pending.store(chunks);
    {
      std::lock_guard<std::mutex> lk(m_);
      job_ = &job;
      ++generation_;
    }
    cv_.notify_all();
    work(job);
    wait_until_zero(job.pending);
    {
      std::lock_guard<std::mutex> lk(m_);
      job_ = nullptr;
    }
    wait_until_zero(active_);
    if (job.error) std::rethrow_exception(job.error);
  }

 private:
  // The caller waits for the last chunks the other threads are finishing,
  // which takes microseconds: spin first, and only then yield. Yielding at
  // once hands the core to another process for a whole time slice whenever
  // the machine is busy (a 2-thread training step then took longer than a
  // 1-thread one: docs/PERFORMANCE.md, "Figures behind the code's comments").
  template <class Counter>
  static void wait_until_zero(const Counter& c) {
    for (int spins = 0; c.load(std::memory_order_acquire) > 0; ++spins) {
      if (spins < kSpinsBeforeYield)
        __builtin_ia32_pause();
      else
        std::this_thread::yield();
    }
  }

  static void work(Job& job) {
    const bool was = t_in_parallel;
    t_in_parallel = true;
    for (;;) {
      const int64_t c = job.next.fetch_add(1);
      if (c >= job.chunks) break;
      const int64_t lo = job.begin + c * job.per, hi = std::min(job.end, lo + job.per);
      try {
        if (lo < hi) (*job.fn)(lo, hi);
      } catch (...) {
        std::lock_guard<std::mutex> lk(job.error_mutex);
        if (!job.error) job.error = std::current_exception();
      }
      job.pending.fetch_sub(1, std::memory_order_release);
    }
    t_in_parallel = was;
  }

  void loop() {
    uint64_t seen = 0;
    for (;;) {
      // Spin briefly: back-to-back ops then pay no wake-up latency.
      for (int i = 0; i < kWorkerSpins && generation_.load(std::memory_order_acquire) == seen; ++i)
        __builtin_ia32_pause();
      Job* job = nullptr;
      {
        std::unique_lock<std::mutex> lk(m_);
        cv_.wait(lk, [&] { return stop_ || generation_.load() != seen; });
        if (stop_) return;
        seen = generation_.load();
        job = job_;
        if (job) active_.fetch_add(1);
      }
      if (job) {
        work(*job);
        active_.fetch_sub(1, std::memory_order_release);
      }
    }
  }

  void stop_all() {
    {
      std::lock_guard<std::mutex> lk(m_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
  }

  std::vector<std::thread> workers_;
  std::mutex job_mutex_, m_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> active_{0};
  bool stop_ = false;
  Job* job_ = nullptr;
};

int default_threads() {
  if (const char* env = std::getenv("EMBER_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return std::min(n, kMaxThreads);
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

std::atomic<int> g_threads{0};

Pool& pool() {
  static Pool p(num_threads());
  return p;
}

}  // namespace

int num_threads() {
  int n = g_threads.load(std::memory_order_relaxed);
  if (n == 0) {
    n = default_threads();
    g_threads.store(n);
  }
  return n;
}

void set_num_threads(int n) {
  EMBER_CHECK(n >= 1, ValueError, "set_num_threads: need at least 1 thread, got ", n);
  EMBER_CHECK(n <= kMaxThreads, ValueError, "set_num_threads: at most ", kMaxThreads, " threads, got ", n);
  EMBER_CHECK(!t_in_parallel, ValueError, "set_num_threads: cannot be called inside parallel_for");
  Pool& p = pool();
  const int old = p.size();
  if (old != n) p.resize(n, old);  // throws (keeping `old` threads) when the system cannot start them
  g_threads.store(n);
}

bool in_parallel_region() { return t_in_parallel; }

void detail::parallel_run(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& f) {
  pool().run(begin, end, grain, f);
}

}  // namespace ember
