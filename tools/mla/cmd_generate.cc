// `mla generate`: run a model directory on a prompt (text or token ids), streaming the new tokens,
// then report prefill / decode speed, KV bytes and each prefill chunk's MLA path. With
// --dump-activations, writes the prompt's per-layer hidden states and logits as safetensors so any
// reference can be compared layer by layer (tests/e2e/model_oracle.py does).
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "commands.h"
#include "io/safetensors.h"
#include "model/generator.h"
#include "runtime_flags.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer_config.h"
#include "tokenizer_fit.h"

namespace mla::cli {
namespace {

struct GenerateCliOptions {
  std::string model;
  std::string prompt;
  std::string tokens;
  int max_new_tokens = 32;
  float temperature = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  RuntimeFlags rt;  // rt.max_context: --max-context
  int threads = 0;
  int prefill_chunk = 2048;
  bool ignore_eos = false;
  bool json = false;
  bool special = false;
  std::string dump_dir;
};

int fail(const Status& s) {
  fmt::print(stderr, "error: {}\n", s.message());
  return 1;
}

Result<std::vector<int32_t>> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (...) {
      used = 0;
    }
    if (used == 0 || used != item.size() || v < 0 || v > INT32_MAX)
      return invalid_argument(fmt::format("--tokens: \"{}\" is not a token id", item));
    ids.push_back(int32_t(v));
  }
  if (ids.empty()) return invalid_argument("--tokens: no ids given");
  return ids;
}

Status dump_activations(const std::string& dir, std::span<const int32_t> prompt,
                        const GenerateResult& r, const ModelConfig& c) {
  const int64_t T = int64_t(prompt.size()), V = c.vocab_size, D = c.hidden_size;
  std::vector<TensorToWrite> t;
  t.push_back({"tokens", DType::kI32, {T}, prompt.data(), prompt.size() * 4});
  std::vector<std::string> names;
  for (size_t l = 0; l < r.prompt_hidden.size(); ++l) names.push_back(fmt::format("hidden.{}", l));
  for (size_t l = 0; l < r.prompt_hidden.size(); ++l)
    t.push_back(
        {names[l], DType::kF32, {T, D}, r.prompt_hidden[l].data(), r.prompt_hidden[l].size() * 4});
  t.push_back({"logits", DType::kF32, {T, V}, r.prompt_logits.data(), r.prompt_logits.size() * 4});
  t.push_back({"generated",
               DType::kI32,
               {int64_t(r.generated.size())},
               r.generated.data(),
               r.generated.size() * 4});
  t.push_back({"decode_logits",
               DType::kF32,
               {int64_t(r.decode_steps), V},
               r.decode_logits.data(),
               r.decode_logits.size() * 4});
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return io_error(fmt::format("{}: cannot create: {}", dir, ec.message()));
  return write_safetensors(dir + "/activations.safetensors", t,
                           {{"model_type", c.model_type}, {"format", "mla-activations-v1"}});
}

