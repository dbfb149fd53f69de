// tiktoken.model parsing and its conversion to merges (see tiktoken.h).
#include "tokenizer/tiktoken.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <climits>
#include <unordered_map>

#include "io/safetensors_header.h"
#include "tokenizer/byte_level.h"

namespace mla::tok {
namespace {

using Json = nlohmann::json;
using RankMap = std::unordered_map<std::string_view, int32_t>;

// Standard base64 (RFC 4648 §4) with '=' padding, as tiktoken files are written. Strict: any
// other character, or padding anywhere but the end, is an error (nullopt).
std::optional<std::string> base64_decode(std::string_view s) {
  static const std::array<int8_t, 256> kValue = [] {
    std::array<int8_t, 256> v;
    v.fill(-1);
    const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) v[uint8_t(alphabet[i])] = int8_t(i);
    return v;
  }();
  if (s.empty() || s.size() % 4 != 0) return std::nullopt;
  size_t pad = 0;
  while (pad < 2 && s[s.size() - 1 - pad] == '=') ++pad;
  std::string out;
  out.reserve(s.size() / 4 * 3);
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < s.size() - pad; ++i) {
    const int8_t v = kValue[uint8_t(s[i])];
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(char((acc >> bits) & 0xFF));
    }
  }
  // The bits left over must be the zero padding of the last group.
  if ((acc & ((1u << bits) - 1)) != 0) return std::nullopt;
  return out;
}

// The split position of the last merge tiktoken's BPE makes on `token`'s bytes alone, or npos
// when the run stops with more than one part. The loop is tiktoken's: parts are byte ranges; the
// adjacent pair whose concatenation has the lowest rank merges, the leftmost among equal ranks.
size_t last_merge_split(std::string_view token, const RankMap& ranks) {
  const auto rank_of = [&](size_t begin, size_t end) {
    const auto it = ranks.find(token.substr(begin, end - begin));
    return it == ranks.end() ? INT32_MAX : it->second;
  };
  std::vector<size_t> start(token.size() + 1);  // part i is [start[i], start[i + 1])
  for (size_t i = 0; i <= token.size(); ++i) start[i] = i;
  std::vector<int32_t> pair_rank(token.size() - 1);  // rank of part i + part i + 1
  for (size_t i = 0; i + 1 < token.size(); ++i) pair_rank[i] = rank_of(i, i + 2);
  while (start.size() > 2) {
    const auto best = std::min_element(pair_rank.begin(), pair_rank.end());  // leftmost minimum
    if (*best == INT32_MAX) return std::string_view::npos;
    const size_t i = size_t(best - pair_rank.begin());
    if (start.size() == 3) return start[1];  // two parts left: this merge makes the token
    start.erase(start.begin() + ptrdiff_t(i) + 1);
    pair_rank.erase(pair_rank.begin() + ptrdiff_t(i));
    if (i + 2 < start.size()) pair_rank[i] = rank_of(start[i], start[i + 2]);
    if (i > 0) pair_rank[i - 1] = rank_of(start[i - 1], start[i + 1]);
  }
  return std::string_view::npos;
}

}  // namespace

Result<std::vector<RankedToken>> parse_tiktoken_ranks(std::string_view text,
                                                      std::string_view origin) {
  std::vector<RankedToken> out;
  std::unordered_map<int32_t, size_t> line_of_rank;
  std::unordered_map<std::string, size_t> line_of_token;
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    const size_t eol = std::min(text.find('\n', pos), text.size());
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const auto at = [&](std::string_view what) {
      return invalid_argument(fmt::format("{}: line {}: {} (in {})", origin, line_no, what,
                                          io_detail::quote_text(line, false, 80)));
    };
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos)
      return at("expected \"<base64 of the token> <rank>\"");
    const std::string_view b64 = line.substr(0, space), num = line.substr(space + 1);
    std::optional<std::string> bytes = base64_decode(b64);
    if (!bytes) return at("the token is not valid base64");
    int64_t rank = -1;
    const auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), rank);
    if (ec != std::errc() || end != num.data() + num.size() || rank < 0 || rank > INT32_MAX)
      return at("the rank is not an integer in [0, 2^31)");
    if (auto [it, fresh] = line_of_rank.emplace(int32_t(rank), line_no); !fresh)
      return at(fmt::format("rank {} was already given on line {}", rank, it->second));
    if (auto [it, fresh] = line_of_token.emplace(*bytes, line_no); !fresh)
      return at(fmt::format("the token was already given on line {}", it->second));
    out.push_back({std::move(*bytes), int32_t(rank)});
  }
  // Every piece starts as single bytes, so tiktoken needs all 256 (it would panic without one).
  for (int b = 0; b < 256; ++b)
    if (!line_of_token.contains(std::string(1, char(b))))
      return invalid_argument(fmt::format(
          "{}: no line holds the single byte 0x{:02X}; a tiktoken BPE needs all 256", origin, b));
  return out;
}

