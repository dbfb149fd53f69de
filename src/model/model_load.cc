// Model::load: the checked weights (model_weights.h) turned into what the forward pass runs on.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "core/ggml_quant.h"
#include "core/ggml_repack.h"
#include "dist/communicator.h"
#include "kernels/ref/mla_ref.h"
#include "model/model_impl.h"
#include "model/model_rope.h"

namespace mla {
namespace {

// One element of a plain (non-FP8) tensor at index i; data may be unaligned.
float element_f32(DType t, const uint8_t* data, int64_t i) {
  switch (t) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, data + 4 * i, 4);
      return f;
    }
    case DType::kBF16:
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, data + 2 * i, 2);
      return t == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
    }
    default:
      return 0.0f;  // the loader admits only the dtypes above for these tensors
  }
}

std::vector<float> widen_vector(const WeightRef& w) {
  std::vector<float> v(size_t(w.weight->numel));
  widen_elements(w.weight->dtype, w.weight->data, 0, w.weight->numel, v.data());
  return v;
}

MlpLinear mlp_of(const MlpWeights& w, const ModelConfig& c) {
  MlpLinear m;
  m.gate = linear_of(w.gate_proj, c);
  m.up = linear_of(w.up_proj, c);
  m.down = linear_of(w.down_proj, c);
  m.width = w.gate_proj.present() ? int(m.gate.out) : 0;
  return m;
}

// A GGUF file's split attn_k_b / attn_v_b as linear() weights ([H·r, d_n], [H·d_v, r]).
std::optional<StoredHeadWeights> stored_head_weights(const Checkpoint& ck, int layer) {
  const SplitKvB* kv = ck.split_kv_b(layer);
  if (!kv) return std::nullopt;
  const auto view = [](const TensorInfo& t) {
    LinearWeight l;
    l.dtype = t.dtype;
    l.data = t.data;
    l.in = t.shape.back();
    l.out = t.numel / l.in;
    return l;
  };
  return StoredHeadWeights{view(*kv->uk_t), view(*kv->uv)};
}

// This rank's part of a layer (docs/ARCHITECTURE.md §Ranks). Alone, every weight is a view of the
// file; across ranks, copies of this rank's slices in `store`.
struct LayerShard {
  int rank = 0, ranks = 1;
  SliceStore* store = nullptr;
  std::string at;                 // "DIR: layer i ", for errors
  bool experts_by_width = false;  // MoeSplit::kWidth

  bool alone() const { return ranks == 1; }
  IndexRange all(const LinearWeight& w, bool rows) const { return {0, rows ? w.out : w.in}; }
  Result<LinearWeight> rows(const LinearWeight& w, IndexRange r, const std::string& name) const {
    if (alone() || !w.data) return w;
    return slice_linear(w, r, all(w, false), *store, at + name);
  }
  Result<LinearWeight> cols(const LinearWeight& w, IndexRange c, const std::string& name) const {
    if (alone() || !w.data) return w;
    return slice_linear(w, all(w, true), c, *store, at + name);
  }
  Result<LinearWeight> whole(const LinearWeight& w, const std::string& name) const {
    return rows(w, all(w, true), name);
  }
  // A SwiGLU split by its width: gate / up rows and down columns [split of width]; this rank's
  // part may be empty (width 0) when the width has fewer granules than there are ranks.
  Result<MlpLinear> mlp_split(const MlpLinear& m, const std::string& name) const {
    if (alone() || m.width == 0) return m;
    const int64_t granule = std::max(
        column_granule(m.down), linear_block_scaled(m.down.dtype) ? int64_t(m.down.block_cols) : 1);
    const IndexRange w = split_range(m.width, ranks, rank, granule);
    if (w.size() == 0) return MlpLinear{};
    MlpLinear p;
    MLA_ASSIGN_OR_RETURN(p.gate, rows(m.gate, w, name + " gate_proj"));
    MLA_ASSIGN_OR_RETURN(p.up, rows(m.up, w, name + " up_proj"));
    MLA_ASSIGN_OR_RETURN(p.down, cols(m.down, w, name + " down_proj"));
    p.width = int(w.size());
    return p;
  }
  Result<MlpLinear> mlp_whole(const MlpLinear& m, const std::string& name) const {
    if (alone()) return m;
    MlpLinear p = m;
    MLA_ASSIGN_OR_RETURN(p.gate, whole(m.gate, name + " gate_proj"));
    MLA_ASSIGN_OR_RETURN(p.up, whole(m.up, name + " up_proj"));
    MLA_ASSIGN_OR_RETURN(p.down, whole(m.down, name + " down_proj"));
    return p;
  }
};

