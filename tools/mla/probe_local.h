// What cmd_probe.cc (the endpoint checks) and cmd_probe_compare.cc (--compare against the local
// runtime) share: how a request reaches the endpoint, and the comparison's per-prompt results.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "mla/status.h"
#include "probe/probe_compare.h"
#include "probe/probe_diagnosis.h"

namespace mla::cli {

// POSTs a JSON body to a route ("/v1/completions") under the probed base URL, with its key.
using PostJson = std::function<probe::Observed(const std::string& route, const std::string& body)>;

struct CompareSetup {
  std::string model_dir;  // the local model: the same checkpoint the endpoint should serve
  std::string model_id;   // the endpoint's name for it
  std::vector<std::string> prompts;
  int max_tokens = 16;
};

struct PromptComparison {
  std::string prompt;
  size_t prompt_tokens = 0;
  probe::Agreement agreement;
  std::string endpoint_finish;  // the endpoint's finish_reason
  std::string error;            // the endpoint's answer could not be compared (agreement unset)
};

// Each prompt, encoded by the local tokenizer, is sent as token ids to /v1/completions (so both
// sides start from the same ids) greedy with ignore_eos, and generated locally the same way.
// Errors: the local model or tokenizer does not load, a prompt cannot be encoded or run.
Result<std::vector<PromptComparison>> compare_with_local(const CompareSetup& s,
                                                         const PostJson& post);

}  // namespace mla::cli
