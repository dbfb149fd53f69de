// The connection workers of the HTTP server: a fixed set of threads taking accepted connections
// from a queue (the library's TaskQueue interface). Unlike the library's own pool, the threads
// get small stacks (a handler needs little: parsing is depth-capped, the model runs on the
// engine's threads), so 200+ workers reserve ~200 MiB of address space instead of ~2 GiB and a
// server under `ulimit -v` still starts; and a thread that cannot be created is a warning, not
// a terminate() (docs/RELIABILITY.md §Checklist L11).
#pragma once

#include <httplib.h>
#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <vector>

namespace mla::server {

class WorkerPool : public httplib::TaskQueue {
 public:
  static constexpr size_t kStackBytes = size_t(1) << 20;

  // Starts up to `threads` workers (at least one is needed; see started()). `on_saturated` runs
  // on the accepting thread when a connection arrives while every worker is busy.
  // `queued`, when given, follows the number of connections waiting because every worker is
  // busy: a connection handed over while workers sleep is not counted in the instant before one
  // wakes (counted, it made the deadline watchdog shed slow clients with idle workers about).
  explicit WorkerPool(size_t threads, std::function<void()> on_saturated = {},
                      std::atomic<int64_t>* queued = nullptr);
  ~WorkerPool() override;

  void enqueue(std::function<void()> fn) override;
  void shutdown() override;  // runs what is queued, then joins the workers
  size_t started() const { return workers_.size(); }

 private:
  static void* run(void* self);
  void loop();
  void publish_queued();  // under mu_

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stop_ = false;
  size_t busy_ = 0;  // workers running a connection
  std::function<void()> on_saturated_;
  std::atomic<int64_t>* queued_ = nullptr;
  std::vector<pthread_t> workers_;
};

}  // namespace mla::server
