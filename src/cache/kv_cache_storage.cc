// KvCacheStorage: per-layer page arrays, their allocation and the copy-on-write copy.
#include "cache/kv_cache_storage.h"

#include <fmt/format.h>

#include <cstring>

#include "core/check.h"
#include "core/checked_math.h"

namespace mla {

Result<KvCacheStorage> KvCacheStorage::allocate(const KvCacheShape& shape) {
  MLA_ASSIGN_OR_RETURN(const int64_t page_bytes,
                       kv_page_bytes(shape.record_bytes, shape.page_size));
  if (shape.num_layers < 1)
    return invalid_argument(
        fmt::format("KV cache of {} layers: need at least 1", shape.num_layers));
  if (shape.num_blocks < 1)
    return invalid_argument(
        fmt::format("KV cache of {} blocks: need at least 1", shape.num_blocks));
  // page_bytes <= 2^48 (kv_page_bytes), num_blocks < 2^31: check the product before forming it.
  const std::optional<int64_t> layer = checked_mul<int64_t>(page_bytes, shape.num_blocks);
  if (!layer)
    return out_of_memory(fmt::format("KV cache layer of {} blocks x {} bytes overflows",
                                     shape.num_blocks, page_bytes));
  const size_t layer_bytes = static_cast<size_t>(*layer);
  KvCacheStorage s;
  s.shape_ = shape;
  s.page_bytes_ = page_bytes;
  s.layers_.reserve(shape.num_layers);
  for (int l = 0; l < shape.num_layers; ++l) {
    MLA_ASSIGN_OR_RETURN(
        auto buf, AlignedBuffer<uint8_t>::allocate(
                      layer_bytes, fmt::format("KV cache layer {} of {} ({} blocks x {} bytes)", l,
                                               shape.num_layers, shape.num_blocks, page_bytes)));
    s.layers_.push_back(std::move(buf));
  }
  return s;
}

size_t KvCacheStorage::layer_index(int layer) const {
  MLA_DCHECK(layer >= 0 && layer < shape_.num_layers, "layer {} of {}", layer, shape_.num_layers);
  return static_cast<size_t>(layer);
}

int64_t KvCacheStorage::offset(BlockId block, int slot) const {
  MLA_DCHECK(block >= 0 && block < shape_.num_blocks && slot >= 0 && slot < shape_.page_size,
             "row (block {}, slot {}) outside {} blocks of {} slots", block, slot,
             shape_.num_blocks, shape_.page_size);
  return block * page_bytes_ + slot * shape_.record_bytes;
}

void KvCacheStorage::copy_slots(BlockId dst, BlockId src, int num_slots) {
  MLA_CHECK(num_slots >= 0 && num_slots <= shape_.page_size && dst != src,
            "copy_slots({} <- {}, {} slots)", dst, src, num_slots);
  if (num_slots == 0) return;
  if (shape_.record_copies) copies_.push_back({dst, src, num_slots});
  const size_t bytes = static_cast<size_t>(num_slots) * shape_.record_bytes;
  for (int l = 0; l < shape_.num_layers; ++l) std::memcpy(row(l, dst, 0), row(l, src, 0), bytes);
}

}  // namespace mla
