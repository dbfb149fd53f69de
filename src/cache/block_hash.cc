// hash_block: XXH3-128 of the parent hash and a block's token ids (libxxhash).
#include "cache/block_hash.h"

#include <xxhash.h>

#include <array>
#include <cstring>

#include "cache/cache_capacity.h"
#include "core/check.h"

namespace mla {

BlockHash hash_block(const BlockHash& parent, std::span<const int32_t> tokens, int keep_bits) {
  MLA_CHECK(
      tokens.size() <= static_cast<size_t>(kMaxPageSize) && keep_bits >= 1 && keep_bits <= 128,
      "hash_block of {} tokens keeping {} bits", tokens.size(), keep_bits);
  // One contiguous input (at most 1,040 bytes): cheaper than the streaming API for short inputs.
  std::array<uint8_t, sizeof(BlockHash) + sizeof(int32_t) * kMaxPageSize> buf;
  std::memcpy(buf.data(), &parent.lo, 8);
  std::memcpy(buf.data() + 8, &parent.hi, 8);
  std::memcpy(buf.data() + 16, tokens.data(), tokens.size_bytes());
  const XXH128_hash_t h = XXH3_128bits(buf.data(), 16 + tokens.size_bytes());
  BlockHash out{h.low64, h.high64};
  if (keep_bits < 128) {
    if (keep_bits <= 64) {
      out.hi = 0;
      out.lo &= keep_bits == 64 ? ~uint64_t{0} : (uint64_t{1} << keep_bits) - 1;
    } else {
      out.hi &= (uint64_t{1} << (keep_bits - 64)) - 1;
    }
  }
  return out;
}

}  // namespace mla
