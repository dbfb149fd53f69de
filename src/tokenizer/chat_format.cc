// Chat format rendering and recognition (see chat_format.h). The DeepSeek renderings follow
// docs/TOKENIZER.md §Chat formats; the V3 one is checked against its Jinja template in the tests.
#include "tokenizer/chat_format.h"

#include <fmt/format.h>

#include "io/safetensors_header.h"
#include "tokenizer/chat_render.h"

namespace mla::tok {
namespace {

using namespace chat_detail;

constexpr const char* kUser = "<｜User｜>";
constexpr const char* kAssistant = "<｜Assistant｜>";

constexpr std::pair<ChatFormat, const char*> kNames[] = {
    {ChatFormat::kDeepSeekV3, "deepseek-v3"},
    {ChatFormat::kDeepSeekR1, "deepseek-r1"},
    {ChatFormat::kDeepSeekR1Original, "deepseek-r1-original"},
    {ChatFormat::kDeepSeekV2, "deepseek-v2"},
    {ChatFormat::kKimiK2, "kimi-k2"},
    {ChatFormat::kKimiK2Thinking, "kimi-k2-thinking"},
    {ChatFormat::kMoonlight, "moonlight"},
    {ChatFormat::kChatMl, "chatml"},
};

// Text after the last </think>: R1 drops past reasoning from the history.
std::string_view after_reasoning(std::string_view s) {
  const size_t at = s.rfind("</think>");
  return at == std::string_view::npos ? s : s.substr(at + 8);
}

constexpr const char* kCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr const char* kCallsEnd = "<｜tool▁calls▁end｜>";
constexpr const char* kCallBegin = "<｜tool▁call▁begin｜>";
constexpr const char* kCallEnd = "<｜tool▁call▁end｜>";
constexpr const char* kToolSep = "<｜tool▁sep｜>";

// DeepSeek's shipped templates take no `tools`: they are listed after the system prompt, one
// JSON object a line, with the call syntax the models were trained to write (docs/TOKENIZER.md
// §Tools).
void deepseek_tools(std::span<const std::string> tools, bool after_system, Out* out) {
  out->text(after_system ? "\n\n## Tools\n\n" : "## Tools\n\n");
  out->text("These functions can be called (parameters as JSON Schema):\n");
  for (const std::string& t : tools) out->text("\n" + t);
  out->text("\n\nTo call functions, write ");
  out->control(kCallsBegin);
  out->text(", then for each call ");
  out->control(kCallBegin);
  out->text("function");
  out->control(kToolSep);
  out->text("FUNCTION_NAME\n```json\nARGUMENTS_AS_JSON\n```");
  out->control(kCallEnd);
  out->text(", and after the last call ");
  out->control(kCallsEnd);
  out->text(".");
}

void deepseek_calls(std::span<const ToolCall> calls, Out* out) {
  out->control(kCallsBegin);
  for (size_t k = 0; k < calls.size(); ++k) {
    const ToolCall& c = calls[k];
    if (k > 0) out->text("\n");
    out->control(kCallBegin);
    out->text(c.type);
    out->control(kToolSep);
    out->text(c.name + "\n```json\n" + c.arguments + "\n```");
    out->control(kCallEnd);
  }
  out->control(kCallsEnd);
}

Result<std::vector<ChatPart>> render_deepseek(ChatFormat f, std::span<const ChatMessage> msgs,
                                              const ChatOptions& opts) {
  const bool r1 = f == ChatFormat::kDeepSeekR1 || f == ChatFormat::kDeepSeekR1Original;
  Out out;
  out.control(kBos);
  // All system messages, joined by a blank line, go first (as the shipped V3 template does).
  bool first_system = true;
  for (const ChatMessage& m : msgs) {
    if (m.role != "system") continue;
    if (!first_system) out.text("\n\n");
    out.text(m.content.value_or(""));
    first_system = false;
  }
  if (!opts.tools.empty()) deepseek_tools(opts.tools, !first_system, &out);
  bool in_tool_outputs = false;
  const auto close_outputs = [&] {
    if (in_tool_outputs) out.control("<｜tool▁outputs▁end｜>");
    in_tool_outputs = false;
  };
  for (size_t i = 0; i < msgs.size(); ++i) {
    const ChatMessage& m = msgs[i];
    if (m.role == "system") continue;
    if (m.role == "user") {
      if (!m.content) return bad_message(i, m, "a user message needs content");
      close_outputs();
      out.control(kUser);
      out.text(*m.content);
    } else if (m.role == "assistant") {
      if (!m.content && m.tool_calls.empty())
        return bad_message(i, m, "an assistant message needs content or tool_calls");
      const std::string_view content = !m.content ? std::string_view()
                                       : r1       ? after_reasoning(*m.content)
                                                  : *m.content;
      if (!m.tool_calls.empty()) {
        // Content, if any, then the calls (the shipped template renders calls only without
        // content; vLLM's tool template renders both).
        close_outputs();
        out.control(kAssistant);
        out.text(content);
        deepseek_calls(m.tool_calls, &out);
        out.control(kEos);
        continue;
      }
      if (in_tool_outputs) {
        // After tool results the answer follows the outputs' end marker directly.
        close_outputs();
      } else {
        out.control(kAssistant);
      }
      out.text(content);
      out.control(kEos);
    } else if (m.role == "tool") {
      if (!m.content) return bad_message(i, m, "a tool message needs content");
      if (in_tool_outputs) {
        out.text("\n");
      } else {
        out.control("<｜tool▁outputs▁begin｜>");
        in_tool_outputs = true;
      }
      out.control("<｜tool▁output▁begin｜>");
      out.text(*m.content);
      out.control("<｜tool▁output▁end｜>");
    } else {
      return bad_message(i, m, "expected system, user, assistant or tool");
    }
  }
  const bool answer_follows = in_tool_outputs;
  close_outputs();
  if (opts.add_generation_prompt && !answer_follows) {
    out.control(kAssistant);
    if (f == ChatFormat::kDeepSeekR1) {
      out.control("<think>");
      out.text("\n");
    }
  }
  return std::move(out.parts);
}

}  // namespace

std::string_view chat_format_name(ChatFormat f) {
  for (const auto& [fmt_, name] : kNames)
    if (fmt_ == f) return name;
  return "?";
}

std::string chat_format_names() {
  std::string s;
  for (const auto& [f, name] : kNames) s += (s.empty() ? "" : ", ") + std::string(name);
  return s;
}

Result<ChatFormat> chat_format_from_name(std::string_view name) {
  for (const auto& [f, n] : kNames)
    if (name == n) return f;
  return invalid_argument(fmt::format("unknown chat format {}; expected one of {}",
                                      io_detail::quote_text(name), chat_format_names()));
}

Result<ChatFormat> detect_chat_format(std::string_view t) {
  const auto has = [&](std::string_view s) { return t.find(s) != std::string_view::npos; };
  if (has("<|im_middle|>"))
    return has("<think></think>") ? ChatFormat::kKimiK2Thinking
           : has("Moonshot-AI")   ? ChatFormat::kMoonlight
                                  : ChatFormat::kKimiK2;
  if (has(kAssistant)) {
    // V3.1's hybrid template closes an empty thought (<｜Assistant｜></think>): not built in.
    if (!has("<｜Assistant｜></think>") && has("</think>"))
      return has("<｜Assistant｜><think>") ? ChatFormat::kDeepSeekR1
                                           : ChatFormat::kDeepSeekR1Original;
    if (!has("</think>")) return ChatFormat::kDeepSeekV3;
  } else if (has("User: ") && has("Assistant:")) {
    return ChatFormat::kDeepSeekV2;
  } else if (has("<|im_start|>") && has("<|im_end|>")) {
    return ChatFormat::kChatMl;
  }
  std::string head(t.substr(0, 80));
  return invalid_argument(
      fmt::format("chat_template {} is not one of the built-in formats; choose one explicitly "
                  "(--chat-format NAME) from: {}",
                  t.empty() ? std::string("(none)") : io_detail::quote_text(head) + "...",
                  chat_format_names()));
}

bool chat_format_has_tools(ChatFormat f) {
  return f != ChatFormat::kDeepSeekV2 && f != ChatFormat::kChatMl;
}

std::vector<ChatPart> forced_tool_call_prefix(ChatFormat f, std::string_view name) {
  Out out;
  if (f == ChatFormat::kKimiK2 || f == ChatFormat::kKimiK2Thinking || f == ChatFormat::kMoonlight) {
    if (f == ChatFormat::kKimiK2Thinking) {  // an empty thought, then the call
      out.soft_control("<think>");
      out.soft_control("</think>");
    }
    out.control("<|tool_calls_section_begin|>");
    out.control("<|tool_call_begin|>");
    out.text("functions." + std::string(name) + (name.empty() ? "" : ":0"));
    if (!name.empty()) out.control("<|tool_call_argument_begin|>");
    return std::move(out.parts);
  }
  if (f == ChatFormat::kDeepSeekR1) {  // the prompt opened a thought: close it, empty
    out.control("</think>");
    out.text("\n\n");
  }
  out.control(kCallsBegin);
  out.control(kCallBegin);
  out.text("function");
  out.control(kToolSep);
  if (!name.empty()) out.text(std::string(name) + "\n```json\n");
  return std::move(out.parts);
}

Result<std::vector<ChatPart>> render_chat(ChatFormat f, std::span<const ChatMessage> messages,
                                          const ChatOptions& opts) {
  const bool forced = !opts.forced_tool.empty() || opts.force_tool_call;
  if ((!opts.tools.empty() || forced) && !chat_format_has_tools(f))
    return unimplemented(fmt::format("the {} chat format has no tool calls", chat_format_name(f)));
  Result<std::vector<ChatPart>> parts = [&]() -> Result<std::vector<ChatPart>> {
    switch (f) {
      case ChatFormat::kDeepSeekV2:
        return render_v2(messages, opts);
      case ChatFormat::kKimiK2:
      case ChatFormat::kKimiK2Thinking:
      case ChatFormat::kMoonlight:
        return render_kimi(f, messages, opts);
      case ChatFormat::kChatMl:
        return render_chatml(messages, opts);
      default:
        return render_deepseek(f, messages, opts);
    }
  }();
  if (parts.ok() && forced && opts.add_generation_prompt)
    for (ChatPart& p : forced_tool_call_prefix(f, opts.forced_tool)) parts->push_back(std::move(p));
  return parts;
}

std::string chat_text(std::span<const ChatPart> parts) {
  std::string s;
  for (const ChatPart& p : parts) s += p.text;
  return s;
}

Result<std::vector<int32_t>> encode_chat(const Tokenizer& t, std::span<const ChatPart> parts) {
  std::vector<int32_t> ids;
  for (const ChatPart& p : parts) {
    bool found = false;
    if (p.control)
      for (const AddedToken& a : t.added_tokens())
        if (a.content == p.text) {
          ids.push_back(a.id);
          found = true;
          break;
        }
    if (!p.control || (!found && p.soft)) {
      MLA_RETURN_IF_ERROR(t.encode_append(p.text, EncodeOptions{}, &ids));
      continue;
    }
    if (!found)
      return invalid_argument(
          fmt::format("the chat format needs the control token {}, which this tokenizer.json lacks "
                      "(wrong --chat-format for this model?)",
                      io_detail::quote_text(p.text)));
  }
  return ids;
}

}  // namespace mla::tok
