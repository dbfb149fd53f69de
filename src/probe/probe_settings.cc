#include "probe/probe_settings.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace mla::probe {
std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

Result<BaseUrl> parse_base_url(std::string_view url) {
  const auto bad = [&](std::string_view why) {
    return invalid_argument(fmt::format("--base-url \"{}\": {}", url, why));
  };
  BaseUrl b;
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) return bad("no scheme: write http://HOST:PORT");
  const std::string scheme = ascii_lower(url.substr(0, scheme_end));
  if (scheme != "http" && scheme != "https") return bad("the scheme must be http or https");
  std::string_view rest = url.substr(scheme_end + 3);
  if (rest.find_first_of("?#") != std::string_view::npos)
    return bad("a base URL has no query or fragment");
  const size_t slash = rest.find('/');
  const std::string_view authority = rest.substr(0, slash);
  std::string path(slash == std::string_view::npos ? "" : rest.substr(slash));
  if (authority.find('@') != std::string_view::npos)
    return bad("credentials in the URL are not sent; put the key in the environment");
  // [v6]:port, host:port or host.
  size_t colon = std::string_view::npos;
  if (!authority.empty() && authority[0] == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return bad("unclosed [ in the host");
    b.host = std::string(authority.substr(1, close - 1));
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') return bad("junk after the IPv6 address");
      colon = close + 1;
    }
  } else {
    colon = authority.rfind(':');
    b.host = std::string(authority.substr(0, colon));
  }
  if (b.host.empty()) return bad("no host");
  b.port = scheme == "https" ? 443 : 80;
  if (colon != std::string_view::npos) {
    const std::string_view p = authority.substr(colon + 1);
    if (p.empty() || p.size() > 5 || !std::all_of(p.begin(), p.end(), ::isdigit))
      return bad("the port must be a number");
    b.port = std::stoi(std::string(p));
    if (b.port < 1 || b.port > 65535) return bad("the port must be in 1..65535");
  }
  b.origin = scheme + "://" + std::string(authority);
  while (!path.empty() && path.back() == '/') path.pop_back();
  b.given_v1 = path.ends_with("/v1");
  if (b.given_v1) path.resize(path.size() - 3);
  b.doubled_v1 = path.ends_with("/v1");
  b.prefix = std::move(path);
  return b;
}

BaseUrl suggested_base(const BaseUrl& b) {
  BaseUrl s = b;
  if (b.doubled_v1)
    s.prefix.resize(s.prefix.size() - 3);
  else
    s.prefix.clear();
  s.doubled_v1 = s.prefix.ends_with("/v1");
  return s;
}

std::string KeySource::describe() const {
  if (!set) return env_name + " is unset";
  if (length == 0) return env_name + " is empty";
  return fmt::format("{} ({} characters)", env_name, length);
}

KeySource describe_key(std::string env_name, const char* value) {
  KeySource k;
  k.env_name = std::move(env_name);
  if (value == nullptr) return k;
  const std::string_view v(value);
  k.set = true;
  k.length = v.size();
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  k.edge_whitespace = !v.empty() && (space(v.front()) || space(v.back()));
  k.line_break = v.find_first_of("\r\n") != std::string_view::npos;
  k.bearer_prefix = ascii_lower(v.substr(0, 7)) == "bearer ";
  return k;
}

std::string excerpt(std::string_view text, size_t limit) {
  size_t cut = text.size();
  if (cut > limit) {
    cut = limit;
    // Back up over UTF-8 continuation bytes so no character is split.
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  }
  // Control bytes escaped: a body is quoted on one line, and a server's bytes never reach the
  // terminal as escape sequences.
  std::string out;
  for (const char c : text.substr(0, cut)) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (u < 0x20 || u == 0x7F)
      out += fmt::format("\\x{:02x}", u);
    else
      out += c;
  }
  if (cut < text.size()) out += fmt::format("... [{} more bytes]", text.size() - cut);
  return out;
}

std::string redact(std::string text, std::string_view secret) {
  if (secret.empty()) return text;
  for (size_t at = text.find(secret); at != std::string::npos; at = text.find(secret, at + 3))
    text.replace(at, secret.size(), "***");
  return text;
}

}  // namespace mla::probe
