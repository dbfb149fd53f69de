// What one rank holds of a model split over ranks (docs/ARCHITECTURE.md §Ranks): contiguous
// ranges of heads, experts, FFN widths and vocabulary, cut out of the checkpoint's matrices into
// copies this rank owns, so that its threads touch them first and they live in its NUMA node.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "kernels/linear.h"
#include "mla/status.h"

namespace mla {

struct IndexRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// Part `part` of [0, total) cut into `parts` ranges of whole granules (the last granule may be
// partial when total is not a multiple), as even as granules allow: no two parts differ by more
// than one granule. A part may be empty.
IndexRange split_range(int64_t total, int parts, int part, int64_t granule = 1);

// Owned copies of weight slices (AlignedBuffers; their addresses do not move).
struct SliceStore {
  std::vector<AlignedBuffer<uint8_t>> bytes;
  std::vector<AlignedBuffer<float>> scales;
  int64_t total_bytes = 0;
  // The slices slice_linear widened to F32 (a GGUF block format cut inside its blocks): `what`
  // with the format and the columns, for the load's warning.
  std::vector<std::string> widened;
  // Frees the copy whose bytes start at data (a weight re-laid or requantised into new memory,
  // or kv_b_proj once split per head); no-op for other pointers.
  void release(const uint8_t* data);
};

// W [out, in] restricted to rows `rows` and columns `cols`, copied into `store`: [rows.size(),
// cols.size()] in W's dtype. A block-scaled W gets its own scale grid with blocks of
// gcd(block_rows, rows.begin) × gcd(block_cols, cols.begin), each inside one block of W's grid,
// so every value keeps its scale. A GGUF block format cut inside its blocks (columns not on
// block boundaries) comes out as F32, its values exactly, and is listed in store.widened (its
// products then run in FP32, not on int8 activations); interleaved layouts (repacked) cannot
// be cut. invalid_argument naming `what` and the offending bound.
Result<LinearWeight> slice_linear(const LinearWeight& w, IndexRange rows, IndexRange cols,
                                  SliceStore& store, const std::string& what);
// The whole of W, copied (a replicated weight, placed in this rank's memory).
Result<LinearWeight> copy_linear(const LinearWeight& w, SliceStore& store, const std::string& what);

// The column granule a split of W's columns keeps to stay in W's format: a GGUF block format's
// block, else 1.
int64_t column_granule(const LinearWeight& w);

}  // namespace mla
