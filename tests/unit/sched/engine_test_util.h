// Shared by the engine tests: a tiny checkpoint loaded once per binary, single-request greedy
// references from generate(), the near-tie rule for comparing greedy outputs, a byte tokenizer.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "bpe_tokenizer_json.h"
#include "model/generator.h"
#include "sched/engine.h"
#include "temp_dir.h"
#include "tiny/tiny_checkpoint.h"

namespace mla::sched::test_util {

// Chunks of up to 8 tokens take the absorbed path, longer ones the decompressed path, so every
// test that prefills a few prompts runs both.
inline constexpr int kTestThreshold = 8;
inline constexpr int kThreads = 2;  // the same count for the engine and the references

// The tiny V3 checkpoint (FP8 weights, vocab 320) cut to 2 layers (the dense one and an MoE one)
// to keep the ThreadSanitizer run short, written and loaded once.
inline Model& tiny_model() {
  static mla::test::TempDir* dir = new mla::test::TempDir("sched_model");
  static Model* model = [] {
    TinyCheckpointOptions o;
    o.family = "v3";
    o.seed = 11;
    o.layers = 2;
    Result<TinyCheckpointInfo> w = write_tiny_checkpoint(o, dir->path());
    if (!w.ok()) ADD_FAILURE() << w.status().to_string();
    RuntimeOptions ro;
    ro.prefill_absorption_threshold = kTestThreshold;
    ro.prefill_path_rule = PrefillPathRule::kLength;  // by length alone, fresh prompts included
    // FP32 products: the engine tests compare batched with single runs, and a BF16 product's
    // rows depend on how many rows share it (kernels/linear.h: > 16 rows take BF16).
    ro.matmul_dtype = DType::kF32;
    ro.attention_q_dtype = DType::kF32;
    ro.max_context = 4096;
    Result<std::unique_ptr<Model>> m = Model::load(dir->path(), ro);
    if (!m.ok()) ADD_FAILURE() << m.status().to_string();
    return m.ok() ? std::move(*m).release() : nullptr;
  }();
  return *model;
}

inline std::vector<int32_t> make_prompt(int n, int salt) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(int32_t(2 + (i * 37 + salt * 101 + (i * i) % 7) % 300));
  return p;
}

struct Reference {
  std::vector<int32_t> tokens;
  std::vector<float> logits;  // [tokens, vocab]: the row each token was chosen from
};

// One request alone through generate(): its own cache, prefill in one chunk, then decodes.
inline Reference reference_greedy(Model& m, const std::vector<int32_t>& prompt, int n) {
  ThreadPool pool(kThreads);
  GenerateOptions go;
  go.max_new_tokens = n;
  go.ignore_eos = true;
  go.keep_prompt_activations = go.keep_decode_logits = true;
  go.page_size = 16;
  Result<GenerateResult> r = generate(m, prompt, go, pool);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  Reference ref;
  if (!r.ok()) return ref;
  const size_t V = size_t(m.config().vocab_size);
  ref.tokens = r->generated;
  ref.logits.assign(r->prompt_logits.end() - int64_t(V), r->prompt_logits.end());
  ref.logits.insert(ref.logits.end(), r->decode_logits.begin(), r->decode_logits.end());
  return ref;
}

// Greedy output of the engine against the reference. Both evaluate the same function in FP32,
// but in different orders: batched weight products vs one row, a prefill chunk over the
// recomputed tokens (after preemption) vs decode steps, chunk boundaries. forward_test bounds
// that difference by 1e-3 · max(1, |logit|) per logit, so two candidates whose reference logits
// lie within twice that can swap places. So: equal, or at the first difference the reference
// scored the engine's token within 2e-3 · max(1, |logit|) of its own (a near-tie; after it the
// continuations differ and are not compared). Returns whether it was a tie.
inline bool expect_greedy_match(const std::vector<int32_t>& got, const Reference& ref,
                                int64_t vocab, const std::string& what) {
  const size_t n = std::min(got.size(), ref.tokens.size());
  EXPECT_EQ(got.size(), ref.tokens.size()) << what;
  for (size_t k = 0; k < n; ++k) {
    if (got[k] == ref.tokens[k]) continue;
    const float* row = &ref.logits[k * size_t(vocab)];
    const float best = row[ref.tokens[k]], mine = row[got[k]];
    const float tol = 2e-3f * std::max(1.0f, std::fabs(best));
    EXPECT_LE(best - mine, tol) << what << ": token " << k << " is " << got[k] << ", the reference "
                                << ref.tokens[k] << " (logits " << mine << " vs " << best << ")";
    return true;
  }
  return false;
}

// A byte-level tokenizer: ids 0..255 are the bytes, 256.. are not in it (they decode to nothing).
inline tok::Tokenizer byte_tokenizer() {
  Result<tok::Tokenizer> t =
      tok::Tokenizer::from_json(tok::testing_tok::byte_level_bpe_json().dump(), "bytes.json");
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return std::move(t).value();
}

}  // namespace mla::sched::test_util
