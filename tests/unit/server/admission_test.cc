// The 429 admission of completion requests (HttpServer::State::admit): the limit counts engine
// sequences (one per prompt), and the check and the count are one atomic step.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "server/server_state.h"

namespace mla::server {
namespace {

TEST(Admission, CountsEveryPromptAndRefusesPastTheLimit) {
  HttpServer::State st{ServerOptions{}};
  std::shared_ptr<void> three = st.admit(std::make_shared<CompletionJob>(), 3, 4);
  ASSERT_TRUE(three);
  EXPECT_EQ(st.in_flight.load(), 1);
  EXPECT_EQ(st.admitted_seqs.load(), 3);
  EXPECT_FALSE(st.admit(std::make_shared<CompletionJob>(), 2, 4));  // 3 + 2 > 4
  EXPECT_EQ(st.admitted_seqs.load(), 3);                            // a refusal counts nothing
  std::shared_ptr<void> one = st.admit(std::make_shared<CompletionJob>(), 1, 4);
  ASSERT_TRUE(one);
  EXPECT_FALSE(st.admit(std::make_shared<CompletionJob>(), 1, 4));
  three.reset();
  EXPECT_EQ(st.in_flight.load(), 1);
  EXPECT_EQ(st.admitted_seqs.load(), 1);
  EXPECT_TRUE(st.admit(std::make_shared<CompletionJob>(), 3, 4));
  one.reset();
  EXPECT_EQ(st.admitted_seqs.load(), 0);
}

TEST(Admission, RacingRequestsNeverHoldMoreThanTheLimit) {
  // Threads admit and release single-prompt jobs as fast as they can; each holder counts itself
  // in `live`. A check separate from the increment lets two threads take the last slot together.
  constexpr int kLimit = 3, kThreads = 8, kRounds = 20000;
  HttpServer::State st{ServerOptions{}};
  std::atomic<int> live{0}, most{0}, admitted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      auto job = std::make_shared<CompletionJob>();
      for (int r = 0; r < kRounds; ++r) {
        std::shared_ptr<void> token = st.admit(job, 1, kLimit);
        if (!token) continue;
        const int now = live.fetch_add(1) + 1;
        int seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        admitted.fetch_add(1);
        live.fetch_sub(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_LE(most.load(), kLimit);
  EXPECT_GT(admitted.load(), 0);
  EXPECT_EQ(st.admitted_seqs.load(), 0);
  EXPECT_EQ(st.in_flight.load(), 0);
}

}  // namespace
}  // namespace mla::server
