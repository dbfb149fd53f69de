#include "tokenizer_fit.h"

#include <fmt/format.h>

#include <filesystem>

#include "tokenizer/tokenizer_config.h"

namespace mla::cli {

Status check_tokenizer_fits(const tok::Tokenizer& t, int64_t vocab_rows,
                            const std::string& model_dir) {
  if (t.id_limit() <= vocab_rows) return Status();
  return invalid_argument(fmt::format(
      "{}: token ids run to {}, past the {} embedding rows of the model (config.json vocab_size)",
      tok::tokenizer_file(model_dir).value_or(
          (std::filesystem::path(model_dir) / "tokenizer.json").string()),
      t.id_limit() - 1, vocab_rows));
}

}  // namespace mla::cli
