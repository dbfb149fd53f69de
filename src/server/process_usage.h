// What the process holds right now, for /metrics (load tests compare these before and after a
// run to find leaked sockets and memory growth: docs/RELIABILITY.md §Checklist L1-L12) and for
// `mla bench model` (the memory a loaded model holds: its own copies, and the file's pages).
#pragma once

#include <cstdint>

namespace mla::server {

struct ProcessUsage {
  int64_t open_fds = 0;             // entries of /proc/self/fd, sockets included
  int64_t resident_bytes = 0;       // VmRSS of /proc/self/status
  int64_t resident_anon_bytes = 0;  // RssAnon: the process's own memory (re-laid weights ...)
  int64_t resident_file_bytes = 0;  // RssFile: mapped file pages (a checkpoint's views)
};

// Linux /proc readings; fields that cannot be read stay 0.
ProcessUsage process_usage();

}  // namespace mla::server
