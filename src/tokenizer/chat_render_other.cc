// DeepSeek-V2, Kimi-K2 / Moonlight and ChatML rendering (chat_render.h); DeepSeek-V3 / R1 are
// in chat_format.cc.
#include "tokenizer/chat_render.h"

namespace mla::tok::chat_detail {
namespace {

constexpr const char* kKimiDefaultSystem = "You are Kimi, an AI assistant created by Moonshot AI.";
constexpr const char* kMoonlightDefaultSystem =
    "You are a helpful assistant provided by Moonshot-AI.";

}  // namespace

Result<std::vector<ChatPart>> render_v2(std::span<const ChatMessage> msgs,
                                        const ChatOptions& opts) {
  Out out;
  out.control(kBos);
  for (size_t i = 0; i < msgs.size(); ++i) {
    const ChatMessage& m = msgs[i];
    if (!m.content || !m.tool_calls.empty())
      return bad_message(i, m, "deepseek-v2 needs content and has no tool calls");
    if (m.role == "user") {
      out.text("User: " + *m.content + "\n\n");
    } else if (m.role == "assistant") {
      out.text("Assistant: " + *m.content);
      out.control(kEos);
    } else if (m.role == "system") {
      out.text(*m.content + "\n\n");
    } else {
      return bad_message(i, m, "deepseek-v2 takes system, user or assistant");
    }
  }
  if (opts.add_generation_prompt) out.text("Assistant:");
  return std::move(out.parts);
}

// Kimi-K2's template (docs/TOKENIZER.md §Chat formats): tools in a tool_declare turn first;
// calls after the content as <|tool_call_begin|>ID<|tool_call_argument_begin|>ARGS<|tool_call_end|>
// inside one section; a tool result as "## Return of ID\n" + content under <|im_system|>.
Result<std::vector<ChatPart>> render_kimi(ChatFormat f, std::span<const ChatMessage> msgs,
                                          const ChatOptions& opts) {
  Out out;
  const auto open = [&](const char* marker, std::string_view name) {
    out.control(marker);
    out.text(name);
    out.control("<|im_middle|>");
  };
  if (!opts.tools.empty()) {
    open("<|im_system|>", "tool_declare");
    std::string list = "[";
    for (size_t k = 0; k < opts.tools.size(); ++k) list += (k ? "," : "") + opts.tools[k];
    out.text(list + "]");
    out.control("<|im_end|>");
  }
  if (msgs.empty() || msgs[0].role != "system") {
    open("<|im_system|>", "system");
    out.text(f == ChatFormat::kMoonlight ? kMoonlightDefaultSystem : kKimiDefaultSystem);
    out.control("<|im_end|>");
  }
  for (size_t i = 0; i < msgs.size(); ++i) {
    const ChatMessage& m = msgs[i];
    const bool assistant = m.role == "assistant";
    if (!m.content && !(assistant && !m.tool_calls.empty()))
      return bad_message(i, m, "needs content");
    if (!m.tool_calls.empty() && !assistant)
      return bad_message(i, m, "only assistant messages have tool_calls");
    const char* marker = m.role == "user"                         ? "<|im_user|>"
                         : assistant                              ? "<|im_assistant|>"
                         : m.role == "system" || m.role == "tool" ? "<|im_system|>"
                                                                  : nullptr;
    if (!marker) return bad_message(i, m, "expected system, user, assistant or tool");
    open(marker, m.name.empty() ? m.role : m.name);
    if (m.role == "tool") out.text("## Return of " + m.tool_call_id + "\n");
    out.text(m.content.value_or(""));
    if (!m.tool_calls.empty()) {
      out.control("<|tool_calls_section_begin|>");
      for (const ToolCall& c : m.tool_calls) {
        out.control("<|tool_call_begin|>");
        out.text(c.id);
        out.control("<|tool_call_argument_begin|>");
        out.text(c.arguments);
        out.control("<|tool_call_end|>");
      }
      out.control("<|tool_calls_section_end|>");
    }
    out.control("<|im_end|>");
  }
  if (opts.add_generation_prompt) open("<|im_assistant|>", "assistant");
  return std::move(out.parts);
}

// ChatML as MiniCPM3's template writes it (docs/TOKENIZER.md §Chat formats): every turn
// <|im_start|>{role}\n{content}<|im_end|>\n, the generation prompt <|im_start|>assistant\n.
Result<std::vector<ChatPart>> render_chatml(std::span<const ChatMessage> msgs,
                                            const ChatOptions& opts) {
  Out out;
  for (size_t i = 0; i < msgs.size(); ++i) {
    const ChatMessage& m = msgs[i];
    if (!m.content || !m.tool_calls.empty())
      return unimplemented(fmt::format("messages[{}]: chatml tool calls are not built in", i));
    if (m.role != "system" && m.role != "user" && m.role != "assistant")
      return bad_message(i, m, "expected system, user or assistant");
    out.control("<|im_start|>");
    out.text(m.role + "\n" + *m.content);
    out.control("<|im_end|>");
    out.text("\n");
  }
  if (opts.add_generation_prompt) {
    out.control("<|im_start|>");
    out.text("assistant\n");
  }
  return std::move(out.parts);
}

}  // namespace mla::tok::chat_detail
