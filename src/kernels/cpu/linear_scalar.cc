// linear.cpu.scalar: weight products in portable C++ (one lane), the fallback without AVX2.
#include "kernels/cpu/isa_prelude.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/scratch.h"

#include "kernels/cpu/linear_driver.h"
#include "kernels/cpu/vec_scalar.h"

namespace mla::cpu {
namespace {

struct LinScalar {
  using Vec = VecScalar;
  static constexpr int kW = 1;
  template <int N>
  static constexpr int rows() {
    return N <= 2 ? 4 : 2;
  }
  static bool fp8_nan(const uint8_t* p, int64_t count) { return lin_fp8_nan_scalar(p, count); }
  // kNan is moot: fp8_e4m3_to_f32 decodes NaN itself.
  template <DType D, bool kNan = true>
  static Vec widen(const uint8_t* p) {
    if constexpr (D == DType::kF32) {
      float f;
      std::memcpy(&f, p, 4);
      return {f};
    } else if constexpr (D == DType::kBF16 || D == DType::kF16) {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return {D == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h)};
    } else if constexpr (D == DType::kI8) {
      return {float(int8_t(*p))};
    } else {
      // The driver's convention: FP8 as value · 2^-8 (exact; the smallest subnormal becomes
      // 2^-17, still normal in FP32). NaN stays NaN.
      return {fp8_e4m3_to_f32(*p) * 0x1p-8f};
    }
  }
};

}  // namespace

void linear_scalar(const LinearParams& p, ThreadPool& pool) {
  run_linear_many<LinScalar>(p.jobs, pool, p.path);
}

}  // namespace mla::cpu
