// KvCacheStorage: the memory of the paged latent KV cache, one [num_blocks, page_size,
// record_bytes] byte tensor per layer, indexed by BlockPool ids. Bytes only: formats live in
// cache_format.h.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "cache/block_pool.h"
#include "cache/cache_capacity.h"
#include "core/aligned_buffer.h"
#include "mla/status.h"

namespace mla {

struct KvCacheShape {
  int num_layers = 0;
  int32_t num_blocks = 0;
  int page_size = kDefaultPageSize;
  // Bytes per token and layer: kv_bytes_per_token(dtype, r, d_r) from core/kv_format.h
  // (1,152 bf16, 656 fp8_e4m3 / int8, 416 nvfp4 at r = 512, d_r = 64).
  int64_t record_bytes = 0;
  // Keep a log of copy_slots (take_copies): the leader of a model split over ranks repeats each
  // copy-on-write copy in every follower's cache (docs/ARCHITECTURE.md §Ranks).
  bool record_copies = false;
};

// One copy_slots call: slots [0, num_slots) of block src into block dst, every layer.
struct SlotCopy {
  BlockId dst = 0, src = 0;
  int num_slots = 0;
};

// Move-only; sequences hold its address, so do not move it once they refer to it. The memory is
// left uninitialised (the kernels never read past a sequence's length); allocating it does not
// touch it, so pages are committed by the OS as they are first written.
class KvCacheStorage {
 public:
  // Validates the shape (page size, page alignment via kv_page_bytes, num_layers >= 1,
  // num_blocks >= 1; invalid_argument) and allocates each layer with AlignedBuffer::allocate
  // (out_of_memory naming the layer and bytes). Layer and page bases are 64-byte aligned.
  static Result<KvCacheStorage> allocate(const KvCacheShape& shape);

  KvCacheStorage(KvCacheStorage&&) = default;
  KvCacheStorage& operator=(KvCacheStorage&&) = default;

  const KvCacheShape& shape() const { return shape_; }
  int num_layers() const { return shape_.num_layers; }
  int32_t num_blocks() const { return shape_.num_blocks; }
  int page_size() const { return shape_.page_size; }
  int64_t record_bytes() const { return shape_.record_bytes; }
  // page_size · record_bytes: pages are dense, as the kernels index them, and a multiple of 64.
  int64_t page_bytes() const { return page_bytes_; }
  int64_t layer_bytes() const { return page_bytes_ * shape_.num_blocks; }
  int64_t total_bytes() const { return layer_bytes() * shape_.num_layers; }

  // The kernels' kv_cache of one layer: [num_blocks, page_size, record_bytes].
  uint8_t* layer_base(int layer) { return layers_[layer_index(layer)].data(); }
  const uint8_t* layer_base(int layer) const { return layers_[layer_index(layer)].data(); }

  // One token's record: [record_bytes] at (layer, block, slot). Bounds are checked in debug and
  // sanitizer builds.
  uint8_t* row(int layer, BlockId block, int slot) {
    return layer_base(layer) + offset(block, slot);
  }
  const uint8_t* row(int layer, BlockId block, int slot) const {
    return layer_base(layer) + offset(block, slot);
  }

  // Copies slots [0, num_slots) of block src into block dst in every layer: the copy of
  // copy-on-write. Costs num_layers · num_slots · record_bytes bytes of memcpy.
  void copy_slots(BlockId dst, BlockId src, int num_slots);
  // The copies made since the last call, in order (shape().record_copies; else always empty).
  std::vector<SlotCopy> take_copies() { return std::exchange(copies_, {}); }

 private:
  KvCacheStorage() = default;
  size_t layer_index(int layer) const;
  int64_t offset(BlockId block, int slot) const;

  KvCacheShape shape_;
  int64_t page_bytes_ = 0;
  std::vector<AlignedBuffer<uint8_t>> layers_;  // [num_layers] of [num_blocks · page_bytes]
  std::vector<SlotCopy> copies_;                // record_copies: since take_copies
};

}  // namespace mla
