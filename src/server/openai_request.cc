#include "server/openai_request.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <random>

#include "io/json_limits.h"
#include "server/openai_prompt.h"
#include "server/openai_tools.h"
#include "server/request_extras.h"
#include "server/request_fields.h"
#include "server/tool_call_parser.h"
#include "tokenizer/json_read.h"

namespace mla::server {
namespace {

using nlohmann::json;
using MaybeError = std::optional<ApiError>;

// A token id from a JSON value, checked against the logits width.
MaybeError token_id(const json& v, int64_t vocab, const std::string& param, int32_t* out) {
  if (!v.is_number_integer())
    return bad_request(param, fmt::format("{} must be a token id (an integer), got {}", param,
                                          tok::json_excerpt(v)));
  const bool neg = v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() < 0;
  if (neg || v.get<uint64_t>() >= uint64_t(vocab))
    return bad_request(param, fmt::format("invalid token id {} in {}: ids are in [0, {})",
                                          tok::json_excerpt(v), param, vocab));
  *out = int32_t(v.get<int64_t>());
  return std::nullopt;
}

MaybeError parse_stop(const json& body, sched::Request* r) {
  const json* v = field(body, "stop");
  if (!v) return std::nullopt;
  std::vector<std::string> stops;
  if (v->is_string()) {
    stops.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    if (v->size() > kMaxStopStrings)
      return bad_request("stop", fmt::format("stop has {} entries, at most {} are allowed",
                                             v->size(), kMaxStopStrings));
    for (const json& s : *v) {
      if (!s.is_string()) return bad_request("stop", "stop must be a string or a list of strings");
      stops.push_back(s.get<std::string>());
    }
  } else {
    return bad_request("stop", "stop must be a string or a list of strings");
  }
  for (const std::string& s : stops) {
    if (s.empty()) return bad_request("stop", "stop strings must not be empty");
    if (s.size() > kMaxStopBytes)
      return bad_request("stop", fmt::format("a stop string has {} bytes, at most {} are allowed",
                                             s.size(), kMaxStopBytes));
  }
  r->stop = std::move(stops);
  if (const json* ids = field(body, "stop_token_ids")) {
    if (!ids->is_array()) return bad_request("stop_token_ids", "stop_token_ids must be a list");
    for (size_t i = 0; i < ids->size(); ++i) {
      int32_t id = 0;
      if (auto e = token_id((*ids)[i], INT32_MAX, "stop_token_ids", &id)) return e;
      r->stop_token_ids.push_back(id);
    }
  }
  return std::nullopt;
}

// {"id": bias} (OpenAI) or [[id, bias], ...] (llama.cpp's list form).
MaybeError parse_logit_bias(const json& body, int64_t vocab, SamplingParams* s) {
  const json* v = field(body, "logit_bias");
  if (!v) return std::nullopt;
  auto add = [&](int64_t id, const json& bias, const std::string& shown) -> MaybeError {
    if (id < 0 || id >= vocab)
      return bad_request("logit_bias", fmt::format("logit_bias key {} is not a token id in [0, {})",
                                                   shown, vocab));
    if (!bias.is_number() || !std::isfinite(bias.get<double>()) ||
        std::fabs(bias.get<double>()) > 100.0)
      return bad_request("logit_bias", fmt::format("logit_bias[{}] is {}, must be in [-100, 100]",
                                                   shown, tok::json_excerpt(bias)));
    s->logit_bias.push_back({int32_t(id), float(bias.get<double>())});
    return std::nullopt;
  };
  if (v->is_object()) {
    if (v->size() > size_t(vocab)) return bad_request("logit_bias", "logit_bias has too many keys");
    for (auto it = v->begin(); it != v->end(); ++it) {
      const std::string& k = it.key();
      int64_t id = -1;
      auto [p, ec] = std::from_chars(k.data(), k.data() + k.size(), id);
      if (ec != std::errc() || p != k.data() + k.size() || k.empty()) id = -1;
      if (auto e = add(id, it.value(), "\"" + k.substr(0, 32) + "\"")) return e;
    }
    return std::nullopt;
  }
  if (v->is_array()) {
    for (const json& pair : *v) {
      if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer())
        return bad_request("logit_bias", "logit_bias entries must be [token_id, bias] pairs");
      if (auto e = add(pair[0].get<int64_t>(), pair[1], tok::json_excerpt(pair[0]))) return e;
    }
    return std::nullopt;
  }
  return bad_request("logit_bias", "logit_bias must be an object mapping token ids to biases");
}

MaybeError parse_sampling(const json& body, const ServedModel& m, CompletionSpec* out) {
  sched::Request& r = out->request;
  std::optional<double> temperature, top_p;
  if (auto e = get_number(body, "temperature", 0.0, 2.0, &temperature)) return e;
  if (auto e = get_number(body, "top_p", 0.0, 1.0, &top_p)) return e;
  if (top_p && *top_p <= 0.0) return bad_request("top_p", "top_p must be in (0, 1]");
  r.sampling.temperature = float(temperature.value_or(1.0));  // OpenAI's default
  r.sampling.top_p = float(top_p.value_or(1.0));
  std::optional<int64_t> top_k;
  if (auto e = get_int(body, "top_k", -1, m.vocab, &top_k)) return e;
  r.sampling.top_k = top_k && *top_k > 0 ? int(*top_k) : 0;  // -1 and 0: off (vLLM, llama.cpp)
  if (const json* s = field(body, "seed")) {
    if (!s->is_number_integer()) return bad_request("seed", "seed must be an integer");
    r.sampling.seed = s->is_number_unsigned() ? s->get<uint64_t>() : uint64_t(s->get<int64_t>());
  } else {
    std::random_device rd;  // 32 bits per call
    r.sampling.seed = uint64_t(rd()) << 32 | rd();
  }
  // Penalties, min_p and min_tokens with vLLM's meaning (model/sampler.h).
  std::optional<double> presence, frequency, repetition, min_p;
  if (auto e = get_number(body, "presence_penalty", -2.0, 2.0, &presence)) return e;
  if (auto e = get_number(body, "frequency_penalty", -2.0, 2.0, &frequency)) return e;
  if (auto e = get_number(body, "repetition_penalty", 0.0, 1e6, &repetition)) return e;
  if (repetition && *repetition <= 0.0)
    return bad_request("repetition_penalty", "repetition_penalty must be > 0");
  if (auto e = get_number(body, "min_p", 0.0, 1.0, &min_p)) return e;
  r.sampling.presence_penalty = float(presence.value_or(0.0));
  r.sampling.frequency_penalty = float(frequency.value_or(0.0));
  r.sampling.repetition_penalty = float(repetition.value_or(1.0));
  r.sampling.min_p = float(min_p.value_or(0.0));
  std::optional<int64_t> min_tokens;
  if (auto e = get_int(body, "min_tokens", 0, INT32_MAX, &min_tokens)) return e;
  if (min_tokens && out->max_tokens_given && *min_tokens > out->request.max_tokens)
    return bad_request("min_tokens", fmt::format("min_tokens ({}) must be <= max_tokens ({})",
                                                 *min_tokens, out->request.max_tokens));
  r.sampling.min_tokens = int(min_tokens.value_or(0));
  return parse_logit_bias(body, m.vocab, &r.sampling);
}

MaybeError parse_common(Endpoint endpoint, const json& body, const ServedModel& m,
                        CompletionSpec* out) {
  out->endpoint = endpoint;
  const json* model = field(body, "model");
  if (!model) return bad_request("model", "model is required");
  if (!model->is_string()) return bad_request("model", "model must be a string");
  if (model->get<std::string>() != m.name) return model_not_found(model->get<std::string>());

  std::optional<int64_t> n, best_of;
  if (auto e = get_int(body, "n", 1, sched::kMaxSamplesPerPrompt, &n)) return e;
  out->n = int(n.value_or(1));
  // best_of > n: best_of samples per prompt, the n with the highest cumulative logprob returned.
  if (auto e = get_int(body, "best_of", INT64_MIN, INT64_MAX, &best_of)) return e;
  if (best_of && (*best_of < out->n || *best_of > sched::kMaxSamplesPerPrompt))
    return bad_request("best_of", fmt::format("best_of is {}; it must be in [n, {}] (n is {})",
                                              *best_of, sched::kMaxSamplesPerPrompt, out->n));
  if (best_of && *best_of > out->n) {
    out->keep = out->n;
    out->n = int(*best_of);
  }

  std::optional<int64_t> max_tokens;
  const char* mt_key =
      field(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (auto e = get_int(body, mt_key, 1, INT32_MAX, &max_tokens)) return e;
  out->max_tokens_given = max_tokens.has_value();
  out->request.max_tokens = int(max_tokens.value_or(16));

  if (auto e = get_bool(body, "stream", &out->stream)) return e;
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) return bad_request("stream_options", "stream_options must be an object");
    if (!out->stream)
      return bad_request("stream_options", "stream_options is only allowed when stream is true");
    if (auto e = get_bool(*so, "include_usage", &out->include_usage)) {
      e->param = "stream_options.include_usage";
      return e;
    }
  }
  if (auto e = get_bool(body, "ignore_eos", &out->request.ignore_eos)) return e;
  if (auto e =
          get_bool(body, "include_stop_str_in_output", &out->request.include_stop_str_in_output))
    return e;
  if (auto e = get_bool(body, "skip_special_tokens", &out->request.skip_special_tokens)) return e;
  if (auto e = parse_stop(body, &out->request)) return e;
  for (int32_t id : out->request.stop_token_ids)
    if (id >= m.vocab)
      return bad_request("stop_token_ids", fmt::format("invalid token id {} in stop_token_ids: "
                                                       "ids are in [0, {})",
                                                       id, m.vocab));
  if (!out->request.stop.empty() && !m.tokenizer)
    return bad_request("stop", "stop strings need a tokenizer; this model has none");
  if (auto e = check_accepted_extras(body)) return e;
  return parse_sampling(body, m, out);
}

