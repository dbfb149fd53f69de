// Per-token record formats of the latent KV cache (spec/mla.md §1) and the dense MHA/GQA baselines
// that `mla memory` compares them with. Sizes and offsets only; no quantisation code lives here.
#pragma once

#include <cstdint>
#include <string_view>

#include "mla/status.h"

namespace mla {

// How one token's [c_kv (r) | k_pe (d_r)] row is stored. The RoPE part is always BF16: every
// public design keeps it at higher precision than the latent.
enum class KvCacheDtype {
  kBF16,     // "bf16": the row as is, r + d_r BF16 values
  kFP8E4M3,  // "fp8_e4m3": FlashMLA layout, e4m3 latent with one fp32 scale per 128 values
  kINT8,     // "int8": the same layout, symmetric int8 latent with fp32 scales
  kNVFP4,    // "nvfp4": e2m1 latent with one e4m3 scale per 16 values (plus an fp32 global scale
             // per layer, which is not part of the per-token record)
};

inline constexpr KvCacheDtype kAllKvCacheDtypes[] = {KvCacheDtype::kBF16, KvCacheDtype::kFP8E4M3,
                                                     KvCacheDtype::kINT8, KvCacheDtype::kNVFP4};

// "bf16", "fp8_e4m3", "int8", "nvfp4".
std::string_view kv_cache_dtype_name(KvCacheDtype dtype);
// The inverse of kv_cache_dtype_name; an unknown name gives invalid_argument listing the valid
// ones.
Result<KvCacheDtype> parse_kv_cache_dtype(std::string_view name);

// Values per scale of the quantised latent formats.
inline constexpr int kFp8ScaleBlock = 128;   // fp32 scale per 128 latent values (FP8 and INT8)
inline constexpr int kNvfp4ScaleBlock = 16;  // e4m3 scale per 16 latent values
// Quantised records are padded to a multiple of this, so 16-byte vector loads of a record stay
// aligned when page bases are (pages are aligned to 64 bytes or more).
inline constexpr int64_t kKvRecordAlignBytes = 16;

// Byte layout of one token's record within a page: [latent | scales | rope | padding].
// Each section starts at a multiple of its element size (scales: 4 bytes for fp32, 1 for e4m3;
// rope: 2), which costs nothing at the usual shapes (r a multiple of 128).
struct KvRecordLayout {
  int64_t latent_offset_bytes = 0;
  int64_t latent_bytes = 0;  // BF16: 2r; FP8/INT8: r; NVFP4: ceil(r / 2) (two e2m1 per byte)
  int64_t scale_offset_bytes = 0;
  int64_t scale_bytes = 0;  // BF16: 0; FP8/INT8: 4 · ceil(r / 128); NVFP4: ceil(r / 16)
  int64_t rope_offset_bytes = 0;
  int64_t rope_bytes = 0;    // 2 · d_r (BF16)
  int64_t record_bytes = 0;  // BF16: 2 (r + d_r), unpadded (the kernels index rows of r + d_r
                             // BF16 values); quantised formats: the sum padded up to 16
};

// Requires r > 0 and d_r >= 0 (validated config values; anything else is a bug and aborts).
KvRecordLayout kv_record_layout(KvCacheDtype dtype, int latent_dim, int rope_dim);

// Bytes per token and layer: kv_record_layout(...).record_bytes. At r = 512, d_r = 64 this is
// 1,152 (bf16), 656 (fp8_e4m3), 656 (int8) and 416 (nvfp4).
int64_t kv_bytes_per_token(KvCacheDtype dtype, int latent_dim, int rope_dim);

// The dense baselines of spec/mla.md §1: separate K and V of n_kv_heads heads × head_dim values,
// BF16: 2 · n_kv_heads · head_dim · 2 bytes. MHA has n_kv_heads = H (65,536 at H = 128,
// head_dim = 128); GQA-8 has kGqaKvHeads (4,096). The head dim is the model's v_head_dim, as in
// the spec's table (which uses 128 for K too). Requires positive arguments.
inline constexpr int kGqaKvHeads = 8;
int64_t dense_kv_bytes_per_token(int n_kv_heads, int head_dim);

}  // namespace mla
