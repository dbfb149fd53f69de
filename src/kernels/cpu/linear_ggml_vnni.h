// The GGUF 32-value block formats (Q8_0, Q4_0; docs/GGUF.md) on AVX512-VNNI integer dot products,
// as llama.cpp runs them: each row of x is quantised once per product to int8 codes per 32 values
// (q = round(x / dx), dx = amax / 127), and a block's product is
//   d_w · dx · Σ q_w·q_x          (exact in int32: 32 products of at most 128 · 127)
// accumulated in FP32. vpdpbusd multiplies unsigned by signed bytes, so the weight codes enter
// offset into [0, 255] (Q8_0: q_w + 128, the sign bit flipped; Q4_0: the stored nibble, q_w + 8)
// and the offset's share, offset · Σ q_x, is subtracted in the int32 accumulator's first lane of
// each block before the dot products add to it (x carries −8 · Σ q_x: Q4_0's share as stored,
// Q8_0's shifted left by 4, so no integer multiply runs per weight row).
// Error against the exact product: x's rounding, at most dx/2 per value, so |Δy| ≤ Σ_blocks
// (dx/2)·Σ|w| (+ FP32 accumulation), the bound the tests use.
// Include after the ISA's `#pragma GCC target` (avx512f/bw/vl/vnni); internal linkage.
#pragma once

#include "core/dtype.h"
#include "kernels/cpu/scratch.h"

namespace mla::cpu {
namespace {

// A quantised x row, per pair of 32-value blocks (64 values): the codes, each lane's dx (lanes
// 0-7 the first block's, 8-15 the second's) and −8 · Σ q_x of each block in lanes 0 and 8 (the
// other lanes 0). `in` must be a multiple of 64 for this layout; rows with an odd block count get a
// zero pad block (codes 0, dx 0).
struct GgmlXRow {
  int64_t pairs = 0;
  const int8_t* codes = nullptr;  // [pairs · 64]
  const float* scales = nullptr;  // [pairs · 16]
  const int32_t* sums = nullptr;  // [pairs · 16]
};

constexpr int64_t ggml_x_row_bytes(int64_t in) {
  const int64_t pairs = (in + 63) / 64;
  return pairs * (64 + 64 + 64);
}

inline GgmlXRow ggml_x_row(const uint8_t* base, int64_t in) {
  GgmlXRow r;
  r.pairs = (in + 63) / 64;
  r.codes = reinterpret_cast<const int8_t*>(base);
  r.scales = reinterpret_cast<const float*>(base + r.pairs * 64);
  r.sums = reinterpret_cast<const int32_t*>(base + r.pairs * 128);
  return r;
}

// Quantises x [in] into the layout above at `dst` (64-byte aligned, ggml_x_row_bytes(in)).
inline void ggml_quantize_x_row(const float* x, int64_t in, uint8_t* dst) {
  const int64_t pairs = (in + 63) / 64, blocks = in / 32;
  int8_t* codes = reinterpret_cast<int8_t*>(dst);
  float* scales = reinterpret_cast<float*>(dst + pairs * 64);
  int32_t* sums = reinterpret_cast<int32_t*>(dst + pairs * 128);
  std::memset(dst, 0, size_t(ggml_x_row_bytes(in)));
  for (int64_t b = 0; b < blocks; ++b) {
    const __m512 lo = _mm512_loadu_ps(x + 32 * b), hi = _mm512_loadu_ps(x + 32 * b + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(lo), _mm512_abs_ps(hi)));
    const float dx = amax / 127.0f;
    const __m512 inv = _mm512_set1_ps(dx > 0.0f ? 1.0f / dx : 0.0f);
    // Round to nearest even; |x / dx| ≤ 127 up to the rounding of 1 / dx, and the saturating
    // narrowing keeps it in int8.
    const __m512i qlo = _mm512_cvtps_epi32(_mm512_mul_ps(lo, inv));
    const __m512i qhi = _mm512_cvtps_epi32(_mm512_mul_ps(hi, inv));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + 32 * b), _mm512_cvtsepi32_epi8(qlo));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + 32 * b + 16), _mm512_cvtsepi32_epi8(qhi));
    const __m512i q8 =
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<__m128i*>(codes + 32 * b)));
    const __m512i q8h =
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<__m128i*>(codes + 32 * b + 16)));
    const int64_t p = b / 2, half = b % 2;
    for (int l = 0; l < 8; ++l) scales[p * 16 + half * 8 + l] = dx;
    sums[p * 16 + half * 8] = -8 * _mm512_reduce_add_epi32(_mm512_add_epi32(q8, q8h));
  }
}

