// Token masks for JSON under a schema (json_grammar.h): every token whose bytes the matcher
// accepts from the current state, found by a depth-first walk of the vocabulary's byte trie. A
// head may come before the JSON and a tail after it (text and control tokens: the name and the
// end of a forced tool call), then only the end ids.
//
// Cost: inside a string of any content, every token made only of plain string bytes is allowed
// as a block (precomputed), and only the tokens holding '"', '\\', control bytes or a partial
// UTF-8 sequence are walked; elsewhere the walk stops at the first byte the grammar refuses, so
// few trie nodes are visited (docs/BENCHMARKS.md §Constrained decoding).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/json_grammar.h"
#include "model/token_constraint.h"
#include "tokenizer/tokenizer.h"

namespace mla {

class VocabTrie {
 public:
  // bytes[id]: each token's text; empty ones (control and added tokens) are never drawn by the
  // grammar part (a tail's control token is allowed by id).
  explicit VocabTrie(const std::vector<std::string>& bytes);
  // The tokenizer's byte strings for ids below `vocab` (the logits width), added tokens left
  // out.
  static std::shared_ptr<const VocabTrie> from_tokenizer(const tok::Tokenizer& t, int64_t vocab);

  struct TrieNode {
    uint32_t first_child = 0, num_children = 0;  // into nodes
    uint32_t first_end = 0, num_ends = 0;        // into ends: ids whose bytes end here
    uint8_t byte = 0;
  };
  struct Trie {
    std::vector<TrieNode> nodes;  // [0]: the root
    std::vector<int32_t> ends;
  };
  int64_t vocab() const { return vocab_; }
  const std::string& bytes(int32_t id) const { return bytes_[size_t(id)]; }
  const Trie& all() const { return all_; }
  const Trie& special() const { return special_; }  // tokens that are not plain string bytes
  const std::vector<int32_t>& plain() const { return plain_; }

 private:
  int64_t vocab_ = 0;
  std::vector<std::string> bytes_;
  Trie all_, special_;
  std::vector<int32_t> plain_;
};

// What must follow the JSON: text bytes, or one control token.
struct TailPart {
  std::string text;
  int32_t control = -1;
};

// One way the constrained text may go: a head (text and control tokens), JSON under a grammar,
// a tail. Several branches (tool_choice required: one per tool) are told apart by their heads'
// texts, which must differ before any of them ends (a function name, then a byte no name has).
struct ConstraintBranch {
  std::vector<TailPart> head;
  std::shared_ptr<const grammar::Grammar> grammar;
  std::vector<TailPart> tail;
};

class JsonConstraintSpec : public TokenConstraintSpec {
 public:
  JsonConstraintSpec(std::shared_ptr<const grammar::Grammar> g,
                     std::shared_ptr<const VocabTrie> vocab, std::vector<TailPart> tail = {});
  // 1 to 64 branches.
  JsonConstraintSpec(std::vector<ConstraintBranch> branches,
                     std::shared_ptr<const VocabTrie> vocab);
  std::unique_ptr<TokenConstraint> start(std::span<const int32_t> end_ids) const override;

  const std::vector<ConstraintBranch>& branches() const { return branches_; }
  const VocabTrie& vocab() const { return *vocab_; }

 private:
  std::vector<ConstraintBranch> branches_;
  std::shared_ptr<const VocabTrie> vocab_;
};

}  // namespace mla
