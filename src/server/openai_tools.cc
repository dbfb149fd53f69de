#include "server/openai_tools.h"

#include <fmt/format.h>

#include <algorithm>

#include "tokenizer/json_read.h"

namespace mla::server {
namespace {

using nlohmann::json;
using MaybeError = std::optional<ApiError>;

bool valid_name(const std::string& s) {
  return !s.empty() && s.size() <= 64 && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
}

MaybeError check_tool(const json& t, size_t i, std::vector<std::string>* names) {
  const std::string w = fmt::format("tools[{}]", i);
  if (!t.is_object() || !t.contains("type") || t["type"] != "function")
    return bad_request(w + ".type", fmt::format("{} must be {{\"type\": \"function\", "
                                                "\"function\": {{...}}}}",
                                                w));
  const auto f = t.find("function");
  if (f == t.end() || !f->is_object())
    return bad_request(w + ".function", fmt::format("{}.function must be an object", w));
  const auto name = f->find("name");
  if (name == f->end() || !name->is_string() || !valid_name(name->get<std::string>()))
    return bad_request(
        w + ".function.name",
        fmt::format("{}.function.name must be 1 to 64 of a-z, A-Z, 0-9, _ and -", w));
  const std::string n = name->get<std::string>();
  if (std::find(names->begin(), names->end(), n) != names->end())
    return bad_request(w + ".function.name",
                       fmt::format("{}.function.name \"{}\" is given twice", w, n));
  if (const auto d = f->find("description"); d != f->end() && !d->is_string() && !d->is_null())
    return bad_request(w + ".function.description",
                       fmt::format("{}.function.description must be a string", w));
  if (const auto p = f->find("parameters"); p != f->end() && !p->is_object() && !p->is_null())
    return bad_request(w + ".function.parameters",
                       fmt::format("{}.function.parameters must be a JSON Schema object", w));
  if (const auto s = f->find("strict"); s != f->end() && !s->is_null()) {
    if (!s->is_boolean())
      return bad_request(w + ".function.strict", fmt::format("{}.function.strict must be a "
                                                             "boolean",
                                                             w));
    if (s->get<bool>())
      return bad_request(w + ".function.strict",
                         "strict function calling needs constrained decoding, which this server "
                         "does not have yet");
  }
  names->push_back(n);
  return std::nullopt;
}

// tool_choice → out (forced function name, or parse / not).
MaybeError check_choice(const json* choice, const std::vector<std::string>& names,
                        ToolRequest* out) {
  out->parse = !names.empty();
  if (!choice) return std::nullopt;
  if (choice->is_string()) {
    const std::string c = choice->get<std::string>();
    if (c == "none") {
      out->parse = false;
      return std::nullopt;
    }
    if (c == "auto") return std::nullopt;
    if (c == "required") {
      if (names.empty()) return bad_request("tool_choice", "tool_choice \"required\" needs tools");
      if (names.size() > 1)
        return bad_request("tool_choice",
                           "tool_choice \"required\" with more than one tool needs constrained "
                           "decoding, which this server does not have yet; name the function "
                           "({\"type\": \"function\", \"function\": {\"name\": ...}})");
      out->forced = names[0];
      return std::nullopt;
    }
    return bad_request("tool_choice",
                       fmt::format("tool_choice {} is not none, auto, required or a named "
                                   "function",
                                   tok::json_excerpt(*choice)));
  }
  const json* fn =
      choice->is_object() && choice->contains("function") && (*choice)["function"].is_object()
          ? &(*choice)["function"]
          : nullptr;
  if (!fn || !fn->contains("name") || !(*fn)["name"].is_string())
    return bad_request("tool_choice",
                       "tool_choice must be none, auto, required or {\"type\": "
                       "\"function\", \"function\": {\"name\": ...}}");
  const std::string n = (*fn)["name"].get<std::string>();
  if (std::find(names.begin(), names.end(), n) == names.end())
    return bad_request("tool_choice.function.name",
                       fmt::format("tool_choice names {}, which is not one of the tools",
                                   tok::json_excerpt((*fn)["name"])));
  out->forced = n;
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> parse_tools(const json& body, std::string_view raw_body,
                                    const ServedModel& m, ToolRequest* out,
                                    tok::ChatOptions* opts) {
  const auto present = [&](const char* k) { return body.contains(k) && !body[k].is_null(); };
  std::vector<std::string> names;
  if (present("tools")) {
    const json& tools = body["tools"];
    if (!tools.is_array()) return bad_request("tools", "tools must be a list");
    if (tools.size() > kMaxTools)
      return bad_request("tools", fmt::format("tools holds {} tools, at most {} are allowed",
                                              tools.size(), kMaxTools));
    for (size_t i = 0; i < tools.size(); ++i)
      if (auto e = check_tool(tools[i], i, &names)) return e;
    // The prompt shows each tool with the client's key order (the body parses sorted).
    nlohmann::ordered_json ordered = raw_body.empty()
                                         ? nlohmann::ordered_json()
                                         : nlohmann::ordered_json::parse(raw_body, nullptr, false);
    const bool in_order = ordered.is_object() && ordered.contains("tools") &&
                          ordered["tools"].is_array() && ordered["tools"].size() == tools.size();
    for (size_t i = 0; i < tools.size(); ++i)
      opts->tools.push_back(
          in_order ? ordered["tools"][i].dump(-1, ' ', false, json::error_handler_t::replace)
                   : dump_json(tools[i]));
  }
  if (auto e = check_choice(present("tool_choice") ? &body["tool_choice"] : nullptr, names, out))
    return e;
  if (present("parallel_tool_calls")) {
    if (!body["parallel_tool_calls"].is_boolean())
      return bad_request("parallel_tool_calls", "parallel_tool_calls must be a boolean");
    out->parallel = body["parallel_tool_calls"].get<bool>();
  }
  if (!names.empty() && m.chat_format && !tok::chat_format_has_tools(*m.chat_format))
    return bad_request("tools", fmt::format("the model's chat format ({}) has no tool calls",
                                            tok::chat_format_name(*m.chat_format)));
  out->names = std::move(names);
  opts->forced_tool = out->forced;
  if (!out->forced.empty() && m.chat_format)
    out->forced_prefix = tok::chat_text(tok::forced_tool_call_prefix(*m.chat_format, out->forced));
  if (!out->forced.empty()) out->parse = true;
  return std::nullopt;
}

}  // namespace mla::server
