// config.json → ModelConfig: the nlohmann::json adapter (no exception leaves this file), the
// item-17 validation, and the built-in presets.
#include "model/model_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cache/cache_format.h"
#include "core/checked_math.h"
#include "io/json_limits.h"
#include "model/model_rope.h"

namespace mla {
namespace {

using Json = nlohmann::json;

// Upper bound of every dimension-like integer field: far above any real model, low enough that
// products of a few of them cannot overflow int64.
constexpr int64_t kMaxDim = int64_t{1} << 24;
constexpr int64_t kMaxConfigBytes = int64_t{16} << 20;
// MiniCPM3-4B's scalings (docs/MODELS.md §Configs, §MiniCPM3): the preset's, and a config's when it
// leaves the keys out (transformers' MiniCPM3Config defaults).
constexpr double kMiniCpmScaleEmb = 12, kMiniCpmScaleDepth = 1.4;
constexpr int kMiniCpmDimModelBase = 256;

// Integer fields shared by parsing and validation. min is 0 or 1; required fields must be present
// (MoE ones only when n_routed_experts > 0).
enum class Need { kAlways, kIfMoe, kOptional };
struct IntField {
  const char* key;
  int ModelConfig::*member;
  int64_t min;
  Need need;
};
constexpr IntField kIntFields[] = {
    {"hidden_size", &ModelConfig::hidden_size, 1, Need::kAlways},
    {"num_hidden_layers", &ModelConfig::num_hidden_layers, 1, Need::kAlways},
    {"num_attention_heads", &ModelConfig::num_attention_heads, 1, Need::kAlways},
    {"q_lora_rank", &ModelConfig::q_lora_rank, 0, Need::kOptional},  // null or 0: absent
    {"kv_lora_rank", &ModelConfig::kv_lora_rank, 1, Need::kAlways},
    {"qk_nope_head_dim", &ModelConfig::qk_nope_head_dim, 1, Need::kAlways},
    {"qk_rope_head_dim", &ModelConfig::qk_rope_head_dim, 1, Need::kAlways},
    {"v_head_dim", &ModelConfig::v_head_dim, 1, Need::kOptional},  // required but for MiniCPM3
    {"intermediate_size", &ModelConfig::intermediate_size, 1, Need::kAlways},
    {"n_routed_experts", &ModelConfig::n_routed_experts, 0, Need::kOptional},  // null: dense
    {"moe_intermediate_size", &ModelConfig::moe_intermediate_size, 1, Need::kIfMoe},
    {"num_experts_per_tok", &ModelConfig::num_experts_per_tok, 1, Need::kIfMoe},
    {"n_shared_experts", &ModelConfig::n_shared_experts, 0, Need::kOptional},
    {"n_group", &ModelConfig::n_group, 1, Need::kOptional},
    {"topk_group", &ModelConfig::topk_group, 1, Need::kOptional},
    {"first_k_dense_replace", &ModelConfig::first_k_dense_replace, 0, Need::kOptional},
    {"moe_layer_freq", &ModelConfig::moe_layer_freq, 1, Need::kOptional},
    {"num_nextn_predict_layers", &ModelConfig::num_nextn_predict_layers, 0, Need::kOptional},
};

std::string show(const Json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

std::string int_rule(int64_t min, bool too_big, int64_t max) {
  return fmt::format("a {} integer{}", min >= 1 ? "positive" : "non-negative",
                     too_big ? fmt::format(" at most {}", max) : "");
}

bool is_positive_finite(double x) {
  return std::isfinite(x) && x > 0;
}

// Typed, non-throwing access to one JSON object. `prefix` ("" or "text_config.") goes before every
// field name in messages; JSON null counts as absent.
class Reader {
 public:
  Reader(const Json& obj, const std::string& source, std::string prefix)
      : obj_(obj), source_(source), prefix_(std::move(prefix)) {}

  const Json* find(const char* key) const {
    auto it = obj_.find(key);
    return it == obj_.end() || it->is_null() ? nullptr : &*it;
  }
  // Present with the value null (find() takes that for absent).
  bool is_null(const char* key) const {
    auto it = obj_.find(key);
    return it != obj_.end() && it->is_null();
  }
  const std::string& source() const { return source_; }
  std::string name(const std::string& key) const { return "\"" + prefix_ + key + "\""; }
  Status bad(const std::string& key, const std::string& rule, const Json& got) const {
    return invalid_argument(
        fmt::format("{}: field {} must be {}, got {}", source_, name(key), rule, show(got)));
  }
  Status missing(const std::string& key) const {
    return invalid_argument(fmt::format("{}: required field {} is missing", source_, name(key)));
  }

  // Leaves *out as is when the field is absent and not required.
  Status get_int(const char* key, int64_t* out, int64_t min, int64_t max, bool required) const {
    const Json* v = find(key);
    if (!v) return required ? missing(key) : Status();
    if (!v->is_number_integer()) return bad(key, int_rule(min, false, max), *v);
    if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(max))
      return bad(key, int_rule(min, true, max), *v);
    const int64_t value = v->get<int64_t>();
    if (value < min || value > max) return bad(key, int_rule(min, value > max, max), *v);
    *out = value;
    return Status();
  }
  Status get_number(const char* key, double* out, bool positive, bool required) const {
    const Json* v = find(key);
    if (!v) return required ? missing(key) : Status();
    // JSON text cannot hold NaN or Inf (the parser rejects them), so only the sign is checked here.
    if (!v->is_number() || (positive && !(v->get<double>() > 0)))
      return bad(key, positive ? "a positive number" : "a number", *v);
    *out = v->get<double>();
    return Status();
  }
  Status get_bool(const char* key, bool* out) const {
    const Json* v = find(key);
    if (!v) return Status();
    if (!v->is_boolean()) return bad(key, "true or false", *v);
    *out = v->get<bool>();
    return Status();
  }
  Status get_string(const char* key, std::string* out) const {
    const Json* v = find(key);
    if (!v) return Status();
    if (!v->is_string()) return bad(key, "a string", *v);
    *out = v->get<std::string>();
    return Status();
  }
  // A string that must be one of `allowed` (listed in the message).
  Status get_choice(const char* key, std::initializer_list<const char*> allowed,
                    std::string* out) const {
    std::string s = *out;
    MLA_RETURN_IF_ERROR(get_string(key, &s));
    std::string list;
    for (const char* a : allowed) {
      if (s == a) {
        *out = s;
        return Status();
      }
      list += (list.empty() ? "\"" : ", \"") + std::string(a) + "\"";
    }
    return bad(key, "one of " + list, Json(s));
  }
  Reader sub(const char* key, const Json& obj) const { return {obj, source_, prefix_ + key + "."}; }

 private:
  const Json& obj_;
  const std::string& source_;
  std::string prefix_;
};

// A list of positive numbers (LongRoPE's per-pair divisors); the length is checked by
// validate_impl, which knows qk_rope_head_dim.
Status get_factor_list(const Reader& r, const char* key, std::vector<double>* out) {
  const Json* v = r.find(key);
  if (!v) return r.missing(key);
  const char* rule = "a list of positive numbers";
  if (!v->is_array() || v->empty() || v->size() > size_t(kMaxDim)) return r.bad(key, rule, *v);
  for (const Json& x : *v) {
    if (!x.is_number() || !(x.get<double>() > 0)) return r.bad(key, rule, *v);
    out->push_back(x.get<double>());
  }
  return Status();
}

// rope_scaling {"type": "longrope", short_factor, long_factor, original_max_position_embeddings,
// factor?, attention_factor?}: original_max_position_embeddings may also sit at the top level
// (older configs; it wins there, as in transformers' standardize_rope_params), and defaults to
// max_position_embeddings.
Status parse_longrope(const Reader& top, const Reader& r, ModelConfig* c) {
  RopeScalingConfig& y = c->rope_scaling;
  y.type = RopeScalingType::kLongrope;
  y.original_max_position_embeddings = c->max_position_embeddings;
  MLA_RETURN_IF_ERROR(r.get_int("original_max_position_embeddings",
                                &y.original_max_position_embeddings, 1, INT64_MAX, false));
  MLA_RETURN_IF_ERROR(top.get_int("original_max_position_embeddings",
                                  &y.original_max_position_embeddings, 1, INT64_MAX, false));
  y.factor = double(c->max_position_embeddings) / double(y.original_max_position_embeddings);
  MLA_RETURN_IF_ERROR(r.get_number("factor", &y.factor, true, false));
  MLA_RETURN_IF_ERROR(r.get_number("attention_factor", &y.attention_factor, true, false));
  MLA_RETURN_IF_ERROR(get_factor_list(r, "short_factor", &y.short_factor));
  return get_factor_list(r, "long_factor", &y.long_factor);
}

Status parse_rope(const Reader& top, ModelConfig* c) {
  const char* key = top.find("rope_scaling") ? "rope_scaling" : "rope_parameters";
  const Json* rs = top.find(key);
  if (!rs) return Status();
  if (!rs->is_object()) return top.bad(key, "an object or null", *rs);
  const Reader r = top.sub(key, *rs);
  if (!top.find("rope_theta"))
    MLA_RETURN_IF_ERROR(r.get_number("rope_theta", &c->rope_theta, true, false));
  const char* type_key = r.find("rope_type") ? "rope_type" : "type";
  std::string type;
  MLA_RETURN_IF_ERROR(r.get_string(type_key, &type));
  if (type == "default" || (type.empty() && std::string(key) == "rope_parameters")) return Status();
  if (type.empty()) return r.missing("type");
  if (type == "longrope") return parse_longrope(top, r, c);
  if (type != "yarn")
    return unimplemented(fmt::format(
        R"({}: field {} "{}" is not supported (supported: "yarn", "longrope", "default"))",
        r.source(), r.name(type_key), type));
  RopeScalingConfig& y = c->rope_scaling;
  y.type = RopeScalingType::kYarn;
  MLA_RETURN_IF_ERROR(r.get_number("factor", &y.factor, true, true));
  MLA_RETURN_IF_ERROR(r.get_int("original_max_position_embeddings",
                                &y.original_max_position_embeddings, 1, INT64_MAX, false));
  MLA_RETURN_IF_ERROR(r.get_number("beta_fast", &y.beta_fast, false, false));
  MLA_RETURN_IF_ERROR(r.get_number("beta_slow", &y.beta_slow, false, false));
  MLA_RETURN_IF_ERROR(r.get_number("mscale", &y.mscale, false, false));
  return r.get_number("mscale_all_dim", &y.mscale_all_dim, false, false);
}

Status parse_quantization(const Reader& top, const Json& q, const std::string& source,
                          ModelConfig* c) {
  if (!q.is_object()) return top.bad("quantization_config", "an object or null", q);
  const Reader r = top.sub("quantization_config", q);
  std::string method;
  MLA_RETURN_IF_ERROR(r.get_string("quant_method", &method));
  if (method.empty()) return r.missing("quant_method");
  if (method != "fp8")
    return unimplemented(fmt::format("{}: field {} \"{}\" is not supported (supported: \"fp8\")",
                                     source, r.name("quant_method"), method));
  QuantizationConfig& out = c->quantization;
  out.quant_method = QuantMethod::kFp8;
  std::string fmt_name = "e4m3", scale_fmt;
  MLA_RETURN_IF_ERROR(r.get_choice("fmt", {"e4m3"}, &fmt_name));
  MLA_RETURN_IF_ERROR(r.get_string("scale_fmt", &scale_fmt));
  if (!scale_fmt.empty() && scale_fmt != "ue8m0")
    return unimplemented(fmt::format("{}: field {} \"{}\" is not supported (supported: \"ue8m0\")",
                                     source, r.name("scale_fmt"), scale_fmt));
  out.scale_fmt_ue8m0 = !scale_fmt.empty();
  if (const Json* b = r.find("weight_block_size")) {
    const bool ok = b->is_array() && b->size() == 2 && (*b)[0].is_number_integer() &&
                    (*b)[1].is_number_integer() && (*b)[0].get<int64_t>() >= 1 &&
                    (*b)[1].get<int64_t>() >= 1 && (*b)[0].get<int64_t>() <= kMaxDim &&
                    (*b)[1].get<int64_t>() <= kMaxDim;
    if (!ok) return r.bad("weight_block_size", "two positive integers [rows, cols]", *b);
    out.weight_block_size[0] = static_cast<int>((*b)[0].get<int64_t>());
    out.weight_block_size[1] = static_cast<int>((*b)[1].get<int64_t>());
  }
  return Status();
}

Status parse_fields(const Json& lm, const Json& top, const std::string& source, bool nested,
                    ModelConfig* c) {
  const Reader r(lm, source, nested ? "text_config." : "");
  const Reader outer(top, source, "");
  MLA_RETURN_IF_ERROR(r.get_string("model_type", &c->model_type));

  int64_t e = 0;  // n_routed_experts decides which MoE fields are required
  MLA_RETURN_IF_ERROR(r.get_int("n_routed_experts", &e, 0, kMaxDim, false));
  for (const IntField& f : kIntFields) {
    int64_t v = c->*f.member;
    const bool required = f.need == Need::kAlways || (f.need == Need::kIfMoe && e > 0);
    MLA_RETURN_IF_ERROR(r.get_int(f.key, &v, f.min, kMaxDim, required));
    c->*f.member = static_cast<int>(v);
  }
  if (c->v_head_dim == 0) {
    // MiniCPM3 configs leave it out: its modeling code takes hidden_size / num_attention_heads.
    if (c->model_type != "minicpm3") return r.missing("v_head_dim");
    if (c->hidden_size % c->num_attention_heads != 0)
      return invalid_argument(
          fmt::format("{}: without \"v_head_dim\", {} ({}) must be a multiple of {} ({})", source,
                      r.name("hidden_size"), c->hidden_size, r.name("num_attention_heads"),
                      c->num_attention_heads));
    c->v_head_dim = c->hidden_size / c->num_attention_heads;
  }
  if (c->model_type == "minicpm3") {
    // Absent: transformers' MiniCPM3Config defaults (the 4B model's values); JSON null: no-op.
    c->scale_emb = r.is_null("scale_emb") ? 1.0 : kMiniCpmScaleEmb;
    c->scale_depth = r.is_null("scale_depth") ? 0.0 : kMiniCpmScaleDepth;
    c->dim_model_base = r.is_null("dim_model_base") ? 0 : kMiniCpmDimModelBase;
    MLA_RETURN_IF_ERROR(r.get_number("scale_emb", &c->scale_emb, true, false));
    MLA_RETURN_IF_ERROR(r.get_number("scale_depth", &c->scale_depth, true, false));
    int64_t base = c->dim_model_base;
    MLA_RETURN_IF_ERROR(r.get_int("dim_model_base", &base, 1, kMaxDim, false));
    c->dim_model_base = static_cast<int>(base);
  }
  MLA_RETURN_IF_ERROR(r.get_int("vocab_size", &c->vocab_size, 1, INT32_MAX, true));
  MLA_RETURN_IF_ERROR(
      r.get_int("max_position_embeddings", &c->max_position_embeddings, 1, INT64_MAX, true));

  const bool v3_routing = c->model_type == "deepseek_v3" || c->model_type == "kimi_k2";
  c->scoring_func = v3_routing ? "sigmoid" : "softmax";
  c->topk_method = v3_routing ? "noaux_tc" : "greedy";
  MLA_RETURN_IF_ERROR(r.get_choice("scoring_func", {"softmax", "sigmoid"}, &c->scoring_func));
  MLA_RETURN_IF_ERROR(
      r.get_choice("topk_method", {"greedy", "group_limited_greedy", "noaux_tc"}, &c->topk_method));
  MLA_RETURN_IF_ERROR(
      r.get_number("routed_scaling_factor", &c->routed_scaling_factor, true, false));
  MLA_RETURN_IF_ERROR(r.get_bool("norm_topk_prob", &c->norm_topk_prob));
  MLA_RETURN_IF_ERROR(r.get_string("hidden_act", &c->hidden_act));
  MLA_RETURN_IF_ERROR(r.get_number("rms_norm_eps", &c->rms_norm_eps, true, false));
  MLA_RETURN_IF_ERROR(r.get_number("rope_theta", &c->rope_theta, true, false));
  MLA_RETURN_IF_ERROR(parse_rope(r, c));
  MLA_RETURN_IF_ERROR(r.get_bool("tie_word_embeddings", &c->tie_word_embeddings));
  MLA_RETURN_IF_ERROR(r.get_int("bos_token_id", &c->bos_token_id, 0, INT32_MAX, false));
  if (const Json* eos = r.find("eos_token_id")) {
    const Json list = eos->is_array() ? *eos : Json::array({*eos});
    for (const Json& id : list) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
        return r.bad("eos_token_id", "a non-negative integer or a list of them", *eos);
      c->eos_token_ids.push_back(id.get<int64_t>());
    }
  }

