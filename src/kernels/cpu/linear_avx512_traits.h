// LinAvx512, the linear_driver.h traits of linear.cpu.avx512 (16 FP32 lanes, AVX-512F/BW/VL and
// F16C), shared with linear.cpu.avx512vbmi, which replaces only the FP8 decoding. Include after
// the ISA's `#pragma GCC target` (linear_avx512.cc); internal linkage.
#pragma once

#include "kernels/cpu/linear_driver.h"
#include "kernels/cpu/linear_ggml_avx2_hooks.h"
#include "kernels/cpu/vec_avx512.h"

namespace mla::cpu {
namespace {

// GGUF blocks on the AVX2 integer kernels (GgmlAvx2Hooks): AVX-512 CPUs without VNNI
// (Skylake-X); the VNNI variants (linear_avx512_vnni.cc, linear_avx512_vbmi_vnni.cc) replace them.
struct LinAvx512 : GgmlAvx2Hooks {
  using Vec = VecAvx512;
  static constexpr int kW = 16;
  // 4 rows × up to kLinGroup = 4 x rows: 16 accumulators and 4 widened rows in the 32 zmm
  // registers (6 rows were no faster). At n = 1, one row at a time: the weights are then read as
  // one sequential stream per thread instead of 8 streams 4 KiB apart. Whole-model decode on
  // two Zen 5 cores, 4-layer V2-Lite-shaped, against the read probe beside it: BF16 0.71 → 0.79
  // (20.5 → 23.9 tok/s), FP8 0.64 → 0.78 (docs/BENCHMARKS.md "One row at a time"). Weights
  // that sit in L3 lose: one accumulator chain per row is FMA-latency bound there (BF16 2048 ×
  // 1408: 75 → 142 µs), which decode of a model far larger than L3 never sees.
  template <int N>
  static constexpr int rows() {
    return N == 1 ? 1 : 4;
  }
  static bool fp8_nan(const uint8_t* p, int64_t count) {
    const __m512i m = _mm512_set1_epi8(0x7F);
    __mmask64 hit = 0;
    int64_t k = 0;
    for (; k + 64 <= count; k += 64)
      hit |= _mm512_cmpeq_epi8_mask(_mm512_and_si512(_mm512_loadu_si512(p + k), m), m);
    return hit != 0 || lin_fp8_nan_scalar(p + k, count - k);
  }
  template <DType D, bool kNan = true>
  static Vec widen(const uint8_t* p) {
    if constexpr (D == DType::kF32) {
      return {_mm512_loadu_ps(p)};
    } else if constexpr (D == DType::kBF16) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
      return {_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))};
    } else if constexpr (D == DType::kF16) {
      return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
    } else if constexpr (D == DType::kI8) {
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
      return {_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b))};
    } else {
      // E4M3 s.eeee.mmm → FP16 s.0eeee.mmm0000000: the same exponent field under a bias of 15
      // instead of 7, so the FP16 value is exactly the E4M3 value · 2^-8, subnormals included.
      // Sign-extended to 16 bits and shifted by 7, the sign lands in bits 14 and 15: masking
      // with 0xBF80 keeps bit 15 and the 7 exponent + mantissa bits.
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
      const __m256i h = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7),
                                         _mm256_set1_epi16(int16_t(0xBF80)));
      if constexpr (!kNan) return {_mm512_cvtph_ps(h)};
      // 0x7F / 0xFF would become ±1.875 · 2^-8: make them NaN.
      const __mmask16 nan =
          _mm_cmpeq_epi8_mask(_mm_and_si128(b, _mm_set1_epi8(0x7F)), _mm_set1_epi8(0x7F));
      return {_mm512_mask_mov_ps(_mm512_cvtph_ps(h), nan,
                                 _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN()))};
    }
  }
};

}  // namespace
}  // namespace mla::cpu
