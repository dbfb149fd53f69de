// Closing connections that send their request too slowly. The HTTP library's read timeout
// applies to each recv, so a client that sends one header byte every few seconds (slowloris)
// would hold a worker thread for ever. A watchdog thread looks at the process's accepted sockets
// on the server's port every `interval` and shuts down (SHUT_RDWR; the library's blocked recv
// then returns and it closes the connection) any that has waited longer than `header_timeout`
// for a request's headers (counted from the accept or from the end of its previous response) or
// longer than `body_timeout` for one request's body (docs/RELIABILITY.md §Checklist R36, L6).
// Handlers report the phases by the peer address the library gives them.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace mla::server {

class ConnectionDeadlines {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    int port = 0;  // the server's local port: which accepted sockets are ours
    std::chrono::milliseconds header_timeout{10'000};
    std::chrono::milliseconds body_timeout{30'000};
    std::chrono::milliseconds interval{250};
    // Connections waiting for a worker (nullptr: never). While some wait, header waits longer
    // than shed_after are cut at every look, not only past header_timeout.
    const std::atomic<int64_t>* queued = nullptr;
    std::chrono::milliseconds shed_after{500};
  };

  explicit ConnectionDeadlines(Options o);  // starts the watchdog
  ~ConnectionDeadlines();                   // stops it
  ConnectionDeadlines(const ConnectionDeadlines&) = delete;
  ConnectionDeadlines& operator=(const ConnectionDeadlines&) = delete;

  // The request's headers are in (pre-routing); its body is being read.
  void headers_received(const std::string& peer_addr, int peer_port);
  // The handler runs: no deadline until the response is out.
  void handling(const std::string& peer_addr, int peer_port);
  // The response is out; the connection may wait for its next request's headers.
  void response_sent(const std::string& peer_addr, int peer_port);

  // Every worker is busy: closes at once the connections that have waited longer than
  // `min_wait` for their headers (slow senders, idle keep-alives), so a new client gets a worker.
  // At most once per interval / 5.
  void shed(std::chrono::milliseconds min_wait);

  // Accepted connections at the last look, and those closed for being too slow so far.
  int64_t open_connections() const;
  int64_t timed_out() const;

 private:
  enum class Phase { kHeaders, kBody, kHandling };
  struct Conn {
    Phase phase = Phase::kHeaders;
    Clock::time_point since;
  };
  using Peer = std::pair<std::string, int>;

  void set_phase(const std::string& addr, int port, Phase p);
  void watch();
  // Shuts down the connections over their deadline, header waits counted against header_limit.
  void scan(Clock::time_point now, std::chrono::milliseconds header_limit);

  const Options o_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::map<Peer, Conn> conns_;
  int64_t open_ = 0, timed_out_ = 0;
  std::mutex shed_mu_;  // one shed at a time
  Clock::time_point last_shed_{};
  std::thread thread_;
};

}  // namespace mla::server
