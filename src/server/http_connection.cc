// The connection loop of http_connection.h: one buffered stream per connection, request heads
// read and bounded before the library parses them, and a lingering close after an error.
#include "server/http_connection.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

namespace mla::server {
namespace {

thread_local int tl_connection_fd = -1;
thread_local bool tl_close_after_response = false;

// true when `fd` has `events` within `ms` (< 0: no limit); EINTR restarts the wait.
bool wait_for(int fd, short events, int ms) {
  pollfd p{fd, events, 0};
  for (;;) {
    const int r = ::poll(&p, 1, ms);
    if (r >= 0) return r > 0;
    if (errno != EINTR) return false;
  }
}

int to_ms(time_t sec, time_t usec) {
  return int(std::min<int64_t>(int64_t(sec) * 1000 + int64_t(usec) / 1000, 1 << 30));
}

void ip_and_port(const sockaddr_storage& a, socklen_t len, std::string& ip, int& port) {
  if (a.ss_family == AF_INET)
    port = ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  else if (a.ss_family == AF_INET6)
    port = ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  else
    return;
  std::array<char, NI_MAXHOST> host{};
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, host.data(), host.size(), nullptr,
                    0, NI_NUMERICHOST) == 0)
    ip = host.data();
}

// A socket stream whose read buffer outlives each request (see the header).
class BufferedSocketStream final : public httplib::Stream {
 public:
  BufferedSocketStream(int fd, int read_ms, int write_ms)
      : fd_(fd), read_ms_(read_ms), write_ms_(write_ms) {}

  bool is_readable() const override {
    return off_ < buf_.size() || wait_for(fd_, POLLIN, read_ms_);
  }
  bool is_writable() const override {
    if (!wait_for(fd_, POLLOUT, write_ms_)) return false;
    // Alive unless the peer's end of stream is next (pending request bytes keep it alive).
    if (!wait_for(fd_, POLLIN, 0)) return true;
    char c;
    return ::recv(fd_, &c, 1, MSG_PEEK) != 0;
  }

  ssize_t read(char* ptr, size_t size) override {
    if (off_ == buf_.size() && size < kChunk) {
      const ssize_t n = fill();  // read ahead: the library asks for one byte per call for lines
      if (n <= 0) return n;
    }
    if (off_ < buf_.size()) {
      const size_t n = std::min(size, buf_.size() - off_);
      std::memcpy(ptr, buf_.data() + off_, n);
      off_ += n;
      return ssize_t(n);
    }
    if (!is_readable()) return -1;
    return recv_some(ptr, size);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    for (;;) {
      const ssize_t n = ::send(fd_, ptr, size, MSG_NOSIGNAL);
      if (n >= 0 || errno != EINTR) return n;
    }
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage a{};
    socklen_t len = sizeof(a);
    if (::getpeername(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0)
      ip_and_port(a, len, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage a{};
    socklen_t len = sizeof(a);
    if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0)
      ip_and_port(a, len, ip, port);
  }
  socket_t socket() const override { return fd_; }

  // Waits up to `ms` for the next request's first byte, in slices so that a stopped server
  // (`listening` turns false) is noticed.
  bool wait_for_request(int ms, const std::function<bool()>& listening) const {
    if (off_ < buf_.size()) return true;
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (listening()) {
      if (wait_for(fd_, POLLIN, 50)) return true;
      if (std::chrono::steady_clock::now() >= end) return false;
    }
    return false;
  }

  // Reads until the buffered bytes hold a whole request head or break a limit; an end of stream
  // or a read timeout leaves the head incomplete (the library then answers what it can).
  RequestHead read_head(const RequestHeadLimits& limits) {
    for (;;) {
      const RequestHead h = scan_request_head(std::string_view(buf_).substr(off_), limits);
      if (h != RequestHead::kIncomplete) return h;
      if (!wait_for(fd_, POLLIN, read_ms_) || fill() <= 0) return h;
    }
  }

  // After an answer that closes the connection: the peer gets our FIN, and what it still sends
  // (a refused body) is read and dropped for a short while, so that the close does not reset
  // the connection before the peer has read the answer.
  void linger() {
    ::shutdown(fd_, SHUT_WR);
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    std::array<char, 16384> sink;
    size_t dropped = 0;
    while (dropped < (8u << 20) && std::chrono::steady_clock::now() < end) {
      if (!wait_for(fd_, POLLIN, 200)) continue;
      const ssize_t n = ::recv(fd_, sink.data(), sink.size(), 0);
      if (n <= 0 && !(n < 0 && errno == EINTR)) break;
      if (n > 0) dropped += size_t(n);
    }
  }

 private:
  static constexpr size_t kChunk = 4096;

  ssize_t recv_some(char* ptr, size_t size) {
    for (;;) {
      const ssize_t n = ::recv(fd_, ptr, size, 0);
      if (n >= 0 || errno != EINTR) return n;
    }
  }

  // Appends up to kChunk bytes from the socket (within the read timeout) to the buffer.
  ssize_t fill() {
    if (off_ == buf_.size()) {
      buf_.clear();
      off_ = 0;
    }
    if (!wait_for(fd_, POLLIN, read_ms_)) return -1;
    const size_t old = buf_.size();
    buf_.resize(old + kChunk);
    const ssize_t n = recv_some(buf_.data() + old, kChunk);
    buf_.resize(old + size_t(std::max<ssize_t>(n, 0)));
    return n;
  }

  const int fd_;
  const int read_ms_, write_ms_;
  std::string buf_;  // bytes read from the socket; those before off_ are consumed
  size_t off_ = 0;
};

void write_refusal(BufferedSocketStream& strm, const ConnectionServer& server, int status,
                   const std::string& message) {
  httplib::Response res;
  if (server.on_refused_head)
    server.on_refused_head(status, message, res);
  else
    res.set_content(message + "\n", "text/plain");
  const char* reason = status == 414 ? "URI Too Long" : "Request Header Fields Too Large";
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\n";
  if (!res.has_header("Content-Type")) res.set_header("Content-Type", "text/plain");
  for (const auto& [name, value] : res.headers) out += name + ": " + value + "\r\n";
  out += "Content-Length: " + std::to_string(res.body.size()) + "\r\nConnection: close\r\n\r\n";
  out += res.body;
  for (size_t off = 0; off < out.size();) {
    const ssize_t n = strm.write(out.data() + off, out.size() - off);
    if (n <= 0) return;
    off += size_t(n);
  }
}

}  // namespace

