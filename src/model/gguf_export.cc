// quantize_model: HF checkpoint → GGUF (deepseek2), one tensor at a time.
#include "model/gguf_export.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>

#include "core/ggml_quant.h"
#include "core/thread_pool.h"
#include "io/gguf.h"
#include "kernels/linear.h"
#include "kernels/ref/linear_ref.h"
#include "model/model_weights.h"
#include "tokenizer/gguf_tokenizer.h"

namespace mla {
namespace {

// The most output bytes held at once (one part of a tensor).
constexpr size_t kPartBytes = size_t(64) << 20;

struct FileType {
  const char* name;
  DType base;
  int ftype;  // llama.cpp's general.file_type
};
constexpr FileType kFileTypes[] = {
    {"f32", DType::kF32, 0},      {"f16", DType::kF16, 1},    {"bf16", DType::kBF16, 32},
    {"q8_0", DType::kQ8_0, 7},    {"q4_0", DType::kQ4_0, 2},  {"q4_k_m", DType::kQ4_K, 15},
    {"q5_k_m", DType::kQ5_K, 17}, {"q6_k", DType::kQ6_K, 18}, {"q3_k_m", DType::kQ3_K, 12},
    {"q2_k", DType::kQ2_K, 10},
};

const FileType* file_type(std::string_view name) {
  for (const FileType& f : kFileTypes)
    if (name == f.name && can_quantize(f.base)) return &f;
  return nullptr;
}

bool ends_with(std::string_view s, std::string_view t) {
  return s.size() >= t.size() && s.substr(s.size() - t.size()) == t;
}

// llama.cpp's rule for the layers whose ffn_down gets more bits in the _M mixes: the first and
// last eighth, and every third layer between.
bool more_bits(int layer, int layers) {
  return layer < layers / 8 || layer >= 7 * layers / 8 || (layer - layers / 8) % 3 == 2;
}

// One output tensor: its GGUF name and shape, and how to make its rows in FP32.
struct OutTensor {
  std::string name;
  std::vector<int64_t> shape;  // row-major; rows = product of all but the last
  int layer = -1;
  std::function<void(int64_t row, float* out)> row;
};

// Row i of a bound weight (a matrix, or a vector as one row) in FP32.
std::function<void(int64_t, float*)> rows_of(const WeightRef& w, const ModelConfig& c) {
  const LinearWeight l = w.weight->shape.size() == 1
                             ? LinearWeight{w.weight->dtype, w.weight->data, 1, w.weight->numel}
                             : linear_of(w, c);
  return [l](int64_t i, float* out) {
    static thread_local std::vector<double> row;
    row.resize(size_t(l.in));
    ref::linear_weight_row(l, i, row.data());
    for (int64_t j = 0; j < l.in; ++j) out[j] = float(row[size_t(j)]);
  };
}

class Plan {
 public:
  explicit Plan(const ModelWeights& w) : w_(w), c_(w.config) {}

  void add(std::string name, const WeightRef& ref, int layer) {
    std::vector<int64_t> shape = ref.weight->shape;
    out_.push_back({std::move(name), std::move(shape), layer, rows_of(ref, c_)});
  }

  // E experts' [rows, in] matrices as one [E, rows, in] tensor.
  void experts(std::string name, const std::vector<MlpWeights>& e, int layer,
               const WeightRef MlpWeights::*which) {
    std::vector<std::function<void(int64_t, float*)>> parts;
    for (const MlpWeights& m : e) parts.push_back(rows_of(m.*which, c_));
    const std::vector<int64_t>& s = (e[0].*which).weight->shape;
    const int64_t rows = s[0];
    out_.push_back(
        {std::move(name),
         {int64_t(e.size()), s[0], s[1]},
         layer,
         [parts, rows](int64_t i, float* out) { parts[size_t(i / rows)](i % rows, out); }});
  }

