// open_gguf_model: GGUF metadata → config.json keys, GGUF tensor names → Hugging Face names,
// merged expert tensors → per-expert views, attn_k_b + attn_v_b → kv_b_proj.
#include "model/gguf_checkpoint.h"

#include <fmt/format.h>

#include <charconv>
#include <cstring>
#include <optional>
#include <unordered_map>

#include "core/ggml_quant.h"
#include "model/weight_layout.h"

namespace mla {
namespace {

using Json = nlohmann::json;

bool is_integer(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kU16:
    case GgufType::kI16:
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kBool:
      return true;
    default:
      return false;
  }
}

// Reads `<arch>.<key>` (or a full key) as the type config.json wants, with the file and the key
// in every error. A per-layer array (some converters write head counts that way) is accepted
// when all its elements agree.
class Meta {
 public:
  Meta(const GgufFile& f, std::string arch) : f_(f), arch_(std::move(arch)) {}

  std::string key(std::string_view k) const { return arch_ + "." + std::string(k); }

  Result<std::optional<int64_t>> int_of(const std::string& full) const {
    const GgufValue* v = f_.meta(full);
    if (!v) return std::optional<int64_t>();
    if (is_integer(v->type)) return std::optional<int64_t>(v->i);
    if (v->is_array() && is_integer(v->elem_type) && !v->ints.empty()) {
      for (int64_t x : v->ints)
        if (x != v->ints[0])
          return unimplemented(
              fmt::format("{}: {} differs between layers ({} and {}), which "
                          "the DeepSeek architectures never do",
                          f_.path(), full, v->ints[0], x));
      return std::optional<int64_t>(v->ints[0]);
    }
    return invalid_argument(fmt::format("{}: metadata {} must be an integer", f_.path(), full));
  }
  Result<int64_t> need_int(std::string_view k) const {
    MLA_ASSIGN_OR_RETURN(std::optional<int64_t> v, int_of(key(k)));
    if (!v)
      return invalid_argument(
          fmt::format("{}: metadata {} is missing (required for {})", f_.path(), key(k), arch_));
    return *v;
  }
  Result<std::optional<double>> float_of(std::string_view k) const {
    const GgufValue* v = f_.meta(key(k));
    if (!v) return std::optional<double>();
    if (v->type == GgufType::kF32 || v->type == GgufType::kF64) return std::optional<double>(v->f);
    if (is_integer(v->type)) return std::optional<double>(double(v->i));
    return invalid_argument(fmt::format("{}: metadata {} must be a number", f_.path(), key(k)));
  }
  std::optional<std::string> string_of(const std::string& full) const {
    const GgufValue* v = f_.meta(full);
    if (!v || v->type != GgufType::kString) return std::nullopt;
    return v->s;
  }

 private:
  const GgufFile& f_;
  std::string arch_;
};

// GGUF per-layer suffix → Hugging Face name after "model.layers.N.".
const std::unordered_map<std::string_view, std::string_view>& layer_names() {
  static const std::unordered_map<std::string_view, std::string_view> m = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_q_a.weight", "self_attn.q_a_proj.weight"},
      {"attn_q_a_norm.weight", "self_attn.q_a_layernorm.weight"},
      {"attn_q_b.weight", "self_attn.q_b_proj.weight"},
      {"attn_kv_a_mqa.weight", "self_attn.kv_a_proj_with_mqa.weight"},
      {"attn_kv_a_norm.weight", "self_attn.kv_a_layernorm.weight"},
      {"attn_kv_b.weight", "self_attn.kv_b_proj.weight"},
      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"},
      {"ffn_gate_inp.weight", "mlp.gate.weight"},
      {"exp_probs_b.bias", "mlp.gate.e_score_correction_bias"},
      {"ffn_gate_shexp.weight", "mlp.shared_experts.gate_proj.weight"},
      {"ffn_up_shexp.weight", "mlp.shared_experts.up_proj.weight"},
      {"ffn_down_shexp.weight", "mlp.shared_experts.down_proj.weight"},
  };
  return m;
}

