// The int8 GEMM of GGUF block-format weights on AVX512-VNNI (prefill chunks and expert batches:
// the BF16 paths from lin_gemm_min_rows rows of x): y [n, out] = x [n, in] · Wᵀ with both
// operands as 8-bit codes and vpdpbusd (64 products per instruction, twice the BF16 dot
// product's 32), as llama.cpp and ik_llama.cpp run their quantised prefill.
//
// Every block format reads, per run t of 32 or 16 values of a row, as
//   value = a_t · c − m_t     with a signed code c (|c| ≤ 128) and m_t = 0 for the formats
// without mins: Q8_0 c = q, a = d; Q4_0 c = nibble − 8, a = d (runs of 32); Q6_K c = q − 32,
// Q3_K c = q − 4, a = d·s_j (runs of 16); Q4_K / Q5_K c = q, a = d·s_j, m = dmin·m_j (runs of
// 32); Q2_K the same with runs of 16. a_t and m_t are exact in FP32 (ggml_k_decode).
// For the K formats x is quantised per 256 values as llama.cpp's Q8_K (q_x = round(x / dx), dx =
// amax / 127) and enters vpdpbusd's unsigned operand as u = q_x + 128, so a super-block's
// product is
//   dx · ( Σ_t a_t · Σ c·u  −  K  −  Σ_t m_t · Σ_t q_x ),   K = 128 · Σ_t a_t · Σ_t c
// K depends on the weights alone and is made with the panel; the integer sums are exact in int32.
// Q8_0 and Q4_0 (and Q8_0_R16) take x per 32 values instead, on the kernel of
// linear_gemm_int8_x32.h; this file's decoders and transpose serve it too.
//
// Layout:
//   W: a chunk of rows is decoded once into strips of 16 rows (the lanes of a vector). Per
//     super-block: −K [16], then per run t its codes as quads (vector q holds codes 4q .. 4q + 3
//     of the run of each of the 16 rows, one int32 lane a row), a_t [16] and, with mins, m_t [16].
//     A register tile so accumulates 16 outputs of one row of x per vector, no horizontal sums.
//   x: per row, the codes u in order (4 broadcast to all lanes at a time), dx per 256, and
//     Σ q_x per run (FP32, exact).
// A register tile is one strip × C ≤ kI8Tile rows of x: per row of x an int32 accumulator (a
// run), an FP32 one (the super-block) and the output's.
// Error against the exact product: x's rounding, at most dx/2 per value, times Σ|w|, plus FP32
// roundings: −K (in/256 · 2·(runs + 1) roundings at most, on terms 128·|a·c|), then per run one
// fused add (two with mins), and per super-block one for dx: the tests derive the bound.
// Include after linear_ggml_vnni_k.h under the ISA's `#pragma GCC target` (avx512f/bw/vl/vnni);
// internal linkage.
#pragma once

#include "core/ggml_repack.h"
#include "kernels/cpu/linear_ggml_r16_k.h"  // ggml_r16k_scales
#include "kernels/cpu/linear_ggml_vnni_k.h"
#include "kernels/cpu/weight_ahead.h"

