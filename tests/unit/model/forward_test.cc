// The forward pass on make-tiny checkpoints: paths that must agree with each other (incremental
// decode vs one-shot prefill, absorbed vs decompressed prefill, chunked vs whole, batched vs
// alone, cpu vs ref kernels) and bad batches. Agreement with Hugging Face is tests/e2e's job.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "cache/sequence_blocks.h"
#include "core/cpu_features.h"
#include "exact_runtime.h"
#include "kernels/registry.h"
#include "logit_cosine.h"
#include "model/generator.h"
#include "temp_dir.h"
#include "tiny/tiny_checkpoint.h"

namespace mla {
namespace {

// Two FP32 evaluation orders of the same model differ by rounding only when the cache is exact
// (kF32; a BF16 cache turns a 1e-7 difference into a 2^-9 one whenever a latent value sits near
// a rounding midpoint, so path comparisons run on the F32 cache). Worst case per K-term dot
// product: K · u · Σ|a·b| with u = 2^-24, K ≤ 320 (the widest product of the tiny models) and
// Σ|a·b| ≲ 10 for these O(1) activations and N(0, 1/fan_in) weights: ≈ 2e-4 per layer, summed
// over ≤ 4 layers plus lm_head ≈ 1e-3, relative to max(1, |logit|). Wrong masks, positions or
// weight slices move logits by O(0.1–1).
void expect_close(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const float tol = 1e-3f * std::max(1.0f, std::fabs(b[i]));
    if (!(std::fabs(a[i] - b[i]) <= tol) && ++bad <= 5)
      ADD_FAILURE() << what << " [" << i << "]: " << a[i] << " vs " << b[i];
  }
  EXPECT_EQ(bad, 0) << what;
}

using test::logit_cosine;

// 16 pages of 8 tokens for two sequences a and b of a model (check ok() first).
struct TwoSequences {
  explicit TwoSequences(const Model& m)
      : ids(BlockPool::create(16, 8)), cache(KvCacheStorage::allocate(m.cache_shape(16, 8))) {}
  bool ok() const { return ids.ok() && cache.ok(); }
  Result<BlockPool> ids;
  Result<KvCacheStorage> cache;
  SequenceBlocks a{ok() ? &*ids : nullptr, ok() ? &*cache : nullptr};
  SequenceBlocks b{ok() ? &*ids : nullptr, ok() ? &*cache : nullptr};
  // Appends `tokens` to a, a new sequence, and runs them through m as its first chunk.
  void prefill_a(Model& m, const std::vector<int32_t>& tokens, ThreadPool& pool,
                 std::vector<float>& logits) {
    ASSERT_EQ(a.append(tokens), PoolOutcome::kOk);
    ForwardBatch fb;
    fb.tokens = tokens;
    fb.seqs.push_back({a.block_table(), 0, int(tokens.size())});
    ASSERT_TRUE(m.forward(fb, *cache, pool, logits).ok());
  }
};

class ForwardTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    TinyCheckpointOptions o;
    o.family = GetParam();
    o.seed = 7;
    ASSERT_TRUE(write_tiny_checkpoint(o, dir_.path()).ok());
  }
  static RuntimeOptions exact() { return test::exact_runtime(); }
  std::unique_ptr<Model> load(RuntimeOptions ro = exact()) {
    auto m = Model::load(dir_.path(), ro);
    EXPECT_TRUE(m.ok()) << m.status().message();
    return m.ok() ? std::move(*m) : nullptr;
  }
  std::vector<int32_t> prompt(int n, int salt = 0) const {
    std::vector<int32_t> p;
    for (int i = 0; i < n; ++i) p.push_back(int32_t((i * 37 + salt * 11 + 3) % 300));
    return p;
  }
  // The model loaded with ro, generating from `tokens` (an empty result on failure).
  GenerateResult generate_with(const RuntimeOptions& ro, const std::vector<int32_t>& tokens,
                               const GenerateOptions& go) {
    auto m = load(ro);
    EXPECT_TRUE(m);
    if (!m) return {};
    auto r = generate(*m, tokens, go, pool_);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? *r : GenerateResult{};
  }
  test::TempDir dir_{"forward"};
  ThreadPool pool_{2};
};

