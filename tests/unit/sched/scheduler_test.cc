// The scheduler's step policy on hand-built cases, without a model: decode-first order, the
// token budget and the chunk threshold, LIFO recompute preemption with no admission in that step,
// prefix reuse on admission, refusal beside pinned prefixes, pinning.
#include "sched/scheduler.h"

#include <gtest/gtest.h>

#include <memory>
#include <numeric>

namespace mla::sched {
namespace {

std::vector<int32_t> iota_tokens(int n, int32_t first = 0) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

class SchedulerTest : public ::testing::Test {
 protected:
  void make(int32_t blocks, int page, SchedulerOptions o) {
    auto p = BlockPool::create(blocks, page);
    ASSERT_TRUE(p.ok());
    pool_ = std::make_unique<BlockPool>(std::move(*p));
    sched_ = std::make_unique<Scheduler>(o, pool_.get(), nullptr);
  }
  Sequence* add(std::vector<int32_t> prompt, int max_tokens) {
    const int64_t total = int64_t(prompt.size()) + max_tokens;
    seqs_.push_back(std::make_unique<Sequence>(RequestId(seqs_.size() + 1), std::move(prompt),
                                               total, pool_.get(), nullptr));
    sched_->add(seqs_.back().get());
    return seqs_.back().get();
  }
  // What the engine does after forward: every sequence whose chunk reached its end gets a token.
  void complete(const StepPlan& plan, int32_t token = 7) {
    sched_->on_step_done(plan);
    for (const ScheduledChunk& c : plan.chunks)
      if (c.seq->remaining() == 0) c.seq->tokens.push_back(token);
  }
  std::unique_ptr<BlockPool> pool_;
  std::unique_ptr<Scheduler> sched_;
  std::vector<std::unique_ptr<Sequence>> seqs_;
};

TEST_F(SchedulerTest, ChunksPrefillUnderTheBudgetAndThreshold) {
  SchedulerOptions o;
  o.max_num_batched_tokens = 10;
  o.long_prefill_token_threshold = 4;
  make(64, 4, o);
  Sequence* a = add(iota_tokens(9), 4);
  Sequence* b = add(iota_tokens(3, 100), 4);
  StepPlan p = sched_->schedule();
  ASSERT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(p.chunks[0].seq, a);
  EXPECT_EQ(p.chunks[0].n_tokens, 4);  // threshold
  EXPECT_EQ(p.chunks[1].seq, b);
  EXPECT_EQ(p.chunks[1].n_tokens, 3);
  EXPECT_EQ(p.num_tokens, 7);
  complete(p);  // b's prompt is done: it now decodes
  p = sched_->schedule();
  ASSERT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(p.chunks[0].seq, b);  // decodes first, although a was admitted first
  EXPECT_EQ(p.chunks[0].n_tokens, 1);
  EXPECT_EQ(p.chunks[1].seq, a);
  EXPECT_EQ(p.chunks[1].start, 4);
  EXPECT_EQ(p.chunks[1].n_tokens, 4);
}

TEST_F(SchedulerTest, BudgetAndMaxNumSeqsCapAdmission) {
  SchedulerOptions o;
  o.max_num_batched_tokens = 6;
  o.max_num_seqs = 2;
  make(64, 4, o);
  add(iota_tokens(4), 2);
  add(iota_tokens(4, 50), 2);
  add(iota_tokens(4, 90), 2);
  StepPlan p = sched_->schedule();
  ASSERT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(p.chunks[1].n_tokens, 2);  // what the budget left
  EXPECT_EQ(p.num_tokens, 6);
  EXPECT_EQ(sched_->num_running(), 2u);
  EXPECT_EQ(sched_->num_waiting(), 1u);
}

TEST_F(SchedulerTest, PreemptsTheLastAdmittedAndAdmitsNothingThatStep) {
  SchedulerOptions o;
  o.max_num_batched_tokens = 64;
  make(4, 4, o);  // 16 rows
  Sequence* a = add(iota_tokens(4), 8);
  Sequence* b = add(iota_tokens(4, 40), 8);
  Sequence* c = add(iota_tokens(4, 80), 8);
  StepPlan p = sched_->schedule();
  EXPECT_EQ(p.chunks.size(), 3u);  // 3 of 4 pages
  complete(p);
  // Each now needs a second page for its decode token; only one is left: c (last admitted) is
  // preempted to the head of the queue, then b takes the last page.
  Sequence* d = add(iota_tokens(2, 120), 1);
  p = sched_->schedule();
  ASSERT_EQ(p.preempted.size(), 1u);
  EXPECT_EQ(p.preempted[0], c);
  EXPECT_EQ(c->num_computed(), 0);
  EXPECT_EQ(c->num_preemptions, 1);
  ASSERT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(p.chunks[0].seq, a);
  EXPECT_EQ(p.chunks[1].seq, b);
  ASSERT_EQ(sched_->waiting().size(), 2u);
  EXPECT_EQ(sched_->waiting().front(), c);  // ahead of d, and d was not admitted this step
  EXPECT_EQ(sched_->waiting().back(), d);
  pool_->check_consistency();
}

TEST_F(SchedulerTest, ASequenceThatCannotGrowPreemptsItselfWhenItIsTheLast) {
  SchedulerOptions o;
  o.long_prefill_token_threshold = 4;
  make(2, 4, o);
  Sequence* a = add(iota_tokens(6), 2);      // prefills in chunks of 4
  Sequence* b = add(iota_tokens(4, 40), 1);  // one page, then a decode that needs a second
  StepPlan p = sched_->schedule();
  ASSERT_EQ(p.chunks.size(), 2u);
  complete(p);
  // Decodes go first, so b asks first; the victim is the last admitted, b itself. Then a's
  // chunk takes b's released page.
  p = sched_->schedule();
  ASSERT_EQ(p.preempted.size(), 1u);
  EXPECT_EQ(p.preempted[0], b);
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(p.chunks[0].seq, a);
  EXPECT_EQ(p.chunks[0].n_tokens, 2);
  EXPECT_EQ(sched_->waiting().front(), b);
}

TEST_F(SchedulerTest, AdmissionReusesTheCachedPrefixButComputesTheLastToken) {
  SchedulerOptions o;
  make(16, 4, o);
  Sequence* a = add(iota_tokens(8), 1);
  StepPlan p = sched_->schedule();
  complete(p);
  sched_->finish(a);  // its two full pages stay cached, idle
  Sequence* b = add(iota_tokens(8), 1);
  p = sched_->schedule();
  ASSERT_EQ(p.chunks.size(), 1u);
  // Pages [0,4) hit; [4,8) would too, but token 7 must run for logits, so only 4 are served.
  EXPECT_EQ(b->cached_tokens, 4);
  EXPECT_EQ(p.chunks[0].start, 4);
  EXPECT_EQ(p.chunks[0].n_tokens, 4);
  EXPECT_EQ(p.prefix_hit_tokens, 4);
  EXPECT_EQ(p.prefix_queried_tokens, 8);
  Sequence* c = add(iota_tokens(9), 1);
  complete(p);
  p = sched_->schedule();
  EXPECT_EQ(c->cached_tokens, 8);
}

TEST_F(SchedulerTest, PinnedPagesStayAndShrinkWhatFits) {
  SchedulerOptions o;
  make(4, 4, o);
  Sequence* pin = add(iota_tokens(6), 0);
  StepPlan p = sched_->schedule();
  sched_->on_step_done(p);
  sched_->pin(pin);  // keeps one full page; the partial one is released
  EXPECT_EQ(pin->blocks.block_table().size(), 1u);
  EXPECT_EQ(sched_->usable_blocks(), 3);
  Sequence* big = add(iota_tokens(10, 50), 4);  // 14 tokens: 4 pages > 3 usable
  Sequence* ok = add(iota_tokens(4), 8);        // 12 tokens: 3 pages, one shared with the pin
  p = sched_->schedule();
  ASSERT_EQ(p.refused.size(), 1u);
  EXPECT_EQ(p.refused[0], big);
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(p.chunks[0].seq, ok);
  EXPECT_EQ(ok->cached_tokens, 0);  // a 4-token prompt: its only page holds the last token
  sched_->finish(ok);
  sched_->unpin(pin);
  EXPECT_EQ(sched_->usable_blocks(), 4);
  EXPECT_EQ(pool_->stats().pages_used, 0);
  pool_->check_consistency();
}

}  // namespace
}  // namespace mla::sched
