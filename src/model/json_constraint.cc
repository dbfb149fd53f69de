// VocabTrie and the JSON token constraint (json_constraint.h).
#include "model/json_constraint.h"

#include <algorithm>
#include <limits>
#include <set>

namespace mla {
namespace {

// Text that continues a string of any content the same way: no '"', '\\' or control bytes, and
// whole UTF-8 characters only.
bool plain_string_bytes(const std::string& s) {
  size_t need = 0;     // continuation bytes still due
  uint16_t range = 0;  // of the next one
  for (unsigned char b : s) {
    if (need) {
      if (b < (range >> 8) || b > (range & 0xFF)) return false;
      range = 0x80BF;
      --need;
      continue;
    }
    if (b < 0x20 || b == '"' || b == '\\') return false;
    if (b < 0x80) continue;
    need = grammar::utf8_continuations(b);
    if (!need) return false;
    range = grammar::utf8_second_range(b);
  }
  return need == 0;
}

// ids sorted by bytes; [lo, hi) share their first `depth` bytes and belong under node `at`.
void build(VocabTrie::Trie& t, const std::vector<std::string>& bytes,
           const std::vector<int32_t>& ids, size_t lo, size_t hi, size_t depth, uint32_t at) {
  size_t i = lo;
  t.nodes[at].first_end = uint32_t(t.ends.size());
  while (i < hi && bytes[size_t(ids[i])].size() == depth) t.ends.push_back(ids[i++]);
  t.nodes[at].num_ends = uint32_t(t.ends.size()) - t.nodes[at].first_end;
  std::vector<std::pair<size_t, size_t>> groups;
  for (size_t j = i; j < hi;) {
    const char b = bytes[size_t(ids[j])][depth];
    size_t k = j + 1;
    while (k < hi && bytes[size_t(ids[k])][depth] == b) ++k;
    groups.emplace_back(j, k);
    j = k;
  }
  const uint32_t first = uint32_t(t.nodes.size());
  t.nodes[at].first_child = first;
  t.nodes[at].num_children = uint32_t(groups.size());
  t.nodes.resize(t.nodes.size() + groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    t.nodes[first + g].byte = uint8_t(bytes[size_t(ids[groups[g].first])][depth]);
    build(t, bytes, ids, groups[g].first, groups[g].second, depth + 1, uint32_t(first + g));
  }
}

VocabTrie::Trie make_trie(const std::vector<std::string>& bytes, std::vector<int32_t> ids) {
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return bytes[size_t(a)] < bytes[size_t(b)] || (bytes[size_t(a)] == bytes[size_t(b)] && a < b);
  });
  VocabTrie::Trie t;
  t.nodes.resize(1);
  build(t, bytes, ids, 0, ids.size(), 0, 0);
  return t;
}

struct Cursor {
  grammar::Matcher m;
  uint32_t part = 0, off = 0;  // the tail: part, and bytes of its text matched
};

class JsonConstraint final : public TokenConstraint {
 public:
  JsonConstraint(const JsonConstraintSpec* spec, std::span<const int32_t> end_ids)
      : spec_(spec),
        tail_(spec->tail()),
        cur_{grammar::Matcher(&spec->grammar())},
        end_ids_(end_ids.begin(), end_ids.end()) {
    settle(cur_);
  }

