// Random workloads through the scheduler with a simulated model (no forward: the "sampled" token
// is a hash of the sequence so far, so a recomputed sequence continues exactly as before). Per
// step: the budget and max_num_seqs hold, chunks continue where the cache ends, nothing is
// admitted in a step that preempted, pinned pages stay cached, the pool is consistent. At the
// end: every request finished or was cancelled (preempted ones resumed), every page came back.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <set>

#include "sched/scheduler.h"

namespace mla::sched {
namespace {

struct SimRequest {
  std::unique_ptr<Sequence> seq;
  int max_tokens = 0;
  int generated = 0;
  bool done = false, cancelled = false;
  std::vector<int32_t> expected;  // what an uninterrupted run generates
};

// The simulated model: the next token depends on every token so far.
int32_t next_token(const std::vector<int32_t>& tokens) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : tokens) h = (h ^ uint64_t(t)) * 1099511628211ull;
  return int32_t(h % 50);
}

std::vector<int32_t> uninterrupted(std::vector<int32_t> tokens, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(next_token(tokens));
    tokens.push_back(out.back());
  }
  return out;
}

struct Case {
  uint64_t seed;
  int32_t blocks;
  int page;
  int budget, max_seqs, threshold;
  bool prefix_caching;
};

class SchedulerProperty : public ::testing::TestWithParam<Case> {};

TEST_P(SchedulerProperty, RandomArrivalsLengthsAndCancellations) {
  const Case k = GetParam();
  std::mt19937_64 rng(k.seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto pool = BlockPool::create(k.blocks, k.page);
  ASSERT_TRUE(pool.ok());
  SchedulerOptions o;
  o.max_num_batched_tokens = k.budget;
  o.max_num_seqs = k.max_seqs;
  o.long_prefill_token_threshold = k.threshold;
  o.enable_prefix_caching = k.prefix_caching;
  Scheduler s(o, &*pool, nullptr);
  const int capacity = k.blocks * k.page;

  // A pinned prefix of two pages, filled first: it must stay cached through everything.
  std::vector<int32_t> system(size_t(2 * k.page));
  for (auto& t : system) t = int32_t(uniform(0, 49));
  Sequence pin(0, system, int64_t(system.size()), &*pool, nullptr);
  s.add(&pin);
  while (pin.remaining() > 0) s.on_step_done(s.schedule());
  s.pin(&pin);
  const std::vector<BlockId> pinned(pin.blocks.block_table().begin(),
                                    pin.blocks.block_table().end());

  std::vector<SimRequest> reqs;
  reqs.reserve(400);
  int steps = 0, preemptions = 0, hits = 0;
  for (; steps < 40000; ++steps) {
    const bool arrivals = steps < 300;
    for (int a = arrivals ? uniform(0, 2) : 0; a > 0 && reqs.size() < 400; --a) {
      SimRequest r;
      std::vector<int32_t> prompt;
      if (uniform(0, 1) == 0) prompt = system;  // shares the pinned prefix
      for (int n = uniform(1, 3 * k.page); n > 0; --n) prompt.push_back(int32_t(uniform(0, 49)));
      r.max_tokens = uniform(1, 4 * k.page);
      if (int(prompt.size()) + r.max_tokens > capacity - int(pinned.size()) * k.page) continue;
      r.expected = uninterrupted(prompt, r.max_tokens);
      const int64_t total = int64_t(prompt.size()) + r.max_tokens;
      r.seq =
          std::make_unique<Sequence>(reqs.size() + 1, std::move(prompt), total, &*pool, nullptr);
      s.add(r.seq.get());
      reqs.push_back(std::move(r));
    }
    if (uniform(0, 9) == 0 && !reqs.empty()) {  // cancel anything, in any state
      SimRequest& r = reqs[size_t(uniform(0, int(reqs.size()) - 1))];
      if (!r.done) {
        s.finish(r.seq.get());
        r.done = r.cancelled = true;
      }
    }
    std::set<Sequence*> was_waiting(s.waiting().begin(), s.waiting().end());
    StepPlan plan = s.schedule();
    ASSERT_TRUE(plan.refused.empty());  // everything was sized to fit beside the pin
    ASSERT_LE(plan.num_tokens, k.budget);
    ASSERT_LE(int(s.num_running()), k.max_seqs);
    int sum = 0;
    std::set<Sequence*> in_plan;
    for (const ScheduledChunk& c : plan.chunks) {
      ASSERT_TRUE(in_plan.insert(c.seq).second) << "a sequence twice in one step";
      ASSERT_GE(c.n_tokens, 1);
      if (k.threshold > 0) ASSERT_LE(c.n_tokens, k.threshold);
      ASSERT_EQ(c.start + c.n_tokens, c.seq->num_computed());
      if (!plan.preempted.empty())
        ASSERT_EQ(was_waiting.count(c.seq), 0u) << "admitted in a "
                                                   "preempting step";
      sum += c.n_tokens;
    }
    ASSERT_EQ(sum, plan.num_tokens);
    for (Sequence* p : plan.preempted) {
      ASSERT_EQ(in_plan.count(p), 0u);
      ASSERT_EQ(p->num_computed(), 0);
    }
    preemptions += int(plan.preempted.size());
    hits += plan.prefix_hit_tokens > 0;
    s.on_step_done(plan);
    for (const ScheduledChunk& c : plan.chunks) {
      Sequence* q = c.seq;
      if (q->remaining() > 0) continue;
      SimRequest& r = reqs[q->id - 1];
      q->tokens.push_back(next_token(q->tokens));
      if (++r.generated == r.max_tokens) {
        s.finish(q);
        r.done = true;
      }
    }
    pool->check_consistency();
    if (k.prefix_caching)
      for (BlockId b : pinned) ASSERT_TRUE(s.prefix_cache()->holds(b)) << "pinned page evicted";
    if (!arrivals && s.num_running() + s.num_waiting() == 0) break;
  }
  ASSERT_EQ(s.num_running() + s.num_waiting(), 0u) << "not drained after " << steps << " steps";
  int finished = 0;
  for (SimRequest& r : reqs) {
    ASSERT_TRUE(r.done);
    if (r.cancelled) continue;
    ++finished;
    // Preempted and recomputed sequences continue exactly as an uninterrupted run.
    std::vector<int32_t> got(r.seq->tokens.end() - r.max_tokens, r.seq->tokens.end());
    EXPECT_EQ(got, r.expected) << "request " << r.seq->id;
  }
  EXPECT_GT(finished, 20);
  std::printf("steps %d, requests %zu, finished %d, preemptions %d, steps with hits %d\n", steps,
              reqs.size(), finished, preemptions, hits);
  if (k.max_seqs > 1)  // one sequence alone always fits: it is never preempted
    EXPECT_GT(preemptions, 0) << "the pool was meant to be too small for the load";
  if (k.prefix_caching) EXPECT_GT(hits, 0);
  s.unpin(&pin);
  const BlockPoolStats st = pool->stats();
  EXPECT_EQ(st.pages_used, 0);
  EXPECT_EQ(st.pages_free + st.pages_cached_idle, k.blocks);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, SchedulerProperty,
    ::testing::Values(Case{1, 24, 4, 32, 8, 0, true}, Case{2, 24, 4, 16, 16, 5, true},
                      Case{3, 40, 8, 64, 6, 0, false}, Case{4, 12, 4, 9, 4, 3, true},
                      Case{5, 20, 2, 7, 32, 0, true}, Case{6, 30, 16, 128, 64, 24, true},
                      Case{7, 16, 8, 1, 1, 0, true}));

}  // namespace
}  // namespace mla::sched
