// A chat reply as the API returns it: R1 reasoning split off first (reasoning_split.h), then
// tool calls parsed out of the content (tool_call_parser.h). A reply that a forced tool call
// began (tool_choice naming a function) starts with that call's opening, which the prompt
// holds: the parsers read it first, so the reply parses as if the model had written it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/reasoning_split.h"
#include "server/tool_call_parser.h"

namespace mla::server {

struct ReplyOptions {
  bool reasoning = false;                        // split <think>…</think> (R1 formats)
  std::optional<ToolCallParser::Options> tools;  // parse tool calls (tools given, choice != none)
  std::string forced_prefix;                     // text the prompt ended with, read as the reply's
};

class ReplyParser {
 public:
  explicit ReplyParser(const ReplyOptions& o);
  struct Parts {
    std::string reasoning, content;
    std::vector<ParsedToolCall> calls;
  };
  Parts feed(std::string_view text);
  Parts finish();
  int calls_returned() const { return tools_ ? tools_->calls_returned() : 0; }

 private:
  void content(std::string text, bool last, Parts* out);
  std::optional<ReasoningSplitter> split_;
  std::optional<ToolCallParser> tools_;
  std::string prefix_;  // not yet fed (the first feed reads it)
};

// The whole reply at once.
ReplyParser::Parts parse_reply(const ReplyOptions& o, std::string_view text, int* calls_returned);

}  // namespace mla::server
