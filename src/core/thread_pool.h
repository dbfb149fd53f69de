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

  // One word for the loop in progress: its generation (high 32 bits), whether it is closed to
  // late workers (bit 31) and how many workers joined it (low bits). A worker that wakes after
  // the caller finished every item and closed the loop does not join, so the caller waits only
  // for the workers actually running items, never for a wake-up (tens of microseconds on a busy
  // machine, more than a whole small loop).
  static constexpr uint64_t kClosed = uint64_t(1) << 31;
  static constexpr uint64_t kJoinedMask = kClosed - 1;
  std::atomic<uint64_t> state_{0};

  std::vector<std::thread> workers_;
  std::mutex mu_;  // with start_cv_: where idle workers sleep after spinning
  std::condition_variable start_cv_;
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  const std::function<void(int64_t, int)>* fn_ = nullptr;  // set before the generation moves
  int64_t n_ = 0;
  std::atomic<int64_t> next_{0};
};

// The process-wide pool, sized by MLA_NUM_THREADS or the number of hardware threads.
ThreadPool& default_thread_pool();

}  // namespace mla
