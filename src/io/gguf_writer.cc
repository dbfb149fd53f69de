// GgufWriter: checks the metadata and tensor list, writes the whole header at begin(), then streams
// each tensor's bytes behind zero padding, into a temp file renamed over the target at finish().
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <new>
#include <system_error>
#include <unordered_set>

#include "core/checked_math.h"
#include "io/gguf.h"
#include "io/gguf_header.h"
#include "io/mapped_file.h"

namespace mla {
namespace {

using io_detail::quote_text;

using io_detail::errno_text;
using io_detail::write_all;

int write_zeros(int fd, uint64_t n) {
  static constexpr char kZeros[4096] = {};
  while (n > 0) {
    const size_t chunk = size_t(std::min<uint64_t>(n, sizeof(kZeros)));
    if (const int err = write_all(fd, kZeros, chunk)) return err;
    n -= chunk;
  }
  return 0;
}

// Appends little-endian encodings to the header image.
class Encoder {
 public:
  std::string out;
  template <typename T>
  void scalar(T v) {
    uint8_t b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    if constexpr (std::endian::native == std::endian::big) std::reverse(b, b + sizeof(T));
    out.append(reinterpret_cast<const char*>(b), sizeof(T));
  }
  void str(std::string_view s) {
    scalar<uint64_t>(s.size());
    out.append(s);
  }
};

// The range of each integer type, so that a value is never silently truncated on disk.
bool int_fits(GgufType t, int64_t v) {
  switch (t) {
    case GgufType::kU8:
      return std::in_range<uint8_t>(v);
    case GgufType::kI8:
      return std::in_range<int8_t>(v);
    case GgufType::kU16:
      return std::in_range<uint16_t>(v);
    case GgufType::kI16:
      return std::in_range<int16_t>(v);
    case GgufType::kU32:
      return std::in_range<uint32_t>(v);
    case GgufType::kI32:
      return std::in_range<int32_t>(v);
    case GgufType::kU64:
      return v >= 0;
    case GgufType::kI64:
      return true;
    case GgufType::kBool:
      return v == 0 || v == 1;
    default:
      return false;
  }
}

void put_int(Encoder& e, GgufType t, int64_t v) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kBool:
      return e.scalar(uint8_t(v));
    case GgufType::kI8:
      return e.scalar(int8_t(v));
    case GgufType::kU16:
      return e.scalar(uint16_t(v));
    case GgufType::kI16:
      return e.scalar(int16_t(v));
    case GgufType::kU32:
      return e.scalar(uint32_t(v));
    case GgufType::kI32:
      return e.scalar(int32_t(v));
    case GgufType::kU64:
      return e.scalar(uint64_t(v));
    default:
      return e.scalar(v);
  }
}

void put_float(Encoder& e, GgufType t, double v) {
  if (t == GgufType::kF32) return e.scalar(float(v));
  e.scalar(v);
}

// One scalar of type t (the value's i, f or s); the caller writes the type code.
Status put_scalar(Encoder& e, const std::string& where, GgufType t, int64_t i, double f,
                  const std::string& s) {
  if (t == GgufType::kString) {
    if (s.size() > kGgufMaxStringBytes)
      return invalid_argument(fmt::format("{}: a string of {} bytes, more than the limit of {}",
                                          where, s.size(), kGgufMaxStringBytes));
    e.str(s);
  } else if (io_detail::gguf_is_integer(t)) {
    if (!int_fits(t, i))
      return invalid_argument(
          fmt::format("{}: {} does not fit in {}", where, i, io_detail::gguf_type_name(t)));
    put_int(e, t, i);
  } else if (t == GgufType::kF32 || t == GgufType::kF64) {
    put_float(e, t, f);
  } else {
    return invalid_argument(
        fmt::format("{}: {} is not a GGUF value type", where, io_detail::gguf_type_name(t)));
  }
  return Status::ok_status();
}

Status put_value(Encoder& e, const std::string& where, const GgufValue& v) {
  e.scalar(uint32_t(v.type));
  if (!v.is_array()) return put_scalar(e, where, v.type, v.i, v.f, v.s);
  const GgufType et = v.elem_type;
  if (et != GgufType::kString && io_detail::gguf_scalar_bytes(et) == 0)
    return invalid_argument(fmt::format("{}: array element type {} is not supported", where,
                                        io_detail::gguf_type_name(et)));
  const size_t n = et == GgufType::kString          ? v.strings.size()
                   : io_detail::gguf_is_integer(et) ? v.ints.size()
                                                    : v.floats.size();
  if (n > kGgufMaxArrayElems)
    return invalid_argument(fmt::format("{}: {} array elements, more than the limit of {}", where,
                                        n, kGgufMaxArrayElems));
  e.scalar(uint32_t(et));
  e.scalar(uint64_t(n));
  static const std::string kNone;
  for (size_t k = 0; k < n; ++k) {
    const bool str = et == GgufType::kString, in = io_detail::gguf_is_integer(et);
    Status s = put_scalar(e, where, et, in ? v.ints[k] : 0, !str && !in ? v.floats[k] : 0.0,
                          str ? v.strings[k] : kNone);
    if (!s.ok()) return invalid_argument(fmt::format("{} (element {})", s.message(), k));
  }
  return Status::ok_status();
}

