// `mla serve`: the OpenAI-compatible server on one model directory. It listens at once (/health
// says 503 while the model loads), serves until SIGTERM or SIGINT, then stops accepting, drains
// in-flight requests for up to --shutdown-timeout seconds, cancels the rest and exits 0.
#include <fmt/format.h>

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "cache/cache_capacity.h"
#include "commands.h"
#include "runtime_flags.h"
#include "server/http_server.h"
#include "server/openai_prompt.h"
#include "tokenizer/json_read.h"
#include "tokenizer/tokenizer_config.h"
#include "tokenizer_fit.h"

namespace mla::cli {
namespace {

struct ServeCliOptions {
  std::string model;
  server::ServerOptions http;
  std::string api_key_file;
  std::string served_model_name;
  std::string reasoning_parser = "auto";  // --reasoning-parser auto|deepseek_r1|none
  int max_num_seqs = 64;
  int max_num_batched_tokens = 2048;
  int page_size = kDefaultPageSize;
  double kv_cache_gib = 1.0;
  uint64_t kv_cache_bytes = 0;  // when given, instead of kv_cache_gib
  RuntimeFlags rt;              // rt.max_context: --max-model-len
  int threads = 0;
  double shutdown_timeout_s = 30;
  std::string warm_prefix;
};

int fail(const Status& s) {
  fmt::print(stderr, "error: {}\n", s.message());
  return 1;
}

Result<std::string> read_key_file(const std::string& path) {
  MLA_ASSIGN_OR_RETURN(std::string text, tok::read_text_file(path));
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' '))
    text.pop_back();
  if (text.empty() || text.find('\n') != std::string::npos)
    return invalid_argument(
        fmt::format("--api-key-file {}: expected one line holding the key", path));
  return text;
}

// --warm-prefix FILE: one JSON value per line: a string (text, encoded as a plain prompt) or a
// list of token ids. Each is prefilled and pinned, so requests that start with it skip its prefill.
Status warm_prefixes(const std::string& path, sched::Engine& engine, const server::ServedModel& m) {
  std::ifstream in(path);
  if (!in) return io_error(fmt::format("--warm-prefix {}: cannot open", path));
  std::string line;
  int lineno = 0, pinned = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("--warm-prefix {}:{}", path, lineno);
    Result<tok::Json> j = tok::parse_json(line, where);
    if (!j.ok()) return j.status();
    std::vector<std::vector<int32_t>> prompts;
    std::vector<std::string> texts;
    const nlohmann::json body = {{"prompt", *j}};
    if (auto e = server::completion_prompts(body, m, &prompts, &texts))
      return invalid_argument(fmt::format("{}: {}", where, e->message));
    for (auto& p : prompts) {
      Result<sched::PrefixId> id = engine.pin_prefix(std::move(p));
      if (!id.ok()) return invalid_argument(fmt::format("{}: {}", where, id.status().message()));
      ++pinned;
    }
  }
  fmt::print(stderr, "pinned {} warm prefixes from {}\n", pinned, path);
  return Status();
}

int g_stop_pipe[2] = {-1, -1};

// What the handler writes to the pipe: the signal and the process that sent it.
struct StopSignal {
  int sig = 0;
  pid_t sender = 0;
};

void on_stop_signal(int sig, siginfo_t* info, void*) {
  const StopSignal s{sig, info ? info->si_pid : 0};
  [[maybe_unused]] const ssize_t n = write(g_stop_pipe[1], &s, sizeof s);  // async-signal-safe
}

