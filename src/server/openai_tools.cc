#include "server/openai_tools.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <variant>

#include "model/json_grammar.h"
#include "server/tool_call_parser.h"
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

// The body as ordered JSON (keys in the client's order: property order is the order a schema's
// properties are written in), or null when it cannot be had.
nlohmann::ordered_json ordered_body(std::string_view raw_body) {
  if (raw_body.empty()) return nullptr;
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(raw_body, nullptr, false);
  return j.is_discarded() ? nlohmann::ordered_json() : j;
}

// `path` inside the ordered body if it is there, else the same value from the sorted one.
nlohmann::ordered_json pick(const nlohmann::ordered_json& ordered, const json& sorted,
                            std::initializer_list<std::variant<const char*, size_t>> path) {
  const nlohmann::ordered_json* o = &ordered;
  for (const auto& step : path) {
    if (std::holds_alternative<size_t>(step)) {
      const size_t i = std::get<size_t>(step);
      o = o->is_array() && i < o->size() ? &(*o)[i] : nullptr;
    } else {
      const char* k = std::get<const char*>(step);
      o = o->is_object() && o->contains(k) ? &(*o)[k] : nullptr;
    }
    if (!o) return nlohmann::ordered_json::parse(dump_json(sorted));
  }
  return *o;
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
      if (names.size() > 64)
        return bad_request("tool_choice",
                           "tool_choice \"required\" takes at most 64 tools; name the function "
                           "({\"type\": \"function\", \"function\": {\"name\": ...}})");
      if (names.size() == 1)
        out->forced = names[0];
      else
        out->forced_any = true;
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

// The constraint branch of a forced call to tool i: (with `head`, its name first, in the
// format's syntax), its arguments under the tool's parameters, then the call's end
// (tool_call_parser.h).
MaybeError call_branch(const nlohmann::ordered_json& params, size_t tool, const std::string& name,
                       bool head, const ServedModel& m, ConstraintBranch* out) {
  const std::string where = fmt::format("tools[{}].function.parameters", tool);
  if (!m.vocab_trie || !m.tokenizer || !m.chat_format)
    return bad_request("tool_choice", "a forced tool call needs the model's tokenizer");
  if (params.is_null()) {
    out->grammar = grammar::Grammar::any_object();
  } else {
    Result<std::shared_ptr<const grammar::Grammar>> r = grammar::Grammar::from_schema(params);
    if (!r.ok()) return bad_request(where, where + ": " + r.status().message());
    out->grammar = *r;
  }
  const bool kimi = tool_syntax(*m.chat_format) == ToolSyntax::kKimi;
  const auto control = [&](const char* text, std::vector<TailPart>* parts) -> MaybeError {
    const std::optional<int32_t> id = m.tokenizer->tokenizer.token_to_id(text);
    if (!id) return bad_request("tool_choice", fmt::format("the tokenizer lacks {}", text));
    parts->push_back({"", *id});
    return std::nullopt;
  };
  if (head && kimi) {
    out->head.push_back({name + ":0", -1});
    if (auto e = control("<|tool_call_argument_begin|>", &out->head)) return e;
  } else if (head) {
    out->head.push_back({name + "\n```json\n", -1});
  }
  if (!kimi) out->tail.push_back({"\n```", -1});
  for (const char* end :
       kimi ? std::array<const char*, 2>{"<|tool_call_end|>", "<|tool_calls_section_end|>"}
            : std::array<const char*, 2>{"<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>"})
    if (auto e = control(end, &out->tail)) return e;
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> parse_response_format(const json& body, std::string_view raw_body,
                                              const ServedModel& m, SamplingParams* sampling) {
  const auto rf = body.find("response_format");
  if (rf == body.end() || rf->is_null()) return std::nullopt;
  if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
    return bad_request("response_format", "response_format must be an object with a type");
  const std::string type = (*rf)["type"].get<std::string>();
  if (type == "text") return std::nullopt;
  if (type != "json_object" && type != "json_schema")
    return bad_request("response_format.type",
                       fmt::format("response_format type {} is not text, json_object or "
                                   "json_schema",
                                   tok::json_excerpt((*rf)["type"])));
  if (!m.vocab_trie)
    return bad_request("response_format", "response_format needs the model's tokenizer");
  std::shared_ptr<const grammar::Grammar> g;
  if (type == "json_object") {
    g = grammar::Grammar::any_object();
  } else {
    const auto js = rf->find("json_schema");
    if (js == rf->end() || !js->is_object() || !js->contains("schema") ||
        !(*js)["schema"].is_object())
      return bad_request("response_format.json_schema",
                         "response_format.json_schema must be {\"name\", \"schema\": {...}, "
                         "\"strict\"?}");
    if (js->contains("strict") && !(*js)["strict"].is_null() && !(*js)["strict"].is_boolean())
      return bad_request("response_format.json_schema.strict", "strict must be a boolean");
    const nlohmann::ordered_json schema =
        pick(ordered_body(raw_body), (*js)["schema"], {"response_format", "json_schema", "schema"});
    Result<std::shared_ptr<const grammar::Grammar>> r = grammar::Grammar::from_schema(schema);
    if (!r.ok())
      return bad_request("response_format.json_schema.schema",
                         "response_format.json_schema.schema: " + r.status().message());
    g = *r;
  }
  sampling->constraint = std::make_shared<JsonConstraintSpec>(g, m.vocab_trie);
  return std::nullopt;
}

std::optional<ApiError> parse_tools(const json& body, std::string_view raw_body,
                                    const ServedModel& m, ToolRequest* out, tok::ChatOptions* opts,
                                    SamplingParams* sampling) {
  const auto present = [&](const char* k) { return body.contains(k) && !body[k].is_null(); };
  // The body with the client's key order (it parses sorted): tools are shown, and a forced
  // call's parameters compiled, in that order. Parsed once, only when there are tools.
  const nlohmann::ordered_json ordered =
      present("tools") ? ordered_body(raw_body) : nlohmann::ordered_json();
  std::vector<std::string> names;
  if (present("tools")) {
    const json& tools = body["tools"];
    if (!tools.is_array()) return bad_request("tools", "tools must be a list");
    if (tools.size() > kMaxTools)
      return bad_request("tools", fmt::format("tools holds {} tools, at most {} are allowed",
                                              tools.size(), kMaxTools));
    for (size_t i = 0; i < tools.size(); ++i)
      if (auto e = check_tool(tools[i], i, &names)) return e;
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
  // strict: a forced call is decoded under its schema (and no other tool can be called then);
  // calls the model chooses (tool_choice auto) are checked as JSON objects only.
  for (size_t i = 0; present("tools") && out->parse && out->forced.empty() && !out->forced_any &&
                     i < body["tools"].size();
       ++i) {
    const json& f = body["tools"][i]["function"];
    if (f.contains("strict") && f["strict"].is_boolean() && f["strict"].get<bool>())
      return bad_request(fmt::format("tools[{}].function.strict", i),
                         "strict: true is honoured when tool_choice forces the call (decoded "
                         "under the schema); with tool_choice auto the arguments are checked as "
                         "a JSON object only, so it is refused");
  }
  if ((!out->forced.empty() || out->forced_any) && sampling) {
    if (sampling->constraint)
      return bad_request("response_format",
                         "response_format cannot be combined with a forced tool call");
    std::vector<ConstraintBranch> branches;
    for (size_t i = 0; i < names.size(); ++i) {
      if (!out->forced_any && names[i] != out->forced) continue;
      const nlohmann::ordered_json params =
          pick(ordered, body["tools"][i]["function"].value("parameters", json(nullptr)),
               {"tools", i, "function", "parameters"});
      ConstraintBranch b;
      if (auto e = call_branch(params, i, names[i], out->forced_any, m, &b)) return e;
      branches.push_back(std::move(b));
    }
    sampling->constraint = std::make_shared<JsonConstraintSpec>(std::move(branches), m.vocab_trie);
  }
  out->names = std::move(names);
  opts->forced_tool = out->forced;
  opts->force_tool_call = out->forced_any;
  const bool forced = !out->forced.empty() || out->forced_any;
  if (forced && m.chat_format)
    out->forced_prefix = tok::chat_text(tok::forced_tool_call_prefix(*m.chat_format, out->forced));
  if (forced) out->parse = true;
  return std::nullopt;
}

}  // namespace mla::server