MaybeError parse_logprobs(Endpoint endpoint, const json& body, CompletionSpec* out) {
  if (auto e = get_bool(body, "return_tokens_as_token_ids", &out->tokens_as_ids)) return e;
  std::optional<int64_t> k;
  // vLLM's prompt_logprobs: every prompt token's logprob and k alternatives (non-streamed).
  if (auto e = get_int(body, "prompt_logprobs", 0, sched::kMaxTopLogprobs, &k)) return e;
  if (k) {
    out->prompt_logprobs = true;
    out->request.prompt_logprobs = int(*k);
  }
  k.reset();
  if (endpoint == Endpoint::kCompletions) {
    // Legacy: logprobs is the number of alternatives (0 still reports the chosen token's).
    if (auto e = get_int(body, "logprobs", 0, sched::kMaxTopLogprobs, &k)) return e;
    if (k) {
      out->logprobs = LogprobsStyle::kLegacy;
      out->request.logprobs = int(*k);
    }
    return std::nullopt;
  }
  bool on = false;
  if (auto e = get_bool(body, "logprobs", &on)) return e;
  if (auto e = get_int(body, "top_logprobs", 0, sched::kMaxTopLogprobs, &k)) return e;
  if (k && !on) return bad_request("top_logprobs", "top_logprobs needs logprobs set to true");
  if (on) {
    out->logprobs = LogprobsStyle::kChat;
    out->request.logprobs = int(k.value_or(0));
  }
  return std::nullopt;
}