int run_serve(ServeCliOptions o) {
  std::signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error return, not a kill

  // Flag errors before the port is taken.
  Result<RuntimeOptions> ro = runtime_options(o.rt);
  if (!ro.ok()) return fail(ro.status());
  if (is_follower()) {  // no server, no key: the leader's forward passes only
    // No stop handler either: SIGTERM / SIGINT end a follower (their default action), and
    // mpirun, seeing a rank end on a signal, ends the job. A follower never reads a stop pipe.
    auto model = Model::load(o.model, *ro);
    if (!model.ok()) return fail(model.status());
    return follow_leader(**model, o.threads);
  }
  // SIGTERM / SIGINT reach a handler on whichever thread the kernel picks (libraries start
  // threads of their own, which a signal mask set here would not cover); it writes the signal to
  // a pipe that the main thread waits on. A write of a few bytes to a pipe is atomic.
  if (pipe(g_stop_pipe) != 0) return fail_before_load(io_error("cannot create the signal pipe"));
  struct sigaction sa {};
  sa.sa_sigaction = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART | SA_SIGINFO;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);

  // From here until the model is loaded a failure is the leader's alone: fail_before_load ends
  // the other ranks, which wait in the load.
  if (!o.api_key_file.empty()) {
    if (!o.http.api_key.empty())
      return fail_before_load(invalid_argument("give --api-key or --api-key-file"));
    Result<std::string> key = read_key_file(o.api_key_file);
    if (!key.ok()) return fail_before_load(key.status());
    o.http.api_key = *key;
  }

  // One connection worker per request that may run or wait, and 64 more for idle keep-alive
  // and slow connections (shed when all are taken).
  if (o.http.http_threads == 0) o.http.http_threads = o.max_num_seqs + o.http.max_queue + 64;
  // glibc gives each thread that allocates an arena of up to 64 MiB of address space; with a
  // hundred connection threads that alone could pass a `ulimit -v` sized to the model.
  mallopt(M_ARENA_MAX, 4);
  server::HttpServer http(o.http);
  Result<int> port = http.bind();
  if (!port.ok()) return fail_before_load(port.status());
  http.start();
  fmt::print(stderr, "listening on http://{}:{}\n", o.http.host, *port);

  auto model = Model::load(o.model, *ro);
  if (!model.ok()) return fail(model.status());
  std::unique_ptr<tok::LoadedTokenizer> tk;
  if (tok::tokenizer_file(o.model)) {
    auto t = tok::load_tokenizer_dir(o.model);
    if (!t.ok()) return fail(t.status());
    tk = std::make_unique<tok::LoadedTokenizer>(std::move(*t));
    if (Status fit = check_tokenizer_fits(tk->tokenizer, (*model)->config().vocab_size, o.model);
        !fit.ok())
      return fail(fit);
  }
  ThreadPool pool(o.threads > 0 ? o.threads : default_thread_pool().num_threads());
  sched::EngineOptions eo;
  eo.scheduler.max_num_seqs = o.max_num_seqs;
  eo.scheduler.max_num_batched_tokens = o.max_num_batched_tokens;
  eo.page_size = o.page_size;
  eo.kv_cache_bytes = o.kv_cache_bytes > 0 ? o.kv_cache_bytes
                                           : uint64_t(o.kv_cache_gib * double(uint64_t(1) << 30));
  auto engine = sched::Engine::create(**model, eo, tk ? &tk->tokenizer : nullptr, &pool);
  if (!engine.ok()) return fail(engine.status());

  server::ServingBackend b;
  b.engine = engine->get();
  server::ServedModel& m = b.model;
  m.name = !o.served_model_name.empty()
               ? o.served_model_name
               : std::filesystem::path(o.model).lexically_normal().filename().string();
  if (m.name.empty()) m.name = std::filesystem::path(o.model).parent_path().filename().string();
  m.tokenizer = tk.get();
  if (tk && !tk->config.chat_template.empty())
    if (auto f = tok::detect_chat_format(tk->config.chat_template); f.ok()) m.chat_format = *f;
  m.reasoning = o.reasoning_parser == "deepseek_r1" ||
                (o.reasoning_parser == "auto" && m.chat_format &&
                 (*m.chat_format == tok::ChatFormat::kDeepSeekR1 ||
                  *m.chat_format == tok::ChatFormat::kDeepSeekR1Original ||
                  *m.chat_format == tok::ChatFormat::kKimiK2Thinking));
  m.vocab = (*model)->config().vocab_size;
  m.max_context = (*model)->max_context();
  m.max_total_tokens = int64_t((*engine)->num_blocks()) * (*engine)->page_size();
  if (tk) {
    for (int32_t id = 0; id < tk->tokenizer.id_limit(); ++id)
      if (const std::string* b = tk->tokenizer.token_bytes(id))
        m.max_token_bytes = std::max(m.max_token_bytes, int64_t(b->size()));
    m.vocab_trie = VocabTrie::from_tokenizer(tk->tokenizer, m.vocab);
  }
  if (!o.warm_prefix.empty())
    if (Status s = warm_prefixes(o.warm_prefix, **engine, m); !s.ok()) return fail(s);
  http.set_backend(b);
  fmt::print(stderr, "ready: model \"{}\", context {} tokens, KV cache {} pages of {} tokens{}\n",
             m.name, m.max_context, (*engine)->num_blocks(), (*engine)->page_size(),
             m.chat_format
                 ? fmt::format(", chat format {}{}", tok::chat_format_name(*m.chat_format),
                               m.reasoning ? ", reasoning parser deepseek_r1" : "")
                 : ", no chat format");
  if ((*model)->ranks() > 1) fmt::print(stderr, "split: {}\n", (*model)->split_summary());

  StopSignal stop;
  while (read(g_stop_pipe[0], &stop, sizeof stop) < 0 && errno == EINTR) {
  }
  std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C does not wait for the drain
  // Across ranks, a signal from our parent is the launcher's: mpirun signals every rank when one
  // of them died (or when mpirun itself was signalled), so this is not an operator's shutdown.
  if ((*model)->ranks() > 1 && stop.sender != 0 && stop.sender == getppid())
    fmt::print(stderr,
               "stopped by the launcher (signal {} from pid {}, this rank's parent): another "
               "rank may have failed; see mpirun's report\n",
               stop.sig, stop.sender);
  fmt::print(stderr, "signal {}: draining {} requests for up to {} s\n", stop.sig, http.in_flight(),
             o.shutdown_timeout_s);
  http.shutdown(std::chrono::milliseconds(int64_t(o.shutdown_timeout_s * 1000)));
  fmt::print(stderr, "stopped\n");
  return 0;
}

