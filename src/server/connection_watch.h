// Noticing that a client went away while its request is still being computed. Writes to a closed
// socket fail only after the peer's reset: a long prefill (no bytes to write) or a non-streamed
// request would run to the end for nobody. So the handler polls its connection's socket
// (ConnectionServer::current_fd, http_connection.h) for the peer's FIN or reset between engine
// events (docs/RELIABILITY.md §Checklist G5: the HTTP layer watches
// for socket closure on streamed and non-streamed requests).
#pragma once

#include <string>

namespace mla::server {

// The listening socket bound to `port`, or -1.
int find_listening_fd(int port);

// The peer has closed or reset the connection (FIN, RST or error seen); pending request bytes
// (a pipelined request) are not read. false for fd < 0.
bool peer_closed(int fd);

}  // namespace mla::server
