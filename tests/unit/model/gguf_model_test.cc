// GGUF models (model/gguf_checkpoint.h, model/gguf_export.h): a make-tiny checkpoint written by
// `quantize_model` and read back must be the same model: the same config, and, in F32, the same
// logits bit for bit (F32 holds every BF16 weight exactly and the products run in one order);
// in Q8_0 the same routing of shapes through the block kernels, within the format's error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>

#include "core/ggml_repack.h"
#include "exact_runtime.h"
#include "io/gguf.h"
#include "kernels/linear.h"
#include "logit_cosine.h"
#include "model/generator.h"
#include "model/gguf_checkpoint.h"
#include "model/gguf_export.h"
#include "temp_dir.h"
#include "tiny/tiny_checkpoint.h"
#include "tokenizer/tokenizer_config.h"

namespace mla {
namespace {

RuntimeOptions exact() {
  return test::exact_runtime();
}

std::vector<int32_t> prompt(int n) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(int32_t((i * 37 + 3) % 300));
  return p;
}

class GgufModelTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    TinyCheckpointOptions o;
    o.family = GetParam();
    o.seed = 11;
    o.weights = TinyWeights::kBF16;
    ASSERT_TRUE(write_tiny_checkpoint(o, dir_.path()).ok());
  }
  std::string quantize(const std::string& type) {
    const std::string out = dir_.path() + "/model-" + type + ".gguf";
    QuantizeOptions q;
    q.type = type;
    Result<QuantizeReport> r = quantize_model(dir_.path(), out, q);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return out;
  }
  std::vector<float> logits(const std::string& model, int n = 21, bool repack = true,
                            int* repacked = nullptr) {
    RuntimeOptions ro = exact();
    ro.repack_weights = repack;
    auto m = Model::load(model, ro);
    if (m.ok() && repacked) *repacked = (*m)->repack_stats().weights;
    EXPECT_TRUE(m.ok()) << m.status().message();
    if (!m.ok()) return {};
    GenerateOptions go;
    go.max_new_tokens = 3;
    go.ignore_eos = true;
    go.keep_decode_logits = go.keep_prompt_activations = true;
    auto g = generate(**m, prompt(n), go, pool_);
    EXPECT_TRUE(g.ok()) << g.status().message();
    std::vector<float> all = g->prompt_logits;
    all.insert(all.end(), g->decode_logits.begin(), g->decode_logits.end());
    return all;
  }
  // Logits with and without repack_weights (a checkpoint whose `stored` weights the CPU runs
  // as `packed`) are the same model: see below.
  void expect_repacked_same_model(const std::string& path, DType stored, DType packed);
  test::TempDir dir_{"gguf_model"};
  ThreadPool pool_{2};
};

TEST_P(GgufModelTest, ConfigSurvivesTheRoundTrip) {
  const std::string path = quantize("q8_0");
  auto hf = load_model_config(dir_.path());
  auto g = open_gguf_model(path);
  ASSERT_TRUE(hf.ok() && g.ok()) << (g.ok() ? "" : g.status().message());
  const ModelConfig &a = *hf, &b = g->config;
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.num_hidden_layers, b.num_hidden_layers);
  EXPECT_EQ(a.num_attention_heads, b.num_attention_heads);
  EXPECT_EQ(a.q_lora_rank, b.q_lora_rank);
  EXPECT_EQ(a.kv_lora_rank, b.kv_lora_rank);
  EXPECT_EQ(a.qk_nope_head_dim, b.qk_nope_head_dim);
  EXPECT_EQ(a.qk_rope_head_dim, b.qk_rope_head_dim);
  EXPECT_EQ(a.v_head_dim, b.v_head_dim);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.moe_intermediate_size, b.moe_intermediate_size);
  EXPECT_EQ(a.n_routed_experts, b.n_routed_experts);
  EXPECT_EQ(a.n_shared_experts, b.n_shared_experts);
  EXPECT_EQ(a.num_experts_per_tok, b.num_experts_per_tok);
  EXPECT_EQ(a.n_group, b.n_group);
  EXPECT_EQ(a.topk_group, b.topk_group);
  EXPECT_EQ(a.first_k_dense_replace, b.first_k_dense_replace);
  // GGUF stores it as F32 (so does llama.cpp), and the engine uses it in FP32.
  EXPECT_EQ(float(a.routed_scaling_factor), float(b.routed_scaling_factor));
  EXPECT_EQ(a.norm_topk_prob, b.norm_topk_prob);
  EXPECT_EQ(a.scoring_func, b.scoring_func);
  EXPECT_EQ(a.topk_method, b.topk_method);
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
  EXPECT_EQ(a.rope_scaling.type, b.rope_scaling.type);
  EXPECT_NEAR(a.rope_scaling.factor, b.rope_scaling.factor, 1e-6);
  EXPECT_NEAR(a.rope_scaling.mscale_all_dim, b.rope_scaling.mscale_all_dim, 1e-6);
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
  EXPECT_EQ(a.bos_token_id, b.bos_token_id);
}

