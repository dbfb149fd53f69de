// mla_ops: runs every op case of the harness. Usage: mla_ops [--filter S] [--perf] [--quick]
// [--reps N]. Exit 1 if any (case, variant) fails.
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "core/cpu_features.h"
#include "harness.h"

int main(int argc, char** argv) {
  mla::ops::Options opt;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--filter") && i + 1 < argc)
      opt.filter = argv[++i];
    else if (!std::strcmp(argv[i], "--perf"))
      opt.perf = true;
    else if (!std::strcmp(argv[i], "--quick"))
      opt.quick = true;
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc)
      opt.perf_reps = std::atoi(argv[++i]);
    else {
      fmt::print(stderr, "usage: mla_ops [--filter S] [--perf] [--quick] [--reps N]\n");
      return 2;
    }
  }
  const auto& f = mla::cpu_features();
  fmt::print("cpu: avx2_fma={} avx512={} avx512_bf16={}\n", f.avx2_fma, f.avx512, f.avx512_bf16);
  std::vector<mla::ops::OpCase> cases;
  mla::ops::add_mla_decode_cases(cases, opt);
  mla::ops::add_mla_prefill_cases(cases, opt);
  mla::ops::add_mla_attention_cases(cases, opt);
  mla::ops::add_linear_cases(cases, opt);
  mla::ops::add_linear_ggml_cases(cases, opt);
  mla::ops::add_rope_cases(cases, opt);
  mla::ops::Tally tally;
  for (const auto& c : cases) c.run(opt, tally);
  fmt::print("{} cases: {} passed, {} failed, {} unsupported\n", cases.size(), tally.pass,
             tally.fail, tally.unsupported);
  return tally.fail == 0 && tally.pass > 0 ? 0 : 1;
}