// Prompt logits of generated[0..n-1] appended, computed in one shot, against the logits of the
// incremental decode steps.
TEST_P(ForwardTest, IncrementalDecodeMatchesOneShotPrefill) {
  auto m = load();
  ASSERT_TRUE(m);
  const int V = int(m->config().vocab_size);
  GenerateOptions go;
  go.max_new_tokens = 8;
  go.ignore_eos = true;
  go.keep_decode_logits = go.keep_prompt_activations = true;
  const std::vector<int32_t> p = prompt(17);
  auto inc = generate(*m, p, go, pool_);
  ASSERT_TRUE(inc.ok()) << inc.status().message();
  std::vector<int32_t> full = p;
  full.insert(full.end(), inc->generated.begin(), inc->generated.end() - 1);
  GenerateOptions one = go;
  one.max_new_tokens = 1;
  auto shot = generate(*m, full, one, pool_);
  ASSERT_TRUE(shot.ok());
  std::vector<float> tail(shot->prompt_logits.begin() + int64_t(p.size()) * V,
                          shot->prompt_logits.end());
  expect_close(inc->decode_logits, tail, "decode vs one-shot");
  std::vector<float> head(shot->prompt_logits.begin(),
                          shot->prompt_logits.begin() + int64_t(p.size()) * V);
  expect_close(inc->prompt_logits, head, "prompt rows");
}

TEST_P(ForwardTest, AbsorbedAndDecompressedPrefillAgree) {
  RuntimeOptions absorbed = exact(), decompressed = exact();
  absorbed.prefill_absorption_threshold = 1 << 20;
  absorbed.prefill_path_rule = PrefillPathRule::kLength;  // a fresh prompt, absorbed
  decompressed.prefill_absorption_threshold = 0;
  auto ma = load(absorbed), md = load(decompressed);
  ASSERT_TRUE(ma && md);
  GenerateOptions go;
  go.max_new_tokens = 1;
  go.keep_prompt_activations = true;
  auto a = generate(*ma, prompt(40), go, pool_);
  auto d = generate(*md, prompt(40), go, pool_);
  ASSERT_TRUE(a.ok() && d.ok());
  EXPECT_EQ(a->chunks[0].path, MlaPath::kAbsorbed);
  EXPECT_EQ(d->chunks[0].path, MlaPath::kDecompressed);
  expect_close(a->prompt_logits, d->prompt_logits, "absorbed vs decompressed");
}

// Whether linear() takes the BF16 GEMM on this CPU: its best variant is linear.cpu.avx512bf16
// (AVX512_BF16 and VBMI; a CPU with BF16 but no VBMI keeps the FP32 products).
bool bf16_gemm_runs_here() {
  const auto v = select_variant(LinearParams{}, "cpu");
  return v.ok() && (*v)->name == "linear.cpu.avx512bf16";
}

// --matmul-dtype bf16: products of more than 16 rows round x to BF16, relative 2^-8 of each
// product's Σ|a·b| (≲ 10 for these activations, as above): ≲ 0.04 per product where the FP32
// orders differed by 2e-4. Checked on the residual stream after the first layer (attention and
// the dense MLP every family starts with: at most 7 products in series, q_a, q_b, kv_a, o_proj,
// gate, up, down, so ≲ 7 · 0.04 ≈ 0.3 of max(1, |h|)). Past it, an MoE
// layer's expert choice can flip at a routing near-tie, and a flipped token's row then differs
// by O(1) (seen: one token of 40 in the v3 and kimi-k2 models), which no rounding bound covers;
// the oracle's Monte Carlo counts such flips instead. The 40-token prompt takes the BF16 path
// (its values differ from the FP32 products where the GEMM runs). The logits' cosine only tells
// the same model from noise (independent logit vectors have a cosine near 0).
TEST_P(ForwardTest, Bf16ProductsStayWithinTheirBound) {
  RuntimeOptions bf16 = exact();
  bf16.matmul_dtype = DType::kBF16;
  auto mf = load(), mb = load(bf16);
  ASSERT_TRUE(mf && mb);
  GenerateOptions go;
  go.max_new_tokens = 1;
  go.keep_prompt_activations = true;
  auto f = generate(*mf, prompt(40), go, pool_);
  auto b = generate(*mb, prompt(40), go, pool_);
  ASSERT_TRUE(f.ok() && b.ok());
  ASSERT_FALSE(f->prompt_hidden.empty());
  const std::vector<float>& hf = f->prompt_hidden[0];
  const std::vector<float>& hb = b->prompt_hidden[0];
  ASSERT_EQ(hf.size(), hb.size());
  double worst = 0;  // largest |Δh| / max(1, |h|); a NaN stays (and fails the check)
  for (size_t i = 0; i < hf.size(); ++i) {
    const double r = std::fabs(hb[i] - hf[i]) / std::max(1.0f, std::fabs(hf[i]));
    if (!(r <= worst) && !std::isnan(worst)) worst = r;
  }
  EXPECT_LE(worst, 0.3);
  if (bf16_gemm_runs_here()) {
    EXPECT_NE(hf, hb);
  }
  std::printf("%s: largest |dh| / max(1, |h|) %.3g\n", GetParam(), worst);
  EXPECT_GT(logit_cosine(f->prompt_logits, b->prompt_logits), 0.9);
}

