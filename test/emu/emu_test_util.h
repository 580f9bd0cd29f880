// Helpers for the emulator tests: random 2:4 matrices whose values are exact in a 16-bit dtype.
#pragma once
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "sparse24/compressed.h"
#include "sparse24/dtype.h"
#include "sparse24/tensor.h"

namespace sparse24::testing {

// A value in [-1, -0.1] u [0.1, 1] rounded to dtype t (so it is exact in t and nonzero).
inline float random_exact(std::mt19937_64& g, DType t) {
  std::uniform_real_distribution<float> d(0.1f, 1.f);
  float v = d(g) * (g() & 1 ? -1.f : 1.f);
  return t == DType::kF16    ? half_to_float(float_to_half(v))
         : t == DType::kBF16 ? bf16_to_float(float_to_bf16(v))
                             : v;
}

// A [rows, cols] 2:4 matrix (cols % 4 == 0): each group keeps a random pair of positions, both nonzero.
inline std::vector<float> random_24_dense(std::mt19937_64& g, int64_t rows, int64_t cols, DType t) {
  static const int kPairs[6][2] = {{0, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 3}};
  std::vector<float> w(static_cast<size_t>(rows * cols), 0.f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t q = 0; q < cols / 4; ++q) {
      const auto& p = kPairs[g() % 6];
      for (int j = 0; j < 2; ++j) w[static_cast<size_t>(r * cols + 4 * q + p[j])] = random_exact(g, t);
    }
  }
  return w;
}

inline Compressed random_24(std::mt19937_64& g, int64_t rows, int64_t cols, DType t) {
  return compress(Tensor::from_float(random_24_dense(g, rows, cols, t), {rows, cols}, t));
}

}  // namespace sparse24::testing