Result<LayerRuntime> prepare_layer(const LayerWeights& w, const ModelConfig& c,
                                   const std::optional<StoredHeadWeights>& stored,
                                   const LayerShard& sh) {
  // This rank's heads [h0, h0 + Hl): their rows of q_b / q_proj, kv_b_proj and the stored
  // per-head weights, their columns of o_proj.
  const int Hl = c.num_attention_heads / sh.ranks, h0 = sh.rank * Hl;
  const int64_t d_qk = c.d_qk(), d_v = c.v_head_dim, d_nv = c.qk_nope_head_dim + d_v,
                r = c.kv_lora_rank;
  const auto heads = [&](int64_t per_head) {
    return IndexRange{h0 * per_head, (h0 + Hl) * per_head};
  };
  LayerRuntime L;
  L.input_norm = widen_vector(w.input_layernorm);
  L.post_norm = widen_vector(w.post_attention_layernorm);
  L.kv_a_norm = widen_vector(w.kv_a_layernorm);
  if (c.has_q_lora()) {
    MLA_ASSIGN_OR_RETURN(L.q_a, sh.whole(linear_of(w.q_a_proj, c), "q_a_proj"));
    L.q_a_norm = widen_vector(w.q_a_layernorm);
    MLA_ASSIGN_OR_RETURN(L.q_b, sh.rows(linear_of(w.q_b_proj, c), heads(d_qk), "q_b_proj"));
  } else {
    MLA_ASSIGN_OR_RETURN(L.q_proj, sh.rows(linear_of(w.q_proj, c), heads(d_qk), "q_proj"));
  }
  MLA_ASSIGN_OR_RETURN(L.kv_a, sh.whole(linear_of(w.kv_a_proj_with_mqa, c), "kv_a_proj"));
  MLA_ASSIGN_OR_RETURN(L.o_proj, sh.cols(linear_of(w.o_proj, c), heads(d_v), "o_proj"));
  std::optional<StoredHeadWeights> st = stored;
  if (st) {
    MLA_ASSIGN_OR_RETURN(st->uk_t, sh.rows(st->uk_t, heads(r), "attn_k_b"));
    MLA_ASSIGN_OR_RETURN(st->uv, sh.rows(st->uv, heads(d_v), "attn_v_b"));
  }
  MLA_ASSIGN_OR_RETURN(const LinearWeight kv_b,
                       sh.rows(linear_of(w.kv_b_proj, c), heads(d_nv), "kv_b_proj"));
  MLA_ASSIGN_OR_RETURN(L.absorbed, prepare_absorbed_weights(kv_b, Hl, c.qk_nope_head_dim,
                                                            c.v_head_dim, st ? &*st : nullptr));
  if (!sh.alone()) sh.store->release(kv_b.data);  // the FP32 split replaces it
  L.moe = w.moe;
  if (!w.moe) {
    MLA_ASSIGN_OR_RETURN(L.mlp, sh.mlp_split(mlp_of(w.mlp, c), "mlp"));
  } else {
    MLA_ASSIGN_OR_RETURN(L.router, sh.whole(linear_of(w.router, c), "router"));
    if (w.router_bias.present()) L.router_bias = widen_vector(w.router_bias);
    // This rank's routed experts: [e0, e0 + E / ranks) whole, or a slice of every one's width.
    const bool by_width = sh.experts_by_width || sh.alone();
    const size_t El = by_width ? w.experts.size() : w.experts.size() / size_t(sh.ranks);
    const size_t e0 = by_width ? 0 : size_t(sh.rank) * El;
    L.expert_first = int(e0);
    L.experts.reserve(El);
    for (size_t e = e0; e < e0 + El; ++e) {
      const std::string name = fmt::format("expert {}", e);
      MLA_ASSIGN_OR_RETURN(MlpLinear x, by_width ? sh.mlp_split(mlp_of(w.experts[e], c), name)
                                                 : sh.mlp_whole(mlp_of(w.experts[e], c), name));
      L.experts.push_back(x);
    }
    if (w.shared_experts.gate_proj.present()) {
      MLA_ASSIGN_OR_RETURN(L.shared, sh.mlp_split(mlp_of(w.shared_experts, c), "shared experts"));
    }
  }
  return L;
}

}  // namespace