// "blk.N.rest" → (N, rest).
std::optional<std::pair<int64_t, std::string_view>> split_block(std::string_view name) {
  if (name.substr(0, 4) != "blk.") return std::nullopt;
  const size_t dot = name.find('.', 4);
  if (dot == std::string_view::npos) return std::nullopt;
  int64_t n = 0;
  const auto [p, ec] = std::from_chars(name.data() + 4, name.data() + dot, n);
  if (ec != std::errc() || p != name.data() + dot || n < 0) return std::nullopt;
  return std::make_pair(n, name.substr(dot + 1));
}

std::string layer_name(int64_t layer, std::string_view rest) {
  return fmt::format("model.layers.{}.{}", layer, rest);
}

class Builder {
 public:
  Builder(const GgufSet& set, const ModelConfig& c) : set_(set), c_(c) {
    for (uint32_t s = 0; s < set.files().size(); ++s)
      for (const TensorInfo& t : set.files()[s].tensors()) shard_of_[&t] = s;
  }

  Status add_all() {
    for (const auto& [name, info] : set_.tensors()) {
      const std::optional<std::pair<int64_t, std::string_view>> blk = split_block(name);
      if (!blk) {
        if (name == "token_embd.weight")
          add(*info, "model.embed_tokens.weight");
        else if (name == "output_norm.weight")
          add(*info, "model.norm.weight");
        else if (name == "output.weight")
          add(*info, "lm_head.weight");
        else
          add(*info, name);  // unknown: bind_model_weights names it
        continue;
      }
      const auto [layer, rest] = *blk;
      const auto it = layer_names().find(rest);
      if (it != layer_names().end()) {
        add(*info, layer_name(layer, it->second));
      } else if (rest == "ffn_gate_exps.weight" || rest == "ffn_up_exps.weight" ||
                 rest == "ffn_down_exps.weight") {
        MLA_RETURN_IF_ERROR(add_experts(*info, layer, rest.substr(4, rest.find('_', 4) - 4)));
      } else if (rest == "attn_k_b.weight" || rest == "attn_v_b.weight") {
        split_kv_b_[layer][rest == "attn_k_b.weight" ? 0 : 1] = info;
      } else {
        // MTP layers (blk.N with N past the trunk) keep a model.layers.N name, which the binder
        // skips; anything else is reported there as unexpected.
        add(*info, layer >= c_.num_hidden_layers ? layer_name(layer, rest) : name);
      }
    }
    for (const auto& [layer, kv] : split_kv_b_) MLA_RETURN_IF_ERROR(rebuild_kv_b(layer, kv));
    // Two GGUF tensors for one Hugging Face name (attn_kv_b beside attn_k_b / attn_v_b, an expert
    // tensor both merged and not) would leave one of them unused without a word.
    std::unordered_map<std::string_view, const CheckpointTensorInfo*> seen;
    for (const CheckpointTensorInfo& t : out_)
      if (auto [it, fresh] = seen.try_emplace(t.info.name, &t); !fresh)
        return invalid_argument(fmt::format("{}: two tensors of the file give {}",
                                            set_.first().path(), quote_name(t.info.name)));
    return Status();
  }

  std::deque<CheckpointTensorInfo> take_tensors() { return std::move(out_); }
  std::vector<AlignedBuffer<uint8_t>> take_owned() { return std::move(owned_); }
  std::map<int64_t, SplitKvB> split_kv_b() const {
    std::map<int64_t, SplitKvB> out;
    for (const auto& [layer, kv] : split_kv_b_) out[layer] = {kv[0], kv[1]};
    return out;
  }

 private:
  void add(const TensorInfo& t, std::string hf) {
    CheckpointTensorInfo c{t, shard_of_.at(&t)};
    c.info.name = std::move(hf);
    out_.push_back(std::move(c));
  }

