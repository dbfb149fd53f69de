#include "server/process_usage.h"

#include <dirent.h>

#include <cstdio>
#include <cstring>

namespace mla::server {

ProcessUsage process_usage() {
  ProcessUsage u;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (const dirent* e = readdir(d))
      if (e->d_name[0] != '.') ++u.open_fds;
    closedir(d);
    --u.open_fds;  // the directory stream's own fd
  }
  if (std::FILE* f = std::fopen("/proc/self/status", "r")) {
    char line[256];
    long long kib = 0;
    while (std::fgets(line, sizeof line, f)) {
      if (std::sscanf(line, "VmRSS: %lld kB", &kib) == 1) u.resident_bytes = kib * 1024;
      if (std::sscanf(line, "RssAnon: %lld kB", &kib) == 1) u.resident_anon_bytes = kib * 1024;
      if (std::sscanf(line, "RssFile: %lld kB", &kib) == 1) u.resident_file_bytes = kib * 1024;
    }
    std::fclose(f);
  }
  return u;
}

}  // namespace mla::server