int run_generate(const GenerateCliOptions& o) {
  Result<RuntimeOptions> ro = runtime_options(o.rt);
  if (!ro.ok()) return fail(ro.status());
  auto model = Model::load(o.model, *ro);
  if (!model.ok()) return fail(model.status());
  if (is_follower()) return follow_leader(**model, o.threads);
  if ((*model)->ranks() > 1) fmt::print(stderr, "split: {}\n", (*model)->split_summary());
  const ModelConfig& c = (*model)->config();

  // The tokenizer is needed for a text prompt and to print text; ids alone work without one.
  std::unique_ptr<tok::LoadedTokenizer> tk;
  if (auto t = tok::load_tokenizer_dir(o.model); t.ok()) {
    tk = std::make_unique<tok::LoadedTokenizer>(std::move(*t));
  } else if (!o.prompt.empty()) {
    return fail(t.status());
  }
  if (tk)
    if (Status fit = check_tokenizer_fits(tk->tokenizer, c.vocab_size, o.model); !fit.ok())
      return fail(fit);
  std::vector<int32_t> prompt;
  if (!o.tokens.empty()) {
    auto ids = parse_ids(o.tokens);
    if (!ids.ok()) return fail(ids.status());
    prompt = std::move(*ids);
  } else {
    tok::EncodeOptions eo;
    eo.add_bos = tk->adds_bos();
    auto ids = tk->tokenizer.encode(o.prompt, eo);
    if (!ids.ok()) return fail(ids.status());
    prompt = std::move(*ids);
  }

  GenerateOptions go;
  go.max_new_tokens = o.max_new_tokens;
  go.sampling.temperature = o.temperature;
  go.sampling.top_k = o.top_k;
  go.sampling.top_p = o.top_p;
  go.sampling.seed = o.seed;
  go.ignore_eos = o.ignore_eos;
  go.prefill_chunk = o.prefill_chunk;
  go.keep_prompt_activations = go.keep_decode_logits = !o.dump_dir.empty();

  ThreadPool pool(o.threads > 0 ? o.threads : default_thread_pool().num_threads());
  std::unique_ptr<tok::StreamDecoder> stream;
  // Special tokens (BOS, EOS, a chat format's markers) are dropped from the text, as the server
  // drops them, unless --special asks for them.
  if (tk)
    stream = std::make_unique<tok::StreamDecoder>(tk->tokenizer,
                                                  tok::DecodeOptions{.skip_special = !o.special});
  auto on_token = [&](int32_t id) {
    if (o.json) return;
    if (stream) {
      auto piece = stream->push(id);
      fmt::print("{}", piece.ok() ? *piece : fmt::format("<{}>", id));
    } else {
      fmt::print("{} ", id);
    }
    std::fflush(stdout);
  };
  auto r = generate(**model, prompt, go, pool, on_token);
  if (!r.ok()) return fail(r.status());
  if (!o.json) {
    fmt::print("\n");
    std::fflush(stdout);  // before the figures on stderr
  }
  if (!o.dump_dir.empty())
    if (Status s = dump_activations(o.dump_dir, prompt, *r, c); !s.ok()) return fail(s);

  const double prefill_tps =
      r->prefill_seconds > 0 ? double(prompt.size()) / r->prefill_seconds : 0;
  const double decode_tps = r->decode_seconds > 0 && r->decode_steps > 0
                                ? double(r->decode_steps) / r->decode_seconds
                                : 0;
  if (o.json) {
    nlohmann::json j;
    j["prompt_tokens"] = prompt.size();
    j["generated"] = r->generated;
    j["finish_reason"] = r->finish_reason;
    j["prefill_tokens_per_s"] = prefill_tps;
    j["decode_tokens_per_s"] = decode_tps;
    j["kv_bytes_used"] = r->kv_bytes_used;
    j["kv_bytes_per_token"] = r->kv_bytes_per_token;
    j["attention_dtype"] = dtype_flag_name(ro->attention_q_dtype);
    j["prefill_attention_dtype"] = dtype_flag_name(prefill_attention_dtype((*model)->options()));
    j["matmul_dtype"] = o.rt.matmul_dtype;
    j["lm_head_dtype"] = weight_dtype_flag_name((*model)->lm_head_dtype());
    j["weight_dtype"] = weight_dtype_held(**model);
    j["requantized_weights"] = (*model)->repack_stats().requantized;
    j["active_weight_bytes_per_token"] = (*model)->active_weight_bytes_per_token();
    j["decode_steps"] = r->decode_steps;
    j["prefill_seconds"] = r->prefill_seconds;
    j["decode_seconds"] = r->decode_seconds;
    j["chunks"] = nlohmann::json::array();
    for (const PrefillChunk& ch : r->chunks)
      j["chunks"].push_back({{"start", ch.start},
                             {"tokens", ch.n_tokens},
                             {"path", mla_path_name(ch.path)},
                             {"seconds", ch.seconds}});
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print(stderr, "prompt {} tokens, generated {} ({})\n", prompt.size(), r->generated.size(),
             r->finish_reason);
  for (const PrefillChunk& ch : r->chunks)
    fmt::print(stderr, "  prefill chunk [{}, {}): {} path, {:.1f} ms\n", ch.start,
               ch.start + ch.n_tokens, mla_path_name(ch.path), ch.seconds * 1e3);
  fmt::print(stderr, "prefill {:.1f} tokens/s, decode {:.1f} tokens/s ({} steps)\n", prefill_tps,
             decode_tps, r->decode_steps);
  fmt::print(stderr, "weights read per decode token: {:.1f} MB (active, file dtypes)\n",
             double((*model)->active_weight_bytes_per_token()) / 1e6);
  fmt::print(stderr, "KV cache: {} bytes held ({} B per token over {} layers, {})\n",
             r->kv_bytes_used, r->kv_bytes_per_token, c.num_hidden_layers, o.rt.kv_dtype);
  return 0;
}

void register_generate(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<GenerateCliOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate tokens with a model directory");
  o->model = kBundledModelDir;
  cmd->add_option("-m,--model", o->model,
                  "Model directory (config.json + safetensors) or .gguf file (default: the "
                  "bundled models/tiny-kjv)");
  CLI::Option* p = cmd->add_option("-p,--prompt", o->prompt, "Prompt text (needs tokenizer.json)");
  CLI::Option* t = cmd->add_option("--tokens", o->tokens, "Prompt as comma-separated token ids");
  p->excludes(t);
  cmd->add_option("-n,--max-tokens", o->max_new_tokens, "Tokens to generate (default 32)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--temperature", o->temperature, "0 = greedy (default)");
  cmd->add_option("--top-k", o->top_k, "Keep the k most likely tokens (0 = all)");
  cmd->add_option("--top-p", o->top_p, "Nucleus sampling mass (1 = all)");
  cmd->add_option("--seed", o->seed, "Sampling seed (default 0)");
  add_runtime_flags(cmd, &o->rt);
  cmd->add_option("--threads", o->threads, "Threads (default: MLA_NUM_THREADS or all)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--prefill-chunk", o->prefill_chunk, "Prompt tokens per forward pass")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--max-context", o->rt.max_context,
                  "Longest sequence to support (default: the config's, at most 32768)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 31));
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Do not stop at the EOS token");
  cmd->add_flag("--json", o->json, "Print the result and figures as JSON");
  cmd->add_flag("--special", o->special, "Print special tokens (BOS, EOS, chat markers) too");
  cmd->add_option("--dump-activations", o->dump_dir,
                  "Write DIR/activations.safetensors: hidden.{layer} and logits of the prompt, "
                  "generated ids, decode_logits");
  cmd->callback([cmd, o, exit_code] {
    if (o->prompt.empty() && o->tokens.empty()) {
      fmt::print(stderr, "error: give a prompt with -p TEXT or --tokens IDS\n");
      *exit_code = 2;
      return;
    }
    (void)cmd;
    *exit_code = run_generate(*o);
  });
}

}  // namespace

MLA_REGISTER_COMMAND("generate", register_generate);

}  // namespace mla::cli
