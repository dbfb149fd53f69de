// VocabTrie and the JSON token constraint (json_constraint.h).
#include "model/json_constraint.h"

#include "core/check.h"

#include <algorithm>
#include <bit>
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
  uint64_t alive = 0;          // branches still possible; one once the head is decided
  uint8_t stage = 0;           // 0: the head, 1: the JSON, 2: the tail
  uint32_t part = 0, off = 0;  // head or tail: the part, and bytes of its text matched
  grammar::Matcher m;          // the decided branch's JSON (stage 1 and on)
};

class JsonConstraint final : public TokenConstraint {
 public:
  JsonConstraint(const JsonConstraintSpec* spec, std::span<const int32_t> end_ids)
      : spec_(spec),
        branches_(spec->branches()),
        cur_{.m = grammar::Matcher(branches_[0].grammar.get())},
        end_ids_(end_ids.begin(), end_ids.end()) {
    cur_.alive = branches_.size() >= 64 ? ~uint64_t{0} : (uint64_t{1} << branches_.size()) - 1;
    settle(cur_);
  }

  bool mask(std::span<float> logits) const override {
    const VocabTrie& v = spec_->vocab();
    allow_.assign(logits.size(), 0);
    const auto allow = [&](int32_t id) {
      if (id >= 0 && size_t(id) < allow_.size()) allow_[size_t(id)] = 1;
    };
    if (at_end(cur_)) {
      for (int32_t id : end_ids_) allow(id);
    } else if (const int32_t control = next_control(cur_); control >= 0) {
      allow(control);
    } else if (cur_.stage == 1 && cur_.m.in_free_string()) {
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
    if (at_end(cur_)) return std::find(end_ids_.begin(), end_ids_.end(), token) != end_ids_.end();
    if (const int32_t control = next_control(cur_); control >= 0) {
      if (token != control) return false;
      ++cur_.part;
      cur_.off = 0;
      settle(cur_);
      return true;
    }
    if (token < 0 || token >= spec_->vocab().vocab()) return false;
    const std::string& bytes = spec_->vocab().bytes(token);
    if (bytes.empty()) return false;
    for (unsigned char b : bytes)
      if (!advance(cur_, b)) return false;
    return true;
  }

 private:
  const ConstraintBranch& branch(const Cursor& c) const {
    return branches_[size_t(std::countr_zero(c.alive))];
  }
  // The head's or the tail's parts (the first live branch's: while several live, their heads
  // are texts that differ before any of them ends).
  const std::vector<TailPart>& parts(const Cursor& c) const {
    return c.stage == 0 ? branch(c).head : branch(c).tail;
  }
  bool at_end(const Cursor& c) const { return c.stage == 2 && c.part == parts(c).size(); }
  int32_t next_control(const Cursor& c) const {
    if (c.stage == 1 || c.part >= parts(c).size()) return -1;
    return parts(c)[c.part].control;
  }

  // Moves past finished text parts, a decided head and a whole JSON value.
  void settle(Cursor& c) const {
    for (;;) {
      if (c.stage == 1) {
        if (!c.m.complete()) return;
        c.stage = 2;
        c.part = c.off = 0;
        continue;
      }
      if (c.stage == 0 && std::popcount(c.alive) > 1) return;
      const std::vector<TailPart>& p = parts(c);
      if (c.part < p.size() && p[c.part].control < 0 && c.off == p[c.part].text.size()) {
        ++c.part;
        c.off = 0;
        continue;
      }
      if (c.stage == 0 && c.part == p.size()) {
        c.stage = 1;
        c.m = grammar::Matcher(branch(c).grammar.get());
        continue;
      }
      return;
    }
  }

  bool advance(Cursor& c, unsigned char b) const {
    if (c.stage == 1) {
      if (!c.m.advance(b)) return false;
    } else if (c.stage == 0) {
      uint64_t alive = 0;
      for (uint64_t m = c.alive; m; m &= m - 1) {
        const std::vector<TailPart>& h = branches_[size_t(std::countr_zero(m))].head;
        if (c.part < h.size() && h[c.part].control < 0 && c.off < h[c.part].text.size() &&
            uint8_t(h[c.part].text[c.off]) == b)
          alive |= m & -m;
      }
      if (!alive) return false;
      c.alive = alive;
      ++c.off;
    } else {
      const std::vector<TailPart>& t = parts(c);
      if (c.part == t.size() || t[c.part].control >= 0 || uint8_t(t[c.part].text[c.off]) != b)
        return false;
      ++c.off;
    }
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
  const std::vector<ConstraintBranch>& branches_;
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
    : JsonConstraintSpec({ConstraintBranch{{}, std::move(g), std::move(tail)}}, std::move(vocab)) {}

JsonConstraintSpec::JsonConstraintSpec(std::vector<ConstraintBranch> branches,
                                       std::shared_ptr<const VocabTrie> vocab)
    : branches_(std::move(branches)), vocab_(std::move(vocab)) {
  MLA_CHECK(!branches_.empty() && branches_.size() <= 64, "{} constraint branches (1 to 64)",
            branches_.size());
}

std::unique_ptr<TokenConstraint> JsonConstraintSpec::start(std::span<const int32_t> end_ids) const {
  return std::make_unique<JsonConstraint>(this, end_ids);
}

}  // namespace mla
