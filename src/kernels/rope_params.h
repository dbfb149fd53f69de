// RoPE configuration (plain or YaRN) as the kernels see it: no model names, only the numbers.
#pragma once

#include <vector>

namespace mla {

enum class RopeLayout {
  kInterleaved,  // pairs (2i, 2i+1): DeepSeek checkpoints, GPT-J style
  kNeox,         // pairs (i, i + d/2): rotate-half style
};

struct RopeScaling {
  bool yarn = false;
  double factor = 1.0;                    // s
  double original_max_position = 4096.0;  // L0
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 1.0;
  double mscale_all_dim = 0.0;
  // LongRoPE (MiniCPM3, Phi-3; exclusive with yarn): pair i's frequency is divided by ext[i], and
  // cos / sin are multiplied by longrope_attention.
  std::vector<double> longrope_ext;  // [dim / 2]; empty: no LongRoPE
  double longrope_attention = 1.0;
};

struct RopeConfig {
  int dim = 64;  // d_r, even
  double theta = 10000.0;
  RopeLayout layout = RopeLayout::kInterleaved;
  RopeScaling scaling;
};

}  // namespace mla
