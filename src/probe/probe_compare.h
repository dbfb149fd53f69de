// `mla probe --compare`: an endpoint's greedy /v1/completions tokens against the local model's,
// position by position. Token ids when the endpoint names them ("token_id:N", vLLM's
// return_tokens_as_token_ids), else the token texts of its legacy logprobs, else only its text.
// No HTTP and no model here (tools/mla/cmd_probe_compare.cc has both); unit-tested in
// tests/unit/probe/probe_diagnosis_test.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mla/status.h"

namespace mla::probe {

// choices[0] of a /v1/completions answer.
struct EndpointTokens {
  std::string text;
  bool has_tokens = false;          // logprobs.tokens was there
  std::vector<std::string> tokens;  // logprobs.tokens: texts, or "token_id:N"
  // logprobs.token_logprobs[i] and logprobs.top_logprobs[i] ({token: logprob}) when given.
  std::vector<double> token_logprobs;
  std::vector<std::vector<std::pair<std::string, double>>> top;
  std::string finish_reason;
  int64_t completion_tokens = -1;  // usage.completion_tokens; -1 when absent
};

// Error (naming what is missing, with a cut of the body) when there is no choices[0].text.
Result<EndpointTokens> parse_completion_tokens(std::string_view body);

struct Agreement {
  size_t agreed = 0;  // leading tokens that are the same: after the first difference the two
                      // continue from different prefixes, so later positions say nothing
  size_t total = 0;   // the longer of the two outputs
  bool full = false;
  std::string method;  // "token ids", "token texts" or "text"
  // At the first divergence (as JSON strings would show them); empty past an output's end.
  std::string endpoint_token, local_token;
  // How far apart the two choices were there, in nats (NaN when unknown): the endpoint's
  // logprob of its token minus its logprob of the local one (when the local one is among its
  // top logprobs), and the local model's logprob of its token minus that of the endpoint's.
  // A near-tie (a small gap on both sides) points at numerics (KV cache dtype, BF16 products);
  // a large one at another model or other weights.
  double endpoint_gap = std::numeric_limits<double>::quiet_NaN();
  double local_gap = std::numeric_limits<double>::quiet_NaN();
};

// The local model's logprob of token `id` at output step `step` (the row that chose
// local_ids[step]), or NaN when unknown; asked only at the first divergence.
using LocalLogprob = std::function<double(size_t step, int32_t id)>;

// local_ids: the local greedy output; local_bytes[i]: the bytes local_ids[i] decodes to.
Agreement compare_tokens(std::span<const int32_t> local_ids,
                         std::span<const std::string> local_bytes, const EndpointTokens& e,
                         const LocalLogprob& local_logprob = {});

// Below this gap (nats) on both sides a divergence reads as a near-tie of numerics; above, as
// another model (docs/SERVING.md, section `mla probe`).
inline constexpr double kNearTieNats = 0.5;

// bytes as a JSON string would carry them: each ill-formed UTF-8 byte becomes U+FFFD, which is
// what our server (and nlohmann's replace mode) sends for a token that is part of a character.
std::string as_json_text(std::string_view bytes);

}  // namespace mla::probe
