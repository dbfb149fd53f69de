// DeepSeek-V2 and ChatML rendering (chat_render.h); DeepSeek-V3 / R1 are in chat_format.cc, the
// Kimi formats in chat_render_kimi.cc.
#include "tokenizer/chat_render.h"

namespace mla::tok::chat_detail {

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
