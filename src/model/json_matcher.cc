// Matcher (json_grammar.h): the pushdown automaton over compact JSON bytes.
#include <bit>

#include "model/json_grammar.h"

namespace mla::grammar {
namespace {

using Kind = Node::Kind;

enum Phase : uint8_t {
  kValue,
  kObjOpen,
  kObjKey,
  kObjColon,
  kObjValue,
  kObjValueNoSpace,
  kObjAfterValue,
  kObjAfterComma,
  kObjAfterCommaSpace,
  kArrOpen,
  kArrAfterValue,
  kArrAfterComma,
  kArrAfterCommaSpace,
  kStr,
  kStrEsc,
  kStrHex,
  kStrLowEsc,  // after a high surrogate's \uD800-\uDBFF: its low half's '\\' must follow
  kStrLowU,    // ... then its 'u'
  kStrUtf8,
  kNumSign,
  kNumZero,
  kNumInt,
  kNumDot,
  kNumFrac,
  kNumExp,
  kNumExpSign,
  kNumExpDigits,
  kLit,
};

// At most 16 digits before and after the point and 2 in the exponent: every number stays a finite
// double (below 1e116), which every JSON parser reads.
constexpr uint16_t kMaxDigits = 16, kMaxExpDigits = 2;

bool digit(uint8_t b) {
  return b >= '0' && b <= '9';
}

}  // namespace

uint8_t utf8_continuations(uint8_t lead) {
  return lead >= 0xC2 && lead <= 0xDF   ? 1
         : lead >= 0xE0 && lead <= 0xEF ? 2
         : lead >= 0xF0 && lead <= 0xF4 ? 3
                                        : 0;
}

uint16_t utf8_second_range(uint8_t lead) {
  // No overlong forms, no surrogates, nothing above U+10FFFF (RFC 3629).
  return lead == 0xE0   ? 0xA0BF
         : lead == 0xED ? 0x809F
         : lead == 0xF0 ? 0x90BF
         : lead == 0xF4 ? 0x808F
                        : 0x80BF;
}

namespace {

bool hex(uint8_t b) {
  return digit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F');
}

int hex_value(uint8_t b) {
  return digit(b) ? b - '0' : (b | 0x20) - 'a' + 10;
}

// Frame::sub in a \u escape: the hex digits left, and whether they are a low surrogate's.
constexpr uint8_t kLowHalf = 8;

}  // namespace

Matcher::Matcher(const Grammar* g) : g_(g) {
  stack_[0] = Frame{g->root(), kValue, 0, 0, 0, 0};
  depth_ = 1;
}

bool Matcher::in_free_string() const {
  return depth_ > 0 && stack_[size_t(depth_ - 1)].phase == kStr;
}

bool Matcher::push(int node, uint8_t b) {
  if (depth_ == kMaxDepth) return false;
  Frame& f = stack_[size_t(depth_++)];
  f = Frame{node, kValue, 0, 0, 0, 0};
  if (start_value(f, b) == Step::kReject) {
    --depth_;
    return false;
  }
  return true;
}

bool Matcher::advance(uint8_t b) {
  while (depth_ > 0) {
    switch (step(stack_[size_t(depth_ - 1)], b)) {
      case Step::kConsumed:
        return true;
      case Step::kReject:
        return false;
      case Step::kEndConsumed:
        --depth_;
        return true;
      case Step::kEndRetry:
        --depth_;  // the value ended before b: b is its parent's
        break;
    }
  }
  return false;
}

Matcher::Step Matcher::start_value(Frame& f, uint8_t b) {
  const Node& n = g_->node(f.node);
  switch (n.kind) {
    case Kind::kAny:
      f.node = b == '{'                           ? g_->any_object_
               : b == '['                         ? g_->any_array_
               : b == '"'                         ? g_->string_
               : b == '-' || digit(b)             ? g_->number_
               : b == 't' || b == 'f' || b == 'n' ? g_->words_
                                                  : -1;
      return f.node < 0 ? Step::kReject : start_value(f, b);
    case Kind::kAnyOf:
      for (int a : n.alternatives)
        if (g_->can_start(a, b)) {
          f.node = a;
          return start_value(f, b);
        }
      return Step::kReject;
    case Kind::kObject:
      if (b != '{') return Step::kReject;
      f.phase = kObjOpen;
      return Step::kConsumed;
    case Kind::kArray:
      if (b != '[') return Step::kReject;
      f.phase = kArrOpen;
      return Step::kConsumed;
    case Kind::kString:
      if (b != '"') return Step::kReject;
      f.phase = kStr;
      return Step::kConsumed;
    case Kind::kNumber:
    case Kind::kInteger:
      f.phase = b == '-' ? kNumSign : b == '0' ? kNumZero : digit(b) ? kNumInt : kValue;
      f.pos = 1;
      return f.phase == kValue ? Step::kReject : Step::kConsumed;
    case Kind::kLiterals: {
      uint64_t alive = 0;
      for (size_t i = 0; i < n.literals.size(); ++i)
        if (uint8_t(n.literals[i][0]) == b) alive |= uint64_t{1} << i;
      if (!alive) return Step::kReject;
      f.phase = kLit;
      f.alive = alive;
      f.pos = 1;
      return Step::kConsumed;
    }
  }
  return Step::kReject;
}

Matcher::Step Matcher::step(Frame& f, uint8_t b) {
  const Node& n = g_->node(f.node);
  // Schema objects: may the object close, and may another key come?
  const auto closable = [&] {
    if (n.free_keys) return true;
    for (size_t j = f.index; j < n.keys.size(); ++j)
      if (n.required[j]) return false;
    return true;
  };
  const auto begin_key = [&]() -> Step {
    if (n.free_keys) {
      f.phase = kObjColon;
      return push(g_->string_, b) ? Step::kConsumed : Step::kReject;
    }
    uint64_t alive = 0;  // the keys that may come next: up to the first required one
    for (size_t j = f.index; j < n.keys.size(); ++j) {
      alive |= uint64_t{1} << j;
      if (n.required[j]) break;
    }
    if (!alive || b != '"') return Step::kReject;
    f.phase = kObjKey;
    f.alive = alive;
    f.pos = 1;
    return Step::kConsumed;
  };
  const bool integer = n.kind == Kind::kInteger;
  switch (f.phase) {
    case kValue:
      return start_value(f, b);
    case kObjOpen:
      if (b == '}') return closable() ? Step::kEndConsumed : Step::kReject;
      return begin_key();
    case kObjKey: {
      uint64_t alive = 0;
      for (uint64_t m = f.alive; m; m &= m - 1) {
        const int j = std::countr_zero(m);
        const std::string& k = n.keys[size_t(j)];
        if (f.pos < k.size() && uint8_t(k[f.pos]) == b) alive |= uint64_t{1} << j;
      }
      if (!alive) return Step::kReject;
      ++f.pos;
      f.alive = alive;
      for (uint64_t m = alive; m; m &= m - 1) {
        const int j = std::countr_zero(m);
        if (n.keys[size_t(j)].size() == f.pos) {  // keys end in '"': at most one is whole
          f.sub = uint8_t(j);
          f.index = uint32_t(j) + 1;
          f.phase = kObjColon;
        }
      }
      return Step::kConsumed;
    }
    case kObjColon:
      if (b != ':') return Step::kReject;
      f.phase = kObjValue;
      return Step::kConsumed;
    case kObjValue:
    case kObjValueNoSpace: {
      if (b == ' ' && f.phase == kObjValue) {
        f.phase = kObjValueNoSpace;
        return Step::kConsumed;
      }
      const int value = n.free_keys ? g_->any_ : n.values[f.sub];
      f.phase = kObjAfterValue;
      return push(value, b) ? Step::kConsumed : Step::kReject;
    }
    case kObjAfterValue:
      if (b == '}') return closable() ? Step::kEndConsumed : Step::kReject;
      if (b != ',' || (!n.free_keys && f.index >= n.keys.size())) return Step::kReject;
      f.phase = kObjAfterComma;
      return Step::kConsumed;
    case kObjAfterComma:
      if (b == ' ') {
        f.phase = kObjAfterCommaSpace;
        return Step::kConsumed;
      }
      return begin_key();
    case kObjAfterCommaSpace:
      return begin_key();
    case kArrOpen:
      if (b == ']') return n.min_items == 0 ? Step::kEndConsumed : Step::kReject;
      if (n.max_items == 0) return Step::kReject;
      f.phase = kArrAfterValue;
      f.index = 1;
      return push(n.items, b) ? Step::kConsumed : Step::kReject;
    case kArrAfterValue:
      if (b == ']') return f.index >= n.min_items ? Step::kEndConsumed : Step::kReject;
      if (b != ',' || f.index >= n.max_items) return Step::kReject;
      f.phase = kArrAfterComma;
      return Step::kConsumed;
    case kArrAfterComma:
    case kArrAfterCommaSpace:
      if (b == ' ' && f.phase == kArrAfterComma) {
        f.phase = kArrAfterCommaSpace;
        return Step::kConsumed;
      }
      f.phase = kArrAfterValue;
      ++f.index;
      return push(n.items, b) ? Step::kConsumed : Step::kReject;
    case kStr:
      if (b == '"') return Step::kEndConsumed;
      if (b == '\\') {
        f.phase = kStrEsc;
        return Step::kConsumed;
      }
      if (b < 0x20) return Step::kReject;
      if (b < 0x80) return Step::kConsumed;
      f.sub = utf8_continuations(b);
      if (!f.sub) return Step::kReject;
      f.pos = utf8_second_range(b);
      f.phase = kStrUtf8;
      return Step::kConsumed;
    case kStrUtf8:
      if (b < (f.pos >> 8) || b > (f.pos & 0xFF)) return Step::kReject;
      f.pos = 0x80BF;
      if (--f.sub == 0) f.phase = kStr;
      return Step::kConsumed;
    case kStrEsc:
      if (b == 'u') {
        f.phase = kStrHex;
        f.sub = 4;
        f.pos = 0;
        return Step::kConsumed;
      }
      if (b != '"' && b != '\\' && b != '/' && b != 'b' && b != 'f' && b != 'n' && b != 'r' &&
          b != 't')
        return Step::kReject;
      f.phase = kStr;
      return Step::kConsumed;
    case kStrHex: {
      // UTF-16 as RFC 8259 §7 writes characters beyond the BMP: a high surrogate
      // \uD800-\uDBFF only with a low one \uDC00-\uDFFF right after it, and no low one alone
      // (parsers refuse a lone surrogate). Refused at the second digit, so that no prefix the
      // matcher takes is a dead end.
      if (!hex(b)) return Step::kReject;
      const bool low = f.sub & kLowHalf;
      const int left = f.sub & 7, v = hex_value(b);
      if (left == 4 && low && v != 0xD) return Step::kReject;
      if (left == 3 && (low ? v < 0xC : f.pos == 0xD && v >= 0xC)) return Step::kReject;
      f.pos = uint16_t(f.pos * 16 + v);
      f.sub = uint8_t((f.sub & kLowHalf) | (left - 1));
      if (left == 1) f.phase = !low && f.pos >= 0xD800 && f.pos <= 0xDBFF ? kStrLowEsc : kStr;
      return Step::kConsumed;
    }
    case kStrLowEsc:
      if (b != '\\') return Step::kReject;
      f.phase = kStrLowU;
      return Step::kConsumed;
    case kStrLowU:
      if (b != 'u') return Step::kReject;
      f.phase = kStrHex;
      f.sub = kLowHalf | 4;
      f.pos = 0;
      return Step::kConsumed;
    case kNumSign:
      if (!digit(b)) return Step::kReject;
      f.phase = b == '0' ? kNumZero : kNumInt;
      return Step::kConsumed;
    case kNumZero:
    case kNumInt:
      if (digit(b)) {
        if (f.phase == kNumZero || f.pos >= kMaxDigits) return Step::kReject;
        ++f.pos;
        return Step::kConsumed;
      }
      if (!integer && b == '.') {
        f.phase = kNumDot;
        return Step::kConsumed;
      }
      if (!integer && (b == 'e' || b == 'E')) {
        f.phase = kNumExp;
        return Step::kConsumed;
      }
      return Step::kEndRetry;
    case kNumDot:
      if (!digit(b)) return Step::kReject;
      f.phase = kNumFrac;
      f.pos = 1;
      return Step::kConsumed;
    case kNumFrac:
      if (digit(b)) {
        if (f.pos >= kMaxDigits) return Step::kReject;
        ++f.pos;
        return Step::kConsumed;
      }
      if (b == 'e' || b == 'E') {
        f.phase = kNumExp;
        return Step::kConsumed;
      }
      return Step::kEndRetry;
    case kNumExp:
      if (b == '+' || b == '-') {
        f.phase = kNumExpSign;
        return Step::kConsumed;
      }
      [[fallthrough]];
    case kNumExpSign:
      if (!digit(b)) return Step::kReject;
      f.phase = kNumExpDigits;
      f.pos = 1;
      return Step::kConsumed;
    case kNumExpDigits:
      if (!digit(b)) return Step::kEndRetry;
      if (f.pos >= kMaxExpDigits) return Step::kReject;
      ++f.pos;
      return Step::kConsumed;
    case kLit: {
      uint64_t alive = 0;
      bool whole = false;
      for (uint64_t m = f.alive; m; m &= m - 1) {
        const std::string& l = n.literals[size_t(std::countr_zero(m))];
        if (l.size() == f.pos) whole = true;
        if (f.pos < l.size() && uint8_t(l[f.pos]) == b) alive |= m & -m;
      }
      if (!alive) return whole ? Step::kEndRetry : Step::kReject;
      f.alive = alive;
      ++f.pos;
      return Step::kConsumed;
    }
  }
  return Step::kReject;
}

}  // namespace mla::grammar
