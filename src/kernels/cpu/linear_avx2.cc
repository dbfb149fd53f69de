// linear.cpu.avx2: weight products with AVX2 + FMA (8 FP32 lanes) and F16C (vcvtph2ps, for FP16
// and for FP8 E4M3 through FP16); prefill on the FP32 GEMM (linear_gemm_f32_avx2.h); GGUF Q8_0 /
// Q4_0 and Q4_K / Q5_K / Q6_K on integer GEMVs and int8 GEMMs (linear_ggml_avx2_hooks.h).
#include "kernels/cpu/isa_prelude.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/scratch.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

#include "kernels/cpu/linear_driver.h"
#include "kernels/cpu/linear_gemm_f32_avx2.h"
#include "kernels/cpu/linear_ggml_avx2_hooks.h"
#include "kernels/cpu/vec_avx2.h"

namespace mla::cpu {
namespace {

struct LinAvx2 : GgmlAvx2Hooks {
  using Vec = VecAvx2;
  static constexpr int kW = 8;
  // The FP32 GEMM hooks of run_linear_many (linear_gemm_f32_avx2.h).
  static constexpr int64_t kF32GemmMinRows = cpu::kF32GemmMinRows;
  static bool f32_gemm_takes(const LinearWeight& w) { return cpu::f32_gemm_takes(w); }
  static int64_t f32_gemm_chunk_rows(const LinearWeight& w, int threads) {
    return cpu::f32_gemm_chunk_rows(w, threads);
  }
  template <class L>
  static void f32_gemm_rows(const LinearWeight& w, int64_t n, const float* x, float* y, int64_t r0,
                            int64_t r1) {
    cpu::f32_gemm_rows<L>(w, n, x, y, r0, r1);
  }
  // R·N ≤ 8 accumulators plus R widened rows within the 16 ymm registers.
  template <int N>
  static constexpr int rows() {
    return N <= 2 ? 4 : 2;
  }
  static bool fp8_nan(const uint8_t* p, int64_t count) {
    const __m256i m = _mm256_set1_epi8(0x7F);
    __m256i hit = _mm256_setzero_si256();
    int64_t k = 0;
    for (; k + 32 <= count; k += 32) {
      const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + k));
      hit = _mm256_or_si256(hit, _mm256_cmpeq_epi8(_mm256_and_si256(b, m), m));
    }
    return !_mm256_testz_si256(hit, hit) || lin_fp8_nan_scalar(p + k, count - k);
  }
  template <DType D, bool kNan = true>
  static Vec widen(const uint8_t* p) {
    if constexpr (D == DType::kF32) {
      return {_mm256_loadu_ps(reinterpret_cast<const float*>(p))};
    } else if constexpr (D == DType::kBF16) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
      return {_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))};
    } else if constexpr (D == DType::kF16) {
      return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))};
    } else if constexpr (D == DType::kI8) {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));  // 8 bytes
      return {_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b))};
    } else {
      // E4M3 → FP16 with the exponent field kept (value · 2^-8), as in linear_avx512.cc.
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));  // 8 bytes
      const __m128i h =
          _mm_and_si128(_mm_slli_epi16(_mm_cvtepi8_epi16(b), 7), _mm_set1_epi16(int16_t(0xBF80)));
      if constexpr (!kNan) return {_mm256_cvtph_ps(h)};
      // 0x7F / 0xFF: all-ones lanes (a NaN) OR-ed over the converted value.
      const __m128i nan =
          _mm_cmpeq_epi8(_mm_and_si128(b, _mm_set1_epi8(0x7F)), _mm_set1_epi8(0x7F));
      return {_mm256_or_ps(_mm256_cvtph_ps(h), _mm256_castsi256_ps(_mm256_cvtepi8_epi32(nan)))};
    }
  }
};

}  // namespace

void linear_avx2(const LinearParams& p, ThreadPool& pool) {
  run_linear_many<LinAvx2>(p.jobs, pool, p.path);
}

}  // namespace mla::cpu

#pragma GCC pop_options
