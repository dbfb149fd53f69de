#include "server/connection_deadlines.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

namespace mla::server {
namespace {

// The peer of an accepted socket on `port` (text address as the HTTP library reports it), or
// false for anything else: not a socket, the listening socket, another port, not connected.
bool accepted_peer(int fd, int port, std::string* addr, int* peer_port) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return false;
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return false;
  int local_port = -1;
  if (ss.ss_family == AF_INET)
    local_port = ntohs(reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
  else if (ss.ss_family == AF_INET6)
    local_port = ntohs(reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port);
  if (local_port != port) return false;
  len = sizeof ss;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return false;
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    if (!inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf)) return false;
    *peer_port = ntohs(a->sin_port);
  } else {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    if (!inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf)) return false;
    *peer_port = ntohs(a->sin6_port);
  }
  *addr = buf;
  return true;
}

}  // namespace

ConnectionDeadlines::ConnectionDeadlines(Options o) : o_(o) {
  thread_ = std::thread([this] { watch(); });
}

ConnectionDeadlines::~ConnectionDeadlines() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void ConnectionDeadlines::set_phase(const std::string& addr, int port, Phase p) {
  std::lock_guard lock(mu_);
  conns_[{addr, port}] = Conn{p, Clock::now()};
}

void ConnectionDeadlines::headers_received(const std::string& addr, int port) {
  set_phase(addr, port, Phase::kBody);
}

void ConnectionDeadlines::handling(const std::string& addr, int port) {
  set_phase(addr, port, Phase::kHandling);
}

void ConnectionDeadlines::response_sent(const std::string& addr, int port) {
  set_phase(addr, port, Phase::kHeaders);
}

int64_t ConnectionDeadlines::open_connections() const {
  std::lock_guard lock(mu_);
  return open_;
}

int64_t ConnectionDeadlines::timed_out() const {
  std::lock_guard lock(mu_);
  return timed_out_;
}

void ConnectionDeadlines::shed(std::chrono::milliseconds min_wait) {
  std::unique_lock lock(shed_mu_, std::try_to_lock);
  const Clock::time_point now = Clock::now();
  if (!lock.owns_lock() || now - last_shed_ < o_.interval / 5) return;
  last_shed_ = now;
  scan(now, min_wait);
}

void ConnectionDeadlines::watch() {
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, o_.interval, [this] { return stop_; })) {
    lock.unlock();
    const bool saturated = o_.queued && o_.queued->load() > 0;
    scan(Clock::now(), saturated ? std::min(o_.shed_after, o_.header_timeout) : o_.header_timeout);
    lock.lock();
  }
}

void ConnectionDeadlines::scan(Clock::time_point now, std::chrono::milliseconds header_limit) {
  struct Seen {
    int fd;
    Peer peer;
  };
  std::vector<Seen> seen;
  if (DIR* dir = opendir("/proc/self/fd")) {
    while (const dirent* e = readdir(dir)) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      const int fd = std::atoi(e->d_name);
      Seen s{fd, {}};
      if (fd != dirfd(dir) && accepted_peer(fd, o_.port, &s.peer.first, &s.peer.second))
        seen.push_back(std::move(s));
    }
    closedir(dir);
  }
  std::vector<Seen> too_slow;
  {
    std::lock_guard lock(mu_);
    std::map<Peer, Conn> live;
    for (const Seen& s : seen) {
      auto it = conns_.find(s.peer);
      const Conn c = it != conns_.end() ? it->second : Conn{Phase::kHeaders, now};
      live[s.peer] = c;
      const auto waited = now - c.since;
      if ((c.phase == Phase::kHeaders && waited > header_limit) ||
          (c.phase == Phase::kBody && waited > o_.body_timeout))
        too_slow.push_back(s);
    }
    conns_ = std::move(live);  // connections that closed are forgotten
    open_ = int64_t(seen.size());
    timed_out_ += int64_t(too_slow.size());
  }
  // The fd may have been closed and reused since the scan: only the same peer is shut down.
  for (const Seen& s : too_slow) {
    Peer now_at;
    if (accepted_peer(s.fd, o_.port, &now_at.first, &now_at.second) && now_at == s.peer)
      shutdown(s.fd, SHUT_RDWR);
  }
}

}  // namespace mla::server
