// The int8 GEMM of GGUF block-format weights on AVX512-VNNI (prefill chunks and expert batches:
// path kBf16, more than kLinWidenMinRows rows of x): y [n, out] = x [n, in] · Wᵀ with both
// operands as 8-bit codes and vpdpbusd (64 products per instruction, twice the BF16 dot
// product's 32), as llama.cpp and ik_llama.cpp run their quantised prefill.
//
// Every block format reads, per 16-value run t of a row, as value = a_t · code + b_t with an
// unsigned code (Q8_0: q + 128, a = d, b = −128·d; Q4_0: the nibble, a = d, b = −8·d; the K
// formats: ggml_k_decode's codes, a = d·s_j, b = −dm·m_j). x is quantised per 32 values
// (q_x = round(x / dx), dx = amax / 127), so a run's product is
//   a_t · dx · Σ code·q_x  +  b_t · fl(dx · Σ q_x)
// with the integer sum exact in int32 (16 products of at most 255 · 127).
//
// Layout:
//   W: a chunk of rows is decoded once into strips of 16 rows: per run t, 4 vectors of 64 bytes,
//     vector q holding the codes 16t + 4q .. + 3 of each of the 16 rows (one int32 lane a row),
//     then a_t and b_t of the 16 rows (FP32 vectors). The strip's rows are the lanes, so a
//     register tile accumulates 16 outputs of one row of x per vector, no horizontal sums.
//   x: per row, its codes in order (the 4 codes of a quad broadcast to all lanes from memory),
//     dx per 32 values and dx · Σ q_x per 16 (the b term's factor).
// A register tile is one strip × kI8Tile rows of x: 12 int32 and 12 FP32 accumulators.
// Error against the exact product: x's rounding, at most dx/2 per value, times Σ|w|, plus FP32
// roundings: per run one for a_t·dx, one for each of the two fused adds, and the accumulation
// over in/16 runs: at most 3·in/16 + 2 roundings reach a term (the tests derive the bound).
// Include after linear_ggml_vnni_k.h under the ISA's `#pragma GCC target` (avx512f/bw/vl/vnni);
// internal linkage.
#pragma once

#include "kernels/cpu/linear_ggml_vnni_k.h"

namespace mla::cpu {
namespace {

constexpr int kI8Strip = 16;  // weight rows per strip: the lanes of a vector
constexpr int kI8Tile = 12;   // rows of x per register tile
// W rows per chunk (a multiple of kI8Strip): the chunk's strips (in + in/2 bytes a row) stay in
// L2 while every tile of x passes over them.
constexpr int64_t kI8ChunkBytes = 384 << 10;
constexpr int64_t kI8MaxChunkRows = 128;

inline bool ggml_gemm_i8_takes(DType t) {
  return ggml_vnni_takes(t) || ggml_k_vnni_takes(t);
}

inline int64_t ggml_gemm_i8_chunk_rows(const LinearWeight& w, int threads) {
  const int64_t s = kI8Strip;
  const int64_t by_threads = ((w.out + 4 * threads - 1) / (4 * threads) + s - 1) / s * s;
  const int64_t by_cache = std::max<int64_t>(s, kI8ChunkBytes / (w.in + w.in / 2) / s * s);
  return std::max<int64_t>(s, std::min({by_threads, by_cache, kI8MaxChunkRows}));
}

// x row layout: codes [in] int8, dx [in / 32] FP32, dx · Σ q_x [in / 16] FP32 (64-byte aligned).
constexpr int64_t ggml_i8_x_row_bytes(int64_t in) {
  return (in + 63) / 64 * 64 + (in / 32 * 4 + 63) / 64 * 64 + (in / 16 * 4 + 63) / 64 * 64;
}

struct GgmlI8XRow {
  const int8_t* codes;
  const float* dx;
  const float* sums;
};

inline GgmlI8XRow ggml_i8_x_row(const uint8_t* base, int64_t in) {
  const int64_t c = (in + 63) / 64 * 64, d = (in / 32 * 4 + 63) / 64 * 64;
  return {reinterpret_cast<const int8_t*>(base), reinterpret_cast<const float*>(base + c),
          reinterpret_cast<const float*>(base + c + d)};
}

inline void ggml_i8_quantize_x_row(const float* x, int64_t in, uint8_t* dst) {
  const int64_t c = (in + 63) / 64 * 64, d = (in / 32 * 4 + 63) / 64 * 64;
  int8_t* codes = reinterpret_cast<int8_t*>(dst);
  float* dxs = reinterpret_cast<float*>(dst + c);
  float* sums = reinterpret_cast<float*>(dst + c + d);
  for (int64_t b = 0; b < in / 32; ++b) {
    const __m512 lo = _mm512_loadu_ps(x + 32 * b), hi = _mm512_loadu_ps(x + 32 * b + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(lo), _mm512_abs_ps(hi)));
    const float dx = amax / 127.0f;
    const __m512 inv = _mm512_set1_ps(dx > 0.0f ? 1.0f / dx : 0.0f);
    dxs[b] = dx;
    // Round to nearest even; the saturating narrowing keeps |q| ≤ 127 (1 / dx rounds).
    const __m128i qlo = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(lo, inv)));
    const __m128i qhi = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(hi, inv)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + 32 * b), qlo);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + 32 * b + 16), qhi);
    sums[2 * b] = dx * float(_mm512_reduce_add_epi32(_mm512_cvtepi8_epi32(qlo)));
    sums[2 * b + 1] = dx * float(_mm512_reduce_add_epi32(_mm512_cvtepi8_epi32(qhi)));
  }
}

