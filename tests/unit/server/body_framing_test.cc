// check_body_framing (server/body_framing.h): which request bodies cpp-httplib 0.11.4 could not
// cap are refused before the library reads them. The fuzz target fuzz_http_parser drives the same
// function through the library's parser; these are the named cases.
#include "server/body_framing.h"

#include <gtest/gtest.h>

namespace mla::server {
namespace {

httplib::Request request(const char* method,
                         std::initializer_list<std::pair<const char*, const char*>> h) {
  httplib::Request r;
  r.method = method;
  for (const auto& [k, v] : h) r.headers.emplace(k, v);
  return r;
}

TEST(BodyFraming, ContentLengthBodiesPass) {
  EXPECT_FALSE(check_body_framing(request("POST", {{"Content-Length", "13"}})));
  EXPECT_FALSE(check_body_framing(request("POST", {{"Content-Length", "0"}})));
  EXPECT_FALSE(check_body_framing(request("GET", {})));
  EXPECT_FALSE(check_body_framing(request("HEAD", {{"Transfer-Encoding", "chunked"}})));
}

TEST(BodyFraming, UnboundedBodiesAre411) {
  for (const char* m : {"POST", "PUT", "PATCH", "DELETE"}) {
    const auto none = check_body_framing(request(m, {}));
    ASSERT_TRUE(none) << m;
    EXPECT_EQ(none->status, 411);
    EXPECT_EQ(none->code, "length_required");
  }
  const auto chunked = check_body_framing(request("POST", {{"Transfer-Encoding", "chunked"}}));
  ASSERT_TRUE(chunked);
  EXPECT_EQ(chunked->status, 411);
  const auto gzip = check_body_framing(request("POST", {{"Transfer-Encoding", "gzip"}}));
  ASSERT_TRUE(gzip);
  EXPECT_EQ(gzip->status, 411);
}

TEST(BodyFraming, MalformedContentLengthIs400) {
  for (const char* v : {"B 2", "-5", " 12", "12abc", "", "+1", "99999999999999999999"}) {
    const auto e = check_body_framing(request("POST", {{"Content-Length", v}}));
    ASSERT_TRUE(e) << v;
    EXPECT_EQ(e->status, 400) << v;
  }
  const auto twice =
      check_body_framing(request("POST", {{"Content-Length", "2"}, {"Content-Length", "3"}}));
  ASSERT_TRUE(twice);
  EXPECT_EQ(twice->status, 400);
}

}  // namespace
}  // namespace mla::server
