// The int8 tiles of the decompressed prefill (kernels/cpu/mla_prefill_tile_int8.h) against the
// quantised arithmetic they implement, evaluated here in FP64 from the same codes. Inputs are
// chosen so that every code is determined: the latent holds multiples of 1/4 (|c| ≤ 1) and
// W_UK / W_UV small multiples of 2^-5 (≤ 12 · 2^-5), so each product is a multiple of 2^-7 and
// every sum of 512 of them (|Σ| < 2^10) is exact in FP32 whatever the GEMM's order: k_nope and v
// are known exactly, and so are their codes. The query's codes and every score are then
// reproduced bit for bit with the kernel's FP32 operations (scale a / 127, 1 / scale, the product
// rounded to the nearest integer; the score fl(fl(s_q s_k) · Σ) with the k_pe part added by one
// fused multiply-add, times the softmax scale). What is left, and bounded per output:
//   - exp: the tiles' vector exp is within 16 g of e^x (g = 2^-24: the range reduction and a
//     degree-7 Horner polynomial, each step one FP32 rounding near 1), in each probability and
//     each running-maximum correction (one a chunk);
//   - a probability's code rne(p · 255) is exact unless p · 255 lies within 255 p (16 g + 2 g) of
//     a half-integer; such a code may be either neighbour, one step of 1/255 in the units of its
//     chunk's running maximum;
//   - FP32 sums: the l of a row (s_kv g relative), O's rescaling and scaling (6 g a chunk).
// A wrong scale, code, correction or layout moves an output by far more than these.
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

constexpr int kChunk = 512;  // the driver's context chunk = the int8 tiles' softmax step
constexpr double g = 0x1p-24;

// The kernel's quantiser: codes of x[0, d) and the scale, in FP32 as the tiles compute them.
float quantise(const float* x, int d, int* codes) {
  float a = 0;
  for (int i = 0; i < d; ++i) a = std::max(a, std::abs(x[i]));
  const float s = a / 127.0f, inv = a > 0 ? 1.0f / s : 0.0f;
  for (int i = 0; i < d; ++i) {
    const float y = x[i] * inv;
    codes[i] = std::clamp(int(std::nearbyint(y)), -127, 127);
  }
  return s;
}

using Shape = test::PrefillShape;

