// What a frontend hands the serving engine (Request) and what it gets back (RequestEvent, a
// stream of them per request, and RequestOutput, their sum). Plain data; the engine is engine.h.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mla/status.h"
#include "model/sampler.h"

namespace mla::sched {

using RequestId = uint64_t;

struct Request {
  std::vector<int32_t> prompt;  // [prompt tokens], ids in [0, vocab); at least one
  SamplingParams sampling;
  int max_tokens = 16;                  // generated tokens at most (>= 1)
  std::vector<int32_t> stop_token_ids;  // finish "stop" after emitting one of these
  // Finish "stop" when the generated text contains one; the text is cut before it. Needs an
  // engine with a tokenizer.
  std::vector<std::string> stop;
  bool ignore_eos = false;  // keep going past the model's EOS ids (benchmarks want exact lengths)
  bool include_stop_str_in_output = false;  // a stop string that ends the reply stays in its text
  bool skip_special_tokens = true;          // special tokens' text is left out of the reply
  // Report each generated token's logprob and this many alternatives (0..kMaxTopLogprobs);
  // -1: no logprobs.
  int logprobs = -1;
  // vLLM's prompt_logprobs: each prompt token's logprob (from the second on) and this many
  // alternatives (0..kMaxTopLogprobs), on the first event; -1: none. Such a request skips the
  // prefix cache (cached rows have no logits), and its steps compute the logits of every row.
  int prompt_logprobs = -1;
};

inline constexpr int kMaxTopLogprobs = 20;
// Samples of one prompt at most (Engine::submit_n, OpenAI's n).
inline constexpr int kMaxSamplesPerPrompt = 16;

enum class FinishReason : uint8_t {
  kNone,       // still running
  kStop,       // EOS, a stop token id or a stop string
  kLength,     // max_tokens reached
  kCancelled,  // cancel() or engine shutdown
  kError,      // refused after submit (cannot fit) or a failed step; see RequestEvent::error
};
// "stop", "length", "cancelled", "error" (OpenAI's finish_reason values where they exist);
// "" for kNone.
std::string_view finish_reason_name(FinishReason r);

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens served by the prefix cache at first admission
  int num_preemptions = 0;
};

// One step's news for one request. Every generated token appears in exactly one event, in order;
// the last event has finish != kNone (it may carry no token: cancel, error).
struct RequestEvent {
  std::vector<int32_t> token_ids;  // new ids (a stop or EOS id included)
  // Request::logprobs >= 0: one entry per id of token_ids (the model's own distribution,
  // before temperature and bias, as OpenAI reports it).
  std::vector<TokenLogprobs> logprobs;
  // Request::prompt_logprobs >= 0, on the first event: every prompt token in order, the first
  // with no logprob (rank 0: nothing predicts it).
  std::vector<TokenLogprobs> prompt_logprobs;
  // New text (engine with a tokenizer): complete UTF-8 only; text that could be the start of a
  // stop string is held back until it is not; a stop string and what follows never appear, nor
  // does the text of an EOS / stop token id.
  std::string text;
  FinishReason finish = FinishReason::kNone;
  std::string error;  // kError: why
  Usage usage;        // counts so far; final on the last event
};

// Everything a request produced: the events concatenated.
struct RequestOutput {
  std::vector<int32_t> token_ids;
  std::vector<TokenLogprobs> logprobs;
  std::vector<TokenLogprobs> prompt_logprobs;
  std::string text;
  FinishReason finish = FinishReason::kNone;
  std::string error;
  Usage usage;
  void add(const RequestEvent& e);
};

// Checks what needs no engine state: a non-empty prompt with ids in [0, vocab), max_tokens >= 1,
// the sampling params (validate(SamplingParams)), non-empty stop strings. invalid_argument
// naming the field.
Status validate(const Request& r, int64_t vocab);

}  // namespace mla::sched
