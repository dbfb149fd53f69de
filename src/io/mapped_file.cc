// map_file / populate_mapping (mapped_file.h).
#include "io/mapped_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

namespace mla::io_detail {
namespace {

// Closes the descriptor on every return path of map_file().
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::string errno_text(int err) {
  return std::generic_category().message(err);
}

int write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t(1) << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += w;
    n -= size_t(w);
  }
  return 0;
}

TempFile::~TempFile() {
  if (fd >= 0) ::close(fd);
  if (!keep && !path.empty()) ::unlink(path.c_str());
}

Result<FileMapping> map_file(const std::string& path) {
  int fd;
  do {
    // O_NONBLOCK: opening a FIFO must not wait for a writer; fstat below rejects it.
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    const int err = errno;
    std::string msg = fmt::format("{}: cannot open: {}", path, errno_text(err));
    return err == ENOENT ? not_found(msg) : io_error(msg);
  }
  FdCloser closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0)
    return io_error(fmt::format("{}: cannot stat: {}", path, errno_text(errno)));
  // Directories, FIFOs and devices have no meaningful size to validate against.
  if (!S_ISREG(st.st_mode)) return io_error(path + ": not a regular file");
  FileMapping m;
  m.size = uint64_t(st.st_size);
  if (m.size == 0) return m;
  m.map = ::mmap(nullptr, m.size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (m.map == MAP_FAILED)
    return io_error(fmt::format("{}: cannot mmap {} bytes: {}", path, m.size, errno_text(errno)));
  return m;
}

Status populate_mapping(const std::string& path, void* map, uint64_t size) {
#if defined(__linux__)
  constexpr int kMadvPopulateRead = 22;  // MADV_POPULATE_READ, Linux 5.14 (uapi mman-common.h)
  if (map && ::madvise(map, size, kMadvPopulateRead) != 0) {
    const int err = errno;
    if (err == EINVAL || err == ENOSYS) return Status();  // older kernel: stays lazy
    return io_error(fmt::format("{}: cannot read the mapped file: {}", path, errno_text(err)));
  }
#endif
  return Status();
}

}  // namespace mla::io_detail