namespace mla::cpu {
namespace {

constexpr int kI8Strip = 16;  // weight rows per strip: the lanes of a vector
constexpr int kI8Tile = 8;    // rows of x per register tile
// W rows per chunk (a multiple of kI8Strip): the chunk's strips (~in + in/4 bytes a row; in ·
// 34/32 for the x-per-32 formats, linear_gemm_int8_x32.h) stay in L2 while every tile of x passes
// over them.
constexpr int64_t kI8ChunkBytes = 384 << 10;
constexpr int64_t kI8MaxChunkRows = 128;

// The formats with one scale per 32 values and no mins, on the kernel of linear_gemm_int8_x32.h.
constexpr bool ggml_gemm_i8x32(DType t) {
  return t == DType::kQ8_0 || t == DType::kQ8_0R16 || t == DType::kQ4_0;
}

inline bool ggml_gemm_i8_takes(const LinearWeight& w) {
  static const bool vnni = __builtin_cpu_supports("avx512vnni");
  return vnni && (dtype_is_ggml_block(w.dtype) || dtype_is_ggml_repack(w.dtype));
}

// Runs of 32 values (one scale per 32) or of 16, and whether the format has mins.
template <DType D>
constexpr bool kI8Run32 = D == DType::kQ4_K || D == DType::kQ5_K;
template <DType D>
constexpr bool kI8Mins = D == DType::kQ4_K || D == DType::kQ5_K || D == DType::kQ2_K;
// Bytes after a run's quads and a_t: m_t (mins).
template <DType D>
constexpr int64_t kI8RunExtra = kI8Mins<D> ? 64 : 0;

// Bytes of one strip's super-block: −K, then per run its quads, a_t and (mins) m_t.
template <DType D>
constexpr int64_t kI8SbBytes = 64 + (kI8Run32<D> ? 8 : 16) *
                                        ((kI8Run32<D> ? 8 : 4) * 64 + 64 + kI8RunExtra<D>);

inline int64_t ggml_gemm_i8_chunk_rows(const LinearWeight& w, int threads) {
  const int64_t s = kI8Strip;
  const int64_t by_threads = ((w.out + 4 * threads - 1) / (4 * threads) + s - 1) / s * s;
  const int64_t row_bytes = ggml_gemm_i8x32(w.dtype) ? w.in / 32 * 34 : w.in + w.in / 4;
  const int64_t by_cache = std::max<int64_t>(s, kI8ChunkBytes / row_bytes / s * s);
  return std::max<int64_t>(s, std::min({by_threads, by_cache, kI8MaxChunkRows}));
}

// x row layout (64-byte aligned; in is a multiple of 256, as every K-format row is): u [in]
// (q_x + 128), dx [in / 256], Σ q_x per 16 [in / 16] and per 32 [in / 32].
constexpr int64_t ggml_i8_x_row_bytes(int64_t in) {
  return in + (in / 256 * 4 + 63) / 64 * 64 + in / 16 * 4 + in / 32 * 4;
}

struct GgmlI8XRow {
  const uint8_t* u;
  const float* dx;  // per 256 values
  const float* sums16;
  const float* sums32;
};

inline GgmlI8XRow ggml_i8_x_row(const uint8_t* base, int64_t in) {
  const uint8_t* d = base + in;
  const uint8_t* s16 = d + (in / 256 * 4 + 63) / 64 * 64;
  return {base, reinterpret_cast<const float*>(d), reinterpret_cast<const float*>(s16),
          reinterpret_cast<const float*>(s16 + in / 16 * 4)};
}

inline void ggml_i8_quantize_x_row(const float* x, int64_t in, uint8_t* dst) {
  uint8_t* u = dst;
  float* dxs = reinterpret_cast<float*>(dst + in);
  float* s16 = reinterpret_cast<float*>(dst + in + (in / 256 * 4 + 63) / 64 * 64);
  float* s32 = s16 + in / 16;
  for (int64_t sb = 0; sb < in / 256; ++sb) {
    const float* xs = x + 256 * sb;
    __m512 v[16];
    __m512 amax = _mm512_setzero_ps();
    for (int k = 0; k < 16; ++k) {
      v[k] = _mm512_loadu_ps(xs + 16 * k);
      amax = _mm512_max_ps(amax, _mm512_abs_ps(v[k]));
    }
    const float dx = _mm512_reduce_max_ps(amax) / 127.0f;
    const __m512 inv = _mm512_set1_ps(dx > 0.0f ? 1.0f / dx : 0.0f);
    dxs[sb] = dx;
    for (int k = 0; k < 16; ++k) {
      // Round to nearest even; the saturating narrowing keeps |q| ≤ 127 (1 / dx rounds).
      const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(v[k], inv));
      const __m128i q8 = _mm512_cvtsepi32_epi8(q);
      _mm_store_si128(reinterpret_cast<__m128i*>(u + 256 * sb + 16 * k),
                      _mm_xor_si128(q8, _mm_set1_epi8(char(0x80))));
      s16[16 * sb + k] = float(_mm512_reduce_add_epi32(_mm512_cvtepi8_epi32(q8)));
    }
    for (int k = 0; k < 8; ++k) s32[8 * sb + k] = s16[16 * sb + 2 * k] + s16[16 * sb + 2 * k + 1];
  }
}

// One row of w decoded: signed codes c [in], a [in / run], m [in / run]; past `in` the caller's
// zeros stay.
template <DType D>
void ggml_i8_decode_row(const uint8_t* src, int64_t in, int8_t* codes, float* a, float* m) {
  if constexpr (D == DType::kQ8_0 || D == DType::kQ4_0) {
    constexpr int kBytes = D == DType::kQ8_0 ? 34 : 18;
    for (int64_t k = 0; k < in / 32; ++k) {
      const uint8_t* blk = src + k * kBytes;
      __m256i q;
      if constexpr (D == DType::kQ8_0) {
        q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
      } else {  // byte j: value j (low nibble) and value j + 16 (high nibble)
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
        const __m128i m4 = _mm_set1_epi8(0x0f);
        q = _mm256_sub_epi8(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(v, m4)),
                                                    _mm_and_si128(_mm_srli_epi16(v, 4), m4), 1),
                            _mm256_set1_epi8(8));
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + 32 * k), q);
      a[k] = ggml_k_half(blk);
      m[k] = 0.0f;
    }
  } else {
    // The K codes as decoded are unsigned; Q6_K and Q3_K carry their offset (32, 4) in m = off·a,
    // which is taken back into the codes here so that they need no x sums.
    constexpr int kOff = D == DType::kQ6_K ? 32 : D == DType::kQ3_K ? 4 : 0;
    for (int64_t sb = 0; sb < in / 256; ++sb) {
      GgmlKBlock k;
      ggml_k_decode<D>(src + sb * kGgmlKBytes<D>, k);
      __m512 ks[4], km;
      ggml_k_float_scales(k, ks, km);
      alignas(64) float s[16], mins[16];
      _mm512_store_ps(mins, km);  // per 16 values
      for (int c = 0; c < 4; ++c) {
        _mm512_storeu_si512(codes + 256 * sb + 64 * c,
                            _mm512_sub_epi8(k.q[c], _mm512_set1_epi8(char(kOff))));
        _mm512_store_ps(s, ks[c]);  // lane 4g: the scale of values 64c + 16g ..
        for (int g = 0; g < 4; ++g) {
          const int t16 = 4 * c + g;
          if constexpr (kI8Run32<D>) {
            if (g % 2 == 0) {
              a[8 * sb + t16 / 2] = s[4 * g];
              m[8 * sb + t16 / 2] = mins[t16];
            }
          } else {
            a[16 * sb + t16] = s[4 * g];
            m[16 * sb + t16] = kI8Mins<D> ? mins[t16] : 0.0f;
          }
        }
      }
    }
  }
}

