// JSON constrained to a JSON Schema, one byte at a time (docs/SERVING.md §Structured output).
//
// Grammar: a schema compiled into nodes (the subset OpenAI documents for strict mode: object with
// properties / required / additionalProperties, array with items / minItems / maxItems, string,
// number, integer, boolean, null, enum, const, anyOf, type lists, $ref into $defs, recursion);
// annotations (title, description, default, examples, format, ...) are ignored, any other keyword
// is refused by name. Grammar::any_object() is response_format json_object: any JSON object.
//
// Matcher: a pushdown automaton over the bytes of compact JSON: properties in the schema's
// order (optional ones may be left out), no whitespace but one optional space after ':' and ',',
// numbers of at most 16 digits before and after the point and 2 in the exponent, strings of valid
// UTF-8 with JSON escapes. Every text it accepts to the end is valid JSON that the schema
// validates. Its state is a fixed array of frames, copied cheaply by the token-mask search
// (token_constraint.h).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mla/status.h"

namespace mla::grammar {

struct Node {
  enum class Kind : uint8_t {
    kAny,       // any JSON value (json_object's values)
    kObject,    // keys / values / required; free_keys: any keys, kAny values
    kArray,     // items, min_items, max_items
    kString,    // any string
    kNumber,    // any JSON number
    kInteger,   // digits with an optional minus sign
    kLiterals,  // one of `literals` (enum, const, true / false, null)
    kAnyOf,     // one of `alternatives`, told apart by their first byte
  };
  Kind kind = Kind::kAny;
  std::vector<std::string> keys;  // kObject: each key as JSON text, quotes included
  std::vector<int> values;        // kObject: the value node of each key
  std::vector<bool> required;     // kObject
  bool free_keys = false;         // kObject
  int items = -1;                 // kArray
  uint32_t min_items = 0, max_items = UINT32_MAX;
  std::vector<std::string> literals;  // kLiterals: compact JSON texts, at most 64
  std::vector<int> alternatives;      // kAnyOf
};

class Grammar {
 public:
  // A schema whose root is an object (as OpenAI requires). Errors name the JSON pointer of the
  // part at fault: "#/properties/a/pattern: the keyword pattern is not supported".
  static Result<std::shared_ptr<const Grammar>> from_schema(const nlohmann::ordered_json& schema);
  // Any JSON object (response_format json_object), nested at most kMaxDepth deep.
  static std::shared_ptr<const Grammar> any_object();

  const Node& node(int i) const { return nodes_[static_cast<size_t>(i)]; }
  int root() const { return root_; }
  // Which bytes can start a value of node i (bit b of the 256-bit set).
  bool can_start(int i, uint8_t b) const;

  std::vector<Node> nodes_;
  int root_ = 0;
  int any_ = -1, any_object_ = -1, any_array_ = -1, string_ = -1, number_ = -1, words_ = -1;
};

// UTF-8 as RFC 3629 has it: how many continuation bytes follow `lead` (0: not a lead byte), and
// the range of the first one (high byte: lowest, low byte: highest).
uint8_t utf8_continuations(uint8_t lead);
uint16_t utf8_second_range(uint8_t lead);

class Matcher {
 public:
  static constexpr int kMaxDepth = 24;  // frames: nesting deeper than about 11 levels is refused

  explicit Matcher(const Grammar* g);
  // Consumes one byte; false (and the state left unusable) when the grammar does not allow it.
  bool advance(uint8_t b);
  // The root value is whole: only what follows the JSON may come next.
  bool complete() const { return depth_ == 0; }
  // Inside a string of any content, not in an escape or a UTF-8 sequence: every byte but '"',
  // '\\' and control bytes continues it the same way.
  bool in_free_string() const;

  struct Frame {
    int32_t node;
    uint8_t phase;
    uint8_t sub;     // escape hex digits or UTF-8 continuation bytes left; key being matched
    uint16_t pos;    // bytes of a literal matched; digits of the current number part
    uint32_t index;  // object: the next property that may come; array: items so far
    uint64_t alive;  // literals / keys still matching
  };

 private:
  enum class Step { kConsumed, kReject, kEndConsumed, kEndRetry };
  Step step(Frame& f, uint8_t b);
  Step start_value(Frame& f, uint8_t b);
  bool push(int node, uint8_t b);  // a new value frame that starts with byte b

  const Grammar* g_;
  int depth_ = 0;
  std::array<Frame, kMaxDepth> stack_{};
};

}  // namespace mla::grammar