std::vector<std::pair<std::string, std::string>> tiktoken_merges(
    const std::vector<RankedToken>& ranks) {
  RankMap map;
  map.reserve(ranks.size());
  for (const RankedToken& t : ranks) map.emplace(t.bytes, t.rank);
  std::vector<std::pair<int32_t, size_t>> made;  // (rank, split) of each buildable token
  std::vector<const RankedToken*> by_rank;
  for (const RankedToken& t : ranks) {
    if (t.bytes.size() < 2) continue;
    const size_t split = last_merge_split(t.bytes, map);
    if (split == std::string_view::npos) continue;
    made.emplace_back(t.rank, split);
    by_rank.push_back(&t);
  }
  std::vector<size_t> order(made.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return made[a].first < made[b].first; });
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(order.size());
  for (size_t i : order) {
    const std::string& bytes = by_rank[i]->bytes;
    merges.emplace_back(bytes.substr(0, made[i].second), bytes.substr(made[i].second));
  }
  return merges;
}

Json tiktoken_tokenizer_json(const std::vector<RankedToken>& ranks, std::string_view pattern,
                             const std::vector<TiktokenAdded>& added) {
  Json vocab = Json::object();
  for (const RankedToken& t : ranks) vocab[bytes_to_token_text(t.bytes)] = t.rank;
  Json merges = Json::array();
  for (const auto& [left, right] : tiktoken_merges(ranks))
    merges.push_back(Json::array({bytes_to_token_text(left), bytes_to_token_text(right)}));
  Json added_json = Json::array();
  for (const TiktokenAdded& a : added)
    added_json.push_back({{"id", a.id},
                          {"content", a.content},
                          {"single_word", false},
                          {"lstrip", false},
                          {"rstrip", false},
                          {"normalized", false},
                          {"special", a.special}});
  // tiktoken keeps only the regex matches; the Kimi pattern matches every character, so
  // Isolated (which keeps the text between matches too) cuts the same pieces.
  const Json split = {{"type", "Split"},
                      {"pattern", {{"Regex", std::string(pattern)}}},
                      {"behavior", "Isolated"},
                      {"invert", false}};
  const Json byte_level = {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", true},
                           {"use_regex", false}};
  return {{"version", "1.0"},
          {"added_tokens", std::move(added_json)},
          {"normalizer", nullptr},
          {"pre_tokenizer",
           {{"type", "Sequence"}, {"pretokenizers", Json::array({split, byte_level})}}},
          {"post_processor", nullptr},
          {"decoder", byte_level},
          {"model",
           {{"type", "BPE"},
            {"ignore_merges", true},
            {"vocab", std::move(vocab)},
            {"merges", std::move(merges)}}}};
}

const std::vector<std::string>& kimi_pattern_parts() {
  // As tokenization_kimi.py writes them (raw strings: \r \n are regex escapes).
  static const std::vector<std::string> kParts = {
      R"re([\p{Han}]+)re",
      R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)re",
      R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)re",
      R"re(\p{N}{1,3})re",
      R"re( ?[^\s\p{L}\p{N}]+[\r\n]*)re",
      R"re(\s*[\r\n]+)re",
      R"re(\s+(?!\S))re",
      R"re(\s+)re",
  };
  return kParts;
}

std::string kimi_pattern() {
  return fmt::format("{}", fmt::join(kimi_pattern_parts(), "|"));
}

}  // namespace mla::tok
