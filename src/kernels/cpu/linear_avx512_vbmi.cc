// linear.cpu.avx512vbmi: linear.cpu.avx512 with the FP8 GEMV (n = 1) decoding E4M3 by byte-table
// lookups (AVX-512 VBMI: Zen 4 / 5, Ice Lake and later) instead of through FP16. The decoded
// values, the products and their order are those of linear.cpu.avx512, so every output is the
// same bit for bit; only fewer instructions feed the FMAs.
// On one Zen 5 core the FP16 route decoded ~25 GB/s of L3-resident FP8 weights, below the DRAM
// read rate of two cores (docs/BENCHMARKS.md "Weight products").
#include "core/dtype.h"
#include "kernels/cpu/isa_prelude.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/scratch.h"

namespace mla::cpu {
namespace {

// Bytes 3 and 2 of the FP32 bits of value · 2^-8 for each E4M3 magnitude code c = 0 .. 127, from
// core/dtype's fp8_e4m3_to_f32 (bytes 1 and 0 are zero: the value has at most 4 significant bits;
// subnormal codes come out normalised, so no multiply is needed after the lookup). 0x7F (NaN)
// gives the quiet NaN 0x7FC00000: the products carry it to the output.
struct Fp8Fp32Bytes {
  alignas(64) uint8_t top[128] = {}, next[128] = {};
};
Fp8Fp32Bytes fp8_fp32_bytes() {
  Fp8Fp32Bytes t;
  for (int c = 0; c < 0x80; ++c) {
    const uint32_t bits = f32_bits(fp8_e4m3_to_f32(uint8_t(c)) * 0x1p-8f);
    t.top[c] = uint8_t(bits >> 24);
    t.next[c] = uint8_t(bits >> 16);
  }
  return t;
}
// Built at start-up by baseline code (above the target pragma: it runs on every CPU).
const Fp8Fp32Bytes kFp8Fp32Bytes = fp8_fp32_bytes();

}  // namespace
}  // namespace mla::cpu

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx2,fma,f16c")
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/cpu/linear_avx512_traits.h"

namespace mla::cpu {
namespace {

struct LinAvx512Vbmi : LinAvx512 {
  // FP8 dot steps of 64 columns at n = 1 (n > 1 keeps LinAvx512's 16-column steps: there the
  // FMAs, not the decoding, bound the loop).
  static constexpr int kFp8Cols = 64;

  // 64 E4M3 bytes → out[q] = value · 2^-8 of bytes 16q .. 16q + 15, what 4 calls of
  // widen<kF8E4M3> give (NaN bytes come out NaN, from the table: a NaN accumulator, one byte add
  // and one max per step, cost ~10% of the L3 rate), in 1 byte permute, 2 two-table byte lookups
  // (VPERMT2B: 128 entries, the index's bit 7 ignored), 1 logic op for the sign and 6 in-lane
  // unpacks (the FP16 route takes 4 ops, one a conversion, for each 16). The lookups give the top
  // two bytes of each FP32 value (kFp8Fp32Bytes); unpacking bytes, then words with zeros, makes
  // them bytes 3 and 2 of each lane. The unpacks work within 128-bit lanes, so the bytes are first
  // permuted (VPERMB) to where they come out in column order. It replaced two GF2P8AFFINEQB bit
  // matrices and a multiply by 2^112 per vector (4 more ops on the FMA ports): one Zen 5 core,
  // L3-resident weights, 22–29 → 38 GB/s (docs/BENCHMARKS.md "FP8 decoding by byte-table lookups").
  static void widen_fp8_cols(const uint8_t* p, Vec (&out)[4]) {
    // Lane L (16 bytes) of the permuted vector: columns 4L .. 4L + 3 of vectors 0, 1, 2, 3.
    alignas(64) static constexpr uint8_t kOrder[64] = {
        0,  1,  2,  3,  16, 17, 18, 19, 32, 33, 34, 35, 48, 49, 50, 51,  //
        4,  5,  6,  7,  20, 21, 22, 23, 36, 37, 38, 39, 52, 53, 54, 55,  //
        8,  9,  10, 11, 24, 25, 26, 27, 40, 41, 42, 43, 56, 57, 58, 59,  //
        12, 13, 14, 15, 28, 29, 30, 31, 44, 45, 46, 47, 60, 61, 62, 63};
    const uint8_t* const top_t = kFp8Fp32Bytes.top;
    const uint8_t* const next_t = kFp8Fp32Bytes.next;
    const __m512i b = _mm512_permutexvar_epi8(_mm512_load_si512(kOrder), _mm512_loadu_si512(p));
    // top | (b & 0x80): the sign bit joins the looked-up exponent bits.
    const __m512i top = _mm512_ternarylogic_epi32(
        _mm512_permutex2var_epi8(_mm512_load_si512(top_t), b, _mm512_load_si512(top_t + 64)), b,
        _mm512_set1_epi8(char(0x80)), 0xF8);
    const __m512i next =
        _mm512_permutex2var_epi8(_mm512_load_si512(next_t), b, _mm512_load_si512(next_t + 64));
    // Per 128-bit lane L: words next | top << 8 of columns 4L.. of vectors 0 and 1, then 2 and 3.
    const __m512i w01 = _mm512_unpacklo_epi8(next, top), w23 = _mm512_unpackhi_epi8(next, top);
    const __m512i z = _mm512_setzero_si512();
    out[0] = {_mm512_castsi512_ps(_mm512_unpacklo_epi16(z, w01))};
    out[1] = {_mm512_castsi512_ps(_mm512_unpackhi_epi16(z, w01))};
    out[2] = {_mm512_castsi512_ps(_mm512_unpacklo_epi16(z, w23))};
    out[3] = {_mm512_castsi512_ps(_mm512_unpackhi_epi16(z, w23))};
  }
};

}  // namespace

void linear_avx512_vbmi(const LinearWeight& w, int64_t n, const float* x, float* y,
                        ThreadPool& pool, LinearPath path) {
  run_linear<LinAvx512Vbmi>(w, n, x, y, pool, path);
}

void linear_many_avx512_vbmi(std::span<const LinearJob> jobs, ThreadPool& pool) {
  run_linear_many<LinAvx512Vbmi>(jobs, pool);
}

}  // namespace mla::cpu

#pragma GCC diagnostic pop
#pragma GCC pop_options
