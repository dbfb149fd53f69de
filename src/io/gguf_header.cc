// Validation of a GGUF image in one forward pass over the header: every length is checked against
// the bytes left before anything is allocated for it, then the tensor table is checked as a whole
// (unique names, each tensor inside the data section, no two overlapping).
#include "io/gguf_header.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <new>
#include <utility>

#include "core/checked_math.h"

namespace mla::io_detail {
namespace {

constexpr uint64_t kMaxInt64 = uint64_t(std::numeric_limits<int64_t>::max());

// The smallest key/value (1-byte key, u8 value) and tensor info (1-byte name, one dim): lower
// bounds used to refuse a count that the rest of the file could not hold.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;

template <typename T>
T load_le(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  if constexpr (std::endian::native == std::endian::big) {
    using U = std::make_unsigned_t<T>;
    U u = 0;
    for (size_t i = 0; i < sizeof(T); ++i) u = U(u | U(U(p[i]) << (8 * i)));
    std::memcpy(&v, &u, sizeof(T));
  }
  return v;
}

// Reads the image front to back. The first failure sets `status` and every read after it fails.
// Error messages say where the read was (a key, a tensor, an array element) without building
// that text until a failure needs it.
class Cursor {
 public:
  Cursor(const std::string& path, const uint8_t* bytes, uint64_t size)
      : path_(path), bytes_(bytes), size_(size) {}

  Status status;
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }

  // What is being read: `kind` with either `name` (quoted) or `index`.
  void at(const char* kind, uint64_t index, const std::string* name = nullptr) {
    kind_ = kind;
    index_ = index;
    name_ = name;
    elem_ = -1;
  }

  std::string where() const {
    std::string w = name_ ? fmt::format("{} {}", kind_, quote_text(*name_, true))
                          : fmt::format("{} {}", kind_, index_);
    if (elem_ >= 0) w += fmt::format(" element {}", elem_);
    return w;
  }
  bool fail(std::string_view what) {
    status = data_loss(fmt::format("{}: {}: {}", path_, where(), what));
    return false;
  }
  Status error(std::string_view what) {
    fail(what);
    return status;
  }

  bool need(uint64_t n, std::string_view field) {
    if (n <= left()) return true;
    return fail(
        fmt::format("{} at byte {} needs {} bytes but the {}-byte file ends first "
                    "(truncated?)",
                    field, pos_, n, size_));
  }
  template <typename T>
  bool scalar(T& v, std::string_view field) {
    if (!need(sizeof(T), field)) return false;
    v = load_le<T>(bytes_ + pos_);
    pos_ += sizeof(T);
    return true;
  }
  bool str(std::string& out, std::string_view field) {
    uint64_t n;
    if (!scalar(n, field)) return false;
    if (n > kGgufMaxStringBytes)
      return fail(fmt::format("{} has length {}, more than the limit of {} bytes", field, n,
                              kGgufMaxStringBytes));
    if (!need(n, field)) return false;
    out.assign(reinterpret_cast<const char*>(bytes_ + pos_), size_t(n));
    pos_ += n;
    return true;
  }

  bool integer(GgufType t, int64_t& out) {
    switch (t) {
      case GgufType::kU8:
        return read_as<uint8_t>(out);
      case GgufType::kI8:
        return read_as<int8_t>(out);
      case GgufType::kU16:
        return read_as<uint16_t>(out);
      case GgufType::kI16:
        return read_as<int16_t>(out);
      case GgufType::kU32:
        return read_as<uint32_t>(out);
      case GgufType::kI32:
        return read_as<int32_t>(out);
      case GgufType::kI64:
        return read_as<int64_t>(out);
      case GgufType::kU64: {
        uint64_t v;
        if (!scalar(v, "u64 value")) return false;
        if (v > kMaxInt64) return fail(fmt::format("u64 value {} is more than 2^63-1", v));
        out = int64_t(v);
        return true;
      }
      case GgufType::kBool: {
        uint8_t v;
        if (!scalar(v, "bool value")) return false;
        if (v > 1) return fail(fmt::format("bool value {} is neither 0 nor 1", v));
        out = v;
        return true;
      }
      default:
        return fail("not an integer type");  // callers switch on the type first
    }
  }
  bool floating(GgufType t, double& out) {
    if (t == GgufType::kF64) return scalar(out, "f64 value");
    float f;
    if (!scalar(f, "f32 value")) return false;
    out = f;
    return true;
  }

