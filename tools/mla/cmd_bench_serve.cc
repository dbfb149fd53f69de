// `mla bench serve`: a load generator for an OpenAI-compatible server (ours, vLLM, SGLang), with
// the method of `vllm bench serve` (docs/SERVING.md, section `mla bench serve`): N requests of
// random token-id prompts sent at Poisson arrival times (or all at once), at most C in flight, each
// a streaming
// `/v1/completions` with ignore_eos so output lengths are exact; every SSE chunk is timed as it
// arrives. Prints vLLM's result table, or one JSON object with --json. Progress goes to stderr.
// The statistics and the stream parsing live in src/bench/serve_stats (unit-tested).
#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "bench/serve_stats.h"
#include "bench_serve_dataset.h"
#include "commands.h"

namespace mla::cli {
namespace {

using Clock = std::chrono::steady_clock;
using bench::RequestResult;
using nlohmann::ordered_json;

struct ServeBenchOptions {
  std::string base_url = "http://127.0.0.1:8080", model, api_key_env = "MLA_API_KEY";
  std::string request_rate = "inf";
  int num_prompts = 100, max_concurrency = 0, input_len = 128, output_len = 128;
  int vocab_low = 3, vocab_high = 259;
  uint64_t seed = 0;
  double timeout_s = 600;
  bool json = false, no_keep_alive = false;
  // vLLM's result options: which metrics get percentiles and which, the SLOs of goodput, and a
  // result file with the per-request arrays.
  std::string percentile_metrics = "ttft,tpot,itl", metric_percentiles = "99";
  std::vector<std::string> goodput;  // "ttft:MS", "tpot:MS", "e2el:MS"
  bool save_result = false;
  std::string result_dir, result_filename;
  // What is sent: /v1/completions or /v1/chat/completions; random ids or a ShareGPT file's
  // conversations; the tokenizer that turns ids into text and counts a dataset's tokens.
  std::string endpoint = "/v1/completions", dataset_name = "random", dataset_path, tokenizer;
  int sharegpt_output_len = 0;
};

// One request's body: the prompt as ids or text, or (chat) a user message.
std::string request_body(const std::string& model, const BenchPrompt& p, bool chat) {
  ordered_json b = {{"model", model}};
  if (chat)
    b["messages"] = ordered_json::array({{{"role", "user"}, {"content", p.text}}});
  else if (!p.ids.empty())
    b["prompt"] = p.ids;
  else
    b["prompt"] = p.text;
  b[chat ? "max_completion_tokens" : "max_tokens"] = p.output_len;
  b["temperature"] = 0.0;
  b["stream"] = true;
  b["stream_options"] = {{"include_usage", true}};
  b["ignore_eos"] = true;
  return b.dump();
}

// "a,b,c" split at commas.
std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  for (size_t c; (c = s.find(',', at)) != std::string::npos; at = c + 1)
    out.push_back(s.substr(at, c - at));
  out.push_back(s.substr(at));
  return out;
}

// vLLM's spelling of a percentile in names: 99 → "99", 99.9 → "99.9".
std::string percentile_word(double p) {
  return p == std::floor(p) ? fmt::format("{}", int64_t(p)) : fmt::format("{}", p);
}

// Where to send: "http://host:port" for httplib's Client, and a path prefix ("" or "/proxy").
// A trailing "/v1" is dropped so that OpenAI-style base URLs work as well as vLLM-style ones.
struct Endpoint {
  std::string origin, prefix;
};

Endpoint parse_base_url(std::string url) {
  while (!url.empty() && url.back() == '/') url.pop_back();
  const size_t scheme = url.find("://");
  const size_t slash = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  Endpoint e{url.substr(0, slash), slash == std::string::npos ? "" : url.substr(slash)};
  if (e.prefix.size() >= 3 && e.prefix.compare(e.prefix.size() - 3, 3, "/v1") == 0)
    e.prefix.resize(e.prefix.size() - 3);
  return e;
}

// One connection per worker thread, kept alive between its requests as vLLM's pooled aiohttp
// session does (--no-keep-alive: a new one per request). TCP_NODELAY: httplib writes the headers
// and the body separately, and Nagle would hold the body back for the server's delayed ACK.
std::unique_ptr<httplib::Client> make_client(const std::string& origin, double timeout_s,
                                             bool keep_alive = true) {
  auto c = std::make_unique<httplib::Client>(origin);
  c->set_connection_timeout(10);
  // Long prefills leave a stream silent; generous like llama.cpp's 600 s (docs/SERVING.md, section
  // `mla bench serve`).
  c->set_read_timeout(time_t(timeout_s));
  c->set_write_timeout(time_t(timeout_s));
  c->set_keep_alive(keep_alive);
  c->set_tcp_nodelay(true);
  return c;
}

// "HTTP 400: <message>" from an error body, using the OpenAI envelope when there is one.
std::string http_error(int status, const std::string& body) {
  std::string msg = body.substr(0, 300);
  const auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error")) {
    const auto& e = j["error"];
    if (e.is_object() && e.contains("message") && e["message"].is_string())
      msg = e["message"].get<std::string>();
    else if (e.is_string())
      msg = e.get<std::string>();
  }
  return fmt::format("HTTP {}: {}", status, msg);
}

