// Tests of ThreadPool::parallel_for: coverage, thread indices, back-to-back loops, shutdown.
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace mla {
namespace {

// Runs one loop of n items and checks that each index ran exactly once on a valid thread index.
void expect_each_item_once(ThreadPool& pool, int64_t n) {
  std::vector<std::atomic<int>> hits(size_t(n > 0 ? n : 0));
  std::atomic<int64_t> out_of_range{0}, bad_thread{0};
  const int threads = pool.num_threads();
  pool.parallel_for(n, [&](int64_t i, int t) {
    if (i < 0 || i >= n) {
      out_of_range.fetch_add(1);
    } else {
      hits[size_t(i)].fetch_add(1, std::memory_order_relaxed);
    }
    if (t < 0 || t >= threads) bad_thread.fetch_add(1);
  });
  EXPECT_EQ(out_of_range.load(), 0) << "n=" << n;
  EXPECT_EQ(bad_thread.load(), 0) << "n=" << n;
  int64_t wrong = 0, first_wrong = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (hits[size_t(i)].load() != 1) {
      if (first_wrong < 0) first_wrong = i;
      ++wrong;
    }
  }
  EXPECT_EQ(wrong, 0) << "n=" << n << ", first item not run exactly once: " << first_wrong;
}

class ThreadPoolSizes : public ::testing::TestWithParam<int> {};

TEST_P(ThreadPoolSizes, ReportsItsSize) {
  ThreadPool pool(GetParam());
  EXPECT_EQ(pool.num_threads(), GetParam());
}

TEST_P(ThreadPoolSizes, RunsEveryItemExactlyOnce) {
  ThreadPool pool(GetParam());
  for (int64_t n : {0, 1, 2, 3, 7, 1000, 100000}) expect_each_item_once(pool, n);
}

TEST_P(ThreadPoolSizes, NonPositiveCountRunsNothing) {
  ThreadPool pool(GetParam());
  std::atomic<int> calls{0};
  for (int64_t n : {0, -1, -1000}) pool.parallel_for(n, [&](int64_t, int) { calls.fetch_add(1); });
  EXPECT_EQ(calls.load(), 0);
}

TEST_P(ThreadPoolSizes, EachThreadIndexIsOneThreadAndZeroIsTheCaller) {
  ThreadPool pool(GetParam());
  const std::thread::id caller = std::this_thread::get_id();
  std::mutex mu;
  std::map<int, std::thread::id> owner;
  int conflicts = 0;
  // Items sleep briefly so that the workers get a share even on a busy machine.
  pool.parallel_for(200, [&](int64_t, int t) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    std::lock_guard<std::mutex> lock(mu);
    const auto [it, inserted] = owner.emplace(t, std::this_thread::get_id());
    if (!inserted && it->second != std::this_thread::get_id()) ++conflicts;
  });
  EXPECT_EQ(conflicts, 0);
  for (const auto& [t, id] : owner) EXPECT_EQ(t == 0, id == caller) << "thread index " << t;
}

TEST_P(ThreadPoolSizes, ManySmallLoopsInARow) {
  // Back-to-back loops stress the generation handshake: a worker that wakes late must neither
  // miss a loop nor run one twice, and parallel_for must not return early or hang.
  ThreadPool pool(GetParam());
  std::vector<std::atomic<int64_t>> sums(10000);
  for (int loop = 0; loop < 10000; ++loop) {
    const int64_t n = loop % 9;
    pool.parallel_for(n, [&](int64_t i, int) { sums[size_t(loop)].fetch_add(i + 1); });
  }
  int64_t wrong = 0;
  for (int loop = 0; loop < 10000; ++loop) {
    const int64_t n = loop % 9;
    wrong += sums[size_t(loop)].load() != n * (n + 1) / 2;
  }
  EXPECT_EQ(wrong, 0);
}

