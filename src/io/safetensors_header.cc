// Validation of a safetensors image: length prefix checks, one SAX pass over the JSON header that
// rejects duplicates and mistyped fields as it reads them (no DOM, no nesting beyond the format's
// three levels), per-tensor size checks, and the tiling of the data section.
#include "io/safetensors_header.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <limits>
#include <new>
#include <nlohmann/json.hpp>
#include <unordered_set>
#include <utility>

#include "core/checked_math.h"

namespace mla::io_detail {
namespace {

constexpr uint64_t kMaxInt64 = uint64_t(std::numeric_limits<int64_t>::max());

// Spellings in the safetensors spec that mla does not load: a valid file, an unsupported request.
constexpr std::string_view kUnsupportedDtypes[] = {"U16",     "U32",     "U64",     "C64",
                                                   "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2"};

uint64_t load_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string offsets_string(uint64_t begin, uint64_t end) {
  return fmt::format("[{}, {}]", begin, end);
}

// One SAX pass over the header (the handler interface of nlohmann::json::sax_parse). Each event
// either fits the format at the current position or ends the parse with `status` set, so depth
// never exceeds object → tensor object → shape array.
class HeaderReader {
 public:
  using json = nlohmann::json;

  HeaderReader(const std::string& path, uint64_t data_size) : path_(path), data_size_(data_size) {}

  Status status;
  ParsedSafetensors result;
  bool done() const { return state_ == State::kDone; }

  bool null() { return reject_value("null"); }
  bool boolean(bool v) { return reject_value(v ? "true" : "false"); }
  bool binary(json::binary_t&) { return reject_value("binary data"); }
  bool number_float(double, const std::string& text) { return reject_value(text); }
  bool number_integer(int64_t v) {
    if (v >= 0) return number_unsigned(uint64_t(v));  // "-0"
    return reject_value(std::to_string(v));
  }

  bool number_unsigned(uint64_t v) {
    if (state_ == State::kShape) {
      if (v > kMaxInt64)
        return fail_tensor(
            fmt::format("shape entry {} is {}, more than 2^63-1", entry_.shape.size(), v));
      entry_.shape.push_back(int64_t(v));
      return true;
    }
    if (state_ == State::kOffsets) {
      if (entry_.offsets_count == 2) return fail_tensor("data_offsets has more than 2 entries");
      entry_.offsets[entry_.offsets_count++] = v;
      return true;
    }
    return reject_value(std::to_string(v));
  }

  bool string(std::string& v) {
    if (state_ == State::kMetadata) {
      result.metadata.emplace(std::move(meta_key_), std::move(v));
      return true;
    }
    if (state_ == State::kTensor && field_ == Field::kDtype) {
      std::optional<DType> t = dtype_from_name(v);
      if (!t) {
        std::string msg = fmt::format("{}dtype {}", tensor_prefix(), quote_text(v));
        for (std::string_view u : kUnsupportedDtypes)
          if (v == u) return fail(unimplemented(msg + " is not supported by mla"));
        return fail(data_loss(msg + " is not a safetensors dtype"));
      }
      entry_.dtype = *t;
      return true;
    }
    return reject_value("a string");
  }

  bool start_object(size_t) {
    if (state_ == State::kStart) {
      state_ = State::kTop;
      return true;
    }
    if (state_ == State::kTop) {
      if (key_ == "__metadata__") {
        state_ = State::kMetadata;
      } else {
        state_ = State::kTensor;
        entry_ = Entry{};
      }
      return true;
    }
    return reject_value("an object");
  }

  bool key(std::string& k) {
    switch (state_) {
      case State::kTop:
        if (!top_keys_.insert(k).second)
          return fail(data_loss(
              fmt::format("{}: {} appears twice in the header", path_,
                          k == "__metadata__" ? quote_text(k) : "tensor " + quote_text(k))));
        key_ = std::move(k);
        return true;
      case State::kMetadata:
        if (result.metadata.count(k))
          return fail(data_loss(
              fmt::format("{}: \"__metadata__\" has key {} twice", path_, quote_text(k))));
        meta_key_ = std::move(k);
        return true;
      case State::kTensor: {
        Field f = k == "dtype"          ? Field::kDtype
                  : k == "shape"        ? Field::kShape
                  : k == "data_offsets" ? Field::kOffsets
                                        : Field::kNone;
        if (f == Field::kNone)
          return fail_tensor(fmt::format(
              "unknown field {} (a tensor has exactly dtype, shape, data_offsets)", quote_text(k)));
        if (entry_.seen[int(f)]) return fail_tensor(fmt::format("field {} appears twice", k));
        entry_.seen[int(f)] = true;
        field_ = f;
        return true;
      }
      default:
        return fail(data_loss(path_ + ": header has an object key in an unexpected place"));
    }
  }

