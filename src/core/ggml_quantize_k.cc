// The K formats' quantiser. A super-block of 256 values is split into sub-blocks (16 or 32
// values) that each get their own scale (and, in Q2_K / Q4_K / Q5_K, a min); those are stored as
// small integers times one or two FP16 super-block scales. Four steps:
//   1. per sub-block, a float scale (and min) minimising the weighted squared error: a sweep of
//      candidate inverse scales around nmax / range, each giving codes by rounding, each refined
//      by the weighted least-squares scale (and min) for its codes, then a few rounds of
//      "re-round the codes, re-solve" from the best;
//   2. the super-block scale(s) from the largest sub-block value, and each sub-block's integer
//      scale (and min) chosen among the neighbours of its rounded float value by the error with
//      the codes recomputed (codes are always the nearest for the stored, quantised scales);
//   3. the super-block scale(s) re-solved by least squares for the chosen integers and codes,
//      kept when the block's error drops;
//   4. the plain quantiser's block (max-min or max-magnitude scales, all rounded to nearest)
//      instead, should the search end with a larger error: never worse than that baseline.
// Weights: the caller's importance (e.g. an imatrix: the mean square activation of each input,
// so the weighted error is the expected error of the layer's output), else x² plus the
// super-block's mean square. Pure x² favours the large values that dominate a dot product;
// the floor keeps the small ones from being ignored. On Gaussian data the floor lowers the plain
// RMS error by 2-8% (Q2_K most) for 1-3% more x²-weighted error.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/ggml_blocks.h"

