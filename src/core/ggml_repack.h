// Weights repacked at load, 16 rows interleaved (BF16 and block-FP8 for the BF16 kernels:
// below). Q8_0 (and Q4_K, below) as DType::kQ8_0R16 (kQ4_KR16), the layout
// of the int8 dot-product decode kernels (kernels/cpu/linear_ggml_r16.h, linear_ggml_r16_k.h): 16
// rows' codes sit in one 64-byte vector, one int32 lane a row, so a GEMV accumulates 16 outputs per
// vector with no horizontal sums (what ik_llama.cpp's run-time repacking does for its Q8_0).
// docs/GGUF.md "Repacked at load".
//
// Layout of a weight [out, in] (out a multiple of 16, in of 64): groups of 16 rows, group g at
// g · 16 · row_bytes (row_bytes = in / 32 · 34, as Q8_0). Within a group, units of 64 values
// (two Q8_0 blocks, 1,088 bytes, a multiple of 64):
//   bytes [0, 32)      the f16 scales d of block 2u of the 16 rows (row r at 2r)
//   bytes [32, 64)     the f16 scales of block 2u + 1
//   bytes [64, 576)    block 2u: quad q (q < 8) at 64 + 64q holds, for row r, bytes 4r .. 4r + 3
//                      = codes 4q .. 4q + 3 of the block, each stored as q + 128 (uint8)
//   bytes [576, 1088)  block 2u + 1, the same way
// The values are unchanged: value = d · (stored − 128), exactly as the Q8_0 block.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "mla/status.h"

namespace mla {

inline constexpr int kR16Rows = 16;         // rows per group
inline constexpr int kR16UnitValues = 64;   // values per unit (two Q8_0 blocks)
inline constexpr int kR16UnitBytes = 1088;  // 16 rows × 2 blocks × 34 bytes

// dst (out · in / 32 · 34 bytes) = the Q8_0 rows [out, in] at src in the layout above.
// Requires repack_fits(kQ8_0R16, out, in).
void repack_q8_0_r16(const uint8_t* src, int64_t out, int64_t in, uint8_t* dst);

// out[0, in) = row `row` of a kQ8_0R16 weight with `in` values a row, bit for bit the values
// dequantize_row gives for the Q8_0 row it was made from.
void dequantize_q8_0_r16_row(const uint8_t* data, int64_t in, int64_t row, float* out);

// Q4_K repacked as DType::kQ4_KR16 for the same kind of kernel (kernels/cpu/linear_ggml_r16_k.h).
// Layout of a weight [out, in] (out a multiple of 16, in of 256): groups of 16 rows, group g at
// g · 16 · row_bytes (row_bytes = in / 256 · 144, as Q4_K). Within a group, one unit of 2,304
// bytes per super-block sb (16 rows × 144 bytes, a multiple of 64):
//   bytes [0, 32)       the f16 d of the 16 rows (row r at 2r)
//   bytes [32, 64)      the f16 dmin
//   bytes [64, 256)     the 12 scale bytes as three vectors of 16 int32 lanes: bytes 4k .. 4k + 3
//                       of row r at 64 + 64k + 4r (the 6-bit scales and mins, packed as in Q4_K)
//   bytes [256, 2304)   32 vectors of codes: vector 8c + k holds, for row r at 4r, bytes
//                       qs[32c + 4k .. 32c + 4k + 3] of the row's super-block (low nibbles:
//                       values 64c + 4k .., high nibbles: values 64c + 32 + 4k ..)
// Every byte of the Q4_K rows is kept, only moved.
inline constexpr int kQ4KR16UnitBytes = 16 * 144;

// dst (in / 256 · 144 bytes) = row `row` of a kQ4_KR16 weight as the Q4_K row it was made from.
void gather_q4_k_r16_row(const uint8_t* data, int64_t in, int64_t row, uint8_t* dst);

// BF16 repacked as DType::kBF16R16 for the BF16 dot-product kernels (kernels/cpu/
// linear_bf16_r16.h, linear_gemm_bf16.h). Layout of a weight [out, in] (out a multiple of 16, in
// even): groups of 16 rows, group g at g · 16 · in · 2 bytes; within a group, pair p (values 2p,
// 2p + 1 of each row) at 64p: row r's two BF16 values at 64p + 4r, value 2p first. One 64-byte
// vector is then one pair of 16 rows: what vdpbf16ps takes as its weight operand, and what an AMX
// tile of 16 pair rows holds (B[pair][row][2]). The GEMM reads it as is (no per-chunk packing);
// the FP32 GEMV widens each vector to two FP32 vectors (even and odd values) and accumulates 16
// rows per vector with no horizontal sums.
void repack_bf16_r16(const uint8_t* src, int64_t out, int64_t in, uint8_t* dst);
// out[0, in) = row `row` of a kBF16R16 weight, the BF16 values widened exactly.
void dequantize_bf16_r16_row(const uint8_t* data, int64_t in, int64_t row, float* out);

// Block-scaled FP8 E4M3 repacked as DType::kF8E4M3R16: the layout above with one byte a value
// (pair p of a group at 32p, row r's two codes at 32p + 2r), so 64 bytes are two pairs of 16
// rows and widen in order to the BF16 GEMM's vectors (no transposition). The scale grid stays as
// it was (rows and columns keep their indices); a weight needs block_rows a multiple of 16 and
// block_cols even (linear_preferred_dtype checks), so a group and a pair each lie in one block.
void repack_f8_r16(const uint8_t* src, int64_t out, int64_t in, uint8_t* dst);
// dst[0, in) = the E4M3 codes of row `row` of a kF8E4M3R16 weight, as the row was stored.
void gather_f8_r16_row(const uint8_t* data, int64_t in, int64_t row, uint8_t* dst);

// The repacked dtype of a stored dtype (kQ8_0 → kQ8_0R16, kQ4_K → kQ4_KR16, kBF16 → kBF16R16,
// kF8E4M3 → kF8E4M3R16), or t itself; and back, the dtype a repacked dtype was made from.
DType repacked_dtype(DType t);
DType r16_file_dtype(DType to);

// What a weight [out, in] needs to be held as the repacked dtype `to`: whole groups of 16 rows
// and rows of a multiple of r16_row_multiple(to) values (64 for kQ8_0R16, 256 for kQ4_KR16, 2
// for kBF16R16 and kF8E4M3R16).
int64_t r16_row_multiple(DType to);
bool repack_fits(DType to, int64_t out, int64_t in);

// dst = the rows [out, in] of r16_file_dtype(to) at src repacked as `to`. Requires
// repack_fits(to, out, in).
void repack_rows(DType to, const uint8_t* src, int64_t out, int64_t in, uint8_t* dst);

// Row `row` of a weight [*, in] of dtype t stored at data: a row-interleaved row as above, else
// dequantize_row of the row's bytes (a GGUF block format or F32 / F16 / BF16). Not for the
// block-scaled kF8E4M3R16 (its scales are not here): invalid_argument.
Status dequantize_weight_row(DType t, const uint8_t* data, int64_t in, int64_t row, float* out);

}  // namespace mla