  // ffn_{gate,up,down}_exps: [E, rows, in] → E views [rows, in] named
  // model.layers.N.mlp.experts.e.{gate,up,down}_proj.weight.
  Status add_experts(const TensorInfo& t, int64_t layer, std::string_view which) {
    const int64_t E = c_.n_routed_experts;
    if (t.shape.size() != 3 || t.shape[0] != E)
      return invalid_argument(fmt::format(
          "{}: tensor {} has shape {}, expected [n_routed_experts = {}, rows, in]",
          set_.files()[shard_of_.at(&t)].path(), quote_name(t.name), shape_text(t.shape), E));
    const uint64_t slice = uint64_t(dtype_bytes(t.dtype, t.shape[2])) * uint64_t(t.shape[1]);
    for (int64_t e = 0; e < E; ++e) {
      CheckpointTensorInfo c{t, shard_of_.at(&t)};
      c.info.name = layer_name(layer, fmt::format("mlp.experts.{}.{}_proj.weight", e, which));
      c.info.shape = {t.shape[1], t.shape[2]};
      c.info.numel = t.shape[1] * t.shape[2];
      c.info.byte_size = slice;
      c.info.byte_offset = t.byte_offset + uint64_t(e) * slice;
      c.info.data = t.data + uint64_t(e) * slice;
      out_.push_back(std::move(c));
    }
    return Status();
  }

  // attn_k_b [H, r, d_n] (W_UK[h]ᵀ per head) and attn_v_b [H, d_v, r] (W_UV[h]) → kv_b_proj
  // [H·(d_n + d_v), r] FP32, per head its d_n W_UK rows then its d_v W_UV rows.
  Status rebuild_kv_b(int64_t layer, const std::array<const TensorInfo*, 2>& kv) {
    const int64_t H = c_.num_attention_heads, r = c_.kv_lora_rank, dn = c_.qk_nope_head_dim,
                  dv = c_.v_head_dim;
    const std::vector<int64_t> want_k = {H, r, dn}, want_v = {H, dv, r};
    for (int i = 0; i < 2; ++i) {
      const std::vector<int64_t>& want = i == 0 ? want_k : want_v;
      // ik_llama.cpp writes them flattened to 2-D, [H·r, d_n] and [H·d_v, r]: the same rows.
      if (kv[i] && kv[i]->shape.size() == 2 && kv[i]->shape[0] == want[0] * want[1] &&
          kv[i]->shape[1] == want[2])
        continue;
      const char* gguf = i == 0 ? "attn_k_b" : "attn_v_b";
      if (!kv[i])
        return not_found(fmt::format("{}: blk.{}.{}.weight is missing (the layer has its pair)",
                                     set_.first().path(), layer, gguf));
      if (kv[i]->shape != want)
        return invalid_argument(
            fmt::format("{}: tensor {} has shape {}, expected {} = {}", set_.first().path(),
                        quote_name(kv[i]->name), shape_text(kv[i]->shape), shape_text(want),
                        i == 0 ? "[H, r, d_n] (or [H*r, d_n])" : "[H, d_v, r] (or [H*d_v, r])"));
    }
    const int64_t rows = H * (dn + dv);
    MLA_ASSIGN_OR_RETURN(AlignedBuffer<uint8_t> buf,
                         AlignedBuffer<uint8_t>::allocate(
                             size_t(rows * r) * 4, fmt::format("kv_b_proj of layer {}", layer)));
    float* dst = reinterpret_cast<float*>(buf.data());
    std::vector<float> row(size_t(std::max(r, dn)));
    for (int64_t h = 0; h < H; ++h) {
      float* head = dst + h * (dn + dv) * r;
      for (int64_t j = 0; j < r; ++j) {  // k_b row (h, j) = column j of W_UK[h]
        const uint8_t* src =
            kv[0]->data + uint64_t(h * r + j) * uint64_t(dtype_bytes(kv[0]->dtype, dn));
        MLA_RETURN_IF_ERROR(dequantize_row(kv[0]->dtype, src, dn, row.data()));
        for (int64_t i = 0; i < dn; ++i) head[i * r + j] = row[size_t(i)];
      }
      for (int64_t i = 0; i < dv; ++i) {
        const uint8_t* src =
            kv[1]->data + uint64_t(h * dv + i) * uint64_t(dtype_bytes(kv[1]->dtype, r));
        MLA_RETURN_IF_ERROR(dequantize_row(kv[1]->dtype, src, r, head + (dn + i) * r));
      }
    }
    CheckpointTensorInfo c{*kv[0], shard_of_.at(kv[0])};
    c.info.name = layer_name(layer, "self_attn.kv_b_proj.weight");
    c.info.dtype = DType::kF32;
    c.info.shape = {rows, r};
    c.info.numel = rows * r;
    c.info.byte_size = uint64_t(rows * r) * 4;
    c.info.byte_offset = 0;
    c.info.data = buf.data();
    out_.push_back(std::move(c));
    owned_.push_back(std::move(buf));
    return Status();
  }

