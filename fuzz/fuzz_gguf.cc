// The GGUF counterpart of F1: bytes → in-memory parse_gguf, then every tensor view is made and
// touched. Invariants on success: each tensor's bytes lie inside the data section (ByteView
// exists), its offset is a multiple of the alignment, its size follows from its shape and type, no
// two tensors share a byte, names are unique and by_name sorts them, and the data section starts at
// the aligned end of the header.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/byte_view.h"
#include "fuzz_common.h"
#include "io/gguf_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mla;
  Result<io_detail::ParsedGguf> parsed = io_detail::parse_gguf("fuzz.gguf", data, size);
  if (!parsed.ok()) {
    const std::string& m = parsed.status().message();
    MLA_CHECK(!m.empty() && m.find('\n') == std::string::npos, "a bad error message: {}", m);
    return 0;
  }
  const io_detail::ParsedGguf& p = *parsed;
  const uint32_t align = p.alignment;
  MLA_CHECK(align != 0 && (align & (align - 1)) == 0, "alignment {}", align);
  MLA_CHECK(p.header_end <= size && p.data_offset >= p.header_end &&
                p.data_offset - p.header_end < align && p.data_offset % align == 0,
            "header end {} data offset {} alignment {} size {}", p.header_end, p.data_offset, align,
            size);
  MLA_CHECK(p.tensors.empty() || p.data_offset <= size, "data offset {} past {}", p.data_offset,
            size);
  const uint64_t data_size = p.data_offset <= size ? size - p.data_offset : 0;
  const uint8_t* section = data + (p.data_offset <= size ? p.data_offset : 0);

  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  volatile uint8_t sink = 0;
  for (const TensorInfo& t : p.tensors) {
    MLA_CHECK(!t.name.empty() && t.shape.size() >= 1 && t.shape.size() <= 4, "tensor {}", t.name);
    Result<io_detail::TensorSize> ts = io_detail::gguf_tensor_size(t.dtype, t.shape);
    MLA_CHECK(ts.ok(), "accepted tensor {} has no valid size", t.name);
    MLA_CHECK(ts->numel == t.numel && ts->bytes == t.byte_size, "size mismatch for {}", t.name);
    MLA_CHECK(t.byte_offset % align == 0, "tensor {} at {} not aligned", t.name, t.byte_offset);
    std::optional<ByteView> v = ByteView::make(section, data_size, t.byte_offset, t.byte_size);
    MLA_CHECK(v.has_value(), "tensor {} [{}, +{}) outside a {}-byte data section", t.name,
              t.byte_offset, t.byte_size, data_size);
    uint8_t acc = 0;
    for (uint64_t i = 0; i < v->size(); ++i) acc ^= v->data()[i];  // touch every byte
    sink = sink ^ acc;
    if (t.byte_size > 0) ranges.emplace_back(t.byte_offset, t.byte_offset + t.byte_size);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    MLA_CHECK(ranges[i].first >= ranges[i - 1].second, "tensors overlap at {}", ranges[i].first);

  MLA_CHECK(p.by_name.size() == p.tensors.size(), "by_name has {} of {}", p.by_name.size(),
            p.tensors.size());
  for (size_t i = 1; i < p.by_name.size(); ++i)
    MLA_CHECK(p.tensors[p.by_name[i - 1]].name < p.tensors[p.by_name[i]].name,
              "names not unique or not sorted at {}", i);
  for (const auto& [key, value] : p.metadata) {
    MLA_CHECK(!key.empty() && io_detail::gguf_valid_utf8(key), "bad key");
    if (value.type == GgufType::kBool) MLA_CHECK(value.i == 0 || value.i == 1, "bool {}", value.i);
  }
  return 0;
}