  bool value(GgufType t, GgufValue& v) {
    v.type = t;
    if (t == GgufType::kString) return str(v.s, "string value");
    if (t == GgufType::kArray) return array(v);
    if (gguf_is_integer(t)) return integer(t, v.i);
    if (t == GgufType::kF32 || t == GgufType::kF64) return floating(t, v.f);
    return fail(fmt::format("value type {} is not a GGUF type (0 to 12)", uint32_t(t)));
  }

 private:
  template <typename T>
  bool read_as(int64_t& out) {
    T v;
    if (!scalar(v, "integer value")) return false;
    out = int64_t(v);
    return true;
  }

  bool array(GgufValue& v) {
    uint32_t code;
    if (!scalar(code, "array element type")) return false;
    const GgufType et = GgufType(code);
    v.elem_type = et;
    if (et == GgufType::kArray) return fail("arrays of arrays are not supported");
    const uint64_t min_bytes = et == GgufType::kString ? 8 : uint64_t(gguf_scalar_bytes(et));
    if (min_bytes == 0)
      return fail(fmt::format("array element type {} is not a GGUF type (0 to 12)", code));
    uint64_t n;
    if (!scalar(n, "array length")) return false;
    if (n > kGgufMaxArrayElems)
      return fail(
          fmt::format("array length {} is more than the limit of {}", n, kGgufMaxArrayElems));
    if (!count_fits(n, min_bytes, left()))
      return fail(fmt::format(
          "array of {} {} needs at least {} bytes per element but {} bytes are left (truncated?)",
          n, gguf_type_name(et), min_bytes, left()));
    if (et == GgufType::kString) {
      v.strings.resize(size_t(n));
      for (uint64_t i = 0; i < n; ++i) {
        elem_ = int64_t(i);
        if (!str(v.strings[i], "string")) return false;
      }
    } else if (gguf_is_integer(et)) {
      v.ints.resize(size_t(n));
      for (uint64_t i = 0; i < n; ++i) {
        elem_ = int64_t(i);
        if (!integer(et, v.ints[i])) return false;
      }
    } else {
      v.floats.resize(size_t(n));
      for (uint64_t i = 0; i < n; ++i) {
        elem_ = int64_t(i);
        if (!floating(et, v.floats[i])) return false;
      }
    }
    elem_ = -1;
    return true;
  }

