// The layer-wise objective SparseGPT minimises, for tests of the pruning methods on tiny models.
#pragma once
#include <cstddef>
#include <vector>

namespace sparse24::testing {

// Sum over the calibration inputs x and the output rows r of ((W - A) x)_r^2: W the dense [out, in] weight
// (row-major), A the pruned one, each input `in` values.
inline double output_error(const std::vector<float>& w, const std::vector<float>& a,
                           const std::vector<std::vector<double>>& inputs) {
  double e = 0;
  for (const std::vector<double>& x : inputs) {
    const size_t in = x.size(), out = w.size() / in;
    for (size_t r = 0; r < out; ++r) {
      double d = 0;
      for (size_t c = 0; c < in; ++c) d += (static_cast<double>(w[r * in + c]) - a[r * in + c]) * x[c];
      e += d * d;
    }
  }
  return e;
}

}  // namespace sparse24::testing
