// RoPE on the fast path: cos/sin of every (position, pair) computed once in FP64 on the host (YaRN
// frequencies and attention factor of kernels/ref's definitions, checked against the worked values
// of docs/kernels/rope.md) and stored FP32; the rotation itself runs in FP32 (kernels/cpu/rope.cc),
// as the decoupled RoPE of MLA requires (docs/kernels/rope.md §Numerics: low precision here grows
// with position).
#pragma once

#include <cstdint>

#include "core/aligned_buffer.h"
#include "kernels/rope_params.h"
#include "mla/status.h"

namespace mla {

struct RopeTable {
  RopeConfig cfg;
  int64_t max_positions = 0;
  AlignedBuffer<float> cos, sin;  // [max_positions, dim / 2], attention factor folded in
};

// invalid_argument for an odd or non-positive dim or max_positions < 1; out_of_memory when the
// table does not fit.
Result<RopeTable> make_rope_table(const RopeConfig& cfg, int64_t max_positions);

// Rotates, in place, the cfg.dim values at x + (t·n_heads + h)·row_stride + offset for token t
// (absolute position positions[t]) and head h. invalid_argument when a position is negative or
// not below the table's max_positions.
//   x [n_tokens, n_heads, row_stride] fp32
Status rope_apply_f32(const RopeTable& table, const int64_t* positions, int n_tokens, int n_heads,
                      int64_t row_stride, int64_t offset, float* x);

}  // namespace mla
