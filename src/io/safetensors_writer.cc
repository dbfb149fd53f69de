// write_safetensors: checks the tensors against their shapes, then writes a temp file beside the
// target and renames it into place.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <exception>
#include <limits>
#include <new>
#include <nlohmann/json.hpp>
#include <string_view>
#include <system_error>
#include <unordered_set>

#include "io/mapped_file.h"
#include "io/safetensors.h"
#include "io/safetensors_header.h"

namespace mla {
namespace {

using io_detail::quote_text;

using io_detail::errno_text;

// RFC 3629 UTF-8: no overlong forms, no surrogates, nothing past U+10FFFF. JSON text must be
// UTF-8, and the reader rejects anything else.
bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int extra;
    unsigned char lo = 0x80, hi = 0xBF;  // range of the first continuation byte
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      extra = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      extra = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      extra = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (s.size() - i <= size_t(extra)) return false;
    for (int k = 1; k <= extra; ++k) {
      const unsigned char b = static_cast<unsigned char>(s[i + k]);
      if (k == 1 ? (b < lo || b > hi) : (b & 0xC0) != 0x80) return false;
    }
    i += size_t(extra) + 1;
  }
  return true;
}

using io_detail::write_all;

// The header JSON, padded with spaces to a multiple of 8 bytes, or why the tensors are invalid.
Result<std::string> build_header(const std::string& path, const std::vector<TensorToWrite>& tensors,
                                 const std::map<std::string, std::string>& metadata) {
  using nlohmann::ordered_json;
  ordered_json header = ordered_json::object();
  if (!metadata.empty()) {
    ordered_json meta = ordered_json::object();
    for (const auto& [k, v] : metadata) {
      if (!valid_utf8(k) || !valid_utf8(v))
        return invalid_argument(fmt::format("{}: metadata entry {} is not valid UTF-8", path,
                                            quote_text(k, /*escape_non_ascii=*/true)));
      meta[k] = v;
    }
    header["__metadata__"] = std::move(meta);
  }
  std::unordered_set<std::string_view> names;
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    const std::string prefix = fmt::format("{}: tensor {}: ", path, quote_text(t.name, true));
    if (!valid_utf8(t.name)) return invalid_argument(prefix + "name is not valid UTF-8");
    if (t.name == "__metadata__") return invalid_argument(prefix + "name is reserved");
    if (!names.insert(t.name).second) return invalid_argument(prefix + "name appears twice");
    Result<io_detail::TensorSize> size = io_detail::tensor_size(t.dtype, t.shape);
    if (!size.ok()) return invalid_argument(prefix + size.status().message());
    if (size->bytes != t.byte_size)
      return invalid_argument(fmt::format("{}byte_size {} but shape {} of {} needs {}", prefix,
                                          t.byte_size, io_detail::shape_string(t.shape),
                                          dtype_name(t.dtype), size->bytes));
    if (t.byte_size > 0 && t.data == nullptr) return invalid_argument(prefix + "data is null");
    if (offset > std::numeric_limits<uint64_t>::max() - t.byte_size)
      return invalid_argument(prefix + "total data size overflows 2^64");
    ordered_json entry = ordered_json::object();
    entry["dtype"] = std::string(dtype_name(t.dtype));
    entry["shape"] = t.shape;
    entry["data_offsets"] = {offset, offset + t.byte_size};
    header[t.name] = std::move(entry);
    offset += t.byte_size;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

using io_detail::TempFile;

}  // namespace

Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  std::string header;
  try {
    MLA_ASSIGN_OR_RETURN(header, build_header(path, tensors, metadata));
  } catch (const std::bad_alloc&) {
    return out_of_memory(path + ": out of memory building the safetensors header");
  } catch (const std::exception& e) {  // nlohmann reports misuse by throwing; none is expected
    return invalid_argument(fmt::format("{}: cannot build the header: {}", path, e.what()));
  }

  // Unique per process and call, so concurrent writers of the same target never share a temp.
  static std::atomic<uint64_t> counter{0};
  TempFile tmp;
  tmp.path = fmt::format("{}.tmp.{}.{}", path, ::getpid(), counter.fetch_add(1));
  do {
    tmp.fd = ::open(tmp.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  } while (tmp.fd < 0 && errno == EINTR);
  if (tmp.fd < 0) {
    tmp.keep = true;  // nothing was created
    return io_error(fmt::format("{}: cannot create {}: {}", path, tmp.path, errno_text(errno)));
  }

  uint8_t prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = uint8_t(uint64_t(header.size()) >> (8 * i));
  int err = write_all(tmp.fd, prefix, 8);
  if (!err) err = write_all(tmp.fd, header.data(), header.size());
  for (size_t i = 0; !err && i < tensors.size(); ++i)
    if (tensors[i].byte_size > 0) err = write_all(tmp.fd, tensors[i].data, tensors[i].byte_size);
  if (err) return io_error(fmt::format("{}: cannot write {}: {}", path, tmp.path, errno_text(err)));
  // Durable before it becomes visible under the final name.
  if (::fsync(tmp.fd) != 0)
    return io_error(fmt::format("{}: cannot fsync {}: {}", path, tmp.path, errno_text(errno)));
  const int fd = tmp.fd;
  tmp.fd = -1;
  if (::close(fd) != 0)
    return io_error(fmt::format("{}: cannot close {}: {}", path, tmp.path, errno_text(errno)));
  if (::rename(tmp.path.c_str(), path.c_str()) != 0)
    return io_error(
        fmt::format("{}: cannot rename {} into place: {}", path, tmp.path, errno_text(errno)));
  tmp.keep = true;
  return Status::ok_status();
}

}  // namespace mla