// v[c] = column c of the 16 x 16 int32 matrix whose rows are v[0 .. 15]: unpacks pair rows into
// 2 x 2 and 4 x 4 blocks within 128-bit lanes, then two lane shuffles place the 4 x 4 blocks.
inline void transpose_16x16_epi32(__m512i v[16]) {
  __m512i a[16], b[16];
  for (int i = 0; i < 8; ++i) {
    a[2 * i] = _mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
    a[2 * i + 1] = _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
  }
  // b[4i + j], 128-bit lane L: element 4L + j of rows 4i .. 4i + 3.
  for (int i = 0; i < 4; ++i) {
    b[4 * i] = _mm512_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
    b[4 * i + 1] = _mm512_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
    b[4 * i + 2] = _mm512_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
    b[4 * i + 3] = _mm512_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    const __m512i c0 = _mm512_shuffle_i32x4(b[j], b[4 + j], 0x44);
    const __m512i c1 = _mm512_shuffle_i32x4(b[j], b[4 + j], 0xEE);
    const __m512i c2 = _mm512_shuffle_i32x4(b[8 + j], b[12 + j], 0x44);
    const __m512i c3 = _mm512_shuffle_i32x4(b[8 + j], b[12 + j], 0xEE);
    v[j] = _mm512_shuffle_i32x4(c0, c2, 0x88);
    v[4 + j] = _mm512_shuffle_i32x4(c0, c2, 0xDD);
    v[8 + j] = _mm512_shuffle_i32x4(c1, c3, 0x88);
    v[12 + j] = _mm512_shuffle_i32x4(c1, c3, 0xDD);
  }
}

// Up to 16 rows [o, o + n) of w decoded (ggml_i8_decode_row) into the thread's scratch, zero
// past row n and past w.in: codes [16][in], a [16][runs] and m [16][runs], `runs` values of a
// and m a row.
struct I8DecodedRows {
  int8_t* codes;
  float* a;
  float* m;
};

template <DType D>
inline I8DecodedRows ggml_i8_decode_rows(const LinearWeight& w, int64_t o, int64_t n, int64_t in,
                                         int64_t runs) {
  static thread_local AlignedBuffer<uint8_t> scratch;
  const size_t bytes = size_t(16 * in + 2 * 16 * runs * 4);
  uint8_t* buf = ensure_scratch(scratch, bytes);
  std::memset(buf, 0, bytes);
  float* a = reinterpret_cast<float*>(buf + 16 * in);
  const I8DecodedRows d{reinterpret_cast<int8_t*>(buf), a, a + 16 * runs};
  const int64_t row_bytes = dtype_bytes(w.dtype, w.in);
  for (int64_t r = 0; r < n; ++r)
    ggml_i8_decode_row<D>(w.data + (o + r) * row_bytes, w.in, d.codes + r * in, d.a + r * runs,
                          d.m + r * runs);
  return d;
}

