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

// The parameters of a RoPE variant (kernels/registry.h): rotate, in place, the cfg.dim values at
// x + (t·n_heads + h)·row_stride + offset for token t (absolute position positions[t]) and head h.
//   positions [n_tokens];  x [n_tokens, n_heads, row_stride] fp32 (q rows: [q_nope | q_pe],
//   offset d_n; latent rows: [c_kv | k_pe], offset r)
struct RopeParams {
  const RopeTable* table = nullptr;  // cos / sin [max_positions, cfg.dim / 2] and cfg
  const int64_t* positions = nullptr;
  int n_tokens = 0, n_heads = 0;
  int64_t row_stride = 0, offset = 0;
  float* x = nullptr;
};

// invalid_argument for no table, a bad shape (negative counts, offset < 0 or offset + dim past
// row_stride), or a position negative or not below the table's max_positions.
Status validate(const RopeParams& p);

// validate(), then the RoPE variant of the CPU (the FP32 rotation of kernels/cpu/rope.h).
Status rope_apply_f32(const RopeTable& table, const int64_t* positions, int n_tokens, int n_heads,
                      int64_t row_stride, int64_t offset, float* x);

}  // namespace mla
