#include "probe/probe_compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "probe/probe_diagnosis.h"

namespace mla::probe {
namespace {

using nlohmann::json;

constexpr std::string_view kIdPrefix = "token_id:";

// "token_id:N" → N; -1 for anything else.
int64_t token_id_of(std::string_view t) {
  if (t.substr(0, kIdPrefix.size()) != kIdPrefix || t.size() == kIdPrefix.size() ||
      t.size() > kIdPrefix.size() + 10)
    return -1;
  int64_t v = 0;
  for (char c : t.substr(kIdPrefix.size())) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v;
}

}  // namespace

std::string as_json_text(std::string_view bytes) {
  const std::string quoted =
      json(std::string(bytes)).dump(-1, ' ', false, json::error_handler_t::replace);
  return json::parse(quoted).get<std::string>();
}

Result<EndpointTokens> parse_completion_tokens(std::string_view body) {
  const json j = json::parse(body, nullptr, false);
  const json* c0 = nullptr;
  if (j.is_object() && j.contains("choices") && j["choices"].is_array() && !j["choices"].empty())
    c0 = &j["choices"][0];
  if (!c0 || !c0->is_object() || !c0->contains("text") || !(*c0)["text"].is_string())
    return invalid_argument(
        fmt::format("no choices[0].text in the /v1/completions answer: {}", excerpt(body, 300)));
  EndpointTokens e;
  e.text = (*c0)["text"].get<std::string>();
  if (auto f = c0->find("finish_reason"); f != c0->end() && f->is_string())
    e.finish_reason = f->get<std::string>();
  if (auto lp = c0->find("logprobs"); lp != c0->end() && lp->is_object()) {
    if (auto t = lp->find("tokens"); t != lp->end() && t->is_array()) {
      e.has_tokens = true;
      for (const json& s : *t) e.tokens.push_back(s.is_string() ? s.get<std::string>() : s.dump());
    }
    if (auto t = lp->find("token_logprobs"); t != lp->end() && t->is_array())
      for (const json& v : *t) e.token_logprobs.push_back(v.is_number() ? v.get<double>() : NAN);
    if (auto t = lp->find("top_logprobs"); t != lp->end() && t->is_array())
      for (const json& m : *t) {
        e.top.emplace_back();
        if (m.is_object())
          for (const auto& [k, v] : m.items())
            if (v.is_number()) e.top.back().emplace_back(k, v.get<double>());
      }
  }
  if (j.contains("usage") && j["usage"].is_object() && j["usage"].contains("completion_tokens") &&
      j["usage"]["completion_tokens"].is_number_integer())
    e.completion_tokens = j["usage"]["completion_tokens"].get<int64_t>();
  return e;
}

Agreement compare_tokens(std::span<const int32_t> local_ids,
                         std::span<const std::string> local_bytes, const EndpointTokens& e,
                         const LocalLogprob& local_logprob) {
  Agreement a;
  const size_t n = local_ids.size();
  if (e.has_tokens) {
    const bool ids =
        !e.tokens.empty() && std::all_of(e.tokens.begin(), e.tokens.end(),
                                         [](const std::string& t) { return token_id_of(t) >= 0; });
    a.method = ids ? "token ids" : "token texts";
    const auto same = [&](size_t i) {
      const int64_t id = token_id_of(e.tokens[i]);
      return id >= 0 ? id == local_ids[i] : e.tokens[i] == as_json_text(local_bytes[i]);
    };
    while (a.agreed < std::min(n, e.tokens.size()) && same(a.agreed)) ++a.agreed;
    a.total = std::max(n, e.tokens.size());
    a.full = a.agreed == a.total;
    if (!a.full) {
      if (a.agreed < e.tokens.size()) a.endpoint_token = e.tokens[a.agreed];
      if (a.agreed < n)
        a.local_token = ids ? fmt::format("token_id:{}", local_ids[a.agreed])
                            : as_json_text(local_bytes[a.agreed]);
      const size_t k = a.agreed;
      if (k < n && k < e.tokens.size()) {
        // The endpoint's view: its token's logprob against the local token's, if listed.
        if (k < e.top.size() && k < e.token_logprobs.size())
          for (const auto& [tok, lp] : e.top[k])
            if (tok == a.local_token) a.endpoint_gap = e.token_logprobs[k] - lp;
        // The local view, where the endpoint names its token by id.
        const int64_t theirs = token_id_of(e.tokens[k]);
        if (local_logprob && theirs >= 0)
          a.local_gap = local_logprob(k, local_ids[k]) - local_logprob(k, int32_t(theirs));
      }
    }
    return a;
  }
  // Text only: a local token agrees while the local output so far is a prefix of the text.
  a.method = "text";
  std::string local;
  while (a.agreed < n) {
    const std::string next = local + local_bytes[a.agreed];
    if (e.text.compare(0, next.size(), next) != 0) break;
    local = next;
    ++a.agreed;
  }
  a.total = std::max<size_t>(n, e.completion_tokens > 0 ? size_t(e.completion_tokens) : 0);
  std::string all;
  for (const std::string& b : local_bytes) all += b;
  // The text's last character may be a U+FFFD standing for a token that ends mid-character.
  a.full = a.total == n && (all == e.text || as_json_text(all) == e.text);
  if (a.full) {
    a.agreed = n;
  } else {
    a.endpoint_token = as_json_text(std::string_view(e.text).substr(local.size(), 16));
    if (a.agreed < n) a.local_token = as_json_text(local_bytes[a.agreed]);
  }
  return a;
}

}  // namespace mla::probe
