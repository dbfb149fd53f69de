// Shared helpers for the tokenizer tests: fixture paths and golden-file loading.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "tokenizer/json_read.h"
#include "tokenizer/tokenizer.h"

namespace mla::tok::testing_util {

// The real DeepSeek-V3 tokenizer files (tokenizer.json, tokenizer_config.json of the model's
// Hugging Face repository), read in place from the folder MLA_DEEPSEEK_V3_TOKENIZER_DIR names;
// the tests that need them skip without it (docs/TOKENIZER.md §Tests).
inline std::string v3_dir() {
  const char* dir = std::getenv("MLA_DEEPSEEK_V3_TOKENIZER_DIR");
  return dir ? dir : "(MLA_DEEPSEEK_V3_TOKENIZER_DIR unset)";
}
inline std::string v3_json() {
  return v3_dir() + "/tokenizer.json";
}
inline std::string data_path(const std::string& name) {
  return std::string(MLA_TEST_DATA_DIR) + "/tokenizer/" + name;
}

inline Json load_golden(const std::string& name) {
  Result<std::string> text = read_text_file(data_path(name));
  EXPECT_TRUE(text.ok()) << text.status().to_string();
  if (!text.ok()) return Json();
  Result<Json> j = parse_json(*text, name);
  EXPECT_TRUE(j.ok()) << j.status().to_string();
  return j.ok() ? *j : Json();
}

// The V3 tokenizer, loaded once per test binary (0.4 s); skips when the shared files are absent.
inline const Tokenizer* v3_tokenizer() {
  static const Result<Tokenizer>* t = [] {
    return new Result<Tokenizer>(Tokenizer::from_file(v3_json()));
  }();
  return t->ok() ? &t->value() : nullptr;
}

#define MLA_NEED_V3(var)                                                            \
  const ::mla::tok::Tokenizer* var = ::mla::tok::testing_util::v3_tokenizer();      \
  if (!var) {                                                                       \
    if (!std::filesystem::exists(::mla::tok::testing_util::v3_json()))              \
      GTEST_SKIP() << "missing " << ::mla::tok::testing_util::v3_json();            \
    FAIL() << ::mla::tok::Tokenizer::from_file(::mla::tok::testing_util::v3_json()) \
                  .status()                                                         \
                  .to_string();                                                     \
  }

}  // namespace mla::tok::testing_util
