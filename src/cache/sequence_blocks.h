// SequenceBlocks: one sequence's block table over a BlockPool: append, truncate, fork with
// copy-on-write of shared pages, release. Knows token ids and slots, not what the rows contain.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cache/block_hash.h"
#include "cache/block_pool.h"
#include "cache/kv_cache_storage.h"

namespace mla {

class PrefixCache;

// Where token `pos` of a sequence lives: its row is storage.row(layer, block, slot).
struct TokenSlot {
  BlockId block = kNoBlock;
  int slot = 0;
};

// Owns one reference to each block in its table. Move-only; the destructor releases. Not
// thread-safe (the pool is not).
//
// Copy-on-write: fork() shares every block, the partial last one included. Before a sequence
// writes into a block it does not own alone (refcount > 1) or whose contents the prefix cache
// promises to others (cached), append() swaps it for a fresh block holding a copy of the valid
// rows (every layer, through the storage). So a write never shows through another sequence's
// table, and both sides keep their contents.
class SequenceBlocks {
 public:
  // pool must outlive the sequence. storage may be null (scheduling without KV memory, e.g.
  // simulations): copy-on-write then swaps blocks without copying rows.
  SequenceBlocks(BlockPool* pool, KvCacheStorage* storage);
  ~SequenceBlocks() { release(); }
  SequenceBlocks(SequenceBlocks&& o) noexcept;
  SequenceBlocks& operator=(SequenceBlocks&& o) noexcept;
  SequenceBlocks(const SequenceBlocks&) = delete;
  SequenceBlocks& operator=(const SequenceBlocks&) = delete;

  int64_t num_tokens() const { return static_cast<int64_t>(tokens_.size()); }
  int page_size() const { return pool_->page_size(); }
  // [ceil(num_tokens / page_size)] int32: one row of mla_decode's block_table.
  std::span<const BlockId> block_table() const { return blocks_; }
  // [num_tokens]: the token id of every position, for prefix hashing and verification.
  std::span<const int32_t> token_ids() const { return tokens_; }
  TokenSlot slot_of(int64_t pos) const;

  // Reserves rows for token_ids at positions num_tokens() .. num_tokens() + n - 1; the caller then
  // writes their KV rows at slot_of(pos). Allocates ceil-to-page new blocks plus one for a
  // copy-on-write of the last block if it is shared or cached. All or nothing: kOutOfPages
  // leaves this and every other sequence unchanged. Cost O(n) plus the copy.
  PoolOutcome append(std::span<const int32_t> token_ids);

  // Keeps the first new_num_tokens tokens (0 <= new <= num_tokens(), else a bug) and releases
  // whole blocks past them, last block first. A kept partial block stays as is (shared or
  // cached rows are copied on the next write).
  void truncate(int64_t new_num_tokens);

  // A child with the same tokens sharing every block (refcounts + 1); never allocates. The child
  // inherits the prefix-chain links of the shared full blocks.
  SequenceBlocks fork();

  // Drops every block, last first (the block holding the longest prefix is the least likely to
  // be reused, so it becomes the first eviction candidate), and empties the sequence.
  void release();

 private:
  friend class PrefixCache;
  // Appends already-held blocks (the caller took a reference to each) of full pages whose
  // tokens are token_ids, with their chain links. Requires an empty sequence.
  void adopt_full_blocks(std::span<const BlockId> blocks, std::span<const int32_t> token_ids,
                         std::span<const ChainLink> links);
  // Fill of block i as this sequence sees it.
  int fill_of_block(size_t i) const;

  BlockPool* pool_;
  KvCacheStorage* storage_;
  std::vector<BlockId> blocks_;  // [ceil(num_tokens / page_size)]
  std::vector<int32_t> tokens_;  // [num_tokens]
  // [<= num_tokens / page_size]: links of the first full blocks that PrefixCache has hashed.
  std::vector<ChainLink> links_;
};

}  // namespace mla
