// F13 (docs/RELIABILITY.md §Checklist): model output → the tool-call parser and the reply parser
// (server/tool_call_parser.h, reply_parser.h), both syntaxes, with and without the R1 reasoning
// split and a forced call's opening. The text is made of the input's bytes and, where a byte
// asks for one, the formats' markers (so calls, partial calls and stray markers all occur).
// Invariants: fed in the input's pieces, the parse equals the whole text's; every call returned
// has a name among the tools and arguments that parse as a JSON object; nothing throws.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "server/reply_parser.h"

namespace {

using namespace mla::server;

constexpr const char* kPieces[] = {"<｜tool▁calls▁begin｜>",
                                   "<｜tool▁calls▁end｜>",
                                   "<｜tool▁call▁begin｜>",
                                   "<｜tool▁call▁end｜>",
                                   "<｜tool▁sep｜>",
                                   "function",
                                   "get_time",
                                   "\n```json\n",
                                   "\n```",
                                   "{\"a\": [1, {\"b\": null}]}",
                                   "<|tool_calls_section_begin|>",
                                   "<|tool_calls_section_end|>",
                                   "<|tool_call_begin|>",
                                   "<|tool_call_argument_begin|>",
                                   "<|tool_call_end|>",
                                   "functions.get_time:0",
                                   "</think>",
                                   "<think>",
                                   " ",
                                   "{}"};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mla::fuzz::ByteReader in(data, size);
  const uint8_t mode = in.u8();
  ReplyOptions o;
  o.reasoning = mode & 1;
  ToolCallParser::Options t;
  t.syntax = mode & 2 ? ToolSyntax::kKimi : ToolSyntax::kDeepSeek;
  t.tool_names = {"get_time", "get_weather"};
  t.parallel = !(mode & 4);
  o.tools = t;
  if (mode & 8)
    o.forced_prefix = t.syntax == ToolSyntax::kKimi
                          ? "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_time:0"
                            "<|tool_call_argument_begin|>"
                          : "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
                            "get_time\n```json\n";
  // The reply, and where the stream cuts it.
  std::string text;
  std::vector<size_t> cuts;
  while (!in.empty() && text.size() < 4096) {
    const uint8_t b = in.u8();
    if (b >= 0xE0)
      text += kPieces[(b - 0xE0) % std::size(kPieces)];
    else if (b == 0xDF)
      cuts.push_back(text.size());
    else
      text += char(b);
  }
  int whole_calls = 0;
  const ReplyParser::Parts whole = parse_reply(o, text, &whole_calls);
  ReplyParser p(o);
  ReplyParser::Parts streamed;
  size_t at = 0;
  cuts.push_back(text.size());
  for (size_t cut : cuts) {
    if (cut < at) continue;
    ReplyParser::Parts part = p.feed(std::string_view(text).substr(at, cut - at));
    streamed.reasoning += part.reasoning;
    streamed.content += part.content;
    for (ParsedToolCall& c : part.calls) streamed.calls.push_back(std::move(c));
    at = cut;
  }
  ReplyParser::Parts rest = p.finish();
  streamed.reasoning += rest.reasoning;
  streamed.content += rest.content;
  for (ParsedToolCall& c : rest.calls) streamed.calls.push_back(std::move(c));
  MLA_CHECK(streamed.reasoning == whole.reasoning && streamed.content == whole.content,
            "streamed parse differs: content {:?} vs {:?}", streamed.content, whole.content);
  MLA_CHECK(streamed.calls.size() == whole.calls.size() && int(whole.calls.size()) == whole_calls,
            "{} calls streamed, {} whole", streamed.calls.size(), whole.calls.size());
  for (size_t i = 0; i < whole.calls.size(); ++i) {
    const ParsedToolCall& c = whole.calls[i];
    MLA_CHECK(c.name == "get_time" || c.name == "get_weather", "call to {:?}", c.name);
    MLA_CHECK(nlohmann::json::parse(c.arguments, nullptr, false).is_object(),
              "arguments {:?} are not an object", c.arguments);
    MLA_CHECK(streamed.calls[i].arguments == c.arguments && streamed.calls[i].id == c.id,
              "call {} differs streamed", i);
  }
  return 0;
}
