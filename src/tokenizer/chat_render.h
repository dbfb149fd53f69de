// The pieces chat_format.cc and chat_render_other.cc share: the rendered-prompt builder, the
// message error, and the renderers of the formats other than DeepSeek-V3 / R1 (docs/TOKENIZER.md
// §Chat formats). Internal to the tokenizer library.
#pragma once

#include <fmt/format.h>

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/safetensors_header.h"
#include "tokenizer/chat_format.h"

namespace mla::tok::chat_detail {

inline constexpr const char* kBos = "<｜begin▁of▁sentence｜>";
inline constexpr const char* kEos = "<｜end▁of▁sentence｜>";

struct Out {
  std::vector<ChatPart> parts;
  void control(const char* token) { parts.push_back({true, token}); }
  void soft_control(const char* token) { parts.push_back({true, token, true}); }
  void text(std::string_view s) {
    if (s.empty()) return;
    if (!parts.empty() && !parts.back().control)
      parts.back().text += s;
    else
      parts.push_back({false, std::string(s)});
  }
};

inline Status bad_message(size_t i, const ChatMessage& m, std::string_view why) {
  return invalid_argument(
      fmt::format("messages[{}] (role {}): {}", i, io_detail::quote_text(m.role), why));
}

Result<std::vector<ChatPart>> render_v2(std::span<const ChatMessage> msgs, const ChatOptions& opts);
Result<std::vector<ChatPart>> render_kimi(ChatFormat f, std::span<const ChatMessage> msgs,
                                          const ChatOptions& opts);
Result<std::vector<ChatPart>> render_chatml(std::span<const ChatMessage> msgs,
                                            const ChatOptions& opts);

}  // namespace mla::tok::chat_detail
