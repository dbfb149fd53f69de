// load_model_weights: config + checkpoint → checked, per-layer ModelWeights (docs/RELIABILITY.md
// §Checklist R18-R19), with unknown tensors rejected and MTP / inv_freq tensors skipped.
#include "model/model_weights.h"

#include <fmt/format.h>

#include <unordered_map>
#include <unordered_set>

#include "model/gguf_checkpoint.h"
#include "model/weight_layout.h"

namespace mla {
namespace {

// The expected list is built only when it cannot be much longer than the files' own tensor table,
// so a config with absurd layer or expert counts costs nothing before it is refused.
constexpr int64_t kExpectedSlack = 4096;

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

const char* role_text(WeightRole r) {
  switch (r) {
    case WeightRole::kLinear:
      return "a linear weight";
    case WeightRole::kNorm:
      return "a norm weight";
    case WeightRole::kEmbedding:
      return "an embedding / lm_head weight";
    case WeightRole::kRouter:
      return "a router weight";
    case WeightRole::kRouterBias:
      return "a router bias";
  }
  return "a tensor";
}

class Binder {
 public:
  Binder(const ModelConfig& c, const Checkpoint& ck) : c_(c), ck_(ck) {}

  const std::string& path_of(const CheckpointTensor& t) const { return ck_.file_of(t); }

  // Checks one expected tensor and records it (and its scale) as used.
  Status bind(const ExpectedTensor& e) {
    const CheckpointTensor* t = ck_.find(e.name);
    if (!t)
      return not_found(fmt::format("{}: tensor {} ({} = {}) is missing from the checkpoint",
                                   ck_.dir(), quote_name(e.name), e.rule, shape_text(e.shape)));
    const TensorInfo& info = *t->info;
    if (info.shape != e.shape)
      return invalid_argument(fmt::format("{}: tensor {} has shape {}, expected {} = {}",
                                          path_of(*t), quote_name(e.name), shape_text(info.shape),
                                          shape_text(e.shape), e.rule));
    const bool fp8 = info.dtype == DType::kF8E4M3;
    const bool plain =
        info.dtype == DType::kBF16 || info.dtype == DType::kF16 || info.dtype == DType::kF32;
    // GGUF block formats (Q8_0, Q4_K, ...) carry their scales inside the blocks: any matrix may
    // have one (llama.cpp quantises embeddings and keeps the router F32, but need not).
    const bool matrix = e.role == WeightRole::kLinear || e.role == WeightRole::kEmbedding ||
                        e.role == WeightRole::kRouter;
    const bool block = dtype_is_ggml_block(info.dtype) && matrix;
    if (!plain && !block && !(fp8 && e.role == WeightRole::kLinear))
      return invalid_argument(
          fmt::format("{}: tensor {} has dtype {}; {} must be BF16, F16, F32{}", path_of(*t),
                      quote_name(e.name), dtype_name(info.dtype), role_text(e.role),
                      e.role == WeightRole::kLinear ? ", F8_E4M3 or a GGUF block format"
                      : matrix                      ? " or a GGUF block format"
                                                    : ""));
    WeightRef ref{&info, nullptr};
    used_.insert(info.name);
    if (fp8) {
      const std::string sname = fp8_scale_name(e.name);
      const std::vector<int64_t> want = fp8_scale_shape(c_, e.shape);
      const CheckpointTensor* s = ck_.find(sname);
      if (!s)
        return not_found(fmt::format("{}: F8_E4M3 weight {} has no {} (its {} F32 block scales)",
                                     path_of(*t), quote_name(e.name), quote_name(sname),
                                     shape_text(want)));
      const TensorInfo& si = *s->info;
      if (si.dtype != DType::kF32 || si.shape != want)
        return invalid_argument(fmt::format(
            "{}: tensor {} is {} {}, expected F32 {} = [ceil({}/{}), ceil({}/{})] for the "
            "F8_E4M3 weight {}",
            path_of(*s), quote_name(sname), dtype_name(si.dtype), shape_text(si.shape),
            shape_text(want), e.shape[0], c_.quantization.weight_block_size[0], e.shape[1],
            c_.quantization.weight_block_size[1], shape_text(e.shape)));
      ref.scale_inv = &si;
      used_.insert(si.name);
    }
    refs_.emplace(e.name, ref);
    return Status();
  }

  // Every tensor not bound must be skippable (MTP layer, inv_freq buffer); returns how many.
  Result<int64_t> check_rest() const {
    int64_t skipped = 0;
    const int64_t first_mtp = c_.num_hidden_layers;
    const int64_t end_mtp = first_mtp + c_.num_nextn_predict_layers;
    for (const auto& [name, t] : ck_.tensors()) {
      if (used_.count(name)) continue;
      const std::optional<int64_t> layer = layer_index_of(name);
      if ((layer && *layer >= first_mtp && *layer < end_mtp) ||
          ends_with(name, ".rotary_emb.inv_freq")) {
        ++skipped;
        continue;
      }
      std::string why;
      if (ends_with(name, "_scale_inv") && refs_.count(name.substr(0, name.size() - 10)))
        why = "a block scale for a weight that is not F8_E4M3";
      else if (layer && *layer >= first_mtp)
        why =
            fmt::format("layer {} is past num_hidden_layers {} and num_nextn_predict_layers is {}",
                        *layer, c_.num_hidden_layers, c_.num_nextn_predict_layers);
      else
        why = fmt::format("a {} model as config.json describes it does not use it",
                          c_.model_type.empty() ? "DeepSeek-family" : c_.model_type);
      return invalid_argument(
          fmt::format("{}: unexpected tensor {}: {}", path_of(t), quote_name(name), why));
    }
    return skipped;
  }

