// SafetensorsFile: maps a file read-only, validates it whole (safetensors_header.cc), then serves
// tensor lookups from the mapping without copying.
#include "io/safetensors.h"

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
#include "io/mapped_file.h"
#include "io/safetensors_header.h"

namespace mla {

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  MLA_ASSIGN_OR_RETURN(io_detail::FileMapping m, io_detail::map_file(path));
  SafetensorsFile file;
  file.path_ = path;
  file.map_ = m.map;
  file.file_size_ = m.size;  // from here on the destructor unmaps
  const uint64_t size = m.size;

  // An empty file maps nothing; the validator says what is missing.
  const uint8_t none[8] = {};
  const uint8_t* base = m.map ? static_cast<const uint8_t*>(m.map) : none;
  MLA_ASSIGN_OR_RETURN(io_detail::ParsedSafetensors parsed,
                       io_detail::parse_safetensors(path, base, size));
  file.header_size_ = parsed.header_size;
  file.tensors_ = std::move(parsed.tensors);
  file.metadata_ = std::move(parsed.metadata);

  MLA_CHECK(file.tensors_.size() <= std::numeric_limits<uint32_t>::max(), "{} tensors",
            file.tensors_.size());
  file.by_name_.resize(file.tensors_.size());
  for (size_t i = 0; i < file.tensors_.size(); ++i) {
    TensorInfo& t = file.tensors_[i];
    // The only way to weight bytes: a view checked against the mapping (parse_safetensors already
    // proved containment, so a failure here is a bug).
    const std::optional<ByteView> view =
        ByteView::make(base, size, file.data_offset() + t.byte_offset, t.byte_size);
    MLA_CHECK(view.has_value(), "{}: tensor {} [{}, +{}) outside the {}-byte file", path, t.name,
              file.data_offset() + t.byte_offset, t.byte_size, size);
    t.data = view->data();
    file.by_name_[i] = uint32_t(i);
  }
  std::sort(file.by_name_.begin(), file.by_name_.end(),
            [&](uint32_t a, uint32_t b) { return file.tensors_[a].name < file.tensors_[b].name; });
  return file;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      map_(std::exchange(other.map_, nullptr)),
      file_size_(std::exchange(other.file_size_, 0)),
      header_size_(std::exchange(other.header_size_, 0)),
      tensors_(std::move(other.tensors_)),
      by_name_(std::move(other.by_name_)),
      metadata_(std::move(other.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    file_size_ = std::exchange(other.file_size_, 0);
    header_size_ = std::exchange(other.header_size_, 0);
    tensors_ = std::move(other.tensors_);
    by_name_ = std::move(other.by_name_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() {
  unmap();
}

Status SafetensorsFile::populate() const {
  return io_detail::populate_mapping(path_, map_, file_size_);
}

void SafetensorsFile::unmap() {
  if (map_) ::munmap(map_, file_size_);
  map_ = nullptr;
}

std::vector<std::string_view> SafetensorsFile::names() const {
  std::vector<std::string_view> out;
  out.reserve(tensors_.size());
  for (const TensorInfo& t : tensors_) out.push_back(t.name);
  return out;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = std::lower_bound(by_name_.begin(), by_name_.end(), name,
                             [&](uint32_t i, std::string_view n) { return tensors_[i].name < n; });
  if (it == by_name_.end() || tensors_[*it].name != name) return nullptr;
  return &tensors_[*it];
}

}  // namespace mla
