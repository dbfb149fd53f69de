#include "server/reply_parser.h"

namespace mla::server {

ReplyParser::ReplyParser(const ReplyOptions& o) : prefix_(o.forced_prefix) {
  if (o.reasoning) split_.emplace();
  if (o.tools) tools_.emplace(*o.tools);
}

void ReplyParser::content(std::string text, bool last, Parts* out) {
  if (!tools_) {
    out->content += text;
    return;
  }
  ToolCallParser::Parts p = tools_->feed(text);
  if (last) {
    ToolCallParser::Parts rest = tools_->finish();
    p.content += rest.content;
    for (ParsedToolCall& c : rest.calls) p.calls.push_back(std::move(c));
  }
  out->content += p.content;
  for (ParsedToolCall& c : p.calls) out->calls.push_back(std::move(c));
}

ReplyParser::Parts ReplyParser::feed(std::string_view text) {
  Parts out;
  std::string piece = std::move(prefix_);
  prefix_.clear();
  piece += text;
  if (!split_) {
    content(std::move(piece), false, &out);
    return out;
  }
  ReasoningSplitter::Parts s = split_->feed(piece);
  out.reasoning = std::move(s.reasoning);
  content(std::move(s.content), false, &out);
  return out;
}

ReplyParser::Parts ReplyParser::finish() {
  Parts out;
  std::string piece = std::move(prefix_);  // a reply with no text at all
  prefix_.clear();
  if (split_) {
    ReasoningSplitter::Parts s = split_->feed(piece);
    ReasoningSplitter::Parts rest = split_->finish();
    out.reasoning = s.reasoning + rest.reasoning;
    piece = s.content + rest.content;
  }
  content(std::move(piece), true, &out);
  return out;
}

ReplyParser::Parts parse_reply(const ReplyOptions& o, std::string_view text, int* calls_returned) {
  ReplyParser p(o);
  ReplyParser::Parts all = p.feed(text);
  ReplyParser::Parts rest = p.finish();
  all.reasoning += rest.reasoning;
  all.content += rest.content;
  for (ParsedToolCall& c : rest.calls) all.calls.push_back(std::move(c));
  if (calls_returned) *calls_returned = p.calls_returned();
  return all;
}

}  // namespace mla::server
