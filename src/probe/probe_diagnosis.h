// The HTTP-free half of `mla probe`: what one chat/completions answer (or its absence) says about
// the three settings a client has (base URL, key, model id; parsed in probe_settings.h). The
// command (tools/mla/cmd_probe.cc) does the requests; this decides, so every diagnosis is
// unit-tested (tests/unit/probe/probe_diagnosis_test.cc).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "mla/status.h"
#include "probe/probe_settings.h"

namespace mla::probe {

// One per outcome; the value is the exit code of `mla probe` (docs/SERVING.md lists them).
enum class Diagnosis : int {
  kOk = 0,
  kLocalError = 1,     // bad flags, a local model that cannot load: nothing about the endpoint
  kUnreachable = 2,    // connection refused, unknown host, timeout, connection cut
  kUnauthorized = 3,   // 401/403, or a key that cannot be sent
  kModelNotFound = 4,  // 404 for the model id
  kWrongPath = 5,      // 404 for the route: the base URL's path is off
  kDoubledV1 = 6,      // ... because it ends in /v1/v1
  kProxy = 7,          // something other than an OpenAI-compatible server answered
  kNoChoices = 8,      // 200 without a usable choices[0]
  kHttpError = 9,      // any other error status from the server itself (400, 500, 503 loading)
  kMismatch = 10,      // --compare: the endpoint's greedy tokens differ from the local model's
};

inline int exit_code(Diagnosis d) {
  return static_cast<int>(d);
}
const char* diagnosis_name(Diagnosis d);  // "ok", "unreachable", "unauthorized", ...

// What came back for the probe's request; status 0 when no response came.
struct Observed {
  int status = 0;
  std::string transport_error;  // httplib's error name when status is 0
  bool host_unknown = false;    // the host name does not resolve
  bool connect_failed = false;  // TCP connect failed: refused (nothing listening) or unreachable
  bool timed_out = false;       // connect or read timed out
  bool silent = false;          // ... the read: connected and sent, but no response came
  std::string server, via, content_type, location;  // response headers, empty when absent
  std::string body;
  double latency_ms = 0;
};

// GET {prefix}/v1/models, fetched by the command after a 404.
struct ModelList {
  bool fetched = false;  // a 200 whose body had data[].id
  int status = 0;
  std::vector<std::string> ids;
};

// data[].id of a /v1/models body; fetched false when the body is not that shape.
ModelList parse_model_list(int status, std::string_view body);

struct ProbeRequest {
  BaseUrl base;
  std::string route;  // "/v1/chat/completions" or "/v1/completions"
  std::string model;
  KeySource key;
};

struct Report {
  Diagnosis diagnosis = Diagnosis::kOk;
  std::string summary;               // one line: what happened
  std::vector<std::string> details;  // what it means and what to change
  std::string reply;                 // choices[0]'s text when ok
  std::string answered_by;           // "Server: nginx, Via: 1.1 squid" or ""
};

// models: GET {prefix}/v1/models after a 404 (else not fetched); root_models: GET /v1/models
// under suggested_base(), when that differs from the base (else not fetched). Bodies quoted in the
// report are cut to a readable length and have the key's value (key_value, may be empty) masked
// out.
Report diagnose(const ProbeRequest& req, const Observed& o, const ModelList& models,
                const ModelList& root_models, std::string_view key_value);

}  // namespace mla::probe