namespace mla::ggml {
namespace {

// Round to nearest (ties to even) after clamping to [lo, hi]; v finite. Branch-free so that the
// code loops vectorise: adding 1.5 · 2^23 leaves the rounded integer in the low mantissa bits.
inline float round_clamped(float v, float lo, float hi) {
  v = std::min(std::max(v, lo), hi);
  return (v + 0x1.8p23f) - 0x1.8p23f;
}
inline int nearest(float v, int lo, int hi) {
  return int(round_clamped(v, float(lo), float(hi)));
}

// ---- Asymmetric codes: x ≈ s · q − m, q in [0, nmax], s ≥ 0, m ≥ 0 ----

struct Affine {
  float s = 0, m = 0;
};

// Weighted sums of a sub-block that every candidate shares, and those of one candidate's codes.
struct Moments {
  double sw = 0, swx = 0, swx2 = 0;
};
struct CodeSums {
  double swq = 0, swq2 = 0, swxq = 0;
};

// Codes q = round((x + m) · inv) clamped to [0, nmax], as floats, and their sums.
CodeSums affine_codes(const float* x, const float* w, int n, float m, float inv, int nmax,
                      float* q) {
  CodeSums c;
  for (int i = 0; i < n; ++i) q[i] = round_clamped((x[i] + m) * inv, 0.0f, float(nmax));
  for (int i = 0; i < n; ++i) {
    const double wq = double(w[i]) * q[i];
    c.swq += wq;
    c.swq2 += wq * q[i];
    c.swxq += wq * x[i];
  }
  return c;
}

// The weighted least-squares s and b = −m for given codes, b held at 0 when the free solution has
// b > 0 (the format's min cannot be negative), and the resulting error Σ w (s q + b − x)² in
// closed form. +inf when the codes do not determine a positive s.
double solve_affine(const Moments& mo, const CodeSums& c, Affine* out) {
  if (c.swq2 <= 0) return std::numeric_limits<double>::infinity();
  const double det = mo.sw * c.swq2 - c.swq * c.swq;
  double s = 0, b = 1;
  if (det > 1e-12 * mo.sw * c.swq2) {
    s = (mo.sw * c.swxq - mo.swx * c.swq) / det;
    b = (c.swq2 * mo.swx - c.swq * c.swxq) / det;
  }
  if (b > 0) {
    b = 0;
    s = c.swxq / c.swq2;
  }
  if (!(s > 0)) return std::numeric_limits<double>::infinity();
  out->s = float(s);
  out->m = float(-b);
  const double e = mo.swx2 + s * s * c.swq2 + b * b * mo.sw + 2 * s * b * c.swq - 2 * s * c.swxq -
                   2 * b * mo.swx;
  return std::max(e, 0.0);
}

Affine fit_affine(const float* x, const float* w, int n, int nmax) {
  float lo = x[0], hi = x[0];
  Moments mo;
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    mo.sw += w[i];
    mo.swx += double(w[i]) * x[i];
    mo.swx2 += double(w[i]) * x[i] * x[i];
  }
  lo = std::min(lo, 0.0f);
  if (hi <= lo) return {0, -lo};  // every value is lo ≤ 0: the min alone represents it
  float cand[32];
  Affine best;
  double best_err = std::numeric_limits<double>::infinity();
  // Inverse scales from (nmax − 1) / range (nothing clipped, coarser steps) to (nmax + 1) / range
  // (the extremes may clip onto the end codes, finer steps); k = 10 is the plain max-min scale.
  constexpr int kSteps = 21;
  for (int k = 0; k < kSteps; ++k) {
    const float iscale = (float(nmax) - 1.0f + 0.1f * float(k)) / (hi - lo);
    const CodeSums c = affine_codes(x, w, n, -lo, iscale, nmax, cand);
    Affine f;
    const double e = solve_affine(mo, c, &f);
    if (e < best_err) {
      best_err = e;
      best = f;
    }
  }
  // No candidate determined a scale (degenerate weights): the plain max-min fit.
  if (!(best_err < std::numeric_limits<double>::infinity())) return {(hi - lo) / float(nmax), -lo};
  for (int round = 0; round < 4; ++round) {
    const CodeSums c = affine_codes(x, w, n, best.m, 1.0f / best.s, nmax, cand);
    Affine f;
    const double e = solve_affine(mo, c, &f);
    if (!(e < best_err)) break;
    best_err = e;
    best = f;
  }
  return best;
}

// Codes for the stored scale d · ls and min dmin · lm (the products the dequantiser forms), and
// their weighted squared error.
double codes_affine(const float* x, const float* w, int n, int nmax, float d, float dmin, int ls,
                    int lm, int8_t* q) {
  const float s = d * float(ls), m = dmin * float(lm);
  const float inv = s != 0 ? 1.0f / s : 0.0f;
  float c[32];
  for (int i = 0; i < n; ++i) c[i] = round_clamped((x[i] + m) * inv, 0.0f, float(nmax));
  double e = 0;
  for (int i = 0; i < n; ++i) {
    q[i] = int8_t(c[i]);
    const float r = s * c[i] - m - x[i];
    e += double(w[i] * r * r);
  }
  return e;
}

struct AffineFormat {
  int nsub, sub, nmax, smax;  // sub-blocks, values each, largest code, largest integer scale
};

// Step 2 for given d and dmin: each sub-block's integers among those within `radius` of (target
// scale / d, target min / dmin), by the error of their codes. Fills `blk` but for dh / mh and
// returns the block's error.
double choose_affine_ints(const AffineFormat& f, const float* x, const float* w, float d,
                          float dmin, const Affine* target, int radius, KQuant* blk) {
  double total = 0;
  int8_t cand[32];
  for (int j = 0; j < f.nsub; ++j) {
    const float* xs = x + f.sub * j;
    const float* ws = w + f.sub * j;
    const int ls0 = d > 0 ? nearest(target[j].s / d, 0, f.smax) : 0;
    const int lm0 = dmin > 0 ? nearest(target[j].m / dmin, 0, f.smax) : 0;
    double best = std::numeric_limits<double>::infinity();
    for (int ls = std::max(0, ls0 - radius); ls <= std::min(f.smax, ls0 + radius); ++ls) {
      for (int lm = std::max(0, lm0 - radius); lm <= std::min(f.smax, lm0 + radius); ++lm) {
        const double e = codes_affine(xs, ws, f.sub, f.nmax, d, dmin, ls, lm, cand);
        if (e < best) {
          best = e;
          blk->ls[j] = ls;
          blk->lm[j] = lm;
          std::memcpy(blk->q + f.sub * j, cand, size_t(f.sub));
        }
      }
    }
    total += best;
  }
  return total;
}

inline bool half_finite(uint16_t h) {
  return (h & 0x7c00u) != 0x7c00u;
}

// A super-block scale as FP16, never rounded to zero when v is not: tiny blocks then keep their
// integer scales (with d = 2^-24, the smallest subnormal, they grow) instead of losing them all.
inline uint16_t scale_half(float v) {
  const uint16_t h = float_to_half(v);
  return (v != 0 && (h & 0x7fffu) == 0) ? uint16_t(h | 1u) : h;
}

// d and dmin from the largest target scale and min (the largest maps to the largest integer),
// then step 2. False when d or dmin overflows FP16.
bool affine_block(const AffineFormat& f, const float* x, const float* w, const Affine* target,
                  int radius, KQuant* blk, double* err) {
  float max_s = 0, max_m = 0;
  for (int j = 0; j < f.nsub; ++j) {
    max_s = std::max(max_s, target[j].s);
    max_m = std::max(max_m, target[j].m);
  }
  blk->dh = scale_half(max_s / float(f.smax));
  blk->mh = scale_half(max_m / float(f.smax));
  if (!half_finite(blk->dh) || !half_finite(blk->mh)) return false;
  *err = choose_affine_ints(f, x, w, half_to_float(blk->dh), half_to_float(blk->mh), target, radius,
                            blk);
  return true;
}

bool quantize_affine(const AffineFormat& f, const float* x, const float* w, KQuant* out) {
  // The plain quantiser, kept when the search does not beat it: each sub-block's scale spans
  // [min(x, 0), max(x)] in nmax steps, integers and codes rounded to nearest.
  Affine plain[16];
  for (int j = 0; j < f.nsub; ++j) {
    const float* xs = x + f.sub * j;
    const float lo = std::min(0.0f, *std::min_element(xs, xs + f.sub));
    const float hi = *std::max_element(xs, xs + f.sub);
    plain[j] = {(hi - lo) / float(f.nmax), -lo};
  }
  KQuant base;
  double base_err;
  if (!affine_block(f, x, w, plain, 0, &base, &base_err)) return false;

  Affine fit[16];
  for (int j = 0; j < f.nsub; ++j) fit[j] = fit_affine(x + f.sub * j, w + f.sub * j, f.sub, f.nmax);
  double err;
  if (!affine_block(f, x, w, fit, 1, out, &err)) err = std::numeric_limits<double>::infinity();
  // Step 3: x ≈ d · (ls q) − dmin · lm over the whole block, for the chosen integers.
  for (int round = 0; round < 2 && std::isfinite(err); ++round) {
    double saa = 0, sab = 0, sbb = 0, sax = 0, sbx = 0;
    for (int j = 0; j < f.nsub; ++j) {
      for (int i = f.sub * j; i < f.sub * (j + 1); ++i) {
        const double a = double(out->ls[j]) * out->q[i], b = out->lm[j], wi = w[i];
        saa += wi * a * a;
        sab += wi * a * b;
        sbb += wi * b * b;
        sax += wi * a * x[i];
        sbx += wi * b * x[i];
      }
    }
    // Minimise Σ w (d a − m b − x)²: [saa −sab; −sab sbb] [d; m] = [sax; −sbx].
    const double det = saa * sbb - sab * sab;
    double d, m;
    if (sbb > 0 && det > 1e-12 * saa * sbb) {
      d = (sax * sbb - sab * sbx) / det;
      m = (sab * sax - saa * sbx) / det;
    } else if (saa > 0) {
      d = sax / saa;
      m = half_to_float(out->mh);
    } else {
      break;
    }
    if (!(d > 0) || m < 0) break;
    KQuant trial;
    trial.dh = scale_half(float(d));
    trial.mh = scale_half(float(m));
    if (!half_finite(trial.dh) || !half_finite(trial.mh)) break;
    if (trial.dh == out->dh && trial.mh == out->mh) break;
    Affine target[16];
    for (int j = 0; j < f.nsub; ++j)
      target[j] = {half_to_float(out->dh) * float(out->ls[j]),
                   half_to_float(out->mh) * float(out->lm[j])};
    const double e = choose_affine_ints(f, x, w, half_to_float(trial.dh), half_to_float(trial.mh),
                                        target, 1, &trial);
    if (!(e < err)) break;
    err = e;
    *out = trial;
  }
  if (!(err <= base_err)) *out = base;
  return true;
}

// ---- Symmetric codes: x ≈ s · q, q in [−nneg, nneg − 1] ----

// The scale maximising (Σ w x q)² / Σ w q², i.e. minimising the error Σ w x² − that, over codes
// from a sweep of inverse scales that send the largest magnitude to −nneg (using the extra
// negative code) or to nneg − 1, then re-rounding from the best.
float fit_symmetric(const float* x, const float* w, int n, int nneg) {
  float amax = 0, vmax = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      vmax = x[i];
    }
  }
  if (amax == 0) return 0;
  double best_num = 0, best_den = 1, best_sxq = 0;
  auto consider = [&](float iscale) {
    float c[32];
    for (int i = 0; i < n; ++i) c[i] = round_clamped(x[i] * iscale, -float(nneg), float(nneg - 1));
    double sxq = 0, sq2 = 0;
    for (int i = 0; i < n; ++i) {
      const double wc = double(w[i]) * c[i];
      sxq += wc * x[i];
      sq2 += wc * c[i];
    }
    if (!(sq2 > 0 && sxq * sxq * best_den > best_num * sq2)) return false;
    best_num = sxq * sxq;
    best_den = sq2;
    best_sxq = sxq;
    return true;
  };
  for (int k = -9; k <= 9; ++k) {
    consider(-(float(nneg) + 0.1f * float(k)) / vmax);
    consider((float(nneg) - 1.0f + 0.1f * float(k)) / vmax);
  }
  if (best_num == 0) return 0;
  for (int round = 0; round < 4; ++round)
    if (!consider(float(best_den / best_sxq))) break;
  return float(best_sxq / best_den);
}

