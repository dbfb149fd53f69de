#include "server/request_extras.h"

#include <fmt/format.h>

#include "server/request_fields.h"
#include "tokenizer/json_read.h"

namespace mla::server {

using nlohmann::json;
using MaybeError = std::optional<ApiError>;

// Fields we accept, check and do not apply (documented in docs/SERVING.md), count-like
// extensions other servers take whose negative values are the classic poison request, and the
// extensions we refuse.
MaybeError check_accepted_extras(const json& body) {
  std::optional<int64_t> i;
  for (const char* k : {"n_keep", "n_discard", "n_probs"})
    if (auto e = get_int(body, k, 0, INT32_MAX, &i)) return e;
  // vLLM's extensions this server does not serve: refused when they ask for anything but the
  // default, never silently ignored (docs/SERVING.md §Request fields, the table).
  struct Unserved {
    const char* field;
    json default_value;  // null: any value but null is refused
    const char* instead;
  };
  static const Unserved kUnserved[] = {
      {"use_beam_search", false, "beam search is not implemented"},
      {"length_penalty", 1.0, "it applies to beam search, which is not implemented"},
      {"allowed_token_ids", nullptr, "use logit_bias"},
      {"bad_words", nullptr, "use logit_bias"},
      {"guided_json", nullptr, "use response_format json_schema"},
      {"guided_regex", nullptr, "regular-expression grammars are not implemented"},
      {"guided_choice", nullptr, "use response_format json_schema with an enum"},
      {"guided_grammar", nullptr, "context-free grammars are not implemented"},
      {"guided_decoding_backend", nullptr, "this server has one grammar engine"},
      {"guided_whitespace_pattern", nullptr, "the JSON grammar's whitespace is fixed"},
      {"structural_tag", nullptr, "use tools with tool_choice"},
      {"logits_processors", nullptr, "custom logits processors are not implemented"},
      {"continue_final_message", false, "continuing the last message is not implemented"},
      {"add_generation_prompt", true, "the prompt always ends with the generation prompt"},
      {"add_special_tokens", nullptr,
       "the chat format places BOS itself; completions add it "
       "as the tokenizer config says"},
      {"documents", nullptr, "RAG documents in the template are not implemented"},
      {"chat_template", nullptr, "the built-in chat formats are fixed (--chat-format)"},
      {"mm_processor_kwargs", nullptr, "the models served are text only"},
      {"spaces_between_special_tokens", true, "special tokens' text is joined as decoded"},
      {"return_token_ids", false, "use logprobs with return_tokens_as_token_ids"},
      {"cache_salt", nullptr, "the prefix cache is shared by all requests"},
      {"kv_transfer_params", nullptr, "disaggregated prefill is not implemented"},
      {"vllm_xargs", nullptr, "no extension arguments are taken"},
      {"prompt_embeds", nullptr, "prompts are text or token ids"},
      {"include_reasoning", true, "use --reasoning-parser none"},
  };
  for (const Unserved& u : kUnserved) {
    const json* v = field(body, u.field);
    if (!v || (!u.default_value.is_null() && *v == u.default_value)) continue;
    return bad_request(u.field, fmt::format("{} = {} is not supported: {}", u.field,
                                            tok::json_excerpt(*v), u.instead));
  }
  // Template knobs reach the prompt renderer: strictly allowlisted, and the list is empty.
  if (const json* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object())
      return bad_request("chat_template_kwargs", "chat_template_kwargs must be an object");
    if (!kw->empty())
      return bad_request(
          "chat_template_kwargs." + kw->begin().key(),
          fmt::format("chat_template_kwargs.{} is not supported", kw->begin().key().substr(0, 64)));
  }
  return std::nullopt;
}

}  // namespace mla::server