// One streaming request. Times are taken in the content receiver, i.e. when httplib hands over
// the bytes of a read: every event of one read shares its time, as it does for vLLM's client.
RequestResult send_stream(httplib::Client& cli, const std::string& path,
                          const httplib::Headers& headers, const std::string& body) {
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.headers = headers;
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream");
  req.body = body;
  bench::SseParser sse;
  bench::StreamRecorder rec;
  int status = 0;
  std::string error_body;
  const Clock::time_point t0 = Clock::now();
  const auto since = [t0] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    const double t = since();
    if (status != 200) {
      if (error_body.size() < 4096) error_body.append(data, n);
      return true;
    }
    sse.feed({data, n},
             [&](std::string_view d) { rec.on_chunk(bench::parse_completion_chunk(d), t); });
    return true;
  };
  const httplib::Result res = cli.send(req);
  if (!res) return rec.finish("transport error: " + httplib::to_string(res.error()));
  if (status != 200) return rec.finish(http_error(status, error_body));
  const double t_end = since();
  sse.finish([&](std::string_view d) { rec.on_chunk(bench::parse_completion_chunk(d), t_end); });
  return rec.finish("");
}

// The local time as vLLM stamps result files: YYYYMMDD-HHMMSS.
std::string date_string() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return buf;
}

// A model id as a file name part: the last path component ("org/name" → "name").
std::string model_file_part(const std::string& model) {
  const size_t slash = model.rfind('/');
  return slash == std::string::npos ? model : model.substr(slash + 1);
}

int fail(const std::string& msg) {
  fmt::print(stderr, "mla bench serve: {}\n", msg);
  return 1;
}

// GET {base}/v1/models → data[0].id, as SGLang's client does when no model is named.
std::string first_served_model(const Endpoint& ep, const httplib::Headers& headers,
                               std::string* error) {
  auto cli = make_client(ep.origin, 30);
  const auto res = cli->Get(ep.prefix + "/v1/models", headers);
  if (!res) {
    *error = "GET /v1/models: transport error: " + httplib::to_string(res.error());
    return {};
  }
  if (res->status != 200) {
    *error = "GET /v1/models: " + http_error(res->status, res->body);
    return {};
  }
  const auto j = nlohmann::json::parse(res->body, nullptr, false);
  if (j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
      j["data"][0].contains("id") && j["data"][0]["id"].is_string())
    return j["data"][0]["id"].get<std::string>();
  *error = "GET /v1/models: no data[0].id in " + res->body.substr(0, 200);
  return {};
}

// The metrics of --percentile-metrics as (key, section title, short name, distribution).
struct MetricRow {
  const char* key;
  const char* title;
  const char* name;
  const bench::Distribution* d;
};
std::vector<MetricRow> selected_metrics(const std::vector<std::string>& keys,
                                        const bench::ServeMetrics& m) {
  const MetricRow all[] = {{"ttft", "Time to First Token", "TTFT", &m.ttft},
                           {"tpot", "Time per Output Token (excl. 1st token)", "TPOT", &m.tpot},
                           {"itl", "Inter-token Latency", "ITL", &m.itl},
                           {"e2el", "End-to-end Latency", "E2EL", &m.e2el}};
  std::vector<MetricRow> out;
  for (const MetricRow& r : all)
    if (std::find(keys.begin(), keys.end(), r.key) != keys.end()) out.push_back(r);
  return out;
}

