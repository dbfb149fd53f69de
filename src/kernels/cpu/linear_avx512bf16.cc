// linear.cpu.avx512bf16: linear.cpu.avx512 with another FP8 GEMV (one row of x: decode), for
// CPUs with AVX512_BF16 and AVX512_VBMI. linear.cpu.avx512 widens E4M3 through FP16 to FP32 and
// multiplies in FP32: twice the vector work per weight of BF16, which held its FP8 GEMV at ~15 GB/s
// per core. Here 64 E4M3 bytes become 64 exact BF16 weights through two vpermt2b table lookups
// (the high and the low byte of the BF16 value of each of the 128 magnitudes; the sign bit is
// copied over), and vdpbf16ps multiplies them with x·scale split into two BF16 halves hi + lo.
//
// Numerics (tests/unit/kernels/linear_test.cc derives its bound from this): the weights are exact;
// x·scale rounds once in FP32, as in linear.cpu.avx512; hi = bf16(x·s) and lo = bf16(x·s − hi)
// hold x·s within 2^-16 relative (two 8-bit significands); each product is exact in FP32 and the
// 2·in products are summed in FP32. vdpbf16ps reads BF16 denormals as zero and flushes denormal
// sums: parts of x·s below 2^-126 are lost (at most 448 · 2^-126 per weight).
// E4M3 NaN codes (0x7F, 0xFF) map to a BF16 NaN, so a NaN weight makes its outputs NaN.
#include "kernels/cpu/isa_prelude.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/scratch.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx512bf16,avx2,fma,f16c")
// The same GCC 12 false positive as in linear_avx512.cc.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/cpu/linear_driver.h"
#include "kernels/cpu/linear_traits_avx512.h"

namespace mla::cpu {
namespace {

// vpermt2b tables: BF16 bits of the E4M3 magnitudes 0..127 (0x7F: a NaN), high and low bytes.
// An index byte's bits 0..5 pick a byte of a register, bit 6 the register; bit 7 is ignored.
struct Fp8Bf16Tables {
  __m512i hi0, hi1, lo0, lo1;
  Fp8Bf16Tables() {
    alignas(64) uint8_t hi[128], lo[128];
    for (int i = 0; i < 128; ++i) {
      const uint16_t h = i == 0x7F ? uint16_t(0x7FC0) : f32_to_bf16(fp8_e4m3_to_f32(uint8_t(i)));
      hi[i] = uint8_t(h >> 8);
      lo[i] = uint8_t(h & 0xFF);
    }
    hi0 = _mm512_load_si512(hi);
    hi1 = _mm512_load_si512(hi + 64);
    lo0 = _mm512_load_si512(lo);
    lo1 = _mm512_load_si512(lo + 64);
  }
};

// Split x, per 64 columns: 128 BF16 [hi0 32 | lo0 32 | hi1 32 | lo1 32], in the order the weights
// come out of the byte unpacks: in each 128-bit lane (16 columns) unpacklo yields columns 0..7
// and unpackhi 8..15, as 8 pairs that vdpbf16ps multiplies into one FP32 lane each.
constexpr int64_t kSplitCols = 64, kSplitWords = 128;

// One row of x times the scales of scale row `rs`, split into dst (ceil(in / 64) blocks; columns
// past `in` are 0).
void split_x_row(const LinearWeight& w, int64_t rs, const float* x, uint16_t* dst) {
  const int64_t in = w.in, padded = (in + kSplitCols - 1) / kSplitCols * kSplitCols;
  for (int64_t c = 0; c < padded; c += 16) {
    const int64_t cnt = std::clamp<int64_t>(in - c, 0, 16);
    __m512 v = _mm512_maskz_loadu_ps(__mmask16((1u << cnt) - 1), x + c);
    if (cnt > 0) {
      __m512 s;
      if (c / w.block_cols == (c + cnt - 1) / w.block_cols) {
        s = _mm512_set1_ps(lin_fp8_scale_raw(w, rs, c));
      } else {  // block_cols not a multiple of 16: a scale per column
        alignas(64) float sv[16] = {};
        for (int64_t k = 0; k < cnt; ++k) sv[k] = lin_fp8_scale_raw(w, rs, c + k);
        s = _mm512_load_ps(sv);
      }
      v = _mm512_mul_ps(v, s);
    }
    const __m256i hi = (__m256i)_mm512_cvtneps_pbh(v);
    __m512 rest =
        _mm512_sub_ps(v, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(hi), 16)));
    // ±inf − ±inf is NaN: let hi alone carry an infinite (or NaN) x·s.
    rest = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(rest, rest, _CMP_ORD_Q), rest);
    const __m256i lo = (__m256i)_mm512_cvtneps_pbh(rest);
    uint16_t* b = dst + (c / kSplitCols) * kSplitWords + (c % kSplitCols) / 16 * 8;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(b), _mm256_castsi256_si128(hi));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(b + 32), _mm256_castsi256_si128(lo));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(b + 64), _mm256_extracti128_si256(hi, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(b + 96), _mm256_extracti128_si256(lo, 1));
  }
}