void widen_elements(DType t, const uint8_t* data, int64_t first, int64_t n, float* dst) {
  if (dtype_is_ggml_block(t)) {  // whole rows of a matrix: whole blocks
    const Status s = dequantize_row(t, data + dtype_bytes(t, first), n, dst);
    MLA_CHECK(s.ok(), "widen_elements: {}", s.message());
    return;
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = element_f32(t, data, first + i);
}

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
const ModelConfig& Model::config() const {
  return impl_->weights.config;
}
const RuntimeOptions& Model::options() const {
  return impl_->options;
}
const ModelWeights& Model::weights() const {
  return impl_->weights;
}
int64_t Model::max_context() const {
  return impl_->max_context;
}
float Model::kv_global_scale() const {
  return kNvfp4DefaultGlobalScale;
}

namespace {
int64_t linear_bytes(const LinearWeight& l) {
  if (!l.data) return 0;
  return l.out * dtype_bytes(l.dtype, l.in) + linear_scale_grid_bytes(l);
}
int64_t mlp_bytes(const MlpLinear& m) {
  return linear_bytes(m.gate) + linear_bytes(m.up) + linear_bytes(m.down);
}
double linear_macs(const LinearWeight& l) {
  return l.data ? double(l.out) * double(l.in) : 0.0;
}
double mlp_macs(const MlpLinear& m) {
  return linear_macs(m.gate) + linear_macs(m.up) + linear_macs(m.down);
}
}  // namespace

double Model::prefill_flops(int64_t tokens) const {
  const Impl& m = *impl_;
  const ModelConfig& c = m.weights.config;
  const double T = double(tokens), H = c.num_attention_heads;
  // Causal attention: T·(T + 1)/2 (query, key) pairs, each a d_qk score and a d_v output MAC.
  const double pairs = T * (T + 1) / 2;
  double macs = linear_macs(m.lm_head);  // the last token's logits
  if (tokens == 0) return 2 * macs;
  for (size_t i = 0; i < m.layers.size(); ++i) {
    const LayerRuntime& L = m.layers[i];
    const double kv_a = linear_macs(L.kv_a);
    double per_token =
        linear_macs(L.q_proj) + linear_macs(L.q_a) + linear_macs(L.q_b) + kv_a +
        linear_macs(L.o_proj) +
        linear_macs(linear_of(m.weights.layers[i].kv_b_proj, c)) * m.heads / c.num_attention_heads;
    if (!L.moe)
      per_token += mlp_macs(L.mlp);
    else
      per_token += linear_macs(L.router) + mlp_macs(L.shared) +
                   // K experts per token, this rank's share of them on average
                   (L.experts.empty() ? 0.0
                                      : c.num_experts_per_tok * mlp_macs(L.experts[0]) *
                                            double(L.experts.size()) / c.n_routed_experts);
    const double per_pair = H * double(c.d_qk() + c.v_head_dim);
    // The last layer of a model of several (model_forward.cc: decoder_layer's `keep`): kv_a on
    // every token, the rest on the last token alone, whose query meets all T keys.
    if (i + 1 == m.layers.size() && i > 0)
      macs += (T - 1) * kv_a + per_token + T * per_pair;
    else
      macs += T * per_token + pairs * per_pair;
  }
  return 2 * macs;
}

DType Model::lm_head_dtype() const {
  const DType t = impl_->lm_head.dtype;
  return dtype_is_row_interleaved(t) ? r16_file_dtype(t) : t;
}

Model::RepackStats Model::repack_stats() const {
  return impl_->repack_stats;
}

int64_t Model::active_weight_bytes_per_token() const {
  const Impl& m = *impl_;
  const ModelConfig& c = m.weights.config;
  int64_t total =
      linear_bytes(m.lm_head) + linear_bytes(m.embed) / std::max<int64_t>(1, m.embed.out);
  for (size_t i = 0; i < m.layers.size(); ++i) {
    const LayerRuntime& L = m.layers[i];
    total += linear_bytes(L.q_proj) + linear_bytes(L.q_a) + linear_bytes(L.q_b) +
             linear_bytes(L.kv_a) + linear_bytes(L.o_proj);
    for (size_t h = 0; h < L.absorbed.uk_t.size(); ++h)  // the absorbed path's per-head weights
      total += linear_bytes(L.absorbed.uk_t[h]) + linear_bytes(L.absorbed.uv[h]);
    if (!L.moe) {
      total += mlp_bytes(L.mlp);
    } else {
      total += linear_bytes(L.router) + mlp_bytes(L.shared);
      if (!L.experts.empty())  // this rank's share of the K experts on average
        total += c.num_experts_per_tok * mlp_bytes(L.experts[0]) * int64_t(L.experts.size()) /
                 c.n_routed_experts;
    }
  }
  return total;
}

KvCacheShape Model::cache_shape(int32_t num_blocks, int page_size) const {
  const ModelConfig& c = config();
  KvCacheShape s;
  s.num_layers = c.num_hidden_layers;
  s.num_blocks = num_blocks;
  s.page_size = page_size;
  s.record_bytes = kv_bytes_per_token(impl_->options.kv_dtype, c.kv_lora_rank, c.qk_rope_head_dim);
  s.record_copies = impl_->ranks > 1 && impl_->rank == 0;
  return s;
}

namespace {

// A rank's slices cut inside their GGUF blocks (o_proj's columns of heads narrower than a
// block): held as F32, their products run in FP32 where one rank runs the file's blocks on int8
// activations, so the split's results differ from one rank's by more than the summation order.
// One line per rank naming them (the first few; a model's layers usually repeat one name).
void warn_widened(const std::string& dir, const std::vector<std::string>& widened, int rank,
                  int ranks) {
  if (widened.empty()) return;
  constexpr size_t kNamed = 3;
  std::string names;
  for (size_t i = 0; i < std::min(widened.size(), kNamed); ++i) {
    std::string_view w = widened[i];
    if (w.starts_with(dir + ": ")) w.remove_prefix(dir.size() + 2);
    names += (i ? "; " : "") + std::string(w);
  }
  if (widened.size() > kNamed) names += fmt::format("; and {} more", widened.size() - kNamed);
  fmt::print(stderr,
             "warning: rank {} of {}: {}: {} weight slice{} cut inside {} GGUF blocks, held as F32 "
             "(FP32 products, not the int8 ones of one rank: results may differ from one rank's "
             "beyond the summation order): {}\n",
             rank, ranks, dir, widened.size(), widened.size() == 1 ? "" : "s",
             widened.size() == 1 ? "its" : "their", names);
}

// This process's part of the model (all of it when alone).
Result<std::unique_ptr<Model::Impl>> load_impl(const std::string& dir,
                                               const RuntimeOptions& options) {
  if (options.backend != "cpu" && options.backend != "ref")
    return invalid_argument(
        fmt::format("backend must be \"cpu\" or \"ref\", got \"{}\"", options.backend));
  if (options.max_context < 0)
    return invalid_argument(fmt::format("max context {} < 0", options.max_context));
  if (options.weight_dtype && *options.weight_dtype != DType::kQ8_0)
    return invalid_argument(fmt::format("weight dtype {}: weights can be requantised as q8_0 only",
                                        dtype_name(*options.weight_dtype)));
  auto impl = std::make_unique<Model::Impl>();
  if (options.comm && options.comm->size() > 1) {
    impl->comm = options.comm;
    impl->rank = options.comm->rank();
    impl->ranks = options.comm->size();
  }
  CheckpointOptions checkpoint_options;
  // Decode reads every active weight each step and, over many steps, every expert: faulting the
  // pages in lazily cost a page fault per 64 KiB of weights during the first tokens. Across
  // ranks each copies only its slices (touching those pages alone). Weights to be repacked are
  // read once by the repack, so then the file is not paged in whole first (repack_weights pages
  // in what stays a view of it).
  checkpoint_options.populate =
      impl->ranks == 1 && !options.repack_weights && !options.weight_dtype;
  MLA_ASSIGN_OR_RETURN(impl->weights, load_model_weights(dir, checkpoint_options));
  const ModelConfig& c = impl->weights.config;
  if (c.hidden_act != "silu")
    return unimplemented(fmt::format("{}/config.json: hidden_act \"{}\" (only silu is supported)",
                                     dir, c.hidden_act));
  impl->options = options;
  const int N = impl->ranks;
  const bool experts_split = c.is_moe() && options.moe_split == MoeSplit::kExperts;
  if (c.num_attention_heads % N != 0 || (experts_split && c.n_routed_experts % N != 0))
    return invalid_argument(fmt::format(
        "{}: the model cannot be split over {} ranks: its {} attention heads{} must be a "
        "multiple of the rank count",
        dir, N, c.num_attention_heads,
        experts_split ? fmt::format(" and {} routed experts", c.n_routed_experts) : ""));
  impl->heads = c.num_attention_heads / N;
  impl->max_context = options.max_context > 0
                          ? options.max_context
                          : std::min<int64_t>(c.max_position_embeddings, kDefaultMaxContext);
  if (c.max_position_embeddings > 0)
    impl->max_context = std::min<int64_t>(impl->max_context, c.max_position_embeddings);
  const RopeConfig rope = rope_config_of(c, impl->max_context);
  MLA_ASSIGN_OR_RETURN(impl->rope, make_rope_table(rope, impl->max_context));
  impl->softmax_scale = float(ref::mla_softmax_scale(c.d_qk(), rope.scaling));
  impl->embed_scale = float(c.scale_emb);
  impl->residual_scale = float(c.residual_scale());
  impl->logits_divisor = float(c.logits_divisor());
  if (c.is_moe()) {
    MLA_ASSIGN_OR_RETURN(impl->routing, moe_routing_from_config(c));
  }
  impl->layers.reserve(size_t(c.num_hidden_layers));
  for (size_t i = 0; i < impl->weights.layers.size(); ++i) {
    MLA_ASSIGN_OR_RETURN(
        LayerRuntime L,
        prepare_layer(impl->weights.layers[i], c,
                      stored_head_weights(impl->weights.checkpoint, int(i)),
                      {impl->rank, N, &impl->slices, fmt::format("{}: layer {} ", dir, i),
                       options.moe_split == MoeSplit::kWidth}));
    impl->layers.push_back(std::move(L));
  }
  impl->final_norm = widen_vector(impl->weights.norm);
  impl->embed = linear_of(impl->weights.embed_tokens, c);
  impl->lm_head = linear_of(impl->weights.lm_head, c);
  // lm_head by vocabulary rows across ranks (the leader gathers the logits); the embedding table
  // stays a view of the file on every rank, one row read per token.
  for (int q = 0; q < N; ++q) impl->vocab_counts.push_back(split_range(c.vocab_size, N, q).size());
  if (N > 1) {
    MLA_ASSIGN_OR_RETURN(impl->lm_head,
                         slice_linear(impl->lm_head, split_range(c.vocab_size, N, impl->rank),
                                      {0, impl->lm_head.in}, impl->slices, dir + ": lm_head"));
  }
  if (options.lm_head_dtype && *options.lm_head_dtype != impl->lm_head.dtype) {
    MLA_ASSIGN_OR_RETURN(impl->lm_head_store,
                         requantize_weight(impl->lm_head, *options.lm_head_dtype,
                                           default_thread_pool(), dir + ": lm_head"));
    impl->slices.release(impl->lm_head.data);
    impl->lm_head = impl->lm_head_store.weight;
  }
  if (options.repack_weights || options.weight_dtype)
    MLA_RETURN_IF_ERROR(repack_weights(*impl, dir));
  // Products held in a block format (requantised by --weight-dtype q8_0, or a GGUF file's) run
  // on int8: the decompressed prefill's tiles follow them
  // (RuntimeOptions::prefill_attention_dtype).
  if (!options.prefill_attention_dtype && options.attention_q_dtype == DType::kBF16 &&
      !impl->layers.empty()) {
    const DType o = impl->layers[0].o_proj.dtype;
    if (dtype_is_ggml_block(o) || dtype_is_ggml_repack(o))
      impl->options.prefill_attention_dtype = DType::kI8;
  }
  warn_widened(dir, impl->slices.widened, impl->rank, N);
  return impl;
}

}  // namespace

Result<std::unique_ptr<Model>> Model::load(const std::string& dir, const RuntimeOptions& options) {
  Result<std::unique_ptr<Impl>> impl = load_impl(dir, options);
  // Across ranks, every rank learns whether all loaded: the first failure, naming its rank.
  if (options.comm && options.comm->size() > 1) {
    const Status all = options.comm->agree(impl.status());
    if (!all.ok()) return all;
  }
  if (!impl.ok()) return impl.status();
  return std::unique_ptr<Model>(new Model(std::move(*impl)));
}

}  // namespace mla
