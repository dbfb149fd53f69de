// F12 (docs/RELIABILITY.md §Checklist): a JSON Schema (the input up to its first NUL byte) →
// grammar::Grammar::from_schema, then the rest of the input as bytes offered to the matcher, and
// each refused byte replaced by the first byte the matcher takes (so walks go deep). Invariants:
// compiling never crashes; a walk that ends whole is JSON (an object) that nlohmann parses; a
// state the matcher reaches always takes some byte (no dead ends) until it is whole.
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_common.h"
#include "io/json_limits.h"
#include "model/json_grammar.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mla::grammar;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t cut = in.find('\0');
  const std::string_view schema_text = in.substr(0, cut);
  const std::string_view bytes = cut == std::string_view::npos ? "" : in.substr(cut + 1);
  if (mla::json_depth_exceeded(schema_text, 64)) return 0;
  const nlohmann::ordered_json schema =
      nlohmann::ordered_json::parse(schema_text, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return 0;
  auto g = Grammar::from_schema(schema);
  if (!g.ok()) return 0;
  Matcher m(g->get());
  std::string text;
  for (size_t i = 0; i < bytes.size() && !m.complete() && text.size() < 4096; ++i) {
    uint8_t b = uint8_t(bytes[i]);
    if (Matcher next = m; !next.advance(b)) {
      int taken = -1;
      for (int c = 1; c < 256 && taken < 0; ++c)
        if (Matcher probe = m; probe.advance(uint8_t(c))) taken = c;
      MLA_CHECK(taken >= 0, "a dead end after {:?}", text);
      b = uint8_t(taken);
    }
    MLA_CHECK(m.advance(b), "the matcher refused a byte it took on a copy");
    text += char(b);
  }
  if (m.complete()) {
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    MLA_CHECK(j.is_object(), "a whole walk is not a JSON object: {:?}", text);
  }
  return 0;
}
