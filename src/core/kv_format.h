// Per-token record formats of the latent KV cache (docs/kernels/kv_formats.md): names, byte layouts
// and the reference quantise / dequantise of one row. The kernels read these records (with their
// own fused dequantisation); the cache writes them. docs/kernels/kv_formats.md explains the
// choices.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "core/dtype.h"
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
  kF32,      // "f32": the row in FP32, rope included (2,304 B at r 512): not a serving format but
             // the exact one, so that model-level comparisons (tests/e2e/model_oracle.py, the
             // forward tests) see no cache rounding and can use FP32 arithmetic bounds
};

inline constexpr KvCacheDtype kAllKvCacheDtypes[] = {KvCacheDtype::kBF16, KvCacheDtype::kFP8E4M3,
                                                     KvCacheDtype::kINT8, KvCacheDtype::kNVFP4};

// "bf16", "fp8_e4m3", "int8", "nvfp4", "f32".
std::string_view kv_cache_dtype_name(KvCacheDtype dtype);
// The inverse of kv_cache_dtype_name (the serving formats and "f32"); an unknown name gives
// invalid_argument listing the valid ones.
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

// How the kernels' parameter structs name a format: the element type of the latent
// (kBF16, kF8E4M3, kI8, kE2M1). A plain F32 row (kF32) has no KvCacheDtype.
DType kv_cache_latent_dtype(KvCacheDtype dtype);
std::optional<KvCacheDtype> kv_cache_dtype_of(DType latent_dtype);
// Bytes of one cache row whose latent is `latent_dtype`: plain rows (BF16, F32) are
// (r + d_r) elements; quantised formats are kv_record_layout(...).record_bytes.
int64_t kv_row_bytes(DType latent_dtype, int latent_dim, int rope_dim);

// Scale rules (docs/kernels/kv_formats.md):
//   fp8_e4m3: per 128 values, scale = amax / 448, code = e4m3(x / scale) (RNE, saturating);
//   int8:     per 128 values, scale = amax / 127, code = round-half-even(x / scale) in [-127, 127];
//   nvfp4:    per 16 values, block scale s = e4m3(amax / (6 · g)) rounded up to the next e4m3
//             code when rounding to nearest would clip the block's amax, code = e2m1(x / (s · g));
//             g is the layer's FP32 global scale, fixed for the life of the cache.
// An all-zero block stores scale 0 and codes 0. A block holding a NaN or an infinity stores a NaN
// scale (FP32 NaN; e4m3 0x7F) and codes 0, so the whole block reads back NaN: a non-finite value
// is never turned into a finite one, nor does it spread beyond its block. Dequantised values are
// defined as the FP32 products code · scale (nvfp4: (code · s) · g, the first product exact), which
// every reader computes identically. RoPE values are stored as BF16 (round to nearest even).
//
// The default NVFP4 global scale: block scale codes then equal the block amax (rounded up),
// and values up to ±448 are representable, the range of the FP8 format.
inline constexpr float kNvfp4DefaultGlobalScale = 1.0f / 6.0f;

// row [r + d_r] fp32 → record [record_bytes]. Padding bytes are written as zero.
void quantize_kv_row(KvCacheDtype dtype, int latent_dim, int rope_dim, const float* row,
                     float global_scale, uint8_t* record);
// record → row [r + d_r] fp32, the values the record represents (the reference reader).
void dequantize_kv_row(KvCacheDtype dtype, int latent_dim, int rope_dim, const uint8_t* record,
                       float global_scale, float* row);

}  // namespace mla
