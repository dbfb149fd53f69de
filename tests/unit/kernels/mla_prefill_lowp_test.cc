// The decompressed prefill's BF16 tiles (MlaPrefillParams::attention_dtype BF16 on an AVX512_BF16
// CPU: kernels/cpu/mla_prefill_tile_bf16.h) and int8 tiles (I8 on AVX512_VNNI:
// mla_prefill_tile_int8.h) against an FP64 evaluation of the same attention, with a bound derived
// from the roundings each path makes (u = 2^-8, BF16's unit roundoff under round-to-nearest-even;
// g = 2^-24 per FP32 operation of an accumulation):
//   k_nope, v:  W_UK, W_UV rounded to BF16 in the GEMM (the latent is BF16 already), summed in
//               FP32: |Δk_tn| ≤ (2u + u² + r·g) · Σ_c |W_nc c_tc| (both tiles); the BF16 tiles
//               then round the result to BF16 (u |k|)
//   q, k_pe:    BF16: rounded (u |q|, u |k_pe|)
//   score s_t:  BF16: |Δs_t| ≤ scale · [(3u + 2u² + (r + d_qk)·g) Σ_n |q_n| K_t,n + (2u + d_qk·g)
//               Σ |q_pe k_pe|]
//               int8: per part (nope, pe) of a query row and of a key, codes rne(x / s) with
//               s = amax / 127, so |Δx| ≤ s (1/2 + 2^-16) (the 2^-16 covers x · (1/s) in FP32)
//               beside k's up-projection error; integer sums exact; the part's scaling 4 g:
//               |Δs_t| ≤ scale · Σ_parts Σ_n (|q_n| δk_n + |k_n| δq + δq δk_n + 4g |q̃_n k̃_n|)
//   softmax:    p̂_t / p_t ∈ [e^(−2Δ), e^(2Δ)], Δ = max_t |Δs_t| (then 4 g for exp, max and sum);
//               BF16: each probability rounded for P·V: (1 + u); int8: p · 255 rounded to an
//               integer, in units of the step's running maximum, which is at most the final one,
//               so |Δp_t| ≤ ε_p = (1/510 + 2^-22) e^(2Δ) (1 + 4g) · max_t p_t
//   out_c:      |Δo_c| ≤ Σ_t p_t [(e^(2Δ)(1 + u)(1 + 4g) − 1)(|v_tc| + δv_tc) + δv_tc]
//               + s_kv·g Σ p|v| (BF16, δv_tc = (2u + u² + r·g) Σ_c |W_UV c_tc|), and for int8
//               δv_tc adds s_c (1/2 + 2^-16) with s_c = amax over the chunk of channel c / 127
//               (bounded here by the amax over every token), u = 0 in the growth term, plus
//               ε_p Σ_t (|v_tc| + δv_tc) and 4g more per term for the channel scale.
// with K_t,n = Σ_c |W_UK,nc c_tc|. The FP32 tiles (attention_dtype F32) must stay within the FP32
// part of the same bound (u = 0).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "kernels/mla_problem.h"
#include "prefill_test_run.h"

