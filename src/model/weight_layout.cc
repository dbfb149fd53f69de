// Expected tensor names and shapes per DeepSeek-family config (docs/MODELS.md §Tensors and
// §Checkpoint shapes).
#include "model/weight_layout.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace mla {
namespace {

class Builder {
 public:
  Builder(const ModelConfig& c, std::vector<ExpectedTensor>* out) : c_(c), out_(out) {}

  void add(std::string name, std::vector<int64_t> shape, WeightRole role, int layer,
           const char* rule, bool fp8 = false) {
    out_->push_back({std::move(name), std::move(shape), role, layer, rule, fp8});
  }
  void linear(const std::string& name, int64_t out, int64_t in, int layer, const char* rule) {
    add(name + ".weight", {out, in}, WeightRole::kLinear, layer, rule, true);
  }
  void norm(const std::string& name, int64_t n, int layer, const char* rule) {
    add(name + ".weight", {n}, WeightRole::kNorm, layer, rule);
  }
  void mlp(const std::string& p, int64_t width, int layer, const char* up_rule,
           const char* down_rule) {
    const int64_t d = c_.hidden_size;
    linear(p + "gate_proj", width, d, layer, up_rule);
    linear(p + "up_proj", width, d, layer, up_rule);
    linear(p + "down_proj", d, width, layer, down_rule);
  }

  // One decoder layer under `p` = "model.layers.{i}.".
  void layer(int i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    const int64_t d = c_.hidden_size, h = c_.num_attention_heads, r = c_.kv_lora_rank;
    norm(p + "input_layernorm", d, i, "[D]");
    const std::string a = p + "self_attn.";
    if (c_.has_q_lora()) {
      linear(a + "q_a_proj", c_.q_lora_rank, d, i, "[r_q, D]");
      norm(a + "q_a_layernorm", c_.q_lora_rank, i, "[r_q]");
      linear(a + "q_b_proj", h * c_.d_qk(), c_.q_lora_rank, i, "[H*(d_n+d_r), r_q]");
    } else {
      linear(a + "q_proj", h * c_.d_qk(), d, i, "[H*(d_n+d_r), D]");
    }
    linear(a + "kv_a_proj_with_mqa", r + c_.qk_rope_head_dim, d, i, "[r+d_r, D]");
    norm(a + "kv_a_layernorm", r, i, "[r]");
    linear(a + "kv_b_proj", h * (c_.qk_nope_head_dim + c_.v_head_dim), r, i, "[H*(d_n+d_v), r]");
    linear(a + "o_proj", d, h * c_.v_head_dim, i, "[D, H*d_v]");
    norm(p + "post_attention_layernorm", d, i, "[D]");
    if (!c_.is_moe_layer(i)) {
      mlp(p + "mlp.", c_.intermediate_size, i, "[I, D]", "[D, I]");
      return;
    }
    const int64_t e = c_.n_routed_experts, ie = c_.moe_intermediate_size;
    add(p + "mlp.gate.weight", {e, d}, WeightRole::kRouter, i, "[E, D]");
    if (c_.topk_method == "noaux_tc")
      add(p + "mlp.gate.e_score_correction_bias", {e}, WeightRole::kRouterBias, i, "[E]");
    for (int64_t x = 0; x < e; ++x)
      mlp(fmt::format("{}mlp.experts.{}.", p, x), ie, i, "[I_e, D]", "[D, I_e]");
    if (c_.n_shared_experts > 0)
      mlp(p + "mlp.shared_experts.", ie * c_.n_shared_experts, i, "[S*I_e, D]", "[D, S*I_e]");
  }

 private:
  const ModelConfig& c_;
  std::vector<ExpectedTensor>* out_;
};

}  // namespace

