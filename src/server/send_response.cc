// send_json and send_error (declared in server_state.h): every JSON answer the server writes.
// Kept apart from http_server.cc so that the request checks link without the server itself
// (the F7 fuzz target runs check_request on its own).
#include <httplib.h>

#include "server/api_error.h"
#include "server/server_state.h"

namespace mla::server {

void send_json(httplib::Response& res, int status, const nlohmann::json& body) {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
  send_json(res, e.status, error_json(e));
}

}  // namespace mla::server