  bool mask(std::span<float> logits) const override {
    const VocabTrie& v = spec_->vocab();
    allow_.assign(logits.size(), 0);
    const auto allow = [&](int32_t id) {
      if (id >= 0 && size_t(id) < allow_.size()) allow_[size_t(id)] = 1;
    };
    if (cur_.m.complete() && cur_.part == tail_.size()) {
      for (int32_t id : end_ids_) allow(id);
    } else if (cur_.m.complete() && tail_[cur_.part].control >= 0) {
      allow(tail_[cur_.part].control);
    } else if (!cur_.m.complete() && cur_.m.in_free_string()) {
      for (int32_t id : v.plain()) allow(id);
      walk(v.special(), 0, cur_);
    } else {
      walk(v.all(), 0, cur_);
    }
    bool any = false;
    constexpr float kInf = std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < logits.size(); ++i) {
      if (allow_[i])
        any = true;
      else
        logits[i] = -kInf;
    }
    return any;
  }

  bool accept(int32_t token) override {
    if (cur_.m.complete()) {
      if (cur_.part == tail_.size())
        return std::find(end_ids_.begin(), end_ids_.end(), token) != end_ids_.end();
      if (tail_[cur_.part].control >= 0) {
        if (token != tail_[cur_.part].control) return false;
        ++cur_.part;
        settle(cur_);
        return true;
      }
    }
    if (token < 0 || token >= spec_->vocab().vocab()) return false;
    const std::string& bytes = spec_->vocab().bytes(token);
    if (bytes.empty()) return false;
    for (unsigned char b : bytes)
      if (!advance(cur_, b)) return false;
    return true;
  }

 private:
  void settle(Cursor& c) const {
    while (c.m.complete() && c.part < tail_.size() && tail_[c.part].control < 0 &&
           c.off == tail_[c.part].text.size()) {
      ++c.part;
      c.off = 0;
    }
  }

  bool advance(Cursor& c, unsigned char b) const {
    if (!c.m.complete()) {
      if (!c.m.advance(b)) return false;
      settle(c);
      return true;
    }
    if (c.part == tail_.size() || tail_[c.part].control >= 0) return false;
    if (uint8_t(tail_[c.part].text[c.off]) != b) return false;
    ++c.off;
    settle(c);
    return true;
  }

  // Marks every token under trie node `at` whose bytes the cursor accepts.
  void walk(const VocabTrie::Trie& t, uint32_t at, const Cursor& c) const {
    const VocabTrie::TrieNode& n = t.nodes[at];
    for (uint32_t k = 0; k < n.num_children; ++k) {
      const uint32_t child = n.first_child + k;
      Cursor next = c;
      if (!advance(next, t.nodes[child].byte)) continue;
      const VocabTrie::TrieNode& cn = t.nodes[child];
      for (uint32_t e = 0; e < cn.num_ends; ++e) allow_[size_t(t.ends[cn.first_end + e])] = 1;
      if (cn.num_children) walk(t, child, next);
    }
  }

  const JsonConstraintSpec* spec_;
  const std::vector<TailPart>& tail_;
  Cursor cur_;
  std::vector<int32_t> end_ids_;
  mutable std::vector<uint8_t> allow_;  // [vocab] scratch of mask()
};

}  // namespace

VocabTrie::VocabTrie(const std::vector<std::string>& bytes)
    : vocab_(int64_t(bytes.size())), bytes_(bytes) {
  std::vector<int32_t> all, special;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i].empty()) continue;
    all.push_back(int32_t(i));
    if (plain_string_bytes(bytes[i]))
      plain_.push_back(int32_t(i));
    else
      special.push_back(int32_t(i));
  }
  all_ = make_trie(bytes_, std::move(all));
  special_ = make_trie(bytes_, std::move(special));
}

std::shared_ptr<const VocabTrie> VocabTrie::from_tokenizer(const tok::Tokenizer& t, int64_t vocab) {
  std::set<int32_t> added;
  for (const tok::AddedToken& a : t.added_tokens()) added.insert(a.id);
  std::vector<std::string> bytes(static_cast<size_t>(vocab));
  for (int32_t id = 0; id < vocab && id < t.id_limit(); ++id)
    if (const std::string* b = t.token_bytes(id); b && !added.contains(id)) bytes[size_t(id)] = *b;
  return std::make_shared<const VocabTrie>(bytes);
}

JsonConstraintSpec::JsonConstraintSpec(std::shared_ptr<const grammar::Grammar> g,
                                       std::shared_ptr<const VocabTrie> vocab,
                                       std::vector<TailPart> tail)
    : grammar_(std::move(g)), vocab_(std::move(vocab)), tail_(std::move(tail)) {}

std::unique_ptr<TokenConstraint> JsonConstraintSpec::start(std::span<const int32_t> end_ids) const {
  return std::make_unique<JsonConstraint>(this, end_ids);
}

}  // namespace mla
