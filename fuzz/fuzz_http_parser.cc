// F7 (docs/RELIABILITY.md §Checklist): raw bytes → cpp-httplib's HTTP/1.1 request parsing, the
// library `mla serve` uses, behind the server's own pre-routing checks (check_request,
// src/server/request_checks.h: header limits, routes and methods, body framing and size, encoding,
// API key) with a small body cap. The bytes reach Server::process_request (the per-connection entry
// point) through an in-memory Stream that hands them out in pseudo-random pieces, so requests split
// at every point are parsed; up to 5 pipelined requests per input, each first through the
// connection loop's head limits (scan_request_head, src/server/http_connection.h: a head over them
// is answered there and ends the connection), and none after a response with Connection: close
// (a framing error or refused body ends the connection). The first input word picks the
// pieces, whether an API key is required (bit 0) and whether /metrics needs it too (bit 1).
// Invariants: a handler never sees a body over the cap or other than its Content-Length (a
// compressed body would be inflated by the library: it must be refused first), nor a protected
// route without the key; every response is a well-formed HTTP/1.1 status line; nothing is read past
// the input.
#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <string>

#include "fuzz_common.h"
#include "server/http_connection.h"
#include "server/request_checks.h"
#include "server/server_state.h"

namespace {

constexpr size_t kBodyCap = 1024;  // small, so that the fuzzer reaches the 413 path

class MemoryStream : public httplib::Stream {
 public:
  MemoryStream(const char* data, size_t size, uint32_t seed)
      : data_(data), size_(size), rng_(seed) {}

  bool is_readable() const override { return pos_ < size_; }
  bool is_writable() const override { return true; }
  ssize_t read(char* ptr, size_t size) override {
    if (pos_ >= size_ || size == 0) return 0;
    rng_ = rng_ * 1103515245u + 12345u;
    const size_t piece = std::min({size, size_ - pos_, size_t(1 + (rng_ >> 16) % 97)});
    std::memcpy(ptr, data_ + pos_, piece);
    pos_ += piece;
    return ssize_t(piece);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (out.size() < (size_t{1} << 20)) out.append(ptr, size);
    return ssize_t(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 40000;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 8080;
  }
  socket_t socket() const override { return INVALID_SOCKET; }

  std::string_view unread() const { return std::string_view(data_ + pos_, size_ - pos_); }

  std::string out;

 private:
  const char* data_;
  size_t size_;
  size_t pos_ = 0;
  uint32_t rng_;
};

// process_request is protected: the library's socket loop is its only caller.
class FuzzServer : public httplib::Server {
 public:
  using httplib::Server::process_request;
};

// Which server an input meets: without an API key, with one (/metrics public, the default), or
// with one and --metrics-require-key.
enum class Access { kOpen, kKeyed, kKeyedMetrics };

// The state check_request reads: the options, and a loaded model (ready); no connection deadlines.
mla::server::HttpServer::State* checks_state(Access access) {
  mla::server::ServerOptions o;
  o.max_body_bytes = kBodyCap;
  if (access != Access::kOpen) o.api_key = "fuzz-key";
  o.metrics_require_key = access == Access::kKeyedMetrics;
  auto* st = new mla::server::HttpServer::State(o);
  st->ready = true;
  return st;
}

FuzzServer& server(Access access) {
  auto make = [](mla::server::HttpServer::State* st) {
    auto* srv = new FuzzServer;
    srv->set_payload_max_length(kBodyCap);
    srv->set_pre_routing_handler([st](const httplib::Request& req, httplib::Response& res) {
      return mla::server::check_request(*st, req, res);
    });
    const bool keyed = !st->options.api_key.empty();
    const bool metrics_keyed = st->options.metrics_require_key;
    auto check_body = [keyed, metrics_keyed](const httplib::Request& req, httplib::Response& res) {
      // No parse reaches a key-protected route without the key (/health and / are public, and
      // /metrics unless --metrics-require-key).
      const bool is_public =
          req.path == "/health" || req.path == "/" || (req.path == "/metrics" && !metrics_keyed);
      if (keyed && !is_public)
        MLA_CHECK(req.get_header_value("Authorization") == "Bearer fuzz-key",
                  "{} {} reached its handler with Authorization {:?}", req.method, req.path,
                  req.get_header_value("Authorization"));
      if (req.method != "GET" && req.method != "HEAD")
        MLA_CHECK(std::stoull(req.get_header_value("Content-Length")) == req.body.size(),
                  "{} {}: a {}-byte body under Content-Length {:?}", req.method, req.path,
                  req.body.size(), req.get_header_value("Content-Length"));
      MLA_CHECK(req.body.size() <= kBodyCap,
                "{} {} got a {}-byte body over the {} cap (Content-Length {:?}, "
                "Transfer-Encoding {:?}, Content-Encoding {:?})",
                req.method, req.path, req.body.size(), kBodyCap,
                req.get_header_value("Content-Length"), req.get_header_value("Transfer-Encoding"),
                req.get_header_value("Content-Encoding"));
      res.set_content("{}", "application/json");
    };
    for (const char* path : {"/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize"})
      srv->Post(path, check_body);
    for (const char* path : {"/v1/models", "/metrics", "/health", "/"}) srv->Get(path, check_body);
    return srv;
  };
  static FuzzServer* servers[] = {make(checks_state(Access::kOpen)),
                                  make(checks_state(Access::kKeyed)),
                                  make(checks_state(Access::kKeyedMetrics))};
  return *servers[static_cast<int>(access)];
}

// The response ends its connection (the connection loop stops reading after it).
bool closes_connection(const std::string& out) {
  const size_t head_end = out.find("\r\n\r\n");
  return out.substr(0, head_end).find("\r\nConnection: close") != std::string::npos;
}

void check_response(const std::string& out) {
  if (out.empty()) return;  // the library may close without answering
  MLA_CHECK(out.size() >= 12 && out.compare(0, 9, "HTTP/1.1 ") == 0 &&
                std::isdigit(static_cast<unsigned char>(out[9])) &&
                std::isdigit(static_cast<unsigned char>(out[10])) &&
                std::isdigit(static_cast<unsigned char>(out[11])),
            "malformed response start {}", out.substr(0, 40));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mla::fuzz::ByteReader in(data, size);
  const uint32_t seed = in.u32();
  const std::string_view bytes = in.rest();
  MemoryStream stream(bytes.data(), bytes.size(), seed);
  const Access access = (seed & 1) == 0   ? Access::kOpen
                        : (seed & 2) == 0 ? Access::kKeyed
                                          : Access::kKeyedMetrics;
  FuzzServer& srv = server(access);
  for (int i = 0; i < 5 && stream.is_readable(); ++i) {
    bool closed = false;
    stream.out.clear();
    const bool last = i == 4;
    const mla::server::RequestHead head =
        mla::server::scan_request_head(stream.unread(), mla::server::RequestHeadLimits{});
    if (head != mla::server::RequestHead::kComplete &&
        head != mla::server::RequestHead::kIncomplete)
      break;  // answered 414 / 431 by the connection loop, which then closes
    srv.process_request(stream, last, closed, nullptr);
    check_response(stream.out);
    if (closed || closes_connection(stream.out)) break;
  }
  return 0;
}
