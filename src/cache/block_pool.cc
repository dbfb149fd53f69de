// BlockPool: free stack, reference counts, per-block fill and the LRU list of idle cached blocks.
#include "cache/block_pool.h"

#include <fmt/format.h>

#include "cache/cache_capacity.h"
#include "core/check.h"

namespace mla {

Result<BlockPool> BlockPool::create(int32_t num_blocks, int page_size) {
  MLA_RETURN_IF_ERROR(validate_page_size(page_size));
  if (num_blocks < 1)
    return invalid_argument(fmt::format("block pool of {} blocks: need at least 1", num_blocks));
  BlockPool pool;
  pool.page_size_ = page_size;
  const size_t n = static_cast<size_t>(num_blocks);
  pool.refcount_.assign(n, 0);
  pool.cached_.assign(n, 0);
  pool.fill_.assign(n, 0);
  pool.lru_prev_.assign(n, kNoBlock);
  pool.lru_next_.assign(n, kNoBlock);
  pool.free_.reserve(n);
  // Reverse, so that a fresh pool hands out 0, 1, 2, ... (easier to read in logs and tests).
  for (int32_t b = num_blocks - 1; b >= 0; --b) pool.free_.push_back(b);
  return pool;
}

size_t BlockPool::index(BlockId block) const {
  MLA_DCHECK(block >= 0 && static_cast<size_t>(block) < refcount_.size(),
             "block id {} outside the pool of {} blocks", block, refcount_.size());
  return static_cast<size_t>(block);
}

PoolOutcome BlockPool::allocate(int32_t n, std::vector<BlockId>* out) {
  MLA_CHECK(n >= 0, "allocate({}) blocks", n);
  if (n > num_allocatable()) return PoolOutcome::kOutOfPages;
  for (int32_t i = 0; i < n; ++i) {
    BlockId b;
    if (!free_.empty()) {
      b = free_.back();
      free_.pop_back();
    } else {
      b = lru_head_;
      lru_remove(b);
      cached_[index(b)] = 0;
      fill_[index(b)] = 0;
      ++evictions_;
      if (listener_) listener_->on_evict(b);
    }
    MLA_DCHECK(refcount_[index(b)] == 0 && fill_[index(b)] == 0, "block {} handed out twice", b);
    refcount_[index(b)] = 1;
    ++num_used_;
    out->push_back(b);
  }
  return PoolOutcome::kOk;
}

void BlockPool::incref(BlockId block) {
  const size_t i = index(block);
  if (refcount_[i] == 0) {
    MLA_CHECK(cached_[i], "incref of free block {}", block);
    lru_remove(block);
    ++num_used_;
    used_fill_sum_ += fill_[i];
  }
  ++refcount_[i];
}

void BlockPool::decref(BlockId block) {
  const size_t i = index(block);
  MLA_CHECK(refcount_[i] > 0, "decref of unreferenced block {}", block);
  if (--refcount_[i] > 0) return;
  --num_used_;
  used_fill_sum_ -= fill_[i];
  if (cached_[i]) {
    lru_push_back(block);
  } else {
    fill_[i] = 0;
    free_.push_back(block);
  }
}

void BlockPool::mark_cached(BlockId block) {
  const size_t i = index(block);
  MLA_CHECK(refcount_[i] > 0 && !cached_[i], "mark_cached of block {} (refcount {}, cached {})",
            block, refcount_[i], cached_[i]);
  cached_[i] = 1;
}

void BlockPool::uncache(BlockId block) {
  const size_t i = index(block);
  MLA_CHECK(cached_[i], "uncache of uncached block {}", block);
  cached_[i] = 0;
  if (refcount_[i] == 0) {
    lru_remove(block);
    fill_[i] = 0;
    free_.push_back(block);
  }
}

void BlockPool::set_fill(BlockId block, int fill) {
  const size_t i = index(block);
  MLA_CHECK(refcount_[i] > 0 && fill >= 0 && fill <= page_size_,
            "set_fill({}, {}) with refcount {} and page_size {}", block, fill, refcount_[i],
            page_size_);
  used_fill_sum_ += fill - fill_[i];
  fill_[i] = static_cast<int16_t>(fill);
}

BlockPoolStats BlockPool::stats(int64_t bytes_per_token) const {
  BlockPoolStats s;
  s.num_blocks = num_blocks();
  s.page_size = page_size_;
  s.pages_used = num_used_;
  s.pages_free = static_cast<int32_t>(free_.size());
  s.pages_cached_idle = num_idle_;
  s.tokens_stored = used_fill_sum_;
  s.allocated_slots = int64_t{num_used_} * page_size_;
  if (s.allocated_slots > 0)
    s.internal_fragmentation =
        static_cast<double>(s.allocated_slots - s.tokens_stored) / s.allocated_slots;
  s.bytes_per_token = bytes_per_token;
  s.bytes_used = s.allocated_slots * bytes_per_token;
  if (s.tokens_stored > 0)
    s.bytes_per_stored_token = static_cast<double>(s.bytes_used) / s.tokens_stored;
  s.evictions = evictions_;
  return s;
}

void BlockPool::lru_push_back(BlockId block) {
  const size_t i = index(block);
  lru_prev_[i] = lru_tail_;
  lru_next_[i] = kNoBlock;
  if (lru_tail_ != kNoBlock)
    lru_next_[index(lru_tail_)] = block;
  else
    lru_head_ = block;
  lru_tail_ = block;
  ++num_idle_;
}

void BlockPool::lru_remove(BlockId block) {
  const size_t i = index(block);
  const BlockId prev = lru_prev_[i], next = lru_next_[i];
  if (prev != kNoBlock)
    lru_next_[index(prev)] = next;
  else
    lru_head_ = next;
  if (next != kNoBlock)
    lru_prev_[index(next)] = prev;
  else
    lru_tail_ = prev;
  lru_prev_[i] = lru_next_[i] = kNoBlock;
  --num_idle_;
}

void BlockPool::check_consistency() const {
  const size_t n = refcount_.size();
  std::vector<uint8_t> seen(n, 0);  // 1: free list, 2: LRU list
  for (BlockId b : free_) {
    const size_t i = index(b);
    MLA_CHECK(seen[i] == 0, "block {} twice on the free list", b);
    seen[i] = 1;
    MLA_CHECK(refcount_[i] == 0 && !cached_[i] && fill_[i] == 0,
              "free block {}: refcount {}, cached {}, fill {}", b, refcount_[i], cached_[i],
              fill_[i]);
  }
  int32_t idle = 0;
  BlockId prev = kNoBlock;
  for (BlockId b = lru_head_; b != kNoBlock; b = lru_next_[index(b)]) {
    const size_t i = index(b);
    MLA_CHECK(seen[i] == 0, "block {} on the LRU list twice or also free", b);
    seen[i] = 2;
    MLA_CHECK(lru_prev_[i] == prev, "LRU back link of block {}", b);
    MLA_CHECK(refcount_[i] == 0 && cached_[i], "idle block {}: refcount {}, cached {}", b,
              refcount_[i], cached_[i]);
    prev = b;
    ++idle;
  }
  MLA_CHECK(prev == lru_tail_ && idle == num_idle_, "LRU list: {} idle, counter {}", idle,
            num_idle_);
  int32_t used = 0;
  int64_t fill_sum = 0;
  for (size_t i = 0; i < n; ++i) {
    MLA_CHECK(fill_[i] >= 0 && fill_[i] <= page_size_, "block {} fill {}", i, fill_[i]);
    if (seen[i] == 0) {
      MLA_CHECK(refcount_[i] > 0, "block {} is in no list and unreferenced (leaked)", i);
      ++used;
      fill_sum += fill_[i];
    }
  }
  MLA_CHECK(used == num_used_ && fill_sum == used_fill_sum_,
            "used blocks {} (counter {}), fill sum {} (counter {})", used, num_used_, fill_sum,
            used_fill_sum_);
}

}  // namespace mla