  const std::string& path_;
  const uint8_t* bytes_;
  const uint64_t size_;
  uint64_t pos_ = 0;
  const char* kind_ = "header";
  uint64_t index_ = 0;
  const std::string* name_ = nullptr;
  int64_t elem_ = -1;
};

Status check_version(const std::string& path, uint32_t version) {
  if (version == 2 || version == 3) return Status::ok_status();
  if (version == 1)
    return unimplemented(fmt::format(
        "{}: GGUF version 1 (32-bit counts, before August 2023) is not supported; convert the "
        "model again with a current llama.cpp",
        path));
  // A big-endian file stores version 3 as 03 00 00 00 read backwards.
  if ((version & 0xFFFF) == 0 && (version >> 16) != 0)
    return unimplemented(fmt::format(
        "{}: a big-endian GGUF file (version field {:#010x}) is not supported", path, version));
  if (version > 3 && version < 0x10000)
    return unimplemented(fmt::format(
        "{}: GGUF version {} is newer than the versions mla reads (2, 3)", path, version));
  return data_loss(fmt::format("{}: GGUF version {} is not a valid version", path, version));
}

Result<uint32_t> read_alignment(const std::string& path,
                                const std::map<std::string, GgufValue, std::less<>>& meta) {
  auto it = meta.find("general.alignment");
  if (it == meta.end()) return kGgufDefaultAlignment;
  const GgufValue& v = it->second;
  if (v.type != GgufType::kU32)
    return data_loss(fmt::format("{}: key \"general.alignment\" has type {}, not u32", path,
                                 gguf_type_name(v.type)));
  if (!std::has_single_bit(uint64_t(v.i)))
    return data_loss(fmt::format(
        "{}: key \"general.alignment\" is {}, not a power of two greater than 0", path, v.i));
  return uint32_t(v.i);
}

Status read_tensor_info(Cursor& c, const std::string& path, uint32_t alignment, TensorInfo& t) {
  if (!c.str(t.name, "name")) return c.status;
  if (t.name.empty()) return c.error("name is empty");
  if (!gguf_valid_utf8(t.name)) return c.error("name is not valid UTF-8");
  c.at("tensor", 0, &t.name);
  uint32_t n_dims;
  if (!c.scalar(n_dims, "n_dims")) return c.status;
  if (n_dims < 1 || n_dims > uint32_t(kGgufMaxDims))
    return c.error(fmt::format("n_dims is {}, not in [1, {}]", n_dims, kGgufMaxDims));
  t.shape.assign(n_dims, 0);
  for (uint32_t d = 0; d < n_dims; ++d) {
    uint64_t ne;
    if (!c.scalar(ne, "ne")) return c.status;
    if (ne > kMaxInt64) return c.error(fmt::format("ne[{}] is {}, more than 2^63-1", d, ne));
    t.shape[n_dims - 1 - d] = int64_t(ne);  // ne is innermost first; shape is row-major
  }
  uint32_t code;
  uint64_t offset;
  if (!c.scalar(code, "type") || !c.scalar(offset, "offset")) return c.status;
  const std::optional<DType> dtype = ggml_type_to_dtype(code);
  if (!dtype)
    return unimplemented(fmt::format("{}: {}: ggml type {} (code {}) is not supported by mla", path,
                                     c.where(), ggml_type_name(code), code));
  t.dtype = *dtype;
  Result<TensorSize> size = gguf_tensor_size(t.dtype, t.shape);
  if (!size.ok()) return c.error(size.status().message());
  if (offset % alignment != 0)
    return c.error(
        fmt::format("offset {} is not a multiple of the alignment {}", offset, alignment));
  t.numel = size->numel;
  t.byte_size = size->bytes;
  t.byte_offset = offset;
  return Status::ok_status();
}

// Every tensor inside the data section and no byte claimed by two tensors. Gaps are normal: the
// writer pads each tensor to the alignment.
Status check_layout(const std::string& path, const std::vector<TensorInfo>& tensors,
                    uint64_t data_size) {
  for (const TensorInfo& t : tensors)
    if (!range_inside(t.byte_offset, t.byte_size, data_size))
      return data_loss(fmt::format(
          "{}: tensor {}: bytes [{}, +{}) run past the end of the data section, which holds {} "
          "bytes (truncated file?)",
          path, quote_text(t.name, true), t.byte_offset, t.byte_size, data_size));
  std::vector<uint32_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = uint32_t(i);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return tensors[a].byte_offset < tensors[b].byte_offset;
  });
  const TensorInfo* reach = nullptr;  // the tensor that ends furthest so far
  for (uint32_t i : order) {
    const TensorInfo& t = tensors[i];
    if (t.byte_size == 0) continue;
    if (reach && t.byte_offset < reach->byte_offset + reach->byte_size)
      return data_loss(fmt::format("{}: tensor {}: bytes [{}, +{}) overlap tensor {} at [{}, +{})",
                                   path, quote_text(t.name, true), t.byte_offset, t.byte_size,
                                   quote_text(reach->name, true), reach->byte_offset,
                                   reach->byte_size));
    if (!reach || t.byte_offset + t.byte_size > reach->byte_offset + reach->byte_size) reach = &t;
  }
  return Status::ok_status();
}