// The F32 file against the BF16 checkpoint as stored: the same FP32 products (BF16 widens
// exactly). Repacked at load the BF16 rows are summed in another order
// (RepackedBf16IsTheSameModel).
TEST_P(GgufModelTest, F32FileGivesTheSameLogitsBitForBit) {
  const std::vector<float> want = logits(dir_.path(), 21, false);
  const std::vector<float> got = logits(quantize("f32"));
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "logit " << i;
}

// Q8_0 stores each weight within d/2 of its value, d = amax/127 of its 32-block: relative error
// up to 2^-8 of the block's largest weight, twice BF16's 2^-9, and the VNNI kernels quantise x
// the same way. No rounding bound covers a whole MoE model: an expert choice at a routing
// near-tie flips under that noise and moves its token's row by O(1) (forward_test.cc saw it for
// BF16 products). What is checked is that the file runs through the block kernels and stays the
// same model: a wrong block layout, scale or row offset gives unrelated logits (cosine near 0);
// measured 0.97-1.00 over these families.
TEST_P(GgufModelTest, Q8FileStaysTheSameModel) {
  const std::vector<float> want = logits(dir_.path());
  const std::vector<float> got = logits(quantize("q8_0"));
  ASSERT_EQ(got.size(), want.size());
  EXPECT_GT(test::logit_cosine(got, want), 0.9);
}

// Q8_0 weights repacked at load (core/ggml_repack.h, on CPUs whose kernels run them) hold the
// same values; the repacked GEMV sums the same exact int32 block sums in another FP32 order, so a
// logit moves by FP32 roundings only (measured ≤ 1.2e-6 on logits of magnitude ~1; a wrong layout,
// scale or group offset moves every row by O(1)). Until a routing near-tie flips an expert, after
// which that row and the later ones (through attention) part by 0.01-1 (forward_test.cc documents
// such ties under BF16 products). Where the ties fall moves with any FP32-level change of the
// model's arithmetic (measured: v2 at prompt row 7, v3 at 15; v3 at 13 with a scalar SiLU), so
// the rows must agree to 1e-4 up to the first that does not, which must come after at least 4
// agreeing rows, and the whole run must stay the same model (cosine, as Q8FileStaysTheSameModel).
// The same holds for BF16 checkpoints repacked as kBF16R16 (each lane of the FP32 GEMV adds its
// row's exact products in column order instead of 16 lane partials and a horizontal sum).
void GgufModelTest::expect_repacked_same_model(const std::string& path, DType stored,
                                               DType packed) {
  int repacked = -1;
  const std::vector<float> plain = logits(path, 21, false);
  const std::vector<float> got = logits(path, 21, true, &repacked);
  ASSERT_EQ(got.size(), plain.size());
  if (linear_preferred_dtype(stored, 16, 256) == packed)
    EXPECT_GT(repacked, 0);
  else
    EXPECT_EQ(repacked, 0);
  // 21 prompt rows and 2 decode steps (the third token needs no forward pass).
  ASSERT_EQ(plain.size() % 23, 0u);
  const size_t vocab = plain.size() / 23;
  EXPECT_GT(test::logit_cosine(got, plain), 0.9);
  size_t agree = 0;  // rows before the first that parts by more than FP32 roundings
  for (; (agree + 1) * vocab <= plain.size(); ++agree) {
    bool same = true;
    for (size_t k = agree * vocab; k < (agree + 1) * vocab; ++k)
      same = same && std::abs(got[k] - plain[k]) <= 1e-4;
    if (!same) break;
  }
  EXPECT_GE(agree, 4u);
}

