// linear.cpu.avx512gfni: linear.cpu.avx512 with the FP8 GEMV (n = 1) decoding E4M3 by bit moves
// instead of through FP16 (GFNI and AVX-512 VBMI: Zen 4 / 5, Ice Lake and later). The decoded
// values, the products and their order are those of linear.cpu.avx512, so every output is the
// same bit for bit; only fewer instructions feed the FMAs.
// On one Zen 5 core the FP16 route decoded ~25 GB/s of L3-resident FP8 weights, below the DRAM
// read rate of two cores (docs/BENCHMARKS.md "Weight products").
#include "kernels/cpu/isa_prelude.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/scratch.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,gfni,avx2,fma,f16c")
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/cpu/linear_avx512_traits.h"

namespace mla::cpu {
namespace {

struct LinAvx512Gfni : LinAvx512 {
  // FP8 dot steps of 64 columns at n = 1 (n > 1 keeps LinAvx512's 16-column steps: there the
  // FMAs, not the decoding, bound the loop).
  static constexpr int kFp8Cols = 64;

  // NaN codes: 0x7F and 0xFF are the bytes whose b + b (mod 256) is 0xFE; every other gives at
  // most 0xFC. The accumulator keeps the byte-wise maximum.
  static __m512i fp8_nan_zero() { return _mm512_setzero_si512(); }
  static bool fp8_nan_hit(__m512i acc) {
    return _mm512_cmpeq_epi8_mask(acc, _mm512_set1_epi8(char(0xFE))) != 0;
  }

  // 64 E4M3 bytes → out[q] = value · 2^-8 of bytes 16q .. 16q + 15, what 4 calls of
  // widen<kF8E4M3, false> give (NaN bytes come out finite, as there, and are folded into
  // `nan`), in 1 byte permute, 2 bit-matrix ops, 6 in-lane unpacks and 4 multiplies (the FP16
  // route takes 4 ops, one a conversion, for each 16).
  // The FP32 bits of value · 2^-120 are the E4M3 bits moved: sign to bit 31, exponent and
  // mantissa (bits 6..0) to bits 26..20; a subnormal code becomes the FP32 subnormal of the
  // same value · 2^-120. GF2P8AFFINEQB (a bit matrix per byte) builds the top byte
  // [s 0000 e3 e2 e1] and the next one [e0 m2 m1 m0 0000]; unpacking bytes, then words with
  // zeros, makes them bytes 3 and 2 of each lane. The unpacks work within 128-bit lanes, so the
  // bytes are first permuted (VPERMB) to where they come out in column order. The multiply by
  // 2^112 is exact and leaves a normal number (|value| · 2^-8 ≥ 2^-17). (Subnormal codes need
  // the process not to run with denormals-are-zero, which the engine never sets.)
  static void widen_fp8_cols(const uint8_t* p, Vec (&out)[4], __m512i& nan) {
    // Lane L (16 bytes) of the permuted vector: columns 4L .. 4L + 3 of vectors 0, 1, 2, 3.
    alignas(64) static constexpr uint8_t kOrder[64] = {
        0,  1,  2,  3,  16, 17, 18, 19, 32, 33, 34, 35, 48, 49, 50, 51,  //
        4,  5,  6,  7,  20, 21, 22, 23, 36, 37, 38, 39, 52, 53, 54, 55,  //
        8,  9,  10, 11, 24, 25, 26, 27, 40, 41, 42, 43, 56, 57, 58, 59,  //
        12, 13, 14, 15, 28, 29, 30, 31, 44, 45, 46, 47, 60, 61, 62, 63};
    // Row i of the bit matrix (output bit i) is byte 7 - i of the operand.
    constexpr long long kTop = 0x1020400000000080ll;   // bit 7 ← b7, bits 2..0 ← b6..b4
    constexpr long long kNext = 0x0000000001020408ll;  // bits 7..4 ← b3..b0
    const __m512i raw = _mm512_loadu_si512(p);
    nan = _mm512_max_epu8(nan, _mm512_add_epi8(raw, raw));
    const __m512i b = _mm512_permutexvar_epi8(_mm512_load_si512(kOrder), raw);
    const __m512i top = _mm512_gf2p8affine_epi64_epi8(b, _mm512_set1_epi64(kTop), 0);
    const __m512i next = _mm512_gf2p8affine_epi64_epi8(b, _mm512_set1_epi64(kNext), 0);
    // Per 128-bit lane L: words next | top << 8 of columns 4L.. of vectors 0 and 1, then 2 and 3.
    const __m512i w01 = _mm512_unpacklo_epi8(next, top), w23 = _mm512_unpackhi_epi8(next, top);
    const __m512i z = _mm512_setzero_si512();
    const __m512i bits[4] = {_mm512_unpacklo_epi16(z, w01), _mm512_unpackhi_epi16(z, w01),
                             _mm512_unpacklo_epi16(z, w23), _mm512_unpackhi_epi16(z, w23)};
    const __m512 k2p112 = _mm512_set1_ps(0x1p112f);
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) out[q] = {_mm512_mul_ps(_mm512_castsi512_ps(bits[q]), k2p112)};
  }
};

}  // namespace

void linear_avx512_gfni(const LinearWeight& w, int64_t n, const float* x, float* y,
                        ThreadPool& pool, LinearPath path) {
  run_linear<LinAvx512Gfni>(w, n, x, y, pool, path);
}

void linear_many_avx512_gfni(std::span<const LinearJob> jobs, ThreadPool& pool) {
  run_linear_many<LinAvx512Gfni>(jobs, pool);
}

}  // namespace mla::cpu

#pragma GCC diagnostic pop
#pragma GCC pop_options
