// Test helpers for the paged cache: KV row contents derived from a token prefix (as real KV rows
// are), written and checked through a sequence's block table.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cache/kv_cache_storage.h"
#include "cache/sequence_blocks.h"

namespace mla::testing_kv {

// Stamp of position pos: a rolling mix of tokens[0..pos], so equal prefixes give equal rows and
// any difference anywhere before pos changes it.
inline std::vector<uint64_t> prefix_stamps(std::span<const int32_t> tokens) {
  std::vector<uint64_t> out(tokens.size());
  uint64_t h = 0x243f6a8885a308d3ull;
  for (size_t i = 0; i < tokens.size(); ++i) {
    h = (h ^ static_cast<uint32_t>(tokens[i])) * 0x100000001b3ull;
    h ^= h >> 29;
    out[i] = h;
  }
  return out;
}

// Byte k of the record of a token with stamp s in layer l.
inline uint8_t row_byte(uint64_t s, int layer, int64_t k) {
  const uint64_t x = s + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(layer * 4099 + k + 1);
  return static_cast<uint8_t>((x ^ (x >> 31)) * 0xbf58476d1ce4e5b9ull >> 56);
}

// Writes the rows of positions [from, to) of seq in every layer.
inline void write_rows(KvCacheStorage& s, const SequenceBlocks& seq, int64_t from, int64_t to) {
  const std::vector<uint64_t> st = prefix_stamps(seq.token_ids());
  for (int64_t pos = from; pos < to; ++pos) {
    const TokenSlot t = seq.slot_of(pos);
    for (int l = 0; l < s.num_layers(); ++l) {
      uint8_t* row = s.row(l, t.block, t.slot);
      for (int64_t k = 0; k < s.record_bytes(); ++k) row[k] = row_byte(st[pos], l, k);
    }
  }
}

// Empty when every row of seq, read through its block table, holds what its tokens imply;
// otherwise names the first wrong (position, layer).
inline std::string check_rows(const KvCacheStorage& s, const SequenceBlocks& seq) {
  const std::vector<uint64_t> st = prefix_stamps(seq.token_ids());
  const std::span<const BlockId> table = seq.block_table();
  const int p = seq.page_size();
  if (table.size() != static_cast<size_t>((seq.num_tokens() + p - 1) / p))
    return "block table of " + std::to_string(table.size()) + " entries for " +
           std::to_string(seq.num_tokens()) + " tokens";
  for (int64_t pos = 0; pos < seq.num_tokens(); ++pos) {
    for (int l = 0; l < s.num_layers(); ++l) {
      const uint8_t* row = s.row(l, table[static_cast<size_t>(pos / p)], static_cast<int>(pos % p));
      for (int64_t k = 0; k < s.record_bytes(); ++k)
        if (row[k] != row_byte(st[pos], l, k))
          return "position " + std::to_string(pos) + " layer " + std::to_string(l) + " byte " +
                 std::to_string(k);
    }
  }
  return "";
}

}  // namespace mla::testing_kv
