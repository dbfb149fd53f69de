// F5 (docs/RELIABILITY.md §Checklist): the tiny DeepSeek-V3 tokenizer plus arbitrary bytes (at most
// 64 KiB) → encode → decode. Invariants: valid UTF-8 round-trips exactly (added-token text
// included, as plain text); invalid UTF-8 is an error, never a crash; ids are in [0, id_limit).
// scripts/fuzz runs this target under `ulimit -s 1024` so that deep recursion would show as a
// crash.
#include <cstdint>
#include <string_view>
#include <vector>

#include "fuzz_common.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mla;
  if (size > (size_t{64} << 10)) return 0;
  const tok::Tokenizer& t = fuzz::tiny_tokenizer("v3").tokenizer;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Result<std::vector<int32_t>> ids = t.encode(text);
  if (!fuzz::valid_utf8(text)) {
    MLA_CHECK(!ids.ok(), "invalid UTF-8 was encoded");
    return 0;
  }
  MLA_CHECK(ids.ok(), "valid UTF-8 failed to encode: {}", ids.status().to_string());
  for (int32_t id : *ids)
    MLA_CHECK(id >= 0 && id < t.id_limit(), "id {} outside [0, {})", id, t.id_limit());
  Result<std::string> back = t.decode(*ids);
  MLA_CHECK(back.ok(), "decode failed: {}", back.status().to_string());
  MLA_CHECK(*back == text, "round trip changed {} bytes into {} bytes", text.size(), back->size());
  return 0;
}