// Prompt length against the context and the KV pool; fills in the default max_tokens.
// vLLM's truncate_prompt_tokens: only the last k tokens of each prompt are kept (left
// truncation); -1 keeps as many as the context holds with one token to generate.
MaybeError truncate_prompts(const json& body, const ServedModel& m, CompletionSpec* out) {
  std::optional<int64_t> k;
  if (auto e = get_int(body, "truncate_prompt_tokens", -1, INT32_MAX, &k)) return e;
  if (!k) return std::nullopt;
  if (*k == 0)
    return bad_request("truncate_prompt_tokens",
                       "truncate_prompt_tokens is 0; give -1 (the context) or at least 1 token");
  const int64_t keep = *k == -1 ? std::max<int64_t>(1, m.max_context - 1) : *k;
  for (std::vector<int32_t>& p : out->prompts)
    if (int64_t(p.size()) > keep) p.erase(p.begin(), p.end() - keep);
  return std::nullopt;
}

MaybeError check_lengths(const ServedModel& m, const char* prompt_param, CompletionSpec* out) {
  const int64_t limit = std::min(m.max_context, m.max_total_tokens);
  for (const std::vector<int32_t>& p : out->prompts) {
    const int64_t n = int64_t(p.size());
    if (n >= m.max_context) {
      ApiError e = bad_request(prompt_param, fmt::format("This model's maximum context length is "
                                                         "{} tokens. However, your prompt has {} "
                                                         "tokens.",
                                                         m.max_context, n));
      e.code = "context_length_exceeded";
      return e;
    }
    if (!out->max_tokens_given && out->endpoint == Endpoint::kChat)
      out->request.max_tokens = int(std::max<int64_t>(1, limit - n));
    const int64_t total = n + out->request.max_tokens;
    if (total > m.max_context) {
      ApiError e = bad_request(
          "max_tokens",
          fmt::format("This model's maximum context length is {} tokens. However, you requested "
                      "{} tokens ({} in the prompt, {} for the completion).",
                      m.max_context, total, n, out->request.max_tokens));
      e.code = "context_length_exceeded";
      return e;
    }
    if (total > m.max_total_tokens)
      return bad_request("max_tokens",
                         fmt::format("{} tokens ({} in the prompt, {} for the completion) do not "
                                     "fit in the KV cache, which holds {} tokens for one request",
                                     total, n, out->request.max_tokens, m.max_total_tokens));
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> parse_completion_request(Endpoint endpoint, const nlohmann::json& body,
                                                 const ServedModel& model, CompletionSpec* out,
                                                 std::string_view raw_body) {
  if (auto e = parse_common(endpoint, body, model, out)) return e;
  if (auto e = parse_logprobs(endpoint, body, out)) return e;
  if (out->keep > 0) {
    if (out->stream)  // the best samples are known only at the end (OpenAI refuses it too)
      return bad_request("best_of", "best_of above n cannot be streamed");
    out->request.logprobs = std::max(out->request.logprobs, 0);  // the ranking needs them
  }
  if (auto e = parse_response_format(body, raw_body, model, &out->request.sampling)) return e;
  if (endpoint == Endpoint::kChat) {
    tok::ChatOptions opts;
    if (auto e = parse_tools(body, raw_body, model, &out->tools, &opts, &out->request.sampling))
      return e;
    // Kimi's tool-call markers are special tokens, and so may be Kimi-K2-Thinking's <think>:
    // the parsers need their text (as vLLM does).
    if (model.chat_format &&
        ((out->tools.parse && tool_syntax(*model.chat_format) == ToolSyntax::kKimi) ||
         (model.reasoning && *model.chat_format == tok::ChatFormat::kKimiK2Thinking)))
      out->request.skip_special_tokens = false;
    std::vector<int32_t> ids;
    if (auto e = chat_prompt(body, model, opts, &ids)) return e;
    out->prompts.push_back(std::move(ids));
    if (auto e = truncate_prompts(body, model, out)) return e;
    return check_lengths(model, "messages", out);
  }
  bool echo = false;
  if (auto e = get_bool(body, "echo", &echo)) return e;
  if (const json* suffix = field(body, "suffix"))
    if (!suffix->is_string() || !suffix->get<std::string>().empty())
      return bad_request("suffix", "suffix is not supported");
  if (echo && out->logprobs != LogprobsStyle::kNone) {
    // The legacy logprobs then start with the prompt's tokens (OpenAI's echo with logprobs).
    out->request.prompt_logprobs = std::max(out->request.prompt_logprobs, out->request.logprobs);
  }
  std::vector<std::string> texts;
  if (auto e = completion_prompts(body, model, &out->prompts, &texts)) return e;
  if (out->num_choices() > kMaxPrompts)
    return bad_request("n",
                       fmt::format("{} prompts with n = {} make {} choices; at most {} are "
                                   "allowed",
                                   out->prompts.size(), out->n, out->num_choices(), kMaxPrompts));
  if (echo) out->echo_texts = std::move(texts);
  if (auto e = truncate_prompts(body, model, out)) return e;
  return check_lengths(model, "prompt", out);
}

ApiError model_not_found(const std::string& requested) {
  ApiError e;
  e.status = 404;
  e.param = "model";
  e.code = "model_not_found";
  e.message = fmt::format("The model `{}` does not exist.", requested.substr(0, 256));
  return e;
}

std::optional<ApiError> parse_json_object(std::string_view body, nlohmann::json* out) {
  // Depth first, so nothing deeper than the cap is ever built, copied or printed.
  if (json_depth_exceeded(body, kMaxJsonDepth))
    return bad_request("", fmt::format("the JSON body nests deeper than {} levels", kMaxJsonDepth));
  Result<nlohmann::json> j = tok::parse_json(body, "request body");
  if (!j.ok()) return bad_request("", j.status().message());
  if (!j->is_object()) return bad_request("", "the request body must be a JSON object");
  *out = std::move(*j);
  return std::nullopt;
}

}  // namespace mla::server
