// Error bounds of linear() on the float weight dtypes (BF16, F16, F32, block-scaled FP8 and
// int8) against the FP64 reference, each derived next to its function: shared by
// tests/unit/kernels/linear_test.cc and the ops harness (tests/ops/cases/linear.cc). The GGUF
// block formats have theirs in linear_ggml_bounds.h.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "kernels/registry.h"
#include "linear_test_weight.h"

namespace mla {

// |W|: the sign bit of every element cleared (scales are positive already).
inline TestWeight abs_weight(const TestWeight& t) {
  TestWeight a = t;
  const size_t off = size_t(t.w.data - t.data.data());
  a.w.data = a.data.data() + off;
  if (t.w.scale_inv) a.w.scale_inv = a.scales.data() + (t.w.scale_inv - t.scales.data());
  const int eb = elem_bytes(t.w.dtype);
  for (int64_t k = 0; k < t.w.out * t.w.in; ++k) {
    uint8_t& b = a.data[off + size_t(k) * eb + eb - 1];
    b = t.w.dtype == DType::kI8 ? uint8_t(std::abs(int(int8_t(b)))) : uint8_t(b & 0x7F);
  }
  return a;
}

// The error bound per output y_i = Σ_j x_j·w_j (u = 2^-24): widening is exact except the block
// scale of FP8 and int8 (code · scale, or x · scale on the decode path), which rounds once; a
// product is exact under FMA or rounds once (u) in the scalar variant; any summation tree of `in`
// terms (lane partials, horizontal sums, SGEMM's blocking and its β = 1 accumulation over column
// panels) adds at most γ_in = in·u / (1 − in·u) of Σ|x_j·w_j|. Together: |ŷ − y| ≤ γ_(in+2) · Σ_j
// |x_j·w_j|, plus (in + 2)·2^-149 for products that underflow.
inline double bound(int64_t in, double abs_sum) {
  const double u = std::ldexp(1.0, -24), k = double(in + 2);
  return k * u / (1 - k * u) * abs_sum + k * std::ldexp(1.0, -149);
}

// Path kBf16 on a variant with the BF16 GEMM, n > 16 (linear_gemm_bf16.h): x_j rounds to BF16
// (RNE, relative u_b = 2^-8); BF16 weights are exact and FP8 ones are held as their exact value
// · 2^-8 in BF16, so every pair product is exact in FP32. Each lane adds its products one at a
// time (one rounding each: ≤ in), and FP8 adds two roundings per scale block (s · partial, then
// the block sum: ≤ 2 · (in / 2 + 1)), so m = 2·in + 4 roundings bound any term's path:
//   |ŷ − y| ≤ (u_b + γ_m · (1 + u_b)) · Σ_j |x_j·w_j| + flush terms.
// The BF16 units treat values below 2^-126 as zero: an input x_j that small moves y by at most
// 2^-126·|w_j| (2^-126·Σ_j|w_j| in all), and each of the m sums that underflows moves it by at
// most 2^-126 in the accumulator's unit, which FP8 scales by s·2^8 (`unit`).
// F32 weights (`w_rounds`) are rounded to BF16 in the panel as well (relative u_b each): the
// products are then off by (2·u_b + u_b²)·|x·w| before the sums. (Their draws here are normal
// values, none below 2^-126, so none flushes to zero.)
// The dot products of 1-4 rows on path kBf16Gemm (cpu/linear_r16_dot.h) round x · s · 2^8 (FP8)
// to BF16 instead: the FP32 product, then BF16, u + u_b + u·u_b, where the bound counts u_b; the
// sums take in + 3 roundings, so γ_m's spare m − (in + 3) ≥ in + 1 ≥ 3 roundings cover the extra
// u. A flushed x · s · 2^8 moves y by at most 2^-126 · |code · 2^-8| ≤ 1.75 · 2^-126 a term,
// inside m · unit · 2^-126.
inline double bound_bf16(int64_t in, double abs_sum, double w_abs_sum, double unit,
                         bool w_rounds = false) {
  const double u = std::ldexp(1.0, -24), ub = std::ldexp(1.0, -8), m = double(2 * in + 4);
  const double uw = w_rounds ? ub : 0.0;
  const double gamma = m * u / (1 - m * u);
  return (ub + uw + ub * uw + gamma * (1 + ub) * (1 + uw)) * abs_sum +
         std::ldexp(1.0, -126) * (w_abs_sum + m * unit);
}

// The largest FP8 scale · 2^8 of a weight (the unit of its partial sums in the GEMM), 1 otherwise.
inline double gemm_unit(const TestWeight& t) {
  if (t.w.dtype != DType::kF8E4M3) return 1.0;
  double m = 1.0;
  for (size_t k = size_t(t.w.scale_inv - t.scales.data()); k + 4 <= t.scales.size(); k += 4) {
    float s;
    std::memcpy(&s, t.scales.data() + k, 4);
    m = std::max(m, 256.0 * s);
  }
  return m;
}

// Whether a product may run on BF16 dot products (bound_bf16, which holds for the FP32 products
// too), else the FP32 products (bound): a variant with BF16 intermediates (linear.cpu.avx512bf16)
// on path kBf16 with more than 16 rows (the GEMM), or on path kBf16Gemm from 4 rows (the GEMM,
// from the smallest of the formats' minimums, cpu/linear_driver.h lin_gemm_min_rows) and below
// them for BF16_R16 and F8_E4M3_R16 (cpu/linear_r16_dot.h), for the weights the GEMM takes
// (cpu/linear_gemm_bf16.h gemm_bf16_takes: BF16 and BF16_R16, F32, F8_E4M3_R16, FP8 whose scale
// blocks hold whole column pairs). F16 and int8 keep the FP32 products on every path.
inline bool takes_bf16_gemm(Intermediates compute, LinearPath path, int64_t n,
                            const LinearWeight& w) {
  if (compute != Intermediates::kBf16) return false;
  const bool r16 = w.dtype == DType::kBF16R16 || w.dtype == DType::kF8E4M3R16;
  if (!(path == LinearPath::kBf16 && n > 16) && !(path == LinearPath::kBf16Gemm && (n >= 4 || r16)))
    return false;
  return w.dtype == DType::kBF16 || w.dtype == DType::kBF16R16 || w.dtype == DType::kF32 ||
         w.dtype == DType::kF8E4M3R16 || (w.dtype == DType::kF8E4M3 && w.block_cols % 2 == 0);
}

}  // namespace mla