// A file of block-quantised products runs them on int8, and the decompressed prefill's tiles
// follow (RuntimeOptions::prefill_attention_dtype) unless asked otherwise; an F32 file keeps the
// query's dtype.
TEST_P(GgufModelTest, Q8FilePrefillsOnTheInt8Tiles) {
  auto held = [&](const std::string& path, std::optional<DType> asked) {
    RuntimeOptions ro;
    ro.prefill_attention_dtype = asked;
    auto m = Model::load(path, ro);
    EXPECT_TRUE(m.ok()) << m.status().message();
    return m.ok() ? prefill_attention_dtype((*m)->options()) : DType::kF32;
  };
  const std::string q8 = quantize("q8_0"), f32 = quantize("f32");
  EXPECT_EQ(held(q8, std::nullopt), DType::kI8);
  EXPECT_EQ(held(q8, DType::kBF16), DType::kBF16);
  EXPECT_EQ(held(f32, std::nullopt), DType::kBF16);
}

TEST_P(GgufModelTest, RepackedQ8FileIsTheSameModel) {
  expect_repacked_same_model(quantize("q8_0"), DType::kQ8_0, DType::kQ8_0R16);
}

TEST_P(GgufModelTest, RepackedBf16IsTheSameModel) {
  expect_repacked_same_model(dir_.path(), DType::kBF16, DType::kBF16R16);
}

// The embedded tokenizer encodes as the directory's tokenizer.json does.
TEST_P(GgufModelTest, EmbeddedTokenizerGivesTheSameIds) {
  const std::string path = quantize("q8_0");
  auto a = tok::load_tokenizer_dir(dir_.path());
  auto b = tok::load_tokenizer_dir(path);
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(a->tokenizer.bos_id(), b->tokenizer.bos_id());
  EXPECT_EQ(a->tokenizer.eos_id(), b->tokenizer.eos_id());
  EXPECT_EQ(a->config.chat_template, b->config.chat_template);
  for (const char* text : {"Hello world", "  12345 tabs\tand\nnewlines\r\n", "中文测试 ひらがな",
                           "<｜begin▁of▁sentence｜>x", "emoji 😀 e\u0301", ""}) {
    for (bool special : {false, true}) {
      tok::EncodeOptions eo;
      eo.parse_special = special;
      auto x = a->tokenizer.encode(text, eo), y = b->tokenizer.encode(text, eo);
      ASSERT_TRUE(x.ok() && y.ok());
      EXPECT_EQ(*x, *y) << text;
    }
  }
}

// A copy of `src` with its metadata and tensor list edited (the tensors' bytes copied as they are,
// or zero-filled when `edit` changed a tensor's size).
// `bytes_of` (or null) may then edit a tensor's bytes before they are written.
Status rewrite(const std::string& src, const std::string& dst,
               const std::function<void(std::map<std::string, GgufValue, std::less<>>&,
                                        std::vector<GgufWriter::Tensor>&)>& edit,
               const std::function<void(const GgufWriter::Tensor&, std::vector<uint8_t>&)>&
                   bytes_of = nullptr) {
  MLA_ASSIGN_OR_RETURN(GgufFile f, GgufFile::open(src));
  std::map<std::string, GgufValue, std::less<>> meta(f.metadata().begin(), f.metadata().end());
  meta.erase("general.alignment");
  std::vector<GgufWriter::Tensor> tensors;
  for (const TensorInfo& t : f.tensors()) tensors.push_back({t.name, t.dtype, t.shape});
  edit(meta, tensors);
  MLA_ASSIGN_OR_RETURN(std::unique_ptr<GgufWriter> w, GgufWriter::begin(dst, meta, tensors));
  for (const GgufWriter::Tensor& t : tensors) {
    const TensorInfo* old = f.find(t.name);
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    const DTypeBlock b = dtype_block(t.dtype);
    std::vector<uint8_t> bytes(size_t(numel / b.elems * b.bytes));
    if (old && old->byte_size == bytes.size()) std::memcpy(bytes.data(), old->data, bytes.size());
    if (bytes_of) bytes_of(t, bytes);
    MLA_RETURN_IF_ERROR(w->write_tensor(t.name, bytes));
  }
  return w->finish();
}

