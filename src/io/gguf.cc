// GgufFile maps a file read-only and validates it whole (gguf_header.cc); GgufSet finds and opens
// the other members of a split set and checks that they belong together.
#include "io/gguf.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <system_error>
#include <utility>

#include "core/byte_view.h"
#include "core/check.h"
#include "io/gguf_header.h"
#include "io/mapped_file.h"

namespace mla {
namespace {

using io_detail::quote_text;

struct CodeDType {
  uint32_t code;
  DType dtype;
};
constexpr CodeDType kReadable[] = {
    {0, DType::kF32},   {1, DType::kF16},   {2, DType::kQ4_0},  {8, DType::kQ8_0},
    {10, DType::kQ2_K}, {11, DType::kQ3_K}, {12, DType::kQ4_K}, {13, DType::kQ5_K},
    {14, DType::kQ6_K}, {24, DType::kI8},   {25, DType::kI16},  {26, DType::kI32},
    {27, DType::kI64},  {28, DType::kF64},  {30, DType::kBF16},
};

// `-00001-of-00003.gguf`: the suffix llama.cpp's gguf-split gives each member.
constexpr size_t kSplitSuffixLen = 20;

struct SplitName {
  std::string prefix;  // everything before the suffix, directory included
  int no = 0;          // 1-based, as in the name
  int count = 0;
};

std::optional<SplitName> parse_split_name(const std::string& path) {
  if (path.size() <= kSplitSuffixLen) return std::nullopt;
  const std::string_view s = std::string_view(path).substr(path.size() - kSplitSuffixLen);
  auto digits = [&](size_t at, int& out) {
    out = 0;
    for (size_t i = at; i < at + 5; ++i) {
      if (s[i] < '0' || s[i] > '9') return false;
      out = out * 10 + (s[i] - '0');
    }
    return true;
  };
  SplitName n;
  if (s[0] != '-' || s.substr(6, 4) != "-of-" || s.substr(15) != ".gguf" || !digits(1, n.no) ||
      !digits(10, n.count))
    return std::nullopt;
  n.prefix = path.substr(0, path.size() - kSplitSuffixLen);
  return n;
}

std::string split_member(const SplitName& n, int no) {
  return fmt::format("{}-{:05d}-of-{:05d}.gguf", n.prefix, no, n.count);
}

// The integer value of `key` in `f` when present; data_loss when it is not an integer.
Result<std::optional<int64_t>> int_meta(const GgufFile& f, std::string_view key) {
  const GgufValue* v = f.meta(key);
  if (!v) return std::optional<int64_t>();
  if (!io_detail::gguf_is_integer(v->type))
    return data_loss(fmt::format("{}: key \"{}\" has type {}, not an integer", f.path(), key,
                                 io_detail::gguf_type_name(v->type)));
  return std::optional<int64_t>(v->i);
}

}  // namespace

std::optional<DType> ggml_type_to_dtype(uint32_t code) {
  for (const CodeDType& e : kReadable)
    if (e.code == code) return e.dtype;
  return std::nullopt;
}

uint32_t dtype_to_ggml_type(DType t) {
  const std::optional<uint32_t> code = io_detail::ggml_code_of(t);
  MLA_CHECK(code.has_value(), "{} has no GGUF type", dtype_name(t));
  return *code;
}

std::optional<uint32_t> io_detail::ggml_code_of(DType t) {
  for (const CodeDType& e : kReadable)
    if (e.dtype == t) return e.code;
  return std::nullopt;
}

std::string ggml_type_name(uint32_t code) {
  if (const io_detail::GgmlTypeInfo* t = io_detail::ggml_type_info(code))
    return std::string(t->name);
  return fmt::format("type {}", code);
}

// ---- GgufFile ----

Result<GgufFile> GgufFile::open(const std::string& path) {
  MLA_ASSIGN_OR_RETURN(io_detail::FileMapping m, io_detail::map_file(path));
  GgufFile file;
  file.path_ = path;
  file.map_ = m.map;
  file.file_size_ = m.size;  // from here on the destructor unmaps
  const uint64_t size = m.size;

  // An empty file maps nothing; the validator says what is missing.
  const uint8_t none[1] = {};
  const uint8_t* base = m.map ? static_cast<const uint8_t*>(m.map) : none;
  MLA_ASSIGN_OR_RETURN(io_detail::ParsedGguf parsed, io_detail::parse_gguf(path, base, size));
  file.version_ = parsed.version;
  file.alignment_ = parsed.alignment;
  file.data_offset_ = parsed.data_offset;
  file.tensors_ = std::move(parsed.tensors);
  file.by_name_ = std::move(parsed.by_name);
  file.metadata_ = std::move(parsed.metadata);
  for (TensorInfo& t : file.tensors_) {
    // parse_gguf proved containment; a view that cannot be made is a bug.
    const std::optional<ByteView> view =
        ByteView::make(base, size, file.data_offset_ + t.byte_offset, t.byte_size);
    MLA_CHECK(view.has_value(), "{}: tensor {} [{}, +{}) outside the {}-byte file", path, t.name,
              file.data_offset_ + t.byte_offset, t.byte_size, size);
    t.data = view->data();
  }
  return file;
}

GgufFile::GgufFile(GgufFile&& other) noexcept
    : path_(std::move(other.path_)),
      map_(std::exchange(other.map_, nullptr)),
      file_size_(std::exchange(other.file_size_, 0)),
      data_offset_(std::exchange(other.data_offset_, 0)),
      version_(other.version_),
      alignment_(other.alignment_),
      tensors_(std::move(other.tensors_)),
      by_name_(std::move(other.by_name_)),
      metadata_(std::move(other.metadata_)) {}

GgufFile& GgufFile::operator=(GgufFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    file_size_ = std::exchange(other.file_size_, 0);
    data_offset_ = std::exchange(other.data_offset_, 0);
    version_ = other.version_;
    alignment_ = other.alignment_;
    tensors_ = std::move(other.tensors_);
    by_name_ = std::move(other.by_name_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

GgufFile::~GgufFile() {
  unmap();
}

void GgufFile::unmap() {
  if (map_) ::munmap(map_, file_size_);
  map_ = nullptr;
}

const TensorInfo* GgufFile::find(std::string_view name) const {
  auto it = std::lower_bound(by_name_.begin(), by_name_.end(), name,
                             [&](uint32_t i, std::string_view n) { return tensors_[i].name < n; });
  if (it == by_name_.end() || tensors_[*it].name != name) return nullptr;
  return &tensors_[*it];
}

const GgufValue* GgufFile::meta(std::string_view key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

Status GgufFile::populate() const {
  return io_detail::populate_mapping(path_, map_, file_size_);
}

// ---- GgufSet ----

Result<GgufSet> GgufSet::open(const std::string& path) {
  GgufSet set;
  const std::optional<SplitName> split = parse_split_name(path);
  if (!split) {
    MLA_ASSIGN_OR_RETURN(GgufFile f, GgufFile::open(path));
    MLA_ASSIGN_OR_RETURN(std::optional<int64_t> count, int_meta(f, "split.count"));
    if (count && *count > 1)
      return data_loss(fmt::format(
          "{}: split.count is {} but the name does not end in -NNNNN-of-{:05d}.gguf, so the "
          "other files of the set cannot be found",
          path, *count, *count));
    set.files_.push_back(std::move(f));
  } else {
    if (split->count < 1 || split->no < 1 || split->no > split->count)
      return invalid_argument(
          fmt::format("{}: the name says split file {} of {}", path, split->no, split->count));
    for (int no = 1; no <= split->count; ++no) {
      const std::string member = split_member(*split, no);
      Result<GgufFile> f = GgufFile::open(member);
      if (!f.ok() && f.status().code() == StatusCode::kNotFound)
        return not_found(fmt::format("{}: file {} of the {}-file split set is missing", member, no,
                                     split->count));
      if (!f.ok()) return f.status();
      MLA_ASSIGN_OR_RETURN(std::optional<int64_t> key_no, int_meta(*f, "split.no"));
      MLA_ASSIGN_OR_RETURN(std::optional<int64_t> key_count, int_meta(*f, "split.count"));
      if (key_no && *key_no != no - 1)
        return data_loss(
            fmt::format("{}: split.no is {}, but the name makes it file {} (split.no "
                        "{}): files of different sets mixed?",
                        member, *key_no, no, no - 1));
      if (key_count && *key_count != split->count)
        return data_loss(fmt::format("{}: split.count is {}, but the name says {} files", member,
                                     *key_count, split->count));
      set.files_.push_back(std::move(*f));
    }
  }

  uint64_t total = 0;
  for (const GgufFile& f : set.files_) {
    for (const TensorInfo& t : f.tensors()) {
      auto [it, inserted] = set.tensors_.try_emplace(t.name, &t);
      if (!inserted) {
        const GgufFile* owner = nullptr;
        for (const GgufFile& g : set.files_)
          if (g.find(t.name) == it->second) owner = &g;
        return data_loss(fmt::format("{}: tensor {} is also in {}", f.path(),
                                     quote_text(t.name, true),
                                     owner ? owner->path() : std::string("another file")));
      }
    }
    total += f.tensors().size();
  }
  MLA_ASSIGN_OR_RETURN(std::optional<int64_t> declared,
                       int_meta(set.first(), "split.tensors.count"));
  if (declared && uint64_t(*declared) != total)
    return data_loss(fmt::format("{}: split.tensors.count is {} but the {} file(s) hold {} tensors",
                                 set.first().path(), *declared, set.files_.size(), total));
  return set;
}

const TensorInfo* GgufSet::find(std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second;
}

uint64_t GgufSet::bytes_mapped() const {
  uint64_t n = 0;
  for (const GgufFile& f : files_) n += f.file_size();
  return n;
}

Status GgufSet::populate() const {
  for (const GgufFile& f : files_) MLA_RETURN_IF_ERROR(f.populate());
  return Status();
}

}  // namespace mla
