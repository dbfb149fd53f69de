// ThreadPool implementation: workers spin briefly, then sleep on a condition variable, between
// loops; a loop waits only for the workers that joined it.
#include "core/thread_pool.h"

#include <sched.h>

#include <cstdlib>
#include <string>

namespace mla {

namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// How long a worker watches for the next loop before it sleeps: long enough to bridge the
// serial code between the loops of one step (a few microseconds), short enough not to take a
// core from other work when the pool is idle.
constexpr int kSpinIterations = 4000;

inline uint64_t generation_of(uint64_t state) {
  return state >> 32;
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_items(int thread_index) {
  for (int64_t i = next_.fetch_add(1); i < n_; i = next_.fetch_add(1)) (*fn_)(i, thread_index);
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int)>& fn) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i, 0);
    return;
  }
  // No worker is inside a loop here (the previous call waited for all that joined), so the
  // loop's fields can be written before the new generation publishes them.
  fn_ = &fn;
  n_ = n;
  next_.store(0, std::memory_order_relaxed);
  const uint64_t generation = generation_of(state_.load(std::memory_order_relaxed)) + 1;
  state_.store(generation << 32, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    start_cv_.notify_all();
  }
  run_items(0);
  // Every item is taken: close the loop to latecomers, then wait for those running items.
  uint64_t s = state_.fetch_or(kClosed, std::memory_order_acq_rel) | kClosed;
  for (int spins = 0; (s & kJoinedMask) != 0; s = state_.load(std::memory_order_acquire))
    if (++spins < kSpinIterations)
      cpu_relax();
    else
      std::this_thread::yield();
  fn_ = nullptr;
}

void ThreadPool::worker_loop(int thread_index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t s = state_.load(std::memory_order_acquire);
    for (int spins = 0; generation_of(s) == seen && spins < kSpinIterations; ++spins) {
      cpu_relax();
      s = state_.load(std::memory_order_acquire);
    }
    if (generation_of(s) == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      start_cv_.wait(lock, [&] {
        s = state_.load(std::memory_order_seq_cst);
        return stop_.load() || generation_of(s) != seen;
      });
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
    }
    if (stop_.load()) return;
    seen = generation_of(s);
    // Join unless the caller already closed this loop (then there is nothing left to take).
    bool joined = false;
    while (generation_of(s) == seen && !(s & kClosed)) {
      if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel)) {
        joined = true;
        break;
      }
    }
    if (!joined) continue;
    run_items(thread_index);
    state_.fetch_sub(1, std::memory_order_release);
  }
}

ThreadPool& default_thread_pool() {
  static ThreadPool pool([] {
    if (const char* env = std::getenv("MLA_NUM_THREADS")) {
      char* end = nullptr;
      long v = std::strtol(env, &end, 10);
      if (end != env && *end == '\0' && v >= 1 && v <= 1024) return int(v);
    }
    // The cores this process may run on: a rank that mpirun bound to a NUMA node or a core
    // (docs/ARCHITECTURE.md §Ranks), a container's cpuset; else every online core.
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    unsigned hc = std::thread::hardware_concurrency();
    return hc ? int(hc) : 1;
  }());
  return pool;
}

}  // namespace mla