void print_table(const ServeBenchOptions& o, double rate, const std::vector<double>& percentiles,
                 const bench::ServeMetrics& m) {
  // vLLM's layout: 50-column banners, a label padded to 40 and the value.
  const auto banner = [](std::string s, char c) {
    // Centred like Python's "{:c^50}": the odd pad character goes to the right.
    const size_t pad = s.size() < 50 ? 50 - s.size() : 0;
    fmt::print("{}{}{}\n", std::string(pad / 2, c), s, std::string(pad - pad / 2, c));
  };
  const auto row = [](const std::string& label, const auto& v) {
    if constexpr (std::is_floating_point_v<std::decay_t<decltype(v)>>)
      fmt::print("{:<40} {:<10.2f}\n", label, v);
    else
      fmt::print("{:<40} {:<10}\n", label, v);
  };
  banner(" Serving Benchmark Result ", '=');
  row("Successful requests:", m.completed);
  row("Failed requests:", m.failed);
  if (o.max_concurrency > 0) row("Maximum request concurrency:", o.max_concurrency);
  if (std::isfinite(rate)) row("Request rate configured (RPS):", rate);
  row("Benchmark duration (s):", m.duration_s);
  row("Total input tokens:", m.total_input);
  row("Total generated tokens:", m.total_output);
  row("Request throughput (req/s):", m.request_throughput);
  if (!o.goodput.empty()) row("Request goodput (req/s):", m.request_goodput);
  row("Output token throughput (tok/s):", m.output_throughput);
  row("Peak output token throughput (tok/s):", m.max_output_tokens_per_s);
  row("Peak concurrent requests:", m.max_concurrent_requests);
  row("Total token throughput (tok/s):", m.total_token_throughput);
  for (const MetricRow& r : selected_metrics(split_commas(o.percentile_metrics), m)) {
    banner(r.title, '-');
    row(fmt::format("Mean {} (ms):", r.name), r.d->mean);
    row(fmt::format("Median {} (ms):", r.name), r.d->median);
    for (size_t i = 0; i < percentiles.size(); ++i)
      row(fmt::format("P{} {} (ms):", percentile_word(percentiles[i]), r.name), r.d->at[i]);
  }
  banner("", '=');
  if (!m.first_error.empty()) fmt::print("First error: {}\n", m.first_error);
}

ordered_json metrics_json(const ServeBenchOptions& o, const std::string& model, double rate,
                          const std::vector<double>& percentiles, const bench::ServeMetrics& m) {
  ordered_json j = {
      {"base_url", o.base_url},
      {"model", model},
      {"num_prompts", o.num_prompts},
      {"request_rate", std::isinf(rate) ? ordered_json("inf") : ordered_json(rate)},
      {"max_concurrency",
       o.max_concurrency > 0 ? ordered_json(o.max_concurrency) : ordered_json(nullptr)},
      {"endpoint", o.endpoint},
      {"dataset_name", o.dataset_name},
      {"input_len", o.input_len},
      {"output_len", o.output_len},
      {"seed", o.seed},
      {"keep_alive", !o.no_keep_alive},
      {"burstiness", 1.0},
      {"completed", m.completed},
      {"failed", m.failed},
      {"first_error", m.first_error.empty() ? ordered_json(nullptr) : ordered_json(m.first_error)},
      {"duration", m.duration_s},
      {"duration_s", m.duration_s},
      {"total_input_tokens", m.total_input},
      {"total_output_tokens", m.total_output},
      {"usage_reported", m.all_usage},
      {"request_throughput", m.request_throughput},
      {"request_goodput",
       o.goodput.empty() ? ordered_json(nullptr) : ordered_json(m.request_goodput)},
      {"output_throughput", m.output_throughput},
      {"max_output_tokens_per_s", m.max_output_tokens_per_s},
      {"max_concurrent_requests", m.max_concurrent_requests},
      {"total_token_throughput", m.total_token_throughput}};
  for (const auto& [name, d] : {std::pair{"ttft", &m.ttft}, std::pair{"tpot", &m.tpot},
                                std::pair{"itl", &m.itl}, std::pair{"e2el", &m.e2el}}) {
    j[fmt::format("mean_{}_ms", name)] = d->mean;
    j[fmt::format("median_{}_ms", name)] = d->median;
    j[fmt::format("std_{}_ms", name)] = d->std;
    j[fmt::format("p99_{}_ms", name)] = d->p99;
    for (size_t i = 0; i < percentiles.size(); ++i)
      j[fmt::format("p{}_{}_ms", percentile_word(percentiles[i]), name)] = d->at[i];
  }
  return j;
}

