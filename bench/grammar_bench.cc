// Constrained decoding's cost per token (model/json_constraint.h) at the DeepSeek-V3 vocabulary
// (129,280 logits): one token mask in each kind of JSON state, and the vocabulary trie's build.
// docs/BENCHMARKS.md §Constrained decoding compares it with a decode step.
//   MLA_GRAMMAR_BENCH_JSON  tokenizer.json (default: $MLA_DEEPSEEK_V3_TOKENIZER_DIR/tokenizer.json)
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "model/json_constraint.h"
#include "tokenizer/tokenizer.h"

namespace {

constexpr int64_t kV3Logits = 129280;

struct Fixture {
  std::optional<mla::tok::Tokenizer> tok;
  std::shared_ptr<const mla::VocabTrie> vocab;
  std::string error;
};

const Fixture& fixture() {
  static const Fixture f = [] {
    Fixture f;
    const char* json = std::getenv("MLA_GRAMMAR_BENCH_JSON");
    const char* v3_dir = std::getenv("MLA_DEEPSEEK_V3_TOKENIZER_DIR");
    mla::Result<mla::tok::Tokenizer> t = mla::tok::Tokenizer::from_file(
        json ? json : std::string(v3_dir ? v3_dir : ".") + "/tokenizer.json");
    if (!t.ok()) {
      f.error = t.status().to_string();
      return f;
    }
    f.tok.emplace(std::move(*t));
    f.vocab = mla::VocabTrie::from_tokenizer(*f.tok, kV3Logits);
    return f;
  }();
  return f;
}

const char* kSchema = R"({"type": "object", "properties": {
    "name": {"type": "string"}, "age": {"type": "integer"}, "email": {"type": "string"},
    "tags": {"type": "array", "items": {"enum": ["admin", "dev", "ops"]}},
    "address": {"type": "object", "properties": {"city": {"type": "string"},
                "zip": {"type": "string"}}, "required": ["city", "zip"]}},
  "required": ["name", "age", "email", "tags", "address"], "additionalProperties": false})";

// One mask after `prefix` (encoded with the tokenizer) under the schema, or json_object.
void mask_after(benchmark::State& state, const char* prefix, bool any_object) {
  const Fixture& f = fixture();
  if (!f.error.empty()) return state.SkipWithError(f.error.c_str());
  auto g = any_object ? mla::grammar::Grammar::any_object()
                      : *mla::grammar::Grammar::from_schema(nlohmann::ordered_json::parse(kSchema));
  mla::JsonConstraintSpec spec(g, f.vocab);
  const std::vector<int32_t> ends = {1};
  auto c = spec.start(ends);
  mla::Result<std::vector<int32_t>> ids = f.tok->encode(prefix, mla::tok::EncodeOptions{});
  for (int32_t id : *ids)
    if (!c->accept(id)) return state.SkipWithError("the prefix breaks the grammar");
  std::vector<float> logits(size_t(kV3Logits), 0.0f);
  for (auto _ : state) {
    c->mask(logits);
    benchmark::DoNotOptimize(logits.data());
  }
}

void build_trie(benchmark::State& state) {
  const Fixture& f = fixture();
  if (!f.error.empty()) return state.SkipWithError(f.error.c_str());
  for (auto _ : state) benchmark::DoNotOptimize(mla::VocabTrie::from_tokenizer(*f.tok, kV3Logits));
}

BENCHMARK_CAPTURE(mask_after, object_start, "{", false)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(mask_after, key, R"({"name":"Ann","age":3,)", false)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(mask_after, free_string, R"({"name":"Ann Lee, )", false)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(mask_after, number, R"({"name":"Ann","age":12)", false)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(mask_after, enum_value, R"({"name":"A","age":1,"email":"e","tags":[)", false)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(mask_after, json_object_value, R"({"a":[1,{"b":)", true)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(build_trie)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