  // torch_dtype (newer: dtype) and quantization_config may sit beside text_config, not in it.
  const Reader* dr = &r;
  const char* dtype_key = r.find("torch_dtype") ? "torch_dtype" : "dtype";
  if (nested && !r.find(dtype_key) && (outer.find("torch_dtype") || outer.find("dtype"))) {
    dr = &outer;
    dtype_key = outer.find("torch_dtype") ? "torch_dtype" : "dtype";
  }
  std::string dtype = "bfloat16";
  MLA_RETURN_IF_ERROR(dr->get_choice(dtype_key, {"bfloat16", "float16", "float32"}, &dtype));
  c->torch_dtype = dtype == "float16"   ? DType::kF16
                   : dtype == "float32" ? DType::kF32
                                        : DType::kBF16;
  const Reader& qr = nested && !r.find("quantization_config") ? outer : r;
  if (const Json* q = qr.find("quantization_config"))
    MLA_RETURN_IF_ERROR(parse_quantization(qr, *q, source, c));
  return Status();
}

Status validate_impl(const ModelConfig& c, const std::string& source, const std::string& prefix) {
  auto bad = [&](const char* key, const std::string& rule, const std::string& got) {
    return invalid_argument(
        fmt::format("{}: field \"{}{}\" must be {}, got {}", source, prefix, key, rule, got));
  };
  for (const IntField& f : kIntFields) {
    const int64_t v = c.*f.member;
    if (f.need == Need::kIfMoe && !c.is_moe()) continue;
    if (v < f.min || v > kMaxDim)
      return bad(f.key, int_rule(f.min, v > kMaxDim, kMaxDim), fmt::format("{}", v));
  }
  if (c.vocab_size < 1 || c.vocab_size > INT32_MAX)
    return bad("vocab_size", int_rule(1, c.vocab_size > INT32_MAX, INT32_MAX),
               fmt::format("{}", c.vocab_size));
  if (c.max_position_embeddings < 1)
    return bad("max_position_embeddings", "a positive integer",
               fmt::format("{}", c.max_position_embeddings));
  if (!is_positive_finite(c.rms_norm_eps))
    return bad("rms_norm_eps", "a positive finite number", fmt::format("{}", c.rms_norm_eps));
  if (!is_positive_finite(c.rope_theta))
    return bad("rope_theta", "a positive finite number", fmt::format("{}", c.rope_theta));
  if (c.rope_scaling.type == RopeScalingType::kYarn) {
    const RopeScalingConfig& y = c.rope_scaling;
    if (!is_positive_finite(y.factor))
      return bad("rope_scaling.factor", "a positive finite number", fmt::format("{}", y.factor));
    if (y.original_max_position_embeddings < 1)
      return bad("rope_scaling.original_max_position_embeddings", "a positive integer",
                 fmt::format("{}", y.original_max_position_embeddings));
    for (auto [key, v] : {std::pair{"beta_fast", y.beta_fast},
                          {"beta_slow", y.beta_slow},
                          {"mscale", y.mscale},
                          {"mscale_all_dim", y.mscale_all_dim}})
      if (!std::isfinite(v))
        return bad(fmt::format("rope_scaling.{}", key).c_str(), "a finite number",
                   fmt::format("{}", v));
  }
  if (c.rope_scaling.type == RopeScalingType::kLongrope) {
    const RopeScalingConfig& y = c.rope_scaling;
    if (!is_positive_finite(y.factor))
      return bad("rope_scaling.factor", "a positive finite number", fmt::format("{}", y.factor));
    if (y.original_max_position_embeddings < 1)
      return bad("rope_scaling.original_max_position_embeddings", "a positive integer",
                 fmt::format("{}", y.original_max_position_embeddings));
    if (y.attention_factor != 0.0 && !is_positive_finite(y.attention_factor))
      return bad("rope_scaling.attention_factor", "a positive finite number",
                 fmt::format("{}", y.attention_factor));
    // Without attention_factor, sqrt(1 + ln(factor) / ln(original)) must exist.
    if (!is_positive_finite(longrope_attention(y)))
      return bad("rope_scaling.original_max_position_embeddings",
                 "at least 2 when factor > 1 and attention_factor is absent",
                 fmt::format("{} (factor {})", y.original_max_position_embeddings, y.factor));
    for (auto [key, v] :
         {std::pair{"short_factor", &y.short_factor}, {"long_factor", &y.long_factor}})
      if (int64_t(v->size()) * 2 != c.qk_rope_head_dim ||
          !std::all_of(v->begin(), v->end(), is_positive_finite))
        return bad(
            fmt::format("rope_scaling.{}", key).c_str(),
            fmt::format("qk_rope_head_dim / 2 = {} positive numbers", c.qk_rope_head_dim / 2),
            fmt::format("{} values", v->size()));
  }
  if (!is_positive_finite(c.scale_emb))
    return bad("scale_emb", "a positive finite number", fmt::format("{}", c.scale_emb));
  if (c.scale_depth < 0 || !std::isfinite(c.scale_depth))
    return bad("scale_depth", "a non-negative finite number (0: none)",
               fmt::format("{}", c.scale_depth));
  if (c.dim_model_base < 0 || c.dim_model_base > kMaxDim)
    return bad("dim_model_base", int_rule(1, c.dim_model_base > kMaxDim, kMaxDim),
               fmt::format("{}", c.dim_model_base));
  if (c.is_moe()) {
    auto exceeds = [&](const char* key, int v, const char* limit_key, int limit) {
      return invalid_argument(fmt::format("{}: field \"{}{}\" ({}) must not exceed \"{}{}\" ({})",
                                          source, prefix, key, v, prefix, limit_key, limit));
    };
    if (c.num_experts_per_tok > c.n_routed_experts)
      return exceeds("num_experts_per_tok", c.num_experts_per_tok, "n_routed_experts",
                     c.n_routed_experts);
    if (c.first_k_dense_replace > c.num_hidden_layers)
      return exceeds("first_k_dense_replace", c.first_k_dense_replace, "num_hidden_layers",
                     c.num_hidden_layers);
    if (c.topk_group > c.n_group) return exceeds("topk_group", c.topk_group, "n_group", c.n_group);
    if (c.n_routed_experts % c.n_group != 0)
      return invalid_argument(
          fmt::format("{}: field \"{}n_group\" ({}) must divide \"{}n_routed_experts\" ({})",
                      source, prefix, c.n_group, prefix, c.n_routed_experts));
    if (c.scoring_func != "softmax" && c.scoring_func != "sigmoid")
      return bad("scoring_func", "\"softmax\" or \"sigmoid\"", "\"" + c.scoring_func + "\"");
    if (c.topk_method != "greedy" && c.topk_method != "group_limited_greedy" &&
        c.topk_method != "noaux_tc")
      return bad("topk_method", "\"greedy\", \"group_limited_greedy\" or \"noaux_tc\"",
                 "\"" + c.topk_method + "\"");
  }
  // The largest KV cache the config can ask for (BF16 latent, every layer, the full context) must
  // be countable in bytes, or later size arithmetic would wrap.
  const int64_t row = kv_bytes_per_token(KvCacheDtype::kBF16, c.kv_lora_rank, c.qk_rope_head_dim);
  if (!checked_product<int64_t>({row, c.num_hidden_layers, c.max_position_embeddings}))
    return invalid_argument(fmt::format(
        "{}: field \"{}max_position_embeddings\" is too large: {} tokens x {} layers x {} bytes "
        "of BF16 latent KV cache overflows a 64-bit byte count",
        source, prefix, c.max_position_embeddings, c.num_hidden_layers, row));
  return Status();
}

}  // namespace

