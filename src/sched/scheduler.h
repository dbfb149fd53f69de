// Scheduler: the step policy of continuous batching over one paged KV pool (docs/ARCHITECTURE.md
// §Serving engine): a token budget per step, running sequences first (decodes, then unfinished
// prefills), waiting ones fill what is left in chunks; recompute preemption of the most recently
// admitted sequence when the pool runs out; prefix-cache reuse on admission; pinned prefixes.
// Decides and reserves cache rows only: running the model and sampling are the engine's. Not
// thread-safe: the engine thread owns it.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "cache/block_pool.h"
#include "cache/kv_cache_storage.h"
#include "cache/prefix_cache.h"
#include "cache/sequence_blocks.h"
#include "sched/request.h"

namespace mla::sched {

struct SchedulerOptions {
  int max_num_batched_tokens = 2048;     // tokens per step (the budget), over all sequences
  int max_num_seqs = 128;                // running sequences; clamped to the budget
  int long_prefill_token_threshold = 0;  // > 0: at most this many tokens of one chunk
  bool enable_prefix_caching = true;
};

// invalid_argument naming the field: budget < 1, max_num_seqs < 1, threshold < 0.
Status validate(const SchedulerOptions& o);

// One sequence as the scheduler sees it. The owner (the engine) keeps it at a stable address
// from add() until finish().
struct Sequence {
  Sequence(RequestId id, std::vector<int32_t> prompt, int64_t max_total, BlockPool* pool,
           KvCacheStorage* storage);

  RequestId id;
  // [num_tokens]: the prompt, then every generated token. After a step, rows [0, num_computed())
  // of the cache hold these tokens; the tokens past them are still to be computed.
  std::vector<int32_t> tokens;
  int64_t prompt_len;
  int64_t max_total;      // prompt + max_tokens: the most rows it can ever need
  SequenceBlocks blocks;  // reserved rows; num_tokens() == num_computed() between steps
  int num_preemptions = 0;
  int64_t cached_tokens = -1;  // prefix-cache hit tokens at first admission; -1 before it
  bool admitted_once = false;
  bool skip_prefix_cache = false;  // every prompt row is computed here (prompt logprobs)
  // Samples that will fork from it once its prompt is computed (Engine::submit_n): admission
  // keeps a running slot for each, so the forks never take running past max_num_seqs.
  int pending_forks = 0;

  int64_t num_computed() const { return blocks.num_tokens(); }
  int64_t remaining() const { return int64_t(tokens.size()) - num_computed(); }
};

// tokens [start, start + n_tokens) of seq run this step; rows are reserved.
struct ScheduledChunk {
  Sequence* seq = nullptr;
  int64_t start = 0;
  int n_tokens = 0;
};

struct StepPlan {
  std::vector<ScheduledChunk> chunks;  // decodes first, then prefill chunks
  std::vector<Sequence*> preempted;    // now at the head of the waiting queue, blocks released
  std::vector<Sequence*> refused;      // can never fit beside the pinned prefixes: removed
  int num_tokens = 0;                  // Σ n_tokens <= max_num_batched_tokens
  int64_t prefix_queried_tokens = 0;   // prompt tokens looked up by the sequences admitted
  int64_t prefix_hit_tokens = 0;       // ... of those, served from the cache
};

class Scheduler {
 public:
  // pool (and storage, when not null) must outlive the scheduler. Options must be valid.
  Scheduler(const SchedulerOptions& options, BlockPool* pool, KvCacheStorage* storage,
            PrefixCacheOptions prefix_options = {});

  const SchedulerOptions& options() const { return options_; }
  BlockPool& pool() { return *pool_; }
  const BlockPool& pool() const { return *pool_; }
  KvCacheStorage* storage() { return storage_; }
  const PrefixCache* prefix_cache() const { return prefix_.get(); }

  // Blocks a sequence of n tokens holds.
  int32_t blocks_for(int64_t n) const;
  // Blocks a request may use: the pool less the distinct blocks of pinned prefixes.
  int32_t usable_blocks() const;

  // Queues a new sequence at the tail of the waiting queue.
  void add(Sequence* seq);
  // Makes child a fork of the running, fully computed parent: the same tokens, every block
  // shared (copy-on-write on the first write), running from now on as the most recently
  // admitted (preempted first). Takes one of the parent's pending_forks slots.
  void add_fork(Sequence* child, Sequence* parent);
  // Removes seq (running or waiting) and releases its blocks; its full blocks stay in the prefix
  // cache. No-op for a sequence the scheduler does not hold.
  void finish(Sequence* seq);

  // Plans one step and reserves the rows of every chunk. See the file comment; in detail:
  // running sequences with one token left (decodes), then the other running ones, in admission
  // order, each capped by the threshold and the budget left. A reservation that fails preempts
  // running.back() (its chunk, if planned, is withdrawn) until it succeeds or the sequence
  // preempted itself. Only if nothing was preempted: waiting sequences from the head, while
  // running < max_num_seqs and budget is left; on admission a fresh sequence takes its longest
  // cached prefix (all but the last token: one must be computed for the logits); a reservation
  // that fails stops admission (no preemption for new work). A waiting head whose max_total
  // exceeds usable_blocks() is refused.
  StepPlan schedule();

  // After the step ran: registers the full blocks its chunks completed with the prefix cache.
  void on_step_done(const StepPlan& plan);

  // Moves a fully computed, running seq to the pinned set: it keeps its full blocks (the partial
  // last one is released) until unpin(), so they are never evicted.
  void pin(Sequence* seq);
  void unpin(Sequence* seq);

  size_t num_running() const { return running_.size(); }
  size_t num_waiting() const { return waiting_.size(); }
  size_t num_pinned() const { return pinned_.size(); }
  const std::vector<Sequence*>& running() const { return running_; }
  const std::deque<Sequence*>& waiting() const { return waiting_; }

 private:
  // Reserves rows for the next n tokens of seq; false when the pool cannot hold them.
  bool reserve(Sequence* seq, int n);
  int chunk_size(const Sequence& seq, int budget) const;
  void preempt(Sequence* victim, StepPlan* plan);
  bool admit(Sequence* seq, int budget, StepPlan* plan);

  SchedulerOptions options_;
  BlockPool* pool_;
  KvCacheStorage* storage_;
  std::unique_ptr<PrefixCache> prefix_;  // null without prefix caching
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // admission order: back() is preempted first
  std::vector<Sequence*> pinned_;
  std::vector<int32_t> pinned_refs_;  // [num_blocks]: pinned sequences holding each block
  int32_t pinned_blocks_ = 0;         // blocks with pinned_refs_ > 0
};

}  // namespace mla::sched
