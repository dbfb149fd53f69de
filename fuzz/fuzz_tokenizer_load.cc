// F4 (docs/RELIABILITY.md §Checklist): tokenizer.json bytes (at most 1 MiB) → Tokenizer::from_json,
// then a fixed string is encoded (as plain text and with added tokens parsed) and decoded.
// Invariants: every id is in [0, id_limit) and has bytes; decode of those ids succeeds and gives
// valid UTF-8.
#include <cstdint>
#include <string_view>
#include <vector>

#include "fuzz_common.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mla;
  if (size > (size_t{1} << 20)) return 0;
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  Result<tok::Tokenizer> t = tok::Tokenizer::from_json(json, "tokenizer.json");
  if (!t.ok()) return 0;
  static constexpr std::string_view kText =
      "Hello, world! 1234 ünïcödé 你好 🙂\n\t<｜User｜>hi<｜Assistant｜><|im_end|> ";
  for (bool parse_special : {false, true}) {
    tok::EncodeOptions opts;
    opts.parse_special = parse_special;
    Result<std::vector<int32_t>> ids = t->encode(kText, opts);
    if (!ids.ok()) continue;  // e.g. a regex that hits PCRE2's match limit: an error, not a bug
    for (int32_t id : *ids) {
      MLA_CHECK(id >= 0 && id < t->id_limit(), "id {} outside [0, {})", id, t->id_limit());
      MLA_CHECK(t->token_bytes(id) != nullptr, "id {} has no bytes", id);
    }
    Result<std::string> text = t->decode(*ids);
    MLA_CHECK(text.ok(), "decode of encoded ids failed: {}", text.status().to_string());
    MLA_CHECK(fuzz::valid_utf8(*text), "decode gave invalid UTF-8");
  }
  return 0;
}
