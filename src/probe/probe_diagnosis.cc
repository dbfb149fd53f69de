#include "probe/probe_diagnosis.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

namespace mla::probe {
namespace {

using nlohmann::json;

// How much of a body a diagnosis quotes: enough for an error page's message or a JSON object of
// a few fields, short enough that a whole HTML page does not bury the diagnosis.
constexpr size_t kBodyExcerpt = 600;

// The body as a JSON object, or null when it is not one (HTML, text, empty, an array).
json json_object(std::string_view body) {
  json j = json::parse(body, nullptr, false);
  return j.is_object() ? j : json();
}

// error.message (wrapped, OpenAI's form), a flat "message" (old vLLM) or FastAPI's "detail".
std::string raw_error_message(const json& j) {
  if (!j.is_object()) return {};
  if (auto e = j.find("error"); e != j.end()) {
    if (e->is_string()) return e->get<std::string>();
    if (e->is_object())
      if (auto m = e->find("message"); m != e->end() && m->is_string())
        return m->get<std::string>();
  }
  for (const char* k : {"message", "detail"})
    if (auto m = j.find(k); m != j.end() && m->is_string()) return m->get<std::string>();
  return {};
}

// The same, cut and escaped for printing.
std::string error_message(const json& j) {
  const std::string m = raw_error_message(j);
  return m.empty() ? m : excerpt(m, 300);
}

std::string error_code(const json& j) {
  if (!j.is_object()) return {};
  auto e = j.find("error");
  if (e == j.end() || !e->is_object()) return {};
  auto c = e->find("code");
  return c != e->end() && c->is_string() ? c->get<std::string>() : std::string();
}

// <title> of an HTML page: what a proxy's error page says in one line.
std::string html_title(std::string_view body) {
  const std::string l = ascii_lower(body.substr(0, 8192));
  const size_t a = l.find("<title>");
  if (a == std::string::npos) return {};
  const size_t b = l.find("</title>", a);
  if (b == std::string::npos) return {};
  return std::string(body.substr(a + 7, b - a - 7));
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ", ") + excerpt(s, 200);
  return out;
}

// A served id the user probably meant: the same up to case, or one of the two is the other
// with an organisation in front ("deepseek-ai/DeepSeek-V3" against "DeepSeek-V3").
std::string near_miss(const std::string& model, const std::vector<std::string>& ids) {
  const std::string m = ascii_lower(model);
  for (const std::string& id : ids) {
    const std::string i = ascii_lower(id);
    if (i == m || i.ends_with("/" + m) || m.ends_with("/" + i)) return excerpt(id, 200);
  }
  return {};
}

Report unreachable(const ProbeRequest& req, const Observed& o) {
  Report r;
  r.diagnosis = Diagnosis::kUnreachable;
  const std::string where = fmt::format("{}:{}", req.base.host, req.base.port);
  if (o.host_unknown) {
    r.summary = fmt::format("the host name \"{}\" does not resolve", req.base.host);
    r.details.push_back("check its spelling, or use the server's IP address");
  } else if (o.connect_failed) {
    r.summary = fmt::format("nothing is listening at {} (connection refused)", where);
    r.details.push_back(
        "start the server, or fix the port: `mla serve` prints the address it listens on "
        "(\"listening on http://HOST:PORT\")");
    r.details.push_back(
        "a server bound to 127.0.0.1 cannot be reached from another machine (`mla serve --host "
        "0.0.0.0`)");
  } else if (o.silent) {
    r.summary = fmt::format(
        "{} accepted the connection and the request but sent no response before the timeout",
        where);
    r.details.push_back(
        "a process listens there but does not answer: a stuck or stopped server, one busy with a "
        "long queue, or a proxy holding the request; raise --timeout if it is only slow");
  } else if (o.timed_out) {
    r.summary = fmt::format("no connection to {} before the timeout", where);
    r.details.push_back("a firewall may drop the packets, or the host is down");
  } else {
    r.summary =
        fmt::format("the connection to {} failed before a response ({})", where, o.transport_error);
    r.details.push_back(
        "the server closed the connection: it may have crashed, or it speaks TLS where the URL "
        "says http (or the other way round)");
  }
  return r;
}

Report unauthorized(const ProbeRequest& req, const Observed& o, const json& j,
                    std::string_view key_value) {
  Report r;
  r.diagnosis = Diagnosis::kUnauthorized;
  const KeySource& k = req.key;
  if (o.status == 0) {
    r.summary = fmt::format("the key in {} cannot be sent: it holds a line break", k.env_name);
  } else {
    const std::string msg = redact(error_message(j), key_value);
    r.summary = fmt::format("HTTP {} from {}{}", o.status, req.base.url(req.route),
                            msg.empty() ? "" : ": " + msg);
  }
  if (!k.fallback_from.empty())
    r.details.push_back(
        fmt::format("{} is unset or empty, so {} was read instead", k.fallback_from, k.env_name));
  if (!k.set || k.length == 0) {
    r.details.push_back(
        fmt::format("{}, so no Authorization header was sent: export {}=KEY (or name another "
                    "variable with --api-key-env)",
                    k.describe(), k.env_name));
  } else if (o.status != 0) {
    r.details.push_back(fmt::format(
        "sent \"Authorization: Bearer\" with the value of {} ({} characters; not shown)",
        k.env_name, k.length));
    r.details.push_back(o.status == 403
                            ? "403: the key was read but is not allowed this model or route"
                            : "the server does not accept it: compare its length with the key the "
                              "server was started with (its --api-key or --api-key-file)");
  }
  if (k.line_break)
    r.details.push_back(
        "the value holds a line break (read from a file with its newline?): strip it");
  else if (k.edge_whitespace)
    r.details.push_back("the value starts or ends with whitespace: strip it");
  if (k.bearer_prefix)
    r.details.push_back(
        "the value starts with \"Bearer \": store only the key, the client adds the word");
  if (o.status != 0 && j.is_null())
    r.details.push_back("the answer is not JSON: a proxy in front may want its own credentials");
  return r;
}

Report not_found(const ProbeRequest& req, const json& j, const ModelList& models,
                 const ModelList& root_models) {
  Report r;
  const std::string url = req.base.url(req.route);
  const std::string msg = error_message(j);
  const bool listed = models.fetched && std::find(models.ids.begin(), models.ids.end(),
                                                  req.model) != models.ids.end();
  const bool says_model =
      error_code(j) == "model_not_found" || (ascii_lower(msg).find("model") != std::string::npos &&
                                             msg.find(req.model) != std::string::npos);
  if (!listed && (says_model || models.fetched)) {
    r.diagnosis = Diagnosis::kModelNotFound;
    r.summary = fmt::format("HTTP 404: the endpoint does not serve the model \"{}\"{}", req.model,
                            msg.empty() ? "" : " (" + msg + ")");
    if (models.fetched) {
      r.details.push_back(fmt::format("served model ids (GET {}): {}", req.base.url("/v1/models"),
                                      models.ids.empty() ? "none" : join(models.ids)));
      if (const std::string m = near_miss(req.model, models.ids); !m.empty())
        r.details.push_back(fmt::format("did you mean --model {}?", m));
    } else {
      r.details.push_back(fmt::format("GET {} did not list the ids (HTTP {})",
                                      req.base.url("/v1/models"), models.status));
    }
    return r;
  }
  const std::string fixed = suggested_base(req.base).url("/v1");
  if (req.base.doubled_v1) {
    r.diagnosis = Diagnosis::kDoubledV1;
    r.summary = fmt::format("HTTP 404 for {}: the base URL ends in /v1/v1", url);
    r.details.push_back(
        fmt::format("give --base-url {} (the /v1 at the end is optional); clients add /v1/... to a "
                    "base URL that already ends in /v1",
                    fixed));
    if (root_models.fetched)
      r.details.push_back(
          fmt::format("GET {}/models answers, serving: {}", fixed, join(root_models.ids)));
    return r;
  }
  r.diagnosis = Diagnosis::kWrongPath;
  r.summary = fmt::format("HTTP 404: {} is not a route of the server{}", url,
                          msg.empty() ? "" : " (" + msg + ")");
  r.details.push_back(fmt::format(
      "the base URL is the part before {}: http://HOST:PORT or http://HOST:PORT/v1", req.route));
  if (listed)
    r.details.push_back(
        fmt::format("the server lists \"{}\" but has no {}{}", req.model, req.route,
                    req.route == "/v1/chat/completions" ? ": try --completions" : ""));
  else if (root_models.fetched)
    r.details.push_back(fmt::format("{}/models answers (serving {}): try --base-url {}", fixed,
                                    join(root_models.ids), fixed));
  else if (!models.fetched)
    r.details.push_back(
        fmt::format("GET {} fails too (HTTP {}): is this an OpenAI-compatible server?",
                    req.base.url("/v1/models"), models.status));
  return r;
}

Report from_proxy(const ProbeRequest& req, const Observed& o, const std::string& by,
                  std::string_view key_value) {
  Report r;
  r.diagnosis = Diagnosis::kProxy;
  r.summary = fmt::format("HTTP {} from {} is not an OpenAI-compatible server's answer{}", o.status,
                          req.base.url(req.route), by.empty() ? "" : "; answered by " + by);
  const std::string title = html_title(o.body);
  r.details.push_back(fmt::format(
      "body: {}, {} bytes{}", o.content_type.empty() ? "no Content-Type" : o.content_type,
      o.body.size(), title.empty() ? "" : fmt::format(", page title \"{}\"", title)));
  if (o.status == 502 || o.status == 503 || o.status == 504)
    r.details.push_back(
        "a proxy or gateway answered: the server behind it is down, still starting, or too slow; "
        "check it, or point --base-url at it directly");
  else
    r.details.push_back(
        "something in front of the server (a proxy, a login page, another web server on that port) "
        "answered; point --base-url at the model server");
  if (!o.body.empty())
    r.details.push_back("raw body: " + excerpt(redact(o.body, key_value), kBodyExcerpt));
  return r;
}

}  // namespace

