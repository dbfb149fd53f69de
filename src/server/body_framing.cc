// check_body_framing: see body_framing.h.
#include "server/body_framing.h"

#include <string>

namespace mla::server {

std::optional<ApiError> check_body_framing(const httplib::Request& req) {
  const std::string& m = req.method;
  // The methods cpp-httplib 0.11.4 reads a body for (detail::expect_content).
  if (m != "POST" && m != "PUT" && m != "PATCH" && m != "DELETE" && m != "PRI") return std::nullopt;
  if (req.has_header("Transfer-Encoding") || !req.has_header("Content-Length")) {
    ApiError e;
    e.status = 411;
    e.message =
        "send the request body with a Content-Length header (chunked or unframed bodies are not "
        "accepted)";
    e.code = "length_required";
    return e;
  }
  if (req.get_header_value_count("Content-Length") != 1)
    return bad_request("", "more than one Content-Length header");
  const std::string cl = req.get_header_value("Content-Length");
  bool digits = !cl.empty() && cl.size() <= 19;
  for (char c : cl) digits = digits && c >= '0' && c <= '9';
  if (!digits) return bad_request("", "Content-Length must be a decimal byte count");
  return std::nullopt;
}

}  // namespace mla::server
