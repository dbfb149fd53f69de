// `mla attention` on the FlashMLA-style goldens (every backend/variant) and on malformed inputs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli_run.h"
#include "kernels/compare.h"
#include "temp_dir.h"

namespace {

namespace fs = std::filesystem;

// ---- running the binary -------------------------------------------------------------------

using mla::test::mla_binary;
using mla::test::run_mla;
using mla::test::RunResult;

// A per-test scratch folder, removed afterwards.
// A scratch directory per test (tests/common/temp_dir.h).
struct ScratchDir : mla::test::TempDir {
  ScratchDir() : mla::test::TempDir("mla_attention_cli") {}
};

// ---- a minimal safetensors reader and writer (the test links only mla_core) ---------------

struct F32Tensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

// Reads the F32 tensors of a safetensors file; returns an error message, empty on success.
std::string read_f32_tensors(const std::string& path, std::map<std::string, F32Tensor>* out,
                             std::map<std::string, std::string>* metadata = nullptr) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return path + ": cannot open";
  const std::string blob((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (blob.size() < 8) return path + ": shorter than the 8-byte header length";
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(blob[size_t(i)]);  // little-endian u64
  if (n > blob.size() - 8) return path + ": header length runs past the end of the file";
  const nlohmann::json h =
      nlohmann::json::parse(blob.substr(8, n), nullptr, /*allow_exceptions=*/false);
  if (h.is_discarded() || !h.is_object()) return path + ": header is not a JSON object";
  const size_t data_begin = 8 + size_t(n);
  for (const auto& [name, info] : h.items()) {
    if (name == "__metadata__") {
      if (metadata && info.is_object())
        for (const auto& [k, v] : info.items())
          if (v.is_string()) (*metadata)[k] = v.get<std::string>();
      continue;
    }
    if (!info.is_object() || !info.contains("dtype") || !info["dtype"].is_string() ||
        !info.contains("shape") || !info["shape"].is_array() || !info.contains("data_offsets") ||
        !info["data_offsets"].is_array() || info["data_offsets"].size() != 2)
      return path + ": malformed entry for tensor " + name;
    if (info["dtype"].get<std::string>() != "F32") continue;
    F32Tensor t;
    int64_t numel = 1;
    for (const auto& d : info["shape"]) {
      if (!d.is_number_unsigned()) return path + ": bad shape of tensor " + name;
      t.shape.push_back(d.get<int64_t>());
      numel *= t.shape.back();
    }
    const auto& off = info["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      return path + ": bad data_offsets of " + name;
    const uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
    if (e < b || e - b != uint64_t(numel) * 4 || data_begin + e > blob.size())
      return path + ": data_offsets of tensor " + name + " do not match its shape or the file";
    t.data.resize(size_t(numel));
    if (numel) std::memcpy(t.data.data(), blob.data() + data_begin + b, size_t(numel) * 4);
    (*out)[name] = std::move(t);
  }
  return {};
}

struct RawTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string bytes;  // little-endian C order
};

template <typename T>
RawTensor raw(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
              const std::vector<T>& values) {
  RawTensor t{name, dtype, std::move(shape), std::string(values.size() * sizeof(T), '\0')};
  if (!values.empty()) std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

void write_safetensors(const std::string& path, const std::vector<RawTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::json h = nlohmann::json::object();
  uint64_t offset = 0;
  for (const RawTensor& t : tensors) {
    h[t.name] = {{"dtype", t.dtype},
                 {"shape", t.shape},
                 {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  if (!metadata.empty()) h["__metadata__"] = metadata;
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream f(path, std::ios::binary);
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i, n >>= 8) f.put(char(n & 0xff));
  f << text;
  for (const RawTensor& t : tensors) f << t.bytes;
}

// ---- the pass rule of docs/kernels/mla_decode.md §Pass rules -------------------------------
// Per element |Δ| ≤ 8e-4 or |Δ| ≤ 2.01/128·|ref| (two BF16 ulps, FlashMLA's rule for BF16
// outputs); cosine over the finite elements ≥ 1 − 5e-6; LSE within 1e-6 or 8.01/65536 relative;
// inf/NaN in exactly the same places (empty rows: out 0, lse +inf).
constexpr double kOutAtol = 8e-4, kOutRtol = 2.01 / 128, kOutCosMin = 1.0 - 5e-6;
constexpr double kLseAtol = 1e-6, kLseRtol = 8.01 / 65536;

// A variant that rounds the probabilities of P·V to BF16 (metadata intermediates "bf16_probs")
// may add u · Σ p|v| per element, Σ p|v| being the reference's abs_out: one BF16 rounding of
// p · s (2^-8: 8 significant bits) and the FP32 roundings around it (u = kBf16ProbsUnit of
// kernels/compare.h, the one definition the harness and `mla verify` use too).
using mla::kBf16ProbsUnit;

// Returns what failed, empty on pass. extra (optional) widens each element's allowance.
std::string compare(const char* label, const F32Tensor& ref, const F32Tensor& got, double atol,
                    double rtol, double cos_min, const std::vector<double>* extra = nullptr) {
  std::ostringstream why;
  if (ref.shape != got.shape) {
    why << label << ": shape differs from the expected one";
    return why.str();
  }
  int64_t bad = 0, nonfinite = 0, worst = -1;
  double worst_err = -1, dot = 0, rr = 0, gg = 0;
  for (size_t i = 0; i < ref.data.size(); ++i) {
    const double a = ref.data[i], b = got.data[i];
    if (!std::isfinite(a) || !std::isfinite(b)) {
      if (!((std::isnan(a) && std::isnan(b)) || a == b)) {
        if (nonfinite++ == 0)
          why << label << "[" << i << "]: expected " << a << ", got " << b
              << " (inf/NaN position differs); ";
      }
      continue;
    }
    const double d = std::fabs(a - b);
    dot += a * b;
    rr += a * a;
    gg += b * b;
    const double allowed = std::max(atol, rtol * std::fabs(a)) + (extra ? (*extra)[i] : 0.0);
    if (!(d <= allowed)) {
      ++bad;
      if (d > worst_err) worst_err = d, worst = int64_t(i);
    }
  }
  if (nonfinite) why << label << ": " << nonfinite << " inf/NaN positions differ; ";
  if (bad)
    why << label << ": " << bad << " elements outside " << atol << " abs / " << rtol
        << " rel, worst [" << worst << "] expected " << ref.data[size_t(worst)] << " got "
        << got.data[size_t(worst)] << "; ";
  const double cos = (rr == 0 && gg == 0)   ? 1.0
                     : (rr == 0 || gg == 0) ? 0.0
                                            : dot / std::sqrt(rr * gg);
  if (cos < cos_min)
    why << label << ": cosine " << std::setprecision(10) << cos << " < " << cos_min << "; ";
  return why.str();
}

// ---- goldens ------------------------------------------------------------------------------

const std::string kGoldenDir = MLA_TEST_DATA_DIR "/attention";
constexpr const char* kExpectedSuffix = ".expected.safetensors";

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Case names: the inputs <name>.safetensors that have a <name>.expected.safetensors beside them.
std::vector<std::string> golden_cases() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(kGoldenDir, ec)) {
    const std::string file = e.path().filename().string();
    if (!ends_with(file, ".safetensors") || ends_with(file, kExpectedSuffix)) continue;
    const std::string name = file.substr(0, file.size() - std::string(".safetensors").size());
    if (fs::exists(kGoldenDir + "/" + name + kExpectedSuffix)) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The registered mla_decode.cpu.* variants, read from the CLI's "no variant named" message so that
// a variant added later is covered without editing this test; the list known when this was
// written stands in when the message cannot be parsed.
std::vector<std::string> cpu_variants(const std::string& any_input,
                                      const std::string& scratch_out) {
  const RunResult r = run_mla(
      {"attention", "--in", any_input, "--out", scratch_out, "--variant", "no.such.variant"});
  std::vector<std::string> names;
  const size_t start = r.out.find("(have: ");
  if (r.exit_code != 0 && start != std::string::npos) {
    std::stringstream list(r.out.substr(start + 7, r.out.find(')', start) - start - 7));
    for (std::string n; std::getline(list, n, ',');) {
      n.erase(0, n.find_first_not_of(' '));
      if (n.rfind("mla_decode.cpu.", 0) == 0) names.push_back(n);
    }
  }
  if (names.empty())
    names = {"mla_decode.cpu.avx512bf16.bf16", "mla_decode.cpu.avx512.bf16",
             "mla_decode.cpu.avx2.bf16", "mla_decode.cpu.scalar.bf16"};
  return names;
}

class AttentionCli : public testing::Test {
 protected:
  void SetUp() override {
    // CTest sets MLA_BINARY to this build's `mla`; a missing binary is a failure, not a skip.
    ASSERT_TRUE(fs::exists(mla_binary())) << mla_binary() << " is not built";
  }
};

class AttentionGolden : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(mla_binary())) << mla_binary() << " is not built";
  }
};

TEST_F(AttentionCli, GoldensArePresent) {
  // tests/e2e/flashmla_reference.py generate writes 12 plain cases and 9 quantised ones (3 per
  // format, named by a format prefix); fewer means a file went missing.
  const std::vector<std::string> names = golden_cases();
  EXPECT_GE(names.size(), 21u) << "in " << kGoldenDir;
  for (const std::string prefix : {"fp8_", "int8_", "nvfp4_"}) {
    const auto n = std::count_if(names.begin(), names.end(),
                                 [&](const std::string& s) { return s.rfind(prefix, 0) == 0; });
    EXPECT_GE(n, 3) << prefix << "* goldens in " << kGoldenDir;
  }
}

TEST_P(AttentionGolden, MatchesNumpyReference) {
  const std::string name = GetParam();
  const std::string in = kGoldenDir + "/" + name + ".safetensors";
  std::map<std::string, F32Tensor> expected;
  ASSERT_EQ(read_f32_tensors(kGoldenDir + "/" + name + kExpectedSuffix, &expected), "");
  ASSERT_TRUE(expected.count("out") && expected.count("lse"));

  ScratchDir dir;
  // The reference first: its abs_out bounds the variants with BF16 probabilities.
  std::vector<std::vector<std::string>> runs = {{"--backend", "ref"}, {"--backend", "cpu"}};
  std::vector<double> bf16_probs_extra;
  for (const std::string& v : cpu_variants(in, dir.file("discover.safetensors")))
    runs.push_back({"--variant", v});
  int checked = 0;
  for (const auto& flags : runs) {
    const std::string label = flags[0] + " " + flags[1];
    const std::string out = dir.file("out.safetensors");
    fs::remove(out);
    std::vector<std::string> args = {"attention", "--in", in, "--out", out};
    args.insert(args.end(), flags.begin(), flags.end());
    const RunResult r = run_mla(args);
    if (r.exit_code != 0 && flags[0] == "--variant" &&
        r.out.find("does not support") != std::string::npos) {
      std::cout << "  declined: " << name << " " << label << ": " << r.out;
      continue;  // only an explicit variant may decline (ISA missing, an F32 query or a quantised
                 // cache on the BF16-dot kernel)
    }
    ASSERT_EQ(r.exit_code, 0) << name << " " << label << ": " << r.out;
    std::map<std::string, F32Tensor> got;
    std::map<std::string, std::string> meta;
    ASSERT_EQ(read_f32_tensors(out, &got, &meta), "") << label;
    ASSERT_TRUE(got.count("out") && got.count("lse"))
        << out << " lacks out or lse (" << label << ")";
    if (flags[1] == "ref") {
      ASSERT_TRUE(got.count("abs_out") && got["abs_out"].shape == got["out"].shape) << label;
      bf16_probs_extra.clear();
      for (float a : got["abs_out"].data) bf16_probs_extra.push_back(kBf16ProbsUnit * a);
    }
    const bool bf16_probs = meta["intermediates"] == "bf16_probs";
    ASSERT_TRUE(!bf16_probs || !bf16_probs_extra.empty()) << label;
    const std::string why = compare("out", expected["out"], got["out"], kOutAtol, kOutRtol,
                                    kOutCosMin, bf16_probs ? &bf16_probs_extra : nullptr) +
                            compare("lse", expected["lse"], got["lse"], kLseAtol, kLseRtol, -1.0);
    EXPECT_EQ(why, "") << name << " " << label;
    ++checked;
  }
  EXPECT_GE(checked, 3) << "cpu, ref and at least the scalar variant must run";
}

INSTANTIATE_TEST_SUITE_P(Goldens, AttentionGolden, testing::ValuesIn(golden_cases()),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(AttentionGolden);

// ---- malformed inputs ---------------------------------------------------------------------
// A valid small problem (F32, d_qk 8, d_v 4, two pages of 4, 5 keys), then one defect per test.

struct Problem {
  std::vector<RawTensor> tensors;
  std::map<std::string, std::string> metadata;

  static Problem valid() {
    Problem p;
    std::vector<float> q(2 * 8), kv(2 * 4 * 8);
    for (size_t i = 0; i < q.size(); ++i) q[i] = float(int(i % 5) - 2) * 0.25f;
    for (size_t i = 0; i < kv.size(); ++i) kv[i] = float(int(i % 7) - 3) * 0.125f;
    p.tensors = {raw("q", "F32", {1, 1, 2, 8}, q), raw("kv_cache", "F32", {2, 4, 8}, kv),
                 raw("block_table", "I32", {1, 2}, std::vector<int32_t>{1, 0}),
                 raw("cache_seqlens", "I32", {1}, std::vector<int32_t>{5})};
    p.metadata = {{"softmax_scale", "0.35"}, {"causal", "false"}, {"d_v", "4"}};
    return p;
  }
  RawTensor& operator[](const std::string& name) {
    for (RawTensor& t : tensors)
      if (t.name == name) return t;
    ADD_FAILURE() << "no tensor " << name;
    return tensors.front();
  }
  void erase(const std::string& name) {
    tensors.erase(std::remove_if(tensors.begin(), tensors.end(),
                                 [&](const RawTensor& t) { return t.name == name; }),
                  tensors.end());
  }
};

// `word` occurs in `text` not as part of a longer identifier (so "q" is not found in "d_qk").
bool names_word(const std::string& text, const std::string& word) {
  auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
    const bool left = at == 0 || !ident(text[at - 1]);
    const bool right = at + word.size() >= text.size() || !ident(text[at + word.size()]);
    if (left && right) return true;
  }
  return false;
}

// Runs the problem (written to a file) and expects a clean failure whose message names the file,
// `field`, and shows `detail` (the offending value, looked for outside the path, which may hold
// digits) so that an unrelated error that merely mentions the field does not pass.
// With whole_words, each detail must stand as a word (so "fp4" is not found in "nvfp4"); several
// details must all be shown.
void expect_rejected_showing(const Problem& p, const std::string& field,
                             const std::vector<std::string>& details, bool whole_words = false) {
  ScratchDir dir;
  const std::string in = dir.file("input.safetensors"), out = dir.file("out.safetensors");
  write_safetensors(in, p.tensors, p.metadata);
  const RunResult r = run_mla({"attention", "--in", in, "--out", out});
  EXPECT_GT(r.exit_code, 0) << r.out;
  EXPECT_LT(r.exit_code, 128) << "killed by a signal: " << r.out;
  EXPECT_NE(r.out.find(in), std::string::npos) << "message does not name the file: " << r.out;
  EXPECT_TRUE(names_word(r.out, field)) << "message does not name " << field << ": " << r.out;
  std::string rest = r.out;
  for (size_t at; (at = rest.find(in)) != std::string::npos;) rest.erase(at, in.size());
  for (const std::string& detail : details) {
    const bool shown =
        whole_words ? names_word(rest, detail) : rest.find(detail) != std::string::npos;
    EXPECT_TRUE(shown) << "message does not show " << detail << ": " << r.out;
  }
  EXPECT_FALSE(fs::exists(out)) << "an output was written for a rejected input";
}

void expect_rejected(const Problem& p, const std::string& field, const std::string& detail) {
  expect_rejected_showing(p, field, {detail});
}

TEST_F(AttentionCli, ValidSmallProblemRuns) {
  // The baseline of the error tests below: without its defect each input is accepted.
  ScratchDir dir;
  const std::string in = dir.file("input.safetensors"), out = dir.file("out.safetensors");
  const Problem p = Problem::valid();
  write_safetensors(in, p.tensors, p.metadata);
  for (const char* backend : {"cpu", "ref"}) {
    const RunResult r = run_mla({"attention", "--in", in, "--out", out, "--backend", backend});
    ASSERT_EQ(r.exit_code, 0) << backend << ": " << r.out;
    std::map<std::string, F32Tensor> got;
    ASSERT_EQ(read_f32_tensors(out, &got), "");
    ASSERT_TRUE(got.count("out") && got.count("lse"));
    EXPECT_EQ(got["out"].shape, (std::vector<int64_t>{1, 1, 2, 4}));
    EXPECT_EQ(got["lse"].shape, (std::vector<int64_t>{1, 2, 1}));
  }
}

TEST_F(AttentionCli, MissingFileFails) {
  const std::string in = "/nonexistent/mla_attention_input.safetensors";
  const RunResult r =
      run_mla({"attention", "--in", in, "--out", "/tmp/mla_attention_never_written.safetensors"});
  EXPECT_GT(r.exit_code, 0);
  EXPECT_LT(r.exit_code, 128) << r.out;
  EXPECT_NE(r.out.find(in), std::string::npos) << r.out;
}

TEST_F(AttentionCli, NotSafetensorsFails) {
  ScratchDir dir;
  const std::string in = dir.file("input.safetensors");
  std::ofstream(in) << "this is a text file, not a safetensors file\n";
  const RunResult r = run_mla({"attention", "--in", in, "--out", dir.file("out.safetensors")});
  EXPECT_GT(r.exit_code, 0);
  EXPECT_LT(r.exit_code, 128) << r.out;
  EXPECT_NE(r.out.find(in), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("header"), std::string::npos) << r.out;
}

TEST_F(AttentionCli, MissingQFails) {
  Problem p = Problem::valid();
  p.erase("q");
  expect_rejected(p, "q", "missing");
}

TEST_F(AttentionCli, QOfRank3Fails) {
  Problem p = Problem::valid();
  p["q"].shape = {1, 2, 8};
  expect_rejected(p, "q", "3");
}

TEST_F(AttentionCli, KvCacheDqkMismatchFails) {
  Problem p = Problem::valid();
  p["kv_cache"].shape = {2, 2, 16};  // same bytes, d_qk 16 against q's 8
  expect_rejected(p, "kv_cache", "16");
}

TEST_F(AttentionCli, BlockTableI64Fails) {
  Problem p = Problem::valid();
  p["block_table"] = raw("block_table", "I64", {1, 2}, std::vector<int64_t>{1, 0});
  expect_rejected(p, "block_table", "I64");
}

TEST_F(AttentionCli, CacheSeqlensLongerThanBatchFails) {
  Problem p = Problem::valid();
  p["cache_seqlens"] = raw("cache_seqlens", "I32", {3}, std::vector<int32_t>{5, 5, 5});
  expect_rejected(p, "cache_seqlens", "3");
}

TEST_F(AttentionCli, UsedBlockTableEntryOutOfRangeFails) {
  Problem p = Problem::valid();
  p["block_table"] =
      raw("block_table", "I32", {1, 2}, std::vector<int32_t>{1, 777});  // 2 pages exist
  expect_rejected(p, "block_table", "777");
}

TEST_F(AttentionCli, NegativeCacheSeqlensFails) {
  Problem p = Problem::valid();
  p["cache_seqlens"] = raw("cache_seqlens", "I32", {1}, std::vector<int32_t>{-7});
  expect_rejected(p, "cache_seqlens", "-7");
}

TEST_F(AttentionCli, CausalMaybeFails) {
  Problem p = Problem::valid();
  p.metadata["causal"] = "maybe";
  expect_rejected(p, "causal", "maybe");
}

TEST_F(AttentionCli, SoftmaxScaleNotANumberFails) {
  Problem p = Problem::valid();
  p.metadata["softmax_scale"] = "abc";
  expect_rejected(p, "softmax_scale", "abc");
}

TEST_F(AttentionCli, UnknownVariantFails) {
  // The input is fine; the message must name the flag's value (the file is not at fault).
  ScratchDir dir;
  const std::string in = dir.file("input.safetensors"), out = dir.file("out.safetensors");
  const Problem p = Problem::valid();
  write_safetensors(in, p.tensors, p.metadata);
  const RunResult r =
      run_mla({"attention", "--in", in, "--out", out, "--variant", "mla_decode.cpu.nope.bf16"});
  EXPECT_GT(r.exit_code, 0);
  EXPECT_LT(r.exit_code, 128) << r.out;
  EXPECT_NE(r.out.find("mla_decode.cpu.nope.bf16"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(AttentionCli, GpuBackendFails) {
  ScratchDir dir;
  const std::string in = dir.file("input.safetensors"), out = dir.file("out.safetensors");
  const Problem p = Problem::valid();
  write_safetensors(in, p.tensors, p.metadata);
  const RunResult r = run_mla({"attention", "--in", in, "--out", out, "--backend", "gpu"});
  EXPECT_GT(r.exit_code, 0);
  EXPECT_LT(r.exit_code, 128) << r.out;
  EXPECT_NE(r.out.find("--backend"), std::string::npos) << r.out;
  EXPECT_TRUE(names_word(r.out, "gpu")) << r.out;
  EXPECT_FALSE(fs::exists(out));
}

// ---- quantised caches (kv_dtype fp8_e4m3 / int8 / nvfp4) ------------------------------------
// Records written by hand from the documented layout (docs/kernels/kv_formats.md,
// core/kv_format.h), not by the engine's quantiser: [latent | scales | rope | padding], each
// section aligned to its element size, the record padded to 16 bytes. The problem is
// Problem::valid()'s with d_v = r = 5 (odd: nvfp4's last byte holds one code) and d_r = 3, so
// fp8/int8 records are 5 + 3 pad + 4 + 6 → 32 bytes and nvfp4 ones 3 + 1 + 6 → 16. Each record's
// values are exact products code · scale.

struct QuantFormat {
  const char* name;
  const char* global_scale;  // nvfp4 metadata kv_global_scale, or nullptr (default 1/6)
};

constexpr int kQR = 5, kQDr = 3, kQDqk = kQR + kQDr;

int64_t align_up(int64_t n, int64_t a) {
  return (n + a - 1) / a * a;
}

struct QuantLayout {
  int64_t scale_offset, rope_offset, record_bytes;
};

QuantLayout quant_layout(const std::string& fmt, int r, int d_r) {
  const bool fp4 = fmt == "nvfp4";
  const int64_t latent = fp4 ? (r + 1) / 2 : r;
  const int64_t scale_elem = fp4 ? 1 : 4, n_scales = fp4 ? (r + 15) / 16 : (r + 127) / 128;
  const int64_t scale_off = align_up(latent, scale_elem);
  const int64_t rope_off = align_up(scale_off + n_scales * scale_elem, 2);
  return {scale_off, rope_off, align_up(rope_off + 2 * d_r, 16)};
}

float bf16_value(uint16_t bits) {
  const uint32_t u = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// One token's record and the values it represents (r latent then d_r rope), for token t.
void quant_record(const std::string& fmt, float g, int t, uint8_t* rec, float* values) {
  // (code, value) pairs, hand-decoded: e4m3 S.EEEE.MMM bias 7 (0x04 and 0x83 are subnormal).
  static const std::pair<uint8_t, float> kE4m3[] = {
      {0x38, 1.0f}, {0xB8, -1.0f}, {0x40, 2.0f},       {0x30, 0.5f},  {0x00, 0.0f},
      {0x44, 3.0f}, {0x4C, 6.0f},  {0x04, 0.0078125f}, {0xC2, -2.5f}, {0x83, -0.005859375f}};
  static const int8_t kI8[] = {3, -7, 127, -127, 0, 64, -1, 100};
  static const float kE2m1[16] = {0,     0.5f,  1,  1.5f,  2,  3,  4,  6,
                                  -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  static const uint16_t kRope[] = {0x3F00, 0xBFA0, 0x4000, 0x3E80, 0xC040, 0x0000, 0x3FC0};
  const QuantLayout L = quant_layout(fmt, kQR, kQDr);
  std::memset(rec, 0, size_t(L.record_bytes));
  if (fmt == "fp8_e4m3" || fmt == "int8") {
    const float scale = t % 2 ? 0.5f : 0.03125f;
    std::memcpy(rec + L.scale_offset, &scale, 4);
    for (int i = 0; i < kQR; ++i) {
      if (fmt == "fp8_e4m3") {
        const auto& [code, v] = kE4m3[(3 * t + 2 * i) % 10];
        rec[i] = code;
        values[i] = v * scale;
      } else {
        const int8_t code = kI8[(3 * t + 5 * i) % 8];
        rec[i] = uint8_t(code);
        values[i] = float(code) * scale;
      }
    }
  } else {
    static const uint8_t kScaleCode[] = {0x38, 0x30, 0x44};  // 1.0, 0.5, 3.0
    static const float kScale[] = {1.0f, 0.5f, 3.0f};
    rec[L.scale_offset] = kScaleCode[t % 3];
    for (int i = 0; i < kQR; ++i) {
      const int code = (5 * t + 7 * i + 1) % 16;
      rec[i / 2] |= uint8_t(code << (4 * (i % 2)));  // low nibble first
      values[i] = (kE2m1[code] * kScale[t % 3]) * g;
    }
  }
  for (int j = 0; j < kQDr; ++j) {
    const uint16_t bits = kRope[(t + 2 * j) % 7];
    std::memcpy(rec + L.rope_offset + 2 * j, &bits, 2);
    values[kQR + j] = bf16_value(bits);
  }
}

struct QuantProblem {
  Problem problem;
  std::vector<double> out, lse;  // expected, in double
};

QuantProblem quant_problem(const QuantFormat& f) {
  const std::string fmt = f.name;
  const float g = f.global_scale ? float(std::strtod(f.global_scale, nullptr)) : 1.0f / 6.0f;
  const int64_t rec_bytes = quant_layout(fmt, kQR, kQDr).record_bytes;
  // Two pages of 4 slots, 5 keys through block_table {1, 0}: keys 0-3 in page 1, key 4 in slot 0
  // of page 0; slots 1-3 of page 0 are 0xFF (NaN scales and codes), never to be read.
  std::vector<uint8_t> cache(size_t(2 * 4 * rec_bytes), 0xFF);
  std::vector<std::vector<float>> keys(5, std::vector<float>(kQDqk));
  for (int t = 0; t < 5; ++t) {
    const int page = t < 4 ? 1 : 0, slot = t % 4;
    quant_record(fmt, g, t, cache.data() + (page * 4 + slot) * rec_bytes, keys[size_t(t)].data());
  }
  const int h_q = 2;
  std::vector<float> q(size_t(h_q * kQDqk));
  for (size_t i = 0; i < q.size(); ++i) q[i] = float(int(i % 7) - 3) * 0.375f;
  const double scale = 0.35;
  QuantProblem qp;
  for (int h = 0; h < h_q; ++h) {
    std::vector<double> s(5);
    double m = -INFINITY;
    for (int t = 0; t < 5; ++t) {
      double dot = 0;
      for (int c = 0; c < kQDqk; ++c)
        dot += double(q[size_t(h * kQDqk + c)]) * keys[size_t(t)][size_t(c)];
      s[size_t(t)] = dot * double(float(scale));
      m = std::max(m, s[size_t(t)]);
    }
    double denom = 0;
    for (double& v : s) denom += (v = std::exp(v - m));
    for (int c = 0; c < kQR; ++c) {
      double o = 0;
      for (int t = 0; t < 5; ++t) o += s[size_t(t)] * keys[size_t(t)][size_t(c)];
      qp.out.push_back(o / denom);
    }
    qp.lse.push_back(m + std::log(denom));
  }
  Problem& p = qp.problem;
  p.tensors = {raw("q", "F32", {1, 1, h_q, kQDqk}, q),
               raw("kv_cache", "U8", {2, 4, rec_bytes}, cache),
               raw("block_table", "I32", {1, 2}, std::vector<int32_t>{1, 0}),
               raw("cache_seqlens", "I32", {1}, std::vector<int32_t>{5})};
  p.metadata = {{"softmax_scale", "0.35"},
                {"causal", "false"},
                {"d_v", std::to_string(kQR)},
                {"kv_dtype", fmt}};
  if (f.global_scale) p.metadata["kv_global_scale"] = f.global_scale;
  return qp;
}

// "fp8_e4m3", "nvfp4_g0_5", "nvfp4_default_g": test names and gtest's printout of the parameter.
std::string quant_format_label(const QuantFormat& f) {
  std::string s = f.name;
  if (s != "nvfp4") return s;
  if (!f.global_scale) return s + "_default_g";
  s += "_g";
  for (const char* c = f.global_scale; *c; ++c)
    s += std::isalnum(static_cast<unsigned char>(*c)) ? *c : '_';
  return s;
}

void PrintTo(const QuantFormat& f, std::ostream* os) {
  *os << quant_format_label(f);
}

class AttentionQuantised : public testing::TestWithParam<QuantFormat> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(mla_binary())) << mla_binary() << " is not built";
  }
};

TEST_P(AttentionQuantised, HandBuiltRecordsMatchDoubleReference) {
  const QuantProblem qp = quant_problem(GetParam());
  ScratchDir dir;
  const std::string in = dir.file("input.safetensors");
  write_safetensors(in, qp.problem.tensors, qp.problem.metadata);
  F32Tensor want_out{{1, 1, 2, kQR}, {}}, want_lse{{1, 2, 1}, {}};
  for (double v : qp.out) want_out.data.push_back(float(v));
  for (double v : qp.lse) want_lse.data.push_back(float(v));
  // The reference first: its abs_out bounds the variants with BF16 probabilities.
  std::vector<std::vector<std::string>> runs = {{"--backend", "ref"}, {"--backend", "cpu"}};
  std::vector<double> bf16_probs_extra;
  for (const std::string& v : cpu_variants(in, dir.file("discover.safetensors")))
    runs.push_back({"--variant", v});
  int checked = 0;
  for (const auto& flags : runs) {
    const std::string label = flags[0] + " " + flags[1];
    const std::string out = dir.file("out.safetensors");
    fs::remove(out);
    const RunResult r = run_mla({"attention", "--in", in, "--out", out, flags[0], flags[1]});
    if (r.exit_code != 0 && flags[0] == "--variant" &&
        r.out.find("does not support") != std::string::npos)
      continue;
    ASSERT_EQ(r.exit_code, 0) << label << ": " << r.out;
    std::map<std::string, F32Tensor> got;
    ASSERT_EQ(read_f32_tensors(out, &got), "") << label;
    ASSERT_TRUE(got.count("out") && got.count("lse")) << label;
    // An FP32 query over exact FP32 key values and 8-term dots: FP32 kernels land within ~1e-6.
    const std::string why = compare("out", want_out, got["out"], 2e-5, 2e-5, 1.0 - 1e-9) +
                            compare("lse", want_lse, got["lse"], 2e-5, 2e-5, -1.0);
    EXPECT_EQ(why, "") << GetParam().name << " " << label;
    ++checked;
  }
  EXPECT_GE(checked, 3) << "cpu, ref and at least the scalar variant must run";
}

INSTANTIATE_TEST_SUITE_P(
    Formats, AttentionQuantised,
    testing::Values(QuantFormat{"fp8_e4m3", nullptr}, QuantFormat{"int8", nullptr},
                    QuantFormat{"nvfp4", nullptr}, QuantFormat{"nvfp4", "0.5"}),
    [](const testing::TestParamInfo<QuantFormat>& i) { return quant_format_label(i.param); });

Problem quantised(const char* fmt, const char* global_scale = nullptr) {
  return quant_problem({fmt, global_scale}).problem;
}

TEST_F(AttentionCli, U8CacheWithoutKvDtypeFails) {
  Problem p = quantised("fp8_e4m3");
  p.metadata.erase("kv_dtype");
  expect_rejected_showing(p, "kv_cache", {"U8", "kv_dtype"});
}

TEST_F(AttentionCli, UnknownKvDtypeFails) {
  Problem p = quantised("nvfp4");
  p.metadata["kv_dtype"] = "fp4";
  expect_rejected_showing(p, "kv_dtype", {"fp4"}, /*whole_words=*/true);
}

TEST_F(AttentionCli, KvDtypeWithFloatCacheFails) {
  Problem p = Problem::valid();  // F32 rows
  p.metadata["kv_dtype"] = "int8";
  expect_rejected_showing(p, "kv_cache", {"F32", "U8"}, /*whole_words=*/true);
}

TEST_F(AttentionCli, RecordSizeMismatchFails) {
  // fp8 records of 48 bytes (32 expected); the tensor's bytes match its shape.
  Problem p = quantised("fp8_e4m3");
  p["kv_cache"] = raw("kv_cache", "U8", {2, 4, 48}, std::vector<uint8_t>(2 * 4 * 48));
  expect_rejected_showing(p, "kv_cache", {"48", "32"}, /*whole_words=*/true);
}

TEST_F(AttentionCli, Fp8SizedRecordsAsNvfp4Fail) {
  // The records of another format: 32-byte fp8 records named nvfp4 (16 bytes at r 5, d_r 3).
  Problem p = quantised("fp8_e4m3");
  p.metadata["kv_dtype"] = "nvfp4";
  expect_rejected_showing(p, "kv_cache", {"32", "16"}, /*whole_words=*/true);
}

TEST_F(AttentionCli, Nvfp4GlobalScaleZeroFails) {
  expect_rejected_showing(quantised("nvfp4", "0"), "kv_global_scale", {"0"}, /*whole_words=*/true);
}

TEST_F(AttentionCli, Nvfp4GlobalScaleNanFails) {
  expect_rejected_showing(quantised("nvfp4", "nan"), "kv_global_scale", {"nan"},
                          /*whole_words=*/true);
}

TEST_F(AttentionCli, Nvfp4GlobalScaleNegativeFails) {
  expect_rejected_showing(quantised("nvfp4", "-0.5"), "kv_global_scale", {"-0.5"});
}

TEST_F(AttentionCli, Nvfp4GlobalScaleInfFails) {
  expect_rejected_showing(quantised("nvfp4", "inf"), "kv_global_scale", {"inf"},
                          /*whole_words=*/true);
}

}  // namespace