  WeightRef get(const std::string& name) const {
    const auto it = refs_.find(name);
    return it == refs_.end() ? WeightRef{} : it->second;
  }
  MlpWeights mlp(const std::string& p) const {
    return {get(p + "gate_proj.weight"), get(p + "up_proj.weight"), get(p + "down_proj.weight")};
  }

 private:
  const ModelConfig& c_;
  const Checkpoint& ck_;
  std::unordered_set<std::string_view> used_;  // views of names owned by ck_'s shards
  std::unordered_map<std::string, WeightRef> refs_;
};

LayerWeights layer_weights(const ModelConfig& c, const Binder& b, int i) {
  const std::string p = fmt::format("model.layers.{}.", i), a = p + "self_attn.";
  LayerWeights l;
  l.input_layernorm = b.get(p + "input_layernorm.weight");
  l.q_proj = b.get(a + "q_proj.weight");
  l.q_a_proj = b.get(a + "q_a_proj.weight");
  l.q_a_layernorm = b.get(a + "q_a_layernorm.weight");
  l.q_b_proj = b.get(a + "q_b_proj.weight");
  l.kv_a_proj_with_mqa = b.get(a + "kv_a_proj_with_mqa.weight");
  l.kv_a_layernorm = b.get(a + "kv_a_layernorm.weight");
  l.kv_b_proj = b.get(a + "kv_b_proj.weight");
  l.o_proj = b.get(a + "o_proj.weight");
  l.post_attention_layernorm = b.get(p + "post_attention_layernorm.weight");
  l.moe = c.is_moe_layer(i);
  if (!l.moe) {
    l.mlp = b.mlp(p + "mlp.");
    return l;
  }
  l.router = b.get(p + "mlp.gate.weight");
  l.router_bias = b.get(p + "mlp.gate.e_score_correction_bias");
  l.experts.reserve(size_t(c.n_routed_experts));
  for (int e = 0; e < c.n_routed_experts; ++e)
    l.experts.push_back(b.mlp(fmt::format("{}mlp.experts.{}.", p, e)));
  l.shared_experts = b.mlp(p + "mlp.shared_experts.");
  return l;
}

}  // namespace

LinearWeight linear_of(const WeightRef& w, const ModelConfig& c) {
  LinearWeight l;
  if (!w.present()) return l;
  l.dtype = w.weight->dtype;
  l.data = w.weight->data;
  l.out = w.weight->shape[0];
  l.in = w.weight->shape[1];
  if (w.fp8()) {
    l.scale_inv = w.scale_inv->data;
    l.block_rows = c.quantization.weight_block_size[0];
    l.block_cols = c.quantization.weight_block_size[1];
  }
  return l;
}

Result<ModelWeights> bind_model_weights(ModelConfig config, Checkpoint checkpoint) {
  const int64_t want = count_expected_tensors(config);
  const int64_t have = int64_t(checkpoint.tensors().size());
  if (want > have + kExpectedSlack)
    return invalid_argument(fmt::format(
        "{}: config.json implies {} tensors (num_hidden_layers {}, n_routed_experts {}) but the "
        "checkpoint holds only {}",
        checkpoint.dir(), want, config.num_hidden_layers, config.n_routed_experts, have));

  Binder b(config, checkpoint);
  for (const ExpectedTensor& e : expected_tensors(config)) MLA_RETURN_IF_ERROR(b.bind(e));
  MLA_ASSIGN_OR_RETURN(const int64_t skipped, b.check_rest());

  ModelWeights w;
  w.config = std::move(config);
  w.checkpoint = std::move(checkpoint);
  const ModelConfig& c = w.config;
  w.embed_tokens = b.get("model.embed_tokens.weight");
  w.norm = b.get("model.norm.weight");
  w.lm_head = c.tie_word_embeddings ? w.embed_tokens : b.get("lm_head.weight");
  w.layers.reserve(size_t(c.num_hidden_layers));
  for (int i = 0; i < c.num_hidden_layers; ++i) w.layers.push_back(layer_weights(c, b, i));
  w.skipped_tensors = skipped;
  return w;
}

Result<ModelWeights> load_model_weights(const std::string& dir, const CheckpointOptions& options) {
  ModelConfig config;
  Checkpoint checkpoint;
  if (is_gguf_path(dir)) {
    MLA_ASSIGN_OR_RETURN(GgufModel g, open_gguf_model(dir));
    config = std::move(g.config);
    checkpoint = std::move(g.checkpoint);
  } else {
    MLA_ASSIGN_OR_RETURN(config, load_model_config(dir));
    MLA_ASSIGN_OR_RETURN(checkpoint, Checkpoint::open(dir, options));
  }
  MLA_ASSIGN_OR_RETURN(ModelWeights w,
                       bind_model_weights(std::move(config), std::move(checkpoint)));
  // After every check: a checkpoint that is refused is not read through first.
  if (options.populate) MLA_RETURN_IF_ERROR(w.checkpoint.populate(options));
  return w;
}

}  // namespace mla