  bool end_object() {
    if (state_ == State::kMetadata) {
      state_ = State::kTop;
      return true;
    }
    if (state_ == State::kTensor) {
      state_ = State::kTop;
      return finish_entry();
    }
    state_ = State::kDone;  // the top-level object; strict parsing rejects anything after it
    return true;
  }

  bool start_array(size_t) {
    if (state_ == State::kTensor && field_ == Field::kShape) {
      state_ = State::kShape;
      return true;
    }
    if (state_ == State::kTensor && field_ == Field::kOffsets) {
      state_ = State::kOffsets;
      return true;
    }
    return reject_value("an array");
  }

  bool end_array() {
    if (state_ == State::kOffsets && entry_.offsets_count != 2)
      return fail_tensor(
          fmt::format("data_offsets has {} entries, needs 2 (begin, end)", entry_.offsets_count));
    state_ = State::kTensor;
    return true;
  }

  bool parse_error(size_t, const std::string&, const nlohmann::detail::exception& ex) {
    return fail(data_loss(fmt::format("{}: header is not valid UTF-8 JSON: {}", path_,
                                      quote_text(ex.what(), /*escape_non_ascii=*/true, 300))));
  }

 private:
  enum class State { kStart, kTop, kMetadata, kTensor, kShape, kOffsets, kDone };
  enum class Field { kDtype, kShape, kOffsets, kNone };
  struct Entry {
    bool seen[3] = {false, false, false};  // indexed by Field
    DType dtype = DType::kF32;
    std::vector<int64_t> shape;
    uint64_t offsets[2] = {0, 0};
    int offsets_count = 0;
  };

  bool fail(Status s) {
    status = std::move(s);
    return false;
  }
  std::string tensor_prefix() const {
    return fmt::format("{}: tensor {}: ", path_, quote_text(key_));
  }
  bool fail_tensor(const std::string& what) { return fail(data_loss(tensor_prefix() + what)); }

  // A value of the wrong kind (`got` describes it) at the current position.
  bool reject_value(std::string_view got) {
    // A number literal can be arbitrarily long; show its start, escaped, without the quotes.
    std::string g = quote_text(got.substr(0, 40), /*escape_non_ascii=*/true);
    g = g.substr(1, g.size() - 2);
    if (got.size() > 40) g += "...";
    switch (state_) {
      case State::kStart:
        return fail(
            data_loss(fmt::format("{}: header top level is not an object (got {})", path_, g)));
      case State::kTop:
        if (key_ == "__metadata__")
          return fail(
              data_loss(fmt::format("{}: \"__metadata__\" is not an object (got {})", path_, g)));
        return fail_tensor(fmt::format("entry is not an object (got {})", g));
      case State::kMetadata:
        return fail(
            data_loss(fmt::format("{}: \"__metadata__\" value of {} is not a string (got {})",
                                  path_, quote_text(meta_key_), g)));
      case State::kTensor: {
        static constexpr std::string_view kWant[] = {
            "dtype is not a string", "shape is not an array", "data_offsets is not an array", "?"};
        return fail_tensor(fmt::format("{} (got {})", kWant[int(field_)], g));
      }
      case State::kShape:
        return fail_tensor(fmt::format("shape entry {} is not a non-negative integer (got {})",
                                       entry_.shape.size(), g));
      case State::kOffsets:
        return fail_tensor(
            fmt::format("data_offsets entry {} is not a non-negative integer (got {})",
                        entry_.offsets_count, g));
      case State::kDone:
        break;
    }
    return fail(data_loss(fmt::format("{}: header has a value after its end (got {})", path_, g)));
  }

