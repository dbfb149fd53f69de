// The FP32 RoPE rotation over a precomputed cos/sin table (kernels/rope_table.h checks the
// arguments; this trusts them).
#pragma once

#include <cstdint>

#include "kernels/rope_params.h"

namespace mla::cpu {

//   cos, sin [max_positions, dim / 2];  x [n_tokens, n_heads, row_stride], values at offset.
void rope_rotate(int dim, RopeLayout layout, const float* cos, const float* sin,
                 const int64_t* positions, int n_tokens, int n_heads, int64_t row_stride,
                 int64_t offset, float* x);

}  // namespace mla::cpu
