#include "server/openai_prompt.h"

#include <fmt/format.h>

#include "tokenizer/json_read.h"

namespace mla::server {
namespace {

using nlohmann::json;
using MaybeError = std::optional<ApiError>;

// content: a string, or a list of {"type": "text", "text": ...} parts joined.
MaybeError message_content(const json& c, const std::string& where, std::string* out) {
  if (c.is_string()) {
    *out = c.get<std::string>();
    return std::nullopt;
  }
  if (!c.is_array())
    return bad_request(where, fmt::format("{} must be a string or a list of content parts", where));
  for (size_t j = 0; j < c.size(); ++j) {
    const std::string pw = fmt::format("{}[{}]", where, j);
    const json& part = c[j];
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      return bad_request(pw, fmt::format("{} must be an object with a type", pw));
    const std::string type = part["type"].get<std::string>();
    if (type != "text")
      return bad_request(pw + ".type", fmt::format("content parts of type \"{}\" are not "
                                                   "supported (only \"text\")",
                                                   type.substr(0, 64)));
    if (!part.contains("text") || !part["text"].is_string())
      return bad_request(pw + ".text", fmt::format("{}.text must be a string", pw));
    *out += part["text"].get<std::string>();
  }
  return std::nullopt;
}

MaybeError tool_calls(const json& v, const std::string& where, std::vector<tok::ToolCall>* out) {
  if (!v.is_array()) return bad_request(where, fmt::format("{} must be a list", where));
  for (size_t j = 0; j < v.size(); ++j) {
    const std::string w = fmt::format("{}[{}].function", where, j);
    const json* f = v[j].is_object() && v[j].contains("function") ? &v[j]["function"] : nullptr;
    if (!f || !f->is_object() || !f->contains("name") || !(*f)["name"].is_string())
      return bad_request(w, fmt::format("{} must be an object with a name", w));
    tok::ToolCall call;
    call.name = (*f)["name"].get<std::string>();
    if (v[j].contains("id") && v[j]["id"].is_string()) call.id = v[j]["id"].get<std::string>();
    if (f->contains("arguments")) {
      const json& a = (*f)["arguments"];
      // Not a string (OpenAI sends one): as the templates' tojson writes it.
      call.arguments = a.is_string() ? a.get<std::string>() : tok::python_json(tok::OrderedJson(a));
    }
    out->push_back(std::move(call));
  }
  return std::nullopt;
}

MaybeError chat_messages(const json& body, std::vector<tok::ChatMessage>* out) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) return bad_request("messages", "messages is required");
  if (!it->is_array()) return bad_request("messages", "messages must be a list");
  if (it->empty()) return bad_request("messages", "messages must not be empty");
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    const std::string w = fmt::format("messages[{}]", i);
    if (!m.is_object()) return bad_request(w, fmt::format("{} must be an object", w));
    tok::ChatMessage msg;
    if (!m.contains("role") || !m["role"].is_string())
      return bad_request(w + ".role", fmt::format("{}.role must be a string", w));
    msg.role = m["role"].get<std::string>();
    if (msg.role == "developer") msg.role = "system";  // OpenAI's newer name for it
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" && msg.role != "tool")
      return bad_request(w + ".role", fmt::format("{}.role \"{}\" is not one of system, "
                                                  "developer, user, assistant, tool",
                                                  w, msg.role.substr(0, 64)));
    if (m.contains("tool_calls") && !m["tool_calls"].is_null())
      if (auto e = tool_calls(m["tool_calls"], w + ".tool_calls", &msg.tool_calls)) return e;
    const bool has_content = m.contains("content") && !m["content"].is_null();
    if (has_content) {
      std::string text;
      if (auto e = message_content(m["content"], w + ".content", &text)) return e;
      msg.content = std::move(text);
    } else if (msg.role != "assistant" || msg.tool_calls.empty()) {
      return bad_request(w + ".content", fmt::format("{}.content is required", w));
    }
    if (m.contains("name") && m["name"].is_string()) msg.name = m["name"].get<std::string>();
    if (m.contains("tool_call_id") && m["tool_call_id"].is_string())
      msg.tool_call_id = m["tool_call_id"].get<std::string>();
    // A reply's reasoning sent back with it (kimi-k2-thinking shows it; the others drop it).
    if (m.contains("reasoning_content") && !m["reasoning_content"].is_null()) {
      if (!m["reasoning_content"].is_string())
        return bad_request(w + ".reasoning_content",
                           fmt::format("{}.reasoning_content must be a string", w));
      msg.reasoning_content = m["reasoning_content"].get<std::string>();
    }
    out->push_back(std::move(msg));
  }
  return std::nullopt;
}

MaybeError ids_of(const json& list, const ServedModel& m, const std::string& where,
                  std::vector<int32_t>* ids) {
  if (list.empty()) return bad_request("prompt", fmt::format("{} is empty", where));
  for (size_t i = 0; i < list.size(); ++i) {
    const json& v = list[i];
    if (!v.is_number_integer())
      return bad_request("prompt", fmt::format("{}[{}] is {}: a token-id prompt holds only "
                                               "integers",
                                               where, i, tok::json_excerpt(v)));
    const bool neg = !v.is_number_unsigned() && v.get<int64_t>() < 0;
    if (neg || v.get<uint64_t>() >= uint64_t(m.vocab))
      return bad_request("prompt", fmt::format("invalid token id {} at {}[{}]: ids are in [0, {})",
                                               tok::json_excerpt(v), where, i, m.vocab));
    ids->push_back(int32_t(v.get<int64_t>()));
  }
  return std::nullopt;
}