TEST_P(ThreadPoolSizes, UnevenItemCosts) {
  // A few items are several thousand times dearer than the rest; the shared counter must still
  // hand out every item once, and each result must be the one computed serially.
  ThreadPool pool(GetParam());
  constexpr int64_t kN = 4096;
  auto cost = [](int64_t i) { return i % 509 == 0 ? 200000 : 20 + i % 7; };
  auto work = [](int64_t i, int64_t iters) {
    double acc = double(i);
    for (int64_t k = 0; k < iters; ++k) acc = std::sqrt(acc + double(k));
    return acc;
  };
  std::vector<double> got(kN, -1.0);
  std::vector<std::atomic<int>> hits(kN);
  pool.parallel_for(kN, [&](int64_t i, int) {
    hits[size_t(i)].fetch_add(1);
    got[size_t(i)] = work(i, cost(i));
  });
  for (int64_t i = 0; i < kN; ++i) {
    ASSERT_EQ(hits[size_t(i)].load(), 1) << i;
    ASSERT_EQ(got[size_t(i)], work(i, cost(i))) << i;
  }
}

TEST_P(ThreadPoolSizes, SleepingItemsDoNotStallTheLoop) {
  ThreadPool pool(GetParam());
  std::atomic<int> done{0};
  pool.parallel_for(64, [&](int64_t i, int) {
    if (i % 16 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    done.fetch_add(1);
  });
  EXPECT_EQ(done.load(), 64);
}

TEST_P(ThreadPoolSizes, DestroysWhileIdle) {
  // Never used, used then idle long enough for the workers to sleep, and destroyed right after a
  // loop (workers may still be between finishing and waiting): all must join without hanging.
  for (int rep = 0; rep < 20; ++rep) {
    ThreadPool pool(GetParam());
  }
  {
    ThreadPool pool(GetParam());
    expect_each_item_once(pool, 100);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int rep = 0; rep < 20; ++rep) {
    ThreadPool pool(GetParam());
    expect_each_item_once(pool, 50);
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, ThreadPoolSizes, ::testing::Values(1, 2, 3, 8),
                         [](const auto& info) { return std::to_string(info.param); });

TEST(ThreadPool, OneThreadRunsOnTheCaller) {
  ThreadPool pool(1);
  const std::thread::id caller = std::this_thread::get_id();
  int on_caller = 0;  // plain int: with one thread there is no other writer
  pool.parallel_for(
      100, [&](int64_t, int t) { on_caller += std::this_thread::get_id() == caller && t == 0; });
  EXPECT_EQ(on_caller, 100);
}

TEST(ThreadPool, SeparatePoolsRunConcurrently) {
  // Pools share no state: two driven from two threads at once must both be complete.
  ThreadPool a(3), b(3);
  std::thread ta([&] {
    for (int i = 0; i < 200; ++i) expect_each_item_once(a, 257);
  });
  std::thread tb([&] {
    for (int i = 0; i < 200; ++i) expect_each_item_once(b, 129);
  });
  ta.join();
  tb.join();
}

TEST(DefaultThreadPool, IsOneObjectWithAtLeastOneThread) {
  ThreadPool& p = default_thread_pool();
  EXPECT_GE(p.num_threads(), 1);
  EXPECT_EQ(&p, &default_thread_pool());
  expect_each_item_once(p, 1000);
}

// The pool is sized at first use, so the environment is set in a fresh process (the "threadsafe"
// death test style re-runs this binary, whose default pool has not been created yet).
void expect_default_pool_size(const char* env, int want) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("MLA_NUM_THREADS", env, 1);
        std::_Exit(default_thread_pool().num_threads() == want ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "")
      << "MLA_NUM_THREADS=" << env;
}

TEST(DefaultThreadPool, HonoursMlaNumThreads) {
  expect_default_pool_size("3", 3);
  expect_default_pool_size("1", 1);
}

TEST(DefaultThreadPool, IgnoresInvalidMlaNumThreads) {
  const unsigned hc = std::thread::hardware_concurrency();
  const int fallback = hc ? int(hc) : 1;
  for (const char* env : {"0", "-2", "abc", "3x", "", "100000"})
    expect_default_pool_size(env, fallback);
}

}  // namespace
}  // namespace mla
