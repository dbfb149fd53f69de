// The request side of the OpenAI API: a JSON body of /v1/chat/completions or /v1/completions
// checked field by field (docs/SERVING.md §Request fields, docs/RELIABILITY.md §Checklist R37-R43)
// and turned into the engine's Request plus what the response needs (stream, usage, logprobs style,
// echo). Every refusal names the field; unknown fields are ignored, never rejected.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/json_constraint.h"
#include "sched/request.h"
#include "server/api_error.h"
#include "tokenizer/chat_format.h"
#include "tokenizer/tokenizer_config.h"

namespace mla::server {

enum class Endpoint { kChat, kCompletions };
enum class LogprobsStyle {
  kNone,
  kChat,    // choices[].logprobs.content[] = {token, logprob, bytes, top_logprobs[]}
  kLegacy,  // completions: {tokens, token_logprobs, top_logprobs[{tok: lp}], text_offset}
};

// What requests are checked against.
struct ServedModel {
  std::string name;                                 // the id clients must send as `model`
  const tok::LoadedTokenizer* tokenizer = nullptr;  // none: token-id prompts only
  std::optional<tok::ChatFormat> chat_format;       // none: /v1/chat/completions is refused
  // Chat replies split into message.reasoning_content and content (`--reasoning-parser`; on by
  // default for the R1 chat formats: reasoning_split.h).
  bool reasoning = false;
  int64_t vocab = 0;             // logits width: every token id must be below it
  int64_t max_context = 0;       // prompt + completion tokens, the model's limit
  int64_t max_total_tokens = 0;  // prompt + completion tokens one request's KV pages can hold
  // The longest token text in bytes (0: unknown). A text of B bytes encodes to at least
  // B / max_token_bytes tokens, so a prompt that cannot fit is refused before it is encoded.
  int64_t max_token_bytes = 0;
  // The tokenizer's tokens as a byte trie, for constrained decoding (response_format, forced
  // tool calls); none without a tokenizer.
  std::shared_ptr<const VocabTrie> vocab_trie;
};

// The tool-calling side of a chat request (openai_tools.h, docs/SERVING.md §Tool calling).
struct ToolRequest {
  std::vector<std::string> names;  // the request's functions
  bool parse = false;              // replies go through the tool-call parser
  bool parallel = true;            // parallel_tool_calls
  std::string forced;              // the function tool_choice names (or the one `required` has)
  bool forced_any = false;         // `required` with several tools: a call to one of them
  std::string forced_prefix;       // the text of that call's opening, which ends the prompt
};

struct CompletionSpec {
  Endpoint endpoint = Endpoint::kCompletions;
  std::vector<std::vector<int32_t>> prompts;  // ids checked against vocab
  int n = 1;  // samples of each prompt: choice c is sample c % n of prompt c / n
  // best_of > n: n above is best_of, and the `keep` samples of each prompt with the highest
  // cumulative logprob are returned (0: all n are).
  int keep = 0;
  std::vector<std::string> echo_texts;  // completions with echo: each prompt's text
  sched::Request request;               // sampling, limits, stops; prompt left empty
  bool max_tokens_given = false;        // else: chat takes the rest of the context, completions 16
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  LogprobsStyle logprobs = LogprobsStyle::kNone;
  // vLLM's return_tokens_as_token_ids: logprobs name tokens "token_id:N" (distinct tokens with
  // the same text, e.g. two invalid UTF-8 bytes, stay apart).
  bool tokens_as_ids = false;
  bool prompt_logprobs = false;  // choices carry vLLM's prompt_logprobs list
  ToolRequest tools;             // chat only

  size_t num_choices() const { return prompts.size() * size_t(n); }
};

// Largest nesting of arrays and objects a body may have (checked before parsing).
inline constexpr int kMaxJsonDepth = 64;
// Strings in `stop`: at most this many, each at most kMaxStopBytes.
inline constexpr size_t kMaxStopStrings = 4;
inline constexpr size_t kMaxStopBytes = 256;
// Choices in one request: prompts of /v1/completions times n.
inline constexpr size_t kMaxPrompts = 16;

// A body as a JSON object: syntax errors, trailing garbage, duplicate keys, nesting deeper than
// kMaxJsonDepth and non-objects are 400s.
std::optional<ApiError> parse_json_object(std::string_view body, nlohmann::json* out);

// A completion request body; fills *out or returns the error (400, or 404 for an unknown model).
// `raw_body`, the text `body` was parsed from, keeps the tools' key order in the prompt.
std::optional<ApiError> parse_completion_request(Endpoint endpoint, const nlohmann::json& body,
                                                 const ServedModel& model, CompletionSpec* out,
                                                 std::string_view raw_body = {});

// The 404 for a `model` other than the served one.
ApiError model_not_found(const std::string& requested);

}  // namespace mla::server