int run_serve_bench(const ServeBenchOptions& o) {
  double rate = 0;
  if (o.request_rate == "inf") {
    rate = INFINITY;
  } else {
    char* end = nullptr;
    rate = std::strtod(o.request_rate.c_str(), &end);
    if (end == o.request_rate.c_str() || *end != '\0' || !(rate > 0))
      return fail("--request-rate must be a positive number or inf, not " + o.request_rate);
  }
  if (o.vocab_low < 0 || o.vocab_high <= o.vocab_low)
    return fail("--vocab-low must be >= 0 and below --vocab-high");
  if (o.dataset_name == "sharegpt" && (o.dataset_path.empty() || o.tokenizer.empty()))
    return fail(
        "--dataset-name sharegpt needs --dataset-path FILE and --tokenizer DIR (to count "
        "the conversations' tokens)");
  if (o.endpoint == "/v1/chat/completions" && o.dataset_name == "random" && o.tokenizer.empty())
    return fail(
        "--endpoint /v1/chat/completions sends text: give --tokenizer DIR (random ids "
        "as text) or a --dataset-path");
  for (const std::string& k : split_commas(o.percentile_metrics))
    if (k != "ttft" && k != "tpot" && k != "itl" && k != "e2el")
      return fail("--percentile-metrics takes ttft, tpot, itl and e2el, not \"" + k + "\"");
  std::vector<double> percentiles;
  for (const std::string& p : split_commas(o.metric_percentiles)) {
    char* end = nullptr;
    const double v = std::strtod(p.c_str(), &end);
    if (end == p.c_str() || *end != '\0' || !(v > 0 && v < 100))
      return fail("--metric-percentiles takes numbers in (0, 100), not \"" + p + "\"");
    percentiles.push_back(v);
  }
  bench::Slo slo;
  for (const std::string& g : o.goodput) {
    const size_t colon = g.find(':');
    char* end = nullptr;
    const std::string name = g.substr(0, colon);
    const std::string value = colon == std::string::npos ? "" : g.substr(colon + 1);
    const double ms = std::strtod(value.c_str(), &end);
    if (colon == std::string::npos || end == value.c_str() || *end != '\0' || !(ms >= 0))
      return fail("--goodput takes NAME:MILLISECONDS (ttft, tpot or e2el), not \"" + g + "\"");
    if (name == "ttft")
      slo.ttft_ms = ms;
    else if (name == "tpot")
      slo.tpot_ms = ms;
    else if (name == "e2el")
      slo.e2el_ms = ms;
    else
      return fail("--goodput takes ttft, tpot and e2el, not \"" + name + "\"");
  }

  const Endpoint ep = parse_base_url(o.base_url);
  if (!httplib::Client(ep.origin).is_valid()) return fail("bad --base-url " + o.base_url);
  httplib::Headers headers;
  // The key comes from the environment, never the command line (it would show in `ps`).
  const char* key = std::getenv(o.api_key_env.c_str());
  if ((key == nullptr || *key == '\0') && o.api_key_env == "MLA_API_KEY")
    key = std::getenv("OPENAI_API_KEY");
  if (key != nullptr && *key != '\0')
    headers.emplace("Authorization", std::string("Bearer ") + key);

  std::string model = o.model;
  if (model.empty()) {
    std::string err;
    model = first_served_model(ep, headers, &err);
    if (model.empty()) return fail(err);
  }

  // Bodies up front, so building them costs nothing inside the timed run.
  const bool chat = o.endpoint == "/v1/chat/completions";
  std::optional<tok::LoadedTokenizer> tk;
  if (!o.tokenizer.empty()) {
    auto t = tok::load_tokenizer_dir(o.tokenizer);
    if (!t.ok()) return fail(t.status().message());
    tk = std::move(*t);
  }
  Result<std::vector<BenchPrompt>> prompts =
      o.dataset_name == "sharegpt"
          ? sharegpt_prompts(o.dataset_path, o.num_prompts, o.sharegpt_output_len, o.seed, *tk)
          : random_prompts(o.num_prompts, o.input_len, o.output_len, o.vocab_low, o.vocab_high,
                           o.seed, tk ? &*tk : nullptr);
  if (!prompts.ok()) return fail(prompts.status().message());
  if (int(prompts->size()) < o.num_prompts)
    fmt::print(stderr, "warning: {} holds {} usable conversations; sending those\n", o.dataset_path,
               prompts->size());
  std::vector<std::string> bodies;
  for (const BenchPrompt& p : *prompts) bodies.push_back(request_body(model, p, chat));
  const int num_prompts = int(bodies.size());
  const std::vector<double> arrivals = bench::arrival_offsets(num_prompts, rate, o.seed);
  const std::string path = ep.prefix + o.endpoint;

  // vLLM's readiness check: the first prompt once, before timing; a server that cannot answer
  // it would only produce N identical failures.
  fmt::print(stderr, "model {} at {}: checking with one request...\n", model, o.base_url);
  {
    auto cli = make_client(ep.origin, o.timeout_s);
    const RequestResult probe = send_stream(*cli, path, headers, bodies[0]);
    if (!probe.success) return fail("the test request failed: " + probe.error);
  }

  const int workers =
      o.max_concurrency > 0 ? std::min(o.max_concurrency, num_prompts) : num_prompts;
  fmt::print(stderr, "sending {} requests ({} in, {} out) at rate {}, at most {} in flight...\n",
             num_prompts, o.dataset_name == "sharegpt" ? "ShareGPT" : std::to_string(o.input_len),
             o.dataset_name == "sharegpt" ? "ShareGPT" : std::to_string(o.output_len),
             o.request_rate, workers);
  // C workers take requests in arrival order, each waiting for its arrival time: request i
  // starts at max(arrival_i, a worker free), which is what vLLM's FIFO semaphore of C gives.
  // The clock of a request starts when it is sent, so time spent waiting for a slot is not TTFT.
  std::vector<RequestResult> results(bodies.size());
  std::atomic<int> next{0}, done{0};
  std::mutex progress_mu;
  const Clock::time_point start = Clock::now();
  const auto worker = [&] {
    auto cli = make_client(ep.origin, o.timeout_s, !o.no_keep_alive);
    for (int i; (i = next.fetch_add(1)) < num_prompts;) {
      std::this_thread::sleep_until(start +
                                    std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(arrivals[size_t(i)])));
      const double sent = std::chrono::duration<double>(Clock::now() - start).count();
      results[size_t(i)] = send_stream(*cli, path, headers, bodies[size_t(i)]);
      results[size_t(i)].start = sent;
      if (results[size_t(i)].prompt_tokens < 0)  // no usage: the dataset's count
        results[size_t(i)].prompt_tokens = (*prompts)[size_t(i)].input_len;
      const int d = done.fetch_add(1) + 1;
      if (d * 10 / num_prompts != (d - 1) * 10 / num_prompts || d == num_prompts) {
        std::lock_guard<std::mutex> lock(progress_mu);
        fmt::print(stderr, "  {}/{} done\n", d, num_prompts);
      }
    }
  };
  std::vector<std::thread> pool;
  for (int w = 0; w < workers; ++w) pool.emplace_back(worker);
  for (std::thread& t : pool) t.join();
  const double duration = std::chrono::duration<double>(Clock::now() - start).count();

  const bench::ServeMetrics m =
      bench::compute_metrics(results, o.input_len, duration, percentiles, slo);
  if (!m.all_usage)
    fmt::print(stderr,
               "warning: some streams had no usage chunk; their output tokens are the "
               "number of text chunks\n");
  ordered_json result = metrics_json(o, model, rate, percentiles, m);
  if (o.json)
    fmt::print("{}\n", result.dump(2));
  else
    print_table(o, rate, percentiles, m);
  if (o.save_result) {
    // vLLM's result file: the figures and, per request, its lengths, TTFT, ITLs, text and error.
    ordered_json input_lens = ordered_json::array(), output_lens = ordered_json::array(),
                 ttfts = ordered_json::array(), itls = ordered_json::array(),
                 texts = ordered_json::array(), errors = ordered_json::array();
    for (const RequestResult& r : results) {
      input_lens.push_back(r.prompt_tokens);
      output_lens.push_back(r.success ? r.output_tokens : 0);
      ttfts.push_back(r.success ? r.ttft : 0.0);
      itls.push_back(r.itl);
      texts.push_back(r.text);
      errors.push_back(r.error);
    }
    result["date"] = date_string();
    result["input_lens"] = std::move(input_lens);
    result["output_lens"] = std::move(output_lens);
    result["ttfts"] = std::move(ttfts);
    result["itls"] = std::move(itls);
    result["generated_texts"] = std::move(texts);
    result["errors"] = std::move(errors);
    std::string name = o.result_filename;
    if (name.empty())
      name = fmt::format("mla-{}qps-{}-{}.json", o.request_rate, model_file_part(model),
                         result["date"].get<std::string>());
    const std::string path_out = o.result_dir.empty() ? name : o.result_dir + "/" + name;
    std::FILE* f = std::fopen(path_out.c_str(), "w");
    if (!f) return fail("cannot write " + path_out);
    const std::string text = result.dump(2) + "\n";
    const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    if (std::fclose(f) != 0 || !written) return fail("cannot write " + path_out);
    fmt::print(stderr, "results saved to {}\n", path_out);
  }
  return m.completed > 0 ? 0 : 1;
}

}  // namespace

