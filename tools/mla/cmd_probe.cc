// `mla probe`: checks an OpenAI-compatible endpoint (ours or another) from the three settings a
// client has, base URL, key and model id: one greedy chat (or completions) request, then the
// reply and its latency, or a diagnosis of what is wrong and what to change, with an exit code
// per diagnosis (probe/probe_diagnosis.h). On a 404 it asks GET /v1/models to tell an unknown
// model from a wrong path. --compare then checks the endpoint's greedy tokens against the local
// runtime on the same model (cmd_probe_compare.cc). The key is never printed.
#include <fmt/format.h>
#include <httplib.h>
#include <netdb.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "probe_local.h"

namespace mla::cli {
namespace {

using nlohmann::ordered_json;
using probe::Diagnosis;
using probe::Observed;

// Greedy prompts of --compare when no --prompt is given: prose, code and a chat-style question,
// so that more than one region of the vocabulary is exercised.
const std::vector<std::string> kComparePrompts = {"The capital of France is",
                                                  "def fibonacci(n):", "Hello! Who are you?"};

struct ProbeOptions {
  std::string base_url, model, api_key_env = "MLA_API_KEY";
  std::string prompt = "Say hello in one short sentence.";
  int max_tokens = 16;
  double timeout_s = 60;
  bool completions = false, json = false, compare = false;
  bool prompt_given = false;  // --compare then sends this prompt instead of kComparePrompts
  std::string local_model;
};

// Every request of the probe: its headers, its clock and what came back, transport errors
// included (httplib's Client; no HTTP of our own).
class Prober {
 public:
  Prober(const probe::BaseUrl& base, double timeout_s, const std::string& key)
      : base_(base), cli_(base.origin), timeout_s_(timeout_s) {
    const auto ms = [](double s) { return std::chrono::milliseconds(int64_t(s * 1000)); };
    cli_.set_connection_timeout(ms(timeout_s < 10 ? timeout_s : 10));
    cli_.set_read_timeout(ms(timeout_s));
    cli_.set_write_timeout(ms(timeout_s));
    if (!key.empty()) headers_.emplace("Authorization", "Bearer " + key);
  }
  bool valid() const { return cli_.is_valid(); }

  // body empty: GET, else POST of JSON.
  Observed send(const std::string& route, const std::string& body) {
    Observed o;
    const auto t0 = std::chrono::steady_clock::now();
    const std::string path = base_.prefix + route;
    httplib::Result res = body.empty() ? cli_.Get(path, headers_)
                                       : cli_.Post(path, headers_, body, "application/json");
    o.latency_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!res) {
      const httplib::Error e = res.error();
      o.transport_error = httplib::to_string(e);
      o.host_unknown = e == httplib::Error::Connection && !resolves(base_.host);
      o.connect_failed = e == httplib::Error::Connection && !o.host_unknown;
      // httplib reports a read timeout as a failed read (the connection and the request went
      // through: a listener that never answers); the clock tells it from a connection cut.
      o.silent = e == httplib::Error::Read && o.latency_ms >= timeout_s_ * 1000 * 0.95;
      o.timed_out = e == httplib::Error::ConnectionTimeout || o.silent;
      return o;
    }
    o.status = res->status;
    o.server = res->get_header_value("Server");
    o.via = res->get_header_value("Via");
    o.content_type = res->get_header_value("Content-Type");
    o.location = res->get_header_value("Location");
    o.body = std::move(res->body);
    return o;
  }

 private:
  static bool resolves(const std::string& host) {
    addrinfo* ai = nullptr;
    const int rc = getaddrinfo(host.c_str(), nullptr, nullptr, &ai);
    if (ai) freeaddrinfo(ai);
    return rc == 0;
  }

