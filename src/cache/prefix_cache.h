// PrefixCache: reuse of KV pages across sequences that share a token prefix, by a verified hash
// chain over full blocks. Unreferenced cached pages stay in the BlockPool until evicted LRU.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "cache/block_hash.h"
#include "cache/block_pool.h"
#include "cache/sequence_blocks.h"

namespace mla {

struct PrefixCacheOptions {
  // Bits of the chain hash kept (hash_block's keep_bits). 128 in production; tests use a few bits
  // to make collisions common and prove that hits are verified.
  int hash_bits = 128;
};

// Counters, never reset (rates are taken over windows by the reader, as with Prometheus).
struct PrefixCacheStats {
  int64_t lookups = 0;         // acquire() calls
  int64_t queried_blocks = 0;  // full blocks offered to acquire()
  int64_t hit_blocks = 0;      // of those, served from the cache
  int64_t miss_blocks = 0;     // queried_blocks − hit_blocks
  int64_t inserted_blocks = 0;
  int64_t evictions = 0;      // entries dropped because the pool reused their block
  int64_t rejected_hits = 0;  // hash matched but tokens or parent did not: a collision
  int64_t cached_blocks = 0;  // entries now (referenced or idle)
};

// The longest verified cached prefix of a token sequence, in whole blocks.
struct PrefixMatch {
  std::vector<BlockId> blocks;  // [num_tokens / page_size]
  std::vector<ChainLink> links;
  int64_t num_tokens = 0;
  int64_t rejected_hits = 0;
};

// Entry i of the chain holds block B with hash h_i, the page's token ids and the id of its parent
// entry. A hit needs h_i, equal tokens and the parent entry the lookup verified one step before,
// so by induction the whole prefix is equal: a hash collision (at any depth, between any
// prefixes) never returns a wrong block, it only costs a miss. Entry ids are never reused, so a
// child whose parent entry was evicted becomes unreachable and waits for eviction.
//
// Registers itself as the pool's eviction listener; neither copyable nor movable. The destructor
// uncaches every entry (idle blocks return to the free list). Not thread-safe.
class PrefixCache : public BlockEvictionListener {
 public:
  explicit PrefixCache(BlockPool* pool, PrefixCacheOptions options = {});
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // The longest cached prefix of `tokens` in full blocks; changes nothing (no stats, no LRU).
  // Cost: one hash per full block plus a token compare per candidate.
  PrefixMatch match(std::span<const int32_t> tokens) const;

  // match() into the empty sequence `seq`: takes a reference to each matched block (an idle one
  // leaves the LRU list) and appends its tokens; counts stats. Returns the tokens served. A
  // caller that must compute at least one token passes tokens without the last one.
  int64_t acquire(std::span<const int32_t> tokens, SequenceBlocks* seq);

  // Registers each full block of seq not yet hashed (call once its KV rows are written; before
  // another sequence may match them). A block whose contents are already cached under another
  // block is left uncached and linked to that entry. A block already cached by a table sharing
  // it (a fork), under a chain since broken by an eviction, is re-parented onto seq's chain.
  // Cost: one hash per new full block.
  void insert(SequenceBlocks* seq);

  PrefixCacheStats stats() const;
  // Whether block holds a cache entry (tests).
  bool holds(BlockId block) const { return entries_[static_cast<size_t>(block)].id != 0; }

  void on_evict(BlockId block) override;

 private:
  struct Entry {
    BlockHash hash;
    uint64_t id = 0;  // 0: no entry
    uint64_t parent_id = 0;
  };
  std::span<const int32_t> entry_tokens(BlockId block) const;
  // The entry for (hash, parent, tokens), or kNoBlock; counts hash-only matches in *rejected.
  BlockId find(const BlockHash& h, uint64_t parent_id, std::span<const int32_t> tokens,
               int64_t* rejected) const;
  void erase(BlockId block);

  BlockPool* pool_;
  PrefixCacheOptions options_;
  int page_size_;
  std::unordered_multimap<BlockHash, BlockId, BlockHashHasher> map_;
  std::vector<Entry> entries_;   // [num_blocks]
  std::vector<int32_t> tokens_;  // [num_blocks, page_size]: token ids of each entry's page
  uint64_t next_id_ = 1;         // 0 is the root (the parent of the first block)
  PrefixCacheStats stats_;
};

}  // namespace mla
