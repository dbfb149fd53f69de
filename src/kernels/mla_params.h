// Parameter structs of the MLA attention ops, shared by every backend (ref, cpu, cuda), and their
// single validate(). Kernels trust what validate() accepted. Dims follow FlashMLA:
// d_qk = r + d_r (576 for DeepSeek), d_v = r (512) for the absorbed decode.
// See docs/kernels/mla_decode.md for the contract and numerics.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/kv_format.h"
#include "kernels/paged_latent_cache.h"
#include "mla/status.h"

namespace mla {

// Absorbed attention over a paged latent cache: every head reads the same cache row
// [c_kv (d_v values) | k_pe (d_qk - d_v values)]. "V" is the first d_v columns of the row.
struct MlaDecodeParams {
  int b = 0;       // sequences
  int s_q = 0;     // query tokens per sequence (all sequences alike, as in FlashMLA)
  int h_q = 0;     // query heads
  int d_qk = 576;  // r + d_r
  int d_v = 512;   // r

  DType q_dtype = DType::kBF16;  // kBF16 or kF32
  const void* q = nullptr;       // [b, s_q, h_q, d_qk]
  // b sequences of rows with r = d_v and d_r = d_qk - d_v; quantised records are dequantised in
  // the kernel.
  PagedLatentCache cache;
  float softmax_scale = 1.0f;
  // Bottom-right aligned: query i of s_q sees keys 0 .. s_kv - s_q + i.
  bool causal = false;

  float* out = nullptr;  // [b, s_q, h_q, d_v] fp32; rows with no visible key get 0
  float* lse = nullptr;  // [b, h_q, s_q] fp32 natural log; +inf for rows with no visible key
  // Optional, for checking only: scaled logits [b, s_q, h_q, scores_stride]; masked keys get -inf,
  // columns at or past s_kv are left untouched.
  float* scores = nullptr;
  int64_t scores_stride = 0;
  // Optional, for checking only, written by the reference alone: Σ_t p_t |v_t| [b, s_q, h_q,
  // d_v], the magnitude that bounds the rounding of the probabilities of P·V to BF16.
  float* abs_out = nullptr;
  // Asks for the latent part of both products on int8 dot products (mla_decode.cpu.avx512vnni.int8:
  // the query quantised per 128-channel block, the probabilities as u8 steps;
  // docs/kernels/mla_decode.md "int8 products over an INT8 cache"), taken over an INT8 cache, or
  // a BF16 one with at least 64 rows a sequence, on AVX512-VNNI CPUs without AMX. Other inputs
  // run the variant they would run without it.
  bool int8_products = false;
};

// Decompressed attention for one sequence's chunk of s_q new queries over s_kv cached tokens
// (the chunk itself included, as its last s_q tokens when causal). K and V of every head are
// up-projected from the latent: k_nope[t,h] = W_UK[h] · c[t], v[t,h] = W_UV[h] · c[t].
struct MlaPrefillParams {
  int s_q = 0, h_q = 0;
  int d_n = 128;  // qk_nope_head_dim
  int d_r = 64;   // qk_rope_head_dim
  int d_v = 128;  // v_head_dim
  int r = 512;    // kv_lora_rank

  const float* q = nullptr;  // [s_q, h_q, d_n + d_r]: q_nope | rotated q_pe
  // One sequence: block-table row 0, s_kv = seq_lens[0] keys.
  PagedLatentCache cache;
  const float* w_uk = nullptr;  // [h_q, d_n, r]  (kv_b_proj rows of each head's k_nope)
  const float* w_uv = nullptr;  // [h_q, d_v, r]  (kv_b_proj rows of each head's v)
  float softmax_scale = 1.0f;
  bool causal = true;
  // kF32: FP32 up-projections and attention tiles. kBF16: the up-projections of the cached latent
  // to K and V on BF16 dot products where the CPU has them (chunks of more than 16 rows: the
  // latent rows and W_UK / W_UV rounded to BF16, which a BF16 cache and a BF16 checkpoint's
  // kv_b_proj already are), and on AVX512_BF16 the attention tiles too (q, k, v and the
  // probabilities rounded to BF16, FP32 accumulation: kernels/cpu/mla_prefill_tile_bf16.h).
  // kI8: the up-projections as for kBF16, and on AVX512_VNNI the attention tiles on int8 dot
  // products (q and k per token and part, v per channel, the probabilities in steps of 1/255:
  // kernels/cpu/mla_prefill_tile_int8.h); where those do not run, the BF16 tiles, else FP32.
  DType attention_dtype = DType::kF32;

  float* out = nullptr;     // [s_q, h_q, d_v] fp32
  float* lse = nullptr;     // [h_q, s_q] fp32, natural log, +inf for rows with no visible key
  float* scores = nullptr;  // optional [s_q, h_q, scores_stride], as in MlaDecodeParams
  int64_t scores_stride = 0;

  int s_kv() const { return cache.seq_lens ? cache.seq_lens[0] : 0; }
};

Status validate(const MlaDecodeParams& p);
// Bytes of one cache row of p (plain or quantised record).
inline int64_t kv_row_bytes(const MlaDecodeParams& p) {
  return kv_row_bytes(p.cache.dtype, p.d_v, p.d_qk - p.d_v);
}
inline int64_t kv_row_bytes(const MlaPrefillParams& p) {
  return kv_row_bytes(p.cache.dtype, p.r, p.d_r);
}
Status validate(const MlaPrefillParams& p);

// Number of keys query row s (0-based, of s_q) may see; may be <= 0.
inline int visible_keys(int s_kv, int s_q, int s, bool causal) {
  return causal ? s_kv - s_q + s + 1 : s_kv;
}

}  // namespace mla