RequestHead scan_request_head(std::string_view b, const RequestHeadLimits& limits) {
  const size_t request_line_end = b.find('\n');
  if ((request_line_end == std::string_view::npos ? b.size() : request_line_end + 1) >
      limits.request_line)
    return RequestHead::kRequestLineTooLong;
  if (request_line_end == std::string_view::npos) return RequestHead::kIncomplete;
  for (size_t start = request_line_end + 1;;) {
    const size_t nl = b.find('\n', start);
    const size_t end = nl == std::string_view::npos ? b.size() : nl + 1;
    if (end - start > limits.header_line) return RequestHead::kHeaderLineTooLong;
    if (end - (request_line_end + 1) > limits.header_block)
      return RequestHead::kHeaderBlockTooLarge;
    if (nl == std::string_view::npos) return RequestHead::kIncomplete;
    const std::string_view line = b.substr(start, end - start);
    if (line == "\r\n" || line == "\n") return RequestHead::kComplete;
    start = end;
  }
}

ConnectionServer::ConnectionServer() {
  // Runs just before each response is written, on the connection's thread: notes a response
  // that ends the connection.
  set_post_routing_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.get_header_value("Connection") == "close") tl_close_after_response = true;
  });
}

int ConnectionServer::current_fd() {
  return tl_connection_fd;
}

bool ConnectionServer::process_and_close_socket(socket_t sock) {
  BufferedSocketStream strm(sock, to_ms(read_timeout_sec_, read_timeout_usec_),
                            to_ms(write_timeout_sec_, write_timeout_usec_));
  tl_connection_fd = sock;
  tl_close_after_response = false;
  const auto listening = [this] { return svr_sock_ != INVALID_SOCKET; };
  bool ret = false, linger = false;
  for (size_t left = keep_alive_max_count_; left > 0 && listening(); --left) {
    if (!strm.wait_for_request(int(keep_alive_timeout_sec_) * 1000, listening)) break;
    const RequestHead head = strm.read_head(head_limits);
    if (head == RequestHead::kRequestLineTooLong) {
      write_refusal(
          strm, *this, 414,
          "the request line is longer than " + std::to_string(head_limits.request_line) + " bytes");
      linger = true;
      break;
    }
    if (head == RequestHead::kHeaderLineTooLong || head == RequestHead::kHeaderBlockTooLarge) {
      write_refusal(
          strm, *this, 431,
          head == RequestHead::kHeaderLineTooLong
              ? "a header line is longer than " + std::to_string(head_limits.header_line) + " bytes"
              : "the request's header lines are longer than " +
                    std::to_string(head_limits.header_block) + " bytes in all");
      linger = true;
      break;
    }
    bool connection_closed = false;
    tl_close_after_response = false;
    ret = process_request(strm, left == 1, connection_closed, nullptr);
    if (tl_close_after_response) linger = true;
    if (!ret || connection_closed || tl_close_after_response) break;
  }
  tl_connection_fd = -1;
  if (linger) strm.linger();
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ret;
}

}  // namespace mla::server