// acc[r] += W rows wp[r] (64 E4M3 bytes each) · the split x block xb.
template <int R>
[[gnu::always_inline]] inline void split_step(__m512 (&acc)[R], const uint8_t* const (&wp)[R],
                                              const uint16_t* xb, const Fp8Bf16Tables& t) {
  const __m512i sign = _mm512_set1_epi8(char(0x80));
  const __m512bh xh0 = (__m512bh)_mm512_loadu_si512(xb),
                 xl0 = (__m512bh)_mm512_loadu_si512(xb + 32);
  const __m512bh xh1 = (__m512bh)_mm512_loadu_si512(xb + 64);
  const __m512bh xl1 = (__m512bh)_mm512_loadu_si512(xb + 96);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const __m512i b = _mm512_loadu_si512(wp[r]);
    // hi | (b & sign): truth table 0xF8 over (hi, b, sign).
    const __m512i h =
        _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(t.hi0, b, t.hi1), b, sign, 0xF8);
    const __m512i l = _mm512_permutex2var_epi8(t.lo0, b, t.lo1);
    const __m512bh p0 = (__m512bh)_mm512_unpacklo_epi8(l, h);
    const __m512bh p1 = (__m512bh)_mm512_unpackhi_epi8(l, h);
    acc[r] = _mm512_dpbf16_ps(acc[r], p0, xh0);
    acc[r] = _mm512_dpbf16_ps(acc[r], p0, xl0);
    acc[r] = _mm512_dpbf16_ps(acc[r], p1, xh1);
    acc[r] = _mm512_dpbf16_ps(acc[r], p1, xl1);
  }
}

// y[r] = Σ_j W[r][j] · x[j] for the R rows from `row`; `next` as in lin_dot_rows (R · 64 bytes
// of the next R rows requested per step of 64 columns).
template <int R>
void split_dot_rows(const uint8_t* row, int64_t in, const uint16_t* xs, float* y,
                    const uint8_t* next, const Fp8Bf16Tables& t) {
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  const uint8_t* wp[R];
  int64_t j = 0;
  for (; j + kSplitCols <= in; j += kSplitCols) {
    if (next)
      for (int r = 0; r < R; ++r) __builtin_prefetch(next + j * R + r * kSplitCols, 0, 1);
    for (int r = 0; r < R; ++r) wp[r] = row + r * in + j;
    split_step<R>(acc, wp, xs + j / kSplitCols * kSplitWords, t);
  }
  if (j < in) {  // ragged tail: zero-padded copies (0x00 is +0), nothing past the row is read
    alignas(64) uint8_t buf[R][kSplitCols] = {};
    for (int r = 0; r < R; ++r) {
      std::memcpy(buf[r], row + r * in + j, size_t(in - j));
      wp[r] = buf[r];
    }
    split_step<R>(acc, wp, xs + j / kSplitCols * kSplitWords, t);
  }
  for (int r = 0; r < R; ++r) y[r] = _mm512_reduce_add_ps(acc[r]);
}

struct LinAvx512Bf16 : LinAvx512 {
  static constexpr bool kFp8SplitDot = true;
  // FP8 rows [rs, re) (within one scale row; the thread's chunk ends at r_end) against one row
  // of x: y[rs .. re). scratch: in + 64 floats.
  static void fp8_split_dot(const LinearWeight& w, int64_t rs, int64_t re, int64_t r_end,
                            const float* x, float* y, float* scratch) {
    static const Fp8Bf16Tables tables;
    constexpr int R = 8;  // as LinAvx512::rows<1>()
    uint16_t* xs = reinterpret_cast<uint16_t*>(scratch);
    split_x_row(w, rs, x, xs);
    const int64_t in = w.in;
    int64_t o = rs;
    for (; o + R <= re; o += R)
      split_dot_rows<R>(w.data + o * in, in, xs, y + o,
                        o + R < r_end ? w.data + (o + R) * in : nullptr, tables);
    for (; o < re; ++o) split_dot_rows<1>(w.data + o * in, in, xs, y + o, nullptr, tables);
  }
};

}  // namespace

void linear_avx512bf16(const LinearWeight& w, int64_t n, const float* x, float* y, ThreadPool& pool,
                       LinearPath path) {
  run_linear<LinAvx512Bf16>(w, n, x, y, pool, path);
}

}  // namespace mla::cpu

#pragma GCC diagnostic pop
#pragma GCC pop_options
