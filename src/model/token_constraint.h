// Constrained decoding's hook in the sampler (docs/SERVING.md §Structured output): a spec shared
// by all samples of a request makes one mutable state per sequence, which masks the logits
// before each draw and follows the tokens drawn.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

namespace mla {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets the logit of every token that may not come next to -inf (logits: [vocab]); false when
  // no token may.
  virtual bool mask(std::span<float> logits) const = 0;
  // The token drawn; false when the state did not allow it.
  virtual bool accept(int32_t token) = 0;
};

class TokenConstraintSpec {
 public:
  virtual ~TokenConstraintSpec() = default;
  // A fresh state. end_ids: the tokens that end the reply (EOS, stop ids), allowed once the
  // constrained text is whole and only then.
  virtual std::unique_ptr<TokenConstraint> start(std::span<const int32_t> end_ids) const = 0;
};

}  // namespace mla