// Broken files are refused with a message naming what is wrong, never run.
TEST_P(GgufModelTest, BrokenFilesNameWhatIsWrong) {
  const std::string good = quantize("q8_0"), bad = dir_.path() + "/bad.gguf";
  struct Case {
    const char* what;
    std::function<void(std::map<std::string, GgufValue, std::less<>>&,
                       std::vector<GgufWriter::Tensor>&)>
        edit;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"a missing key", [](auto& m, auto&) { m.erase("deepseek2.block_count"); },
       "deepseek2.block_count"},
      {"a wrong key type",
       [](auto& m, auto&) {
         m["deepseek2.attention.kv_lora_rank"].type = GgufType::kString;
         m["deepseek2.attention.kv_lora_rank"].s = "x";
       },
       "deepseek2.attention.kv_lora_rank"},
      {"a missing tensor",
       [](auto&, auto& t) {
         std::erase_if(
             t, [](const GgufWriter::Tensor& x) { return x.name == "blk.0.attn_output.weight"; });
       },
       "o_proj"},
      {"a wrong shape",
       [](auto&, auto& t) {
         for (auto& x : t)
           if (x.name == "blk.0.attn_v_b.weight") x.shape[0] += 1;
       },
       "attn_v_b"},
      {"both kv_b forms",
       [](auto&, auto& t) {
         t.push_back({"blk.0.attn_kv_b.weight", DType::kF32, {t[0].shape.back(), 4}});
       },
       "two tensors"},
      {"an unknown tensor",
       [](auto&, auto& t) {
         t.push_back({"blk.0.mystery.weight", DType::kF32, {4}});
       },
       "mystery"},
  };
  for (const Case& c : cases) {
    ASSERT_TRUE(rewrite(good, bad, c.edit).ok()) << c.what;
    auto m = Model::load(bad, exact());
    ASSERT_FALSE(m.ok()) << c.what;
    EXPECT_NE(m.status().message().find(c.expect), std::string::npos)
        << c.what << ": " << m.status().message();
  }
}

