// What the model-file readers and writers (safetensors, GGUF) share: a whole regular file mapped
// read-only, paging a mapping in, writing a buffer whole, the temp file a write goes through.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "mla/status.h"

namespace mla::io_detail {

std::string errno_text(int err);

// Writes all n bytes (in pieces of at most 1 GiB, retrying on EINTR); 0, or the errno.
int write_all(int fd, const void* data, size_t n);

// The whole of `path` mapped PROT_READ, MAP_PRIVATE; the caller munmaps it. An empty file maps
// nothing (map null, size 0: mmap refuses length 0), so the format's validator explains what is
// missing. Errors: not_found (no such file), io_error (open / stat / mmap refused, not a regular
// file), naming the path. FIFOs are opened without waiting for a writer, then refused.
struct FileMapping {
  void* map = nullptr;
  uint64_t size = 0;
};
Result<FileMapping> map_file(const std::string& path);

// A writer's `<path>.tmp.*` file: closed, and removed unless `keep` (set once it was renamed into
// place), when it goes out of scope.
struct TempFile {
  std::string path;
  int fd = -1;
  bool keep = false;
  ~TempFile();
};

// Reads the mapping into the page cache now (MADV_POPULATE_READ). A kernel without it (before
// Linux 5.14) leaves the mapping lazy: not an error. io_error naming `path` when a page cannot be
// read.
Status populate_mapping(const std::string& path, void* map, uint64_t size);

}  // namespace mla::io_detail
