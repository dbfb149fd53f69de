// The FFN of a decoder layer: dense SwiGLU, or MoE (router in FP32, experts run only on the tokens
// routed to them, grouped by expert, shared experts on every token) — deepseek-models.md §6.
#include <cmath>
#include <vector>

#include "model/model_impl.h"

namespace mla {
namespace {

// out[n, D] += scale_i · down(silu(gate(x)) ⊙ up(x)) for rows x [n, D]; scale null means 1.
Status swiglu(const MlpLinear& w, int64_t n, const float* x, const float* scale, float* out,
              ThreadPool& pool, const std::string& be) {
  if (n == 0) return Status();
  const int64_t width = w.width, D = w.down.out;
  std::vector<float> g(size_t(n * width)), u(size_t(n * width)), y(size_t(n * D));
  MLA_RETURN_IF_ERROR(linear(w.gate, n, x, g.data(), pool, be));
  MLA_RETURN_IF_ERROR(linear(w.up, n, x, u.data(), pool, be));
  for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  MLA_RETURN_IF_ERROR(linear(w.down, n, g.data(), y.data(), pool, be));
  for (int64_t i = 0; i < n; ++i) {
    const float s = scale ? scale[i] : 1.0f;
    for (int64_t j = 0; j < D; ++j) out[i * D + j] += s * y[size_t(i * D + j)];
  }
  return Status();
}

}  // namespace

Status run_ffn(const Model::Impl& m, const LayerRuntime& L, int64_t n, const float* x, float* out,
               ThreadPool& pool) {
  const std::string& be = m.options.backend;
  if (!L.moe) return swiglu(L.mlp, n, x, nullptr, out, pool, be);

  const MoeRouting& r = m.routing;
  const int E = r.num_experts, K = r.top_k;
  const int64_t D = m.weights.config.hidden_size;
  std::vector<float> logits(size_t(n) * E), scratch(2 * size_t(E));
  MLA_RETURN_IF_ERROR(linear(L.router, n, x, logits.data(), pool, be));
  std::vector<int32_t> chosen(size_t(n) * K);
  std::vector<float> weight(size_t(n) * K);
  for (int64_t t = 0; t < n; ++t)
    route_token(r, std::span<const float>(&logits[size_t(t) * E], size_t(E)), L.router_bias,
                scratch, &chosen[size_t(t) * K], &weight[size_t(t) * K]);

  // Tokens of each expert, gathered into one batch per expert; results scattered back in FP32.
  std::vector<std::vector<int64_t>> tokens_of(static_cast<size_t>(E));
  std::vector<std::vector<float>> weights_of(static_cast<size_t>(E));
  for (int64_t t = 0; t < n; ++t)
    for (int k = 0; k < K; ++k) {
      const int32_t e = chosen[size_t(t * K + k)];
      tokens_of[size_t(e)].push_back(t);
      weights_of[size_t(e)].push_back(weight[size_t(t * K + k)]);
    }
  // The active experts (ascending), then the shared experts over every token. Their gate / up
  // products run in one linear_many pass, their down products in a second: in decode an expert
  // is one small GEMV, and a pass over the pool each cost more than the work split.
  struct Active {
    const MlpLinear* mlp;
    int64_t n;
    const float* x;                    // [n, D]
    size_t h_at, y_at;                 // offsets into h / u [n, width] and y [n, D]
    const std::vector<int64_t>* toks;  // null: the shared experts (every token, scale 1)
    const float* scale;
  };
  std::vector<Active> act;
  size_t rows = 0, h_size = 0, y_size = 0;
  for (int e = 0; e < E; ++e) rows += tokens_of[size_t(e)].size();
  std::vector<float> xe(rows * size_t(D));
  size_t x_at = 0;
  for (int e = 0; e < E; ++e) {
    const std::vector<int64_t>& toks = tokens_of[size_t(e)];
    if (toks.empty()) continue;
    const MlpLinear& w = L.experts[size_t(e)];
    const int64_t ne = int64_t(toks.size());
    for (int64_t i = 0; i < ne; ++i)
      std::copy_n(x + toks[size_t(i)] * D, D, &xe[x_at + size_t(i * D)]);
    act.push_back({&w, ne, &xe[x_at], h_size, y_size, &toks, weights_of[size_t(e)].data()});
    x_at += size_t(ne * D);
    h_size += size_t(ne * w.width);
    y_size += size_t(ne * D);
  }
  if (L.shared.width > 0) {
    act.push_back({&L.shared, n, x, h_size, y_size, nullptr, nullptr});
    h_size += size_t(n * L.shared.width);
    y_size += size_t(n * D);
  }
  std::vector<float> g(h_size), u(h_size), y(y_size);
  std::vector<LinearJob> jobs;
  for (const Active& a : act) {
    jobs.push_back({&a.mlp->gate, a.n, a.x, &g[a.h_at]});
    jobs.push_back({&a.mlp->up, a.n, a.x, &u[a.h_at]});
  }
  MLA_RETURN_IF_ERROR(linear_many(jobs, pool, be));
  for (size_t i = 0; i < h_size; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  jobs.clear();
  for (const Active& a : act) jobs.push_back({&a.mlp->down, a.n, &g[a.h_at], &y[a.y_at]});
  MLA_RETURN_IF_ERROR(linear_many(jobs, pool, be));
  for (const Active& a : act)
    for (int64_t i = 0; i < a.n; ++i) {
      const int64_t t = a.toks ? (*a.toks)[size_t(i)] : i;
      const float s = a.scale ? a.scale[i] : 1.0f;
      const float* yi = &y[a.y_at + size_t(i * D)];
      for (int64_t j = 0; j < D; ++j) out[t * D + j] += s * yi[j];
    }
  return Status();
}

}  // namespace mla
