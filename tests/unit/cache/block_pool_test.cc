// Tests of BlockPool (allocation, refcounts, out-of-pages, stats, LRU of idle cached blocks) and
// KvCacheStorage (shape checks, alignment, row addressing, copy of slots).
#include "cache/block_pool.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "cache/kv_cache_storage.h"

namespace mla {
namespace {

BlockPool make_pool(int32_t n, int page_size) {
  auto r = BlockPool::create(n, page_size);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return std::move(r).value();
}

struct EvictionLog : BlockEvictionListener {
  std::vector<BlockId> evicted;
  void on_evict(BlockId b) override { evicted.push_back(b); }
};

TEST(BlockPool, CreateValidates) {
  EXPECT_EQ(BlockPool::create(0, 64).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(BlockPool::create(8, 48).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(BlockPool::create(8, 512).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(BlockPool::create(1, 1).ok());
  EXPECT_TRUE(BlockPool::create(8, 256).ok());
}

TEST(BlockPool, AllocatesDistinctIdsAndReportsOutOfPagesAtomically) {
  BlockPool pool = make_pool(4, 16);
  std::vector<BlockId> got;
  ASSERT_EQ(pool.allocate(3, &got), PoolOutcome::kOk);
  EXPECT_EQ(got, (std::vector<BlockId>{0, 1, 2}));
  EXPECT_EQ(pool.num_allocatable(), 1);
  // Two more do not fit: nothing is handed out, nothing changes.
  EXPECT_EQ(pool.allocate(2, &got), PoolOutcome::kOutOfPages);
  EXPECT_EQ(got.size(), 3u);
  EXPECT_EQ(pool.num_allocatable(), 1);
  ASSERT_EQ(pool.allocate(1, &got), PoolOutcome::kOk);
  EXPECT_EQ(got.back(), 3);
  EXPECT_EQ(pool.allocate(1, &got), PoolOutcome::kOutOfPages);
  EXPECT_EQ(pool.allocate(0, &got), PoolOutcome::kOk);
  pool.check_consistency();
  for (BlockId b : got) pool.decref(b);
  EXPECT_EQ(pool.num_allocatable(), 4);
  EXPECT_EQ(pool.stats().pages_free, 4);
  pool.check_consistency();
}

TEST(BlockPool, RefcountsKeepSharedBlocksUntilTheLastOwnerLeaves) {
  BlockPool pool = make_pool(2, 4);
  std::vector<BlockId> got;
  ASSERT_EQ(pool.allocate(1, &got), PoolOutcome::kOk);
  const BlockId b = got[0];
  pool.incref(b);
  pool.incref(b);
  EXPECT_EQ(pool.refcount(b), 3);
  EXPECT_FALSE(pool.is_writable(b));
  pool.decref(b);
  pool.decref(b);
  EXPECT_TRUE(pool.is_writable(b));
  EXPECT_EQ(pool.stats().pages_used, 1);
  pool.decref(b);
  EXPECT_EQ(pool.stats().pages_used, 0);
  EXPECT_EQ(pool.stats().pages_free, 2);
  pool.check_consistency();
}

TEST(BlockPool, FragmentationAndBytesOnKnownFills) {
  BlockPool pool = make_pool(8, 16);
  std::vector<BlockId> got;
  ASSERT_EQ(pool.allocate(3, &got), PoolOutcome::kOk);
  pool.set_fill(got[0], 16);
  pool.set_fill(got[1], 16);
  pool.set_fill(got[2], 4);  // a 36-token sequence: 12 of 48 slots unused
  BlockPoolStats s = pool.stats(/*bytes_per_token=*/1152 * 61);
  EXPECT_EQ(s.pages_used, 3);
  EXPECT_EQ(s.pages_free, 5);
  EXPECT_EQ(s.tokens_stored, 36);
  EXPECT_EQ(s.allocated_slots, 48);
  EXPECT_DOUBLE_EQ(s.internal_fragmentation, 12.0 / 48.0);
  EXPECT_EQ(s.bytes_per_token, 1152 * 61);
  EXPECT_EQ(s.bytes_used, 48 * 1152 * 61);
  EXPECT_DOUBLE_EQ(s.bytes_per_stored_token, 48.0 * 1152 * 61 / 36);
  // A shared page counts once.
  pool.incref(got[2]);
  EXPECT_EQ(pool.stats().tokens_stored, 36);
  pool.decref(got[2]);
  pool.decref(got[2]);  // freed: its slots leave the count
  s = pool.stats();
  EXPECT_EQ(s.tokens_stored, 32);
  EXPECT_DOUBLE_EQ(s.internal_fragmentation, 0.0);
  pool.decref(got[0]);
  pool.decref(got[1]);
  s = pool.stats(100);
  EXPECT_EQ(s.pages_used, 0);
  EXPECT_DOUBLE_EQ(s.internal_fragmentation, 0.0);
  EXPECT_DOUBLE_EQ(s.bytes_per_stored_token, 0.0);
  pool.check_consistency();
}

TEST(BlockPool, IdleCachedBlocksAreEvictedLeastRecentlyReleasedFirst) {
  BlockPool pool = make_pool(5, 2);
  EvictionLog log;
  pool.set_eviction_listener(&log);
  std::vector<BlockId> got;
  ASSERT_EQ(pool.allocate(5, &got), PoolOutcome::kOk);
  for (BlockId b : {0, 1, 2, 3}) {
    pool.set_fill(b, 2);
    pool.mark_cached(b);
  }
  // Release in the order 2, 0, 3, 1 (4 is uncached and goes to the free list).
  for (BlockId b : {2, 0, 3, 1, 4}) pool.decref(b);
  BlockPoolStats s = pool.stats();
  EXPECT_EQ(s.pages_cached_idle, 4);
  EXPECT_EQ(s.pages_free, 1);
  EXPECT_EQ(pool.num_allocatable(), 5);
  // Reuse of 3 takes it off the LRU list; then allocation drains the free list first.
  pool.incref(3);
  EXPECT_EQ(pool.fill(3), 2);
  std::vector<BlockId> more;
  ASSERT_EQ(pool.allocate(1, &more), PoolOutcome::kOk);
  EXPECT_EQ(more.back(), 4);
  EXPECT_TRUE(log.evicted.empty());
  ASSERT_EQ(pool.allocate(2, &more), PoolOutcome::kOk);
  EXPECT_EQ(log.evicted, (std::vector<BlockId>{2, 0}));
  EXPECT_FALSE(pool.is_cached(2));
  EXPECT_EQ(pool.fill(2), 0);
  // 3 comes back as most recent: 1 goes before it.
  pool.decref(3);
  ASSERT_EQ(pool.allocate(2, &more), PoolOutcome::kOk);
  EXPECT_EQ(log.evicted, (std::vector<BlockId>{2, 0, 1, 3}));
  EXPECT_EQ(pool.stats().evictions, 4);
  EXPECT_EQ(pool.allocate(1, &more), PoolOutcome::kOutOfPages);
  pool.check_consistency();
}

TEST(BlockPool, UncacheMovesAnIdleBlockToTheFreeList) {
  BlockPool pool = make_pool(2, 1);
  std::vector<BlockId> got;
  ASSERT_EQ(pool.allocate(1, &got), PoolOutcome::kOk);
  pool.set_fill(got[0], 1);
  pool.mark_cached(got[0]);
  pool.decref(got[0]);
  EXPECT_EQ(pool.stats().pages_cached_idle, 1);
  pool.uncache(got[0]);
  EXPECT_EQ(pool.stats().pages_cached_idle, 0);
  EXPECT_EQ(pool.stats().pages_free, 2);
  pool.check_consistency();
}

TEST(BlockPoolDeathTest, MisuseIsABug) {
  BlockPool pool = make_pool(2, 4);
  EXPECT_DEATH(pool.decref(0), "decref of unreferenced block 0");
  EXPECT_DEATH(pool.incref(1), "incref of free block 1");
}

TEST(KvCacheStorage, ShapesAlignmentAndRows) {
  auto r = KvCacheStorage::allocate(
      {.num_layers = 3, .num_blocks = 5, .page_size = 4, .record_bytes = 656});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  KvCacheStorage& s = *r;
  EXPECT_EQ(s.page_bytes(), 4 * 656);
  EXPECT_EQ(s.layer_bytes(), 5 * 4 * 656);
  EXPECT_EQ(s.total_bytes(), 3 * 5 * 4 * 656);
  for (int l = 0; l < 3; ++l) {
    for (BlockId b = 0; b < 5; ++b) {
      const auto base = reinterpret_cast<uintptr_t>(s.row(l, b, 0));
      EXPECT_EQ(base % kKvPageAlignBytes, 0u) << l << " " << b;
      for (int slot = 0; slot < 4; ++slot)
        EXPECT_EQ(s.row(l, b, slot), s.layer_base(l) + b * s.page_bytes() + slot * 656);
    }
  }
}

TEST(KvCacheStorage, RejectsBadShapesAndReportsAllocationFailure) {
  EXPECT_EQ(KvCacheStorage::allocate(
                {.num_layers = 1, .num_blocks = 4, .page_size = 1, .record_bytes = 656})
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(KvCacheStorage::allocate(
                {.num_layers = 0, .num_blocks = 4, .page_size = 64, .record_bytes = 1152})
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(KvCacheStorage::allocate(
                {.num_layers = 1, .num_blocks = 0, .page_size = 64, .record_bytes = 1152})
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  // 2^31 − 1 blocks of 2^40 · 256 bytes: more than any address space.
  auto huge = KvCacheStorage::allocate({.num_layers = 2,
                                        .num_blocks = INT32_MAX,
                                        .page_size = 256,
                                        .record_bytes = int64_t{1} << 40});
  EXPECT_EQ(huge.status().code(), StatusCode::kOutOfMemory);
}

TEST(KvCacheStorage, CopySlotsCopiesEveryLayerAndNothingElse) {
  auto r = KvCacheStorage::allocate(
      {.num_layers = 2, .num_blocks = 3, .page_size = 4, .record_bytes = 64});
  ASSERT_TRUE(r.ok());
  KvCacheStorage& s = *r;
  for (int l = 0; l < 2; ++l) std::memset(s.layer_base(l), 0xAB, s.layer_bytes());
  for (int l = 0; l < 2; ++l)
    for (int slot = 0; slot < 4; ++slot) std::memset(s.row(l, 1, slot), 10 * l + slot, 64);
  s.copy_slots(/*dst=*/2, /*src=*/1, /*num_slots=*/3);
  for (int l = 0; l < 2; ++l) {
    for (int slot = 0; slot < 3; ++slot)
      EXPECT_EQ(std::memcmp(s.row(l, 2, slot), s.row(l, 1, slot), 64), 0) << l << slot;
    EXPECT_EQ(s.row(l, 2, 3)[0], 0xAB);  // past num_slots: untouched
    EXPECT_EQ(s.row(l, 0, 0)[0], 0xAB);
  }
}

// The log a leader of several ranks forwards (model/model_dist.cc): every copy_slots in order,
// emptied by take_copies; nothing kept without record_copies.
TEST(KvCacheStorage, RecordsCopiesOnlyWhenAsked) {
  for (const bool record : {false, true}) {
    auto r = KvCacheStorage::allocate({.num_layers = 2,
                                       .num_blocks = 4,
                                       .page_size = 16,
                                       .record_bytes = 64,
                                       .record_copies = record});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    r->copy_slots(1, 0, 5);
    r->copy_slots(3, 2, 0);  // nothing copied: nothing to repeat
    r->copy_slots(2, 1, 16);
    const std::vector<SlotCopy> log = r->take_copies();
    if (!record) {
      EXPECT_TRUE(log.empty());
      continue;
    }
    ASSERT_EQ(log.size(), 2u);
    EXPECT_EQ(log[0].dst, 1);
    EXPECT_EQ(log[0].src, 0);
    EXPECT_EQ(log[0].num_slots, 5);
    EXPECT_EQ(log[1].dst, 2);
    EXPECT_EQ(log[1].num_slots, 16);
    EXPECT_TRUE(r->take_copies().empty());
  }
}

}  // namespace
}  // namespace mla
