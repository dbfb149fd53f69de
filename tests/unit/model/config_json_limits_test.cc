// config.json and model.safetensors.index.json nested deeper than kMaxJsonFileDepth are refused
// before parsing, with the file and the offset in the message (error paths dump values, and
// nlohmann's dump() recurses, so a 16 MiB "[[[..." once meant a stack overflow).
#include <gtest/gtest.h>

#include <string>

#include "io/json_limits.h"
#include "model/checkpoint_index.h"
#include "model/model_config.h"

namespace mla {
namespace {

std::string nested(int depth) {
  return std::string(size_t(depth), '[') + std::string(size_t(depth), ']');
}

TEST(ConfigJsonLimits, DeepConfigIsRefusedBeforeParsing) {
  const Result<ModelConfig> c =
      parse_model_config(R"({"hidden_size": )" + nested(200000) + "}", "deep/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("deep/config.json"), std::string::npos);
  EXPECT_NE(c.status().message().find("deeper than 64 levels (at byte 79)"), std::string::npos)
      << c.status().message();
}

TEST(ConfigJsonLimits, DeepIndexIsRefusedBeforeParsing) {
  const Result<ShardMap> m = parse_checkpoint_index(
      R"({"metadata": )" + nested(kMaxJsonFileDepth) + R"(, "weight_map": {}})", "index.json");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("deeper than 64"), std::string::npos) << m.status().message();
  // At the limit the depth is fine and the parse goes on to the real error.
  const Result<ShardMap> ok_depth = parse_checkpoint_index(
      R"({"metadata": )" + nested(kMaxJsonFileDepth - 1) + R"(, "weight_map": {}})", "index.json");
  ASSERT_FALSE(ok_depth.ok());
  EXPECT_NE(ok_depth.status().message().find("\"weight_map\" is empty"), std::string::npos)
      << ok_depth.status().message();
}

}  // namespace
}  // namespace mla
