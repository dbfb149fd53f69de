// The three settings `mla probe` checks as a client holds them: the base URL (parsed as
// OpenAI-style clients take it, with or without /v1) and the key (described by where it came from
// and its shape, never its characters), plus the cutting and masking of quoted bodies.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "mla/status.h"

namespace mla::probe {

struct BaseUrl {
  std::string origin;  // "http://host:port" for httplib's Client
  std::string prefix;  // path in front of /v1: "" or "/proxy" (one trailing /v1 removed)
  std::string host;
  int port = 0;
  bool doubled_v1 = false;  // the prefix still ends in /v1: the URL ended in /v1/v1
  bool given_v1 = false;    // the URL as given ended in /v1 (what OpenAI SDKs need)
  // Where a route lives: prefix + "/v1/..."; the URL as a client would print it.
  std::string url(std::string_view route) const { return origin + prefix + std::string(route); }
};

// "http://h:p", "http://h:p/", "http://h:p/v1", "https://h/proxy/v1"; the port defaults to the
// scheme's. Errors name the URL: a scheme other than http/https, no host, a bad port, a query.
Result<BaseUrl> parse_base_url(std::string_view url);

// Where to look when the base URL's path is wrong: one /v1 fewer when it is doubled, else the
// origin's root. The command asks its /v1/models; the diagnosis suggests it when that answers.
BaseUrl suggested_base(const BaseUrl& b);

// The key as far as it may be shown: where it came from and its shape, never its characters.
struct KeySource {
  std::string env_name;       // the variable that was read
  std::string fallback_from;  // non-empty: this variable was unset or empty, so env_name was read
  bool set = false;           // the variable exists (it may still be empty)
  size_t length = 0;          // bytes of the value
  bool edge_whitespace = false;  // starts or ends with a space, tab or newline (copied from a file)
  bool line_break = false;       // holds CR or LF: no header can carry it, so it is not sent
  bool bearer_prefix = false;    // already starts with "Bearer ": the header would say it twice
  bool sendable() const { return set && length > 0 && !line_break; }
  // "MLA_API_KEY (18 characters)", "MLA_API_KEY is unset", "MLA_API_KEY is empty".
  std::string describe() const;
};

// value: the variable's value, or nullptr when it is unset.
KeySource describe_key(std::string env_name, const char* value);

// s with ASCII letters in lower case (schemes, header names, error text).
std::string ascii_lower(std::string_view s);

// The first `limit` bytes (cut on a UTF-8 boundary) and "... [N more bytes]", with control bytes
// escaped (\n, \x1b) so that it prints on one line and safely.
std::string excerpt(std::string_view text, size_t limit);

// text with every occurrence of secret replaced by "***" (secret empty: unchanged).
std::string redact(std::string text, std::string_view secret);

}  // namespace mla::probe
