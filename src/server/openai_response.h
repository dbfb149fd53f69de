// The response side of the OpenAI API: chat.completion / text_completion objects, their stream
// chunks (chat.completion.chunk, text_completion), usage and both logprobs formats, built from the
// engine's events (docs/SERVING.md §Responses).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "sched/request.h"
#include "server/openai_request.h"
#include "server/reply_parser.h"
#include "tokenizer/tokenizer.h"

namespace mla::server {

// What every object of one response shares.
struct ResponseMeta {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;       // "chatcmpl-…" or "cmpl-…", the same in every chunk
  int64_t created = 0;  // Unix seconds
  std::string model;
  LogprobsStyle logprobs = LogprobsStyle::kNone;
  const tok::Tokenizer* tokenizer = nullptr;  // token texts for logprobs (else "token_id:N")
  bool tokens_as_ids = false;                 // logprobs name tokens "token_id:N" regardless
  // Chat: how a reply splits into reasoning_content, content and tool_calls (reply_parser.h).
  ReplyOptions reply;
  bool prompt_logprobs = false;  // choices carry vLLM's prompt_logprobs list
};
// `model` serves the request: its chat format picks the tool-call syntax, and its reasoning flag
// (R1 formats, --reasoning-parser) the reasoning split.
ResponseMeta make_response_meta(const CompletionSpec& spec, const ServedModel& model);

// "stop" / "length" for a finished choice; "tool_calls" for a stop after tool calls.
const char* finish_reason_json(sched::FinishReason r, int tool_calls = 0);

// OpenAI's message.tool_calls entries (index: the first call's position in the reply).
nlohmann::json tool_calls_json(std::span<const ParsedToolCall> calls);
// The two stream deltas of one call, as OpenAI streams them: id, type and name with empty
// arguments, then the arguments.
nlohmann::json tool_call_header_delta(int index, const ParsedToolCall& call);
nlohmann::json tool_call_arguments_delta(int index, const ParsedToolCall& call);

// usage over all choices: prompt, completion and total tokens, prompt_tokens_details.cached_tokens.
nlohmann::json usage_json(std::span<const sched::Usage> usage);

// The logprobs object for `ids` in the meta's style; legacy text_offset values start at
// *text_offset (a byte offset into the text), which is moved past these tokens.
nlohmann::json logprobs_json(const ResponseMeta& meta, std::span<const int32_t> ids,
                             std::span<const TokenLogprobs> lps, int64_t* text_offset);

// vLLM's prompt_logprobs list of a choice: null for the first prompt token, then per token
// {"<id>": {logprob, rank, decoded_token}} for the token and its alternatives.
nlohmann::json prompt_logprobs_json(const ResponseMeta& meta, std::span<const TokenLogprobs> lps);
// The legacy logprobs of an echoed prompt (completions, echo with logprobs): its tokens, the
// first with null logprob and alternatives; text_offset as logprobs_json.
nlohmann::json echo_prompt_logprobs_json(const ResponseMeta& meta,
                                         std::span<const TokenLogprobs> prompt,
                                         int64_t* text_offset);
// Appends a legacy logprobs object's lists to another's.
void append_logprobs(nlohmann::json rest, nlohmann::json* to);

// The whole non-streamed response; outputs[i] is choice i, echo[i] its prompt text (or none).
// usage: every sample's (best_of counts the samples not returned); empty: the outputs'.
nlohmann::json completion_response(const ResponseMeta& meta,
                                   std::span<const sched::RequestOutput> outputs,
                                   std::span<const std::string> echo,
                                   std::span<const sched::Usage> usage = {});

// One stream chunk for choice `index`: the role-only first delta (chat), new text (with its
// logprobs or null), or the final chunk with finish_reason (null otherwise). `usage_null`:
// include_usage is on, so every chunk but the last carries "usage": null.
struct ChunkContent {
  bool role = false;  // chat: {"role": "assistant"}
  std::string text;
  std::string reasoning;           // chat with reasoning split: delta.reasoning_content
  nlohmann::json tool_calls;       // chat: delta.tool_calls (null when none)
  nlohmann::json prompt_logprobs;  // the first chunk of a choice with prompt_logprobs
  nlohmann::json logprobs;         // null when none
  const char* finish = nullptr;    // null until the final chunk
};
nlohmann::json stream_chunk(const ResponseMeta& meta, int index, const ChunkContent& c,
                            bool usage_null);
// The include_usage chunk: "choices": [] and the usage.
nlohmann::json usage_chunk(const ResponseMeta& meta, std::span<const sched::Usage> usage);

}  // namespace mla::server
