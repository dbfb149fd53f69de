// Scheduler: budgeted step planning, recompute preemption, prefix reuse on admission, pinning.
#include "sched/scheduler.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/check.h"

namespace mla::sched {

Status validate(const SchedulerOptions& o) {
  if (o.max_num_batched_tokens < 1)
    return invalid_argument(
        fmt::format("max_num_batched_tokens is {}, must be >= 1", o.max_num_batched_tokens));
  if (o.max_num_seqs < 1)
    return invalid_argument(fmt::format("max_num_seqs is {}, must be >= 1", o.max_num_seqs));
  if (o.long_prefill_token_threshold < 0)
    return invalid_argument(fmt::format("long_prefill_token_threshold is {}, must be >= 0",
                                        o.long_prefill_token_threshold));
  return Status();
}

Sequence::Sequence(RequestId id_, std::vector<int32_t> prompt, int64_t max_total_, BlockPool* pool,
                   KvCacheStorage* storage)
    : id(id_),
      tokens(std::move(prompt)),
      prompt_len(int64_t(tokens.size())),
      max_total(max_total_),
      blocks(pool, storage) {}

Scheduler::Scheduler(const SchedulerOptions& options, BlockPool* pool, KvCacheStorage* storage,
                     PrefixCacheOptions prefix_options)
    : options_(options), pool_(pool), storage_(storage) {
  MLA_CHECK(validate(options).ok(), "{}", validate(options).message());
  // Every running sequence must be able to take one decode token per step (vLLM clamps too).
  options_.max_num_seqs = std::min(options_.max_num_seqs, options_.max_num_batched_tokens);
  if (options_.enable_prefix_caching)
    prefix_ = std::make_unique<PrefixCache>(pool_, prefix_options);
  pinned_refs_.assign(size_t(pool_->num_blocks()), 0);
}

int32_t Scheduler::blocks_for(int64_t n) const {
  return int32_t((n + pool_->page_size() - 1) / pool_->page_size());
}

int32_t Scheduler::usable_blocks() const {
  return pool_->num_blocks() - pinned_blocks_;
}

void Scheduler::add(Sequence* seq) {
  waiting_.push_back(seq);
}

void Scheduler::add_fork(Sequence* child, Sequence* parent) {
  MLA_CHECK(parent->remaining() == 0 && child->blocks.num_tokens() == 0,
            "add_fork: the parent has {} tokens to compute, the child {} rows", parent->remaining(),
            child->blocks.num_tokens());
  child->tokens = parent->tokens;
  child->blocks = parent->blocks.fork();
  child->admitted_once = true;
  child->cached_tokens = parent->num_computed();  // every row came from the parent
  MLA_CHECK(parent->pending_forks > 0, "add_fork: sequence {} has no fork slot left", parent->id);
  --parent->pending_forks;
  running_.push_back(child);
}

void Scheduler::finish(Sequence* seq) {
  if (auto it = std::find(running_.begin(), running_.end(), seq); it != running_.end())
    running_.erase(it);
  if (auto it = std::find(waiting_.begin(), waiting_.end(), seq); it != waiting_.end())
    waiting_.erase(it);
  seq->blocks.release();
}

bool Scheduler::reserve(Sequence* seq, int n) {
  const std::span<const int32_t> next =
      std::span<const int32_t>(seq->tokens).subspan(size_t(seq->num_computed()), size_t(n));
  return seq->blocks.append(next) == PoolOutcome::kOk;
}

int Scheduler::chunk_size(const Sequence& seq, int budget) const {
  int64_t n = std::min<int64_t>(seq.remaining(), budget);
  if (options_.long_prefill_token_threshold > 0)
    n = std::min<int64_t>(n, options_.long_prefill_token_threshold);
  return int(n);
}

void Scheduler::preempt(Sequence* victim, StepPlan* plan) {
  running_.erase(std::find(running_.begin(), running_.end(), victim));
  auto planned = std::find_if(plan->chunks.begin(), plan->chunks.end(),
                              [&](const ScheduledChunk& c) { return c.seq == victim; });
  if (planned != plan->chunks.end()) {
    plan->num_tokens -= planned->n_tokens;
    plan->chunks.erase(planned);
  }
  // Recompute: the full blocks stay in the prefix cache (idle, LRU), so resuming often hits.
  victim->blocks.release();
  ++victim->num_preemptions;
  waiting_.push_front(victim);
  plan->preempted.push_back(victim);
}

bool Scheduler::admit(Sequence* seq, int budget, StepPlan* plan) {
  MLA_CHECK(seq->num_computed() == 0, "waiting sequence {} holds {} rows", seq->id,
            seq->num_computed());
  int64_t hit = 0;
  if (prefix_ && !seq->skip_prefix_cache) {
    const std::span<const int32_t> all(seq->tokens);
    hit = prefix_->acquire(all.first(all.size() - 1), &seq->blocks);
  }
  const int n = chunk_size(*seq, budget);
  if (!reserve(seq, n)) {
    seq->blocks.release();
    return false;
  }
  if (!seq->admitted_once) {
    seq->admitted_once = true;
    seq->cached_tokens = hit;
  }
  plan->prefix_queried_tokens += int64_t(seq->tokens.size());
  plan->prefix_hit_tokens += hit;
  plan->chunks.push_back({seq, seq->num_computed() - n, n});
  plan->num_tokens += n;
  return true;
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  const int max_tokens = options_.max_num_batched_tokens;
  std::vector<Sequence*> order;
  for (Sequence* s : running_) {
    MLA_CHECK(s->remaining() >= 1, "running sequence {} has nothing to compute", s->id);
    if (s->remaining() == 1) order.push_back(s);
  }
  for (Sequence* s : running_)
    if (s->remaining() != 1) order.push_back(s);

  for (Sequence* seq : order) {
    if (plan.num_tokens == max_tokens) break;
    if (std::find(running_.begin(), running_.end(), seq) == running_.end()) continue;  // preempted
    const int n = chunk_size(*seq, max_tokens - plan.num_tokens);
    bool reserved = true;
    while (!reserve(seq, n)) {
      Sequence* victim = running_.back();
      preempt(victim, &plan);
      if (victim == seq) {
        reserved = false;
        break;
      }
    }
    if (!reserved) continue;
    plan.chunks.push_back({seq, seq->num_computed() - n, n});
    plan.num_tokens += n;
  }

  // Running slots: the running sequences and the forks their prompts will have.
  int64_t slots = int64_t(running_.size());
  for (const Sequence* s : running_) slots += s->pending_forks;
  if (plan.preempted.empty()) {
    while (!waiting_.empty() && plan.num_tokens < max_tokens) {
      Sequence* seq = waiting_.front();
      if (slots + 1 + seq->pending_forks > options_.max_num_seqs) break;
      if (blocks_for(seq->max_total) > usable_blocks()) {
        waiting_.pop_front();
        plan.refused.push_back(seq);
        continue;
      }
      if (!admit(seq, max_tokens - plan.num_tokens, &plan)) break;
      waiting_.pop_front();
      running_.push_back(seq);
      slots += 1 + seq->pending_forks;
    }
  }
  MLA_CHECK(plan.num_tokens <= max_tokens && slots <= options_.max_num_seqs,
            "step of {} tokens, {} running and forks to come", plan.num_tokens, slots);
  return plan;
}

void Scheduler::on_step_done(const StepPlan& plan) {
  if (!prefix_) return;
  for (const ScheduledChunk& c : plan.chunks) prefix_->insert(&c.seq->blocks);
}

void Scheduler::pin(Sequence* seq) {
  auto it = std::find(running_.begin(), running_.end(), seq);
  MLA_CHECK(it != running_.end() && seq->remaining() == 0, "pin of sequence {} not computed",
            seq->id);
  running_.erase(it);
  const int64_t p = pool_->page_size();
  seq->blocks.truncate(seq->num_computed() / p * p);
  for (BlockId b : seq->blocks.block_table())
    if (pinned_refs_[size_t(b)]++ == 0) ++pinned_blocks_;
  pinned_.push_back(seq);
}

void Scheduler::unpin(Sequence* seq) {
  auto it = std::find(pinned_.begin(), pinned_.end(), seq);
  MLA_CHECK(it != pinned_.end(), "unpin of sequence {} not pinned", seq->id);
  pinned_.erase(it);
  for (BlockId b : seq->blocks.block_table())
    if (--pinned_refs_[size_t(b)] == 0) --pinned_blocks_;
  seq->blocks.release();
}

}  // namespace mla::sched
