// One HTTP/1.1 connection's request loop, in place of the one cpp-httplib 0.11.4 runs.
//
// The library makes a new socket stream, with an empty read buffer, for every request of a
// connection, and waits for the socket to turn readable before each. A second request sent with
// the first (pipelining) was read ahead into the first stream's buffer and thrown away with it:
// the client got one answer, then silence until the keep-alive timeout. The library also reads a
// header line of any length into memory and answers one over 8 KiB with a bare 400, and keeps a
// connection open after a framing error, reading whatever follows as the next request.
//
// Here one buffered stream lives as long as the connection, so pipelined requests are answered
// in order. Before the library parses a request, the loop reads its head (request line and
// headers) into that buffer within fixed limits and answers a head over them itself (414 / 431,
// docs/RELIABILITY.md §Checklist R36), then closes. A response that carries `Connection: close`
// (a framing error, a refused body) ends the connection once written; the close lingers on the
// read side so the client reads the answer instead of a reset.
#pragma once

#include <httplib.h>

#include <cstddef>
#include <functional>
#include <string_view>

namespace mla::server {

// Limits on a request head, in bytes including line ends.
struct RequestHeadLimits {
  size_t request_line = 8192;  // the library's own request-URI limit (414)
  size_t header_line = 8192;   // one header line (431)
  // Every header line together (431). The parsed-header check (request_checks.cc: 16 KiB of
  // names and values) stays the finer one; this bound only caps what is buffered, with room for
  // the separators and whitespace that check does not count.
  size_t header_block = 20 << 10;
};

enum class RequestHead {
  kComplete,            // the blank line ending the head is buffered
  kIncomplete,          // more bytes are needed
  kRequestLineTooLong,  // 414
  kHeaderLineTooLong,   // 431
  kHeaderBlockTooLarge  // 431
};

// Classifies the bytes buffered for a request head. Lines end at '\n' (a head ends at a line that
// is "\r\n" or "\n"); an unfinished line counts against its limit as far as it goes.
RequestHead scan_request_head(std::string_view buffered, const RequestHeadLimits& limits);

// The library's server with this connection loop. It uses the post-routing handler itself: do
// not set another.
class ConnectionServer : public httplib::Server {
 public:
  ConnectionServer();

  // Fills the answer to a head refused before parsing: status 414 or 431, the reason in
  // `message`. Unset: a plain-text body.
  std::function<void(int status, const std::string& message, httplib::Response&)> on_refused_head;
  RequestHeadLimits head_limits;

  // The socket of the connection whose request this thread is handling, or -1 outside one.
  static int current_fd();

 private:
  bool process_and_close_socket(socket_t sock) override;
};

}  // namespace mla::server