// prefill_flops(T) = 2·(lm_head + Σ over the first L − 1 layers of T·(weight MACs per token) +
// T(T+1)/2 · H·(d_qk + d_v), + the last layer's kv_a on T tokens, the rest on one, and its one
// query against T keys): quadratic in T through the first L − 1 layers only.
TEST_P(ForwardTest, PrefillFlopsCountLmHeadProductsAndCausalAttention) {
  auto m = load();
  ASSERT_TRUE(m);
  const ModelConfig& c = m->config();
  const double f0 = m->prefill_flops(0), f1 = m->prefill_flops(1), f2 = m->prefill_flops(2),
               f3 = m->prefill_flops(3);
  EXPECT_EQ(f0, 2.0 * double(c.vocab_size) * c.hidden_size);
  ASSERT_GT(c.num_hidden_layers, 1);
  EXPECT_EQ(f3 - 2 * f2 + f1, 2.0 * (c.num_hidden_layers - 1) * c.num_attention_heads *
                                  double(c.d_qk() + c.v_head_dim));
  EXPECT_GT(f1, f0);
}

TEST_P(ForwardTest, ChunkedPrefillMatchesWholeAndRefMatchesCpu) {
  auto m = load();
  RuntimeOptions rr = exact();
  rr.backend = "ref";
  auto ref = load(rr);
  ASSERT_TRUE(m && ref);
  GenerateOptions go;
  go.max_new_tokens = 4;
  go.ignore_eos = true;
  go.keep_prompt_activations = go.keep_decode_logits = true;
  auto whole = generate(*m, prompt(30), go, pool_);
  GenerateOptions chunked = go;
  chunked.prefill_chunk = 7;
  chunked.page_size = 4;  // chunks and pages that straddle each other
  auto parts = generate(*m, prompt(30), chunked, pool_);
  auto slow = generate(*ref, prompt(30), go, pool_);
  ASSERT_TRUE(whole.ok() && parts.ok() && slow.ok());
  EXPECT_EQ(parts->chunks.size(), 5u);
  expect_close(parts->prompt_logits, whole->prompt_logits, "chunked prompt");
  expect_close(parts->decode_logits, whole->decode_logits, "chunked decode");
  expect_close(whole->prompt_logits, slow->prompt_logits, "cpu vs ref prompt");
  expect_close(whole->decode_logits, slow->decode_logits, "cpu vs ref decode");
}

