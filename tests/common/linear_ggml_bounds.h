// GGUF block-format weights for tests of linear() and their error bounds against the FP64
// reference, per kernel: shared by tests/unit/kernels/linear_ggml_test.cc and the mla_ops
// harness (tests/ops/cases/linear_ggml.cc). Each bound is derived next to its function.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "core/check.h"
#include "core/ggml_quant.h"
#include "core/ggml_repack.h"
#include "core/rng.h"
#include "kernels/linear.h"
#include "linear_run.h"

namespace mla::test {

struct BlockWeight {
  std::vector<uint8_t> bytes;
  LinearWeight w;
  std::vector<std::vector<float>> rows;  // dequantised
  // Per value, the magnitude of the two terms the VNNI kernels sum separately: K formats
  // |d·s·q| + |dm·m| (linear_ggml_vnni_k.h), bounded from decodes of altered copies of the block;
  // Q8_0 / Q4_0 |w| (the int8 GEMM's signed codes).
  std::vector<std::vector<double>> mags;
};

// Decodes one K super-block with `len` bytes from `at` set to `v`.
inline std::vector<float> decode_altered(DType t, const uint8_t* block, int at, int len,
                                         uint8_t v) {
  std::vector<uint8_t> b(block, block + dtype_block(t).bytes);
  std::fill(b.begin() + at, b.begin() + at + len, v);
  std::vector<float> out(256);
  MLA_CHECK(dequantize_row(t, b.data(), 256, out.data()).ok(), "a test block");
  return out;
}

// Q4_K / Q5_K / Q2_K (d·s·q − dmin·m): the first term with dmin zeroed, the second with d zeroed.
// Q6_K / Q3_K (d·s·(q − off)): |d·s|·(q + off) ≤ |w| + 2·off·|d·s|, with d·s decoded from a copy
// whose codes all read off + 1 (Q6_K: ql nibbles 1, qh pairs 2; Q3_K: two bits 1, hmask bit 1).
inline std::vector<double> k_mags(DType t, const uint8_t* block) {
  std::vector<double> mag(256);
  const auto add = [&](const std::vector<float>& v, double f) {
    for (int j = 0; j < 256; ++j) mag[size_t(j)] += f * std::fabs(double(v[size_t(j)]));
  };
  std::vector<float> w(256);
  MLA_CHECK(dequantize_row(t, block, 256, w.data()).ok(), "a test block");
  switch (t) {
    case DType::kQ4_K:
    case DType::kQ5_K:
      add(decode_altered(t, block, 2, 2, 0), 1);
      add(decode_altered(t, block, 0, 2, 0), 1);
      break;
    case DType::kQ2_K:
      add(decode_altered(t, block, 82, 2, 0), 1);
      add(decode_altered(t, block, 80, 2, 0), 1);
      break;
    case DType::kQ6_K: {
      std::vector<uint8_t> b(block, block + 210);
      std::fill(b.begin(), b.begin() + 128, 0x11);
      std::fill(b.begin() + 128, b.begin() + 192, 0xAA);
      std::vector<float> ds(256);
      MLA_CHECK(dequantize_row(t, b.data(), 256, ds.data()).ok(), "a test block");
      add(w, 1);
      add(ds, 64);
      break;
    }
    default: {  // Q3_K
      std::vector<uint8_t> b(block, block + 110);
      std::fill(b.begin(), b.begin() + 32, 0xFF);
      std::fill(b.begin() + 32, b.begin() + 96, 0x55);
      std::vector<float> ds(256);
      MLA_CHECK(dequantize_row(t, b.data(), 256, ds.data()).ok(), "a test block");
      add(w, 1);
      add(ds, 8);
    }
  }
  return mag;
}

inline BlockWeight make_weight(DType t, int64_t out, int64_t in, uint64_t seed) {
  if (dtype_is_row_interleaved(t)) {  // repacked as the loader does (core/ggml_repack.h)
    const DType file = r16_file_dtype(t);
    BlockWeight b = make_weight(file, out, in, seed);
    std::vector<uint8_t> packed(b.bytes.size());  // also at an odd address
    repack_rows(t, b.w.data, out, in, packed.data() + 1);
    b.bytes = std::move(packed);
    b.w.dtype = t;
    b.w.data = b.bytes.data() + 1;
    return b;
  }
  Rng rng(seed);
  BlockWeight b;
  const DTypeBlock blk = dtype_block(t);
  const size_t row_bytes = size_t(in / blk.elems) * size_t(blk.bytes);
  b.bytes.resize(row_bytes * size_t(out) + 1);  // +1: the data starts at an odd address
  std::vector<float> x(static_cast<size_t>(in));
  for (int64_t o = 0; o < out; ++o) {
    for (float& v : x) v = float(rng.normal()) * 0.05f;
    MLA_CHECK(quantize_row(t, x, b.bytes.data() + 1 + size_t(o) * row_bytes).ok(), "a test block");
    std::vector<float> back(static_cast<size_t>(in));
    MLA_CHECK(dequantize_row(t, b.bytes.data() + 1 + size_t(o) * row_bytes, in, back.data()).ok(),
              "a test block");
    b.rows.push_back(back);
    if (blk.elems == 32) {  // the int8 GEMM's codes are signed: its terms are the values
      std::vector<double> mag(static_cast<size_t>(in));
      for (int64_t k = 0; k < in; ++k) mag[size_t(k)] = std::fabs(double(back[size_t(k)]));
      b.mags.push_back(mag);
    } else {
      std::vector<double> mag;
      for (int64_t k = 0; k < in / 256; ++k) {
        const std::vector<double> m =
            k_mags(t, b.bytes.data() + 1 + size_t(o) * row_bytes + size_t(k) * size_t(blk.bytes));
        mag.insert(mag.end(), m.begin(), m.end());
      }
      b.mags.push_back(mag);
    }
  }
  b.w.dtype = t;
  b.w.data = b.bytes.data() + 1;
  b.w.out = out;
  b.w.in = in;
  return b;
}

// Per output: the FP64 product with the decoded weights, and its bound.
//  - FP32 products of the decoded weights (the K formats; every format on variants without
//    VNNI): the decoded values are exact in FP32, so only the summation rounds:
//    γ_(in+2)·Σ|x·w| (as linear_test.cc's bound).
//  - Q8_0 / Q4_0 on VNNI: x is quantised per 32 values, q = round(x / dx), dx = amax/127, each
//    within dx/2 (plus the rounding of dx and 1/dx: 2^-22·|x| more); the int32 block sums are
//    exact and each block's d_w·dx·sum rounds twice before the FP32 accumulation; that term is
//    at most Σ|w|·|q·dx| ≤ Σ|w|·(|x| + dx/2) (not |x·w|·(1 + 1/127): a small x beside a large
//    one in its block rounds to a q·dx far above it):
//    Σ_blocks (dx/2 + 2^-22·amax)·Σ|w| + γ_(in/32+4)·Σ|w|·(|x| + dx/2 + 2^-22·amax).
//  - The K formats on VNNI: x is quantised per 256-value super-block the same way, so its
//    rounding adds Σ_superblocks (dx/2 + 2^-22·amax)·Σ|w|. Per super-block the kernel forms
//    exact int32 dot products per 4 values, scales them by the exact d·s in 4 fused adds per
//    lane, multiplies the part by dx (one more) and subtracts the exact dm·m times
//    fl(dx·Σ q_x) (one rounding for the x sum, one for the add; Q6_K and Q3_K subtract m·Σ q_x
//    in the integer lanes instead, whose conversion may then round once, as in the AVX2 kernel);
//    with two accumulator adds per super-block and four for the final 16-lane sum,
//    k = 2·in/256 + 11 roundings at most reach any term. The terms are not the products w·x but
//    their two parts, so the FP32 part is γ_k·Σ mag·(|x| + dx/2) with mag = |d·s·q| + |dm·m| ≥ |w|.
inline double fp32_bound(int64_t in, double abs_sum) {
  const double u = std::ldexp(1.0, -24), k = double(in + 2);
  return k * u / (1 - k * u) * abs_sum;
}

// x quantised per 32 values (Q8_0 / Q4_0 and their repacks, on the GEMV and the int8 GEMM):
// Σ_blocks half·Σ|w| + γ_k·Σ|w|·(|x| + half), half = dx/2 + 2^-22·amax, k = in/32 + `extra`
// roundings.
inline double x32_bound(const std::vector<float>& x, const std::vector<float>& w, int extra) {
  double b = 0, terms = 0;
  for (size_t j0 = 0; j0 < x.size(); j0 += 32) {
    double amax = 0, wsum = 0;
    for (size_t j = j0; j < j0 + 32; ++j) amax = std::max(amax, std::fabs(double(x[j])));
    const double half = amax / 127 / 2 + std::ldexp(amax, -22);
    for (size_t j = j0; j < j0 + 32; ++j) {
      wsum += std::fabs(double(w[j]));
      terms += std::fabs(double(w[j])) * (std::fabs(double(x[j])) + half);
    }
    b += half * wsum;
  }
  const double u = std::ldexp(1.0, -24), k = double(x.size() / 32 + extra);
  return b + k * u / (1 - k * u) * terms;
}

inline double vnni_bound(const std::vector<float>& x, const std::vector<float>& w) {
  return x32_bound(x, w, 4);
}

inline double vnni_k_bound(const std::vector<float>& x, const std::vector<float>& w,
                           const std::vector<double>& mag) {
  double b = 0, terms = 0;
  for (size_t j0 = 0; j0 < x.size(); j0 += 256) {
    double amax = 0, wsum = 0;
    for (size_t j = j0; j < j0 + 256; ++j) amax = std::max(amax, std::fabs(double(x[j])));
    const double half = amax / 127 / 2 + std::ldexp(amax, -22);
    for (size_t j = j0; j < j0 + 256; ++j) {
      wsum += std::fabs(double(w[j]));
      terms += mag[j] * (std::fabs(double(x[j])) + half);
    }
    b += half * wsum;
  }
  // + 1: the conversion of a Q6_K / Q3_K super-block's int32 lane (it may pass 2^24).
  const double u = std::ldexp(1.0, -24), k = double(2 * x.size() / 256 + 11);
  return b + k * u / (1 - k * u) * terms;
}

// The int8 GEMM (path kBf16 above 16 rows with VNNI, linear_gemm_int8.h) of the K formats: x is
// quantised per 256 values (rows padded to whole super-blocks with zeros), Σ_sb (dx/2 +
// 2^-22·amax)·Σ|w| as on the K GEMV. The FP32 part: the kernel sums a·Σ c·u with u = q_x + 128 and
// subtracts K = 128·Σ a·Σ c, so its terms are |a·c|·(|q_x| + 128)·dx ≤ mag·(|x| + dx/2 + 128·dx),
// mag = |a·c| + |m| ≥ |w|; K takes one fused add per run and one scaling, the super-block sum one
// fused add per run and one more per min, and the output one per super-block: k = 3·in/16 +
// 2·in/256 + 4 roundings reach any term at most.
inline double i8_gemm_bound(const std::vector<float>& x, const std::vector<float>& w,
                            const std::vector<double>& mag) {
  double b = 0, terms = 0;
  for (size_t j0 = 0; j0 < x.size(); j0 += 256) {
    const size_t j1 = std::min(x.size(), j0 + 256);
    double amax = 0, wsum = 0;
    for (size_t j = j0; j < j1; ++j) amax = std::max(amax, std::fabs(double(x[j])));
    const double dx = amax / 127, half = dx / 2 + std::ldexp(amax, -22);
    for (size_t j = j0; j < j1; ++j) {
      wsum += std::fabs(double(w[j]));
      terms += mag[j] * (std::fabs(double(x[j])) + half + 128 * dx);
    }
    b += half * wsum;
  }
  const double u = std::ldexp(1.0, -24);
  const double k = double(3 * x.size() / 16 + 2 * (x.size() + 255) / 256 + 4);
  return b + k * u / (1 - k * u) * terms;
}

// The int8 GEMM of Q8_0 / Q4_0 (and Q8_0_R16, linear_gemm_int8_x32.h): x quantised per 32
// values as on the GEMV, Σ_blocks (dx/2 + 2^-22·amax)·Σ|w|. Per run the kernel's int32 sum
// starts at −128·Σ q_x and ends at Σ c·q_x (exact, and exact in FP32), so the run's term
// a·Σ c·q_x·dx, at most Σ|w|·(|x| + dx/2), rounds in its product with a and in the fused add
// of dx into the output, which then adds one term a run: k = in/32 + 2 roundings at most.
inline double i8_gemm32_bound(const std::vector<float>& x, const std::vector<float>& w) {
  return x32_bound(x, w, 2);
}

// Path kBf16 above 16 rows: every block format on the VNNI variants, Q8_0 / Q4_0 on the others'
// int8 GEMM (linear_gemm_int8_avx2.h: the same x and roundings as the x32 VNNI GEMM).
inline bool gemm_path(std::string_view v, LinearPath path, int64_t n, DType t) {
  if (path != LinearPath::kBf16 || n <= 16) return false;
  if (v == "linear.cpu.avx2" || v == "linear.cpu.avx512" || v == "linear.cpu.avx512vbmi")
    return t == DType::kQ8_0 || t == DType::kQ4_0;
  return v == "linear.cpu.avx512bf16" || v == "linear.cpu.avx512vbmivnni" ||
         v == "linear.cpu.avx512vnni";
}

// Integer dot products: every block format and Q8_0_R16 on AVX512-VNNI (linear.cpu.avx512bf16);
// Q8_0 / Q4_0 and Q4_K / Q5_K / Q6_K on the AVX2 kernels in the other SIMD variants, with the
// same x quantisation and exact integer sums (linear_ggml_avx2*.h: the same bounds). The
// Q8_0_R16 GEMV (linear_ggml_r16.h) rounds as the Q8_0 one, with one lane per row in place of
// the final horizontal sum: vnni_bound holds for it; the other variants decode it to FP32.
inline bool vnni_path(std::string_view v, DType t) {
  const bool block = t != DType::kF32 && t != DType::kF16 && t != DType::kBF16;
  if (v == "linear.cpu.avx2" || v == "linear.cpu.avx512" || v == "linear.cpu.avx512vbmi")
    return t == DType::kQ8_0 || t == DType::kQ4_0 || t == DType::kQ4_K || t == DType::kQ5_K ||
           t == DType::kQ6_K;
  return (v == "linear.cpu.avx512bf16" || v == "linear.cpu.avx512vbmivnni" ||
          v == "linear.cpu.avx512vnni") &&
         __builtin_cpu_supports("avx512vnni") && block;
}

// The bound of output (i, o): the kernel the variant runs for dtype t on `path` with n rows of x.
// xi: row i of x; w: row o of the decoded weights; mag: its per-value term magnitudes.
inline double block_bound(std::string_view variant, LinearPath path, int64_t n, DType t,
                          const std::vector<float>& xi, const std::vector<float>& w,
                          const std::vector<double>& mag) {
  double abs_sum = 0;
  for (size_t j = 0; j < xi.size(); ++j) abs_sum += std::fabs(double(xi[j]) * w[j]);
  if (!vnni_path(variant, t)) return fp32_bound(int64_t(xi.size()), abs_sum);
  if (gemm_path(variant, path, n, t))
    return dtype_block(t).elems == 32 || t == DType::kQ8_0R16 ? i8_gemm32_bound(xi, w)
                                                              : i8_gemm_bound(xi, w, mag);
  return dtype_block(t).elems == 32 ? vnni_bound(xi, w) : vnni_k_bound(xi, w, mag);
}

}  // namespace mla::test