void register_serve(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<ServeCliOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server on a model directory");
  o->model = kBundledModelDir;
  cmd->add_option("-m,--model", o->model,
                  "Model directory (config.json + safetensors) or .gguf file (default: the "
                  "bundled models/tiny-kjv)");
  cmd->add_option("--host", o->http.host, "Address to listen on (default loopback)");
  cmd->add_option("--port", o->http.port, "Port (0: any free one; the log says which)");
  cmd->add_option("--api-key", o->http.api_key, "Require Authorization: Bearer KEY");
  cmd->add_option("--api-key-file", o->api_key_file, "Read the key from a file (one line)");
  cmd->add_option("--served-model-name", o->served_model_name,
                  "The model id clients send (default: the directory's name)");
  cmd->add_option("--reasoning-parser", o->reasoning_parser,
                  "Chat replies' reasoning (text before </think>) in reasoning_content: auto "
                  "(default: for the DeepSeek-R1 and Kimi-K2-Thinking chat formats), deepseek_r1 "
                  "(always) or none")
      ->check(CLI::IsMember({"auto", "deepseek_r1", "none"}));
  cmd->add_option("--max-num-seqs", o->max_num_seqs, "Requests running at once")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-num-batched-tokens", o->max_num_batched_tokens, "Tokens per step")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-queue", o->http.max_queue,
                  "Requests waiting beyond the running ones before 429")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--page-size", o->page_size, "Tokens per KV page");
  CLI::Option* gib = cmd->add_option("--kv-cache-gib", o->kv_cache_gib, "KV cache size in GiB")
                         ->check(CLI::PositiveNumber);
  cmd->add_option("--kv-cache-bytes", o->kv_cache_bytes, "KV cache size in bytes")
      ->check(CLI::PositiveNumber)
      ->excludes(gib);
  add_runtime_flags(cmd, &o->rt);
  cmd->add_option("--max-model-len", o->rt.max_context, "Context length (default: the model's)");
  cmd->add_option("--threads", o->threads, "Compute threads (default: MLA_NUM_THREADS or all)");
  cmd->add_option("--max-body-bytes", o->http.max_body_bytes, "Larger request bodies get 413");
  cmd->add_option("--allowed-origins", o->http.allowed_origins,
                  "CORS: origins (https://host:port, or * for any) whose web pages may call the "
                  "API, comma-separated; default none")
      ->delimiter(',');
  cmd->add_option("--metrics-prefix", o->http.metrics_prefix,
                  "Prefix of every /metrics name (default vllm:, vLLM's, for its dashboards)");
  cmd->add_flag("--metrics-require-key", o->http.metrics_require_key,
                "/metrics asks for the API key too (default: open to scrapers)");
  cmd->add_option("--read-timeout", o->http.read_timeout_s,
                  "Seconds a request's headers, and then its body, may take to arrive (default "
                  "10); slower connections are closed")
      ->check(CLI::Range(1, 3600));
  cmd->add_option("--shutdown-timeout", o->shutdown_timeout_s,
                  "Seconds in-flight requests may run after SIGTERM")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--warm-prefix", o->warm_prefix,
                  "Prefill and pin the prefixes in FILE (JSON lines: text or token ids)");
  cmd->add_flag("--log-requests", o->http.log_requests, "Log every request (else only errors)");
  cmd->callback([o, exit_code] { *exit_code = run_serve(*o); });
}

}  // namespace

MLA_REGISTER_COMMAND("serve", register_serve);

}  // namespace mla::cli