// Two sequences in one batch (one prefilling, one decoding) against each run alone.
TEST_P(ForwardTest, BatchedSequencesMatchSeparateRuns) {
  auto m = load();
  ASSERT_TRUE(m);
  const int V = int(m->config().vocab_size);
  const std::vector<int32_t> a = prompt(12, 1), b = prompt(9, 2);
  TwoSequences two(*m);
  ASSERT_TRUE(two.ok());
  std::vector<float> logits;
  // Step 1: a's prompt alone.
  two.prefill_a(*m, a, pool_, logits);
  const int32_t next_a = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  // Step 2: a decodes one token while b's prompt is prefilled.
  const int32_t one[1] = {next_a};
  ASSERT_EQ(two.a.append(one), PoolOutcome::kOk);
  ASSERT_EQ(two.b.append(b), PoolOutcome::kOk);
  std::vector<int32_t> toks = {next_a};
  toks.insert(toks.end(), b.begin(), b.end());
  ForwardBatch b2;
  b2.tokens = toks;
  b2.seqs.push_back({two.a.block_table(), int64_t(a.size()), 1});
  b2.seqs.push_back({two.b.block_table(), 0, int(b.size())});
  auto st = m->forward(b2, *two.cache, pool_, logits);
  ASSERT_TRUE(st.ok()) << st.status().message();
  EXPECT_EQ(st->decode_tokens, 1);
  std::vector<float> batched_a(logits.begin(), logits.begin() + V);
  std::vector<float> batched_b(logits.begin() + V, logits.end());

  GenerateOptions go;
  go.max_new_tokens = 1;
  go.keep_prompt_activations = true;
  std::vector<int32_t> a2 = a;
  a2.push_back(next_a);
  auto alone_a = generate(*m, a2, go, pool_);
  auto alone_b = generate(*m, b, go, pool_);
  ASSERT_TRUE(alone_a.ok() && alone_b.ok());
  expect_close(batched_a,
               std::vector<float>(alone_a->prompt_logits.end() - V, alone_a->prompt_logits.end()),
               "batched a");
  expect_close(batched_b,
               std::vector<float>(alone_b->prompt_logits.end() - V, alone_b->prompt_logits.end()),
               "batched b");
}

// A batch that asks for each sequence's last logits runs the last layer's query side on those
// rows alone (their attention as one-token chunks over the cache): the same logits as the batch
// asking for every row, up to the FP32 orders of absorbed vs decompressed attention (the bound of
// expect_close). Two prefilling sequences, one of them a later chunk (start > 0), so that a kept
// row's position, block table and place in the batch are all exercised.
TEST_P(ForwardTest, PrunedLastLayerMatchesAllRows) {
  auto m = load();
  ASSERT_TRUE(m);
  ASSERT_GT(m->config().num_hidden_layers, 1);  // a one-layer model is not pruned
  const int V = int(m->config().vocab_size);
  const std::vector<int32_t> a = prompt(12, 1), a_more = prompt(5, 3), b = prompt(9, 2);
  std::vector<float> last[2];
  for (const bool all : {false, true}) {
    TwoSequences two(*m);
    ASSERT_TRUE(two.ok());
    std::vector<float> logits;
    two.prefill_a(*m, a, pool_, logits);
    ASSERT_EQ(two.a.append(a_more), PoolOutcome::kOk);
    ASSERT_EQ(two.b.append(b), PoolOutcome::kOk);
    std::vector<int32_t> toks = a_more;
    toks.insert(toks.end(), b.begin(), b.end());
    ForwardBatch b2;
    b2.tokens = toks;
    b2.all_logits = all;
    b2.seqs.push_back({two.a.block_table(), int64_t(a.size()), int(a_more.size())});
    b2.seqs.push_back({two.b.block_table(), 0, int(b.size())});
    ASSERT_TRUE(m->forward(b2, *two.cache, pool_, logits).ok());
    if (all) {  // rows a_more.size() - 1 and the last
      std::vector<float> l(logits.begin() + int64_t(a_more.size() - 1) * V,
                           logits.begin() + int64_t(a_more.size()) * V);
      l.insert(l.end(), logits.end() - V, logits.end());
      logits = l;
    }
    ASSERT_EQ(logits.size(), size_t(2 * V));
    last[all ? 1 : 0] = logits;
  }
  expect_close(last[0], last[1], "pruned last layer");
}

