// F9 (docs/RELIABILITY.md §Checklist): an op script → the paged KV manager (BlockPool,
// SequenceBlocks with copy-on-write, PrefixCache). Ops: new sequence, append, truncate, fork,
// release (free or preempt), release twice, prefix-cache hit (acquire), insert. Tokens come from a
// 3-letter alphabet and the hash may keep only 2 bits, so prefixes and hash collisions are common.
// Invariants after every op: the pool's own consistency walk passes; free + used + idle == total;
// each block's refcount equals the number of sequence tables holding it (so refcounts never go
// negative, nothing is freed twice, and no page is shared without refcount > 1); a sequence's table
// covers exactly its tokens.
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "cache/block_pool.h"
#include "cache/prefix_cache.h"
#include "cache/sequence_blocks.h"
#include "fuzz_common.h"

namespace {

using namespace mla;

void check(const BlockPool& pool, const std::vector<std::unique_ptr<SequenceBlocks>>& seqs) {
  pool.check_consistency();
  const BlockPoolStats st = pool.stats();
  MLA_CHECK(st.pages_used + st.pages_free + st.pages_cached_idle == st.num_blocks,
            "used {} + free {} + idle {} != {}", st.pages_used, st.pages_free, st.pages_cached_idle,
            st.num_blocks);
  std::map<BlockId, int32_t> holders;
  for (const auto& s : seqs) {
    const int64_t pages = (s->num_tokens() + pool.page_size() - 1) / pool.page_size();
    MLA_CHECK(int64_t(s->block_table().size()) == pages, "{} blocks for {} tokens",
              s->block_table().size(), s->num_tokens());
    for (BlockId b : s->block_table()) ++holders[b];
  }
  for (BlockId b = 0; b < pool.num_blocks(); ++b) {
    const auto it = holders.find(b);
    const int32_t n = it == holders.end() ? 0 : it->second;
    MLA_CHECK(pool.refcount(b) == n, "block {} has refcount {} but {} holders", b, pool.refcount(b),
              n);
  }
  MLA_CHECK(int32_t(holders.size()) == st.pages_used, "{} held blocks, {} used", holders.size(),
            st.pages_used);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::ByteReader in(data, size);
  const int32_t num_blocks = int32_t(in.range(1, 48));
  const int page_size = 1 << in.range(0, 4);
  Result<BlockPool> created = BlockPool::create(num_blocks, page_size);
  MLA_CHECK(created.ok(), "{}", created.status().to_string());
  BlockPool pool = std::move(*created);
  PrefixCacheOptions opts;
  opts.hash_bits = in.u8() & 1 ? 2 : 128;
  PrefixCache cache(&pool, opts);
  std::vector<std::unique_ptr<SequenceBlocks>> seqs;  // destroyed before the cache and pool
  auto tokens = [&](int64_t n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t& x : t) x = int32_t(in.u8() % 3);
    return t;
  };
  for (int step = 0; step < 256 && !in.empty(); ++step) {
    const uint8_t op = in.u8() % 8;
    const size_t i = seqs.empty() ? 0 : size_t(in.u8()) % seqs.size();
    if (op == 0 || seqs.empty()) {
      if (seqs.size() < 8) seqs.push_back(std::make_unique<SequenceBlocks>(&pool, nullptr));
    } else if (op == 1) {
      const std::vector<int32_t> t = tokens(in.range(1, 40));
      const std::vector<BlockId> before(seqs[i]->block_table().begin(),
                                        seqs[i]->block_table().end());
      const int64_t n = seqs[i]->num_tokens();
      if (seqs[i]->append(t) == PoolOutcome::kOutOfPages) {
        MLA_CHECK(seqs[i]->num_tokens() == n, "a failed append changed the sequence");
        MLA_CHECK(std::vector<BlockId>(seqs[i]->block_table().begin(),
                                       seqs[i]->block_table().end()) == before,
                  "a failed append changed the block table");
      }
    } else if (op == 2) {
      seqs[i]->truncate(in.range(0, seqs[i]->num_tokens()));
    } else if (op == 3) {
      if (seqs.size() < 8) seqs.push_back(std::make_unique<SequenceBlocks>(seqs[i]->fork()));
    } else if (op == 4) {
      seqs.erase(seqs.begin() + ptrdiff_t(i));  // free (or preempt): the destructor releases
    } else if (op == 5) {
      seqs[i]->release();
      seqs[i]->release();  // a second release holds nothing and frees nothing
    } else if (op == 6 && seqs.size() < 8) {
      // A prefix-cache hit: another sequence's tokens plus a suffix, into a new sequence.
      std::vector<int32_t> want(seqs[i]->token_ids().begin(), seqs[i]->token_ids().end());
      const std::vector<int32_t> suffix = tokens(in.range(0, 8));
      want.insert(want.end(), suffix.begin(), suffix.end());
      auto s = std::make_unique<SequenceBlocks>(&pool, nullptr);
      const int64_t served = want.empty() ? 0 : cache.acquire(want, s.get());
      MLA_CHECK(
          served == s->num_tokens() && served % page_size == 0 && served <= int64_t(want.size()),
          "acquire served {} of {} tokens", served, want.size());
      for (int64_t k = 0; k < served; ++k)
        MLA_CHECK(s->token_ids()[size_t(k)] == want[size_t(k)], "a hit with other tokens at {}", k);
      (void)s->append(std::span<const int32_t>(want).subspan(size_t(served)));
      seqs.push_back(std::move(s));
    } else if (op == 7) {
      cache.insert(seqs[i].get());
    }
    check(pool, seqs);
  }
  seqs.clear();
  check(pool, seqs);
  return 0;
}
