// Tests of SequenceBlocks on known cases: block tables, all-or-nothing append, truncate, fork with
// copy-on-write of the partial last block, and gathers through a permuted block table.
#include "cache/sequence_blocks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/rng.h"
#include "kv_rows_test_util.h"

namespace mla {
namespace {

using testing_kv::check_rows;
using testing_kv::write_rows;

struct Fixture {
  BlockPool pool;
  KvCacheStorage storage;
  Fixture(int32_t blocks, int page_size, int layers = 2, int64_t record = 64)
      : pool(std::move(BlockPool::create(blocks, page_size)).value()),
        storage(std::move(KvCacheStorage::allocate({.num_layers = layers,
                                                    .num_blocks = blocks,
                                                    .page_size = page_size,
                                                    .record_bytes = record}))
                    .value()) {}
};

std::vector<int32_t> iota_tokens(int n, int32_t first) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

// Appends tokens and writes their rows, as a forward pass would.
PoolOutcome append_and_write(Fixture& f, SequenceBlocks& seq, const std::vector<int32_t>& t) {
  const int64_t from = seq.num_tokens();
  const PoolOutcome r = seq.append(t);
  if (r == PoolOutcome::kOk) write_rows(f.storage, seq, from, seq.num_tokens());
  return r;
}

TEST(SequenceBlocks, AppendAllocatesPagesAsNeeded) {
  Fixture f(8, 4);
  SequenceBlocks seq(&f.pool, &f.storage);
  ASSERT_EQ(append_and_write(f, seq, iota_tokens(3, 0)), PoolOutcome::kOk);
  EXPECT_EQ(seq.block_table().size(), 1u);
  ASSERT_EQ(append_and_write(f, seq, iota_tokens(1, 3)), PoolOutcome::kOk);
  EXPECT_EQ(seq.block_table().size(), 1u);
  ASSERT_EQ(append_and_write(f, seq, iota_tokens(6, 4)), PoolOutcome::kOk);
  EXPECT_EQ(std::vector<BlockId>(seq.block_table().begin(), seq.block_table().end()),
            (std::vector<BlockId>{0, 1, 2}));
  EXPECT_EQ(seq.slot_of(9).block, 2);
  EXPECT_EQ(seq.slot_of(9).slot, 1);
  EXPECT_EQ(check_rows(f.storage, seq), "");
  BlockPoolStats s = f.pool.stats();
  EXPECT_EQ(s.tokens_stored, 10);
  EXPECT_DOUBLE_EQ(s.internal_fragmentation, 2.0 / 12.0);
  seq.release();
  EXPECT_EQ(f.pool.stats().pages_free, 8);
}

TEST(SequenceBlocks, OutOfPagesLeavesEverythingAsItWas) {
  Fixture f(3, 4);
  SequenceBlocks a(&f.pool, &f.storage), b(&f.pool, &f.storage);
  ASSERT_EQ(append_and_write(f, a, iota_tokens(6, 0)), PoolOutcome::kOk);
  const std::vector<BlockId> table_a(a.block_table().begin(), a.block_table().end());
  // 7 more tokens need 2 more pages (8 + 5 slots); only 1 is free.
  EXPECT_EQ(a.append(iota_tokens(7, 100)), PoolOutcome::kOutOfPages);
  EXPECT_EQ(b.append(iota_tokens(5, 100)), PoolOutcome::kOutOfPages);
  EXPECT_EQ(a.num_tokens(), 6);
  EXPECT_EQ(b.num_tokens(), 0);
  EXPECT_TRUE(std::equal(table_a.begin(), table_a.end(), a.block_table().begin()));
  EXPECT_EQ(check_rows(f.storage, a), "");
  EXPECT_EQ(f.pool.num_allocatable(), 1);
  f.pool.check_consistency();
  // What fits still works.
  ASSERT_EQ(append_and_write(f, b, iota_tokens(4, 100)), PoolOutcome::kOk);
  EXPECT_EQ(f.pool.num_allocatable(), 0);
}

TEST(SequenceBlocks, TruncateFreesWholePagesPastTheNewLength) {
  Fixture f(8, 4);
  SequenceBlocks seq(&f.pool, &f.storage);
  ASSERT_EQ(append_and_write(f, seq, iota_tokens(14, 0)), PoolOutcome::kOk);
  EXPECT_EQ(f.pool.stats().pages_used, 4);
  seq.truncate(9);
  EXPECT_EQ(seq.block_table().size(), 3u);
  EXPECT_EQ(f.pool.stats().pages_used, 3);
  EXPECT_EQ(f.pool.stats().tokens_stored, 9);
  EXPECT_EQ(check_rows(f.storage, seq), "");
  seq.truncate(8);
  EXPECT_EQ(seq.block_table().size(), 2u);
  // Appending after a truncate overwrites the dropped rows with the new tokens' rows.
  ASSERT_EQ(append_and_write(f, seq, iota_tokens(3, 500)), PoolOutcome::kOk);
  EXPECT_EQ(check_rows(f.storage, seq), "");
  seq.truncate(0);
  EXPECT_EQ(f.pool.stats().pages_free, 8);
  f.pool.check_consistency();
}

TEST(SequenceBlocks, ForkSharesBlocksAndCopiesThePartialBlockOnWrite) {
  Fixture f(8, 4);
  SequenceBlocks parent(&f.pool, &f.storage);
  ASSERT_EQ(append_and_write(f, parent, iota_tokens(6, 0)), PoolOutcome::kOk);  // 1 full + 2/4
  SequenceBlocks child = parent.fork();
  EXPECT_EQ(f.pool.stats().pages_used, 2);
  EXPECT_EQ(f.pool.refcount(parent.block_table()[0]), 2);
  EXPECT_EQ(f.pool.refcount(parent.block_table()[1]), 2);
  // The child writes into the shared partial block: it gets its own copy first.
  ASSERT_EQ(append_and_write(f, child, {900, 901}), PoolOutcome::kOk);
  EXPECT_EQ(child.block_table()[0], parent.block_table()[0]);
  EXPECT_NE(child.block_table()[1], parent.block_table()[1]);
  EXPECT_EQ(f.pool.refcount(parent.block_table()[1]), 1);
  // The parent now owns its partial block alone and writes in place.
  const BlockId parent_last = parent.block_table()[1];
  ASSERT_EQ(append_and_write(f, parent, {700}), PoolOutcome::kOk);
  EXPECT_EQ(parent.block_table()[1], parent_last);
  EXPECT_EQ(check_rows(f.storage, parent), "");
  EXPECT_EQ(check_rows(f.storage, child), "");
  EXPECT_EQ(f.pool.stats().tokens_stored, 4 + 3 + 4);
  f.pool.check_consistency();
  parent.release();
  child.release();
  EXPECT_EQ(f.pool.stats().pages_free, 8);
}

TEST(SequenceBlocks, CopyOnWriteNeedsAPageAndFailsCleanlyWithout) {
  Fixture f(2, 4);
  SequenceBlocks parent(&f.pool, &f.storage);
  ASSERT_EQ(append_and_write(f, parent, iota_tokens(6, 0)), PoolOutcome::kOk);
  SequenceBlocks child = parent.fork();
  EXPECT_EQ(child.append(std::vector<int32_t>{1}), PoolOutcome::kOutOfPages);
  EXPECT_EQ(f.pool.refcount(parent.block_table()[1]), 2);
  EXPECT_EQ(check_rows(f.storage, child), "");
  // Once the parent leaves, the child owns the block alone and appends in place.
  parent.release();
  ASSERT_EQ(append_and_write(f, child, {1, 2}), PoolOutcome::kOk);
  EXPECT_EQ(check_rows(f.storage, child), "");
}

TEST(SequenceBlocks, TruncateIntoASharedFullBlockCopiesOnTheNextWrite) {
  Fixture f(8, 4);
  SequenceBlocks a(&f.pool, &f.storage);
  ASSERT_EQ(append_and_write(f, a, iota_tokens(8, 0)), PoolOutcome::kOk);
  SequenceBlocks b = a.fork();
  b.truncate(5);
  ASSERT_EQ(append_and_write(f, b, {40, 41, 42}), PoolOutcome::kOk);
  EXPECT_NE(a.block_table()[1], b.block_table()[1]);
  EXPECT_EQ(check_rows(f.storage, a), "");
  EXPECT_EQ(check_rows(f.storage, b), "");
}

TEST(SequenceBlocks, PermutedBlockTableReadsLikeAContiguousCache) {
  // Scramble the free list so the sequence's pages are scattered and out of order, then gather
  // its rows through the block table into a contiguous [tokens, record] cache and compare with
  // rows written contiguously.
  constexpr int kBlocks = 16, kPage = 8, kRecord = 1152, kLayers = 2, kTokens = 77;
  Fixture f(kBlocks, kPage, kLayers, kRecord);
  {
    std::vector<BlockId> all;
    ASSERT_EQ(f.pool.allocate(kBlocks, &all), PoolOutcome::kOk);
    Rng rng(7);
    for (int i = kBlocks - 1; i > 0; --i) std::swap(all[i], all[rng.below(i + 1)]);
    for (BlockId b : all) f.pool.decref(b);
  }
  Rng rng(11);
  std::vector<int32_t> tokens(kTokens);
  for (auto& t : tokens) t = static_cast<int32_t>(rng.below(50000));
  SequenceBlocks seq(&f.pool, &f.storage);
  ASSERT_EQ(append_and_write(f, seq, tokens), PoolOutcome::kOk);
  std::vector<BlockId> sorted(seq.block_table().begin(), seq.block_table().end());
  std::sort(sorted.begin(), sorted.end());
  EXPECT_FALSE(std::equal(sorted.begin(), sorted.end(), seq.block_table().begin()));

  const auto stamps = testing_kv::prefix_stamps(tokens);
  for (int l = 0; l < kLayers; ++l) {
    std::vector<uint8_t> contiguous(size_t{kTokens} * kRecord), gathered(contiguous.size());
    for (int t = 0; t < kTokens; ++t)
      for (int k = 0; k < kRecord; ++k)
        contiguous[static_cast<size_t>(t) * kRecord + k] = testing_kv::row_byte(stamps[t], l, k);
    const std::span<const BlockId> table = seq.block_table();
    for (int t = 0; t < kTokens; ++t) {
      const uint8_t* page = f.storage.layer_base(l) + table[t / kPage] * f.storage.page_bytes();
      std::memcpy(&gathered[static_cast<size_t>(t) * kRecord], page + (t % kPage) * kRecord,
                  kRecord);
    }
    EXPECT_EQ(gathered, contiguous) << "layer " << l;
  }
}

TEST(SequenceBlocks, WorksWithoutStorageForScheduling) {
  BlockPool pool = std::move(BlockPool::create(4, 2)).value();
  SequenceBlocks a(&pool, nullptr);
  ASSERT_EQ(a.append(iota_tokens(3, 0)), PoolOutcome::kOk);
  SequenceBlocks b = a.fork();
  ASSERT_EQ(b.append(std::vector<int32_t>{9}),
            PoolOutcome::kOk);  // copy-on-write swaps the block, copies nothing
  EXPECT_NE(a.block_table()[1], b.block_table()[1]);
  EXPECT_EQ(pool.stats().pages_used, 3);
  SequenceBlocks moved = std::move(b);
  EXPECT_EQ(moved.num_tokens(), 4);
  a = std::move(moved);  // releases a's old blocks
  EXPECT_EQ(pool.stats().pages_used, 2);
  pool.check_consistency();
}

}  // namespace
}  // namespace mla