// One row of w decoded: codes [in] u8, a [in / 16], b [in / 16].
template <DType D>
void ggml_i8_decode_row(const uint8_t* src, int64_t in, uint8_t* codes, float* a, float* b) {
  if constexpr (D == DType::kQ8_0 || D == DType::kQ4_0) {
    constexpr int kBytes = D == DType::kQ8_0 ? 34 : 18;
    for (int64_t k = 0; k < in / 32; ++k) {
      const uint8_t* blk = src + k * kBytes;
      const float d = ggml_k_half(blk);
      __m256i q;
      if constexpr (D == DType::kQ8_0) {
        q = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)),
                             _mm256_set1_epi8(char(0x80)));
      } else {  // byte j: value j (low nibble) and value j + 16 (high nibble)
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
        const __m128i m4 = _mm_set1_epi8(0x0f);
        q = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(v, m4)),
                                    _mm_and_si128(_mm_srli_epi16(v, 4), m4), 1);
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + 32 * k), q);
      const float off = D == DType::kQ8_0 ? -128.0f : -8.0f;
      a[2 * k] = a[2 * k + 1] = d;
      b[2 * k] = b[2 * k + 1] = off * d;  // exact: d has 11 significant bits
    }
  } else {
    for (int64_t sb = 0; sb < in / 256; ++sb) {
      GgmlKBlock k;
      ggml_k_decode<D>(src + sb * kGgmlKBytes<D>, k);
      alignas(64) float s[16];
      for (int c = 0; c < 4; ++c) {
        _mm512_storeu_si512(codes + 256 * sb + 64 * c, k.q[c]);
        _mm512_store_ps(s, k.s[c]);  // lane 4g: run 4c + g's scale
        for (int g = 0; g < 4; ++g) a[16 * sb + 4 * c + g] = s[4 * g];
      }
      _mm512_storeu_ps(b + 16 * sb, _mm512_sub_ps(_mm512_setzero_ps(), k.m));
    }
  }
}

// The strips of rows [o0, o0 + rows) of w into `panel` (rows past the end: zero codes and
// scales). Strip s at panel + s · strip_bytes: in/16 runs of (4 · 64 code bytes, a [16], b [16]).
inline int64_t ggml_i8_strip_bytes(int64_t in) {
  return in / 16 * (256 + 128);
}

template <DType D>
void ggml_i8_pack_rows(const LinearWeight& w, int64_t o0, int64_t rows, uint8_t* panel) {
  static thread_local AlignedBuffer<uint8_t> scratch;
  const int64_t in = w.in, runs = in / 16, row_bytes = dtype_bytes(w.dtype, in);
  // One strip decoded row by row: codes [16][in], a [16][runs], b [16][runs].
  uint8_t* codes = ensure_scratch(scratch, size_t(16 * in + 2 * 16 * runs * 4));
  float* a = reinterpret_cast<float*>(codes + 16 * in);
  float* b = a + 16 * runs;
  for (int64_t s0 = 0; s0 < rows; s0 += kI8Strip) {
    const int64_t n = std::min<int64_t>(kI8Strip, rows - s0);
    for (int64_t r = 0; r < kI8Strip; ++r) {
      if (r < n) {
        ggml_i8_decode_row<D>(w.data + (o0 + s0 + r) * row_bytes, in, codes + r * in, a + r * runs,
                              b + r * runs);
      } else {
        std::memset(codes + r * in, 0, size_t(in));
        std::fill(a + r * runs, a + (r + 1) * runs, 0.0f);
        std::fill(b + r * runs, b + (r + 1) * runs, 0.0f);
      }
    }
    uint8_t* strip = panel + (s0 / kI8Strip) * ggml_i8_strip_bytes(in);
    const __m512i rows_idx =
        _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                           _mm512_set1_epi32(int(in / 4)));
    const __m512i runs_idx =
        _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                           _mm512_set1_epi32(int(runs)));
    for (int64_t t = 0; t < runs; ++t) {
      uint8_t* run = strip + t * 384;
      for (int q = 0; q < 4; ++q)  // quad q of each row: int32 (4t + q) of its codes
        _mm512_store_si512(run + 64 * q,
                           _mm512_i32gather_epi32(rows_idx, codes + 16 * t + 4 * q, 4));
      _mm512_store_ps(run + 256, _mm512_i32gather_ps(runs_idx, a + t, 4));
      _mm512_store_ps(run + 320, _mm512_i32gather_ps(runs_idx, b + t, 4));
    }
  }
}