// max over outputs of |got − emulated| / bound.
double worst_ratio(const Shape& k) {
  Rng rng(5 + uint64_t(k.prior));
  const int s_kv = k.s_q + k.prior, d_qk = k.d_n + k.d_r;
  PagedCache cache = make_paged_cache(rng, DType::kBF16, {s_kv}, k.page, k.r, k.d_r, 1.0);
  std::vector<float> c(size_t(s_kv) * k.r), kpe(size_t(s_kv) * k.d_r);
  for (int t = 0; t < s_kv; ++t) {
    const int64_t slot = int64_t(cache.block_table[t / k.page]) * k.page + t % k.page;
    uint16_t* row = reinterpret_cast<uint16_t*>(cache.data.data() + slot * cache.row_bytes);
    for (int j = 0; j < k.r; ++j) {
      c[size_t(t) * k.r + j] = float(int(rng.uniform() * 9) - 4) / 4;
      row[j] = f32_to_bf16(c[size_t(t) * k.r + j]);
    }
    for (int j = 0; j < k.d_r; ++j) kpe[size_t(t) * k.d_r + j] = bf16_to_f32(row[k.r + j]);
  }
  // Channels of unlike sizes (factors 1 .. 4 by row), q_pe an eighth of q_nope.
  auto weights = [&](int rows) {
    std::vector<float> w(size_t(rows) * k.r);
    for (size_t i = 0; i < w.size(); ++i)
      w[i] = float(int(rng.uniform() * 7) - 3) * float(1 << (i / k.r % 3)) / 32;
    return w;
  };
  const std::vector<float> w_uk = weights(k.h * k.d_n), w_uv = weights(k.h * k.d_v);
  std::vector<float> q(size_t(k.s_q) * k.h * d_qk);
  for (size_t i = 0; i < q.size(); ++i)
    q[i] = float(rng.normal()) * (int(i % d_qk) >= k.d_n ? 0.125f : 1.0f);

  const std::vector<float> out = test::run_cpu_prefill(k, cache, q, w_uk, w_uv, DType::kI8);
  const float softmax_scale = test::prefill_softmax_scale(k);

  double worst = 0;
  const int chunks = (s_kv + kChunk - 1) / kChunk;
  const double eps_exp = 16 * g;
  std::vector<int> codes(std::max(d_qk, kChunk));
  for (int h = 0; h < k.h; ++h) {
    // Exact K (k_nope | k_pe) and V of the head, their codes and scales.
    std::vector<int> kc(size_t(s_kv) * d_qk), vc(size_t(s_kv) * k.d_v);
    std::vector<float> ks(size_t(s_kv) * 2), vs(size_t(chunks) * k.d_v);
    std::vector<float> kt(d_qk), vcol(kChunk);
    for (int t = 0; t < s_kv; ++t) {
      for (int n = 0; n < k.d_n; ++n) {
        double x = 0;
        for (int j = 0; j < k.r; ++j)
          x += double(w_uk[(size_t(h) * k.d_n + n) * k.r + j]) * c[size_t(t) * k.r + j];
        kt[n] = float(x);
      }
      std::copy_n(kpe.data() + size_t(t) * k.d_r, k.d_r, kt.data() + k.d_n);
      ks[2 * t] = quantise(kt.data(), k.d_n, &kc[size_t(t) * d_qk]);
      ks[2 * t + 1] = quantise(kt.data() + k.d_n, k.d_r, &kc[size_t(t) * d_qk + k.d_n]);
    }
    for (int ci = 0; ci < chunks; ++ci) {
      const int t0 = ci * kChunk, n = std::min(kChunk, s_kv - t0);
      for (int ch = 0; ch < k.d_v; ++ch) {
        for (int t = 0; t < n; ++t) {
          double x = 0;
          for (int j = 0; j < k.r; ++j)
            x += double(w_uv[(size_t(h) * k.d_v + ch) * k.r + j]) * c[size_t(t0 + t) * k.r + j];
          vcol[t] = float(x);
        }
        vs[size_t(ci) * k.d_v + ch] = quantise(vcol.data(), n, codes.data());
        for (int t = 0; t < n; ++t) vc[size_t(t0 + t) * k.d_v + ch] = codes[t];
      }
    }
    for (int i = 0; i < k.s_q; ++i) {
      const float* qi = q.data() + (size_t(i) * k.h + h) * d_qk;
      std::vector<int> qc(d_qk);
      const float sq_n = quantise(qi, k.d_n, qc.data()),
                  sq_r = quantise(qi + k.d_n, k.d_r, qc.data() + k.d_n);
      const int vis = s_kv - k.s_q + i + 1;
      std::vector<float> s(vis);
      for (int t = 0; t < vis; ++t) {
        int64_t dn = 0, dr = 0;
        for (int n = 0; n < k.d_n; ++n) dn += int64_t(qc[n]) * kc[size_t(t) * d_qk + n];
        for (int n = k.d_n; n < d_qk; ++n) dr += int64_t(qc[n]) * kc[size_t(t) * d_qk + n];
        const float part = float(dn) * (sq_n * ks[2 * t]);
        s[t] = std::fma(float(dr), sq_r * ks[2 * t + 1], part) * softmax_scale;
      }
      // The running maximum after each chunk, and the weight each chunk's sums end with: the
      // product of the later chunks' corrections exp(fl(m_old − m_new)) (FP32 differences).
      std::vector<float> m_at(chunks);
      float m = -INFINITY;
      for (int ci = 0; ci < chunks; ++ci) {
        for (int t = ci * kChunk; t < std::min(vis, (ci + 1) * kChunk); ++t) m = std::max(m, s[t]);
        m_at[ci] = m;
      }
      std::vector<double> w_at(chunks, 1.0);
      for (int ci = chunks - 2; ci >= 0; --ci)
        w_at[ci] =
            std::isinf(m_at[ci]) ? 0.0 : w_at[ci + 1] * std::exp(double(m_at[ci] - m_at[ci + 1]));
      // p of key t in its chunk's units: exp(fl(s_t − m)), as the tiles subtract.
      auto p_of = [&](int t) { return std::exp(double(s[t] - m_at[t / kChunk])); };
      double l = 0;
      for (int t = 0; t < vis; ++t) l += w_at[t / kChunk] * p_of(t);
      for (int ch = 0; ch < k.d_v; ++ch) {
        double o = 0, amb = 0, mag = 0;
        for (int t = 0; t < vis; ++t) {
          const int ci = t / kChunk;
          const double pe = p_of(t), y = pe * 255, w = w_at[ci];
          const double vt = double(vc[size_t(t) * k.d_v + ch]) * vs[size_t(ci) * k.d_v + ch];
          o += w * std::nearbyint(y) / 255 * vt;
          mag += w * (std::nearbyint(y) + 1) / 255 * std::abs(vt);
          const double frac = y - std::floor(y);
          if (std::abs(frac - 0.5) <= y * (eps_exp + 2 * g) + 2 * g) amb += w / 255 * std::abs(vt);
        }
        const double want = o / l;
        const double bound = (amb + (chunks + 2) * eps_exp * mag + 6 * chunks * g * mag) / l +
                             std::abs(want) * ((s_kv + 4) * g + (chunks + 2) * eps_exp) + 1e-30;
        const double got = out[(size_t(i) * k.h + h) * k.d_v + ch];
        worst = std::max(worst, std::abs(got - want) / bound);
      }
    }
  }
  return worst;
}

TEST(MlaPrefillInt8, MatchesItsQuantisedArithmetic) {
  if (!cpu_supports(CpuIsa::kAvx512) || !__builtin_cpu_supports("avx512vnni"))
    GTEST_SKIP() << "no AVX512_VNNI on this CPU";
  // V2-Lite / V3 head dims over two context chunks (a row block cut inside one); small dims with
  // an odd count of rows and keys; 16 query rows (one lane vector).
  for (const Shape& k :
       {Shape{2, 128, 64, 128, 512, 150, 420, 64}, Shape{3, 32, 16, 48, 64, 37, 29, 16},
        Shape{2, 64, 32, 64, 128, 16, 0, 16}})
    EXPECT_LE(worst_ratio(k), 1.0) << "d_n " << k.d_n << " s_q " << k.s_q;
}

}  // namespace
}  // namespace mla
