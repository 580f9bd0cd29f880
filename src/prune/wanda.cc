// Wanda (Sun et al. 2023): prune by |w_ij| * ||X_:,j||_2, 2 of every 4 per row.
#include <cmath>
#include <string>

#include "sparse24/error.h"
#include "sparse24/prune.h"

namespace sparse24 {

std::vector<float> column_norms(const float* x, int64_t tokens, int64_t cols) {
  if (tokens < 0 || cols < 1) {
    throw Error("invalid calibration input [" + std::to_string(tokens) + ", " + std::to_string(cols) + "]");
  }
  std::vector<double> sum(static_cast<size_t>(cols), 0.0);
  for (int64_t t = 0; t < tokens; ++t) {
    const float* row = x + t * cols;
    for (int64_t c = 0; c < cols; ++c) {
      if (!std::isfinite(row[c])) {
        throw Error("non-finite calibration input at token " + std::to_string(t) + ", column " +
                    std::to_string(c));
      }
      sum[static_cast<size_t>(c)] += static_cast<double>(row[c]) * row[c];
    }
  }
  std::vector<float> norms(static_cast<size_t>(cols));
  for (int64_t c = 0; c < cols; ++c)
    norms[static_cast<size_t>(c)] = static_cast<float>(std::sqrt(sum[static_cast<size_t>(c)]));
  return norms;
}

Mask wanda_mask(const float* w, int64_t rows, int64_t cols, const std::vector<float>& norms) {
  if (rows < 0 || cols < 1) {
    throw Error("invalid matrix [" + std::to_string(rows) + ", " + std::to_string(cols) + "]");
  }
  if (static_cast<int64_t>(norms.size()) != cols) {
    throw Error("Wanda needs one input norm per column: got " + std::to_string(norms.size()) + " for " +
                std::to_string(cols) + " columns");
  }
  for (int64_t c = 0; c < cols; ++c) {
    const float n = norms[static_cast<size_t>(c)];
    if (!std::isfinite(n) || n < 0)
      throw Error("invalid input norm " + std::to_string(n) + " at column " + std::to_string(c));
  }
  reject_nan(w, rows, cols);
  // The score matrix has the same 2:4 selection rule as magnitude (ties keep the lower index).
  std::vector<float> score(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      score[static_cast<size_t>(r * cols + c)] = std::fabs(w[r * cols + c]) * norms[static_cast<size_t>(c)];
  return magnitude_mask(score.data(), rows, cols, kPattern24);
}

}  // namespace sparse24
