// ThreadPool: one persistent set of worker threads that runs parallel_for loops. Kernels take work
// items from a shared counter, so uneven items balance themselves. Not a task graph.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mla {

class ThreadPool {
 public:
  // num_threads counts the calling thread, which also works; 1 means no worker threads.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return int(workers_.size()) + 1; }

  // Calls fn(item, thread_index) for item in [0, n), thread_index in [0, num_threads()).
  // Returns when all items are done. Not re-entrant: fn must not call parallel_for on this pool.
  void parallel_for(int64_t n, const std::function<void(int64_t, int)>& fn);

 private:
  void worker_loop(int thread_index);
  void run_items(int thread_index);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(int64_t, int)>* fn_ = nullptr;
  int64_t n_ = 0;
  std::atomic<int64_t> next_{0};
  uint64_t generation_ = 0;
  int active_ = 0;
  bool stop_ = false;
};

// The process-wide pool, sized by MLA_NUM_THREADS or the number of hardware threads.
ThreadPool& default_thread_pool();

}  // namespace mla
