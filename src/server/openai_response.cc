#include "server/openai_response.h"

#include <fmt/format.h>

#include <chrono>
#include <random>

#include "server/api_error.h"
#include "server/reasoning_split.h"

namespace mla::server {
namespace {

using nlohmann::json;

// The token's bytes, or "token_id:N" (no tokenizer, an id without text, or as_id).
std::string token_text(const ResponseMeta& m, int32_t id, bool as_id = false) {
  const std::string* b = m.tokenizer && !as_id ? m.tokenizer->token_bytes(id) : nullptr;
  return b ? *b : fmt::format("token_id:{}", id);
}

std::string token_name(const ResponseMeta& m, int32_t id) {
  return token_text(m, id, m.tokens_as_ids);
}

json token_bytes_json(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

}  // namespace

ResponseMeta make_response_meta(const CompletionSpec& spec, const ServedModel& model) {
  ResponseMeta m;
  m.endpoint = spec.endpoint;
  std::random_device rd;
  const uint64_t r = (uint64_t(rd()) << 32) ^ rd();
  m.id = fmt::format("{}-{:016x}{:08x}", spec.endpoint == Endpoint::kChat ? "chatcmpl" : "cmpl", r,
                     rd());
  m.created = std::chrono::duration_cast<std::chrono::seconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
  m.model = model.name;
  m.logprobs = spec.logprobs;
  m.tokens_as_ids = spec.tokens_as_ids;
  m.tokenizer = model.tokenizer ? &model.tokenizer->tokenizer : nullptr;
  m.prompt_logprobs = spec.prompt_logprobs;
  if (spec.endpoint != Endpoint::kChat) return m;
  m.reply.reasoning = model.reasoning;
  if (spec.tools.parse && model.chat_format && tool_syntax(*model.chat_format)) {
    ToolCallParser::Options o;
    o.syntax = *tool_syntax(*model.chat_format);
    o.tool_names = spec.tools.names;
    o.parallel = spec.tools.parallel;
    o.id_prefix = fmt::format("call_{:08x}{:08x}_", rd(), rd());
    m.reply.tools = std::move(o);
    m.reply.forced_prefix = spec.tools.forced_prefix;
  }
  return m;
}

const char* finish_reason_json(sched::FinishReason r, int tool_calls) {
  if (r == sched::FinishReason::kStop && tool_calls > 0) return "tool_calls";
  return r == sched::FinishReason::kLength ? "length" : "stop";
}

json usage_json(std::span<const sched::Usage> usage) {
  int64_t prompt = 0, completion = 0, cached = 0;
  for (const sched::Usage& u : usage) {
    prompt += u.prompt_tokens;
    completion += u.completion_tokens;
    cached += u.cached_tokens;
  }
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion},
          {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

json logprobs_json(const ResponseMeta& meta, std::span<const int32_t> ids,
                   std::span<const TokenLogprobs> lps, int64_t* text_offset) {
  int64_t& offset = *text_offset;
  const size_t n = std::min(ids.size(), lps.size());
  if (meta.logprobs == LogprobsStyle::kChat) {
    json content = json::array();
    for (size_t i = 0; i < n; ++i) {
      const std::string t = token_name(meta, ids[i]);
      json top = json::array();
      for (const auto& [id, lp] : lps[i].top) {
        const std::string tt = token_name(meta, id);
        top.push_back({{"token", tt}, {"logprob", lp}, {"bytes", token_bytes_json(tt)}});
      }
      content.push_back({{"token", t},
                         {"logprob", lps[i].logprob},
                         {"bytes", token_bytes_json(t)},
                         {"top_logprobs", std::move(top)}});
    }
    return {{"content", std::move(content)}};
  }
  if (meta.logprobs == LogprobsStyle::kLegacy) {
    json tokens = json::array(), token_lps = json::array(), top = json::array(),
         offsets = json::array();
    for (size_t i = 0; i < n; ++i) {
      tokens.push_back(token_name(meta, ids[i]));
      token_lps.push_back(lps[i].logprob);
      json alt = json::object();
      for (const auto& [id, lp] : lps[i].top) alt[token_name(meta, id)] = lp;
      top.push_back(std::move(alt));
      offsets.push_back(offset);
      offset += int64_t(token_text(meta, ids[i]).size());  // into the text, whatever the names
    }
    return {{"tokens", std::move(tokens)},
            {"token_logprobs", std::move(token_lps)},
            {"top_logprobs", std::move(top)},
            {"text_offset", std::move(offsets)}};
  }
  return nullptr;
}

// vLLM's prompt_logprobs: null for the first prompt token, then per token {"<id>": {logprob,
// rank, decoded_token}} for the token itself and its alternatives.
json prompt_logprobs_json(const ResponseMeta& meta, std::span<const TokenLogprobs> lps) {
  json list = json::array();
  for (size_t i = 0; i < lps.size(); ++i) {
    if (i == 0) {
      list.push_back(nullptr);
      continue;
    }
    json entry = json::object();
    const auto add = [&](int32_t id, float lp, int64_t rank) {
      entry[std::to_string(id)] = {
          {"logprob", lp}, {"rank", rank}, {"decoded_token", token_text(meta, id)}};
    };
    add(lps[i].token, lps[i].logprob, lps[i].rank);
    for (size_t k = 0; k < lps[i].top.size(); ++k)
      if (lps[i].top[k].first != lps[i].token)
        add(lps[i].top[k].first, lps[i].top[k].second, int64_t(k) + 1);
    list.push_back(std::move(entry));
  }
  return list;
}

// Completions with echo and logprobs: the legacy object starts with the prompt's tokens (the
// first with null logprob and alternatives), then the generated ones'.
json echo_prompt_logprobs_json(const ResponseMeta& meta, std::span<const TokenLogprobs> prompt,
                               int64_t* text_offset) {
  std::vector<int32_t> ids;
  for (const TokenLogprobs& lp : prompt) ids.push_back(lp.token);
  json first = {{"tokens", json::array({token_name(meta, ids[0])})},
                {"token_logprobs", json::array({nullptr})},
                {"top_logprobs", json::array({nullptr})},
                {"text_offset", json::array({*text_offset})}};
  *text_offset += int64_t(token_text(meta, ids[0]).size());
  append_logprobs(logprobs_json(meta, std::span(ids).subspan(1), prompt.subspan(1), text_offset),
                  &first);
  return first;
}

void append_logprobs(json rest, json* to) {
  for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
    for (json& v : rest[k]) (*to)[k].push_back(std::move(v));
}

// The legacy object of a reply echoed with logprobs: the prompt's tokens, then the generated.
json echo_logprobs_json(const ResponseMeta& meta, const sched::RequestOutput& o) {
  int64_t offset = 0;
  json all = echo_prompt_logprobs_json(meta, o.prompt_logprobs, &offset);
  append_logprobs(logprobs_json(meta, o.token_ids, o.logprobs, &offset), &all);
  return all;
}

json completion_response(const ResponseMeta& meta, std::span<const sched::RequestOutput> outputs,
                         std::span<const std::string> echo,
                         std::span<const sched::Usage> all_usage) {
  const bool chat = meta.endpoint == Endpoint::kChat;
  json choices = json::array();
  std::vector<sched::Usage> usage;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const sched::RequestOutput& o = outputs[i];
    const std::string prefix = i < echo.size() ? echo[i] : std::string();
    json c = {{"index", i}};
    int calls = 0;
    if (chat) {
      ReplyParser::Parts parts = parse_reply(meta.reply, o.text, &calls);
      const bool null_if_empty = meta.reply.reasoning || calls > 0;
      json msg = {{"role", "assistant"},
                  {"content",
                   parts.content.empty() && null_if_empty ? json(nullptr) : json(parts.content)}};
      if (meta.reply.reasoning) msg["reasoning_content"] = std::move(parts.reasoning);
      if (!parts.calls.empty()) msg["tool_calls"] = tool_calls_json(parts.calls);
      c["message"] = std::move(msg);
    } else {
      c["text"] = prefix + o.text;
    }
    int64_t offset = int64_t(prefix.size());
    const bool echo_logprobs =
        i < echo.size() && meta.logprobs == LogprobsStyle::kLegacy && !o.prompt_logprobs.empty();
    c["logprobs"] = echo_logprobs ? echo_logprobs_json(meta, o)
                                  : logprobs_json(meta, o.token_ids, o.logprobs, &offset);
    if (meta.prompt_logprobs) c["prompt_logprobs"] = prompt_logprobs_json(meta, o.prompt_logprobs);
    c["finish_reason"] = finish_reason_json(o.finish, calls);
    choices.push_back(std::move(c));
    usage.push_back(o.usage);
  }
  return {
      {"id", meta.id},
      {"object", chat ? "chat.completion" : "text_completion"},
      {"created", meta.created},
      {"model", meta.model},
      {"system_fingerprint", "mla"},
      {"choices", std::move(choices)},
      {"usage", usage_json(all_usage.empty() ? std::span<const sched::Usage>(usage) : all_usage)}};
}

json stream_chunk(const ResponseMeta& meta, int index, const ChunkContent& c, bool usage_null) {
  const bool chat = meta.endpoint == Endpoint::kChat;
  json choice = {{"index", index}};
  if (chat) {
    json delta = json::object();
    if (c.role) delta["role"] = "assistant";
    if (!c.reasoning.empty()) delta["reasoning_content"] = c.reasoning;
    if (!c.text.empty()) delta["content"] = c.text;
    if (!c.tool_calls.is_null()) delta["tool_calls"] = c.tool_calls;
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = c.text;
  }
  choice["logprobs"] = c.logprobs;
  if (!c.prompt_logprobs.is_null()) choice["prompt_logprobs"] = c.prompt_logprobs;
  choice["finish_reason"] = c.finish ? json(c.finish) : json(nullptr);
  json j = {{"id", meta.id},
            {"object", chat ? "chat.completion.chunk" : "text_completion"},
            {"created", meta.created},
            {"model", meta.model},
            {"system_fingerprint", "mla"},
            {"choices", json::array({std::move(choice)})}};
  if (usage_null) j["usage"] = nullptr;
  return j;
}

json tool_calls_json(std::span<const ParsedToolCall> calls) {
  json list = json::array();
  for (const ParsedToolCall& c : calls)
    list.push_back({{"id", c.id},
                    {"type", "function"},
                    {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  return list;
}

json tool_call_header_delta(int index, const ParsedToolCall& call) {
  return json::array({{{"index", index},
                       {"id", call.id},
                       {"type", "function"},
                       {"function", {{"name", call.name}, {"arguments", ""}}}}});
}

json tool_call_arguments_delta(int index, const ParsedToolCall& call) {
  return json::array({{{"index", index}, {"function", {{"arguments", call.arguments}}}}});
}

json usage_chunk(const ResponseMeta& meta, std::span<const sched::Usage> usage) {
  return {
      {"id", meta.id},
      {"object", meta.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
      {"created", meta.created},
      {"model", meta.model},
      {"system_fingerprint", "mla"},
      {"choices", json::array()},
      {"usage", usage_json(usage)}};
}

}  // namespace mla::server
