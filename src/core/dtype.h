// Element types the engine stores (BF16, FP16, FP8 E4M3FN, E2M1, ...) and their scalar conversions.
// Conversions to these types round to nearest, ties to even. Bulk and SIMD conversions live with
// the kernels that use them.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace mla {

enum class DType : uint8_t {
  kF64,
  kF32,
  kF16,
  kBF16,
  kF8E4M3,  // OCP E4M3 "fn": bias 7, max 448, NaN at 0x7F/0xFF, no infinities
  kE2M1,    // OCP FP4: values ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}, two per byte
  kI64,
  kI32,
  kI16,
  kI8,
  kU8,
  kBool,
  // Block-quantised weight formats of GGUF files (docs/GGUF.md): a row of `in` values is stored
  // as in / block_elems blocks of block_bytes bytes, each with its own scales. Only GGUF weights
  // carry them; they have no safetensors name.
  kQ8_0,  // 32 values: f16 d, 32 × i8                          (8.5 bits per value)
  kQ4_0,  // 32 values: f16 d, 16 bytes of 4-bit codes - 8      (4.5)
  kQ2_K,  // 256 values: 16 × (4-bit scale, 4-bit min), 2-bit codes, f16 d, dmin   (2.625)
  kQ3_K,  // 256 values: high-bit mask, 2-bit codes, 16 × 6-bit scales, f16 d      (3.4375)
  kQ4_K,  // 256 values: f16 d, dmin, 8 × (6-bit scale, 6-bit min), 4-bit codes     (4.5)
  kQ5_K,  // 256 values: as Q4_K plus a high-bit plane                              (5.5)
  kQ6_K,  // 256 values: 4-bit low, 2-bit high codes, 16 × i8 scales, f16 d         (6.5625)
  // Q8_0 repacked at load for the int8 dot-product kernels (never in a file; core/ggml_repack.h):
  // 16 rows interleaved, codes stored as q + 128. The same bytes as Q8_0 per 16 rows.
  kQ8_0R16,
  // Q4_K repacked the same way (core/ggml_repack.h): 16 rows interleaved per super-block, the
  // codes of each row 4 bytes to a lane. The same bytes as Q4_K per 16 rows.
  kQ4_KR16,
  // BF16 repacked at load for the BF16 dot-product kernels (core/ggml_repack.h): 16 rows
  // interleaved in pairs of adjacent values, unchanged. The same bytes as BF16 per 16 rows.
  kBF16R16,
  // Block-scaled FP8 E4M3 repacked the same way (core/ggml_repack.h), its scale grid unchanged.
  kF8E4M3R16,
};

// Size of one element in bits (4 for E2M1); 0 for the block formats (see dtype_block).
int dtype_bits(DType t);
// The safetensors spelling: "F32", "BF16", "F8_E4M3", "F4", ...; the GGUF spelling for the
// block formats ("Q8_0", "Q4_K", ...).
std::string_view dtype_name(DType t);
// Safetensors names only: a block format's name is not a safetensors dtype.
std::optional<DType> dtype_from_name(std::string_view name);

// The storage unit of a dtype: `elems` values in `bytes` bytes. Plain types: {1, bits / 8}
// (E2M1: {2, 1}); block formats: their block. A row of n values takes n / elems · bytes bytes
// and n must be a multiple of elems.
struct DTypeBlock {
  int elems = 1;
  int bytes = 1;
};
DTypeBlock dtype_block(DType t);
// Bytes of n values (n a whole number of storage units: a row of a block format).
inline int64_t dtype_bytes(DType t, int64_t n) {
  const DTypeBlock b = dtype_block(t);
  return n / b.elems * b.bytes;
}
// The GGUF file formats: a row of n values is n / elems blocks, rows one after another.
constexpr bool dtype_is_ggml_block(DType t) {
  return t >= DType::kQ8_0 && t <= DType::kQ6_K;
}
// Formats whose rows are interleaved in groups (kQ8_0R16, kQ4_KR16, kBF16R16, kF8E4M3R16): a row
// is not a contiguous run of bytes, though a group of rows takes as many bytes as its rows would
// in the stored format.
constexpr bool dtype_is_row_interleaved(DType t) {
  return t == DType::kQ8_0R16 || t == DType::kQ4_KR16 || t == DType::kBF16R16 ||
         t == DType::kF8E4M3R16;
}
// The row-interleaved forms of the GGUF block formats (the int8 kernels' own).
constexpr bool dtype_is_ggml_repack(DType t) {
  return t == DType::kQ8_0R16 || t == DType::kQ4_KR16;
}

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ---- BF16: the upper half of an FP32 ----
inline float bf16_to_f32(uint16_t h) {
  return f32_from_bits(uint32_t(h) << 16);
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x0040u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);                                            // RNE; inf stays inf
  return uint16_t(u >> 16);
}
inline float round_to_bf16(float f) {
  return bf16_to_f32(f32_to_bf16(f));
}

// ---- FP16 (IEEE binary16) ----
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);  // overflow → ±inf

// ---- FP8 E4M3FN ----
float fp8_e4m3_to_f32(uint8_t b);
// Saturating ("satfinite", as hardware quantisers do): finite values beyond ±448 and ±inf become
// ±448; NaN becomes 0x7F (sign kept).
uint8_t f32_to_fp8_e4m3(float f);
inline constexpr float kFp8E4M3Max = 448.0f;

// ---- E2M1 (4-bit, low nibble used) ----
float e2m1_to_f32(uint8_t nibble);
// Saturating to ±6; NaN maps to +0 (E2M1 has no NaN: quantisers must not feed it one).
uint8_t f32_to_e2m1(float f);
inline constexpr float kE2M1Max = 6.0f;

}  // namespace mla
