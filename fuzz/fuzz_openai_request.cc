// F8 (docs/RELIABILITY.md §Checklist): a JSON body → parse_json_object → parse_completion_request
// for the chat or completions endpoint (first input byte) against the tiny DeepSeek-V3 tokenizer.
// Invariant: every accepted request satisfies every bound of docs/RELIABILITY.md §Checklist R39-R41
// (and passes the engine's own sched::validate), whatever the body; every refusal has a 4xx status.
#include <cmath>
#include <cstdint>
#include <string_view>

#include "fuzz_common.h"
#include "sched/request.h"
#include "server/openai_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mla;
  using namespace mla::server;
  if (size == 0) return 0;
  const Endpoint endpoint = data[0] & 1 ? Endpoint::kChat : Endpoint::kCompletions;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  static const ServedModel model = [] {
    ServedModel m;
    m.name = "tiny";
    m.tokenizer = &fuzz::tiny_tokenizer("v3");
    m.chat_format = tok::ChatFormat::kDeepSeekV3;
    m.vocab = m.tokenizer->tokenizer.id_limit() + 7;  // the logits may be wider than the vocab
    m.max_context = 256;
    m.max_total_tokens = 200;
    m.vocab_trie = VocabTrie::from_tokenizer(m.tokenizer->tokenizer, m.vocab);
    return m;
  }();
  nlohmann::json j;
  if (std::optional<ApiError> e = parse_json_object(body, &j)) {
    MLA_CHECK(e->status >= 400 && e->status < 500, "status {}", e->status);
    return 0;
  }
  CompletionSpec spec;
  if (std::optional<ApiError> e = parse_completion_request(endpoint, j, model, &spec, body)) {
    MLA_CHECK(e->status >= 400 && e->status < 500, "status {}", e->status);
    return 0;
  }
  const sched::Request& r = spec.request;
  MLA_CHECK(!spec.prompts.empty() && spec.prompts.size() <= kMaxPrompts, "{} prompts",
            spec.prompts.size());
  MLA_CHECK(r.max_tokens >= 1, "max_tokens {}", r.max_tokens);
  MLA_CHECK(r.stop.size() <= kMaxStopStrings, "{} stop strings", r.stop.size());
  for (const std::string& s : r.stop)
    MLA_CHECK(!s.empty() && s.size() <= kMaxStopBytes, "stop of {} bytes", s.size());
  MLA_CHECK(r.logprobs >= -1 && r.logprobs <= sched::kMaxTopLogprobs, "logprobs {}", r.logprobs);
  const SamplingParams& sp = r.sampling;
  MLA_CHECK(std::isfinite(sp.temperature) && sp.temperature >= 0 && sp.temperature <= 2,
            "temperature {}", sp.temperature);
  MLA_CHECK(sp.top_p > 0 && sp.top_p <= 1, "top_p {}", sp.top_p);
  MLA_CHECK(sp.top_k >= 0 && sp.top_k <= model.vocab, "top_k {}", sp.top_k);
  for (const auto& [id, bias] : sp.logit_bias)
    MLA_CHECK(id >= 0 && id < model.vocab && std::isfinite(bias) && std::fabs(bias) <= 100,
              "logit_bias {}: {}", id, bias);
  for (int32_t id : r.stop_token_ids)
    MLA_CHECK(id >= 0 && id < model.vocab, "stop token id {}", id);
  for (const std::vector<int32_t>& p : spec.prompts) {
    const int64_t total = int64_t(p.size()) + r.max_tokens;
    MLA_CHECK(!p.empty() && total <= model.max_context && total <= model.max_total_tokens,
              "prompt {} + max_tokens {} over the limits", p.size(), r.max_tokens);
    sched::Request one = r;
    one.prompt = p;
    Status s = sched::validate(one, model.vocab);
    MLA_CHECK(s.ok(), "accepted request fails the engine's validate: {}", s.to_string());
  }
  return 0;
}
