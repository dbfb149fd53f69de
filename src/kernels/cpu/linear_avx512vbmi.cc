// linear.cpu.avx512vbmi: linear.cpu.avx512 with another FP8 product for n ≤ 16 rows of x (decode),
// for CPUs with AVX512_VBMI. linear.cpu.avx512 widens 16 E4M3 weights at a time through FP16
// (sign-extend, shift, mask, vcvtph2ps): twice the vector work per weight of BF16, which held its
// FP8 GEMV at ~15 GB/s per core. Here 64 E4M3 bytes become 64 exact FP32 weights with two vpermt2b
// table lookups (the high and the low byte of the BF16 value of each of the 128 magnitudes; the
// sign bit is copied over), two byte unpacks into BF16 words and four word unpacks into FP32.
// The weights come out permuted within each 64 columns; x, scaled once per scale row as in
// linear.cpu.avx512, is permuted the same way, so the products are the same FP32 FMAs (in
// another order). E4M3 NaN codes (0x7F, 0xFF) map to a NaN, so a NaN weight makes its outputs NaN.
#include "kernels/cpu/isa_prelude.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/scratch.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx2,fma,f16c")
// The same GCC 12 false positive as in linear_avx512.cc.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/cpu/linear_driver.h"
#include "kernels/cpu/linear_traits_avx512.h"

namespace mla::cpu {
namespace {

// vpermt2b tables: BF16 bits of the E4M3 magnitudes 0..127 (0x7F: a NaN), high and low bytes.
// An index byte's bits 0..5 pick a byte of a register, bit 6 the register; bit 7 is ignored.
// Every E4M3 value, subnormals included, is a normal BF16 (3 mantissa bits, exponents ≥ 2^-9).
struct Fp8Tables {
  __m512i hi0, hi1, lo0, lo1;
  Fp8Tables() {
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

// Columns per table step. The unpacks work within 128-bit lanes (16 columns each): FP32 vector k
// (0..3) holds, in lane L, columns 16·L + 4·k .. 16·L + 4·k + 3. Permuted x: per 64 columns, 4
// vectors of 16 floats in that order.
constexpr int64_t kLutCols = 64;

// Permuted x·scale of one row of x for scale row `rs`: dst [ceil(in / 64) · 64], 0 past `in`.
void permute_x_row(const LinearWeight& w, int64_t rs, const float* x, float* dst) {
  const int64_t in = w.in;
  for (int64_t c0 = 0; c0 < in; c0 += kLutCols) {
    __m512 v[4];
    for (int q = 0; q < 4; ++q) {
      const int64_t c = c0 + 16 * q, cnt = std::clamp<int64_t>(in - c, 0, 16);
      v[q] = _mm512_maskz_loadu_ps(__mmask16((1u << cnt) - 1), x + c);
      if (cnt == 0) continue;
      __m512 s;
      if (c / w.block_cols == (c + cnt - 1) / w.block_cols) {
        s = _mm512_set1_ps(lin_fp8_scale_raw(w, rs, c));
      } else {  // block_cols not a multiple of 16: a scale per column
        alignas(64) float sv[16] = {};
        for (int64_t k = 0; k < cnt; ++k) sv[k] = lin_fp8_scale_raw(w, rs, c + k);
        s = _mm512_load_ps(sv);
      }
      v[q] = _mm512_mul_ps(v[q], s);
    }
    // A 4 × 4 transpose of 4-float chunks: out[k] = (v[0].k, v[1].k, v[2].k, v[3].k).
    const __m512 a = _mm512_shuffle_f32x4(v[0], v[1], 0x44),
                 b = _mm512_shuffle_f32x4(v[2], v[3], 0x44);
    const __m512 c = _mm512_shuffle_f32x4(v[0], v[1], 0xEE),
                 d = _mm512_shuffle_f32x4(v[2], v[3], 0xEE);
    float* o = dst + c0;
    _mm512_storeu_ps(o, _mm512_shuffle_f32x4(a, b, 0x88));
    _mm512_storeu_ps(o + 16, _mm512_shuffle_f32x4(a, b, 0xDD));
    _mm512_storeu_ps(o + 32, _mm512_shuffle_f32x4(c, d, 0x88));
    _mm512_storeu_ps(o + 48, _mm512_shuffle_f32x4(c, d, 0xDD));
  }
}

// acc[r][i] += W rows wp[r] (64 E4M3 bytes each) · permuted x rows xb + i · xstride.
template <int R, int N>
[[gnu::always_inline]] inline void lut_step(__m512 (&acc)[R][N], const uint8_t* const (&wp)[R],
                                            const float* xb, int64_t xstride, const Fp8Tables& t) {
  const __m512i sign = _mm512_set1_epi8(char(0x80)), zero = _mm512_setzero_si512();
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const __m512i b = _mm512_loadu_si512(wp[r]);
    // hi | (b & sign): truth table 0xF8 over (hi, b, sign).
    const __m512i h =
        _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(t.hi0, b, t.hi1), b, sign, 0xF8);
    const __m512i l = _mm512_permutex2var_epi8(t.lo0, b, t.lo1);
    const __m512i w0 = _mm512_unpacklo_epi8(l, h), w1 = _mm512_unpackhi_epi8(l, h);
    const __m512 f[4] = {_mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, w0)),
                         _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, w0)),
                         _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, w1)),
                         _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, w1))};
