// n samples of one prompt (Engine::submit_n): the prompt is computed once, the other samples
// fork its pages (copy-on-write) and each samples with seed + i, so sample i equals a request of
// its own with that seed; cancelling a sample, or the prompt, before the fork.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>

#include "engine_test_util.h"

namespace mla::sched {
namespace {

using test_util::make_prompt;
using test_util::tiny_model;

std::unique_ptr<Engine> start(ThreadPool& pool, EngineOptions o = {}) {
  o.num_blocks = 64;
  o.page_size = 16;
  auto e = Engine::create(tiny_model(), o, nullptr, &pool);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return e.ok() ? std::move(*e) : nullptr;
}

Request sampled(std::vector<int32_t> prompt, uint64_t seed, int max_tokens) {
  Request r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.sampling.temperature = 0.9f;
  r.sampling.seed = seed;
  return r;
}

TEST(EngineFork, SampleIEqualsItsOwnRequestWithSeedPlusI) {
  ThreadPool pool(test_util::kThreads);
  int32_t most_pages = 0;
  EngineOptions o;
  o.on_step = [&](const StepInfo& s) {
    most_pages = std::max(most_pages, s.pool->stats().pages_used);
  };
  auto e = start(pool, o);
  const std::vector<int32_t> prompt = make_prompt(40, 3);  // 2 full pages of 16 and a partial one
  auto streams = e->submit_n(sampled(prompt, 7, 8), 4);
  ASSERT_TRUE(streams.ok()) << streams.status().to_string();
  ASSERT_EQ(streams->size(), 4u);
  std::vector<RequestOutput> outs;
  for (auto& s : *streams) outs.push_back(s->collect());
  // The prompt was computed once: its tokens are counted once, and the samples held at most the
  // 2 shared full pages plus each its own copy of the third (8 new tokens fit in it): 6 pages,
  // where 4 separate requests would hold 12.
  EXPECT_EQ(e->metrics().prompt_tokens, 40);
  EXPECT_LE(most_pages, 6);
  int distinct = 0;
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(outs[size_t(i)].finish, FinishReason::kLength);
    ASSERT_EQ(outs[size_t(i)].token_ids.size(), 8u);
    EXPECT_EQ(outs[size_t(i)].usage.prompt_tokens, 40);
    EXPECT_EQ(outs[size_t(i)].usage.cached_tokens, i == 0 ? 0 : 40);
    distinct += i > 0 && outs[size_t(i)].token_ids != outs[0].token_ids;
    // Alone, one at a time (FP32 products: the same logits up to summation order).
    auto alone = e->submit(sampled(prompt, 7 + uint64_t(i), 8));
    ASSERT_TRUE(alone.ok());
    EXPECT_EQ((*alone)->collect().token_ids, outs[size_t(i)].token_ids) << "sample " << i;
  }
  EXPECT_GT(distinct, 0) << "every sample drew the same tokens: the seeds are not per sample";
  EXPECT_EQ(e->cache_stats().pages_used, 0);
}

TEST(EngineFork, GreedySamplesAreTheGreedyReply) {
  ThreadPool pool(test_util::kThreads);
  auto e = start(pool);
  const std::vector<int32_t> prompt = make_prompt(21, 5);
  Request r;
  r.prompt = prompt;
  r.max_tokens = 12;
  r.ignore_eos = true;
  auto streams = e->submit_n(r, 3);
  ASSERT_TRUE(streams.ok());
  const test_util::Reference ref = test_util::reference_greedy(tiny_model(), prompt, 12);
  for (auto& s : *streams)
    test_util::expect_greedy_match(s->collect().token_ids, ref, tiny_model().config().vocab_size,
                                   "greedy sample");
}

TEST(EngineFork, CancellingASampleOrThePromptBeforeTheFork) {
  // A token budget of 16 computes the 40-token prompt in 3 steps; the first step waits until the
  // test has asked for its cancels, which the engine takes before the second.
  ThreadPool pool(test_util::kThreads);
  std::mutex mu;
  std::condition_variable cv;
  bool go = false;
  EngineOptions o;
  o.scheduler.max_num_batched_tokens = 16;
  o.before_forward = [&](const StepPlan&) {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return go; });
    return Status();
  };
  auto e = start(pool, o);
  auto release = [&] {
    std::lock_guard lock(mu);
    go = true;
    cv.notify_all();
  };
  // A sample cancelled before the fork ends alone, with no tokens; the others run.
  auto a = e->submit_n(sampled(make_prompt(40, 8), 1, 6), 3);
  ASSERT_TRUE(a.ok());
  (*a)[2]->cancel();
  release();
  const RequestOutput a0 = (*a)[0]->collect(), a1 = (*a)[1]->collect(), a2 = (*a)[2]->collect();
  EXPECT_EQ(a2.finish, FinishReason::kCancelled);
  EXPECT_TRUE(a2.token_ids.empty());
  EXPECT_EQ(a0.finish, FinishReason::kLength);
  EXPECT_EQ(a1.finish, FinishReason::kLength);
  // The prompt's request cancelled before the fork takes the samples it carries with it.
  {
    std::lock_guard lock(mu);
    go = false;
  }
  auto b = e->submit_n(sampled(make_prompt(40, 9), 1, 6), 3);
  ASSERT_TRUE(b.ok());
  (*b)[0]->cancel();
  release();
  for (auto& s : *b) {
    const RequestOutput out = s->collect();
    EXPECT_EQ(out.finish, FinishReason::kCancelled);
    EXPECT_TRUE(out.token_ids.empty());
  }
  e->wait_idle();
  EXPECT_EQ(e->cache_stats().pages_used, 0);
}

TEST(EngineFork, AdmissionKeepsASlotForEverySample) {
  // max_num_seqs 4: two single requests run, so n = 3 waits until it has 3 slots (its forks
  // must never take running past the limit: the scheduler checks it every step), then runs.
  ThreadPool pool(test_util::kThreads);
  EngineOptions o;
  o.scheduler.max_num_seqs = 4;
  size_t most_running = 0;
  o.on_step = [&](const StepInfo& s) { most_running = std::max(most_running, s.running); };
  auto e = start(pool, o);
  auto a = e->submit(sampled(make_prompt(12, 1), 1, 20));
  auto b = e->submit(sampled(make_prompt(13, 2), 2, 20));
  auto c = e->submit_n(sampled(make_prompt(14, 3), 3, 6), 3);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  for (auto& s : *c) EXPECT_EQ(s->collect().finish, FinishReason::kLength);
  EXPECT_EQ((*a)->collect().finish, FinishReason::kLength);
  EXPECT_EQ((*b)->collect().finish, FinishReason::kLength);
  EXPECT_LE(most_running, 4u);
  // More samples than the engine ever runs at once can never start: refused.
  auto too_many = e->submit_n(sampled(make_prompt(5, 4), 1, 4), 5);
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("max_num_seqs"), std::string::npos);
}

TEST(EngineFork, NOutsideItsRangeIsRefused) {
  ThreadPool pool(test_util::kThreads);
  auto e = start(pool);
  for (int n : {0, -1, kMaxSamplesPerPrompt + 1}) {
    auto s = e->submit_n(sampled(make_prompt(5, 1), 1, 4), n);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace mla::sched
