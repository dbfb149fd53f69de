// The connection loop (src/server/http_connection.h): request-head limits, and over a loopback
// socket to a server with no model: pipelined requests answered in order, without waiting for
// the keep-alive timeout; a long header line answered 431 and the connection closed; a framing
// error ends the connection after its answer.
#include "server/http_connection.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "server/http_server.h"

namespace mla::server {
namespace {

using namespace std::chrono_literals;

TEST(RequestHeadTest, ClassifiesHeadsAgainstTheLimits) {
  RequestHeadLimits l;
  l.request_line = 20;
  l.header_line = 12;
  l.header_block = 30;
  EXPECT_EQ(scan_request_head("", l), RequestHead::kIncomplete);
  EXPECT_EQ(scan_request_head("GET / HTTP/1.1", l), RequestHead::kIncomplete);
  EXPECT_EQ(scan_request_head("GET / HTTP/1.1\r\n\r\n", l), RequestHead::kComplete);
  EXPECT_EQ(scan_request_head("GET / HTTP/1.1\n\n", l), RequestHead::kComplete);
  EXPECT_EQ(scan_request_head("GET / HTTP/1.1\r\nA: b\r\n\r\nrest", l), RequestHead::kComplete);
  EXPECT_EQ(scan_request_head("GET / HTTP/1.1\r\nA: b\r\n", l), RequestHead::kIncomplete);
  // 23 bytes of request line with its "\r\n"; unfinished lines count as far as they go.
  EXPECT_EQ(scan_request_head("GET /abcdefg HTTP/1.1\r\n\r\n", l),
            RequestHead::kRequestLineTooLong);
  EXPECT_EQ(scan_request_head("GET /abcdefghijklmnop", l), RequestHead::kRequestLineTooLong);
  EXPECT_EQ(scan_request_head("GET / HTTP/1.1\r\nA: bcdefghij\r\n", l),
            RequestHead::kHeaderLineTooLong);  // 14 bytes
  EXPECT_EQ(scan_request_head("GET / HTTP/1.1\r\nA: bcdefghijk", l),
            RequestHead::kHeaderLineTooLong);
  EXPECT_EQ(scan_request_head("GET / HTTP/1.1\r\nA: bcdefgh\r\n\r\n", l),
            RequestHead::kComplete);  // 12 bytes: at the limit
  // Three 11-byte lines: 33 bytes of header lines.
  EXPECT_EQ(scan_request_head("GET / HTTP/1.1\r\nA: bcdefg\r\nA: bcdefg\r\nA: bcdefg\r\n", l),
            RequestHead::kHeaderBlockTooLarge);
  // The final blank line counts: 12 + 12 + 4 + 2 = 30 is at the limit, one byte more is over.
  EXPECT_EQ(scan_request_head("GET / HTTP/1.1\r\nA: bcdefgh\r\nA: bcdefgh\r\nA:\r\n\r\n", l),
            RequestHead::kComplete);
  EXPECT_EQ(scan_request_head("GET / HTTP/1.1\r\nA: bcdefgh\r\nA: bcdefgh\r\nA:b\r\n\r\n", l),
            RequestHead::kHeaderBlockTooLarge);
}

class ConnectionLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions so;
    so.port = 0;
    so.http_threads = 4;
    server_ = std::make_unique<HttpServer>(so);
    auto port = server_->bind();
    ASSERT_TRUE(port.ok());
    port_ = *port;
    server_->start();
  }
  void TearDown() override { server_->shutdown(0ms); }

  // Sends `bytes` on a new connection; returns what comes back until the server closes it or
  // `quiet` passes without a byte, and whether it closed.
  std::pair<std::string, bool> exchange(const std::string& bytes,
                                        std::chrono::milliseconds quiet = 2000ms) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port_));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), ssize_t(bytes.size()));
    std::string out;
    bool closed = false;
    for (;;) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, int(quiet.count())) <= 0) break;
      char buf[65536];
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) {
        closed = true;
        break;
      }
      out.append(buf, size_t(n));
    }
    ::close(fd);
    return {out, closed};
  }

  static int count(const std::string& s, const std::string& what) {
    int n = 0;
    for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
    return n;
  }

  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
};

TEST_F(ConnectionLoopTest, PipelinedRequestsAreAnsweredInOrderAtOnce) {
  // Three requests in one write: /health (503 until a model is set), an unknown path (404),
  // /health again. The library's own loop answered the first and then waited out its 5-second
  // keep-alive timeout; the 2-second quiet limit here fails on that.
  const std::string get = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  const auto t0 = std::chrono::steady_clock::now();
  auto [out, closed] = exchange(get + "GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n" + get +
                                "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2000ms);
  EXPECT_TRUE(closed);
  ASSERT_EQ(count(out, "HTTP/1.1 "), 4) << out;
  const size_t a = out.find("HTTP/1.1 503"), b = out.find("HTTP/1.1 404"),
               c = out.find("HTTP/1.1 503", b);
  EXPECT_TRUE(a < b && b < c && c != std::string::npos) << out;
}

TEST_F(ConnectionLoopTest, ALongHeaderLineGets431AndTheConnectionCloses) {
  auto [out, closed] =
      exchange("GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(9000, 'b') +
               "\r\n\r\nGET /health HTTP/1.1\r\n\r\n");
  EXPECT_EQ(out.rfind("HTTP/1.1 431", 0), 0u) << out.substr(0, 200);
  EXPECT_NE(out.find("request_header_fields_too_large"), std::string::npos);
  EXPECT_EQ(count(out, "HTTP/1.1 "), 1);
  EXPECT_TRUE(closed);
  // A header line that never ends is cut at the limit, not buffered without bound.
  std::tie(out, closed) = exchange("GET /health HTTP/1.1\r\nX-Big: " + std::string(100000, 'b'));
  EXPECT_EQ(out.rfind("HTTP/1.1 431", 0), 0u) << out.substr(0, 200);
  EXPECT_TRUE(closed);
  std::tie(out, closed) = exchange("GET /" + std::string(9000, 'a') + " HTTP/1.1\r\n\r\n");
  EXPECT_EQ(out.rfind("HTTP/1.1 414", 0), 0u) << out.substr(0, 200);
  EXPECT_TRUE(closed);
}

TEST_F(ConnectionLoopTest, AFramingErrorEndsTheConnectionAfterItsAnswer) {
  // An unparsable request line, then a request the server never reads.
  auto [out, closed] = exchange("NOT HTTP\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(out.rfind("HTTP/1.1 400", 0), 0u) << out.substr(0, 200);
  EXPECT_EQ(count(out, "HTTP/1.1 "), 1) << out;
  EXPECT_TRUE(closed);
}

}  // namespace
}  // namespace mla::server
