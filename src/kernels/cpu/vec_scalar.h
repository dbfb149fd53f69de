// VecScalar: the one-lane "vector" that instantiates the generic CPU kernels as plain C++ (the
// scalar variant, and the fallback on CPUs without AVX2). Internal linkage: include once per TU.
#pragma once

#include <algorithm>
#include <cmath>

namespace mla::cpu {
namespace {

struct VecScalar {
  static constexpr int kWidth = 1;
  static constexpr const char* kIsa = "scalar";
  float v;
  static VecScalar zero() { return {0.0f}; }
  static VecScalar set1(float x) { return {x}; }
  static VecScalar load(const float* p) { return {*p}; }
  void store(float* p) const { *p = v; }
  static VecScalar where_lt(VecScalar a, VecScalar b, VecScalar x, VecScalar y) {
    return {a.v < b.v ? x.v : y.v};
  }
  float reduce_max() const { return v; }
  float reduce_add() const { return v; }
  // exp(x), 0 for -inf.
  static VecScalar exp(VecScalar x) { return {std::exp(x.v)}; }
};

// a·b + c with two roundings: std::fma is a slow library call on CPUs without FMA, the very CPUs
// this variant exists for.
inline VecScalar fma(VecScalar a, VecScalar b, VecScalar c) {
  return {a.v * b.v + c.v};
}
inline VecScalar operator+(VecScalar a, VecScalar b) {
  return {a.v + b.v};
}
inline VecScalar operator-(VecScalar a, VecScalar b) {
  return {a.v - b.v};
}
inline VecScalar operator*(VecScalar a, VecScalar b) {
  return {a.v * b.v};
}
inline VecScalar max(VecScalar a, VecScalar b) {
  return {std::max(a.v, b.v)};
}

}  // namespace
}  // namespace mla::cpu