// Text of `bytes` bytes is at least bytes / max_token_bytes tokens: when that alone passes the
// context, answer without encoding it (a 4 MiB prompt would otherwise become millions of ids).
MaybeError too_long_to_encode(size_t bytes, const ServedModel& m, const char* param) {
  if (m.max_token_bytes <= 0 || m.max_context <= 0) return std::nullopt;
  const int64_t at_least = int64_t(bytes) / m.max_token_bytes;
  if (at_least <= m.max_context) return std::nullopt;
  ApiError e = bad_request(
      param, fmt::format("This model's maximum context length is {} tokens. However, your prompt "
                         "has at least {} tokens ({} bytes of text, no token longer than {} "
                         "bytes).",
                         m.max_context, at_least, bytes, m.max_token_bytes));
  e.code = "context_length_exceeded";
  return e;
}

MaybeError text_prompt(const std::string& text, const ServedModel& m, std::vector<int32_t>* ids) {
  if (!m.tokenizer)
    return bad_request("prompt", "this model has no tokenizer: send the prompt as token ids");
  if (auto e = too_long_to_encode(text.size(), m, "prompt")) return e;
  tok::EncodeOptions eo;
  eo.add_bos = m.tokenizer->adds_bos();
  // Added-token text in a completions prompt is that token, as Hugging Face `tokenizers` (and
  // vLLM) encode it: clients that apply the chat template themselves send it so.
  eo.parse_special = true;
  Result<std::vector<int32_t>> r = m.tokenizer->tokenizer.encode(text, eo);
  if (!r.ok()) return bad_request("prompt", r.status().message());
  if (r->empty()) return bad_request("prompt", "the prompt is empty");
  *ids = std::move(*r);
  return std::nullopt;
}

}  // namespace

MaybeError chat_prompt(const json& body, const ServedModel& m, const tok::ChatOptions& opts,
                       std::vector<int32_t>* ids) {
  std::vector<tok::ChatMessage> messages;
  if (auto e = chat_messages(body, &messages)) return e;
  if (!m.tokenizer || !m.chat_format) {
    ApiError e = bad_request("messages", "this model has no chat template; use /v1/completions");
    return e;
  }
  size_t content_bytes = 0;
  for (const tok::ChatMessage& msg : messages)
    content_bytes += msg.content ? msg.content->size() : 0;
  for (const std::string& t : opts.tools) content_bytes += t.size();
  if (auto e = too_long_to_encode(content_bytes, m, "messages")) return e;
  Result<std::vector<tok::ChatPart>> parts = tok::render_chat(*m.chat_format, messages, opts);
  if (!parts.ok()) return bad_request("messages", parts.status().message());
  Result<std::vector<int32_t>> r = tok::encode_chat(m.tokenizer->tokenizer, *parts);
  if (!r.ok()) return bad_request("messages", r.status().message());
  *ids = std::move(*r);
  return std::nullopt;
}

MaybeError completion_prompts(const json& body, const ServedModel& m,
                              std::vector<std::vector<int32_t>>* prompts,
                              std::vector<std::string>* texts) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return bad_request("prompt", "prompt is required");
  const json& p = *it;
  auto add_text = [&](const std::string& s) -> MaybeError {
    std::vector<int32_t> ids;
    if (auto e = text_prompt(s, m, &ids)) return e;
    prompts->push_back(std::move(ids));
    texts->push_back(s);
    return std::nullopt;
  };
  auto add_ids = [&](const json& list, const std::string& where) -> MaybeError {
    std::vector<int32_t> ids;
    if (auto e = ids_of(list, m, where, &ids)) return e;
    std::string text;
    if (m.tokenizer) {
      tok::DecodeOptions d;
      d.skip_special = false;
      if (auto t = m.tokenizer->tokenizer.decode(ids, d); t.ok()) text = std::move(*t);
    }
    prompts->push_back(std::move(ids));
    texts->push_back(std::move(text));
    return std::nullopt;
  };
  if (p.is_string()) return add_text(p.get<std::string>());
  if (!p.is_array() || p.empty())
    return bad_request("prompt",
                       "prompt must be a string, a list of strings, a list of token ids "
                       "or a list of token-id lists, and not empty");
  const bool strings = p[0].is_string(), lists = p[0].is_array();
  if (!strings && !lists) return add_ids(p, "prompt");
  if (p.size() > kMaxPrompts)
    return bad_request("prompt", fmt::format("prompt holds {} prompts, at most {} are allowed",
                                             p.size(), kMaxPrompts));
  for (size_t i = 0; i < p.size(); ++i) {
    if (strings != p[i].is_string() || lists != p[i].is_array())
      return bad_request("prompt", fmt::format("prompt[{}] is {}: the list mixes types", i,
                                               tok::json_excerpt(p[i])));
    if (auto e = strings ? add_text(p[i].get<std::string>())
                         : add_ids(p[i], fmt::format("prompt[{}]", i)))
      return e;
  }
  return std::nullopt;
}

}  // namespace mla::server
