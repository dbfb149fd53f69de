// Kimi-K2, Kimi-K2-Thinking and Moonlight rendering (chat_render.h), as Moonshot AI's templates
// render through transformers (docs/TOKENIZER.md §Chat formats; checked against them by
// tests/e2e/tokenizer/kimi_chat_oracle.py's golden):
//   [<|im_system|>tool_declare<|im_middle|>TOOLS<|im_end|>]     TOOLS = json.dumps(tools)
//   [<|im_system|>system<|im_middle|>DEFAULT<|im_end|>]          when the first turn is no system
//   per message: <|im_ROLE|>NAME<|im_middle|>BODY<|im_end|>       NAME = name or role; tool turns
//                                                                  are <|im_system|>
//   BODY: user / system: content; tool: "## Return of ID\n" content;
//         assistant: [<think>R</think>] content [<|tool_calls_section_begin|>
//                    (<|tool_call_begin|>ID<|tool_call_argument_begin|>ARGS<|tool_call_end|>)*
//                    <|tool_calls_section_end|>]
//   Thinking shows R (reasoning_content) for the assistant turns after the last one without tool
//   calls and an empty <think></think> for that one and those before it.
#include <optional>

#include "tokenizer/chat_render.h"

namespace mla::tok::chat_detail {
namespace {

constexpr const char* kKimiDefaultSystem = "You are Kimi, an AI assistant created by Moonshot AI.";
constexpr const char* kMoonlightDefaultSystem =
    "You are a helpful assistant provided by Moonshot-AI.";

// The tools list as the templates' `tools | tojson` writes it.
Result<std::string> tool_declaration(std::span<const std::string> tools) {
  std::string list = "[";
  for (size_t k = 0; k < tools.size(); ++k) {
    Result<OrderedJson> tool = parse_ordered_json(tools[k], fmt::format("tools[{}]", k));
    if (!tool.ok()) return tool.status();
    list += (k ? ", " : "") + python_json(*tool);
  }
  return list + "]";
}

// Index of the last assistant turn without tool calls, or -1: Thinking's history ends there.
ptrdiff_t last_plain_reply(std::span<const ChatMessage> msgs) {
  for (ptrdiff_t i = ptrdiff_t(msgs.size()) - 1; i >= 0; --i)
    if (msgs[size_t(i)].role == "assistant" && msgs[size_t(i)].tool_calls.empty()) return i;
  return -1;
}

}  // namespace

Result<std::vector<ChatPart>> render_kimi(ChatFormat f, std::span<const ChatMessage> msgs,
                                          const ChatOptions& opts) {
  Out out;
  const auto open = [&](const char* marker, std::string_view name) {
    out.control(marker);
    out.text(name);
    out.control("<|im_middle|>");
  };
  if (!opts.tools.empty()) {
    Result<std::string> list = tool_declaration(opts.tools);
    if (!list.ok()) return list.status();
    open("<|im_system|>", "tool_declare");
    out.text(*list);
    out.control("<|im_end|>");
  }
  if (msgs.empty() || msgs[0].role != "system") {
    open("<|im_system|>", "system");
    out.text(f == ChatFormat::kMoonlight ? kMoonlightDefaultSystem : kKimiDefaultSystem);
    out.control("<|im_end|>");
  }
  const bool thinking = f == ChatFormat::kKimiK2Thinking;
  const ptrdiff_t history_end = thinking ? last_plain_reply(msgs) : -1;
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
    if (thinking && assistant) {
      out.soft_control("<think>");
      if (ptrdiff_t(i) > history_end) out.text(m.reasoning_content.value_or(""));
      out.soft_control("</think>");
    }
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

}  // namespace mla::tok::chat_detail
