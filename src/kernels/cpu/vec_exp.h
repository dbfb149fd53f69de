// Vector exp for the AVX2 / AVX-512 Vec types: exp(x) = 2^n · e^r with n = round(x / ln 2),
// r = x − n·ln 2 in two parts (|r| ≤ ln2/2), e^r by its degree-7 Taylor polynomial (truncation
// < 7e-9 relative, below FP32 rounding). Inputs below −87.33 (where e^x leaves the normal range)
// give exactly 0, so masked scores (−inf) contribute nothing. Included inside a Vec definition.
#pragma once

namespace mla::cpu {
namespace {

// Shared constants; the Vec types build 2^n themselves. NaN inputs stay NaN.
struct ExpConst {
  static constexpr float kLog2e = 1.44269504088896341f;
  static constexpr float kLn2Hi = 0.693145751953125f;         // 12 significant bits: n·hi exact
  static constexpr float kLn2Lo = 1.428606765330187045e-06f;  // ln 2 − hi
  static constexpr float kMin = -87.33654475f;                // ln(FLT_MIN)
  static constexpr float kMax = 88.37626266f;                 // ln(FLT_MAX)
  static constexpr float kC[8] = {1.0f,      1.0f,       0.5f,       1.0f / 6,
                                  1.0f / 24, 1.0f / 120, 1.0f / 720, 1.0f / 5040};
};

}  // namespace
}  // namespace mla::cpu
