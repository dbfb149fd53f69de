// WorkerPool's count of connections waiting for a worker: only those beyond the free workers, so
// the deadline watchdog sheds slow clients only while every worker is taken.
#include "server/worker_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace mla::server {
namespace {

// Jobs that hold their worker until release().
class Gate {
 public:
  void wait() {
    std::unique_lock lock(mu_);
    ++holding_;
    cv_.notify_all();
    cv_.wait(lock, [this] { return open_; });
  }
  void wait_holding(int n) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return holding_ >= n; });
  }
  void release() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int holding_ = 0;
  bool open_ = false;
};

TEST(WorkerPool, CountsOnlyTheConnectionsNoWorkerIsFreeFor) {
  std::atomic<int64_t> queued{-1};
  std::atomic<int> saturated{0};
  Gate gate;
  {
    WorkerPool pool(
        3, [&] { ++saturated; }, &queued);
    ASSERT_EQ(pool.started(), 3u);
    // Free workers: not waiting, even in the instant before a worker wakes to take the job.
    pool.enqueue([&] { gate.wait(); });
    EXPECT_EQ(queued.load(), 0);
    pool.enqueue([&] { gate.wait(); });
    pool.enqueue([&] { gate.wait(); });
    EXPECT_EQ(queued.load(), 0);
    EXPECT_EQ(saturated.load(), 0);
    gate.wait_holding(3);
    EXPECT_EQ(queued.load(), 0);
    // Every worker taken: the next two wait.
    pool.enqueue([&] { gate.wait(); });
    EXPECT_EQ(queued.load(), 1);
    pool.enqueue([&] {});
    EXPECT_EQ(queued.load(), 2);
    EXPECT_EQ(saturated.load(), 2);
    gate.release();
  }  // the destructor runs what is queued and joins
  EXPECT_EQ(queued.load(), 0);
}

}  // namespace
}  // namespace mla::server
