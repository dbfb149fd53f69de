// PrefixCache: verified lookup, insertion of full blocks and eviction bookkeeping.
#include "cache/prefix_cache.h"

#include <algorithm>

#include "core/check.h"

namespace mla {

PrefixCache::PrefixCache(BlockPool* pool, PrefixCacheOptions options)
    : pool_(pool), options_(options), page_size_(pool->page_size()) {
  MLA_CHECK(options.hash_bits >= 1 && options.hash_bits <= 128, "hash_bits {}", options.hash_bits);
  const size_t n = static_cast<size_t>(pool->num_blocks());
  entries_.resize(n);
  tokens_.resize(n * static_cast<size_t>(page_size_));
  pool_->set_eviction_listener(this);
}

PrefixCache::~PrefixCache() {
  pool_->set_eviction_listener(nullptr);
  for (size_t b = 0; b < entries_.size(); ++b)
    if (entries_[b].id != 0) pool_->uncache(static_cast<BlockId>(b));
}

std::span<const int32_t> PrefixCache::entry_tokens(BlockId block) const {
  return std::span<const int32_t>(tokens_).subspan(
      static_cast<size_t>(block) * static_cast<size_t>(page_size_),
      static_cast<size_t>(page_size_));
}

BlockId PrefixCache::find(const BlockHash& h, uint64_t parent_id, std::span<const int32_t> tokens,
                          int64_t* rejected) const {
  auto [it, end] = map_.equal_range(h);
  for (; it != end; ++it) {
    const BlockId b = it->second;
    const std::span<const int32_t> t = entry_tokens(b);
    if (entries_[static_cast<size_t>(b)].parent_id == parent_id &&
        std::equal(t.begin(), t.end(), tokens.begin(), tokens.end()))
      return b;
    ++*rejected;
  }
  return kNoBlock;
}

PrefixMatch PrefixCache::match(std::span<const int32_t> tokens) const {
  PrefixMatch m;
  BlockHash parent = kRootBlockHash;
  uint64_t parent_id = 0;
  const size_t p = static_cast<size_t>(page_size_);
  for (size_t start = 0; start + p <= tokens.size(); start += p) {
    const std::span<const int32_t> block_tokens = tokens.subspan(start, p);
    const BlockHash h = hash_block(parent, block_tokens, options_.hash_bits);
    const BlockId b = find(h, parent_id, block_tokens, &m.rejected_hits);
    if (b == kNoBlock) break;
    parent = h;
    parent_id = entries_[static_cast<size_t>(b)].id;
    m.blocks.push_back(b);
    m.links.push_back({h, parent_id});
  }
  m.num_tokens = static_cast<int64_t>(m.blocks.size() * p);
  return m;
}

int64_t PrefixCache::acquire(std::span<const int32_t> tokens, SequenceBlocks* seq) {
  MLA_CHECK(seq->num_tokens() == 0, "acquire into a sequence of {} tokens", seq->num_tokens());
  PrefixMatch m = match(tokens);
  for (BlockId b : m.blocks) pool_->incref(b);
  seq->adopt_full_blocks(m.blocks, tokens.first(static_cast<size_t>(m.num_tokens)), m.links);
  const int64_t queried = static_cast<int64_t>(tokens.size()) / page_size_;
  ++stats_.lookups;
  stats_.queried_blocks += queried;
  stats_.hit_blocks += static_cast<int64_t>(m.blocks.size());
  stats_.miss_blocks += queried - static_cast<int64_t>(m.blocks.size());
  stats_.rejected_hits += m.rejected_hits;
  return m.num_tokens;
}

void PrefixCache::insert(SequenceBlocks* seq) {
  MLA_CHECK(seq->pool_ == pool_, "insert of a sequence from another pool");
  const size_t p = static_cast<size_t>(page_size_);
  const size_t full = static_cast<size_t>(seq->num_tokens()) / p;
  int64_t rejected = 0;
  for (size_t i = seq->links_.size(); i < full; ++i) {
    const ChainLink parent = i == 0 ? ChainLink{kRootBlockHash, 0} : seq->links_[i - 1];
    const std::span<const int32_t> block_tokens = seq->token_ids().subspan(i * p, p);
    const BlockHash h = hash_block(parent.hash, block_tokens, options_.hash_bits);
    const BlockId block = seq->blocks_[i];
    BlockId same = find(h, parent.entry_id, block_tokens, &rejected);
    if (same == kNoBlock && pool_->is_cached(block)) {
      // A table that shares this block (a fork) cached it under a chain one of whose earlier
      // entries has since been evicted, so this chain cannot find it (fuzz_kv_allocator found
      // this abort). A table holds a block only after the tokens it was written after, so the
      // block's prefix is this chain's: re-parent its entry here, which makes it and its
      // children reachable again. Its hash depends on tokens only, so the map key stays.
      Entry& e = entries_[static_cast<size_t>(block)];
      MLA_CHECK(e.id != 0 && e.hash == h, "cached block {} at position {} has no matching entry",
                block, i);
      e.parent_id = parent.entry_id;
      same = block;
    } else if (same == kNoBlock) {
      Entry& e = entries_[static_cast<size_t>(block)];
      e = Entry{h, next_id_++, parent.entry_id};
      std::copy(block_tokens.begin(), block_tokens.end(), tokens_.begin() + block * p);
      map_.emplace(h, block);
      pool_->mark_cached(block);
      ++stats_.inserted_blocks;
      same = block;
    }
    seq->links_.push_back({h, entries_[static_cast<size_t>(same)].id});
  }
  stats_.rejected_hits += rejected;
}

void PrefixCache::erase(BlockId block) {
  Entry& e = entries_[static_cast<size_t>(block)];
  MLA_CHECK(e.id != 0, "erase of block {} without an entry", block);
  auto [it, end] = map_.equal_range(e.hash);
  for (; it != end && it->second != block; ++it) {
  }
  MLA_CHECK(it != end, "cache entry of block {} missing from the hash map", block);
  map_.erase(it);
  e = Entry{};
}

void PrefixCache::on_evict(BlockId block) {
  erase(block);
  ++stats_.evictions;
}

PrefixCacheStats PrefixCache::stats() const {
  PrefixCacheStats s = stats_;
  s.cached_blocks = static_cast<int64_t>(map_.size());
  return s;
}

}  // namespace mla