  // kv_b_proj [H·(d_n + d_v), r] → attn_k_b [H, r, d_n] (W_UK[h]ᵀ) and attn_v_b [H, d_v, r].
  void kv_b(const std::string& p, const WeightRef& kv_b, int layer) {
    const int64_t H = c_.num_attention_heads, r = c_.kv_lora_rank, dn = c_.qk_nope_head_dim,
                  dv = c_.v_head_dim;
    auto src = rows_of(kv_b, c_);
    // k_b row (h, j) is column j of head h's d_n W_UK rows: those rows are decoded once per
    // head and kept while the head's r rows are written (rows come in order).
    auto cache = std::make_shared<std::pair<int64_t, std::vector<float>>>(-1, std::vector<float>());
    out_.push_back({p + "attn_k_b.weight", {H, r, dn}, layer, [=](int64_t i, float* out) {
                      const int64_t h = i / r, j = i % r;
                      if (cache->first != h) {
                        cache->second.resize(size_t(dn * r));
                        for (int64_t n = 0; n < dn; ++n)
                          src(h * (dn + dv) + n, cache->second.data() + n * r);
                        cache->first = h;
                      }
                      for (int64_t n = 0; n < dn; ++n) out[n] = cache->second[size_t(n * r + j)];
                    }});
    out_.push_back({p + "attn_v_b.weight", {H, dv, r}, layer, [=](int64_t i, float* out) {
                      src((i / dv) * (dn + dv) + dn + i % dv, out);
                    }});
  }

  void build() {
    add("token_embd.weight", w_.embed_tokens, -1);
    for (int i = 0; i < c_.num_hidden_layers; ++i) {
      const LayerWeights& l = w_.layers[size_t(i)];
      const std::string p = fmt::format("blk.{}.", i);
      add(p + "attn_norm.weight", l.input_layernorm, i);
      if (c_.has_q_lora()) {
        add(p + "attn_q_a.weight", l.q_a_proj, i);
        add(p + "attn_q_a_norm.weight", l.q_a_layernorm, i);
        add(p + "attn_q_b.weight", l.q_b_proj, i);
      } else {
        add(p + "attn_q.weight", l.q_proj, i);
      }
      add(p + "attn_kv_a_mqa.weight", l.kv_a_proj_with_mqa, i);
      add(p + "attn_kv_a_norm.weight", l.kv_a_layernorm, i);
      kv_b(p, l.kv_b_proj, i);
      add(p + "attn_output.weight", l.o_proj, i);
      add(p + "ffn_norm.weight", l.post_attention_layernorm, i);
      if (!l.moe) {
        add(p + "ffn_gate.weight", l.mlp.gate_proj, i);
        add(p + "ffn_up.weight", l.mlp.up_proj, i);
        add(p + "ffn_down.weight", l.mlp.down_proj, i);
        continue;
      }
      add(p + "ffn_gate_inp.weight", l.router, i);
      if (l.router_bias.present()) add(p + "exp_probs_b.bias", l.router_bias, i);
      experts(p + "ffn_gate_exps.weight", l.experts, i, &MlpWeights::gate_proj);
      experts(p + "ffn_up_exps.weight", l.experts, i, &MlpWeights::up_proj);
      experts(p + "ffn_down_exps.weight", l.experts, i, &MlpWeights::down_proj);
      if (l.shared_experts.gate_proj.present()) {
        add(p + "ffn_gate_shexp.weight", l.shared_experts.gate_proj, i);
        add(p + "ffn_up_shexp.weight", l.shared_experts.up_proj, i);
        add(p + "ffn_down_shexp.weight", l.shared_experts.down_proj, i);
      }
    }
    add("output_norm.weight", w_.norm, -1);
    if (!c_.tie_word_embeddings) add("output.weight", w_.lm_head, -1);
  }

  std::vector<OutTensor>& tensors() { return out_; }