Result<ModelConfig> parse_model_config(const std::string& json_text,
                                       const std::string& source_name) {
  // Depth first: the error paths dump values (show()), and dump() recurses.
  if (const std::optional<size_t> at = json_depth_exceeded(json_text))
    return invalid_argument(fmt::format("{}: JSON nests deeper than {} levels (at byte {})",
                                        source_name, kMaxJsonFileDepth, *at));
  Json top;
  try {
    top = Json::parse(json_text);
  } catch (const Json::exception& e) {
    return invalid_argument(fmt::format("{}: not valid JSON: {}", source_name, e.what()));
  }
  if (!top.is_object())
    return invalid_argument(fmt::format("{}: the top level must be a JSON object, got {}",
                                        source_name, top.type_name()));
  const auto tc = top.find("text_config");
  const bool nested = tc != top.end() && !tc->is_null();
  if (nested && !tc->is_object())
    return invalid_argument(
        fmt::format("{}: field \"text_config\" must be an object, got {}", source_name, show(*tc)));
  ModelConfig c;
  MLA_RETURN_IF_ERROR(parse_fields(nested ? *tc : top, top, source_name, nested, &c));
  MLA_RETURN_IF_ERROR(validate_impl(c, source_name, nested ? "text_config." : ""));
  return c;
}

