// The K formats' quantiser (core/ggml_quant.h, ggml_quantize_k.cc): codes are the nearest for the
// stored scales, the block error is never above the plain quantiser's and below it on average,
// importance weights steer the error, and the RMS error on Gaussian data is at most that of
// llama.cpp's reference quantiser.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <string>
#include <vector>

#include "core/ggml_blocks.h"
#include "core/ggml_quant.h"
#include "core/rng.h"

namespace mla {
namespace {

// value = s · code − m per sub-block, codes in [code_lo, code_hi], integer scales (and mins) in
// [int_lo, int_hi].
struct KFormat {
  DType t;
  int sub;
  bool has_min;
  int code_lo, code_hi, int_lo, int_hi;
};
constexpr KFormat kFormats[] = {
    {DType::kQ2_K, 16, true, 0, 3, 0, 15},         {DType::kQ3_K, 16, false, -4, 3, -32, 31},
    {DType::kQ4_K, 32, true, 0, 15, 0, 63},        {DType::kQ5_K, 32, true, 0, 31, 0, 63},
    {DType::kQ6_K, 16, false, -32, 31, -128, 127},
};

// The stored scale and min of each sub-block, as the dequantiser forms them.
void stored_scales(const KFormat& f, const uint8_t* b, float* s, float* m) {
  using namespace ggml;
  switch (f.t) {
    case DType::kQ2_K:
      for (int j = 0; j < 16; ++j) {
        s[j] = load_half(b + Q2_K::kD) * float(b[Q2_K::kScales + j] & 15);
        m[j] = load_half(b + Q2_K::kDmin) * float(b[Q2_K::kScales + j] >> 4);
      }
      break;
    case DType::kQ3_K: {
      int sc[16];
      unpack_q3k_scales(b + Q3_K::kScales, sc);
      for (int j = 0; j < 16; ++j) s[j] = load_half(b + Q3_K::kD) * float(sc[j]), m[j] = 0;
      break;
    }
    case DType::kQ4_K:
    case DType::kQ5_K: {
      uint8_t sc[8], mn[8];
      unpack_scale_min_k4(b + Q4_K::kScales, sc, mn);
      for (int j = 0; j < 8; ++j) {
        s[j] = load_half(b + Q4_K::kD) * float(sc[j]);
        m[j] = load_half(b + Q4_K::kDmin) * float(mn[j]);
      }
      break;
    }
    default:
      for (int j = 0; j < 16; ++j)
        s[j] = load_half(b + Q6_K::kD) * float(int8_t(b[Q6_K::kScales + j])), m[j] = 0;
  }
}

float rne_clamped(float v, int lo, int hi) {
  return std::nearbyint(std::min(std::max(v, float(lo)), float(hi)));
}

// The default weights quantize_row documents: x² plus the super-block's mean square.
std::vector<float> default_weights(const float* x) {
  double ss = 0;
  for (int i = 0; i < 256; ++i) ss += double(x[i]) * x[i];
  std::vector<float> w(256);
  for (int i = 0; i < 256; ++i) w[i] = x[i] * x[i] + float(ss / 256);
  return w;
}

double weighted_sse(const float* x, const float* y, const float* w) {
  double e = 0;
  for (int i = 0; i < 256; ++i) {
    const float r = y[i] - x[i];
    e += double(w[i] * r * r);
  }
  return e;
}

// An FP16 super-block scale: rounded to nearest, but to ±2^-24 rather than to zero.
float scale_half(float v) {
  const float h = f16_to_f32(f32_to_f16(v));
  return h == 0 && v != 0 ? std::copysign(0x1p-24f, v) : h;
}

// The plain quantiser's weighted error, computed independently: a sub-block's float scale spans
// [min(x, 0), max(x)] (with a min) or maps its largest magnitude to code_lo (without); the f16
// super-block scale maps the largest to int_hi (with a min) or int_lo; integers and codes
// round to nearest.
double plain_sse(const KFormat& f, const float* x, const float* w) {
  const int nsub = 256 / f.sub;
  float s[16], m[16];
  float big_s = 0, big_m = 0;
  for (int j = 0; j < nsub; ++j) {
    const float* xs = x + f.sub * j;
    if (f.has_min) {
      const float lo = std::min(0.0f, *std::min_element(xs, xs + f.sub));
      const float hi = *std::max_element(xs, xs + f.sub);
      s[j] = (hi - lo) / float(f.code_hi);
      m[j] = -lo;
      big_s = std::max(big_s, s[j]);
      big_m = std::max(big_m, m[j]);
    } else {
      float amax = 0, vmax = 0;
      for (int i = 0; i < f.sub; ++i)
        if (std::fabs(xs[i]) > amax) amax = std::fabs(xs[i]), vmax = xs[i];
      s[j] = vmax / float(f.code_lo);
      m[j] = 0;
      if (std::fabs(s[j]) > std::fabs(big_s)) big_s = s[j];
    }
  }
  const float d = scale_half(big_s / float(f.has_min ? f.int_hi : f.int_lo));
  const float dmin = scale_half(big_m / float(f.int_hi));
  double e = 0;
  for (int j = 0; j < nsub; ++j) {
    const float ls = d != 0 ? rne_clamped(s[j] / d, f.int_lo, f.int_hi) : 0;
    const float lm = dmin > 0 ? rne_clamped(m[j] / dmin, 0, f.int_hi) : 0;
    const float es = d * ls, em = dmin * lm, inv = es != 0 ? 1.0f / es : 0.0f;
    for (int i = f.sub * j; i < f.sub * (j + 1); ++i) {
      const float c = es != 0 ? rne_clamped((x[i] + em) * inv, f.code_lo, f.code_hi) : 0;
      const float r = es * c - em - x[i];
      e += double(w[i] * r * r);
    }
  }
  return e;
}

// Test data, 256-value rows: N(0, 1); N(0.7, 1) and U(0, 1) (one-sided: exercise the min);
// Laplace (heavy tails); N(0, 1) with one outlier of 20 per row; magnitudes 1e-5 and 1e4.
std::vector<float> test_rows(uint64_t seed, int rows_each) {
  Rng rng(seed);
  std::vector<float> x;
  for (int kind = 0; kind < 7; ++kind) {
    for (int r = 0; r < rows_each; ++r) {
      for (int i = 0; i < 256; ++i) {
        const double g = rng.normal();
        double v = g;
        if (kind == 1) v = g + 0.7;
        if (kind == 2) v = rng.uniform();
        if (kind == 3) v = (rng.uniform() < 0.5 ? -1 : 1) * -std::log(1 - rng.uniform());
        if (kind == 4 && i == r % 256) v = 20;
        if (kind == 5) v = g * 1e-5;
        if (kind == 6) v = g * 1e4;
        x.push_back(float(v));
      }
    }
  }
  return x;
}

struct Quantised {
  std::vector<uint8_t> q;
  std::vector<float> y;
};
Quantised round_trip(DType t, const std::vector<float>& x, const std::vector<float>& imp = {}) {
  Quantised r;
  r.q.resize(x.size() / 256 * size_t(dtype_block(t).bytes));
  r.y.resize(x.size());
  const Status s = quantize_row(t, x, r.q.data(), imp);
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(dequantize_row(t, r.q.data(), int64_t(x.size()), r.y.data()).ok());
  return r;
}

// Given the stored scale s and min m of a sub-block, its representable values are the grid
// s · c − m, c in [code_lo, code_hi], spanning R = [min, max] of the two end points. A code that
// is the nearest one (up to the FP32 rounding of (x + m) · fl(1 / s), 2^-22 relative, and of the
// dequantiser's one rounding) leaves
//   |x̂ − x| ≤ |s| / 2 + dist(x, R) + 2^-20 · (|x| + |m| + |s| · max|c|).
// dist(x, R) is the clipping the search chose (it trades the extremes against the rest).
TEST(GgmlQuantizeK, CodesAreNearestForStoredScales) {
  const std::vector<float> x = test_rows(31, 24);
  for (const KFormat& f : kFormats) {
    const Quantised r = round_trip(f.t, x);
    const int bytes = dtype_block(f.t).bytes;
    for (size_t b = 0; b < x.size() / 256; ++b) {
      float s[16], m[16];
      stored_scales(f, r.q.data() + b * size_t(bytes), s, m);
      for (int i = 0; i < 256; ++i) {
        const size_t k = b * 256 + size_t(i);
        const int j = i / f.sub;
        const float e0 = s[j] * float(f.code_lo) - m[j], e1 = s[j] * float(f.code_hi) - m[j];
        const float lo = std::min(e0, e1), hi = std::max(e0, e1);
        const double dist = x[k] < lo ? lo - x[k] : x[k] > hi ? x[k] - hi : 0.0;
        const double cmax = std::max(-f.code_lo, f.code_hi);
        const double bound = std::fabs(s[j]) / 2 + dist +
                             0x1p-20 * (std::fabs(x[k]) + std::fabs(m[j]) + std::fabs(s[j]) * cmax);
        ASSERT_LE(std::fabs(double(r.y[k]) - x[k]), bound)
            << dtype_name(f.t) << " row " << b << " value " << i;
      }
    }
  }
}

// The quantiser keeps the plain quantiser's block when its search does not beat it, so per
// super-block Σ w (x̂ − x)² ≤ plain; since every term is at most the sum, per value
//   |x̂ − x| ≤ sqrt(plain / w_i),
// which bounds the clipping of the previous test where it matters: the large values carry the
// large weights. On average the search must be clearly better (measured in the comments).
TEST(GgmlQuantizeK, NeverWorseThanPlainAndBetterOnAverage) {
  const std::vector<float> x = test_rows(32, 24);
  // The mean over rows of ours / plain, measured on these rows: Q2_K 0.70, Q3_K 0.84, Q4_K 0.84,
  // Q5_K 0.84, Q6_K 0.77; the limits leave a margin.
  const double kMaxRatio[] = {0.76, 0.90, 0.90, 0.90, 0.84};
  for (size_t fi = 0; fi < std::size(kFormats); ++fi) {
    const KFormat& f = kFormats[fi];
    const Quantised r = round_trip(f.t, x);
    double sum_ours = 0, sum_plain = 0;
    for (size_t b = 0; b < x.size() / 256; ++b) {
      const float* xb = x.data() + b * 256;
      const std::vector<float> w = default_weights(xb);
      const double ours = weighted_sse(xb, r.y.data() + b * 256, w.data());
      const double plain = plain_sse(f, xb, w.data());
      ASSERT_LE(ours, plain * (1 + 1e-6)) << dtype_name(f.t) << " row " << b;
      for (int i = 0; i < 256; ++i)
        ASSERT_LE(std::fabs(r.y[b * 256 + size_t(i)] - xb[i]), std::sqrt(plain / w[i]) * (1 + 1e-6))
            << dtype_name(f.t) << " row " << b << " value " << i;
      // Rows of every magnitude count alike.
      const double norm = plain > 0 ? 1.0 / plain : 0.0;
      sum_ours += ours * norm;
      sum_plain += plain * norm;
    }
    const double ratio = sum_ours / sum_plain;
    std::printf("%s: weighted error / plain quantiser's = %.3f\n",
                std::string(dtype_name(f.t)).c_str(), ratio);
    EXPECT_LE(ratio, kMaxRatio[fi]) << dtype_name(f.t);
  }
}

// RMS error relative to the RMS of N(0, 1) data. The limits are llama.cpp's reference
// quantisers (quantize_row_q*_K_ref) measured on 2^20 N(0, 1) values: Q2_K 0.2966, Q3_K
// 0.1508, Q4_K 0.0714, Q5_K 0.0361, Q6_K 0.0177, plus 2% for the sample.
TEST(GgmlQuantizeK, RmsNoWorseThanLlamaCppReference) {
  const double kRefRms[] = {0.2966, 0.1508, 0.0714, 0.0361, 0.0177};
  Rng rng(33);
  std::vector<float> x(256 * 256);
  for (float& v : x) v = float(rng.normal());
  for (size_t fi = 0; fi < std::size(kFormats); ++fi) {
    const Quantised r = round_trip(kFormats[fi].t, x);
    double se = 0, ss = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      se += (double(r.y[i]) - x[i]) * (double(r.y[i]) - x[i]);
      ss += double(x[i]) * x[i];
    }
    const double rel = std::sqrt(se / ss);
    std::printf("%s: relative RMS error %.5f (llama.cpp reference %.4f)\n",
                std::string(dtype_name(kFormats[fi].t)).c_str(), rel, kRefRms[fi]);
    EXPECT_LE(rel, kRefRms[fi] * 1.02) << dtype_name(kFormats[fi].t);
  }
}

// With importance weights the quantiser minimises Σ importance · err²: on log-normal weights
// (a spread like an imatrix's) that error must drop well below what the default weights give.
TEST(GgmlQuantizeK, ImportanceSteersTheError) {
  Rng rng(34);
  std::vector<float> x(256 * 64), imp(x.size());
  for (float& v : x) v = float(rng.normal());
  for (float& v : imp) v = float(std::exp(2 * rng.normal()));
  for (const KFormat& f : kFormats) {
    const Quantised with = round_trip(f.t, x, imp), without = round_trip(f.t, x);
    double e_with = 0, e_without = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      e_with += imp[i] * (double(with.y[i]) - x[i]) * (double(with.y[i]) - x[i]);
      e_without += imp[i] * (double(without.y[i]) - x[i]) * (double(without.y[i]) - x[i]);
    }
    std::printf("%s: importance-weighted error with / without importance = %.3f\n",
                std::string(dtype_name(f.t)).c_str(), e_with / e_without);
    EXPECT_LT(e_with, 0.9 * e_without) << dtype_name(f.t);
  }
  // All-zero importance falls back to equal weights: still a sound block.
  const std::vector<float> zero(256, 0.0f);
  const std::vector<float> x1(x.begin(), x.begin() + 256);
  for (const KFormat& f : kFormats) {
    const Quantised r = round_trip(f.t, x1, zero);
    double se = 0;
    for (int i = 0; i < 256; ++i)
      se += (double(r.y[size_t(i)]) - x1[size_t(i)]) * (r.y[size_t(i)] - x1[size_t(i)]);
    EXPECT_LT(std::sqrt(se / 256), 0.5) << dtype_name(f.t);
  }
}

}  // namespace
}  // namespace mla
