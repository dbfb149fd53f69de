#include "server/worker_pool.h"

#include <cstdio>
#include <cstring>

namespace mla::server {

WorkerPool::WorkerPool(size_t threads, std::function<void()> on_saturated,
                       std::atomic<int64_t>* queued)
    : on_saturated_(std::move(on_saturated)), queued_(queued) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, kStackBytes);
  int err = 0;
  for (size_t i = 0; i < threads; ++i) {
    pthread_t t;
    if ((err = pthread_create(&t, &attr, &WorkerPool::run, this)) != 0) break;
    workers_.push_back(t);
  }
  pthread_attr_destroy(&attr);
  if (workers_.size() < threads)
    std::fprintf(stderr, "warning: started %zu of %zu HTTP worker threads (%s)\n", workers_.size(),
                 threads, std::strerror(err));
}

WorkerPool::~WorkerPool() {
  shutdown();
}

void WorkerPool::enqueue(std::function<void()> fn) {
  if (workers_.empty()) {  // none could be started: serve on the accepting thread, slowly
    fn();
    return;
  }
  bool saturated;
  {
    std::lock_guard lock(mu_);
    saturated = busy_ + jobs_.size() >= workers_.size();
    jobs_.push_back(std::move(fn));
    publish_queued();
  }
  cv_.notify_one();
  if (saturated && on_saturated_) on_saturated_();
}

void WorkerPool::shutdown() {
  {
    std::lock_guard lock(mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  for (pthread_t t : workers_) pthread_join(t, nullptr);
}

void* WorkerPool::run(void* self) {
  static_cast<WorkerPool*>(self)->loop();
  return nullptr;
}

void WorkerPool::loop() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stop_ and nothing left
      job = std::move(jobs_.front());
      jobs_.pop_front();
      ++busy_;
      publish_queued();
    }
    job();
    std::lock_guard lock(mu_);
    --busy_;
    publish_queued();
  }
}

void WorkerPool::publish_queued() {
  if (!queued_) return;
  const size_t wanted = busy_ + jobs_.size();
  queued_->store(wanted > workers_.size() ? int64_t(wanted - workers_.size()) : 0);
}

}  // namespace mla::server
