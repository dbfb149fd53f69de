// A model directory's tokenizer against its model, for every command that loads both.
#pragma once

#include <cstdint>
#include <string>

#include "mla/status.h"
#include "tokenizer/tokenizer.h"

namespace mla::cli {

// Every id the tokenizer can produce needs an embedding row (docs/RELIABILITY.md §Checklist R27);
// fewer ids than rows is normal (V3 pads 128,815 ids to 129,280 rows). The error names
// MODEL_DIR/tokenizer.json, the largest id and the rows.
Status check_tokenizer_fits(const tok::Tokenizer& t, int64_t vocab_rows,
                            const std::string& model_dir);

}  // namespace mla::cli
