// Byte-level BPE model: vocabulary, ranked merges, and the merge loop for one pre-tokenized piece.
// Knows nothing about JSON (tokenizer_json.cc builds it) or about added tokens.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "mla/status.h"

namespace mla::tok {

// Ids may leave holes, but the largest id is below the number of entries plus this (vocab ids
// in model.vocab, and added-token ids against vocab + added entries): ids size dense tables.
inline constexpr int64_t kMaxVocabIdGap = int64_t{1} << 16;

struct BpeSpec {
  std::vector<std::pair<std::string, int32_t>> vocab;       // token text (byte-level form) → id
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order, rank 0 first
  bool ignore_merges = false;  // a piece that is itself a vocabulary entry is taken whole
};

class BpeModel {
 public:
  // Checks the spec: ids non-negative, unique and below vocab.size() + kMaxVocabIdGap, every byte
  // of the alphabet present, each merge naming known tokens whose concatenation is known, no merge
  // listed twice. `where` names the file for messages.
  static Result<BpeModel> build(BpeSpec spec, std::string_view where);

  // Appends the ids of one piece given as raw bytes (the byte-level mapping is implicit). Lowest
  // merge rank first, leftmost first among equal ranks: Hugging Face's order. O(n log n) in the
  // piece length; a thread-local cache remembers short pieces.
  void encode_piece(std::string_view piece, std::vector<int32_t>* out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // Token text of id, or nullptr for an id the vocabulary lacks.
  const std::string* id_to_token(int32_t id) const;
  int32_t max_id() const { return static_cast<int32_t>(id_to_token_.size()) - 1; }
  size_t vocab_size() const { return vocab_.size(); }
  size_t merge_count() const { return merge_count_; }

 private:
  struct MergeSlot {
    uint64_t key = kEmpty;
    int32_t rank = 0;
    int32_t new_id = 0;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  const MergeSlot* find_merge(int32_t a, int32_t b) const;
  void merge_word(std::string_view piece, std::vector<int32_t>* out) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;  // "" for holes in the id range
  std::vector<bool> has_id_;
  std::vector<MergeSlot> merges_;  // open addressing, power-of-two size
  size_t merge_count_ = 0;
  int32_t byte_id_[256] = {};
  bool ignore_merges_ = false;
  uint64_t serial_ = 0;  // identifies this model to the thread-local cache
};

}  // namespace mla::tok
