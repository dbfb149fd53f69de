#include "server/tool_call_parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "io/json_limits.h"
#include "io/safetensors_header.h"
#include "server/reasoning_split.h"

namespace mla::server {
namespace {

struct Markers {
  std::string_view section_begin, section_end, call_begin, call_end;
  std::string_view sep;  // DeepSeek: between type and name; Kimi: between id and arguments
};

constexpr Markers kDeepSeek = {"<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>",
                               "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"};
constexpr Markers kKimi = {"<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
                           "<|tool_call_begin|>", "<|tool_call_end|>",
                           "<|tool_call_argument_begin|>"};

const Markers& markers(ToolSyntax s) {
  return s == ToolSyntax::kKimi ? kKimi : kDeepSeek;
}

bool is_space(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

std::string trim_right(std::string_view s) {
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return std::string(s);
}

bool starts_with_prefix_of(std::string_view text, std::string_view marker) {
  return text.size() < marker.size() && marker.substr(0, text.size()) == text;
}

// A JSON object, not nested past the request limit (a model can write 100k '[').
bool is_json_object(std::string_view s) {
  if (s.empty() || s.front() != '{' || json_depth_exceeded(s, 64)) return false;
  const nlohmann::json j = nlohmann::json::parse(s, nullptr, /*allow_exceptions=*/false);
  return j.is_object();
}

}  // namespace

std::optional<ToolSyntax> tool_syntax(tok::ChatFormat f) {
  switch (f) {
    case tok::ChatFormat::kDeepSeekV3:
    case tok::ChatFormat::kDeepSeekR1:
    case tok::ChatFormat::kDeepSeekR1Original:
      return ToolSyntax::kDeepSeek;
    case tok::ChatFormat::kKimiK2:
    case tok::ChatFormat::kKimiK2Thinking:
    case tok::ChatFormat::kMoonlight:
      return ToolSyntax::kKimi;
    default:
      return std::nullopt;
  }
}

ToolCallParser::Parts ToolCallParser::feed(std::string_view text) {
  Parts out;
  const Markers& m = markers(o_.syntax);
  if (state_ == State::kAfter) {
    out.content = text;
    return out;
  }
  if (state_ == State::kSection) {
    section_ += text;
    parse_section(&out);
    return out;
  }
  std::string buf = std::move(held_);
  buf += text;
  held_.clear();
  const size_t at = buf.find(m.section_begin);
  if (at != std::string::npos) {
    out.content = trim_right(std::string_view(buf).substr(0, at));
    state_ = State::kSection;
    section_ = buf.substr(at + m.section_begin.size());
    parse_section(&out);
    return out;
  }
  // Hold back a possible marker start and the whitespace before it: whitespace right before a
  // section is dropped, elsewhere it is content.
  size_t hold = buf.size() - partial_tag_suffix(buf, m.section_begin);
  while (hold > 0 && is_space(buf[hold - 1])) --hold;
  out.content = buf.substr(0, hold);
  held_ = buf.substr(hold);
  return out;
}

void ToolCallParser::parse_section(Parts* out) {
  const Markers& m = markers(o_.syntax);
  for (;;) {
    size_t lead = 0;
    while (lead < section_.size() && is_space(section_[lead])) ++lead;
    section_.erase(0, lead);
    if (section_.empty()) return;
    const std::string_view s = section_;
    if (s.starts_with(m.section_end)) {
      out->content += s.substr(m.section_end.size());
      section_.clear();
      state_ = State::kAfter;
      return;
    }
    if (s.starts_with(m.call_begin)) {
      const size_t end = s.find(m.call_end, m.call_begin.size());
      // A call that never closes before the next one (or the section's end) opens.
      const size_t next = std::min(s.find(m.call_begin, m.call_begin.size()),
                                   s.find(m.section_end, m.call_begin.size()));
      if (end != std::string_view::npos && end < next) {
        const size_t len = end + m.call_end.size();
        accept_call(s.substr(0, len), out);
        section_.erase(0, len);
        continue;
      }
      if (next == std::string_view::npos) return;  // wait for the call's end
      reject(s.substr(0, next), "no call end marker", out);
      section_.erase(0, next);
      continue;
    }
    if (starts_with_prefix_of(s, m.call_begin) || starts_with_prefix_of(s, m.section_end)) return;
    // Text inside a section that is no call: content, up to the next marker.
    const size_t next = std::min(s.find(m.call_begin), s.find(m.section_end));
    if (next == std::string_view::npos) return;  // decided by what follows, or by finish()
    reject(s.substr(0, next), "text between calls", out);
    section_.erase(0, next);
  }
}

void ToolCallParser::accept_call(std::string_view raw, Parts* out) {
  const Markers& m = markers(o_.syntax);
  const std::string_view inner =
      raw.substr(m.call_begin.size(), raw.size() - m.call_begin.size() - m.call_end.size());
  const size_t sep = inner.find(m.sep);
  if (sep == std::string_view::npos) return reject(raw, fmt::format("no {}", m.sep), out);
  ParsedToolCall call;
  std::string_view args;
  if (o_.syntax == ToolSyntax::kKimi) {
    // functions.NAME:IDX; the name is the last dotted part before the index.
    call.id = trim(inner.substr(0, sep));
    std::string_view name = call.id;
    name = name.substr(0, name.rfind(':'));
    if (const size_t dot = name.rfind('.'); dot != std::string_view::npos)
      name = name.substr(dot + 1);
    call.name = name;
    args = trim(inner.substr(sep + m.sep.size()));
  } else {
    // TYPE<sep>NAME\n```json\nARGS\n```
    const std::string_view rest = inner.substr(sep + m.sep.size());
    const size_t nl = rest.find('\n');
    if (nl == std::string_view::npos) return reject(raw, "no newline after the name", out);
    call.name = trim(rest.substr(0, nl));
    call.id = o_.id_prefix + std::to_string(seen_);
    std::string_view body = trim(rest.substr(nl + 1));
    if (body.starts_with("```")) {
      const size_t fence_end = body.find('\n');
      body = fence_end == std::string_view::npos ? std::string_view() : body.substr(fence_end);
      body = trim(body);
      if (!body.ends_with("```")) return reject(raw, "unclosed ``` block", out);
      body = trim(body.substr(0, body.size() - 3));
    }
    args = body;
  }
  ++seen_;
  if (call.name.empty()) return reject(raw, "empty function name", out);
  if (!o_.tool_names.empty() &&
      std::find(o_.tool_names.begin(), o_.tool_names.end(), call.name) == o_.tool_names.end())
    return reject(raw, fmt::format("unknown function {}", io_detail::quote_text(call.name)), out);
  if (!is_json_object(args)) return reject(raw, "arguments are not a JSON object", out);
  if (!o_.parallel && returned_ > 0) {
    std::fprintf(stderr, "warning: tool call %s dropped: parallel_tool_calls is false\n",
                 io_detail::quote_text(call.name).c_str());
    return;
  }
  call.arguments = args;
  out->calls.push_back(std::move(call));
  ++returned_;
}

void ToolCallParser::reject(std::string_view raw, std::string_view why, Parts* out) {
  std::fprintf(stderr, "warning: malformed tool call returned as content (%.*s): %s\n",
               int(why.size()), why.data(), io_detail::quote_text(raw).c_str());
  out->content += raw;
}

ToolCallParser::Parts ToolCallParser::finish() {
  Parts out;
  if (state_ == State::kContent) {
    out.content = std::move(held_);
    held_.clear();
  } else if (state_ == State::kSection) {
    parse_section(&out);
    if (!trim(section_).empty()) reject(section_, "unterminated at the end of the reply", &out);
    section_.clear();
  }
  return out;
}

ToolCallParser::Parts parse_tool_calls(const ToolCallParser::Options& o, std::string_view text) {
  ToolCallParser p(o);
  ToolCallParser::Parts all = p.feed(text);
  ToolCallParser::Parts rest = p.finish();
  all.content += rest.content;
  for (ParsedToolCall& c : rest.calls) all.calls.push_back(std::move(c));
  return all;
}

}  // namespace mla::server
