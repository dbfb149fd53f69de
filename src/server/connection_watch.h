// Noticing that a client went away while its request is still being computed. The HTTP library
// tells a handler only its connection's addresses, and writes to a closed socket fail only after
// the peer's reset: a long prefill (no bytes to write) or a non-streamed request would run to the
// end for nobody. So the handler finds its socket by those addresses and polls it for the peer's
// FIN or reset between engine events (docs/RELIABILITY.md §Checklist G5: the HTTP layer watches
// for socket closure on streamed and non-streamed requests).
#pragma once

#include <string>

namespace mla::server {

// The fd of the connected TCP socket with these local and remote endpoints, or -1. Linear in the
// process's open fds (/proc/self/fd); call once per request.
int find_connection_fd(const std::string& local_addr, int local_port,
                       const std::string& remote_addr, int remote_port);

// The listening socket bound to `port`, or -1.
int find_listening_fd(int port);

// The peer has closed or reset the connection (FIN, RST or error seen); pending request bytes
// (a pipelined request) are not read. false for fd < 0.
bool peer_closed(int fd);

}  // namespace mla::server
