// Property test of the paged cache: a seeded random driver of admit (with prefix hits) / append /
// fork / truncate / release / insert over a small pool, checking every invariant after each step.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "cache/prefix_cache.h"
#include "core/rng.h"
#include "kv_rows_test_util.h"

namespace mla {
namespace {

using testing_kv::check_rows;
using testing_kv::write_rows;

struct Config {
  int page_size;
  int hash_bits;  // 0: no prefix cache
  uint64_t seed;
};

void PrintTo(const Config& c, std::ostream* os) {
  *os << "page_size " << c.page_size << ", hash_bits " << c.hash_bits << ", seed " << c.seed;
}

std::string name_of(const ::testing::TestParamInfo<Config>& info) {
  return "page" + std::to_string(info.param.page_size) + "_bits" +
         std::to_string(info.param.hash_bits) + "_seed" + std::to_string(info.param.seed);
}

class CacheProperty : public ::testing::TestWithParam<Config> {};

// Everything a failed append must leave untouched.
struct Snapshot {
  std::vector<std::vector<BlockId>> tables;
  std::vector<std::vector<int32_t>> tokens;
  BlockPoolStats stats;
  bool operator==(const Snapshot& o) const {
    return tables == o.tables && tokens == o.tokens && stats.pages_used == o.stats.pages_used &&
           stats.pages_free == o.stats.pages_free &&
           stats.pages_cached_idle == o.stats.pages_cached_idle &&
           stats.tokens_stored == o.stats.tokens_stored && stats.evictions == o.stats.evictions;
  }
};

Snapshot snapshot(const std::vector<SequenceBlocks>& seqs, const BlockPool& pool) {
  Snapshot s;
  for (const auto& q : seqs) {
    s.tables.emplace_back(q.block_table().begin(), q.block_table().end());
    s.tokens.emplace_back(q.token_ids().begin(), q.token_ids().end());
  }
  s.stats = pool.stats();
  return s;
}

// Ownership, refcounts, fills, lists and contents after a step; "" when all hold.
std::string check_all(const std::vector<SequenceBlocks>& seqs, const BlockPool& pool,
                      const KvCacheStorage& storage, const PrefixCache* cache) {
  pool.check_consistency();
  const int p = pool.page_size();
  std::vector<int32_t> owners(static_cast<size_t>(pool.num_blocks()), 0);
  std::vector<int> max_view(owners.size(), 0);
  for (size_t s = 0; s < seqs.size(); ++s) {
    const auto table = seqs[s].block_table();
    std::vector<BlockId> sorted(table.begin(), table.end());
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
      return "sequence " + std::to_string(s) + " holds a block twice";
    for (size_t i = 0; i < table.size(); ++i) {
      ++owners[static_cast<size_t>(table[i])];
      const int view =
          static_cast<int>(std::min<int64_t>(p, seqs[s].num_tokens() - int64_t(i) * p));
      max_view[static_cast<size_t>(table[i])] =
          std::max(max_view[static_cast<size_t>(table[i])], view);
    }
    const std::string rows = check_rows(storage, seqs[s]);
    if (!rows.empty()) return "sequence " + std::to_string(s) + ": " + rows;
  }
  for (BlockId b = 0; b < pool.num_blocks(); ++b) {
    const size_t i = static_cast<size_t>(b);
    // A block is shared only through its refcount: owners == refcount, always.
    if (owners[i] != pool.refcount(b))
      return "block " + std::to_string(b) + ": " + std::to_string(owners[i]) +
             " owners, refcount " + std::to_string(pool.refcount(b));
    if (owners[i] > 0 && pool.fill(b) < max_view[i])
      return "block " + std::to_string(b) + " fill " + std::to_string(pool.fill(b)) + " < " +
             std::to_string(max_view[i]);
    if (cache && cache->holds(b) != pool.is_cached(b))
      return "block " + std::to_string(b) + ": cache and pool disagree";
    if (pool.is_cached(b) && pool.fill(b) != p) return "cached block not full";
  }
  return "";
}

TEST_P(CacheProperty, RandomOperationsKeepEveryInvariant) {
  const Config cfg = GetParam();
  const int p = cfg.page_size;
  const int32_t num_blocks = std::max(12, 160 / p);
  BlockPool pool = std::move(BlockPool::create(num_blocks, p)).value();
  KvCacheStorage storage =
      std::move(
          KvCacheStorage::allocate(
              {.num_layers = 2, .num_blocks = num_blocks, .page_size = p, .record_bytes = 64}))
          .value();
  std::unique_ptr<PrefixCache> cache;
  if (cfg.hash_bits > 0)
    cache = std::make_unique<PrefixCache>(&pool, PrefixCacheOptions{cfg.hash_bits});
  Rng rng(cfg.seed);
  // Prompt families: a shared system prompt each, so prefixes repeat and hit the cache.
  // At least 3 full pages each, so every page size sees hits.
  std::vector<std::vector<int32_t>> families(3, std::vector<int32_t>(std::max(48, 3 * p)));
  for (auto& f : families)
    for (auto& t : f) t = static_cast<int32_t>(rng.below(1000));
  auto small_tokens = [&](int n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = static_cast<int32_t>(rng.below(4));  // few ids: shared suffixes too
    return t;
  };

  std::vector<SequenceBlocks> seqs;
  std::map<std::string, int> seen;  // how often each path ran
  for (int step = 0; step < 400; ++step) {
    const uint64_t op = seqs.empty() ? 0 : rng.below(10);
    std::string what;
    if (op <= 2 && seqs.size() < 8) {
      what = "admit";
      std::vector<int32_t> prompt = families[rng.below(families.size())];
      prompt.resize(rng.below(prompt.size() + 1));
      const auto tail = small_tokens(static_cast<int>(rng.below(12)));
      prompt.insert(prompt.end(), tail.begin(), tail.end());
      const Snapshot before = snapshot(seqs, pool);
      SequenceBlocks seq(&pool, &storage);
      const int64_t hit = cache ? cache->acquire(prompt, &seq) : 0;
      if (hit > 0) ++seen["prefix hit"];
      if (seq.append(std::span<const int32_t>(prompt).subspan(hit)) == PoolOutcome::kOutOfPages) {
        ++seen["out of pages"];
        ASSERT_EQ(seq.num_tokens(), hit);
        seq.release();
        // Only LRU order may differ: the borrowed idle blocks went back to the tail.
        const Snapshot after = snapshot(seqs, pool);
        ASSERT_TRUE(after.tables == before.tables && after.tokens == before.tokens) << step;
      } else {
        write_rows(storage, seq, hit, seq.num_tokens());
        if (cache && rng.below(5) != 0) cache->insert(&seq);
        seqs.push_back(std::move(seq));
      }
    } else if (op <= 5) {
      what = "append";
      SequenceBlocks& seq = seqs[rng.below(seqs.size())];
      const auto t = small_tokens(1 + static_cast<int>(rng.below(2 * p + 1)));
      const int64_t from = seq.num_tokens();
      const bool shared_tail = from % p != 0 && !pool.is_writable(seq.block_table().back());
      const Snapshot before = snapshot(seqs, pool);
      if (seq.append(t) == PoolOutcome::kOutOfPages) {
        ++seen["out of pages"];
        ASSERT_TRUE(snapshot(seqs, pool) == before) << "step " << step;
      } else {
        if (shared_tail) ++seen["copy on write"];
        write_rows(storage, seq, from, seq.num_tokens());
        if (cache && rng.below(3) != 0) cache->insert(&seq);
      }
    } else if (op == 6 && seqs.size() < 8) {
      what = "fork";
      seqs.push_back(seqs[rng.below(seqs.size())].fork());
    } else if (op == 7) {
      what = "truncate";
      SequenceBlocks& seq = seqs[rng.below(seqs.size())];
      seq.truncate(static_cast<int64_t>(rng.below(static_cast<uint64_t>(seq.num_tokens()) + 1)));
    } else {
      what = "release";
      seqs.erase(seqs.begin() + static_cast<ptrdiff_t>(rng.below(seqs.size())));
    }
    ++seen[what];
    const std::string bad = check_all(seqs, pool, storage, cache.get());
    ASSERT_EQ(bad, "") << "after step " << step << " (" << what << ")";
  }

  seqs.clear();
  BlockPoolStats s = pool.stats();
  EXPECT_EQ(s.pages_used, 0);
  EXPECT_EQ(s.tokens_stored, 0);
  EXPECT_EQ(s.pages_free + s.pages_cached_idle, num_blocks);
  if (cache) {
    EXPECT_GT(seen["prefix hit"], 0);
    EXPECT_GT(cache->stats().evictions, 0);
    if (cfg.hash_bits < 8) {
      EXPECT_GT(cache->stats().rejected_hits, 0);
    }
  }
  cache.reset();
  EXPECT_EQ(pool.stats().pages_free, num_blocks);  // every block returned
  pool.check_consistency();
  // The run covered the interesting paths.
  EXPECT_GT(seen["out of pages"], 0);
  if (p > 1) {  // 1-token pages are never partial, so never copied
    EXPECT_GT(seen["copy on write"], 0);
  }
  EXPECT_GT(seen["fork"], 0);
  EXPECT_GT(seen["truncate"], 0);
}

std::vector<Config> configs() {
  std::vector<Config> out;
  for (uint64_t seed : {1, 2, 3}) {
    out.push_back({1, 128, seed});
    out.push_back({2, 2, seed});
    out.push_back({4, 128, seed});
    out.push_back({4, 1, seed});
    out.push_back({8, 0, seed});
    out.push_back({16, 3, seed});
    out.push_back({64, 128, seed});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Seeds, CacheProperty, ::testing::ValuesIn(configs()), name_of);

}  // namespace
}  // namespace mla