Result<ModelConfig> load_model_config(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path file(path);
  if (fs::is_directory(file, ec)) file /= "config.json";
  const std::string name = file.string();
  if (!fs::is_regular_file(file, ec))
    return not_found(
        fmt::format("{}: no such file (expected a model directory or its config.json)", name));
  const uintmax_t size = fs::file_size(file, ec);
  if (ec) return io_error(fmt::format("{}: cannot read its size: {}", name, ec.message()));
  if (size > uintmax_t(kMaxConfigBytes))
    return invalid_argument(fmt::format("{}: {} bytes is too large for a config.json (limit {})",
                                        name, size, kMaxConfigBytes));
  std::ifstream in(file, std::ios::binary);
  if (!in.is_open()) return io_error(fmt::format("{}: cannot open for reading", name));
  std::ostringstream text;
  if (size > 0) text << in.rdbuf();
  if (in.bad()) return io_error(fmt::format("{}: read failed", name));
  return parse_model_config(text.str(), name);
}

Status validate_model_config(const ModelConfig& config, const std::string& source_name) {
  return validate_impl(config, source_name, "");
}

namespace {

constexpr std::string_view kPresetNames[] = {"v2",      "v2-lite",   "v3",
                                             "kimi-k2", "moonlight", "minicpm3"};

RopeScalingConfig yarn(double factor, double beta_fast, double mscale) {
  RopeScalingConfig y;
  y.type = RopeScalingType::kYarn;
  y.factor = factor;
  y.original_max_position_embeddings = 4096;
  y.beta_fast = beta_fast;
  y.beta_slow = 1.0;
  y.mscale = mscale;
  y.mscale_all_dim = mscale;
  return y;
}

// The MLA dims every preset shares: r = 512, d_n = 128, d_r = 64, d_v = 128.
ModelConfig mla_base() {
  ModelConfig c;
  c.kv_lora_rank = 512;
  c.qk_nope_head_dim = 128;
  c.qk_rope_head_dim = 64;
  c.v_head_dim = 128;
  c.moe_layer_freq = 1;
  return c;
}

}  // namespace