// Serving formats: each quantises the latent differently from the exact cache, so logits move by
// the format's rounding (BF16 2^-9, FP8 2^-4, INT8 2^-8 · amax, NVFP4 2^-2 relative per latent
// value) amplified through the layers: no tight bound exists at model level (the kernel harness
// checks the codecs exactly). What must hold: smaller records, and logits that still follow the
// exact cache's (cos > 0.9; a codec that scrambled rows would give cos ≈ 0 on random weights).
TEST_P(ForwardTest, ServingCachesStayNearTheExactCache) {
  auto exact_model = load();
  ASSERT_TRUE(exact_model);
  GenerateOptions go;
  go.max_new_tokens = 3;
  go.ignore_eos = true;
  go.keep_prompt_activations = go.keep_decode_logits = true;
  auto base = generate(*exact_model, prompt(20), go, pool_);
  ASSERT_TRUE(base.ok());
  for (KvCacheDtype kv : kAllKvCacheDtypes) {
    RuntimeOptions q;
    q.kv_dtype = kv;
    auto m = load(q);
    ASSERT_TRUE(m);
    auto a = generate(*m, prompt(20), go, pool_);
    ASSERT_TRUE(a.ok());
    const std::string name(kv_cache_dtype_name(kv));
    EXPECT_LT(a->kv_bytes_per_token, base->kv_bytes_per_token) << name;
    ASSERT_EQ(a->prompt_logits.size(), base->prompt_logits.size()) << name;
    EXPECT_GT(logit_cosine(a->prompt_logits, base->prompt_logits), 0.9) << name;
  }
}

// The absorbed query rounded to BF16 (and, on the BF16 / AMX kernels, the probabilities too):
// each attention output moves by ≲ 2^-8 of Σ p|v| (docs/kernels/mla_decode.md), amplified
// through the layers, so as for the serving caches no tight model-level bound exists. What must
// hold: prefill and decode run, and the logits follow the FP32 attention's closely: 1 − cos
// grows as the square of the relative error, ~(2^-8)^2 / 2 ≈ 8e-6 per rounding, seen 1e-6 – 1e-5
// on the tiny models; cos > 0.9999 allows a 1.4% relative error, while a query or output in the
// wrong layout would give cos ≈ 0 on random weights. The same holds for the decompressed
// prefill's BF16 tiles and its int8 tiles (a part's amax / 254 per value: ~3x a BF16 rounding of
// its typical values), prompts forced onto that path (threshold 0), checked on the first layer's
// output: their larger change flips a later layer's top-k expert choice for some token (kimi-k2's
// tiny model, layer 1: 15% of the hidden state, for the BF16 tiles as for the int8 ones).
TEST_P(ForwardTest, LowPrecisionAttentionFollowsFp32Attention) {
  GenerateOptions go;
  go.max_new_tokens = 4;
  go.ignore_eos = true;
  go.keep_prompt_activations = go.keep_decode_logits = true;
  auto run = [&](const RuntimeOptions& ro) { return generate_with(ro, prompt(20), go); };
  for (const int threshold : {kDefaultPrefillAbsorptionThreshold, 0}) {
    RuntimeOptions f32;
    f32.kv_dtype = KvCacheDtype::kBF16;
    f32.matmul_dtype = DType::kF32;
    f32.attention_q_dtype = DType::kF32;
    f32.prefill_absorption_threshold = threshold;
    f32.prefill_path_rule = PrefillPathRule::kLength;  // the 20-token prompt absorbed at 256
    const GenerateResult ra = run(f32);
    std::vector<float> bf16_prompt;
    for (const DType prefill : {DType::kBF16, DType::kI8}) {
      if (prefill == DType::kI8 && threshold != 0) continue;
      RuntimeOptions low = f32;
      low.attention_q_dtype = DType::kBF16;
      low.prefill_attention_dtype = prefill;
      const GenerateResult rb = run(low);
      std::vector<std::pair<const std::vector<float>*, const std::vector<float>*>> pairs;
      if (threshold == 0) {
        ASSERT_FALSE(ra.prompt_hidden.empty());
        ASSERT_EQ(ra.prompt_hidden.size(), rb.prompt_hidden.size());
        pairs.push_back({&ra.prompt_hidden[0], &rb.prompt_hidden[0]});
      } else {
        pairs = {{&ra.prompt_logits, &rb.prompt_logits}, {&ra.decode_logits, &rb.decode_logits}};
      }
      for (const auto& [x, y] : pairs) {
        ASSERT_EQ(x->size(), y->size());
        ASSERT_FALSE(x->empty());
        EXPECT_GT(logit_cosine(*x, *y), 0.9999)
            << "threshold " << threshold << ", prefill " << dtype_name(prefill);
      }
      if (threshold != 0) continue;
      if (prefill == DType::kBF16) bf16_prompt = rb.prompt_hidden[0];
      // The int8 tiles ran where the CPU has them: their first layer is not the BF16 tiles'.
      if (prefill == DType::kI8 && __builtin_cpu_supports("avx512vnni"))
        EXPECT_NE(rb.prompt_hidden[0], bf16_prompt);
    }
  }
}