  const GgufSet& set_;
  const ModelConfig& c_;
  std::unordered_map<const TensorInfo*, uint32_t> shard_of_;
  std::map<int64_t, std::array<const TensorInfo*, 2>> split_kv_b_;
  std::deque<CheckpointTensorInfo> out_;
  std::vector<AlignedBuffer<uint8_t>> owned_;
};

}  // namespace

bool is_gguf_path(std::string_view path) {
  return path.size() >= 5 && path.substr(path.size() - 5) == ".gguf";
}

Result<Json> gguf_config_json(const GgufFile& f, const GgufSet& tensors) {
  const GgufValue* a = f.meta("general.architecture");
  if (!a || a->type != GgufType::kString)
    return invalid_argument(fmt::format("{}: metadata general.architecture is missing", f.path()));
  if (a->s != "deepseek2")
    return unimplemented(
        fmt::format("{}: architecture \"{}\" is not supported (mla runs llama.cpp's \"deepseek2\": "
                    "DeepSeek-V2 / V3 / R1, Kimi-K2, Moonlight)",
                    f.path(), a->s.substr(0, 64)));
  const Meta m(f, a->s);
  Json j;
  MLA_ASSIGN_OR_RETURN(const int64_t blocks, m.need_int("block_count"));
  MLA_ASSIGN_OR_RETURN(const std::optional<int64_t> nextn, m.int_of(m.key("nextn_predict_layers")));
  j["num_hidden_layers"] = blocks - nextn.value_or(0);
  j["num_nextn_predict_layers"] = nextn.value_or(0);
  MLA_ASSIGN_OR_RETURN(j["hidden_size"], m.need_int("embedding_length"));
  MLA_ASSIGN_OR_RETURN(j["num_attention_heads"], m.need_int("attention.head_count"));
  MLA_ASSIGN_OR_RETURN(const std::optional<int64_t> q_lora,
                       m.int_of(m.key("attention.q_lora_rank")));
  j["q_lora_rank"] = q_lora && *q_lora > 0 ? Json(*q_lora) : Json(nullptr);
  MLA_ASSIGN_OR_RETURN(j["kv_lora_rank"], m.need_int("attention.kv_lora_rank"));
  MLA_ASSIGN_OR_RETURN(const int64_t d_r, m.need_int("rope.dimension_count"));
  j["qk_rope_head_dim"] = d_r;
  // Files since the split k_b / v_b carry the per-head dims in *_mla keys (key_length is then
  // r + d_r, the MQA view); older ones in key_length / value_length.
  MLA_ASSIGN_OR_RETURN(const std::optional<int64_t> k_mla,
                       m.int_of(m.key("attention.key_length_mla")));
  MLA_ASSIGN_OR_RETURN(const std::optional<int64_t> v_mla,
                       m.int_of(m.key("attention.value_length_mla")));
  MLA_ASSIGN_OR_RETURN(const int64_t k_len,
                       k_mla ? Result<int64_t>(*k_mla) : m.need_int("attention.key_length"));
  MLA_ASSIGN_OR_RETURN(const int64_t v_len,
                       v_mla ? Result<int64_t>(*v_mla) : m.need_int("attention.value_length"));
  j["qk_nope_head_dim"] = k_len - d_r;
  j["v_head_dim"] = v_len;
  MLA_ASSIGN_OR_RETURN(j["intermediate_size"], m.need_int("feed_forward_length"));
  MLA_ASSIGN_OR_RETURN(const std::optional<int64_t> experts, m.int_of(m.key("expert_count")));
  if (experts && *experts > 0) {
    j["n_routed_experts"] = *experts;
    MLA_ASSIGN_OR_RETURN(j["moe_intermediate_size"], m.need_int("expert_feed_forward_length"));
    MLA_ASSIGN_OR_RETURN(j["num_experts_per_tok"], m.need_int("expert_used_count"));
    MLA_ASSIGN_OR_RETURN(const std::optional<int64_t> shared,
                         m.int_of(m.key("expert_shared_count")));
    j["n_shared_experts"] = shared.value_or(0);
    MLA_ASSIGN_OR_RETURN(const std::optional<int64_t> dense,
                         m.int_of(m.key("leading_dense_block_count")));
    j["first_k_dense_replace"] = dense.value_or(0);
    MLA_ASSIGN_OR_RETURN(const std::optional<double> scale, m.float_of("expert_weights_scale"));
    j["routed_scaling_factor"] = scale.value_or(1.0);
    MLA_ASSIGN_OR_RETURN(const std::optional<int64_t> norm, m.int_of(m.key("expert_weights_norm")));
    j["norm_topk_prob"] = norm.value_or(0) != 0;
    // expert_gating_func: 1 softmax, 2 sigmoid; files from before the key are V2 (softmax).
    MLA_ASSIGN_OR_RETURN(const std::optional<int64_t> gating,
                         m.int_of(m.key("expert_gating_func")));
    if (gating && *gating != 1 && *gating != 2)
      return unimplemented(fmt::format("{}: {} = {} (only 1 softmax and 2 sigmoid are known)",
                                       f.path(), m.key("expert_gating_func"), *gating));
    j["scoring_func"] = gating.value_or(1) == 2 ? "sigmoid" : "softmax";
    MLA_ASSIGN_OR_RETURN(const std::optional<int64_t> groups,
                         m.int_of(m.key("expert_group_count")));
    MLA_ASSIGN_OR_RETURN(const std::optional<int64_t> groups_used,
                         m.int_of(m.key("expert_group_used_count")));
    j["n_group"] = std::max<int64_t>(1, groups.value_or(1));
    j["topk_group"] = std::max<int64_t>(1, groups_used.value_or(1));
    // The routing method is not in the metadata: V3's bias tensor means noaux_tc, V2's groups
    // group_limited_greedy, V2-Lite (one group) greedy.
    const bool bias =
        tensors.find("blk." + std::to_string(dense.value_or(0)) + ".exp_probs_b.bias") != nullptr;
    j["topk_method"] = bias                              ? "noaux_tc"
                       : j["n_group"].get<int64_t>() > 1 ? "group_limited_greedy"
                                                         : "greedy";
  }
  MLA_ASSIGN_OR_RETURN(const std::optional<double> eps,
                       m.float_of("attention.layer_norm_rms_epsilon"));
  j["rms_norm_eps"] = eps.value_or(1e-6);
  MLA_ASSIGN_OR_RETURN(const std::optional<double> theta, m.float_of("rope.freq_base"));
  j["rope_theta"] = theta.value_or(10000.0);
  MLA_ASSIGN_OR_RETURN(j["max_position_embeddings"], m.need_int("context_length"));
  const std::optional<std::string> scaling = m.string_of(m.key("rope.scaling.type"));
  if (scaling && *scaling == "yarn") {
    Json y = {{"type", "yarn"}};
    MLA_ASSIGN_OR_RETURN(const std::optional<double> factor, m.float_of("rope.scaling.factor"));
    y["factor"] = factor.value_or(1.0);
    MLA_ASSIGN_OR_RETURN(const std::optional<int64_t> orig,
                         m.int_of(m.key("rope.scaling.original_context_length")));
    if (orig) y["original_max_position_embeddings"] = *orig;
    // The converter stores 0.1 · mscale_all_dim; the released models have mscale equal to it.
    MLA_ASSIGN_OR_RETURN(const std::optional<double> log_mul,
                         m.float_of("rope.scaling.yarn_log_multiplier"));
    if (log_mul) y["mscale"] = y["mscale_all_dim"] = *log_mul / 0.1;
    MLA_ASSIGN_OR_RETURN(const std::optional<double> fast,
                         m.float_of("rope.scaling.yarn_beta_fast"));
    MLA_ASSIGN_OR_RETURN(const std::optional<double> slow,
                         m.float_of("rope.scaling.yarn_beta_slow"));
    if (fast) y["beta_fast"] = *fast;
    if (slow) y["beta_slow"] = *slow;
    j["rope_scaling"] = y;
  } else if (scaling && *scaling != "none") {
    return unimplemented(fmt::format("{}: {} = \"{}\" is not supported (none or yarn)", f.path(),
                                     m.key("rope.scaling.type"), scaling->substr(0, 32)));
  }
  MLA_ASSIGN_OR_RETURN(const std::optional<int64_t> vocab, m.int_of(m.key("vocab_size")));
  const TensorInfo* embd = tensors.find("token_embd.weight");
  if (vocab)
    j["vocab_size"] = *vocab;
  else if (embd && embd->shape.size() == 2)
    j["vocab_size"] = embd->shape[0];
  else
    return invalid_argument(fmt::format("{}: no {} and no token_embd.weight to size the vocabulary",
                                        f.path(), m.key("vocab_size")));
  j["tie_word_embeddings"] = tensors.find("output.weight") == nullptr;
  MLA_ASSIGN_OR_RETURN(const std::optional<int64_t> bos, m.int_of("tokenizer.ggml.bos_token_id"));
  MLA_ASSIGN_OR_RETURN(const std::optional<int64_t> eos, m.int_of("tokenizer.ggml.eos_token_id"));
  if (bos) j["bos_token_id"] = *bos;
  if (eos) j["eos_token_id"] = *eos;
  const std::optional<std::string> pre = m.string_of("tokenizer.ggml.pre");
  const bool v3 = j.value("scoring_func", "") == "sigmoid";
  j["model_type"] = pre && *pre == "kimi-k2" ? "kimi_k2" : v3 ? "deepseek_v3" : "deepseek_v2";
  j["hidden_act"] = "silu";
  j["torch_dtype"] = "bfloat16";
  return j;
}

Result<ModelConfig> gguf_model_config(const std::string& path) {
  MLA_ASSIGN_OR_RETURN(GgufSet set, GgufSet::open(path));
  MLA_ASSIGN_OR_RETURN(Json j, gguf_config_json(set.first(), set));
  return parse_model_config(j.dump(), set.first().path() + " (metadata)");
}

Result<GgufModel> open_gguf_model(const std::string& path) {
  MLA_ASSIGN_OR_RETURN(GgufSet set, GgufSet::open(path));
  auto shared = std::make_shared<const GgufSet>(std::move(set));
  MLA_ASSIGN_OR_RETURN(Json j, gguf_config_json(shared->first(), *shared));
  MLA_ASSIGN_OR_RETURN(ModelConfig config,
                       parse_model_config(j.dump(), shared->first().path() + " (metadata)"));
  Builder b(*shared, config);
  MLA_RETURN_IF_ERROR(b.add_all());
  Checkpoint ck =
      Checkpoint::from_gguf(path, shared, b.take_tensors(), b.take_owned(), b.split_kv_b());
  return GgufModel{std::move(config), std::move(ck)};
}

}  // namespace mla
