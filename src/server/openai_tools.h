// The tool-calling fields of a chat request (docs/SERVING.md §Tool calling): `tools`,
// `tool_choice` and `parallel_tool_calls`, checked field by field and turned into what the prompt
// renderer (tok::ChatOptions::tools / forced_tool) and the reply parser need; and
// `response_format` (§Structured output). A forced call's arguments and a JSON response format
// are decoded under their schema (model/json_constraint.h).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/api_error.h"
#include "server/openai_request.h"

namespace mla::server {

// At most this many tools in one request (OpenAI's limit).
inline constexpr size_t kMaxTools = 128;

// Fills spec->tools and opts->tools / forced_tool from the body. `raw_body` (the request's text)
// keeps each tool's keys in the client's order in the prompt; empty: sorted keys. 400 naming the
// field for: a tool that is not {"type": "function", "function": {"name", ...}}, a name outside
// [A-Za-z0-9_-]{1,64} or given twice, a tool_choice other than none / auto / required / a named
// tool of the list, `required` with more than 64 tools, `strict: true` with tool_choice auto (only
// a forced call is decoded under its schema), parameters outside the supported schema subset, and
// tools for a chat format without tool calls. With `sampling`, a forced call gets its constraint:
// the arguments under the tool's parameters schema, then the call's end; `required` with several
// tools, one branch per tool, its name first.
std::optional<ApiError> parse_tools(const nlohmann::json& body, std::string_view raw_body,
                                    const ServedModel& m, ToolRequest* out, tok::ChatOptions* opts,
                                    SamplingParams* sampling = nullptr);

// response_format: text (nothing), json_object (any JSON object) or json_schema ({"name",
// "schema", "strict"?}: the schema subset of model/json_grammar.h) → sampling->constraint. 400
// naming the field for anything else, a schema outside the subset (the message names the
// keyword), or a model without a tokenizer.
std::optional<ApiError> parse_response_format(const nlohmann::json& body, std::string_view raw_body,
                                              const ServedModel& m, SamplingParams* sampling);

}  // namespace mla::server