// y rows [i0, i0 + C) of x, outputs of strip `strip` (16 rows from o): the register tile.
template <int C>
inline void ggml_i8_tile(const uint8_t* strip, int64_t in, const GgmlI8XRow* xs, float* y,
                         int64_t ldy, int lanes) {
  __m512 f[C];
  for (int c = 0; c < C; ++c) f[c] = _mm512_setzero_ps();
  for (int64_t t = 0; t < in / 16; ++t) {
    const uint8_t* run = strip + t * 384;
    __m512i acc[C];
    for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_si512();
    for (int q = 0; q < 4; ++q) {
      const __m512i wv = _mm512_load_si512(run + 64 * q);
      for (int c = 0; c < C; ++c) {
        int32_t quad;
        std::memcpy(&quad, xs[c].codes + 16 * t + 4 * q, 4);
        acc[c] = _mm512_dpbusd_epi32(acc[c], wv, _mm512_set1_epi32(quad));
      }
    }
    const __m512 a = _mm512_load_ps(run + 256), b = _mm512_load_ps(run + 320);
    for (int c = 0; c < C; ++c) {
      const __m512 adx = _mm512_mul_ps(a, _mm512_set1_ps(xs[c].dx[t / 2]));
      f[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[c]), adx, f[c]);
      f[c] = _mm512_fmadd_ps(b, _mm512_set1_ps(xs[c].sums[t]), f[c]);
    }
  }
  const __mmask16 m = __mmask16(lanes >= 16 ? 0xFFFF : (1u << lanes) - 1);
  for (int c = 0; c < C; ++c) _mm512_mask_storeu_ps(y + c * ldy, m, f[c]);
}

template <int C>
void ggml_i8_tiles(const uint8_t* panel, int64_t strips, int64_t in, const GgmlI8XRow* xs, float* y,
                   int64_t ldy, int64_t rows) {
  for (int64_t s = 0; s < strips; ++s)
    ggml_i8_tile<C>(panel + s * ggml_i8_strip_bytes(in), in, xs, y + s * kI8Strip, ldy,
                    int(std::min<int64_t>(kI8Strip, rows - s * kI8Strip)));
}

// Rows [r0, r1) of w against all n quantised rows of x (ggml_i8_x_row_bytes(in) bytes apart).
template <DType D>
void ggml_gemm_i8_chunk_typed(const LinearWeight& w, int64_t n, const uint8_t* xq, float* y,
                              int64_t r0, int64_t r1) {
  static thread_local AlignedBuffer<uint8_t> scratch;
  const int64_t rows = r1 - r0, strips = (rows + kI8Strip - 1) / kI8Strip;
  uint8_t* panel = ensure_scratch(scratch, size_t(strips * ggml_i8_strip_bytes(w.in)));
  ggml_i8_pack_rows<D>(w, r0, rows, panel);
  const int64_t stride = ggml_i8_x_row_bytes(w.in);
  for (int64_t i0 = 0; i0 < n; i0 += kI8Tile) {
    GgmlI8XRow xs[kI8Tile];
    const int64_t nx = std::min<int64_t>(kI8Tile, n - i0);
    for (int64_t i = 0; i < nx; ++i) xs[i] = ggml_i8_x_row(xq + (i0 + i) * stride, w.in);
    float* yg = y + i0 * w.out + r0;
    [&]<int... I>(std::integer_sequence<int, I...>) {
      ((nx == I + 1 ? ggml_i8_tiles<I + 1>(panel, strips, w.in, xs, yg, w.out, rows) : void()),
       ...);
    }
    (std::make_integer_sequence<int, kI8Tile>{});
  }
}

inline void ggml_gemm_i8_chunk(const LinearWeight& w, int64_t n, const uint8_t* xq, float* y,
                               int64_t r0, int64_t r1) {
  switch (w.dtype) {
    case DType::kQ8_0:
      return ggml_gemm_i8_chunk_typed<DType::kQ8_0>(w, n, xq, y, r0, r1);
    case DType::kQ4_0:
      return ggml_gemm_i8_chunk_typed<DType::kQ4_0>(w, n, xq, y, r0, r1);
    case DType::kQ2_K:
      return ggml_gemm_i8_chunk_typed<DType::kQ2_K>(w, n, xq, y, r0, r1);
    case DType::kQ3_K:
      return ggml_gemm_i8_chunk_typed<DType::kQ3_K>(w, n, xq, y, r0, r1);
    case DType::kQ4_K:
      return ggml_gemm_i8_chunk_typed<DType::kQ4_K>(w, n, xq, y, r0, r1);
    case DType::kQ5_K:
      return ggml_gemm_i8_chunk_typed<DType::kQ5_K>(w, n, xq, y, r0, r1);
    default:
      return ggml_gemm_i8_chunk_typed<DType::kQ6_K>(w, n, xq, y, r0, r1);
  }
}

}  // namespace
}  // namespace mla::cpu