// Over an INT8 cache, int8 attention (the int8 tiles' setting) runs the absorbed path on int8
// products too (MlaDecodeParams::int8_products; the kernel's arithmetic is checked in
// mla_decode_int8_test.cc): the logits move off the BF16 products' (where the CPU has the
// variant) and stay beside them. The cosine is a wiring check, not an error bound: int8
// codes of the query and probabilities move attention outputs by ~1% of their size.
TEST_P(ForwardTest, Int8CacheDecodesOnInt8Products) {
  GenerateOptions go;
  go.max_new_tokens = 4;
  go.ignore_eos = true;
  go.keep_decode_logits = true;
  auto run = [&](const RuntimeOptions& ro) { return generate_with(ro, prompt(20), go); };
  RuntimeOptions bf16;
  bf16.kv_dtype = KvCacheDtype::kINT8;
  bf16.attention_q_dtype = DType::kBF16;
  // The prompt too on the absorbed path (the decode kernel), so that nothing but that kernel's
  // products tells the two runs apart.
  bf16.prefill_path_rule = PrefillPathRule::kLength;
  RuntimeOptions int8 = bf16;
  int8.prefill_attention_dtype = DType::kI8;
  const GenerateResult a = run(bf16), b = run(int8);
  ASSERT_EQ(a.decode_logits.size(), b.decode_logits.size());
  ASSERT_FALSE(a.decode_logits.empty());
  EXPECT_GT(logit_cosine(a.decode_logits, b.decode_logits), 0.999);
  if (cpu_supports(CpuIsa::kAvx512Bf16) && __builtin_cpu_supports("avx512vnni") &&
      !cpu_supports(CpuIsa::kAmxBf16))
    EXPECT_NE(a.decode_logits, b.decode_logits);
}

TEST_P(ForwardTest, BadBatchesAreRefused) {
  auto m = load();
  ASSERT_TRUE(m);
  GenerateOptions go;
  const std::vector<int32_t> bad = {1, 2, int32_t(m->config().vocab_size)};
  auto r = generate(*m, bad, go, pool_);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("outside"), std::string::npos) << r.status().message();
  go.max_new_tokens = int(m->max_context());
  r = generate(*m, prompt(4), go, pool_);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("context"), std::string::npos);
  EXPECT_FALSE(generate(*m, std::vector<int32_t>{}, GenerateOptions{}, pool_).ok());
}

TEST_P(ForwardTest, BlockTableEntriesOutsideTheCacheAreRefused) {
  // The rows a forward pass writes are addressed through the block table without further checks:
  // an entry past the pool (or negative) must be refused before anything is written.
  auto m = load();
  ASSERT_TRUE(m);
  auto cache = KvCacheStorage::allocate(m->cache_shape(4, 8));
  ASSERT_TRUE(cache.ok());
  const std::vector<int32_t> toks = prompt(12);
  std::vector<float> logits;
  for (const int32_t bad : {4, -1, 1 << 20}) {
    const std::vector<int32_t> table = {0, bad};  // the second page holds tokens 8..11
    ForwardBatch b;
    b.tokens = toks;
    b.seqs.push_back({table, 0, int(toks.size())});
    auto st = m->forward(b, *cache, pool_, logits);
    ASSERT_FALSE(st.ok()) << bad;
    EXPECT_EQ(st.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.status().message().find("entry 1 is page " + std::to_string(bad)),
              std::string::npos)
        << st.status().message();
  }
  const std::vector<int32_t> good = {0, 3};
  ForwardBatch b;
  b.tokens = toks;
  b.seqs.push_back({good, 0, int(toks.size())});
  EXPECT_TRUE(m->forward(b, *cache, pool_, logits).ok());
}

INSTANTIATE_TEST_SUITE_P(Families, ForwardTest,
                         ::testing::Values("v2-lite", "v2", "v3", "kimi-k2", "moonlight",
                                           "minicpm3"),
                         [](const auto& info) {
                           std::string s = info.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

}  // namespace
}  // namespace mla
