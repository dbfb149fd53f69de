// `mla probe --compare`: the endpoint's greedy tokens against the engine's own runtime on a local
// copy of the model (the same generate() as `mla generate`), prompt by prompt.
#include <fmt/format.h>

#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "model/generator.h"
#include "model/sampler.h"
#include "probe_local.h"
#include "runtime_flags.h"
#include "tokenizer/tokenizer_config.h"
#include "tokenizer_fit.h"

namespace mla::cli {

using probe::EndpointTokens;

Result<std::vector<PromptComparison>> compare_with_local(const CompareSetup& s,
                                                         const PostJson& post) {
  // The runtime options of `mla serve` and `mla generate` left at their defaults, so a server
  // started without flags computes what this does.
  MLA_RETURN_IF_ERROR(require_one_rank("probe --compare"));
  MLA_ASSIGN_OR_RETURN(RuntimeOptions ro, runtime_options(RuntimeFlags{}));
  fmt::print(stderr, "loading the local model {}...\n", s.model_dir);
  MLA_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::load(s.model_dir, ro));
  MLA_ASSIGN_OR_RETURN(tok::LoadedTokenizer tk, tok::load_tokenizer_dir(s.model_dir));
  MLA_RETURN_IF_ERROR(check_tokenizer_fits(tk.tokenizer, model->config().vocab_size, s.model_dir));
  ThreadPool& pool = default_thread_pool();

  std::vector<PromptComparison> out;
  for (const std::string& prompt : s.prompts) {
    PromptComparison pc;
    pc.prompt = prompt;
    // BOS as the server adds it to a text prompt (server/openai_prompt.cc).
    tok::EncodeOptions eo;
    eo.add_bos = tk.adds_bos();
    MLA_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tk.tokenizer.encode(prompt, eo));
    pc.prompt_tokens = ids.size();

    // logprobs=1 brings the tokens; return_tokens_as_token_ids makes vLLM name them by id
    // (servers that do not know it ignore it). ignore_eos: both sides give exactly max_tokens.
    const nlohmann::json body = {{"model", s.model_id},
                                 {"prompt", ids},
                                 {"max_tokens", s.max_tokens},
                                 {"temperature", 0},
                                 {"ignore_eos", true},
                                 {"logprobs", 5},
                                 {"return_tokens_as_token_ids", true}};
    const probe::Observed o = post("/v1/completions", body.dump());
    std::optional<EndpointTokens> e;
    if (o.status == 0) {
      pc.error = "no answer: " + o.transport_error;
    } else if (o.status != 200) {
      pc.error = fmt::format("HTTP {}: {}", o.status, probe::excerpt(o.body, 300));
    } else {
      Result<EndpointTokens> parsed = probe::parse_completion_tokens(o.body);
      if (parsed.ok())
        e = std::move(*parsed);
      else
        pc.error = parsed.status().message();
    }

    GenerateOptions go;
    go.max_new_tokens = s.max_tokens;
    go.sampling.temperature = 0;
    go.ignore_eos = true;
    go.keep_prompt_activations = go.keep_decode_logits = true;  // the rows behind each token
    MLA_ASSIGN_OR_RETURN(GenerateResult r, generate(*model, ids, go, pool));
    if (e) {
      std::vector<std::string> bytes;
      for (int32_t id : r.generated) {
        const std::string* b = tk.tokenizer.token_bytes(id);
        bytes.push_back(b ? *b : std::string());
      }
      // Token k came from the prompt's last row (k = 0) or decode step k - 1; the engine's own
      // logprob (the one its API reports) of a token there.
      const size_t V = size_t(model->config().vocab_size);
      const auto local_logprob = [&](size_t k, int32_t id) -> double {
        const float* row = k == 0 ? r.prompt_logits.data() + (ids.size() - 1) * V
                                  : r.decode_logits.data() + (k - 1) * V;
        if (k > 0 && k * V > r.decode_logits.size()) return NAN;
        return token_logprobs(std::span<const float>(row, V), id, 0).logprob;
      };
      pc.agreement = probe::compare_tokens(r.generated, bytes, *e, local_logprob);
      pc.endpoint_finish = e->finish_reason;
    }
    out.push_back(std::move(pc));
  }
  return out;
}

}  // namespace mla::cli
