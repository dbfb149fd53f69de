// kv_b_proj split per head and prepared once at load, in the two forms the MLA paths read:
//   W_UK[h] = rows [h·(d_n + d_v), +d_n) of kv_b_proj [h_q · (d_n + d_v), r],
//   W_UV[h] = the next d_v rows.
// FP32 copies serve the decompressed prefill (up-projecting the latent, compute-bound) and the
// reference. The absorbed path on the CPU (every decode step) reads the checkpoint's own dtype
// instead: for block-FP8 that is a quarter of the FP32 bytes, 2 MB instead of 8 MB per layer of
// V2-Lite, and it is weight traffic of every token.
#pragma once

#include <vector>

#include "core/aligned_buffer.h"
#include "core/thread_pool.h"
#include "kernels/linear.h"

namespace mla {

struct MlaAbsorbedWeights {
  int h_q = 0, d_n = 0, d_v = 0, r = 0;
  AlignedBuffer<float> w_uk;  // [h_q, d_n, r] fp32
  AlignedBuffer<float> w_uv;  // [h_q, d_v, r] fp32

  // As stored, one LinearWeight per head, so that both products are y = x · Wᵀ (kernels/linear.h):
  //   uk_t[h]: W_UK[h]ᵀ [r, d_n] (transposed once here; q_lat = W_UK[h]ᵀ · q_nope)
  //   uv[h]:   W_UV[h]  [d_v, r]
  // FP8 copies carry their own scale grids: blocks of [block_cols, g] (uk_t) and [g, block_cols]
  // (uv) with g = gcd(block_rows, d_n + d_v, d_n), so that every new block lies inside one block
  // of the checkpoint's grid whatever the head dims (g = 128 for DeepSeek's 128 + 128 rows).
  std::vector<LinearWeight> uk_t, uv;  // [h_q] views into the buffers below
  AlignedBuffer<uint8_t> uk_t_bytes;   // [h_q, r, d_n] elements of the stored dtype
  AlignedBuffer<uint8_t> uv_bytes;     // [h_q, d_v, r]
  AlignedBuffer<float> uk_t_scale;     // FP8 only: [h_q, ceil(r / block_cols), ceil(d_n / g)]
  AlignedBuffer<float> uv_scale;       // FP8 only: [h_q, ceil(d_v / g), ceil(r / block_cols)]
};

// kv_b_proj as bound from the checkpoint ([h_q · (d_n + d_v), r] in BF16, F16, F32, block-FP8 or a
// GGUF block format); invalid_argument naming what is wrong (dims, a shape that does not match
// them, the weight). `stored`: the per-head weights as a GGUF file splits them (attn_k_b
// [h_q · r, d_n], attn_v_b [h_q · d_v, r], any dtype linear() takes), which uk_t / uv then view
// instead of copies of kv_b_proj (a Q8_0 pair is 0.27x the FP32 copies' bytes, read every decode
// step); kv_b_proj must hold the same values (it is the FP32 split's source).
struct StoredHeadWeights {
  LinearWeight uk_t, uv;
};
Result<MlaAbsorbedWeights> prepare_absorbed_weights(const LinearWeight& kv_b_proj, int h_q, int d_n,
                                                    int d_v,
                                                    const StoredHeadWeights* stored = nullptr);

// The absorbed path's two products on the stored weights (linear_many over the heads, one pass
// of the pool each; `rows` = (sequence, query) pairs, 1 per sequence in decode):
//   q_abs[s,h,0:r] = W_UK[h]ᵀ · q_nope[s,h];  q_abs[s,h,r:] = q_pe[s,h] (already rotated)
//     q [rows, h_q, d_n + d_r];  q_abs [rows, h_q, r + d_r]   fp32
Status absorb_query(int rows, int d_r, const float* q, const MlaAbsorbedWeights& w, float* q_abs,
                    ThreadPool& pool);
//   o[s,h,:] = W_UV[h] · o_lat[s,h,:]     o_lat [rows, h_q, r];  o [rows, h_q, d_v]   fp32
Status unabsorb_output(int rows, const float* o_lat, const MlaAbsorbedWeights& w, float* o,
                       ThreadPool& pool);

}  // namespace mla