// Lane r: r · runs, the index of row r's value in an [16][runs] array (a gather of one run's a
// or m of 16 rows).
inline __m512i ggml_i8_runs_index(int64_t runs) {
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  return _mm512_mullo_epi32(lane, _mm512_set1_epi32(int(runs)));
}

// −K of one strip's super-block from its runs' codes and a_t (written at out + 64 ...).
template <DType D>
inline void ggml_i8_store_neg_k(uint8_t* out) {
  constexpr int kRun = kI8Run32<D> ? 32 : 16, kRuns = 256 / kRun, kQuads = kRun / 4;
  constexpr int64_t kRunBytes = kQuads * 64 + 64 + kI8RunExtra<D>;
  __m512 k = _mm512_setzero_ps();  // K = 128 · Σ_t a_t · Σ_t c, per row
  for (int t = 0; t < kRuns; ++t) {
    const uint8_t* o = out + 64 + t * kRunBytes;
    __m512i csum = _mm512_setzero_si512();
    for (int q = 0; q < kQuads; ++q)  // Σ c per row
      csum = _mm512_dpbusd_epi32(csum, _mm512_set1_epi8(1), _mm512_load_si512(o + 64 * q));
    k = _mm512_fmadd_ps(_mm512_load_ps(o + kQuads * 64), _mm512_cvtepi32_ps(csum), k);
  }
  _mm512_store_ps(out, _mm512_mul_ps(k, _mm512_set1_ps(-128.0f)));
}

// The strips of rows [o0, o0 + rows) (o0 and rows multiples of 16) of a kQ4_KR16 weight, as
// ggml_i8_pack_rows<kQ4_K> lays out the Q4_K rows it was made from: its groups are the strips,
// and each code vector already holds a quad of 16 rows for two runs (low nibbles: run 2ch, high:
// run 2ch + 1), so only the nibbles are split and the scales unpacked (putting the rows back
// together and transposing them had been ~15% of a Q4_K_M prefill).
inline void ggml_i8_pack_q4k_r16(const LinearWeight& w, int64_t o0, int64_t rows, uint8_t* panel) {
  constexpr DType D = DType::kQ4_K;
  constexpr int64_t kRunBytes = 8 * 64 + 64 + kI8RunExtra<D>;
  const int64_t sbs = w.in / 256, group_bytes = kR16Rows * dtype_bytes(D, w.in);
  const __m512i m4 = _mm512_set1_epi8(0x0f), lo8 = _mm512_set1_epi32(0xff);
  for (int64_t s0 = 0; s0 < rows; s0 += kI8Strip) {
    const uint8_t* group = w.data + (o0 + s0) / kR16Rows * group_bytes;
    uint8_t* strip = panel + (s0 / kI8Strip) * sbs * kI8SbBytes<D>;
    for (int64_t sb = 0; sb < sbs; ++sb) {
      const uint8_t* unit = group + sb * kQ4KR16UnitBytes;
      uint8_t* out = strip + sb * kI8SbBytes<D>;
      const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(unit)));
      const __m512 dmin =
          _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(unit + 32)));
      const auto [sc03, m03, sc47, m47] = ggml_r16k_scales(unit);
      for (int t = 0; t < 8; ++t) {
        uint8_t* run = out + 64 + t * kRunBytes;
        const int ch = t / 2, shift = 8 * (t % 4);
        for (int k = 0; k < 8; ++k) {
          const __m512i v = _mm512_loadu_si512(unit + 256 + 64 * (8 * ch + k));
          _mm512_store_si512(run + 64 * k,
                             _mm512_and_si512(t % 2 ? _mm512_srli_epi16(v, 4) : v, m4));
        }
        // a_t = d · s_t and m_t = dmin · m_t: exact in FP32 (an f16 times 6 bits).
        const __m512i sc = _mm512_and_si512(_mm512_srli_epi32(t < 4 ? sc03 : sc47, shift), lo8);
        const __m512i mn = _mm512_and_si512(_mm512_srli_epi32(t < 4 ? m03 : m47, shift), lo8);
        _mm512_store_ps(run + 8 * 64, _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc)));
        _mm512_store_ps(run + 8 * 64 + 64, _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(mn)));
      }
      ggml_i8_store_neg_k<D>(out);
    }
  }
}

