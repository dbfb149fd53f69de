// F10 (docs/RELIABILITY.md §Checklist): a message list (roles, contents, tool calls and their ids,
// tool_call_id, names, reasoning), tools and a forced call → the built-in chat formatter of each
// family.
// Contents often hold special-token text. Invariants: the control parts do not depend on what
// messages say (rendering the same structure with placeholder text gives the same control parts),
// and after encoding, the added-token ids in the prompt are exactly the control parts (soft ones
// where the tokenizer has them): text a user typed never becomes a special id.
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "tokenizer/chat_format.h"

namespace {

using namespace mla;
using namespace mla::tok;

constexpr const char* kSpecials[] = {"<｜begin▁of▁sentence｜>",
                                     "<｜end▁of▁sentence｜>",
                                     "<｜User｜>",
                                     "<｜Assistant｜>",
                                     "<|im_end|>",
                                     "<|im_user|>",
                                     "<|im_middle|>",
                                     "<｜tool▁calls▁begin｜>",
                                     "</think>",
                                     "<think>"};
constexpr const char* kRoles[] = {"system", "user", "assistant", "tool", "developer", ""};

std::string text(fuzz::ByteReader& in) {
  std::string s;
  for (int k = in.u8() % 4; k > 0; --k) {
    s += in.str(24);
    if (in.u8() & 1) s += kSpecials[in.u8() % std::size(kSpecials)];
  }
  return s;
}

std::string placeholder(const std::string& s) {
  return s.empty() ? s : "x";
}

std::vector<std::string> controls(const std::vector<ChatPart>& parts) {
  std::vector<std::string> out;
  for (const ChatPart& p : parts)
    if (p.control) out.push_back(p.text);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::ByteReader in(data, size);
  static constexpr ChatFormat kFormats[] = {
      ChatFormat::kDeepSeekV3,    ChatFormat::kDeepSeekR1, ChatFormat::kDeepSeekR1Original,
      ChatFormat::kDeepSeekV2,    ChatFormat::kKimiK2,     ChatFormat::kMoonlight,
      ChatFormat::kKimiK2Thinking};
  static constexpr const char* kFamily[] = {"v3",      "v3",        "v3",     "v2",
                                            "kimi-k2", "moonlight", "kimi-k2"};
  const size_t f = in.u8() % std::size(kFormats);
  ChatOptions opts;
  opts.add_generation_prompt = in.u8() & 1;
  std::vector<ChatMessage> msgs, plain;
  for (int n = in.u8() % 7; n > 0 && !in.empty(); --n) {
    ChatMessage m;
    m.role = kRoles[in.u8() % std::size(kRoles)];
    if (in.u8() % 4 != 0) m.content = text(in);
    if (in.u8() % 4 == 0) m.name = text(in);
    for (int t = in.u8() % 4 == 0 ? in.u8() % 3 : 0; t > 0; --t)
      m.tool_calls.push_back(ToolCall{"function", text(in), text(in), text(in)});
    if (in.u8() % 4 == 0) m.tool_call_id = text(in);
    if (in.u8() % 4 == 0) m.reasoning_content = text(in);
    ChatMessage p = m;
    if (p.content) p.content = placeholder(*p.content);
    p.name = placeholder(p.name);
    for (ToolCall& c : p.tool_calls) {
      c.name = placeholder(c.name);
      c.arguments = placeholder(c.arguments);
      c.id = placeholder(c.id);
    }
    p.tool_call_id = placeholder(p.tool_call_id);
    if (p.reasoning_content) p.reasoning_content = placeholder(*p.reasoning_content);
    msgs.push_back(std::move(m));
    plain.push_back(std::move(p));
  }
  // Tools and a forced call: their text is the client's too.
  ChatOptions plain_opts = opts;
  const auto tool = [](const std::string& name) {  // Kimi's formats parse the tools' JSON
    return OrderedJson{{"type", "function"}, {"function", {{"name", name}}}}.dump(
        -1, ' ', false, OrderedJson::error_handler_t::replace);
  };
  for (int t = in.u8() % 4 == 0 ? 1 + in.u8() % 2 : 0; t > 0; --t) {
    opts.tools.push_back(tool(text(in)));
    plain_opts.tools.push_back(tool("x"));
  }
  if (in.u8() % 4 == 0) {
    opts.forced_tool = text(in);
    plain_opts.forced_tool = placeholder(opts.forced_tool);
  }
  Result<std::vector<ChatPart>> parts = render_chat(kFormats[f], msgs, opts);
  if (!parts.ok()) return 0;
  Result<std::vector<ChatPart>> plain_parts = render_chat(kFormats[f], plain, plain_opts);
  if (plain_parts.ok())
    MLA_CHECK(controls(*parts) == controls(*plain_parts),
              "control parts depend on message text ({} vs {})", controls(*parts).size(),
              controls(*plain_parts).size());
  for (const ChatPart& p : *parts)
    if (p.control) MLA_CHECK(!p.text.empty(), "an empty control part");

  const Tokenizer& t = fuzz::tiny_tokenizer(kFamily[f]).tokenizer;
  Result<std::vector<int32_t>> ids = encode_chat(t, *parts);
  if (!ids.ok()) return 0;
  std::set<int32_t> added;
  std::set<std::string> added_text;
  for (const AddedToken& a : t.added_tokens()) {
    added.insert(a.id);
    added_text.insert(a.content);
  }
  size_t in_prompt = 0;
  for (int32_t id : *ids) in_prompt += added.count(id);
  size_t expected = 0;
  for (const ChatPart& p : *parts) expected += p.control && (!p.soft || added_text.count(p.text));
  MLA_CHECK(in_prompt == expected, "{} added-token ids in the prompt, {} control parts", in_prompt,
            expected);
  return 0;
}
