// Tokenizer throughput (one thread): encode and decode MB/s on a mixed corpus with the real
// DeepSeek-V3 tokenizer. bench/tokenizer_bench.py builds the corpus and runs Hugging Face
// `tokenizers` on it in the same run for the side-by-side table in docs/BENCHMARKS.md.
//   MLA_TOKENIZER_BENCH_CORPUS  corpus file (UTF-8); required
//   MLA_TOKENIZER_BENCH_JSON    tokenizer.json (default:
//   $MLA_DEEPSEEK_V3_TOKENIZER_DIR/tokenizer.json)
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/json_read.h"
#include "tokenizer/tokenizer.h"

namespace {

using mla::tok::Tokenizer;

struct Fixture {
  std::optional<Tokenizer> tok;
  std::string corpus;
  std::vector<std::string> paragraphs;  // the corpus cut at blank lines, as separate requests
  std::string error;
};

const Fixture& fixture() {
  static const Fixture f = [] {
    Fixture f;
    const char* json = std::getenv("MLA_TOKENIZER_BENCH_JSON");
    const char* v3_dir = std::getenv("MLA_DEEPSEEK_V3_TOKENIZER_DIR");
    const std::string json_path =
        json ? json : std::string(v3_dir ? v3_dir : ".") + "/tokenizer.json";
    const char* corpus = std::getenv("MLA_TOKENIZER_BENCH_CORPUS");
    if (!corpus) {
      f.error = "set MLA_TOKENIZER_BENCH_CORPUS (bench/tokenizer_bench.py does)";
      return f;
    }
    mla::Result<Tokenizer> t = Tokenizer::from_file(json_path);
    mla::Result<std::string> text = mla::tok::read_text_file(corpus);
    if (!t.ok() || !text.ok()) {
      f.error = !t.ok() ? t.status().to_string() : text.status().to_string();
      return f;
    }
    f.tok.emplace(std::move(*t));
    f.corpus = std::move(*text);
    for (size_t pos = 0; pos < f.corpus.size();) {
      size_t end = f.corpus.find("\n\n", pos);
      end = end == std::string::npos ? f.corpus.size() : end + 2;
      f.paragraphs.push_back(f.corpus.substr(pos, end - pos));
      pos = end;
    }
    return f;
  }();
  return f;
}

void encode_whole(benchmark::State& state, bool special) {
  const Fixture& f = fixture();
  if (!f.error.empty()) return state.SkipWithError(f.error.c_str());
  mla::tok::EncodeOptions o;
  o.parse_special = special;
  size_t ids = 0;
  for (auto _ : state) {
    mla::Result<std::vector<int32_t>> r = f.tok->encode(f.corpus, o);
    if (!r.ok()) return state.SkipWithError(r.status().to_string().c_str());
    ids = r->size();
    benchmark::DoNotOptimize(r->data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * f.corpus.size()));
  state.counters["ids"] = static_cast<double>(ids);
}

void BM_EncodeWhole(benchmark::State& state) {
  encode_whole(state, false);
}
void BM_EncodeWholeSpecial(benchmark::State& state) {
  encode_whole(state, true);
}

void BM_EncodeParagraphs(benchmark::State& state) {
  const Fixture& f = fixture();
  if (!f.error.empty()) return state.SkipWithError(f.error.c_str());
  std::vector<int32_t> ids;
  for (auto _ : state) {
    for (const std::string& p : f.paragraphs) {
      ids.clear();
      mla::Status s = f.tok->encode_append(p, {}, &ids);
      if (!s.ok()) return state.SkipWithError(s.to_string().c_str());
      benchmark::DoNotOptimize(ids.data());
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * f.corpus.size()));
  state.counters["paragraphs"] = static_cast<double>(f.paragraphs.size());
}

void BM_Decode(benchmark::State& state) {
  const Fixture& f = fixture();
  if (!f.error.empty()) return state.SkipWithError(f.error.c_str());
  const std::vector<int32_t> ids = *f.tok->encode(f.corpus);
  for (auto _ : state) {
    mla::Result<std::string> text = f.tok->decode(ids);
    benchmark::DoNotOptimize(text->data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * f.corpus.size()));
}

// 1 MiB of one repeated character: the input that makes naive pre-tokenizers and BPE merges
// quadratic (tests/unit/tokenizer/long_input_test.cc checks only that it stays far from that;
// the ≤ 1 s per MiB target is measured here).
void BM_EncodeOneMiBOfOneCharacter(benchmark::State& state) {
  const Fixture& f = fixture();
  if (!f.error.empty()) return state.SkipWithError(f.error.c_str());
  static const char* const kChars[] = {"a", " ", "\n", "\xe4\xb8\xad"};
  const std::string c = kChars[state.range(0)];
  std::string text;
  while (text.size() + c.size() <= (1u << 20)) text += c;
  state.SetLabel(state.range(0) == 3 ? "U+4E2D" : (c == "\n" ? "\\n" : "'" + c + "'"));
  for (auto _ : state) {
    mla::Result<std::vector<int32_t>> r = f.tok->encode(text);
    if (!r.ok()) return state.SkipWithError(r.status().to_string().c_str());
    benchmark::DoNotOptimize(r->data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}

BENCHMARK(BM_EncodeWhole)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EncodeOneMiBOfOneCharacter)->DenseRange(0, 3)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EncodeWholeSpecial)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EncodeParagraphs)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Decode)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