// The strips of rows [o0, o0 + rows) of w into `panel` (rows past the end: zero codes and
// scales). Strip s at panel + s · (in / 256) · kI8SbBytes<D>.
template <DType D>
void ggml_i8_pack_rows(const LinearWeight& w, int64_t o0, int64_t rows, uint8_t* panel) {
  constexpr int kRun = kI8Run32<D> ? 32 : 16, kRuns = 256 / kRun, kQuads = kRun / 4;
  const int64_t in = w.in, runs = in / kRun, sbs = in / 256;
  const __m512i runs_idx = ggml_i8_runs_index(runs);
  for (int64_t s0 = 0; s0 < rows; s0 += kI8Strip) {
    const auto [codes, a, m] =
        ggml_i8_decode_rows<D>(w, o0 + s0, std::min<int64_t>(kI8Strip, rows - s0), in, runs);
    uint8_t* strip = panel + (s0 / kI8Strip) * sbs * kI8SbBytes<D>;
    constexpr int64_t kRunBytes = kQuads * 64 + 64 + kI8RunExtra<D>;
    for (int64_t sb = 0; sb < sbs; ++sb) {
      uint8_t* out = strip + sb * kI8SbBytes<D>;
      // Quad j of the super-block (values 4j .. 4j + 3) of every row: run j / kQuads, quad
      // j % kQuads; 16 quads per 64-value chunk, by a 16 x 16 transpose of int32.
      for (int ch = 0; ch < 4; ++ch) {
        __m512i v[16];
        for (int r = 0; r < 16; ++r) v[r] = _mm512_loadu_si512(codes + r * in + 256 * sb + 64 * ch);
        transpose_16x16_epi32(v);
        for (int c = 0; c < 16; ++c) {
          const int j = 16 * ch + c;
          _mm512_store_si512(out + 64 + (j / kQuads) * kRunBytes + 64 * (j % kQuads), v[c]);
        }
      }
      for (int t = 0; t < kRuns; ++t) {
        const int64_t run = sb * kRuns + t;
        uint8_t* o = out + 64 + t * kRunBytes;
        _mm512_store_ps(o + kQuads * 64, _mm512_i32gather_ps(runs_idx, a + run, 4));
        if constexpr (kI8Mins<D>)
          _mm512_store_ps(o + kQuads * 64 + 64, _mm512_i32gather_ps(runs_idx, m + run, 4));
      }
      ggml_i8_store_neg_k<D>(out);
    }
  }
}

// y rows [0, C) (ldy apart) of the strip's `lanes` outputs against C rows of x: the register
// tile. `next` (or null): the next chunk's weight, `per` lines of it requested per super-block.
template <DType D, int C>
inline void ggml_i8_tile(const uint8_t* strip, int64_t in, const GgmlI8XRow* xs, float* y,
                         int64_t ldy, int lanes, WeightAhead* next, int64_t per) {
  constexpr int kRun = kI8Run32<D> ? 32 : 16, kRuns = 256 / kRun, kQuads = kRun / 4;
  constexpr int64_t kRunBytes = kQuads * 64 + 64 + kI8RunExtra<D>;
  __m512 f[C];
  for (int c = 0; c < C; ++c) f[c] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < in / 256; ++sb) {
    const uint8_t* blk = strip + sb * kI8SbBytes<D>;
    if (next) next->request(per);
    __m512 g[C];  // x per 256: the super-block's sum, scaled by its dx at the end
    for (int c = 0; c < C; ++c) g[c] = _mm512_load_ps(blk);  // −K
    for (int t = 0; t < kRuns; ++t) {
      const uint8_t* run = blk + 64 + t * kRunBytes;
      const int64_t at = 256 * sb + kRun * t;
      __m512i acc[C];
      for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_si512();
      for (int q = 0; q < kQuads; ++q) {
        const __m512i wv = _mm512_load_si512(run + 64 * q);
        for (int c = 0; c < C; ++c) {
          int32_t quad;
          std::memcpy(&quad, xs[c].u + at + 4 * q, 4);
          acc[c] = _mm512_dpbusd_epi32(acc[c], _mm512_set1_epi32(quad), wv);
        }
      }
      const __m512 a = _mm512_load_ps(run + kQuads * 64);
      for (int c = 0; c < C; ++c) g[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[c]), a, g[c]);
      if constexpr (kI8Mins<D>) {
        const __m512 m = _mm512_load_ps(run + kQuads * 64 + 64);
        const int64_t ri = at / kRun;
        for (int c = 0; c < C; ++c)
          g[c] = _mm512_fnmadd_ps(
              m, _mm512_set1_ps(kI8Run32<D> ? xs[c].sums32[ri] : xs[c].sums16[ri]), g[c]);
      }
    }
    for (int c = 0; c < C; ++c) f[c] = _mm512_fmadd_ps(g[c], _mm512_set1_ps(xs[c].dx[sb]), f[c]);
  }
  const __mmask16 mask = __mmask16(lanes >= 16 ? 0xFFFF : (1u << lanes) - 1);
  for (int c = 0; c < C; ++c) _mm512_mask_storeu_ps(y + c * ldy, mask, f[c]);
}