double codes_symmetric(const float* x, const float* w, int n, int nneg, float d, int ls,
                       int8_t* q) {
  const float s = d * float(ls);
  const float inv = s != 0 ? 1.0f / s : 0.0f;
  float c[32];
  for (int i = 0; i < n; ++i) c[i] = round_clamped(x[i] * inv, -float(nneg), float(nneg - 1));
  double e = 0;
  for (int i = 0; i < n; ++i) {
    q[i] = int8_t(c[i]);
    const float r = s * c[i] - x[i];
    e += double(w[i] * r * r);
  }
  return e;
}

struct SymmetricFormat {
  int nsub, sub, nneg, sneg;  // codes in [−nneg, nneg − 1], integer scales in [−sneg, sneg − 1]
};

double choose_symmetric_ints(const SymmetricFormat& f, const float* x, const float* w, float d,
                             const float* target, int radius, KQuant* blk) {
  double total = 0;
  int8_t cand[32];
  for (int j = 0; j < f.nsub; ++j) {
    const float* xs = x + f.sub * j;
    const float* ws = w + f.sub * j;
    const int ls0 = d != 0 ? nearest(target[j] / d, -f.sneg, f.sneg - 1) : 0;
    double best = std::numeric_limits<double>::infinity();
    for (int ls = std::max(-f.sneg, ls0 - radius); ls <= std::min(f.sneg - 1, ls0 + radius); ++ls) {
      const double e = codes_symmetric(xs, ws, f.sub, f.nneg, d, ls, cand);
      if (e < best) {
        best = e;
        blk->ls[j] = ls;
        std::memcpy(blk->q + f.sub * j, cand, size_t(f.sub));
      }
    }
    total += best;
  }
  return total;
}

