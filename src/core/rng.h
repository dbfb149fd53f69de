// Rng: a small, seedable, platform-independent generator (SplitMix64 + Box-Muller) so that test
// inputs and `mla verify` inputs are the same on every machine and standard library.
#pragma once

#include <cmath>
#include <cstdint>

namespace mla {

class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next_u64() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1).
  double uniform() { return double(next_u64() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n).
  uint64_t below(uint64_t n) { return next_u64() % n; }
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    double r = std::sqrt(-2.0 * std::log(u1)), t = 6.283185307179586 * u2;
    spare_ = r * std::sin(t);
    has_spare_ = true;
    return r * std::cos(t);
  }

 private:
  uint64_t s_;
  double spare_ = 0;
  bool has_spare_ = false;
};

}  // namespace mla
