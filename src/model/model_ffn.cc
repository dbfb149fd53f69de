// The FFN of a decoder layer: dense SwiGLU, or MoE (router in FP32 whatever the matmul dtype,
// experts run only on the tokens routed to them, grouped by expert, shared experts on every token)
// — docs/MODELS.md §MoE routing.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/activation.h"
#include "model/model_impl.h"

namespace mla {
namespace {

// One SwiGLU over some rows: the dense MLP or the shared experts over every token (toks null,
// rows read from x), or one routed expert over its tokens (gathered, scaled by their weights).
struct SwigluRun {
  const MlpLinear* mlp;
  int64_t n;            // rows
  const int64_t* toks;  // [n] token of each row; null: rows 0 .. n of x
  const float* scale;   // [n] routing weights; null: 1
};

// Inputs (gathered inside linear_many on the FP32 paths), hidden activations and outputs one
// group of runs may hold. Every expert of a decode step fits in one group; a 2,048-token prefill
// chunk of V3 (K = 8, D = 7,168) would hold ~1.2 GB at once.
constexpr size_t kSwigluGroupBytes = size_t(64) << 20;

size_t run_bytes(const SwigluRun& r, int64_t D) {
  return sizeof(float) * size_t(r.n) * size_t(2 * D + 2 * r.mlp->width);
}

// out[t, D] += scale · down(silu(gate(x_t)) ⊙ up(x_t)) for every row of every run. The gate / up
// products of all runs go through one linear_many pass (one SwiGLU job a run: kernels/linear.h)
// and the down products through a second: in decode each is a small GEMV, and a pass over the
// pool each cost more than the work it split.

// fn(i) for i < n over the pool when the pass moves at least kParallelFloats floats; serially
// otherwise (a decode step's few rows: waking the pool would cost more than the loop).
constexpr size_t kParallelFloats = size_t(1) << 18;
template <class Fn>
void for_each_item(ThreadPool& pool, int64_t n, size_t floats, Fn&& fn) {
  if (floats < kParallelFloats) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  pool.parallel_for(n, [&](int64_t i, int) { fn(i); });
}

// batch_rows: the forward's rows (linear_many's batch_rows: above 16, a prefill chunk's experts
// of few tokens run on the GEMMs too).
Status run_swiglu_group(std::span<const SwigluRun> runs, int64_t D, const float* x, float* out,
                        ThreadPool& pool, const std::string& be, DType math, int64_t batch_rows) {
  size_t h_size = 0, y_size = 0;
  for (const SwigluRun& r : runs) {
    h_size += size_t(r.n * r.mlp->width);
    y_size += size_t(r.n * D);
  }
  // Kept between calls (at most ~kSwigluGroupBytes): see grown().
  static thread_local AlignedBuffer<float> g_buf, u_buf, y_buf;
  float* g = grown(g_buf, h_size);
  float* u = grown(u_buf, h_size);
  float* y = grown(y_buf, y_size);
  static thread_local std::vector<LinearJob> jobs_buf;
  // Local references: a lambda run on a worker would name the worker's own thread_locals.
  std::vector<LinearJob>& jobs = jobs_buf;
  static thread_local std::vector<std::pair<size_t, size_t>> unfused_buf;
  std::vector<std::pair<size_t, size_t>>& unfused = unfused_buf;  // (start, size) in g and u
  unfused.clear();
  jobs.clear();
  size_t h_at = 0;
  // A routed expert's rows of x are its tokens' (x_rows): the GEMMs read them in place.
  for (const SwigluRun& r : runs) {
    if (linear_pair_fits(r.mlp->gate, r.mlp->up)) {  // silu(gate) · up made chunk by chunk
      jobs.push_back({&r.mlp->gate, r.n, x, g + h_at, &r.mlp->up, u + h_at, r.toks});
    } else {  // gate and up of different dtypes (a file's own mix): two jobs, one SiLU pass
      jobs.push_back({&r.mlp->gate, r.n, x, g + h_at, nullptr, nullptr, r.toks});
      jobs.push_back({&r.mlp->up, r.n, x, u + h_at, nullptr, nullptr, r.toks});
      unfused.push_back({h_at, size_t(r.n * r.mlp->width)});
    }
    h_at += size_t(r.n * r.mlp->width);
  }
  MLA_RETURN_IF_ERROR(linear_many(jobs, pool, be, math, batch_rows));
  constexpr int64_t kSiluSpan = 16384;
  for (const auto& [at, size] : unfused)
    for_each_item(pool, (int64_t(size) + kSiluSpan - 1) / kSiluSpan, size, [&](int64_t c) {
      const size_t b = at + size_t(c * kSiluSpan),
                   e = std::min(at + size, at + size_t((c + 1) * kSiluSpan));
      silu_mul(g + b, u + b, int64_t(e - b));
    });
  jobs.clear();
  h_at = 0;
  size_t y_at = 0;
  for (const SwigluRun& r : runs) {
    jobs.push_back({&r.mlp->down, r.n, g + h_at, y + y_at});
    h_at += size_t(r.n * r.mlp->width);
    y_at += size_t(r.n * D);
  }
  MLA_RETURN_IF_ERROR(linear_many(jobs, pool, be, math, batch_rows));
  // out[t] += s · y, the runs in order (a token's experts add in ascending expert order, as
  // before); threads split the D columns, so no two write the same element.
  constexpr int64_t kColSpan = 256;
  for_each_item(pool, (D + kColSpan - 1) / kColSpan, y_size, [&](int64_t c) {
    const int64_t j0 = c * kColSpan, j1 = std::min(D, j0 + kColSpan);
    size_t at = 0;
    for (const SwigluRun& r : runs) {
      for (int64_t i = 0; i < r.n; ++i) {
        const int64_t t = r.toks ? r.toks[i] : i;
        const float s = r.scale ? r.scale[i] : 1.0f;
        const float* yi = y + at + size_t(i * D);
        for (int64_t j = j0; j < j1; ++j) out[t * D + j] += s * yi[j];
      }
      at += size_t(r.n * D);
    }
  });
  return Status();
}

}  // namespace

Status run_ffn(const Model::Impl& m, const LayerRuntime& L, int64_t n, const float* x, float* out,
               ThreadPool& pool) {
  const std::string& be = m.options.backend;
  const int64_t D = m.weights.config.hidden_size;
  if (n == 0) return Status();
  if (!L.moe) {
    if (L.mlp.width == 0) return Status();  // across ranks: this rank holds none of its columns
    const SwigluRun dense{&L.mlp, n, nullptr, nullptr};
    return run_swiglu_group(std::span<const SwigluRun>(&dense, 1), D, x, out, pool, be,
                            m.options.matmul_dtype, n);
  }

  const MoeRouting& r = m.routing;
  const int E = r.num_experts, K = r.top_k;
  // Routing buffers, kept between layers and calls (the engine thread's; the workers never see
  // them), so that a decode step allocates nothing here once warm.
  static thread_local std::vector<float> logits, scratch, weight;
  static thread_local std::vector<int32_t> chosen;
  static thread_local std::vector<std::vector<int64_t>> tokens_of;
  static thread_local std::vector<std::vector<float>> weights_of;
  static thread_local std::vector<SwigluRun> runs;
  logits.resize(size_t(n) * E);
  scratch.resize(2 * size_t(E));
  MLA_RETURN_IF_ERROR(linear(L.router, n, x, logits.data(), pool, be));
  chosen.resize(size_t(n) * K);
  weight.resize(size_t(n) * K);
  for (int64_t t = 0; t < n; ++t)
    route_token(r, std::span<const float>(&logits[size_t(t) * E], size_t(E)), L.router_bias,
                scratch, &chosen[size_t(t) * K], &weight[size_t(t) * K]);

  // Tokens of each expert, in ascending expert order, then the shared experts on every token;
  // run in groups of at most kSwigluGroupBytes (a larger run alone).
  tokens_of.resize(size_t(E));
  weights_of.resize(size_t(E));
  for (int e = 0; e < E; ++e) {
    tokens_of[size_t(e)].clear();
    weights_of[size_t(e)].clear();
  }
  for (int64_t t = 0; t < n; ++t)
    for (int k = 0; k < K; ++k) {
      const int32_t e = chosen[size_t(t * K + k)];
      tokens_of[size_t(e)].push_back(t);
      weights_of[size_t(e)].push_back(weight[size_t(t * K + k)]);
    }
  // This rank's experts (all of them alone): [expert_first, + experts.size()).
  runs.clear();
  for (int e = L.expert_first; e < L.expert_first + int(L.experts.size()); ++e)
    if (!tokens_of[size_t(e)].empty() && L.experts[size_t(e - L.expert_first)].width > 0)
      runs.push_back({&L.experts[size_t(e - L.expert_first)], int64_t(tokens_of[size_t(e)].size()),
                      tokens_of[size_t(e)].data(), weights_of[size_t(e)].data()});
  if (L.shared.width > 0) runs.push_back({&L.shared, n, nullptr, nullptr});
  size_t first = 0, bytes = 0;
  for (size_t i = 0; i <= runs.size(); ++i) {
    const size_t b = i < runs.size() ? run_bytes(runs[i], D) : 0;
    if (i == runs.size() || (i > first && bytes + b > kSwigluGroupBytes)) {
      MLA_RETURN_IF_ERROR(
          run_swiglu_group(std::span<const SwigluRun>(runs.data() + first, i - first), D, x, out,
                           pool, be, m.options.matmul_dtype, n));
      first = i;
      bytes = 0;
    }
    bytes += b;
  }
  return Status();
}

}  // namespace mla