  bool finish_entry() {
    static constexpr const char* kNames[] = {"dtype", "shape", "data_offsets"};
    for (int f = 0; f < 3; ++f)
      if (!entry_.seen[f]) return fail_tensor(fmt::format("missing field \"{}\"", kNames[f]));
    const uint64_t begin = entry_.offsets[0], end = entry_.offsets[1];
    const std::string offs = offsets_string(begin, end);
    if (begin > end) return fail_tensor(fmt::format("data_offsets {} begin after end", offs));
    Result<TensorSize> size = tensor_size(entry_.dtype, entry_.shape);
    if (!size.ok()) return fail_tensor(size.status().message());
    if (end - begin != size->bytes)
      return fail_tensor(fmt::format("data_offsets {} hold {} bytes but shape {} of {} needs {}",
                                     offs, end - begin, shape_string(entry_.shape),
                                     dtype_name(entry_.dtype), size->bytes));
    if (!range_inside(begin, end - begin, data_size_))
      return fail_tensor(
          fmt::format("data_offsets {} run past the end of the data section, which holds {} bytes "
                      "(truncated file?)",
                      offs, data_size_));
    TensorInfo t;
    t.name = std::move(key_);
    t.dtype = entry_.dtype;
    t.shape = std::move(entry_.shape);
    t.numel = size->numel;
    t.byte_offset = begin;
    t.byte_size = size->bytes;
    result.tensors.push_back(std::move(t));
    return true;
  }

  const std::string& path_;
  const uint64_t data_size_;
  State state_ = State::kStart;
  Field field_ = Field::kNone;
  std::string key_;       // the current top-level key: a tensor name or "__metadata__"
  std::string meta_key_;  // the current "__metadata__" key
  Entry entry_;
  std::unordered_set<std::string> top_keys_;
};

// Sorted by offset, the tensors must cover [0, data_size) exactly once (zero-size tensors sit
// between neighbours). Same rule as the reference Rust reader, so that a file cannot hide bytes
// (a polyglot) or alias one range under two names.
Status check_tiling(const std::string& path, const std::vector<TensorInfo>& tensors,
                    uint64_t data_size) {
  uint64_t expected = 0;
  const TensorInfo* prev = nullptr;
  for (const TensorInfo& t : tensors) {
    const std::string offs = offsets_string(t.byte_offset, t.byte_offset + t.byte_size);
    if (t.byte_offset < expected)
      return data_loss(
          fmt::format("{}: tensor {}: data_offsets {} overlap tensor {} at {}", path,
                      quote_text(t.name), offs, quote_text(prev->name),
                      offsets_string(prev->byte_offset, prev->byte_offset + prev->byte_size)));
    if (t.byte_offset > expected) {
      if (!prev)
        return data_loss(fmt::format(
            "{}: tensor {}: data_offsets {} leave a hole of {} bytes at the start of the data "
            "section",
            path, quote_text(t.name), offs, t.byte_offset));
      return data_loss(
          fmt::format("{}: tensor {}: data_offsets {} leave a hole of {} bytes after tensor {}, "
                      "which ends at {}",
                      path, quote_text(t.name), offs, t.byte_offset - expected,
                      quote_text(prev->name), expected));
    }
    expected = t.byte_offset + t.byte_size;  // <= data_size: finish_entry checked range_inside
    prev = &t;
  }
  if (expected != data_size) {
    if (!prev)
      return data_loss(fmt::format(
          "{}: data section holds {} bytes but the header lists no tensors", path, data_size));
    return data_loss(
        fmt::format("{}: {} trailing bytes after the last tensor {}, which ends at {} of a {}-byte "
                    "data section",
                    path, data_size - expected, quote_text(prev->name), expected, data_size));
  }
  return Status::ok_status();
}

}  // namespace

Result<ParsedSafetensors> parse_safetensors(const std::string& path, const uint8_t* bytes,
                                            uint64_t size) {
  if (size < 8)
    return data_loss(fmt::format(
        "{}: header too small: the file has {} bytes, fewer than the 8-byte length prefix", path,
        size));
  const uint64_t n = load_le64(bytes);
  if (n > kSafetensorsMaxHeaderBytes)
    return data_loss(fmt::format("{}: header length {} exceeds the limit of {} bytes", path, n,
                                 kSafetensorsMaxHeaderBytes));
  if (n > size - 8)
    return data_loss(fmt::format(
        "{}: header length {} runs past the end of the file ({} bytes after the length prefix)",
        path, n, size - 8));
  const char* header = reinterpret_cast<const char*>(bytes + 8);
  if (n == 0 || header[0] != '{')
    return data_loss(
        fmt::format("{}: header does not start with '{{' (starts with {})", path,
                    quote_text(std::string_view(header, std::min<uint64_t>(n, 16)), true)));

  // nlohmann's lexer takes a NUL byte for the end of input, which would accept "{}\0\0..." padding
  // and anything hidden after it. A raw NUL is never valid in JSON text, inside strings or out.
  if (const void* nul = std::memchr(header, 0, n))
    return data_loss(fmt::format("{}: header has a NUL byte at offset {} (padding must be spaces)",
                                 path, static_cast<const char*>(nul) - header));

  HeaderReader reader(path, size - 8 - n);
  bool parsed = false;
  try {
    parsed = nlohmann::json::sax_parse(header, header + n, &reader,
                                       nlohmann::json::input_format_t::json, /*strict=*/true,
                                       /*ignore_comments=*/false);
  } catch (const std::bad_alloc&) {
    return out_of_memory(fmt::format("{}: out of memory parsing a {}-byte header", path, n));
  } catch (const std::exception& e) {
    return data_loss(
        fmt::format("{}: header could not be parsed: {}", path, quote_text(e.what(), true, 300)));
  }
  if (!parsed) {
    if (!reader.status.ok()) return reader.status;
    return data_loss(path + ": header could not be parsed");
  }
  if (!reader.done()) return data_loss(path + ": header ended before its top-level object closed");

  ParsedSafetensors out = std::move(reader.result);
  out.header_size = n;
  std::sort(out.tensors.begin(), out.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    if (a.byte_offset != b.byte_offset) return a.byte_offset < b.byte_offset;
    if (a.byte_size != b.byte_size) return a.byte_size < b.byte_size;
    return a.name < b.name;
  });
  MLA_RETURN_IF_ERROR(check_tiling(path, out.tensors, size - 8 - n));
  return out;
}