#pragma GCC unroll 4
    for (int i = 0; i < N; ++i)
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k)
        acc[r][i] = _mm512_fmadd_ps(f[k], _mm512_loadu_ps(xb + i * xstride + 16 * k), acc[r][i]);
  }
}

// y[i · ldy + r] = Σ_j W[r][j] · x_i[j] for the R rows from `row`; `next` as in lin_dot_rows
// (R · 64 bytes of the next R rows requested per step of 64 columns). Each output sums in the
// same order whatever N is: a row of x gets the same result alone or in a batch.
template <int R, int N>
void lut_dot_rows(const uint8_t* row, int64_t in, const float* xp, int64_t xstride, float* y,
                  int64_t ldy, const uint8_t* next, const Fp8Tables& t) {
  __m512 acc[R][N];
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < N; ++i) acc[r][i] = _mm512_setzero_ps();
  const uint8_t* wp[R];
  int64_t j = 0;
  for (; j + kLutCols <= in; j += kLutCols) {
    if (N == 1 && next)
      for (int r = 0; r < R; ++r) __builtin_prefetch(next + j * R + r * kLutCols, 0, 1);
    for (int r = 0; r < R; ++r) wp[r] = row + r * in + j;
    lut_step<R, N>(acc, wp, xp + j, xstride, t);
  }
  if (j < in) {  // ragged tail: zero-padded copies (0x00 is +0), nothing past the row is read
    alignas(64) uint8_t buf[R][kLutCols] = {};
    for (int r = 0; r < R; ++r) {
      std::memcpy(buf[r], row + r * in + j, size_t(in - j));
      wp[r] = buf[r];
    }
    lut_step<R, N>(acc, wp, xp + j, xstride, t);
  }
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < N; ++i) y[i * ldy + r] = _mm512_reduce_add_ps(acc[r][i]);
}

template <int N>
void lut_dot_range(const LinearWeight& w, int64_t rs, int64_t re, int64_t r_end, const float* xp,
                   int64_t xstride, float* y) {
  static const Fp8Tables tables;
  constexpr int R = N == 1 ? 8 : 4;  // as LinAvx512::rows<N>()
  const int64_t in = w.in;
  int64_t o = rs;
  for (; o + R <= re; o += R)
    lut_dot_rows<R, N>(w.data + o * in, in, xp, xstride, y + o, w.out,
                       o + R < r_end ? w.data + (o + R) * in : nullptr, tables);
  for (; o < re; ++o)
    lut_dot_rows<1, N>(w.data + o * in, in, xp, xstride, y + o, w.out, nullptr, tables);
}

struct LinAvx512Vbmi : LinAvx512 {
  static constexpr bool kFp8Lut = true;
  // FP8 rows [rs, re) (within one scale row; the thread's chunk ends at r_end) against
  // nx ≤ kLinGroup rows of x [nx, in]: y [nx, out] at columns rs .. re. scratch: kLinGroup ·
  // (in + 64) floats.
  static void fp8_lut_dot(const LinearWeight& w, int64_t rs, int64_t re, int64_t r_end, int64_t nx,
                          const float* x, float* y, float* scratch) {
    const int64_t xstride = (w.in + kLutCols - 1) / kLutCols * kLutCols;
    for (int64_t i = 0; i < nx; ++i) permute_x_row(w, rs, x + i * w.in, scratch + i * xstride);
    switch (nx) {
      case 1:
        return lut_dot_range<1>(w, rs, re, r_end, scratch, xstride, y);
      case 2:
        return lut_dot_range<2>(w, rs, re, r_end, scratch, xstride, y);
      case 3:
        return lut_dot_range<3>(w, rs, re, r_end, scratch, xstride, y);
      default:
        return lut_dot_range<4>(w, rs, re, r_end, scratch, xstride, y);
    }
  }
};

}  // namespace

void linear_avx512vbmi(const LinearWeight& w, int64_t n, const float* x, float* y, ThreadPool& pool,
                       LinearPath path) {
  run_linear<LinAvx512Vbmi>(w, n, x, y, pool, path);
}

}  // namespace mla::cpu

#pragma GCC diagnostic pop
#pragma GCC pop_options
