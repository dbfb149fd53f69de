// The int8 decode over an INT8 cache (kernels/cpu/decode_tile_int8.h) against the quantised
// arithmetic it implements, evaluated here in FP64 from the same codes. The keys are the
// cache's own codes and scales (k_pe its BF16 values); the query's codes are reproduced bit for
// bit with the kernel's FP32 operations (scale a / 127 per 128-channel block, 1 / scale, the
// product rounded to the nearest integer) and q_pe's BF16 rounding. What is left, and bounded per
// output (g = 2^-24):
//   - each score's FP32 evaluation: per block a scale product and a fused add ((nblk + 2) g of
//     Σ_j |term_j|), q_pe · k_pe on vdpbf16ps (two roundings a channel pair: d_r g of Σ |terms|),
//     the softmax scale and the running maximum (2 g each): δ_t in the exponent;
//   - exp within 16 g (the tiles' vector exp), in each probability and each tile's correction;
//   - a probability's code rne(p · ks · 255 / mx) is exact unless that value lies within its
//     relative uncertainty (ρ: twice the worst δ and exp error, and the FP32 products) of a
//     half-integer; such a code may be either neighbour, one step of mx / 255;
//   - FP32 sums and rescalings of O and l, and the merge of key ranges split across threads.
// A wrong scale, code, correction, channel order or layout moves an output by far more.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/kv_format.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "kernels/mla_problem.h"
#include "kernels/registry.h"

