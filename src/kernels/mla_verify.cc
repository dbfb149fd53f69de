// run_mla_verify: inputs, the FP64 oracle, every variant of both paths, and the pairwise bounds.
#include "kernels/mla_verify.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/aligned_buffer.h"
#include "core/kv_format.h"
#include "core/rng.h"
#include "kernels/mla_absorbed_weights.h"
#include "kernels/mla_params.h"
#include "kernels/ref/mla_ref.h"
#include "kernels/registry.h"

namespace mla {
namespace {

constexpr double kU32 = 0x1.0p-24;   // FP32 unit roundoff
constexpr double kUBf16 = 0x1.0p-8;  // BF16 unit roundoff (8 significant bits)

// A paged cache as stored, and the FP32 values its rows represent [s_kv, r + d_r].
struct CacheImage {
  DType dtype = DType::kBF16;
  float global_scale = 1.0f;
  std::vector<uint8_t> data;
  std::vector<float> values;
};

struct PathResult {
  std::string name;
  Intermediates compute;
  bool bf16_query = false;    // consumed the absorbed query rounded to BF16
  std::vector<float> scores;  // [s_q, H, s_kv]
  std::vector<float> out;     // [s_q, H, d_v]
  std::vector<float> lse;     // [H, s_q]
  // Oracles only: Σ_t p_t |v_t| carried through |W_UV|, [s_q, H, d_v]: what bounds the rounding
  // of the probabilities to BF16 in the output (compare.h).
  std::vector<float> abs_out = {};
};

// Inputs as stored (BF16 or F32), widened to FP32 exactly.
std::vector<float> stored(Rng& rng, int64_t n, double sd, DType t) {
  std::vector<float> v(n);
  for (auto& x : v) {
    x = float(rng.normal() * sd);
    if (t == DType::kBF16) x = round_to_bf16(x);
  }
  return v;
}

}  // namespace

namespace {
Result<VerifyReport> verify_impl(const VerifyConfig& cfg, ThreadPool& pool) {
  if (cfg.heads < 1 || cfg.nope < 1 || cfg.rope < 0 || cfg.latent < 1 || cfg.v_dim < 1 ||
      cfg.seq < 1 || cfg.queries < 1 || cfg.queries > cfg.seq || cfg.page_size < 1)
    return invalid_argument(fmt::format(
        "verify: need positive heads, nope, latent, v-dim, seq, page size, rope >= 0 and 1 <= "
        "queries <= seq "
        "(got heads={} nope={} rope={} latent={} v-dim={} seq={} queries={} page-size={})",
        cfg.heads, cfg.nope, cfg.rope, cfg.latent, cfg.v_dim, cfg.seq, cfg.queries, cfg.page_size));
  if (cfg.dtype != DType::kBF16 && cfg.dtype != DType::kF32)
    return invalid_argument(
        fmt::format("verify: dtype {} (need bf16 or f32)", dtype_name(cfg.dtype)));
  const int H = cfg.heads, d_n = cfg.nope, d_r = cfg.rope, r = cfg.latent, d_v = cfg.v_dim;
  const int s_q = cfg.queries, s_kv = cfg.seq, d_qk = d_n + d_r, d_row = r + d_r;
  // Every path keeps its scores, and the weights are held three times: bound both so the run
  // fits a workstation (and an allocation failure below is still caught and reported).
  if (int64_t(H) * s_q * s_kv > (int64_t(1) << 24) ||
      int64_t(H) * (d_n + d_v) * r > (int64_t(1) << 26) ||
      int64_t(s_kv) * d_row > (int64_t(1) << 28))
    return invalid_argument(
        fmt::format("verify: heads × queries × seq = {} (max 2^24) or heads × (nope + v-dim) × "
                    "latent = {} (max 2^26) "
                    "is too large; pick smaller shapes",
                    int64_t(H) * s_q * s_kv, int64_t(H) * (d_n + d_v) * r));

  VerifyReport rep;
  rep.config = cfg;
  RopeScaling v3_yarn;
  v3_yarn.yarn = true;
  v3_yarn.factor = 40;
  v3_yarn.mscale = 1.0;
  v3_yarn.mscale_all_dim = 1.0;
  const float scale =
      float(cfg.softmax_scale > 0 ? cfg.softmax_scale : ref::mla_softmax_scale(d_qk, v3_yarn));
  rep.softmax_scale = scale;

  // Realistic scaling: unit-variance activations (query, normalised latent, rotated k_pe),
  // kv_b_proj ~ N(0, 1/r) (fan-in r) so k_nope and v are unit variance too.
  Rng rng(cfg.seed);
  const auto q = stored(rng, int64_t(s_q) * H * d_qk, 1.0, cfg.dtype);   // [s_q, H, d_qk]
  const auto rows = stored(rng, int64_t(s_kv) * d_row, 1.0, cfg.dtype);  // [s_kv, r + d_r]
  const auto kv_b =
      stored(rng, int64_t(H) * (d_n + d_v) * r, 1.0 / std::sqrt(double(r)), cfg.dtype);
  MLA_ASSIGN_OR_RETURN(const MlaAbsorbedWeights absorbed_w,
                       prepare_absorbed_weights(
                           LinearWeight{DType::kF32, reinterpret_cast<const uint8_t*>(kv_b.data()),
                                        int64_t(H) * (d_n + d_v), r},
                           H, d_n, d_v));
  const AlignedBuffer<float>&w_uk = absorbed_w.w_uk, &w_uv = absorbed_w.w_uv;

  // Paged caches, pages in reverse order so the block table is not the identity: the one under
  // test (cfg.kv_dtype, or the input dtype) and, for a quantised format, a BF16 one whose oracle
  // shows what the format costs.
  const int pages = (s_kv + cfg.page_size - 1) / cfg.page_size;
  std::vector<int32_t> table(pages);
  for (int i = 0; i < pages; ++i) table[i] = pages - 1 - i;
  auto make_cache = [&](DType latent) {
    CacheImage c;
    c.dtype = latent;
    c.global_scale = kNvfp4DefaultGlobalScale;
    const int64_t row_bytes = kv_row_bytes(latent, r, d_r);
    c.data.assign(size_t(pages) * cfg.page_size * row_bytes, 0);
    c.values.resize(size_t(s_kv) * d_row);
    for (int t = 0; t < s_kv; ++t) {
      const int64_t slot = int64_t(table[t / cfg.page_size]) * cfg.page_size + t % cfg.page_size;
      uint8_t* rec = &c.data[size_t(slot * row_bytes)];
      const float* x = &rows[size_t(t) * d_row];
      float* v = &c.values[size_t(t) * d_row];
      if (latent == DType::kF32) {
        std::memcpy(rec, x, sizeof(float) * d_row);
        std::copy_n(x, d_row, v);
      } else {
        const KvCacheDtype f = *kv_cache_dtype_of(latent);
        quantize_kv_row(f, r, d_r, x, c.global_scale, rec);
        dequantize_kv_row(f, r, d_r, rec, c.global_scale, v);
      }
    }
    return c;
  };
  const DType kv_latent = cfg.kv_dtype ? kv_cache_latent_dtype(*cfg.kv_dtype) : cfg.dtype;
  const CacheImage cache = make_cache(kv_latent);
  const int32_t seqlen = s_kv;
  const int64_t n_scores = int64_t(s_q) * H * s_kv, n_out = int64_t(s_q) * H * d_v,
                n_lse = int64_t(H) * s_q;

  // The one sequence's pages in a cache image.
  auto cache_view = [&](const CacheImage& c) {
    return PagedLatentCache{.dtype = c.dtype,
                            .global_scale = c.global_scale,
                            .rows = c.data.data(),
                            .page_size = cfg.page_size,
                            .num_blocks = pages,
                            .block_table = table.data(),
                            .max_blocks_per_seq = pages,
                            .seq_lens = &seqlen};
  };
  auto decode_params = [&](const CacheImage& c, DType qt, const void* qp, float* o_lat, float* lse,
                           float* sc) {
    MlaDecodeParams p;
    p.b = 1;
    p.s_q = s_q;
    p.h_q = H;
    p.d_qk = d_row;
    p.d_v = r;
    p.q_dtype = qt;
    p.q = qp;
    p.cache = cache_view(c);
    p.softmax_scale = scale;
    p.causal = true;
    p.out = o_lat;
    p.lse = lse;
    p.scores = sc;
    p.scores_stride = s_kv;
    return p;
  };

  // The oracle: absorbed attention entirely in FP64 on the values a cache stores.
  std::vector<double> q_abs64(size_t(s_q) * H * d_row);
  ref::absorb_query(s_q, H, d_n, d_r, r, q.data(), w_uk.data(), q_abs64.data());
  std::vector<float> o_lat(size_t(s_q) * H * r);
  std::vector<float> w_uv_abs(w_uv.size());
  std::transform(w_uv.begin(), w_uv.end(), w_uv_abs.begin(), [](float x) { return std::fabs(x); });
  auto run_oracle = [&](const char* name, const CacheImage& c, DType qt, const void* qp) {
    PathResult res{name,
                   Intermediates::kFp64,
                   false,
                   std::vector<float>(n_scores),
                   std::vector<float>(n_out),
                   std::vector<float>(n_lse)};
    std::vector<float> abs_lat(o_lat.size());
    MlaDecodeParams p = decode_params(c, qt, qp, o_lat.data(), res.lse.data(), res.scores.data());
    p.abs_out = abs_lat.data();
    ref::mla_decode(p);
    std::vector<double> o_lat64(o_lat.begin(), o_lat.end()), out64(n_out);
    ref::unabsorb_output(s_q, H, d_v, r, o_lat64.data(), w_uv.data(), out64.data());
    std::transform(out64.begin(), out64.end(), res.out.begin(), [](double x) { return float(x); });
    o_lat64.assign(abs_lat.begin(), abs_lat.end());
    ref::unabsorb_output(s_q, H, d_v, r, o_lat64.data(), w_uv_abs.data(), out64.data());
    res.abs_out.resize(n_out);
    std::transform(out64.begin(), out64.end(), res.abs_out.begin(),
                   [](double x) { return float(x); });
    return res;
  };
  const PathResult oracle = run_oracle("ref.absorbed.fp64", cache, DType::kF64, q_abs64.data());
  // The same oracle on the absorbed query rounded to BF16: what a BF16-query variant consumes.
  std::vector<float> q_abs(size_t(s_q) * H * d_row);
  MLA_RETURN_IF_ERROR(absorb_query(s_q, d_r, q.data(), absorbed_w, q_abs.data(), pool));
  std::vector<uint16_t> q_abs16(q_abs.size());
  std::transform(q_abs.begin(), q_abs.end(), q_abs16.begin(), f32_to_bf16);
  const PathResult oracle16 =
      run_oracle("ref.absorbed.fp64.q_bf16", cache, DType::kBF16, q_abs16.data());

  // Score bound per element: |Δ| ≤ (u_q + γ) · A with A = scale · (Σ_c (|W_UK|ᵀ|q_nope|)_c |c_c| +
  // Σ |q_pe||k_pe|): covers FP32 accumulation over the d_n + r + d_r terms of either path
  // (γ ≈ (d_n + r + d_r + 2)·u) and, for BF16-compute variants, rounding the absorbed query to
  // BF16 (u_q = 2^-8).
  std::vector<double> score_abs(n_scores);
  {
    std::vector<double> wq(r);
    for (int s = 0; s < s_q; ++s)
      for (int h = 0; h < H; ++h) {
        std::fill(wq.begin(), wq.end(), 0.0);
        const float* qh = q.data() + (int64_t(s) * H + h) * d_qk;
        for (int n = 0; n < d_n; ++n)
          for (int c = 0; c < r; ++c)
            wq[c] += std::fabs(double(w_uk[(int64_t(h) * d_n + n) * r + c]) * qh[n]);
        for (int t = 0; t < s_kv; ++t) {
          const float* row = cache.values.data() + int64_t(t) * d_row;
          double a = 0;
          for (int c = 0; c < r; ++c) a += wq[c] * std::fabs(row[c]);
          for (int c = 0; c < d_r; ++c) a += std::fabs(double(qh[d_n + c]) * row[r + c]);
          score_abs[(int64_t(s) * H + h) * s_kv + t] = a * scale;
        }
      }
  }
  auto score_bound = [&](Intermediates c) {
    const double g = (d_n + r + d_r + 2) * kU32 + (c >= Intermediates::kBf16 ? kUBf16 : 0.0);
    std::vector<double> b(n_scores);
    for (int64_t i = 0; i < n_scores; ++i) b[i] = g * score_abs[i];
    return b;
  };

  std::vector<PathResult> absorbed, decompressed;
  for (const auto& v : mla_decode_variants()) {
    if (v.backend == "ref") continue;
    PathResult pr{v.name,
                  v.compute,
                  false,
                  std::vector<float>(n_scores),
                  std::vector<float>(n_out),
                  std::vector<float>(n_lse)};
    MlaDecodeParams p = decode_params(cache, DType::kF32, q_abs.data(), o_lat.data(), pr.lse.data(),
                                      pr.scores.data());
    if (!v.supports(p)) {  // a BF16-query variant gets the rounded query
      p = decode_params(cache, DType::kBF16, q_abs16.data(), o_lat.data(), pr.lse.data(),
                        pr.scores.data());
      pr.bf16_query = true;
      if (!v.supports(p)) continue;
    }
    MLA_RETURN_IF_ERROR(run_variant(v, p, pool));
    MLA_RETURN_IF_ERROR(unabsorb_output(s_q, o_lat.data(), absorbed_w, pr.out.data(), pool));
    absorbed.push_back(std::move(pr));
  }
  for (const auto& v : mla_prefill_variants()) {
    if (v.backend == "ref") continue;
    PathResult pr{v.name,
                  v.compute,
                  false,
                  std::vector<float>(n_scores),
                  std::vector<float>(n_out),
                  std::vector<float>(n_lse)};
    MlaPrefillParams p;
    p.s_q = s_q;
    p.h_q = H;
    p.d_n = d_n;
    p.d_r = d_r;
    p.d_v = d_v;
    p.r = r;
    p.q = q.data();
    p.cache = cache_view(cache);
    p.w_uk = w_uk.data();
    p.w_uv = w_uv.data();
    p.softmax_scale = scale;
    p.causal = true;
    p.out = pr.out.data();
    p.lse = pr.lse.data();
    p.scores = pr.scores.data();
    p.scores_stride = s_kv;
    if (!v.supports(p)) continue;
    MLA_RETURN_IF_ERROR(run_variant(v, p, pool));
    decompressed.push_back(std::move(pr));
  }

  auto add_pairs = [&](const PathResult& a, const PathResult& b, const char* note) {
    const std::vector<float>& oracle_abs = a.abs_out.empty() ? oracle16.abs_out : a.abs_out;
    const bool gating = note == nullptr;
    const Intermediates weaker = std::max(a.compute, b.compute);  // kFp64 < kFp32 < kBf16
    const double cb = weaker >= Intermediates::kBf16 ? 1.0 - 5e-6 : 1.0 - 1e-6;
    // Scores: cosine and the derived per-element bound (twice it when both sides carry error).
    std::vector<double> bound = score_bound(weaker);
    if (a.compute != Intermediates::kFp64)
      for (auto& x : bound) x *= 2;
    CompareRule srule;
    srule.cos_min = cb;
    VerifyPair ps{a.name,
                  b.name,
                  "scores",
                  intermediates_name(weaker),
                  compare(a.scores.data(), b.scores.data(), n_scores, srule, bound.data()),
                  cb,
                  false};
    ps.pass = ps.stats.pass;
    // Outputs: FlashMLA's per-element rule and the cosine bound of the weaker side.
    // BF16 probabilities add 2^-8 · |W_UV| Σ p|v| per element, from the oracle that pair uses.
    CompareRule orule = flashmla_out_rule();
    orule.cos_min = cb;
    std::vector<double> obound;
    if (weaker == Intermediates::kBf16Probs) {
      obound.resize(n_out);
      const int rounding_sides = a.compute == Intermediates::kFp64 ? 1 : 2;
      bf16_probs_bound(a.out.data(), oracle_abs.data(), n_out, orule, obound.data(),
                       rounding_sides);
    }
    VerifyPair po{
        a.name,
        b.name,
        "out",
        intermediates_name(weaker),
        compare(a.out.data(), b.out.data(), n_out, orule, obound.empty() ? nullptr : obound.data()),
        cb,
        false};
    po.pass = po.stats.pass && !po.stats.got_all_zero;
    // LSE, checked on its own (docs/kernels/mla_decode.md §Pass rules): FlashMLA's 1e-6 abs or
    // 8.01/65536 rel.
    VerifyPair pl{a.name,
                  b.name,
                  "lse",
                  intermediates_name(weaker),
                  compare(a.lse.data(), b.lse.data(), n_lse, flashmla_lse_rule()),
                  -1.0,
                  false};
    pl.pass = pl.stats.pass;
    ps.gating = po.gating = pl.gating = gating;
    ps.note = po.note = pl.note = gating ? "" : note;
    rep.pairs.push_back(std::move(ps));
    rep.pairs.push_back(std::move(po));
    rep.pairs.push_back(std::move(pl));
  };
  // Each kernel against the oracle on the inputs it consumes; the cost of rounding the absorbed
  // query to BF16 (against the FP64-query oracle, and across paths) is reported, not gated.
  constexpr const char* kBf16QueryCost = "cost of the BF16 absorbed query";
  for (const auto& a : absorbed) {
    add_pairs(a.bf16_query ? oracle16 : oracle, a, nullptr);
    if (a.bf16_query) add_pairs(oracle, a, kBf16QueryCost);
  }
  for (const auto& d : decompressed) add_pairs(oracle, d, nullptr);
  for (const auto& a : absorbed)
    for (const auto& d : decompressed) add_pairs(a, d, a.bf16_query ? kBf16QueryCost : nullptr);
  // A quantised cache: each path's error against attention over the BF16 cache of the same rows,
  // the real cost of the format (reported, not gated: docs/kernels/mla_decode.md §Pass rules).
  if (cfg.kv_dtype && *cfg.kv_dtype != KvCacheDtype::kBF16) {
    const PathResult bf16_oracle = run_oracle(
        "ref.absorbed.fp64.bf16_cache", make_cache(DType::kBF16), DType::kF64, q_abs64.data());
    const std::string note =
        "cost of the " + std::string(kv_cache_dtype_name(*cfg.kv_dtype)) + " cache against BF16";
    for (const auto& a : absorbed) add_pairs(bf16_oracle, a, note.c_str());
    for (const auto& d : decompressed) add_pairs(bf16_oracle, d, note.c_str());
  }
  rep.pass = !absorbed.empty() && !decompressed.empty() &&
             std::all_of(rep.pairs.begin(), rep.pairs.end(),
                         [](const VerifyPair& p) { return p.pass || !p.gating; });
  return rep;
}

}  // namespace

Result<VerifyReport> run_mla_verify(const VerifyConfig& cfg, ThreadPool& pool) {
  try {  // std::vector is the adapter here: no exception leaves this function
    return verify_impl(cfg, pool);
  } catch (const std::bad_alloc&) {
    return out_of_memory("verify: not enough memory for these shapes");
  }
}

}  // namespace mla