namespace mla {
namespace {

using Case = test::PrefillShape;

constexpr Case kCases[] = {Case{}, Case{2, 128, 64, 128, 512, 33, 300, 64},
                           Case{2, 32, 16, 32, 64, 300, 300, 16}};

struct Worst {
  double ratio = 0;  // max over outputs of |got − exact| / bound (≤ 1 passes)
  double error = 0;  // max |got − exact|
};

// The run with attention_dtype `math` (F32, BF16 or I8) against its bound.
Worst worst_ratio(const Case& k, DType math) {
  const bool int8 = math == DType::kI8;
  const double u = math == DType::kF32 ? 0.0 : 0x1p-8;
  Rng rng(11 + uint64_t(k.s_q));
  const int s_kv = k.s_q + k.prior, d_qk = k.d_n + k.d_r;
  const PagedCache cache = make_paged_cache(rng, DType::kBF16, {s_kv}, k.page, k.r, k.d_r, 1.0);
  // Parts and channels of unlike sizes, so that a scale applied to the wrong part of a query or
  // key, or to the wrong channel of V, shows: q_pe an eighth of q_nope, and the rows of W_UK and
  // W_UV (the channels of k_nope and v) scaled by 2^-2 .. 2^2 in turn (BF16 values stay exact).
  std::vector<float> q(size_t(k.s_q) * k.h * d_qk);
  for (size_t i = 0; i < q.size(); ++i)
    q[i] = float(rng.normal()) * (int(i % d_qk) >= k.d_n ? 0.125f : 1.0f);
  auto weights = [&](int64_t n) {
    std::vector<float> w(static_cast<size_t>(n));
    for (size_t i = 0; i < w.size(); ++i)
      w[i] = round_to_bf16(float(rng.normal() / std::sqrt(double(k.r)))) *
             std::ldexp(1.0f, int(i / k.r % 5) - 2);
    return w;
  };
  const std::vector<float> w_uk = weights(int64_t(k.h) * k.d_n * k.r);
  const std::vector<float> w_uv = weights(int64_t(k.h) * k.d_v * k.r);
  const std::vector<float> out = test::run_cpu_prefill(k, cache, q, w_uk, w_uv, math);
  const float softmax_scale = test::prefill_softmax_scale(k);

  // The latent rows in FP64, then K, V and their absolute sums per head.
  std::vector<double> c(size_t(s_kv) * k.r), kpe(size_t(s_kv) * k.d_r);
  for (int t = 0; t < s_kv; ++t) {
    const int64_t slot = int64_t(cache.block_table[t / k.page]) * k.page + t % k.page;
    const uint16_t* row =
        reinterpret_cast<const uint16_t*>(cache.data.data() + slot * cache.row_bytes);
    for (int j = 0; j < k.r; ++j) c[size_t(t) * k.r + j] = bf16_to_f32(row[j]);
    for (int j = 0; j < k.d_r; ++j) kpe[size_t(t) * k.d_r + j] = bf16_to_f32(row[k.r + j]);
  }
  const double g = 0x1p-24, u_w = 2 * u + u * u + k.r * g;
  Worst worst;
  std::vector<double> kn(size_t(s_kv) * k.d_n), ka(kn.size()), vv(size_t(s_kv) * k.d_v),
      va(vv.size()), s(s_kv), ds(s_kv);
  // int8: an amax / 127 scale's quantisation error, s (1/2 + 2^-16), from an amax bounded above.
  const double q_err = 0.5 + 0x1p-16, s_up = (1 + 0x1p-20) / 127;
  for (int h = 0; h < k.h; ++h) {
    double dk_up = 0, dv_up = 0;  // the largest up-projection errors of the head
    for (int t = 0; t < s_kv; ++t) {
      auto up = [&](const std::vector<float>& w, int d, int n, double& val, double& abs) {
        val = abs = 0;
        for (int j = 0; j < k.r; ++j) {
          const double x = double(w[(size_t(h) * d + n) * k.r + j]) * c[size_t(t) * k.r + j];
          val += x;
          abs += std::abs(x);
        }
      };
      for (int n = 0; n < k.d_n; ++n) {
        up(w_uk, k.d_n, n, kn[size_t(t) * k.d_n + n], ka[size_t(t) * k.d_n + n]);
        dk_up = std::max(dk_up, u_w * ka[size_t(t) * k.d_n + n]);
      }
      for (int n = 0; n < k.d_v; ++n) {
        up(w_uv, k.d_v, n, vv[size_t(t) * k.d_v + n], va[size_t(t) * k.d_v + n]);
        dv_up = std::max(dv_up, u_w * va[size_t(t) * k.d_v + n]);
      }
    }
    // int8 V: channel c's scale bound over every token (each chunk's amax is at most this).
    std::vector<double> sv(k.d_v, 0.0);
    for (int t = 0; t < s_kv; ++t)
      for (int ch = 0; ch < k.d_v; ++ch)
        sv[ch] = std::max(sv[ch], std::abs(vv[size_t(t) * k.d_v + ch]));
    for (double& x : sv) x = (x + dv_up) * s_up;
    auto amax = [](const double* x, int n) {
      double a = 0;
      for (int i = 0; i < n; ++i) a = std::max(a, std::abs(x[i]));
      return a;
    };
    for (int i = 0; i < k.s_q; ++i) {
      const float* qi = q.data() + (size_t(i) * k.h + h) * d_qk;
      std::vector<double> qd(qi, qi + d_qk);
      const double dq_n = amax(qd.data(), k.d_n) * s_up * q_err,
                   dq_r = amax(qd.data() + k.d_n, k.d_r) * s_up * q_err;
      const int vis = s_kv - k.s_q + i + 1;
      double mx = -1e300, delta = 0;
      for (int t = 0; t < vis; ++t) {
        const double* kt = kn.data() + size_t(t) * k.d_n;
        const double* pt = kpe.data() + size_t(t) * k.d_r;
        const double dk_n = (amax(kt, k.d_n) + dk_up) * s_up * q_err,
                     dk_r = amax(pt, k.d_r) * s_up * q_err;
        double dot = 0, nope_abs = 0, pe_abs = 0, int8_err = 0;
        for (int n = 0; n < k.d_n; ++n) {
          dot += qd[n] * kt[n];
          nope_abs += std::abs(qd[n]) * ka[size_t(t) * k.d_n + n];
          const double dk = u_w * ka[size_t(t) * k.d_n + n] + dk_n;
          int8_err += std::abs(qd[n]) * dk + std::abs(kt[n]) * dq_n + dq_n * dk +
                      4 * g * (std::abs(qd[n]) + dq_n) * (std::abs(kt[n]) + dk);
        }
        for (int j = 0; j < k.d_r; ++j) {
          const double qj = qd[k.d_n + j];
          dot += qj * pt[j];
          pe_abs += std::abs(qj * pt[j]);
          int8_err += std::abs(qj) * dk_r + std::abs(pt[j]) * dq_r + dq_r * dk_r +
                      4 * g * (std::abs(qj) + dq_r) * (std::abs(pt[j]) + dk_r);
        }
        s[t] = dot * softmax_scale;
        ds[t] = int8 ? softmax_scale * (int8_err + g * std::abs(dot))
                     : softmax_scale * ((3 * u + 2 * u * u + (k.r + d_qk) * g) * nope_abs +
                                        (2 * u + d_qk * g) * pe_abs);
        mx = std::max(mx, s[t]);
        delta = std::max(delta, ds[t]);
      }
      double l = 0;
      for (int t = 0; t < vis; ++t) l += std::exp(s[t] - mx);
      const double grow = std::exp(2 * delta) * (1 + (int8 ? 0 : u)) * (1 + 4 * g) - 1;
      const double eps_p =
          int8 ? (1.0 / 510 + 0x1p-22) * std::exp(2 * delta) * (1 + 4 * g) / l : 0.0;
      for (int ch = 0; ch < k.d_v; ++ch) {
        double o = 0, bound = 0;
        for (int t = 0; t < vis; ++t) {
          const double pt = std::exp(s[t] - mx) / l, vt = vv[size_t(t) * k.d_v + ch];
          const double dv = u_w * va[size_t(t) * k.d_v + ch] + (int8 ? sv[ch] * q_err : 0.0);
          const double mag = std::abs(vt) + dv;
          o += pt * vt;
          bound += pt * (grow * mag + dv + (s_kv + (int8 ? 4 : 0)) * g * mag) + eps_p * mag;
        }
        const double got = out[(size_t(i) * k.h + h) * k.d_v + ch];
        worst.ratio = std::max(worst.ratio, std::abs(got - o) / bound);
        worst.error = std::max(worst.error, std::abs(got - o));
      }
    }
  }
  return worst;
}

TEST(MlaPrefillBf16, WithinTheDerivedBound) {
  if (!cpu_supports(CpuIsa::kAvx512Bf16)) GTEST_SKIP() << "no AVX512_BF16 on this CPU";
  // V2-Lite / V3 head dims (d_n 128, d_r 64, d_v 128, r 512) and small ones; 300 queries over
  // 300 cached tokens: three row blocks, the first of which sees 428 keys of the first 512-token
  // chunk (a softmax step cut inside a 64-key tile) and none of the second.
  for (const Case& k : kCases) {
    const Worst bf16 = worst_ratio(k, DType::kBF16), f32 = worst_ratio(k, DType::kF32);
    EXPECT_LE(bf16.ratio, 1.0) << "d_n " << k.d_n;
    EXPECT_LE(f32.ratio, 1.0) << "d_n " << k.d_n;
    // The BF16 tiles ran: errors of BF16 roundings (2^-8), not of FP32 ones (2^-24).
    EXPECT_GT(bf16.error, 64 * f32.error) << "d_n " << k.d_n;
  }
}

TEST(MlaPrefillInt8, WithinTheDerivedBound) {
  if (!cpu_supports(CpuIsa::kAvx512Bf16) || !__builtin_cpu_supports("avx512vnni"))
    GTEST_SKIP() << "no AVX512_VNNI and AVX512_BF16 on this CPU";
  for (const Case& k : kCases) {
    const Worst int8 = worst_ratio(k, DType::kI8), bf16 = worst_ratio(k, DType::kBF16);
    EXPECT_LE(int8.ratio, 1.0) << "d_n " << k.d_n;
    // The int8 tiles ran: a row part's amax / 254 is several times a BF16 rounding of its
    // typical values (normal inputs: amax ≈ 3 σ against σ · 2^-9).
    EXPECT_GT(int8.error, 2 * bf16.error) << "d_n " << k.d_n;
  }
}

}  // namespace
}  // namespace mla