  probe::BaseUrl base_;
  httplib::Client cli_;
  httplib::Headers headers_;
  double timeout_s_;
};

std::string quoted(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

ordered_json compare_json(const std::vector<PromptComparison>& results) {
  ordered_json a = ordered_json::array();
  for (const PromptComparison& p : results) {
    ordered_json j = {{"prompt", p.prompt}, {"prompt_tokens", p.prompt_tokens}};
    if (!p.error.empty()) {
      j["error"] = p.error;
    } else {
      const probe::Agreement& g = p.agreement;
      j["agreed"] = g.agreed;
      j["total"] = g.total;
      j["full"] = g.full;
      j["method"] = g.method;
      j["first_divergence"] = g.full ? ordered_json(nullptr) : ordered_json(g.agreed);
      j["endpoint_token"] = g.endpoint_token;
      j["local_token"] = g.local_token;
      j["endpoint_gap_nats"] =
          std::isnan(g.endpoint_gap) ? ordered_json(nullptr) : ordered_json(g.endpoint_gap);
      j["local_gap_nats"] =
          std::isnan(g.local_gap) ? ordered_json(nullptr) : ordered_json(g.local_gap);
      j["endpoint_finish_reason"] = p.endpoint_finish;
    }
    a.push_back(std::move(j));
  }
  return a;
}

// The outcome of --compare: mismatch when any prompt differs, http_error when the endpoint could
// not answer one (its status is in the message).
Diagnosis print_compare(const ProbeOptions& o, const std::vector<PromptComparison>& results) {
  size_t agreed = 0, total = 0;
  Diagnosis d = Diagnosis::kOk;
  if (!o.json)
    fmt::print("compare with the local model {} (greedy, {} tokens, ignore_eos):\n", o.local_model,
               o.max_tokens);
  for (const PromptComparison& p : results) {
    if (!p.error.empty()) {
      d = Diagnosis::kHttpError;
      if (!o.json) fmt::print("  {}: the endpoint failed: {}\n", quoted(p.prompt), p.error);
      continue;
    }
    const probe::Agreement& g = p.agreement;
    agreed += g.agreed;
    total += g.total;
    if (!g.full && d == Diagnosis::kOk) d = Diagnosis::kMismatch;
    if (o.json) continue;
    fmt::print("  {}: {}/{} tokens agree (by {})", quoted(p.prompt), g.agreed, g.total, g.method);
    if (!g.full)
      fmt::print("; first divergence at token {}: endpoint {}, local {}", g.agreed,
                 g.endpoint_token.empty() ? "(ended)" : quoted(g.endpoint_token),
                 g.local_token.empty() ? "(ended)" : quoted(g.local_token));
    if (!g.full && p.endpoint_finish == "stop")
      fmt::print(" (the endpoint stopped: it may not honour ignore_eos)");
    if (!g.full && (!std::isnan(g.endpoint_gap) || !std::isnan(g.local_gap))) {
      const auto nats = [](double v) {
        return std::isnan(v) ? std::string("?") : fmt::format("{:.3f}", v);
      };
      const bool near = (std::isnan(g.endpoint_gap) || g.endpoint_gap <= probe::kNearTieNats) &&
                        (std::isnan(g.local_gap) || g.local_gap <= probe::kNearTieNats);
      fmt::print("; gap there: endpoint {} nats, local {} nats: {}", nats(g.endpoint_gap),
                 nats(g.local_gap),
                 near ? "a near-tie, so numerics differ (KV cache dtype, BF16 products), likely "
                        "the same model"
                      : "one side is sure of its token: another model or other weights");
    }
    fmt::print("\n");
  }
  if (!o.json)
    fmt::print("{}: {}/{} tokens agree over {} prompts\n", probe::diagnosis_name(d), agreed, total,
               results.size());
  return d;
}

int run_probe(const ProbeOptions& o) {
  const auto local_error = [&](const std::string& msg) {
    fmt::print(stderr, "mla probe: {}\n", msg);
    return probe::exit_code(Diagnosis::kLocalError);
  };
  Result<probe::BaseUrl> base = probe::parse_base_url(o.base_url);
  if (!base.ok()) return local_error(base.status().message());

  // The key comes from the environment, never the command line (it would show in `ps`); like
  // `mla bench serve` and the openai client, OPENAI_API_KEY stands in for an unset MLA_API_KEY.
  std::string env = o.api_key_env, fallback_from;
  const char* value = std::getenv(env.c_str());
  if ((value == nullptr || *value == '\0') && env == "MLA_API_KEY" &&
      std::getenv("OPENAI_API_KEY") != nullptr) {
    fallback_from = env;
    env = "OPENAI_API_KEY";
    value = std::getenv(env.c_str());
  }
  probe::ProbeRequest req;
  req.base = *base;
  req.model = o.model;
  req.route = o.completions ? "/v1/completions" : "/v1/chat/completions";
  req.key = probe::describe_key(env, value);
  req.key.fallback_from = fallback_from;
  const std::string key = req.key.sendable() ? std::string(value) : std::string();

  Prober prober(*base, o.timeout_s, key);
  if (!prober.valid()) return local_error("cannot use --base-url " + o.base_url);
  if (!o.json)
    fmt::print("POST {} (model {}, key: {})\n", base->url(req.route), quoted(o.model),
               req.key.describe());

  Observed obs;
  if (!req.key.line_break) {
    ordered_json body = {{"model", o.model}};
    if (o.completions)
      body["prompt"] = o.prompt;
    else
      body["messages"] = {{{"role", "user"}, {"content", o.prompt}}};
    body["max_tokens"] = o.max_tokens;
    body["temperature"] = 0;
    obs = prober.send(req.route, body.dump());
  }
  // A 404 is either the model or the path: the list of models tells which.
  probe::ModelList models, root_models;
  if (obs.status == 404) {
    const Observed m = prober.send("/v1/models", "");
    models = probe::parse_model_list(m.status, m.body);
    if (const probe::BaseUrl root = probe::suggested_base(*base); root.prefix != base->prefix) {
      const Observed r = Prober(root, o.timeout_s, key).send("/v1/models", "");
      root_models = probe::parse_model_list(r.status, r.body);
    }
  }
  const probe::Report rep = probe::diagnose(req, obs, models, root_models, key);

  Diagnosis d = rep.diagnosis;
  ordered_json compare;
  if (o.compare && d == Diagnosis::kOk) {
    CompareSetup s;
    s.model_dir = o.local_model;
    s.model_id = o.model;
    s.max_tokens = o.max_tokens;
    s.prompts = o.prompt_given ? std::vector<std::string>{o.prompt} : kComparePrompts;
    if (!o.json) {
      fmt::print("ok: {}\nreply: {}\n", rep.summary, quoted(rep.reply));
      std::fflush(stdout);
    }
    Result<std::vector<PromptComparison>> results =
        compare_with_local(s, [&](const std::string& route, const std::string& body) {
          Observed r = prober.send(route, body);
          r.body = probe::redact(std::move(r.body), key);  // quoted when it fails
          return r;
        });
    if (!results.ok()) return local_error("--compare: " + results.status().message());
    d = print_compare(o, *results);
    compare = compare_json(*results);
  }

  if (o.json) {
    ordered_json j = {
        {"ok", d == Diagnosis::kOk},
        {"diagnosis", probe::diagnosis_name(d)},
        {"exit_code", probe::exit_code(d)},
        {"status", obs.status ? ordered_json(obs.status) : ordered_json(nullptr)},
        {"latency_ms", obs.status ? ordered_json(obs.latency_ms) : ordered_json(nullptr)},
        {"reply",
         rep.diagnosis == Diagnosis::kOk ? ordered_json(rep.reply) : ordered_json(nullptr)},
        {"summary", rep.summary},
        {"details", rep.details},
        {"answered_by", rep.answered_by},
        {"url", base->url(req.route)},
        {"model", o.model},
        {"key", {{"env", req.key.env_name}, {"set", req.key.set}, {"length", req.key.length}}}};
    if (o.compare) j["compare"] = compare;
    fmt::print("{}\n", j.dump(2, ' ', false, ordered_json::error_handler_t::replace));
  } else if (!o.compare || rep.diagnosis != Diagnosis::kOk) {
    if (rep.diagnosis == Diagnosis::kOk) {
      fmt::print("ok: {}\nreply: {}\n", rep.summary, quoted(rep.reply));
      for (const std::string& line : rep.details) fmt::print("  - {}\n", line);  // warnings
    } else {
      fmt::print("{}: {}\n", probe::diagnosis_name(rep.diagnosis), rep.summary);
      for (const std::string& line : rep.details) fmt::print("  - {}\n", line);
      if (o.compare) fmt::print("  (--compare was not run: the endpoint has to answer first)\n");
    }
  }
  return probe::exit_code(d);
}

void register_probe(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<ProbeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "probe",
      "Check an OpenAI-compatible endpoint from its base URL, key and model id: print the reply "
      "and latency, or diagnose what is wrong. Exit codes: 0 ok, 1 local error, 2 unreachable, 3 "
      "unauthorized, 4 model not found, 5 wrong path, 6 doubled /v1, 7 proxy answered, 8 no "
      "choices, 9 other HTTP error, 10 --compare mismatch");
  cmd->add_option("--base-url", o->base_url,
                  "Endpoint, e.g. http://127.0.0.1:8080 (a trailing /v1 is optional)")
      ->required();
  cmd->add_option("--model", o->model, "Model id to send, as the endpoint names it")->required();
  cmd->add_option("--api-key-env", o->api_key_env,
                  "Environment variable holding the key (never printed; MLA_API_KEY falls back to "
                  "OPENAI_API_KEY)")
      ->capture_default_str();
  CLI::Option* prompt =
      cmd->add_option("--prompt", o->prompt, "User message (with --compare: the only prompt)")
          ->capture_default_str();
  cmd->add_option("--max-tokens", o->max_tokens, "max_tokens of every request")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--timeout", o->timeout_s, "Seconds to wait for an answer")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--completions", o->completions,
                "Probe /v1/completions instead of /v1/chat/completions");
  CLI::Option* compare = cmd->add_flag("--compare", o->compare,
                                       "Also send greedy prompts to /v1/completions and compare "
                                       "the tokens with the local model given by -m");
  CLI::Option* local = cmd->add_option("-m,--local-model", o->local_model,
                                       "Local model directory for --compare (the same model)");
  compare->needs(local);
  local->needs(compare);
  cmd->add_flag("--json", o->json,
                "One JSON object: ok, diagnosis, exit_code, status, latency_ms, reply, summary, "
                "details, compare");
  cmd->callback([o, prompt, exit_code] {
    o->prompt_given = prompt->count() > 0;
    *exit_code = run_probe(*o);
  });
}

}  // namespace

MLA_REGISTER_COMMAND("probe", register_probe);

}  // namespace mla::cli
