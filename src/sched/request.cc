// Request validation and the finish-reason names.
#include "sched/request.h"

#include <fmt/format.h>

namespace mla::sched {

std::string_view finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone:
      return "";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
  }
  return "";
}

void RequestOutput::add(const RequestEvent& e) {
  token_ids.insert(token_ids.end(), e.token_ids.begin(), e.token_ids.end());
  logprobs.insert(logprobs.end(), e.logprobs.begin(), e.logprobs.end());
  prompt_logprobs.insert(prompt_logprobs.end(), e.prompt_logprobs.begin(), e.prompt_logprobs.end());
  text += e.text;
  if (e.finish != FinishReason::kNone) {
    finish = e.finish;
    error = e.error;
  }
  usage = e.usage;
}

Status validate(const Request& r, int64_t vocab) {
  if (r.prompt.empty()) return invalid_argument("request: the prompt is empty");
  for (size_t i = 0; i < r.prompt.size(); ++i)
    if (r.prompt[i] < 0 || r.prompt[i] >= vocab)
      return invalid_argument(fmt::format("request: prompt token {} at index {} is outside [0, {})",
                                          r.prompt[i], i, vocab));
  if (r.max_tokens < 1)
    return invalid_argument(fmt::format("request: max_tokens is {}, must be >= 1", r.max_tokens));
  for (int32_t id : r.stop_token_ids)
    if (id < 0 || id >= vocab)
      return invalid_argument(
          fmt::format("request: stop_token_ids holds {}, outside [0, {})", id, vocab));
  if (r.logprobs < -1 || r.logprobs > kMaxTopLogprobs)
    return invalid_argument(
        fmt::format("request: logprobs is {}, must be in [-1, {}]", r.logprobs, kMaxTopLogprobs));
  if (r.prompt_logprobs < -1 || r.prompt_logprobs > kMaxTopLogprobs)
    return invalid_argument(fmt::format("request: prompt_logprobs is {}, must be in [-1, {}]",
                                        r.prompt_logprobs, kMaxTopLogprobs));
  for (const std::string& s : r.stop)
    if (s.empty()) return invalid_argument("request: a stop string is empty");
  return validate(r.sampling, vocab);
}

}  // namespace mla::sched