namespace mla {
namespace {

constexpr double g = 0x1p-24;
constexpr int kTileKeys = 64;  // the decode driver's tile: one online-softmax step

// The kernel's quantiser: codes of x[0, d) and the scale, in FP32 as the tile computes them.
float quantise(const float* x, int d, int* codes) {
  float a = 0;
  for (int i = 0; i < d; ++i) a = std::max(a, std::abs(x[i]));
  const float s = a / 127.0f, inv = a > 0 ? 1.0f / s : 0.0f;
  for (int i = 0; i < d; ++i) codes[i] = std::clamp(int(std::nearbyint(x[i] * inv)), -127, 127);
  return s;
}

struct Shape {
  int b, s_q, h, r, d_r, s_kv;
  DType kv = DType::kI8;  // or kBF16: its rows quantised per tile by the kernel's rule
};

// The variant runs on AVX512_VNNI + AVX512_BF16 CPUs without AMX (which decline it for their
// BF16 tiles).
bool int8_decode_available() {
  return cpu_supports(CpuIsa::kAvx512Bf16) && __builtin_cpu_supports("avx512vnni") &&
         !cpu_supports(CpuIsa::kAmxBf16);
}

// max over outputs of |got − emulated| / bound; `variant` the name that ran.
double worst_ratio(const Shape& k, std::string* variant) {
  Rng rng(11 + uint64_t(k.s_kv));
  const int d_qk = k.r + k.d_r, nblk = (k.r + kFp8ScaleBlock - 1) / kFp8ScaleBlock;
  std::vector<int32_t> lens(k.b);
  for (int b = 0; b < k.b; ++b) lens[b] = k.s_kv - 37 * b;  // unlike lengths, ragged tiles
  const PagedCache cache = make_paged_cache(rng, k.kv, lens, 64, k.r, k.d_r, 1.0);
  const KvRecordLayout lay = kv_record_layout(KvCacheDtype::kINT8, k.r, k.d_r);
  const int rows = k.s_q * k.h;
  std::vector<float> q(size_t(k.b) * rows * d_qk);
  for (size_t i = 0; i < q.size(); ++i)
    q[i] = float(rng.normal()) * (int(i % d_qk) >= k.r ? 0.125f : 1.0f);
  std::vector<float> out(size_t(k.b) * rows * k.r), lse(size_t(k.b) * rows);
  MlaDecodeParams p;
  set_decode_cache(cache, p);
  p.s_q = k.s_q;
  p.h_q = k.h;
  p.d_qk = d_qk;
  p.d_v = k.r;
  p.q_dtype = DType::kF32;
  p.q = q.data();
  p.softmax_scale = float(1.0 / std::sqrt(192.0));
  p.causal = true;
  p.out = out.data();
  p.lse = lse.data();
  p.int8_products = true;
  EXPECT_TRUE(validate(p).ok());
  auto v = select_variant(p, "cpu");
  EXPECT_TRUE(v.ok());
  if (!v.ok()) return INFINITY;
  *variant = (*v)->name;
  ThreadPool pool(2);
  (*v)->run(p, pool);

  double worst = 0;
  std::vector<int> qc(k.r);
  for (int b = 0; b < k.b; ++b) {
    const int s_kv = lens[b], tiles = (s_kv + kTileKeys - 1) / kTileKeys;
    // The sequence's keys: codes, block scales and k_pe, from the records.
    std::vector<int> kc(size_t(s_kv) * k.r);
    std::vector<double> ks(size_t(s_kv) * nblk), kpe(size_t(s_kv) * k.d_r);
    for (int t = 0; t < s_kv; ++t) {
      const int64_t slot =
          int64_t(cache.block_table[size_t(b) * cache.max_blocks + t / 64]) * 64 + t % 64;
      const uint8_t* rec = cache.data.data() + slot * cache.row_bytes;
      if (k.kv == DType::kBF16) {
        std::vector<float> x(k.r);
        for (int c = 0; c < k.r; ++c) {
          uint16_t h;
          std::memcpy(&h, rec + 2 * c, 2);
          x[c] = bf16_to_f32(h);
        }
        for (int j = 0; j < nblk; ++j) {
          const int c0 = j * kFp8ScaleBlock;
          ks[size_t(t) * nblk + j] = quantise(x.data() + c0, std::min(kFp8ScaleBlock, k.r - c0),
                                              kc.data() + size_t(t) * k.r + c0);
        }
        for (int c = 0; c < k.d_r; ++c) {
          uint16_t h;
          std::memcpy(&h, rec + 2 * (k.r + c), 2);
          kpe[size_t(t) * k.d_r + c] = bf16_to_f32(h);
        }
        continue;
      }
      for (int c = 0; c < k.r; ++c)
        kc[size_t(t) * k.r + c] = int8_t(rec[lay.latent_offset_bytes + c]);
      for (int j = 0; j < nblk; ++j) {
        float s;
        std::memcpy(&s, rec + lay.scale_offset_bytes + 4 * j, 4);
        ks[size_t(t) * nblk + j] = s;
      }
      for (int c = 0; c < k.d_r; ++c) {
        uint16_t h;
        std::memcpy(&h, rec + lay.rope_offset_bytes + 2 * c, 2);
        kpe[size_t(t) * k.d_r + c] = bf16_to_f32(h);
      }
    }
    for (int row = 0; row < rows; ++row) {
      const int s = row / k.h;
      const float* qi = q.data() + (size_t(b) * rows + row) * d_qk;
      std::vector<float> sq(nblk);
      for (int j = 0; j < nblk; ++j) {
        const int c0 = j * kFp8ScaleBlock;
        sq[j] = quantise(qi + c0, std::min(kFp8ScaleBlock, k.r - c0), qc.data() + c0);
      }
      const int vis = s_kv - k.s_q + s + 1;
      std::vector<double> sc(vis), delta(vis);
      for (int t = 0; t < vis; ++t) {
        double total = 0, mag = 0, rope = 0, rmag = 0;
        for (int j = 0; j < nblk; ++j) {
          int64_t dot = 0;
          for (int c = j * kFp8ScaleBlock; c < std::min(k.r, (j + 1) * kFp8ScaleBlock); ++c)
            dot += int64_t(qc[c]) * kc[size_t(t) * k.r + c];
          const double term = double(dot) * double(float(sq[j] * float(ks[size_t(t) * nblk + j])));
          total += term;
          mag += std::abs(term);
        }
        for (int c = 0; c < k.d_r; ++c) {
          const double x =
              double(bf16_to_f32(f32_to_bf16(qi[k.r + c]))) * kpe[size_t(t) * k.d_r + c];
          rope += x;
          rmag += std::abs(x);
        }
        sc[t] = (total + rope) * p.softmax_scale;
        delta[t] = p.softmax_scale * ((nblk + 2) * g * mag + (k.d_r + 2) * g * rmag) +
                   4 * g * std::abs(sc[t]);
      }
      // The running maximum after each tile and the weight each tile's sums end with.
      std::vector<double> m_at(tiles), w_at(tiles, 1.0);
      double m = -INFINITY, dmax = 0;
      for (int ti = 0; ti < tiles; ++ti) {
        for (int t = ti * kTileKeys; t < std::min(vis, (ti + 1) * kTileKeys); ++t)
          m = std::max(m, sc[t]);
        m_at[ti] = m;
      }
      for (int t = 0; t < vis; ++t) dmax = std::max(dmax, delta[t] + 4 * g * std::abs(m));
      for (int ti = tiles - 2; ti >= 0; --ti)
        w_at[ti] = std::isinf(m_at[ti]) ? 0.0 : w_at[ti + 1] * std::exp(m_at[ti] - m_at[ti + 1]);
      auto p_of = [&](int t) { return std::exp(sc[t] - m_at[t / kTileKeys]); };
      double l = 0;
      for (int t = 0; t < vis; ++t) l += w_at[t / kTileKeys] * p_of(t);
      // Relative uncertainty of a probability (and so of a code's argument and of mx).
      const double eps_exp = 16 * g, rho = 2 * (dmax + eps_exp) + 6 * g;
      const double rho_all = rho + dmax + (tiles + 2) * 40 * g;
      for (int c = 0; c < k.r; ++c) {
        const int j = c / kFp8ScaleBlock;
        double o = 0, amb = 0, mag = 0;
        for (int ti = 0; ti < tiles; ++ti) {
          const int t0 = ti * kTileKeys, t1 = std::min(vis, t0 + kTileKeys);
          double mx = 0;
          for (int t = t0; t < t1; ++t) mx = std::max(mx, p_of(t) * ks[size_t(t) * nblk + j]);
          if (mx == 0) continue;
          for (int t = t0; t < t1; ++t) {
            const double y = p_of(t) * ks[size_t(t) * nblk + j] * 255 / mx;
            const double vt = kc[size_t(t) * k.r + c], unit = w_at[ti] * mx / 255;
            o += unit * std::nearbyint(y) * vt;
            mag += unit * (std::nearbyint(y) + 1) * std::abs(vt);
            const double frac = y - std::floor(y);
            if (std::abs(frac - 0.5) <= y * rho + 2 * g) amb += unit * std::abs(vt);
          }
        }
        const double want = o / l;
        const double bound =
            (amb + rho_all * mag) / l + std::abs(want) * (rho_all + (s_kv + 4) * g) + 1e-30;
        const double got = out[(size_t(b) * rows + row) * k.r + c];
        worst = std::max(worst, std::abs(got - want) / bound);
      }
    }
  }
  return worst;
}

TEST(MlaDecodeInt8, MatchesItsQuantisedArithmetic) {
  if (!int8_decode_available()) GTEST_SKIP() << "no AVX512_VNNI + AVX512_BF16 on this CPU";
  // V2-Lite's 16 heads and V3's 128 (two row blocks at s_q 2) at DeepSeek dims; a latent of one
  // and a half scale blocks with 3 heads (padding lanes) and a small rope; ragged last tiles,
  // two sequences of unlike lengths, key ranges split across the threads. Over a BF16 cache (64
  // rows and more): V3's heads, and 64 rows of a latent and a half block.
  for (const Shape& k : {Shape{1, 1, 16, 512, 64, 300}, Shape{2, 2, 128, 512, 64, 150},
                         Shape{2, 1, 3, 192, 16, 130}, Shape{1, 1, 128, 512, 64, 200, DType::kBF16},
                         Shape{2, 2, 32, 192, 16, 130, DType::kBF16}}) {
    std::string variant;
    const double worst = worst_ratio(k, &variant);
    std::printf("h %d r %d s_kv %d %s cache: worst |got - emulated| / bound %.3g\n", k.h, k.r,
                k.s_kv, std::string(dtype_name(k.kv)).c_str(), worst);
    EXPECT_LE(worst, 1.0) << "h " << k.h << " r " << k.r << " s_kv " << k.s_kv;
    EXPECT_EQ(variant, "mla_decode.cpu.avx512vnni.int8");
  }
}

// NaN comes out where unquantised attention has it: a NaN in one query row makes that row's
// output NaN and leaves the others finite; a NaN in a key's k_pe (BF16 in the record) makes
// every row that sees the key NaN.
TEST(MlaDecodeInt8, NanReachesTheRowsThatSeeIt) {
  if (!int8_decode_available()) GTEST_SKIP() << "no AVX512_VNNI + AVX512_BF16 on this CPU";
  constexpr int kH = 16, kR = 512, kDr = 64, kKeys = 200;
  for (const bool in_key : {false, true}) {
    Rng rng(9);
    PagedCache cache = make_paged_cache(rng, DType::kI8, {kKeys}, 64, kR, kDr, 1.0);
    const KvRecordLayout lay = kv_record_layout(KvCacheDtype::kINT8, kR, kDr);
    std::vector<float> q(size_t(kH) * (kR + kDr));
    for (auto& x : q) x = float(rng.normal());
    if (in_key) {
      const uint16_t nan = 0x7fc0;  // k_pe channel 3 of key 130 (a later tile)
      const int64_t slot = int64_t(cache.block_table[130 / 64]) * 64 + 130 % 64;
      std::memcpy(cache.data.data() + slot * cache.row_bytes + lay.rope_offset_bytes + 6, &nan, 2);
    } else {
      q[size_t(5) * (kR + kDr) + 7] = NAN;  // row 5, latent channel 7
    }
    std::vector<float> out(size_t(kH) * kR), lse(kH);
    MlaDecodeParams p;
    set_decode_cache(cache, p);
    p.s_q = 1;
    p.h_q = kH;
    p.q_dtype = DType::kF32;
    p.q = q.data();
    p.softmax_scale = 0.07f;
    p.out = out.data();
    p.lse = lse.data();
    p.int8_products = true;
    auto v = select_variant(p, "cpu");
    ASSERT_TRUE(v.ok());
    ThreadPool pool(2);
    (*v)->run(p, pool);
    for (int h = 0; h < kH; ++h) {
      const bool want_nan = in_key || h == 5;
      for (int c = 0; c < kR; ++c)
        ASSERT_EQ(std::isnan(out[size_t(h) * kR + c]), want_nan) << "row " << h << " ch " << c;
    }
  }
}

// Not asked for, over a cache it does not read (FP8), over a BF16 cache with fewer than 64 rows
// a sequence (16 heads), or on an AMX CPU, the int8 variant is not chosen: the request changes
// numerics only where it is honoured.
TEST(MlaDecodeInt8, OnlyWhereAskedAndWhereItPays) {
  if (!cpu_supports(CpuIsa::kAvx512Bf16) || !__builtin_cpu_supports("avx512vnni"))
    GTEST_SKIP() << "no AVX512_VNNI + AVX512_BF16 on this CPU";
  const bool amx = cpu_supports(CpuIsa::kAmxBf16);
  Rng rng(3);
  for (DType kv : {DType::kBF16, DType::kI8, DType::kF8E4M3})
    for (int h : {16, 64})
      for (bool ask : {false, true}) {
        const PagedCache cache = make_paged_cache(rng, kv, {70}, 64, 512, 64, 1.0);
        MlaDecodeParams p;
        set_decode_cache(cache, p);
        p.s_q = 1;
        p.h_q = h;
        p.q_dtype = DType::kBF16;
        p.int8_products = ask;
        auto v = select_variant(p, "cpu");
        ASSERT_TRUE(v.ok());
        const bool want = ask && !amx && (kv == DType::kI8 || (kv == DType::kBF16 && h >= 64));
        EXPECT_EQ((*v)->name == "mla_decode.cpu.avx512vnni.int8", want)
            << (*v)->name << " " << dtype_name(kv) << " h " << h;
      }
}

}  // namespace
}  // namespace mla