Status parse_into(const std::string& path, const uint8_t* bytes, uint64_t size, ParsedGguf& out) {
  if (size < 4)
    return data_loss(
        fmt::format("{}: not a GGUF file: {} bytes, fewer than the 4-byte magic", path, size));
  if (std::memcmp(bytes, kGgufMagic, 4) != 0)
    return data_loss(
        fmt::format("{}: not a GGUF file: starts with {}, not \"GGUF\"", path,
                    quote_text(std::string_view(reinterpret_cast<const char*>(bytes), 4), true)));
  Cursor c(path, bytes, size);
  uint32_t magic;
  uint64_t n_tensors, n_kv;
  if (!c.scalar(magic, "magic") || !c.scalar(out.version, "version")) return c.status;
  MLA_RETURN_IF_ERROR(check_version(path, out.version));
  if (!c.scalar(n_tensors, "tensor count") || !c.scalar(n_kv, "metadata count")) return c.status;
  if (!count_fits(n_kv, kMinKvBytes, c.left()))
    return data_loss(
        fmt::format("{}: header: metadata count {} cannot fit in the {} bytes left (truncated?)",
                    path, n_kv, c.left()));

  for (uint64_t i = 0; i < n_kv; ++i) {
    c.at("metadata entry", i);
    std::string key;
    if (!c.str(key, "key")) return c.status;
    if (key.empty()) return c.error("key is empty");
    if (!gguf_valid_utf8(key)) return c.error("key is not valid UTF-8");
    c.at("key", 0, &key);
    uint32_t type;
    GgufValue v;
    if (!c.scalar(type, "value type") || !c.value(GgufType(type), v)) return c.status;
    auto [it, inserted] = out.metadata.try_emplace(std::move(key));
    if (!inserted) {
      c.at("key", 0, &it->first);
      return c.error("appears twice");
    }
    it->second = std::move(v);
  }
  MLA_ASSIGN_OR_RETURN(out.alignment, read_alignment(path, out.metadata));

  if (n_tensors > std::numeric_limits<uint32_t>::max() ||
      !count_fits(n_tensors, kMinTensorInfoBytes, c.left()))
    return data_loss(
        fmt::format("{}: header: tensor count {} cannot fit in the {} bytes left (truncated?)",
                    path, n_tensors, c.left()));
  out.tensors.resize(size_t(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    c.at("tensor info", i);
    MLA_RETURN_IF_ERROR(read_tensor_info(c, path, out.alignment, out.tensors[i]));
  }
  out.header_end = c.pos();
  const std::optional<uint64_t> data_offset =
      checked_align_up(out.header_end, uint64_t(out.alignment));
  if (!data_offset || (n_tensors > 0 && *data_offset > size))
    return data_loss(fmt::format(
        "{}: the data section would start at byte {} (header end {} rounded up to {}), past the "
        "end of the {}-byte file (truncated?)",
        path, data_offset.value_or(0), out.header_end, out.alignment, size));
  out.data_offset = *data_offset;

  out.by_name.resize(out.tensors.size());
  for (size_t i = 0; i < out.by_name.size(); ++i) out.by_name[i] = uint32_t(i);
  std::sort(out.by_name.begin(), out.by_name.end(),
            [&](uint32_t a, uint32_t b) { return out.tensors[a].name < out.tensors[b].name; });
  for (size_t i = 1; i < out.by_name.size(); ++i)
    if (out.tensors[out.by_name[i]].name == out.tensors[out.by_name[i - 1]].name)
      return data_loss(fmt::format("{}: tensor {} appears twice (tensor infos {} and {})", path,
                                   quote_text(out.tensors[out.by_name[i]].name, true),
                                   std::min(out.by_name[i - 1], out.by_name[i]),
                                   std::max(out.by_name[i - 1], out.by_name[i])));
  return check_layout(path, out.tensors, size > out.data_offset ? size - out.data_offset : 0);
}

}  // namespace

Result<ParsedGguf> parse_gguf(const std::string& path, const uint8_t* bytes, uint64_t size) {
  ParsedGguf out;
  try {
    MLA_RETURN_IF_ERROR(parse_into(path, bytes, size, out));
  } catch (const std::bad_alloc&) {
    return out_of_memory(fmt::format("{}: out of memory reading the GGUF header", path));
  }
  return out;
}

}  // namespace mla::io_detail