// The 64 offset weight codes of blocks (2p, 2p + 1) of a row, and their scales spread 8 + 8.
template <DType D>
inline void ggml_weight_pair(const uint8_t* row, int64_t p, bool second, __m512i& codes,
                             __m512& dw) {
  constexpr int kBytes = D == DType::kQ8_0 ? 34 : 18;
  const uint8_t* a = row + 2 * p * kBytes;
  const uint8_t* b = a + kBytes;
  uint16_t ha, hb = 0;
  std::memcpy(&ha, a, 2);
  if (second) std::memcpy(&hb, b, 2);
  const __m256 da = _mm256_set1_ps(_cvtsh_ss(ha)), db = _mm256_set1_ps(_cvtsh_ss(hb));
  dw = _mm512_insertf32x8(_mm512_castps256_ps512(da), db, 1);
  if constexpr (D == DType::kQ8_0) {
    const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 2));
    const __m256i qb = second ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2))
                              : _mm256_setzero_si256();
    codes = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(qa), qb, 1),
                             _mm512_set1_epi8(char(0x80)));
  } else {
    // Q4_0: byte j holds value j (low nibble) and value j + 16 (high nibble).
    const __m128i ba = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 2));
    const __m128i bb =
        second ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2)) : _mm_setzero_si128();
    const __m256i m = _mm256_set1_epi8(0x0F);
    const __m256i ab = _mm256_inserti128_si256(_mm256_castsi128_si256(ba), bb, 1);
    const __m256i lo = _mm256_and_si256(ab, m), hi = _mm256_and_si256(_mm256_srli_epi16(ab, 4), m);
    // [a lo | a hi | b lo | b hi]
    const __m256i first = _mm256_permute2x128_si256(lo, hi, 0x20);
    const __m256i last = _mm256_permute2x128_si256(lo, hi, 0x31);
    codes = _mm512_inserti64x4(_mm512_castsi256_si512(first), last, 1);
  }
}

// y[i · ldy + o] for rows o in [r0, r1) of w and the n quantised rows xs (n ≤ 4 per call).
template <DType D, int N>
void ggml_vnni_rows(const LinearWeight& w, const GgmlXRow* xs, float* y, int64_t ldy, int64_t r0,
                    int64_t r1) {
  constexpr int kBytes = D == DType::kQ8_0 ? 34 : 18;
  const int64_t blocks = w.in / 32, row_bytes = blocks * kBytes, pairs = (blocks + 1) / 2;
  for (int64_t o = r0; o < r1; ++o) {
    const uint8_t* row = w.data + o * row_bytes;
    __m512 acc[N];
    for (int i = 0; i < N; ++i) acc[i] = _mm512_setzero_ps();
    for (int64_t p = 0; p < pairs; ++p) {
      __m512i codes;
      __m512 dw;
      ggml_weight_pair<D>(row, p, 2 * p + 1 < blocks, codes, dw);
      for (int i = 0; i < N; ++i) {
        const __m512i xq = _mm512_load_si512(xs[i].codes + 64 * p);
        const __m512i neg8 = _mm512_load_si512(xs[i].sums + 16 * p);  // −8 · Σ q_x
        const __m512i init = D == DType::kQ8_0 ? _mm512_slli_epi32(neg8, 4) : neg8;
        const __m512i dot = _mm512_dpbusd_epi32(init, codes, xq);
        const __m512 scale = _mm512_mul_ps(dw, _mm512_load_ps(xs[i].scales + 16 * p));
        acc[i] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(dot), acc[i]);
      }
    }
    for (int i = 0; i < N; ++i) y[i * ldy + o] = _mm512_reduce_add_ps(acc[i]);
  }
}

// The driver's hooks (linear_driver.h, L::kGgmlInt): which weights take this path, and a chunk
// of rows against all n quantised rows of x at `xq` (ggml_x_row_bytes(in) bytes each).
inline bool ggml_vnni_takes(DType t) {
  static const bool vnni = __builtin_cpu_supports("avx512vnni");
  return vnni && (t == DType::kQ8_0 || t == DType::kQ4_0);
}

// Rows [r0, r1) of w against all n quantised rows of x (`stride` bytes apart from `xq`), in
// groups of up to 4: run(std::integral_constant<int, N>, xs, y_group) for each group, xs made
// by make(row_base). Shared by the 32-value and the 256-value (K format) layouts.
template <class XRow, class Make, class Run>
void ggml_x_groups(int64_t n, const uint8_t* xq, int64_t stride, int64_t ldy, float* y, Make make,
                   Run run) {
  for (int64_t i0 = 0; i0 < n; i0 += 4) {
    XRow xs[4];
    const int64_t nx = std::min<int64_t>(4, n - i0);
    for (int64_t i = 0; i < nx; ++i) xs[i] = make(xq + (i0 + i) * stride);
    float* yg = y + i0 * ldy;
    switch (nx) {
      case 1:
        run(std::integral_constant<int, 1>{}, xs, yg);
        break;
      case 2:
        run(std::integral_constant<int, 2>{}, xs, yg);
        break;
      case 3:
        run(std::integral_constant<int, 3>{}, xs, yg);
        break;
      default:
        run(std::integral_constant<int, 4>{}, xs, yg);
    }
  }
}

template <DType D>
void ggml_vnni_chunk_typed(const LinearWeight& w, int64_t n, const uint8_t* xq, float* y,
                           int64_t r0, int64_t r1) {
  ggml_x_groups<GgmlXRow>(
      n, xq, ggml_x_row_bytes(w.in), w.out, y,
      [&](const uint8_t* p) { return ggml_x_row(p, w.in); },
      [&](auto N, const GgmlXRow* xs, float* yg) {
        ggml_vnni_rows<D, decltype(N)::value>(w, xs, yg, w.out, r0, r1);
      });
}

inline void ggml_vnni_chunk(const LinearWeight& w, int64_t n, const uint8_t* xq, float* y,
                            int64_t r0, int64_t r1) {
  if (w.dtype == DType::kQ8_0) return ggml_vnni_chunk_typed<DType::kQ8_0>(w, n, xq, y, r0, r1);
  ggml_vnni_chunk_typed<DType::kQ4_0>(w, n, xq, y, r0, r1);
}

}  // namespace
}  // namespace mla::cpu