// d from the target scale of largest magnitude, which maps to the extra negative integer −sneg;
// then step 2. False when d overflows FP16.
bool symmetric_block(const SymmetricFormat& f, const float* x, const float* w, const float* target,
                     int radius, KQuant* blk, double* err) {
  float amax = 0, smax = 0;
  for (int j = 0; j < f.nsub; ++j) {
    if (std::fabs(target[j]) > amax) {
      amax = std::fabs(target[j]);
      smax = target[j];
    }
  }
  blk->dh = scale_half(smax / -float(f.sneg));
  if (!half_finite(blk->dh)) return false;
  *err = choose_symmetric_ints(f, x, w, half_to_float(blk->dh), target, radius, blk);
  return true;
}

bool quantize_symmetric(const SymmetricFormat& f, const float* x, const float* w, KQuant* out) {
  // The plain quantiser, kept when the search does not beat it: each sub-block's value of
  // largest magnitude maps to code −nneg, integers and codes rounded to nearest.
  float plain[16];
  for (int j = 0; j < f.nsub; ++j) {
    float amax = 0, vmax = 0;
    for (int i = f.sub * j; i < f.sub * (j + 1); ++i) {
      if (std::fabs(x[i]) > amax) {
        amax = std::fabs(x[i]);
        vmax = x[i];
      }
    }
    plain[j] = vmax / -float(f.nneg);
  }
  KQuant base;
  double base_err;
  if (!symmetric_block(f, x, w, plain, 0, &base, &base_err)) return false;

  float s[16];
  for (int j = 0; j < f.nsub; ++j)
    s[j] = fit_symmetric(x + f.sub * j, w + f.sub * j, f.sub, f.nneg);
  double err;
  if (!symmetric_block(f, x, w, s, 1, out, &err)) err = std::numeric_limits<double>::infinity();
  // Step 3: x ≈ d · (ls q) over the whole block, for the chosen integers.
  for (int round = 0; round < 2 && std::isfinite(err); ++round) {
    double saa = 0, sax = 0;
    for (int j = 0; j < f.nsub; ++j) {
      for (int i = f.sub * j; i < f.sub * (j + 1); ++i) {
        const double a = double(out->ls[j]) * out->q[i];
        saa += w[i] * a * a;
        sax += w[i] * a * x[i];
      }
    }
    if (!(saa > 0)) break;
    KQuant trial;
    trial.dh = scale_half(float(sax / saa));
    if (!half_finite(trial.dh) || trial.dh == out->dh) break;
    float target[16];
    for (int j = 0; j < f.nsub; ++j) target[j] = half_to_float(out->dh) * float(out->ls[j]);
    const double e = choose_symmetric_ints(f, x, w, half_to_float(trial.dh), target, 1, &trial);
    if (!(e < err)) break;
    err = e;
    *out = trial;
  }
  if (!(err <= base_err)) *out = base;
  return true;
}

}  // namespace

bool search_k_block(DType t, const float* x, const float* w, KQuant* out) {
  switch (t) {
    case DType::kQ2_K:
      return quantize_affine({16, 16, 3, 15}, x, w, out);
    case DType::kQ3_K:
      return quantize_symmetric({16, 16, 4, 32}, x, w, out);
    case DType::kQ4_K:
      return quantize_affine({8, 32, 15, 63}, x, w, out);
    case DType::kQ5_K:
      return quantize_affine({8, 32, 31, 63}, x, w, out);
    case DType::kQ6_K:
      return quantize_symmetric({16, 16, 32, 128}, x, w, out);
    default:
      return false;
  }
}

}  // namespace mla::ggml