 private:
  const ModelWeights& w_;
  const ModelConfig& c_;
  std::vector<OutTensor> out_;
};

GgufValue int_value(int64_t v, GgufType t = GgufType::kU32) {
  GgufValue g;
  g.type = t;
  g.i = v;
  return g;
}
GgufValue float_value(double v) {
  GgufValue g;
  g.type = GgufType::kF32;
  g.f = v;
  return g;
}
GgufValue string_value(std::string s) {
  GgufValue g;
  g.type = GgufType::kString;
  g.s = std::move(s);
  return g;
}

// The deepseek2 keys llama.cpp's converter writes for this config (gguf_checkpoint.cc reads them).
std::map<std::string, GgufValue, std::less<>> model_metadata(const ModelConfig& c, int ftype,
                                                             const std::string& name) {
  std::map<std::string, GgufValue, std::less<>> m;
  auto k = [](const char* key) { return std::string("deepseek2.") + key; };
  m["general.architecture"] = string_value("deepseek2");
  m["general.name"] = string_value(name);
  m["general.file_type"] = int_value(ftype);
  m["general.quantization_version"] = int_value(2);
  m[k("block_count")] = int_value(c.num_hidden_layers);
  m[k("context_length")] = int_value(c.max_position_embeddings);
  m[k("embedding_length")] = int_value(c.hidden_size);
  m[k("feed_forward_length")] = int_value(c.intermediate_size);
  m[k("attention.head_count")] = int_value(c.num_attention_heads);
  m[k("attention.head_count_kv")] = int_value(1);  // MLA as MQA over the latent
  m[k("rope.freq_base")] = float_value(c.rope_theta);
  m[k("attention.layer_norm_rms_epsilon")] = float_value(c.rms_norm_eps);
  m[k("vocab_size")] = int_value(c.vocab_size);
  if (c.has_q_lora()) m[k("attention.q_lora_rank")] = int_value(c.q_lora_rank);
  m[k("attention.kv_lora_rank")] = int_value(c.kv_lora_rank);
  m[k("attention.key_length")] = int_value(c.kv_lora_rank + c.qk_rope_head_dim);
  m[k("attention.value_length")] = int_value(c.kv_lora_rank);
  m[k("attention.key_length_mla")] = int_value(c.d_qk());
  m[k("attention.value_length_mla")] = int_value(c.v_head_dim);
  m[k("rope.dimension_count")] = int_value(c.qk_rope_head_dim);
  if (c.is_moe()) {
    m[k("leading_dense_block_count")] = int_value(c.first_k_dense_replace);
    m[k("expert_feed_forward_length")] = int_value(c.moe_intermediate_size);
    m[k("expert_count")] = int_value(c.n_routed_experts);
    m[k("expert_used_count")] = int_value(c.num_experts_per_tok);
    m[k("expert_shared_count")] = int_value(c.n_shared_experts);
    m[k("expert_weights_scale")] = float_value(c.routed_scaling_factor);
    m[k("expert_weights_norm")] = int_value(c.norm_topk_prob ? 1 : 0, GgufType::kBool);
    m[k("expert_gating_func")] = int_value(c.scoring_func == "sigmoid" ? 2 : 1);
    if (c.n_group > 1) {
      m[k("expert_group_count")] = int_value(c.n_group);
      m[k("expert_group_used_count")] = int_value(c.topk_group);
    }
  } else {
    m[k("expert_feed_forward_length")] = int_value(c.intermediate_size);
    m[k("expert_shared_count")] = int_value(0);
  }
  if (c.rope_scaling.type == RopeScalingType::kYarn) {
    m[k("rope.scaling.type")] = string_value("yarn");
    m[k("rope.scaling.factor")] = float_value(c.rope_scaling.factor);
    m[k("rope.scaling.original_context_length")] =
        int_value(c.rope_scaling.original_max_position_embeddings);
    m[k("rope.scaling.yarn_log_multiplier")] = float_value(0.1 * c.rope_scaling.mscale_all_dim);
    m[k("rope.scaling.yarn_beta_fast")] = float_value(c.rope_scaling.beta_fast);
    m[k("rope.scaling.yarn_beta_slow")] = float_value(c.rope_scaling.beta_slow);
  }
  return m;
}

}  // namespace

std::vector<std::string> gguf_file_types() {
  std::vector<std::string> v;
  for (const FileType& f : kFileTypes)
    if (can_quantize(f.base)) v.push_back(f.name);
  return v;
}

DType gguf_tensor_type(std::string_view ft_name, std::string_view name, int layer, int layers,
                       int64_t in, int rank) {
  const FileType* ft = file_type(ft_name);
  if (!ft || rank < 2 || ends_with(name, "ffn_gate_inp.weight")) return DType::kF32;
  DType t = ft->base;
  const bool k_mix =
      t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ3_K || t == DType::kQ2_K;
  if (name == "output.weight" && (k_mix || t == DType::kQ4_0)) t = DType::kQ6_K;
  if (k_mix && name.find("ffn_down") != std::string_view::npos && more_bits(layer, layers))
    t = DType::kQ6_K;
  // The per-head absorbed products read these every token and are small: Q8_0.
  if (dtype_is_ggml_block(t) && t != DType::kQ8_0 &&
      (ends_with(name, "attn_k_b.weight") || ends_with(name, "attn_v_b.weight")))
    t = DType::kQ8_0;
  // Rows that are not whole blocks fall back: K formats to Q8_0, then to F16.
  if (dtype_is_ggml_block(t) && in % dtype_block(t).elems != 0) t = DType::kQ8_0;
  if (dtype_is_ggml_block(t) && (in % dtype_block(t).elems != 0 || !can_quantize(t)))
    t = DType::kF16;
  return t;
}

Result<QuantizeReport> quantize_model(const std::string& model_dir, const std::string& out_path,
                                      const QuantizeOptions& o) {
  const FileType* ft = file_type(o.type);
  if (!ft)
    return invalid_argument(
        fmt::format("--type {}: not one of {}", o.type, fmt::join(gguf_file_types(), ", ")));
  MLA_ASSIGN_OR_RETURN(ModelWeights w, load_model_weights(model_dir));
  const ModelConfig& c = w.config;
  if (c.model_type == "minicpm3" || c.moe_layer_freq != 1 || c.neox_rope())
    return invalid_argument(fmt::format(
        "{}: a {} model cannot be written as a deepseek2 GGUF file (its scalings or layer "
        "pattern have no GGUF keys)",
        model_dir, c.model_type));
  std::map<std::string, GgufValue, std::less<>> meta =
      model_metadata(c, ft->ftype, std::filesystem::path(model_dir).filename().string());
  MLA_ASSIGN_OR_RETURN(auto tok_meta, tok::gguf_tokenizer_metadata(model_dir, c.vocab_size));
  meta.merge(tok_meta);

  Plan plan(w);
  plan.build();
  std::vector<GgufWriter::Tensor> decl;
  std::vector<DType> types;
  for (const OutTensor& t : plan.tensors()) {
    const DType ty = gguf_tensor_type(o.type, t.name, t.layer, c.num_hidden_layers, t.shape.back(),
                                      int(t.shape.size()));
    types.push_back(ty);
    decl.push_back({t.name, ty, t.shape});
  }
  MLA_ASSIGN_OR_RETURN(std::unique_ptr<GgufWriter> out, GgufWriter::begin(out_path, meta, decl));
  QuantizeReport report;
  std::map<std::string, int64_t> counts;
  uint64_t written = 0;
  std::vector<float> row;
  std::vector<uint8_t> bytes;
  for (size_t i = 0; i < plan.tensors().size(); ++i) {
    const OutTensor& t = plan.tensors()[i];
    const int64_t in = t.shape.back();
    int64_t rows = 1;
    for (size_t d = 0; d + 1 < t.shape.size(); ++d) rows *= t.shape[d];
    const size_t row_bytes = size_t(dtype_bytes(types[i], in));
    // Parts of at most kPartBytes of FP32 rows (and fewer output bytes): memory stays one part
    // whatever the tensor's size. The rows are decoded in order (the k_b rows reuse a decoded
    // head) and quantised in parallel: the K formats' search costs ~100 ns per value.
    const int64_t part_rows = std::max<int64_t>(1, int64_t(kPartBytes / (size_t(in) * 4)));
    for (int64_t r0 = 0; r0 < rows; r0 += part_rows) {
      const int64_t n = std::min(part_rows, rows - r0);
      row.resize(size_t(n * in));
      bytes.resize(row_bytes * size_t(n));
      for (int64_t r = 0; r < n; ++r) t.row(r0 + r, row.data() + r * in);
      std::vector<Status> status(static_cast<size_t>(n));
      default_thread_pool().parallel_for(n, [&](int64_t r, int) {
        status[size_t(r)] =
            quantize_row(types[i], std::span<const float>(row).subspan(size_t(r * in), size_t(in)),
                         bytes.data() + size_t(r) * row_bytes);
      });
      for (int64_t r = 0; r < n; ++r)
        if (!status[size_t(r)].ok())
          return invalid_argument(fmt::format("{}: {} row {}: {}", model_dir, t.name, r0 + r,
                                              status[size_t(r)].message()));
      MLA_RETURN_IF_ERROR(out->write_tensor_part(t.name, bytes));
      written += bytes.size();
    }
    ++counts[std::string(dtype_name(types[i]))];
    if (o.progress) o.progress(int64_t(i + 1), int64_t(plan.tensors().size()), written);
  }
  MLA_RETURN_IF_ERROR(out->finish());
  report.tensors = int64_t(plan.tensors().size());
  report.file_bytes = std::filesystem::file_size(out_path);
  for (const auto& [k, v] : counts) report.types.push_back({k, v});
  return report;
}

}  // namespace mla