const char* diagnosis_name(Diagnosis d) {
  switch (d) {
    case Diagnosis::kOk:
      return "ok";
    case Diagnosis::kLocalError:
      return "local_error";
    case Diagnosis::kUnreachable:
      return "unreachable";
    case Diagnosis::kUnauthorized:
      return "unauthorized";
    case Diagnosis::kModelNotFound:
      return "model_not_found";
    case Diagnosis::kWrongPath:
      return "wrong_path";
    case Diagnosis::kDoubledV1:
      return "doubled_v1";
    case Diagnosis::kProxy:
      return "proxy";
    case Diagnosis::kNoChoices:
      return "no_choices";
    case Diagnosis::kHttpError:
      return "http_error";
    case Diagnosis::kMismatch:
      return "mismatch";
  }
  return "unknown";
}

ModelList parse_model_list(int status, std::string_view body) {
  ModelList m;
  m.status = status;
  const json j = json_object(body);
  if (status != 200 || !j.contains("data") || !j["data"].is_array()) return m;
  for (const json& e : j["data"])
    if (e.is_object() && e.contains("id") && e["id"].is_string())
      m.ids.push_back(e["id"].get<std::string>());
  m.fetched = true;
  return m;
}

Report diagnose(const ProbeRequest& req, const Observed& o, const ModelList& models,
                const ModelList& root_models, std::string_view key_value) {
  const json j = json_object(o.body);
  // What answered, from the headers a proxy adds; the servers themselves often send none.
  std::string by;
  if (!o.server.empty()) by = "Server: " + excerpt(o.server, 200);
  if (!o.via.empty()) by += (by.empty() ? "" : ", ") + std::string("Via: ") + excerpt(o.via, 200);
  Report r;
  if (req.key.line_break) {
    r = unauthorized(req, Observed{}, j, key_value);
  } else if (o.status == 0) {
    r = unreachable(req, o);
  } else if (o.status == 401 || o.status == 403) {
    r = unauthorized(req, o, j, key_value);
  } else if (o.status == 404) {
    r = not_found(req, j, models, root_models);
  } else if (o.status >= 300 && o.status < 400) {
    r.diagnosis = Diagnosis::kWrongPath;
    r.summary = fmt::format("HTTP {} from {}: a redirect{}", o.status, req.base.url(req.route),
                            o.location.empty() ? "" : " to " + excerpt(o.location, 300));
    r.details.push_back(
        "clients do not follow a redirect of a POST: give the base URL it points to (https instead "
        "of http, another host or path)");
  } else if (j.is_null() || o.status == 502 || o.status == 504) {
    // Our server and the engines it is compared with answer JSON on every route; 502 and 504
    // are a gateway's words about the server behind it.
    r = from_proxy(req, o, by, key_value);
  } else if (o.status < 200 || o.status >= 300) {
    r.diagnosis = Diagnosis::kHttpError;
    const std::string msg = redact(error_message(j), key_value);
    r.summary = fmt::format("HTTP {} from {}: {}", o.status, req.base.url(req.route),
                            msg.empty() ? excerpt(redact(o.body, key_value), 200) : msg);
    if (o.status == 503)
      r.details.push_back(
          "the server is up but not serving yet: the model is loading, the server is shutting "
          "down, or it is overloaded; retry");
    else if (o.status == 429)
      r.details.push_back("the server's queue is full or a rate limit applies; retry later");
    else if (o.status >= 400 && o.status < 500)
      r.details.push_back("the server refused this request: the message names the field");
  } else {
    const json* c0 = nullptr;
    if (auto c = j.find("choices");
        c != j.end() && c->is_array() && !c->empty() && (*c)[0].is_object())
      c0 = &(*c)[0];
    const json* text = nullptr;
    if (c0 && c0->contains("message") && (*c0)["message"].is_object()) {
      const json& m = (*c0)["message"];
      for (const char* k : {"content", "reasoning_content"})
        if (m.contains(k) && m[k].is_string()) {
          text = &m[k];
          break;
        }
      if (!text && m.contains("content")) text = &m["content"];  // null content: still a reply
    } else if (c0 && c0->contains("text")) {
      text = &(*c0)["text"];
    }
    if (!text) {
      r.diagnosis = Diagnosis::kNoChoices;
      r.summary = fmt::format("HTTP {} from {} but the body has no usable choices[0]", o.status,
                              req.base.url(req.route));
      if (const std::string msg = error_message(j); !msg.empty())
        r.details.push_back(
            fmt::format("it holds an error instead: {} (a gateway may turn errors into 200s)",
                        redact(msg, key_value)));
      r.details.push_back("raw body: " + excerpt(redact(o.body, key_value), kBodyExcerpt));
    } else {
      r.diagnosis = Diagnosis::kOk;
      r.reply = text->is_string() ? text->get<std::string>() : std::string();
      r.summary = fmt::format("HTTP {} from {} in {:.1f} ms", o.status, req.base.url(req.route),
                              o.latency_ms);
      // OpenAI SDKs append the route ("/chat/completions") to base_url as given: without /v1
      // they would ask {origin}/chat/completions, which this probe never tried.
      if (!req.base.given_v1)
        r.details.push_back(
            fmt::format("warning: this worked because the probe adds /v1; give the openai SDK "
                        "base_url=\"{}\" (without /v1 it would post to {})",
                        req.base.origin + req.base.prefix + "/v1",
                        req.base.origin + req.base.prefix + req.route.substr(3)));
    }
  }
  r.answered_by = by;
  if (!by.empty() && r.diagnosis != Diagnosis::kOk && r.diagnosis != Diagnosis::kUnreachable &&
      r.diagnosis != Diagnosis::kProxy)
    r.details.push_back("answered by " + by);
  // Whatever a server or proxy echoed (an Authorization header, say) is never printed.
  r.summary = redact(r.summary, key_value);
  for (std::string& d : r.details) d = redact(d, key_value);
  return r;
}

}  // namespace mla::probe