// Called by register_bench (cmd_bench.cc) with the `bench` subcommand.
void register_bench_serve(CLI::App* bench, int* exit_code) {
  auto o = std::make_shared<ServeBenchOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "serve", "Load an OpenAI-compatible server with streaming /v1/completions (vLLM's method)");
  cmd->add_option("--base-url", o->base_url, "Server address (a trailing /v1 is ignored)")
      ->capture_default_str();
  cmd->add_option("--model", o->model, "Model name to send (default: GET /v1/models data[0].id)");
  cmd->add_option("--num-prompts", o->num_prompts, "Requests")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--request-rate", o->request_rate,
                  "Requests per second (Poisson arrivals), or inf: all at once")
      ->capture_default_str();
  cmd->add_option("--max-concurrency", o->max_concurrency, "Requests in flight at most (0: no cap)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--input-len", o->input_len, "Prompt tokens per request (random ids)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--output-len", o->output_len, "max_tokens per request (ignore_eos)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--vocab-low", o->vocab_low,
                  "Smallest prompt token id (default: past BOS/EOS/pad of DeepSeek vocabularies)")
      ->capture_default_str();
  cmd->add_option("--vocab-high", o->vocab_high, "Prompt token ids stay below this")
      ->capture_default_str();
  cmd->add_option("--api-key-env", o->api_key_env,
                  "Environment variable holding the bearer key (MLA_API_KEY falls back to "
                  "OPENAI_API_KEY)")
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of the prompts and the arrival times")
      ->capture_default_str();
  cmd->add_option("--timeout", o->timeout_s,
                  "Longest silence on a connection in seconds before a request fails")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--no-keep-alive", o->no_keep_alive,
                "A new connection per request (default: one kept-alive connection per worker)");
  cmd->add_flag("--json", o->json, "One JSON object on stdout");
  cmd->add_option("--endpoint", o->endpoint, "/v1/completions (default) or /v1/chat/completions")
      ->check(CLI::IsMember({"/v1/completions", "/v1/chat/completions"}));
  cmd->add_option("--dataset-name", o->dataset_name,
                  "random (default: --input-len random ids) or sharegpt (--dataset-path)")
      ->check(CLI::IsMember({"random", "sharegpt"}));
  cmd->add_option("--dataset-path", o->dataset_path,
                  "A ShareGPT-format JSON file (implies --dataset-name sharegpt)");
  cmd->add_option("--tokenizer", o->tokenizer,
                  "A model directory (or .gguf) whose tokenizer counts a dataset's tokens and "
                  "turns random ids into text for the chat endpoint");
  cmd->add_option("--sharegpt-output-len", o->sharegpt_output_len,
                  "Tokens asked per ShareGPT request (default: its reply's length)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--percentile-metrics", o->percentile_metrics,
                  "Metrics given with percentiles, of ttft,tpot,itl,e2el (default ttft,tpot,itl)");
  cmd->add_option("--metric-percentiles", o->metric_percentiles,
                  "Percentiles reported, comma-separated (default 99)");
  cmd->add_option("--goodput", o->goodput,
                  "SLOs in ms, e.g. ttft:500 tpot:50 e2el:5000: also report the requests per "
                  "second that met them all");
  cmd->add_flag("--save-result", o->save_result,
                "Write the figures and the per-request arrays to a JSON file");
  cmd->add_option("--result-dir", o->result_dir, "Folder of the result file (default: here)");
  cmd->add_option("--result-filename", o->result_filename,
                  "Result file name (default mla-RATEqps-MODEL-DATE.json)");
  cmd->callback([o, exit_code] {
    if (!o->dataset_path.empty()) o->dataset_name = "sharegpt";
    *exit_code = run_serve_bench(*o);
  });
}

}  // namespace mla::cli
