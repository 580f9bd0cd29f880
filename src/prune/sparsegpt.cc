// SparseGPT (Frantar & Alistarh 2023) for 2:4, our own implementation in double precision.
//
// With U the upper Cholesky factor of H^-1 (H^-1 = U^T U), pruning column i of a row and compensating the
// remaining columns j > i of that row is w_j -= (w_i - q_i) / U_ii * U_ij (the OBS update). Each row is
// independent, so rows are processed in batches (OpenMP over batches); within a batch, columns go in blocks
// of block_size: updates inside a block are applied at once, the block's errors update the columns after
// it in one matrix product over the batch's rows (the lazy batch update, dense.h), so U's block rows are
// reused across the rows of a batch.
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "dense.h"
#include "sparse24/error.h"
#include "sparse24/prune.h"

namespace sparse24 {

Mask sparsegpt_prune(float* w, int64_t rows, int64_t cols, const Hessian& h,
                     const SparseGptOptions& options) {
  if (rows < 1 || cols < 1) {
    throw Error("invalid matrix [" + std::to_string(rows) + ", " + std::to_string(cols) + "]");
  }
  if (h.cols() != cols) {
    throw Error("the Hessian is for " + std::to_string(h.cols()) + " input columns, the weight has " +
                std::to_string(cols));
  }
  if (!(options.dampening >= 0) || !std::isfinite(options.dampening)) {
    throw Error("dampening must be a finite number >= 0");
  }
  if (options.block_size < 4 || options.block_size % 4 != 0) {
    throw Error("block_size must be a positive multiple of 4, got " + std::to_string(options.block_size));
  }
  reject_nan(w, rows, cols);
  for (int64_t i = 0; i < rows * cols; ++i)
    if (std::isinf(w[i])) {
      throw Error("infinite weight at row " + std::to_string(i / cols) + ", column " +
                  std::to_string(i % cols));
    }

  std::vector<double> hm = h.matrix();
  const int64_t n = cols;
  // Dead inputs never reach the output: their weights are zeroed (and so pruned first) and H_jj = 1 keeps
  // H invertible.
  std::vector<uint8_t> dead(static_cast<size_t>(n), 0);
  double mean_diag = 0;
  for (int64_t j = 0; j < n; ++j) {
    double& d = hm[static_cast<size_t>(j * n + j)];
    if (d == 0) d = 1, dead[static_cast<size_t>(j)] = 1;
    mean_diag += d;
  }
  mean_diag /= static_cast<double>(n);
  const double damp = options.dampening * mean_diag;
  for (int64_t j = 0; j < n; ++j) hm[static_cast<size_t>(j * n + j)] += damp;
  const std::vector<double> u = dense::upper_cholesky_of_inverse(std::move(hm), n);

  Mask mask(static_cast<size_t>(rows * cols), 1);
  const int64_t block = options.block_size;
  // Rows per batch: the more, the fewer times U is streamed for the lazy updates (at n = 14336 it is 1.6 GB),
  // up to 256 (a batch holds its rows in double), and at least one batch per thread. The result does not
  // depend on it: each row's arithmetic is the same in any batch.
  const int64_t kRowBatch =
      std::clamp<int64_t>((rows + omp_get_max_threads() - 1) / omp_get_max_threads(), 16, 256);
  const int64_t batches = (rows + kRowBatch - 1) / kRowBatch;
#pragma omp parallel
  {
    std::vector<double> wd(static_cast<size_t>(kRowBatch * n));
    std::vector<double> errs(static_cast<size_t>(kRowBatch * block));
#pragma omp for schedule(dynamic)
    for (int64_t b = 0; b < batches; ++b) {
      const int64_t r0 = b * kRowBatch, nr = std::min(kRowBatch, rows - r0);
      for (int64_t r = 0; r < nr; ++r)
        for (int64_t j = 0; j < n; ++j)
          wd[static_cast<size_t>(r * n + j)] = dead[static_cast<size_t>(j)] ? 0.0 : w[(r0 + r) * n + j];
      for (int64_t i1 = 0; i1 < n; i1 += block) {
        const int64_t i2 = std::min(i1 + block, n);
        for (int64_t r = 0; r < nr; ++r) {
          double* row = wd.data() + r * n;
          uint8_t* mrow = mask.data() + (r0 + r) * n;
          double* e = errs.data() + r * block;
          for (int64_t i = i1; i < i2; ++i) {
            if (i % 4 == 0) {  // choose this group's 2 pruned columns from the current (updated) weights
              const int len = static_cast<int>(std::min<int64_t>(4, n - i));
              std::array<int, 4> order{0, 1, 2, 3};
              std::array<double, 4> score{};
              for (int g = 0; g < len; ++g) {
                const double d = u[static_cast<size_t>((i + g) * n + i + g)];
                score[static_cast<size_t>(g)] = row[i + g] * row[i + g] / (d * d);
              }
              // Smallest score pruned first; on ties the higher index goes (as magnitude_mask keeps the
              // lower).
              auto before = [&](int a, int c) {
                return score[static_cast<size_t>(a)] != score[static_cast<size_t>(c)]
                           ? score[static_cast<size_t>(a)] < score[static_cast<size_t>(c)]
                           : a > c;
              };
              for (int x = 1; x < len; ++x)  // insertion sort of at most 4
                for (int y = x;
                     y > 0 && before(order[static_cast<size_t>(y)], order[static_cast<size_t>(y - 1)]); --y)
                  std::swap(order[static_cast<size_t>(y)], order[static_cast<size_t>(y - 1)]);
              for (int g = 0; g < len - 2; ++g) mrow[i + order[static_cast<size_t>(g)]] = 0;
            }
            const double* ui = u.data() + i * n;
            const double q = mrow[i] ? row[i] : 0.0;
            const double ei = (row[i] - q) / ui[i];
            for (int64_t j = i; j < i2; ++j) row[j] -= ei * ui[j];
            row[i] = q;  // exactly (the update above leaves q up to rounding)
            e[i - i1] = ei;
          }
        }
        // Lazy batch update of the columns after the block, for the batch's rows at once.
        dense::gemm_sub(nr, n - i2, i2 - i1, dense::View{errs.data(), block, 1},
                        dense::View{u.data() + i1 * n + i2, n, 1}, wd.data() + i2, n);
      }
      for (int64_t r = 0; r < nr; ++r)
        for (int64_t j = 0; j < n; ++j)
          w[(r0 + r) * n + j] = static_cast<float>(wd[static_cast<size_t>(r * n + j)]);
    }
  }
  return mask;
}

}  // namespace sparse24