using io_detail::TempFile;

}  // namespace

struct GgufWriter::Impl {
  struct Entry {
    std::string name;
    uint64_t offset = 0;  // from the data section's start
    uint64_t bytes = 0;
  };
  std::string path;
  TempFile tmp;
  uint32_t alignment = 32;
  std::vector<Entry> tensors;
  size_t next = 0;         // the tensor write_tensor expects
  uint64_t written = 0;    // data-section bytes written so far
  uint64_t in_tensor = 0;  // bytes of tensor `next` written by write_tensor_part so far
  Status broken;           // the first write error; every later call returns it
  bool finished = false;

  Status fail(int err, std::string_view what) {
    broken = io_error(fmt::format("{}: cannot {} {}: {}", path, what, tmp.path, errno_text(err)));
    return broken;
  }
};

Result<std::unique_ptr<GgufWriter>> GgufWriter::begin(
    const std::string& path, const std::map<std::string, GgufValue, std::less<>>& metadata,
    const std::vector<Tensor>& tensors, uint32_t alignment) {
  if (!std::has_single_bit(alignment))
    return invalid_argument(
        fmt::format("{}: alignment {} is not a power of two greater than 0", path, alignment));
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->alignment = alignment;
  Encoder e;
  try {
    std::map<std::string, GgufValue, std::less<>> meta = metadata;
    auto al = meta.find("general.alignment");
    if (al != meta.end() && (al->second.type != GgufType::kU32 || al->second.i != alignment))
      return invalid_argument(
          fmt::format("{}: key \"general.alignment\" must be a u32 equal to the alignment {}", path,
                      alignment));
    // Readers assume 32 when the key is absent.
    if (al == meta.end() && alignment != io_detail::kGgufDefaultAlignment)
      meta["general.alignment"] = GgufValue::of_int(GgufType::kU32, alignment);

    e.out.append(reinterpret_cast<const char*>(io_detail::kGgufMagic), 4);
    e.scalar<uint32_t>(3);
    e.scalar<uint64_t>(tensors.size());
    e.scalar<uint64_t>(meta.size());
    for (const auto& [key, value] : meta) {
      const std::string where = fmt::format("{}: key {}", path, quote_text(key, true));
      if (key.empty() || !io_detail::gguf_valid_utf8(key) || key.size() > kGgufMaxStringBytes)
        return invalid_argument(where + ": a key must be non-empty UTF-8");
      e.str(key);
      MLA_RETURN_IF_ERROR(put_value(e, where, value));
    }

    std::unordered_set<std::string_view> names;
    uint64_t offset = 0;
    for (const Tensor& t : tensors) {
      const std::string where = fmt::format("{}: tensor {}", path, quote_text(t.name, true));
      if (t.name.empty() || !io_detail::gguf_valid_utf8(t.name) ||
          t.name.size() > kGgufMaxStringBytes)
        return invalid_argument(where + ": a name must be non-empty UTF-8");
      if (!names.insert(t.name).second) return invalid_argument(where + ": name appears twice");
      const std::optional<uint32_t> code = io_detail::ggml_code_of(t.dtype);
      if (!code)
        return invalid_argument(
            fmt::format("{}: dtype {} has no GGUF type", where, dtype_name(t.dtype)));
      if (t.shape.empty() || t.shape.size() > size_t(kGgufMaxDims))
        return invalid_argument(
            fmt::format("{}: rank {} is not in [1, {}]", where, t.shape.size(), kGgufMaxDims));
      Result<io_detail::TensorSize> size = io_detail::gguf_tensor_size(t.dtype, t.shape);
      if (!size.ok()) return invalid_argument(where + ": " + size.status().message());
      const std::optional<uint64_t> at = checked_align_up(offset, uint64_t(alignment));
      const std::optional<uint64_t> end = checked_add(at.value_or(0), size->bytes);
      if (!at || !end) return invalid_argument(where + ": the data section passes 2^64 bytes");
      e.str(t.name);
      e.scalar<uint32_t>(uint32_t(t.shape.size()));
      for (auto d = t.shape.rbegin(); d != t.shape.rend(); ++d) e.scalar<uint64_t>(uint64_t(*d));
      e.scalar<uint32_t>(*code);
      e.scalar<uint64_t>(*at);
      impl->tensors.push_back({t.name, *at, size->bytes});
      offset = *end;
    }
    e.out.append((alignment - e.out.size() % alignment) % alignment, '\0');
  } catch (const std::bad_alloc&) {
    return out_of_memory(path + ": out of memory building the GGUF header");
  }

  // Unique per process and call, so concurrent writers of one target never share a temp.
  static std::atomic<uint64_t> counter{0};
  impl->tmp.path = fmt::format("{}.tmp.{}.{}", path, ::getpid(), counter.fetch_add(1));
  do {
    impl->tmp.fd = ::open(impl->tmp.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  } while (impl->tmp.fd < 0 && errno == EINTR);
  if (impl->tmp.fd < 0) {
    const int err = errno;
    impl->tmp.keep = true;  // nothing was created
    return io_error(fmt::format("{}: cannot create {}: {}", path, impl->tmp.path, errno_text(err)));
  }
  if (const int err = write_all(impl->tmp.fd, e.out.data(), e.out.size()))
    return impl->fail(err, "write");
  std::unique_ptr<GgufWriter> w(new GgufWriter());
  w->impl_ = std::move(impl);
  return w;
}

Status GgufWriter::write_tensor(std::string_view name, std::span<const uint8_t> bytes) {
  Impl& m = *impl_;
  MLA_RETURN_IF_ERROR(m.broken);
  if (!m.finished && m.next < m.tensors.size() && name == m.tensors[m.next].name &&
      (m.in_tensor != 0 || bytes.size() != m.tensors[m.next].bytes))
    return invalid_argument(fmt::format("{}: tensor {}: {} bytes given, its shape needs {}", m.path,
                                        quote_text(name, true), bytes.size(),
                                        m.tensors[m.next].bytes - m.in_tensor));
  return write_tensor_part(name, bytes);
}

Status GgufWriter::write_tensor_part(std::string_view name, std::span<const uint8_t> bytes) {
  Impl& m = *impl_;
  MLA_RETURN_IF_ERROR(m.broken);
  if (m.finished) return invalid_argument(m.path + ": write_tensor after finish");
  if (m.next == m.tensors.size())
    return invalid_argument(
        fmt::format("{}: tensor {} was not declared at begin(), or is "
                    "written twice",
                    m.path, quote_text(name, true)));
  const Impl::Entry& t = m.tensors[m.next];
  if (name != t.name)
    return invalid_argument(fmt::format("{}: tensor {} written where {} comes next", m.path,
                                        quote_text(name, true), quote_text(t.name, true)));
  if (bytes.size() > t.bytes - m.in_tensor)
    return invalid_argument(fmt::format("{}: tensor {}: {} bytes given, {} are left of it", m.path,
                                        quote_text(name, true), bytes.size(),
                                        t.bytes - m.in_tensor));
  if (m.in_tensor == 0)
    if (int err = write_zeros(m.tmp.fd, t.offset - m.written)) return m.fail(err, "write");
  if (int err = write_all(m.tmp.fd, bytes.data(), bytes.size())) return m.fail(err, "write");
  m.in_tensor += bytes.size();
  m.written = t.offset + m.in_tensor;
  if (m.in_tensor == t.bytes) {
    ++m.next;
    m.in_tensor = 0;
  }
  return Status::ok_status();
}

Status GgufWriter::finish() {
  Impl& m = *impl_;
  MLA_RETURN_IF_ERROR(m.broken);
  if (m.finished) return Status::ok_status();
  if (m.next != m.tensors.size())
    return invalid_argument(fmt::format("{}: finish() before tensor {} was written", m.path,
                                        quote_text(m.tensors[m.next].name, true)));
  // Whole-alignment tail, as llama.cpp's writers leave it.
  if (int err = write_zeros(m.tmp.fd, (m.alignment - m.written % m.alignment) % m.alignment))
    return m.fail(err, "write");
  // Durable before it becomes visible under the final name.
  if (::fsync(m.tmp.fd) != 0) return m.fail(errno, "fsync");
  const int fd = std::exchange(m.tmp.fd, -1);
  if (::close(fd) != 0) return m.fail(errno, "close");
  if (::rename(m.tmp.path.c_str(), m.path.c_str()) != 0) return m.fail(errno, "rename");
  m.tmp.keep = true;
  m.finished = true;
  return Status::ok_status();
}

GgufWriter::~GgufWriter() = default;  // Impl's TempFile closes and unlinks an unfinished file

}  // namespace mla
