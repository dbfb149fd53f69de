// The prefix-cache hash chain over full blocks: h_i = XXH3-128(h_{i-1} ‖ token ids of block i).
// Only the hash; the cache that verifies hits lives in prefix_cache.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace mla {

struct BlockHash {
  uint64_t lo = 0;
  uint64_t hi = 0;
  friend bool operator==(const BlockHash&, const BlockHash&) = default;
};

// The parent of the first block. A per-tenant salt would replace it (not implemented).
inline constexpr BlockHash kRootBlockHash{};

// XXH3_128bits over the 16 bytes of parent (lo then hi) followed by the int32 token ids, all in
// host byte order (little endian on every supported target), so hashes are reproducible across
// processes and runs. keep_bits in [1, 128] masks the result to its low bits: 128 in production;
// tests shrink it to force collisions. Cost: one pass over 16 + 4·n bytes.
BlockHash hash_block(const BlockHash& parent, std::span<const int32_t> tokens, int keep_bits = 128);

struct BlockHashHasher {
  size_t operator()(const BlockHash& h) const { return h.lo ^ (h.hi * 0x9e3779b97f4a7c15ull); }
};

// Where a sequence's full block i stands in the chain: its hash and the id of the verified cache
// entry holding the same contents (prefix included), 0 when there is none. Sequences keep one
// per hashed full block so that hashing stays incremental.
struct ChainLink {
  BlockHash hash;
  uint64_t entry_id = 0;
};

}  // namespace mla
