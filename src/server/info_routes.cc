// The routes besides completions: GET /health, /v1/models, /metrics, /, and POST /tokenize,
// /detokenize (vLLM's shapes).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "server/chat_page.h"
#include "server/openai_prompt.h"
#include "server/openai_tools.h"
#include "server/process_usage.h"
#include "server/server_state.h"

namespace mla::server {
namespace {

using nlohmann::json;
using Handler =
    std::function<void(HttpServer::State&, const httplib::Request&, httplib::Response&)>;

httplib::Server::Handler route(const std::shared_ptr<HttpServer::State>& state, Handler h) {
  return [weak = std::weak_ptr<HttpServer::State>(state), h](const httplib::Request& q,
                                                             httplib::Response& r) {
    if (auto s = weak.lock()) {
      if (s->deadlines) s->deadlines->handling(q.remote_addr, q.remote_port);
      h(*s, q, r);
    }
  };
}

void health(HttpServer::State& st, const httplib::Request&, httplib::Response& res) {
  if (st.draining.load()) return send_json(res, 503, {{"status", "draining"}});
  if (!st.ready.load()) return send_json(res, 503, {{"status", "loading"}});
  send_json(res, 200, {{"status", "ok"}});
}

json model_object(const ServedModel& m) {
  static const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count();
  return {{"id", m.name},      {"object", "model"}, {"created", created},
          {"owned_by", "mla"}, {"root", m.name},    {"max_model_len", m.max_context}};
}

void models(HttpServer::State& st, const httplib::Request&, httplib::Response& res) {
  send_json(res, 200,
            {{"object", "list"}, {"data", json::array({model_object(st.backend.model)})}});
}

// GET /v1/models/{id}: the served model, or 404 model_not_found. An id may hold '/'
// ("deepseek-ai/DeepSeek-V3"): the rest of the path is the id.
void model_by_id(HttpServer::State& st, const httplib::Request& req, httplib::Response& res) {
  const std::string id = req.path.substr(std::string_view("/v1/models/").size());
  if (id != st.backend.model.name) return send_error(res, model_not_found(id));
  send_json(res, 200, model_object(st.backend.model));
}

void metrics(HttpServer::State& st, const httplib::Request&, httplib::Response& res) {
  sched::Engine& e = *st.backend.engine;
  const std::string& prefix = st.options.metrics_prefix;
  std::string text = sched::render_prometheus(e.metrics(), st.backend.model.name, prefix);
  const BlockPoolStats pool = e.cache_stats();
  const std::string label = fmt::format("{{model_name=\"{}\"}}", st.backend.model.name);
  auto gauge = [&](const char* name, const char* help, double v) {
    text += fmt::format("# HELP {0}{1} {2}\n# TYPE {0}{1} gauge\n{0}{1}{3} {4}\n", prefix, name,
                        help, label, v);
  };
  gauge("kv_cache_blocks_used", "KV pages referenced by running requests or pinned prefixes.",
        pool.pages_used);
  gauge("kv_cache_blocks_free", "KV pages holding nothing (on the free list).", pool.pages_free);
  gauge("kv_cache_blocks_cached_idle", "KV pages kept for prefix reuse, unreferenced.",
        pool.pages_cached_idle);
  gauge("kv_cache_blocks_total", "KV pages in the pool.", pool.num_blocks);
  if (st.deadlines) {
    gauge("http_connections_open", "Accepted connections (at the last watchdog look).",
          double(st.deadlines->open_connections()));
    gauge("http_connections_timed_out", "Connections closed for sending a request too slowly.",
          double(st.deadlines->timed_out()));
  }
  gauge("http_requests_in_flight", "Completion requests admitted and not yet answered.",
        double(st.in_flight.load()));
  // The standard process gauges, which load tests watch for leaks (fds, RSS).
  const ProcessUsage usage = process_usage();
  text += fmt::format(
      "# HELP process_open_fds Open file descriptors (sockets included).\n"
      "# TYPE process_open_fds gauge\nprocess_open_fds {}\n"
      "# HELP process_resident_memory_bytes Resident set size.\n"
      "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes {}\n",
      usage.open_fds, usage.resident_bytes);
  text += fmt::format(
      "# HELP {0}http_responses_total HTTP responses by status code.\n"
      "# TYPE {0}http_responses_total counter\n",
      prefix);
  std::lock_guard lock(st.counts_mu);
  for (const auto& [code, n] : st.responses_by_status)
    text += fmt::format("{}http_responses_total{{code=\"{}\"}} {}\n", prefix, code, n);
  res.status = 200;
  res.set_content(text, "text/plain; version=0.0.4");
}

void tokenize(HttpServer::State& st, const httplib::Request& req, httplib::Response& res) {
  json body;
  if (auto e = parse_json_object(req.body, &body)) return send_error(res, *e);
  const ServedModel& m = st.backend.model;
  if (body.contains("model") && !body["model"].is_null() &&
      (!body["model"].is_string() || body["model"].get<std::string>() != m.name))
    return send_error(
        res, model_not_found(body["model"].is_string() ? body["model"].get<std::string>()
                                                       : tok::json_excerpt(body["model"])));
  std::vector<int32_t> ids;
  if (body.contains("messages")) {
    ToolRequest tools;
    tok::ChatOptions opts;
    if (auto e = parse_tools(body, req.body, m, &tools, &opts)) return send_error(res, *e);
    if (auto e = chat_prompt(body, m, opts, &ids)) return send_error(res, *e);
  } else {
    std::vector<std::vector<int32_t>> prompts;
    std::vector<std::string> texts;
    if (auto e = completion_prompts(body, m, &prompts, &texts)) return send_error(res, *e);
    if (prompts.size() != 1) return send_error(res, bad_request("prompt", "one prompt at a time"));
    ids = std::move(prompts[0]);
  }
  send_json(res, 200, {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", m.max_context}});
}

void detokenize(HttpServer::State& st, const httplib::Request& req, httplib::Response& res) {
  json body;
  if (auto e = parse_json_object(req.body, &body)) return send_error(res, *e);
  const ServedModel& m = st.backend.model;
  if (!m.tokenizer) return send_error(res, bad_request("", "this model has no tokenizer"));
  if (!body.contains("tokens") || !body["tokens"].is_array())
    return send_error(res, bad_request("tokens", "tokens must be a list of token ids"));
  // Ids up to the model's vocabulary are valid; those past the tokenizer's (padded embedding
  // rows) have no text, as in generation.
  const int64_t known = m.tokenizer->tokenizer.id_limit(), limit = std::max(m.vocab, known);
  std::vector<int32_t> ids;
  for (const json& v : body["tokens"]) {
    if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0) ||
        v.get<uint64_t>() >= uint64_t(limit))
      return send_error(res, bad_request("tokens", fmt::format("invalid token id {}: ids are in "
                                                               "[0, {})",
                                                               tok::json_excerpt(v), limit)));
    if (v.get<int64_t>() < known) ids.push_back(int32_t(v.get<int64_t>()));
  }
  Result<std::string> text = m.tokenizer->tokenizer.decode(ids);
  if (!text.ok()) return send_error(res, bad_request("tokens", text.status().message()));
  send_json(res, 200, {{"prompt", *text}});
}

}  // namespace

void add_info_routes(const std::shared_ptr<HttpServer::State>& state) {
  httplib::Server& h = state->http;
  h.Get("/health", route(state, health));
  h.Get("/v1/models", route(state, models));
  h.Get(R"(/v1/models/(.+))", route(state, model_by_id));
  h.Get("/metrics", route(state, metrics));
  h.Post("/tokenize", route(state, tokenize));
  h.Post("/detokenize", route(state, detokenize));
  h.Get("/", [](const httplib::Request&, httplib::Response& res) {
    const std::string_view page = chat_page_html();
    res.set_content(page.data(), page.size(), "text/html; charset=utf-8");
  });
}

}  // namespace mla::server
