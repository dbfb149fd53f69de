// BlockPool: hands out ids of fixed-size KV pages (blocks) with reference counts, a free list and
// an LRU list of cached-but-unreferenced blocks. Ids only: the memory is KvCacheStorage's.
#pragma once

#include <cstdint>
#include <vector>

#include "mla/status.h"

namespace mla {

// One block id addresses the same page_size slots in every layer's cache tensor, so one allocation
// decision serves all layers. Ids are int32, as in the kernels' block_table.
using BlockId = int32_t;
inline constexpr BlockId kNoBlock = -1;

// Running out of pages is a normal state for the scheduler (it preempts or waits), not an error.
enum class [[nodiscard]] PoolOutcome : uint8_t{kOk, kOutOfPages};

// Told when the pool evicts a cached, unreferenced block to reuse it (the prefix cache drops its
// entry). Called inside allocate(); must not call back into the pool's allocation.
class BlockEvictionListener {
 public:
  virtual void on_evict(BlockId block) = 0;

 protected:
  ~BlockEvictionListener() = default;
};

struct BlockPoolStats {
  int32_t num_blocks = 0;
  int page_size = 0;
  int32_t pages_used = 0;         // referenced by at least one sequence
  int32_t pages_free = 0;         // on the free list (hold nothing reusable)
  int32_t pages_cached_idle = 0;  // cached for prefix reuse, unreferenced: reusable or evictable
  int64_t tokens_stored = 0;      // valid rows in used pages (a shared page counts once)
  int64_t allocated_slots = 0;    // pages_used · page_size
  // Unused slots in used pages / allocated slots; 0 with no page in use.
  double internal_fragmentation = 0;
  int64_t bytes_per_token = 0;  // as passed to stats(): record bytes × layers
  int64_t bytes_used = 0;       // allocated_slots · bytes_per_token
  // bytes_used / tokens_stored (>= bytes_per_token by the fragmentation); 0 with no token.
  double bytes_per_stored_token = 0;
  int64_t evictions = 0;  // cached idle blocks reclaimed by allocate()
};

// Not thread-safe: one scheduler thread owns it. Every operation is O(1) except allocate (O(n)).
// Callers hold its address (sequences, the prefix cache): do not move a pool that is referenced.
//
// Each block is in exactly one state: free (refcount 0, on the free list), used (refcount >= 1,
// maybe cached), or idle (refcount 0, cached, on the LRU list). Allocation takes free blocks first,
// then evicts idle ones least recently released first.
class BlockPool {
 public:
  // invalid_argument unless num_blocks >= 1 and page_size is a power of two in [1, 256].
  static Result<BlockPool> create(int32_t num_blocks, int page_size);

  BlockPool(BlockPool&&) = default;
  BlockPool& operator=(BlockPool&&) = default;
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  int32_t num_blocks() const { return static_cast<int32_t>(refcount_.size()); }
  int page_size() const { return page_size_; }
  // Blocks allocate() can hand out now: free plus idle cached ones.
  int32_t num_allocatable() const { return static_cast<int32_t>(free_.size()) + num_idle_; }

  // All or nothing: appends n blocks with refcount 1 and fill 0 to *out, or returns kOutOfPages
  // and changes nothing. Evicts idle cached blocks (LRU first) only when the free list runs dry.
  PoolOutcome allocate(int32_t n, std::vector<BlockId>* out);

  // Another owner of a used block, or reuse of an idle cached block (it leaves the LRU list).
  // A free block has no contents to share: incref on it is a bug.
  void incref(BlockId block);
  // Drops one owner. At zero a cached block becomes idle (LRU tail: most recently used); any
  // other goes to the free list with fill 0.
  void decref(BlockId block);
  int32_t refcount(BlockId block) const { return refcount_[index(block)]; }

  // Prefix cache hooks. A cached block holds a full page registered for reuse; mark_cached requires
  // a used block. uncache of an idle block moves it to the free list.
  void mark_cached(BlockId block);
  void uncache(BlockId block);
  bool is_cached(BlockId block) const { return cached_[index(block)] != 0; }
  void set_eviction_listener(BlockEvictionListener* listener) { listener_ = listener; }

  // A block may be written only when its single owner is the writer and no cache entry promises
  // its contents to others; anything else is copied on write.
  bool is_writable(BlockId block) const { return refcount(block) == 1 && !is_cached(block); }

  // Valid rows in a used block (tokens_stored and fragmentation come from these). The writer
  // sets it; a shared or cached block keeps its fill.
  void set_fill(BlockId block, int fill);
  int fill(BlockId block) const { return fill_[index(block)]; }

  // O(1). bytes_per_token: record bytes per token and layer × layers (0 to skip the byte fields).
  BlockPoolStats stats(int64_t bytes_per_token = 0) const;

  // Walks every block and list and aborts (MLA_CHECK) on any inconsistency. O(num_blocks); tests.
  void check_consistency() const;

 private:
  BlockPool() = default;
  size_t index(BlockId block) const;
  void lru_push_back(BlockId block);
  void lru_remove(BlockId block);

  int page_size_ = 0;
  std::vector<int32_t> refcount_;  // [num_blocks]
  std::vector<uint8_t> cached_;    // [num_blocks] 0/1
  std::vector<int16_t> fill_;      // [num_blocks] valid rows, <= page_size
  std::vector<BlockId> free_;      // stack; back is handed out next
  // Intrusive doubly linked LRU list of idle blocks: O(1) removal from the middle on reuse.
  std::vector<BlockId> lru_prev_, lru_next_;  // [num_blocks]
  BlockId lru_head_ = kNoBlock;               // least recently released: evicted first
  BlockId lru_tail_ = kNoBlock;
  int32_t num_idle_ = 0;
  int32_t num_used_ = 0;
  int64_t used_fill_sum_ = 0;  // Σ fill over used blocks
  int64_t evictions_ = 0;
  BlockEvictionListener* listener_ = nullptr;
};

}  // namespace mla