Result<int64_t> shape_numel(const std::vector<int64_t>& shape) {
  // int64 numel, with the zero dims skipped (checked_product's rule), so that strides computed
  // from the non-zero dims never overflow even for a zero-size tensor.
  int64_t numel = 1;
  bool zero = false;
  for (int64_t d : shape) {
    if (d < 0)
      return invalid_argument(
          fmt::format("shape {} has a negative dim {}", shape_string(shape), d));
    if (d == 0) {
      zero = true;
      continue;
    }
    const std::optional<int64_t> next = checked_mul(numel, d);
    if (!next)
      return invalid_argument(
          fmt::format("shape {} has more than 2^63-1 elements", shape_string(shape)));
    numel = *next;
  }
  return zero ? 0 : numel;
}

Result<TensorSize> tensor_size(DType dtype, const std::vector<int64_t>& shape) {
  MLA_ASSIGN_OR_RETURN(const int64_t numel, shape_numel(shape));
  const std::optional<uint64_t> bits = checked_mul(uint64_t(numel), uint64_t(dtype_bits(dtype)));
  if (!bits)
    return invalid_argument(fmt::format("shape {} of {} needs more than 2^64-1 bits",
                                        shape_string(shape), dtype_name(dtype)));
  if (*bits % 8 != 0)
    return invalid_argument(
        fmt::format("shape {} of {} holds {} elements = {} bits, not a whole number of bytes",
                    shape_string(shape), dtype_name(dtype), numel, *bits));
  return TensorSize{numel, *bits / 8};
}

std::string shape_string(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

std::string quote_text(std::string_view s, bool escape_non_ascii, size_t max_bytes) {
  std::string out = "\"";
  size_t i = 0;
  for (; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    // Cut only at a character boundary so that the message stays valid UTF-8.
    if (out.size() >= max_bytes && (escape_non_ascii || (c & 0xC0) != 0x80)) break;
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20 || c == 0x7F || (c >= 0x80 && escape_non_ascii)) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += char(c);
    }
  }
  out += '"';
  if (i < s.size()) out += fmt::format("... ({} bytes)", s.size());
  return out;
}

}  // namespace mla::io_detail
