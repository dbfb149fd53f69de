// ThreadPool implementation: workers sleep on a condition variable between loops.
#include "core/thread_pool.h"

#include <cstdlib>
#include <string>

namespace mla {

ThreadPool::ThreadPool(int num_threads) {
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    next_.store(0);
    active_ = int(workers_.size());
    ++generation_;
  }
  start_cv_.notify_all();
  run_items(0);
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return active_ == 0; });
  fn_ = nullptr;
}

void ThreadPool::worker_loop(int thread_index) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    run_items(thread_index);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--active_ == 0) done_cv_.notify_one();
    }
  }
}

ThreadPool& default_thread_pool() {
  static ThreadPool pool([] {
    if (const char* env = std::getenv("MLA_NUM_THREADS")) {
      char* end = nullptr;
      long v = std::strtol(env, &end, 10);
      if (end != env && *end == '\0' && v >= 1 && v <= 1024) return int(v);
    }
    unsigned hc = std::thread::hardware_concurrency();
    return hc ? int(hc) : 1;
  }());
  return pool;
}

}  // namespace mla
