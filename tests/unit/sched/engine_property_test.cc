// The engine under concurrent frontends: three threads submit requests with random prompt and
// output lengths at random times (pull and callback forms), a fourth cancels some at random
// times, into a pool too small for the load. Every step keeps the budget, max_num_seqs and the
// pool's invariants; every request ends (finished, or cancelled); the ones not cancelled match
// their single-request greedy reference (near-tie rule, engine_test_util.h); every page comes
// back. Written to run clean under ThreadSanitizer.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <thread>

#include "engine_test_util.h"

namespace mla::sched {
namespace {

struct Planned {
  std::vector<int32_t> prompt;
  int max_tokens = 0;
  int delay_us = 0;          // before submitting
  int cancel_after_us = -1;  // >= 0: cancelled this long after submit
  bool callback = false;
  test_util::Reference ref;
  std::shared_ptr<RequestStream> stream;
  RequestOutput out;
};

TEST(EngineProperty, ConcurrentArrivalsCancellationsAndPreemption) {
  Model& model = test_util::tiny_model();
  const int64_t V = model.config().vocab_size;
  std::mt19937 rng(2024);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const int kRequests = 24, kSubmitters = 3;
  std::vector<Planned> plan(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    Planned& p = plan[size_t(i)];
    // Half start with one of two shared 40-token prefixes, so prefix caching is exercised.
    if (i % 2 == 0) p.prompt = test_util::make_prompt(40, i % 4);
    const std::vector<int32_t> tail = test_util::make_prompt(uniform(1, 50), 100 + i);
    p.prompt.insert(p.prompt.end(), tail.begin(), tail.end());
    p.max_tokens = uniform(1, 30);
    p.delay_us = uniform(0, 3000);
    if (uniform(0, 3) == 0) p.cancel_after_us = uniform(0, 20000);
    p.callback = i % 3 == 0;
    p.ref = test_util::reference_greedy(model, p.prompt, p.max_tokens);
  }

  EngineOptions o;
  o.num_blocks = 14;  // 224 rows; one request needs at most 120
  o.page_size = 16;
  o.scheduler.max_num_batched_tokens = 32;
  o.scheduler.max_num_seqs = 6;
  o.scheduler.long_prefill_token_threshold = 20;
  std::atomic<int> steps{0}, violations{0};
  o.on_step = [&](const StepInfo& s) {  // engine thread
    ++steps;
    if (s.plan->num_tokens > 32 || s.running > 6) ++violations;
    for (const ScheduledChunk& c : s.plan->chunks)
      if (c.n_tokens > 20) ++violations;
    s.pool->check_consistency();
  };
  ThreadPool pool(test_util::kThreads);
  auto engine = Engine::create(model, o, nullptr, &pool);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  Engine& e = **engine;

  std::mutex out_mu;  // guards Planned::out of callback requests
  std::vector<std::thread> threads;
  std::vector<std::pair<RequestId, int>> cancels;  // (id, delay), filled before the canceller runs
  std::mutex cancels_mu;
  for (int t = 0; t < kSubmitters; ++t)
    threads.emplace_back([&, t] {
      for (int i = t; i < kRequests; i += kSubmitters) {
        Planned& p = plan[size_t(i)];
        std::this_thread::sleep_for(std::chrono::microseconds(p.delay_us));
        Request r;
        r.prompt = p.prompt;
        r.max_tokens = p.max_tokens;
        r.ignore_eos = true;
        EventCallback cb;
        if (p.callback)
          cb = [&p, &out_mu](const RequestEvent& ev) {
            std::lock_guard lock(out_mu);
            p.out.add(ev);
          };
        auto s = e.submit(std::move(r), cb);
        ASSERT_TRUE(s.ok()) << s.status().to_string();
        p.stream = *s;
        if (p.cancel_after_us >= 0) {
          std::lock_guard lock(cancels_mu);
          cancels.emplace_back((*s)->id(), p.cancel_after_us);
        }
      }
      for (int i = t; i < kRequests; i += kSubmitters)
        if (!plan[size_t(i)].callback) plan[size_t(i)].out = plan[size_t(i)].stream->collect();
    });
  std::thread canceller([&] {
    for (int round = 0; round < 40; ++round) {
      std::this_thread::sleep_for(std::chrono::microseconds(500));
      std::lock_guard lock(cancels_mu);
      for (auto& [id, delay] : cancels)
        if ((delay -= 500) < 0 && delay > -500) e.cancel(id);
    }
  });
  for (std::thread& th : threads) th.join();
  canceller.join();
  e.wait_idle();

  EXPECT_EQ(violations.load(), 0);
  EXPECT_GT(steps.load(), 0);
  int cancelled = 0, ties = 0;
  for (int i = 0; i < kRequests; ++i) {
    Planned& p = plan[size_t(i)];
    ASSERT_TRUE(p.stream->finished()) << i;
    RequestOutput out;
    {
      std::lock_guard lock(out_mu);
      out = p.out;
    }
    if (out.finish == FinishReason::kCancelled) {
      EXPECT_GE(p.cancel_after_us, 0) << i;
      ++cancelled;
      continue;
    }
    ASSERT_EQ(out.finish, FinishReason::kLength) << i << ": " << out.error;
    ASSERT_EQ(int(out.token_ids.size()), p.max_tokens) << i;
    ties += test_util::expect_greedy_match(out.token_ids, p.ref, V, "request " + std::to_string(i));
  }
  EXPECT_LE(ties, 2);
  const EngineMetrics m = e.metrics();
  int64_t ended = 0;
  for (int64_t n : m.request_success) ended += n;
  EXPECT_EQ(ended, kRequests);
  EXPECT_EQ(m.request_success[2], cancelled);
  EXPECT_GT(m.prefix_cache_hits, 0);
  EXPECT_EQ(m.num_requests_running + m.num_requests_waiting, 0);
  const BlockPoolStats st = e.cache_stats();
  EXPECT_EQ(st.pages_used, 0);
  EXPECT_EQ(st.pages_free + st.pages_cached_idle, o.num_blocks);
  std::printf("steps %d, cancelled %d, preemptions %lld, ties %d, prefix hits %lld tokens\n",
              steps.load(), cancelled, (long long)m.num_preemptions, ties,
              (long long)m.prefix_cache_hits);
}

}  // namespace
}  // namespace mla::sched