// A file whose gate and up products differ in dtype (another tool's mix may do that) runs each
// MLP's SwiGLU as two products and a SiLU pass (model_ffn.cc: a SwiGLU job needs a matching
// pair), every other file as one job. On the reference kernels (FP64 products of the stored
// values) the two must give the same logits bit for bit: F32 gates with Q8_0 ups, against F32
// gates with those Q8_0 values as F32.
TEST_P(GgufModelTest, GateAndUpOfDifferentDtypesGiveTheFusedLogits) {
  const std::string f32 = quantize("f32"), q8 = quantize("q8_0");
  auto q8_file = GgufFile::open(q8);
  ASSERT_TRUE(q8_file.ok()) << q8_file.status().message();
  auto with_ups = [&](const std::string& dst, bool as_f32) {
    std::map<std::string, const TensorInfo*> ups;
    return rewrite(
        f32, dst,
        [&](auto&, std::vector<GgufWriter::Tensor>& tensors) {
          for (GgufWriter::Tensor& t : tensors) {
            const TensorInfo* u = q8_file->find(t.name);
            if (t.name.find("ffn_up") == std::string::npos || !u || u->dtype != DType::kQ8_0)
              continue;
            ups[t.name] = u;
            if (!as_f32) t.dtype = u->dtype;
          }
        },
        [&](const GgufWriter::Tensor& t, std::vector<uint8_t>& bytes) {
          const auto it = ups.find(t.name);
          if (it == ups.end()) return;
          const TensorInfo& u = *it->second;
          if (!as_f32) {
            std::memcpy(bytes.data(), u.data, bytes.size());
            return;
          }
          const int64_t in = t.shape.back(), rows = int64_t(bytes.size() / 4) / in;
          for (int64_t r = 0; r < rows; ++r)
            ASSERT_TRUE(dequantize_weight_row(DType::kQ8_0, u.data, in, r,
                                              reinterpret_cast<float*>(bytes.data()) + r * in)
                            .ok());
        });
  };
  const std::string mixed = dir_.path() + "/mixed.gguf", same = dir_.path() + "/same.gguf";
  ASSERT_TRUE(with_ups(mixed, false).ok());
  ASSERT_TRUE(with_ups(same, true).ok());
  RuntimeOptions ro = exact();
  ro.backend = "ref";
  std::vector<std::vector<float>> out;
  for (const std::string& path : {mixed, same}) {
    auto m = Model::load(path, ro);
    ASSERT_TRUE(m.ok()) << m.status().message();
    GenerateOptions go;
    go.max_new_tokens = 2;
    go.ignore_eos = true;
    go.keep_decode_logits = go.keep_prompt_activations = true;
    auto g = generate(**m, prompt(9), go, pool_);
    ASSERT_TRUE(g.ok()) << g.status().message();
    out.push_back(g->prompt_logits);
    out.back().insert(out.back().end(), g->decode_logits.begin(), g->decode_logits.end());
  }
  ASSERT_FALSE(out[0].empty());
  EXPECT_EQ(out[0], out[1]);
}

INSTANTIATE_TEST_SUITE_P(Families, GgufModelTest,
                         ::testing::Values("v2-lite", "v2", "v3", "moonlight"));

TEST(GgufModel, RefusesAnotherArchitecture) {
  test::TempDir dir("gguf_arch");
  const std::string path = dir.path() + "/llama.gguf";
  std::map<std::string, GgufValue, std::less<>> meta;
  GgufValue arch;
  arch.type = GgufType::kString;
  arch.s = "llama";
  meta["general.architecture"] = arch;
  auto w = GgufWriter::begin(path, meta, {});
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->finish().ok());
  auto g = open_gguf_model(path);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("llama"), std::string::npos) << g.status().message();
}

TEST(GgufModel, TensorTypesOfTheMixes) {
  // q4_k_m: lm_head Q6_K, ffn_down Q6_K on llama.cpp's more-bits layers, K blocks need 256.
  EXPECT_EQ(gguf_tensor_type("q4_k_m", "output.weight", -1, 27, 2048, 2), DType::kQ6_K);
  EXPECT_EQ(gguf_tensor_type("q4_k_m", "blk.0.ffn_down_exps.weight", 0, 27, 1408, 3), DType::kQ8_0);
  EXPECT_EQ(gguf_tensor_type("q4_k_m", "blk.0.ffn_down.weight", 0, 27, 10752, 2), DType::kQ6_K);
  EXPECT_EQ(gguf_tensor_type("q4_k_m", "blk.4.ffn_down.weight", 4, 27, 10752, 2), DType::kQ4_K);
  EXPECT_EQ(gguf_tensor_type("q4_k_m", "blk.4.ffn_up_exps.weight", 4, 27, 2048, 3), DType::kQ4_K);
  EXPECT_EQ(gguf_tensor_type("q4_k_m", "blk.4.ffn_gate_inp.weight", 4, 27, 2048, 2), DType::kF32);
  EXPECT_EQ(gguf_tensor_type("q4_k_m", "blk.4.attn_norm.weight", 4, 27, 2048, 1), DType::kF32);
  EXPECT_EQ(gguf_tensor_type("q8_0", "blk.4.attn_k_b.weight", 4, 27, 128, 3), DType::kQ8_0);
  EXPECT_EQ(gguf_tensor_type("q8_0", "blk.4.attn_v_b.weight", 4, 27, 48, 3), DType::kF16);
}

}  // namespace
}  // namespace mla