template <DType D, int C>
void ggml_i8_tiles(const uint8_t* panel, int64_t strips, int64_t in, const GgmlI8XRow* xs, float* y,
                   int64_t ldy, int64_t rows, WeightAhead* next, int64_t per) {
  for (int64_t s = 0; s < strips; ++s)
    ggml_i8_tile<D, C>(panel + s * (in / 256) * kI8SbBytes<D>, in, xs, y + s * kI8Strip, ldy,
                       int(std::min<int64_t>(kI8Strip, rows - s * kI8Strip)), next, per);
}

// Rows [r0, r1) of w (a K format) against all n quantised rows of x (ggml_i8_x_row_bytes(in)
// bytes apart). The tiles after the first row tile of x request `next`.
template <DType D>
void ggml_gemm_i8_chunk_typed(const LinearWeight& w, int64_t n, const uint8_t* xq, float* y,
                              int64_t r0, int64_t r1, WeightAhead next) {
  static thread_local AlignedBuffer<uint8_t> scratch;
  const int64_t rows = r1 - r0, strips = (rows + kI8Strip - 1) / kI8Strip;
  const int64_t in = w.in;
  uint8_t* panel = ensure_scratch(scratch, size_t(strips * (in / 256) * kI8SbBytes<D>));
  if (w.dtype == DType::kQ4_KR16)
    ggml_i8_pack_q4k_r16(w, r0, rows, panel);
  else
    ggml_i8_pack_rows<D>(w, r0, rows, panel);
  const int64_t stride = ggml_i8_x_row_bytes(w.in);
  const int64_t per = next.per_step(((n + kI8Tile - 1) / kI8Tile - 1) * strips * (in / 256));
  for (int64_t i0 = 0; i0 < n; i0 += kI8Tile) {
    GgmlI8XRow xs[kI8Tile];
    const int64_t nx = std::min<int64_t>(kI8Tile, n - i0);
    for (int64_t i = 0; i < nx; ++i) xs[i] = ggml_i8_x_row(xq + (i0 + i) * stride, w.in);
    float* yg = y + i0 * w.out + r0;
    [&]<int... I>(std::integer_sequence<int, I...>) {
      ((nx == I + 1 ? ggml_i8_tiles<D, I + 1>(panel, strips, in, xs, yg, w.out, rows,
                                              i0 > 0 ? &next : nullptr, per)
                    : void()),
       ...);
    }
    (std::make_integer_sequence<int, kI8Tile>{});
  }
}

inline void ggml_gemm_i8_chunk(const LinearWeight& w, int64_t n, const uint8_t* xq, float* y,
                               int64_t r0, int64_t r1, WeightAhead next) {
  switch (w.dtype) {
    case DType::kQ4_KR16:  // packed into the Q4_K strips (ggml_i8_pack_q4k_r16)
      return ggml_gemm_i8_chunk_typed<DType::kQ4_K>(w, n, xq, y, r0, r1, next);
    case DType::kQ2_K:
      return ggml_gemm_i8_chunk_typed<DType::kQ2_K>(w, n, xq, y, r0, r1, next);
    case DType::kQ3_K:
      return ggml_gemm_i8_chunk_typed<DType::kQ3_K>(w, n, xq, y, r0, r1, next);
    case DType::kQ4_K:
      return ggml_gemm_i8_chunk_typed<DType::kQ4_K>(w, n, xq, y, r0, r1, next);
    case DType::kQ5_K:
      return ggml_gemm_i8_chunk_typed<DType::kQ5_K>(w, n, xq, y, r0, r1, next);
    default:
      return ggml_gemm_i8_chunk_typed<DType::kQ6_K>(w, n, xq, y, r0, r1, next);
  }
}

}  // namespace
}  // namespace mla::cpu
