// F1 (docs/RELIABILITY.md §Checklist): bytes → in-memory parse_safetensors, then every view is made
// and touched. Invariants on success: each tensor's bytes lie inside the data section (ByteView
// exists), size == numel × dtype bits / 8, and the tensors tile the data section exactly.
#include <cstdint>

#include "core/byte_view.h"
#include "fuzz_common.h"
#include "io/safetensors_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mla;
  Result<io_detail::ParsedSafetensors> parsed =
      io_detail::parse_safetensors("fuzz.safetensors", data, size);
  if (!parsed.ok()) {
    MLA_CHECK(!parsed.status().message().empty(), "an error without a message");
    return 0;
  }
  const uint64_t data_offset = 8 + parsed->header_size;
  MLA_CHECK(data_offset <= size, "header {} past a {}-byte input", parsed->header_size, size);
  const uint64_t data_size = size - data_offset;
  const uint8_t* section = data + data_offset;
  uint64_t next = 0;  // tiling: each tensor starts where the previous ended
  volatile uint8_t sink = 0;
  for (const TensorInfo& t : parsed->tensors) {
    Result<io_detail::TensorSize> ts = io_detail::tensor_size(t.dtype, t.shape);
    MLA_CHECK(ts.ok(), "accepted tensor {} has no valid size", t.name);
    MLA_CHECK(ts->numel == t.numel && ts->bytes == t.byte_size, "size mismatch for {}", t.name);
    MLA_CHECK(t.byte_offset == next, "tensor {} at {} leaves a gap or overlap at {}", t.name,
              t.byte_offset, next);
    std::optional<ByteView> v = ByteView::make(section, data_size, t.byte_offset, t.byte_size);
    MLA_CHECK(v.has_value(), "tensor {} [{}, +{}) outside a {}-byte data section", t.name,
              t.byte_offset, t.byte_size, data_size);
    uint8_t acc = 0;
    for (uint64_t i = 0; i < v->size(); ++i) acc ^= v->data()[i];  // touch every byte
    sink = sink ^ acc;
    next = t.byte_offset + t.byte_size;
  }
  MLA_CHECK(next == data_size, "tensors end at {} of a {}-byte data section", next, data_size);
  return 0;
}
