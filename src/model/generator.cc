// generate(): one request, its own cache, chunked prefill then decode.
#include "model/generator.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "cache/sequence_blocks.h"

namespace mla {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Result<GenerateResult> generate(Model& model, std::span<const int32_t> prompt,
                                const GenerateOptions& o, ThreadPool& pool,
                                const std::function<void(int32_t)>& on_token) {
  const ModelConfig& c = model.config();
  if (prompt.empty()) return invalid_argument("generate: the prompt is empty");
  if (o.max_new_tokens < 0 || o.prefill_chunk < 1)
    return invalid_argument(fmt::format("generate: max_new_tokens {} and prefill_chunk {}",
                                        o.max_new_tokens, o.prefill_chunk));
  MLA_RETURN_IF_ERROR(validate(o.sampling, c.vocab_size));
  const int64_t total = int64_t(prompt.size()) + o.max_new_tokens;
  if (total > model.max_context())
    return invalid_argument(fmt::format(
        "generate: prompt ({} tokens) + max_new_tokens ({}) = {} exceeds the context of {} tokens",
        prompt.size(), o.max_new_tokens, total, model.max_context()));

  const int32_t blocks = int32_t((total + o.page_size - 1) / o.page_size);
  MLA_ASSIGN_OR_RETURN(BlockPool pool_ids, BlockPool::create(blocks, o.page_size));
  MLA_ASSIGN_OR_RETURN(KvCacheStorage cache,
                       KvCacheStorage::allocate(model.cache_shape(blocks, o.page_size)));
  SequenceBlocks seq(&pool_ids, &cache);
  SamplingParams sp = o.sampling;
  if (sp.min_tokens > 0 && !o.ignore_eos)  // EOS cannot end the reply before min_tokens
    for (int64_t id : c.eos_token_ids)
      if (id >= 0 && id < c.vocab_size) sp.min_tokens_blocked.push_back(int32_t(id));
  Sampler sampler(std::move(sp));
  sampler.set_prompt(prompt);
  GenerateResult res;
  res.kv_bytes_per_token = cache.record_bytes() * cache.num_layers();

  std::vector<float> logits;
  auto run = [&](std::span<const int32_t> toks, bool all_logits,
                 std::vector<std::vector<float>>* hidden) -> Result<ForwardStats> {
    const int64_t start = seq.num_tokens();
    if (seq.append(toks) != PoolOutcome::kOk)  // sized for the request: cannot happen
      return Status(StatusCode::kResourceExhausted, "generate: the request's cache is full");
    ForwardBatch b;
    b.tokens = toks;
    b.seqs.push_back({seq.block_table(), start, int(toks.size())});
    b.all_logits = all_logits;
    b.hidden_dump = hidden;
    return model.forward(b, cache, pool, logits);
  };

  // Prefill, chunk by chunk.
  const auto t_prefill = std::chrono::steady_clock::now();
  for (size_t at = 0; at < prompt.size(); at += size_t(o.prefill_chunk)) {
    const size_t n = std::min(prompt.size() - at, size_t(o.prefill_chunk));
    std::vector<std::vector<float>> hidden;
    const auto t0 = std::chrono::steady_clock::now();
    MLA_ASSIGN_OR_RETURN(ForwardStats st, run(prompt.subspan(at, n), o.keep_prompt_activations,
                                              o.keep_prompt_activations ? &hidden : nullptr));
    PrefillChunk ch{int64_t(at), int(n),
                    st.decompressed_chunks ? MlaPath::kDecompressed : MlaPath::kAbsorbed,
                    seconds_since(t0)};
    res.chunks.push_back(ch);
    if (o.keep_prompt_activations) {
      res.prompt_logits.insert(res.prompt_logits.end(), logits.begin(), logits.end());
      res.prompt_hidden.resize(hidden.size());
      for (size_t l = 0; l < hidden.size(); ++l)
        res.prompt_hidden[l].insert(res.prompt_hidden[l].end(), hidden[l].begin(), hidden[l].end());
    }
  }
  res.prefill_seconds = seconds_since(t_prefill);
  // The logits that pick the first new token: the prompt's last row.
  std::vector<float> last(logits.end() - c.vocab_size, logits.end());

  const auto t_decode = std::chrono::steady_clock::now();
  res.finish_reason = "length";
  for (int i = 0; i < o.max_new_tokens; ++i) {
    MLA_ASSIGN_OR_RETURN(int32_t tok, sampler.sample(last));
    res.generated.push_back(tok);
    if (on_token) on_token(tok);
    const bool eos =
        std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), tok) != c.eos_token_ids.end();
    if (eos && !o.ignore_eos) {
      res.finish_reason = "stop";
      break;
    }
    if (i + 1 == o.max_new_tokens) break;  // the last token needs no forward pass
    if (auto st = run(std::span<const int32_t>(&res.generated.back(), 1), false, nullptr); !st.ok())
      return st.status();
    ++res.decode_steps;
    last.assign(logits.begin(), logits.end());
    if (o.keep_decode_logits)
      res.decode_logits.insert(res.decode_logits.end(), last.begin(), last.end());
  }
  res.decode_seconds = seconds_since(t_decode);
  res.kv_bytes_used = int64_t(seq.block_table().size()) * cache.page_bytes() * cache.num_layers();
  return res;
}

}  // namespace mla
