// Split behaviours and the pre-tokenizer sequence (see pre_tokenizer.h).
#include "tokenizer/pre_tokenizer.h"

#include <algorithm>

namespace mla::tok {

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

struct Part {
  size_t begin, end;
  bool is_match;
};

// Splits `piece` by `step` and appends the resulting non-empty pieces to *out.
Status split_piece(const SplitStep& step, std::string_view piece, std::vector<Span>* matches,
                   std::vector<Part>* parts, std::vector<std::string_view>* out) {
  matches->clear();
  MLA_RETURN_IF_ERROR(step.regex.find_all(piece, matches));
  parts->clear();
  size_t prev = 0;
  for (const Span& m : *matches) {
    if (m.begin > prev) parts->push_back({prev, m.begin, step.invert});
    parts->push_back({m.begin, m.end, !step.invert});
    prev = m.end;
  }
  if (prev < piece.size()) parts->push_back({prev, piece.size(), step.invert});

  // Each behaviour rewrites the alternating list of matches and gaps in place.
  std::vector<Part>& p = *parts;
  std::vector<Part> merged;
  bool previous_match = false;
  switch (step.behavior) {
    case SplitBehavior::kIsolated:
      merged = p;
      break;
    case SplitBehavior::kRemoved:
      for (const Part& x : p)
        if (!x.is_match) merged.push_back(x);
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Part& x : p) {
        if (x.is_match && !previous_match && !merged.empty())
          merged.back().end = x.end;
        else
          merged.push_back(x);
        previous_match = x.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (size_t i = p.size(); i > 0; --i) {
        const Part& x = p[i - 1];
        if (x.is_match && !previous_match && !merged.empty())
          merged.back().begin = x.begin;
        else
          merged.push_back(x);
        previous_match = x.is_match;
      }
      std::reverse(merged.begin(), merged.end());
      break;
    case SplitBehavior::kContiguous:
      for (const Part& x : p) {
        if (x.is_match && previous_match && !merged.empty())
          merged.back().end = x.end;
        else
          merged.push_back(x);
        previous_match = x.is_match;
      }
      break;
  }
  for (const Part& x : merged)
    if (x.end > x.begin) out->push_back(piece.substr(x.begin, x.end - x.begin));
  return Status();
}

}  // namespace

Status PreTokenizer::split(std::string_view text, Pieces* out) const {
  out->list.clear();
  if (text.empty()) return Status();
  out->list.push_back(text);
  std::vector<std::string_view> next;
  std::vector<Span> matches;
  std::vector<Part> parts;
  for (const SplitStep& step : splits_) {
    next.clear();
    for (std::string_view piece : out->list)
      MLA_RETURN_IF_ERROR(split_piece(step, piece, &matches, &parts, &next));
    out->list.swap(next);
  }
  if (add_prefix_space_) {
    // Hugging Face prepends the space to every piece that lacks one, not only the first.
    size_t total = 0;
    for (std::string_view piece : out->list) total += piece.size() + 1;
    out->storage.clear();
    out->storage.reserve(total);
    std::vector<Span> spans;
    for (std::string_view piece : out->list) {
      const size_t begin = out->storage.size();
      if (piece.front() != ' ') out->storage.push_back(' ');
      out->storage.append(piece);
      spans.push_back({begin, out->storage.size()});
    }
    out->list.clear();
    for (const Span& s : spans)
      out->list.push_back(std::string_view(out->storage).substr(s.begin, s.end - s.begin));
  }
  if (gpt2_regex_) {
    const SplitStep step{*gpt2_regex_, SplitBehavior::kIsolated, false};
    next.clear();
    for (std::string_view piece : out->list)
      MLA_RETURN_IF_ERROR(split_piece(step, piece, &matches, &parts, &next));
    out->list.swap(next);
  }
  return Status();
}

}  // namespace mla::tok