std::vector<ExpectedTensor> expected_tensors(const ModelConfig& c) {
  std::vector<ExpectedTensor> out;
  out.reserve(size_t(count_expected_tensors(c)));
  Builder b(c, &out);
  b.add("model.embed_tokens.weight", {c.vocab_size, c.hidden_size}, WeightRole::kEmbedding, -1,
        "[vocab_size, D]");
  for (int i = 0; i < c.num_hidden_layers; ++i) b.layer(i);
  b.add("model.norm.weight", {c.hidden_size}, WeightRole::kNorm, -1, "[D]");
  if (!c.tie_word_embeddings)
    b.add("lm_head.weight", {c.vocab_size, c.hidden_size}, WeightRole::kEmbedding, -1,
          "[vocab_size, D]");
  return out;
}

int64_t count_expected_tensors(const ModelConfig& c) {
  // Config dims are validated to <= 2^24, so none of these products can overflow int64.
  const int64_t attention = 2 + (c.has_q_lora() ? 3 : 1) + 4;  // both norms, q path, kv path, o
  const int64_t moe = 1 + (c.topk_method == "noaux_tc" ? 1 : 0) + 3 * int64_t(c.n_routed_experts) +
                      (c.n_shared_experts > 0 ? 3 : 0);
  int64_t n = c.tie_word_embeddings ? 2 : 3;
  for (int i = 0; i < c.num_hidden_layers; ++i) n += attention + (c.is_moe_layer(i) ? moe : 3);
  return n;
}

std::vector<ExpectedTensor> mtp_tensors(const ModelConfig& c) {
  std::vector<ExpectedTensor> out;
  Builder b(c, &out);
  const int64_t d = c.hidden_size;
  for (int k = 0; k < c.num_nextn_predict_layers; ++k) {
    const int i = c.num_hidden_layers + k;
    const std::string p = fmt::format("model.layers.{}.", i);
    b.add(p + "embed_tokens.weight", {c.vocab_size, d}, WeightRole::kEmbedding, i,
          "[vocab_size, D]");
    b.add(p + "enorm.weight", {d}, WeightRole::kNorm, i, "[D]");
    b.add(p + "hnorm.weight", {d}, WeightRole::kNorm, i, "[D]");
    b.add(p + "eh_proj.weight", {d, 2 * d}, WeightRole::kLinear, i, "[D, 2*D]");  // BF16 in V3
    b.layer(i);
    b.add(p + "shared_head.norm.weight", {d}, WeightRole::kNorm, i, "[D]");
    b.add(p + "shared_head.head.weight", {c.vocab_size, d}, WeightRole::kEmbedding, i,
          "[vocab_size, D]");
  }
  return out;
}

std::vector<int64_t> fp8_scale_shape(const ModelConfig& c, const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size());
  for (size_t k = 0; k < shape.size(); ++k) {
    const int64_t block = c.quantization.weight_block_size[k < 2 ? k : 1];
    s[k] = shape[k] / block + (shape[k] % block != 0);
  }
  return s;
}

std::string fp8_scale_name(std::string_view weight_name) {
  return std::string(weight_name) + "_scale_inv";
}

std::optional<int64_t> layer_index_of(std::string_view name) {
  constexpr std::string_view kPrefix = "model.layers.";
  if (name.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  name.remove_prefix(kPrefix.size());
  const size_t dot = name.find('.');
  if (dot == 0 || dot == std::string_view::npos || dot > 9) return std::nullopt;
  if (dot > 1 && name[0] == '0') return std::nullopt;
  int64_t v = 0;
  for (size_t k = 0; k < dot; ++k) {
    if (name[k] < '0' || name[k] > '9') return std::nullopt;
    v = v * 10 + (name[k] - '0');
  }
  return v;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

std::string quote_name(std::string_view text) {
  constexpr size_t kMax = 200;
  const bool cut = text.size() > kMax;
  // Escapes quotes, backslashes and control bytes; invalid UTF-8 becomes U+FFFD.
  std::string s = nlohmann::json(std::string(text.substr(0, kMax)))
                      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (cut) s.insert(s.size() - 1, "...");
  return s;
}

}  // namespace mla
