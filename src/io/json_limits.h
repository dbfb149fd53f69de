// Limits every JSON reader of files applies before parsing (docs/RELIABILITY.md §Checklist R26):
// nesting depth, found by a linear scan that needs no parse. nlohmann's parser is iterative, but
// dump(), comparisons and recursive visitors are not, so a 16 MiB "[[[[..." must be refused up
// front.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace mla {

// Nesting of arrays and objects that any JSON file mla reads may have (real files use < 10).
inline constexpr int kMaxJsonFileDepth = 64;

// The byte offset of the first '[' or '{' (outside strings) that opens level max_depth + 1, or
// nullopt when the text never nests deeper than max_depth. Does not validate the JSON otherwise.
std::optional<size_t> json_depth_exceeded(std::string_view text, int max_depth = kMaxJsonFileDepth);

}  // namespace mla