Result<ModelConfig> model_preset(std::string_view name) {
  ModelConfig c = mla_base();
  if (name == "v2" || name == "v2-lite") {
    const bool lite = name == "v2-lite";
    c.model_type = "deepseek_v2";
    c.vocab_size = 102400;
    c.hidden_size = lite ? 2048 : 5120;
    c.num_hidden_layers = lite ? 27 : 60;
    c.num_attention_heads = lite ? 16 : 128;
    c.q_lora_rank = lite ? 0 : 1536;
    c.intermediate_size = lite ? 10944 : 12288;
    c.moe_intermediate_size = lite ? 1408 : 1536;
    c.n_routed_experts = lite ? 64 : 160;
    c.n_shared_experts = 2;
    c.num_experts_per_tok = 6;
    c.n_group = lite ? 1 : 8;
    c.topk_group = lite ? 1 : 3;
    c.topk_method = lite ? "greedy" : "group_limited_greedy";
    c.scoring_func = "softmax";
    c.norm_topk_prob = false;
    c.routed_scaling_factor = lite ? 1.0 : 16.0;
    c.first_k_dense_replace = 1;
    c.rms_norm_eps = 1e-6;
    c.rope_theta = 10000;
    c.rope_scaling = yarn(40, 32, 0.707);
    c.max_position_embeddings = 163840;
    c.bos_token_id = 100000;
    c.eos_token_ids = {100001};
  } else if (name == "v3" || name == "kimi-k2") {
    const bool kimi = name == "kimi-k2";
    c.model_type = kimi ? "kimi_k2" : "deepseek_v3";
    c.vocab_size = kimi ? 163840 : 129280;
    c.hidden_size = 7168;
    c.num_hidden_layers = 61;
    c.num_attention_heads = kimi ? 64 : 128;
    c.q_lora_rank = 1536;
    c.intermediate_size = 18432;
    c.moe_intermediate_size = 2048;
    c.n_routed_experts = kimi ? 384 : 256;
    c.n_shared_experts = 1;
    c.num_experts_per_tok = 8;
    c.n_group = kimi ? 1 : 8;
    c.topk_group = kimi ? 1 : 4;
    c.topk_method = "noaux_tc";
    c.scoring_func = "sigmoid";
    c.norm_topk_prob = true;
    c.routed_scaling_factor = kimi ? 2.827 : 2.5;
    c.first_k_dense_replace = kimi ? 1 : 3;
    c.num_nextn_predict_layers = kimi ? 0 : 1;
    c.rms_norm_eps = 1e-6;
    c.rope_theta = kimi ? 50000 : 10000;
    c.rope_scaling = kimi ? yarn(32, 1, 1.0) : yarn(40, 32, 1.0);
    c.max_position_embeddings = kimi ? 131072 : 163840;
    c.bos_token_id = kimi ? 163584 : 0;
    c.eos_token_ids = {kimi ? 163585 : 1};
    c.quantization.quant_method = QuantMethod::kFp8;
  } else if (name == "moonlight") {
    c.model_type = "deepseek_v3";
    c.vocab_size = 163840;
    c.hidden_size = 2048;
    c.num_hidden_layers = 27;
    c.num_attention_heads = 16;
    c.q_lora_rank = 0;
    c.intermediate_size = 11264;
    c.moe_intermediate_size = 1408;
    c.n_routed_experts = 64;
    c.n_shared_experts = 2;
    c.num_experts_per_tok = 6;
    c.topk_method = "noaux_tc";
    c.scoring_func = "sigmoid";
    c.norm_topk_prob = true;
    c.routed_scaling_factor = 2.446;
    c.first_k_dense_replace = 1;
    c.rms_norm_eps = 1e-5;
    c.rope_theta = 50000;
    c.max_position_embeddings = 8192;
    c.bos_token_id = 163584;
    c.eos_token_ids = {163586};  // the Instruct config's; the base model's is unconfirmed
  } else if (name == "minicpm3") {
    // Dense MLA (docs/MODELS.md §Configs, §Checkpoint shapes). The preset gives shapes (sizing,
    // --real-dims); its LongRoPE factors and scalings come from the checkpoint's own config.json.
    c.model_type = "minicpm3";
    c.vocab_size = 73448;
    c.hidden_size = 2560;
    c.num_hidden_layers = 62;
    c.num_attention_heads = 40;
    c.q_lora_rank = 768;
    c.kv_lora_rank = 256;
    c.qk_nope_head_dim = 64;
    c.qk_rope_head_dim = 32;
    c.v_head_dim = 64;
    c.intermediate_size = 6400;
    c.rms_norm_eps = 1e-5;
    c.rope_theta = 10000;
    c.max_position_embeddings = 32768;
    c.scale_emb = kMiniCpmScaleEmb;
    c.scale_depth = kMiniCpmScaleDepth;
    c.dim_model_base = kMiniCpmDimModelBase;
    c.bos_token_id = 1;
    c.eos_token_ids = {2, 73440};
  } else {
    std::string list;
    for (std::string_view n : kPresetNames) list += (list.empty() ? "" : ", ") + std::string(n);
    return invalid_argument(
        fmt::format("unknown model preset \"{}\" (expected one of {})", name, list));
  }
  const std::string source = fmt::format("preset {}", name);
  MLA_RETURN_IF_ERROR(validate_model_config(c, source));  // a failure here is a typo above
  return c;
}

double ModelConfig::residual_scale() const {
  return scale_depth > 0 ? scale_depth / std::sqrt(double(num_hidden_layers)) : 1.0;
}

double ModelConfig::logits_divisor() const {
  return dim_model_base > 0 ? double(hidden_size) / double(dim_model_base) : 1.0;
}

std::span<const std::string_view> model_preset_names() {
  return kPresetNames;
}

}  // namespace mla
