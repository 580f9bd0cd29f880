// SparseGPT (Frantar & Alistarh 2023) for 2:4, our own implementation in double precision.
//
// With U the upper Cholesky factor of H^-1 (H^-1 = U^T U), pruning column i of a row and compensating the
// remaining columns j > i of that row is w_j -= (w_i - q_i) / U_ii * U_ij (the OBS update). Each row is
// independent, so rows are processed in batches (OpenMP over batches); within a batch, columns go in blocks
// of block_size: updates inside a block are applied at once, the block's errors update the columns after
// it in one pass (the lazy batch update), so U's block rows are reused across the rows of a batch.
#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "sparse24/error.h"
#include "sparse24/prune.h"

namespace sparse24 {
namespace {

constexpr int kGroup = 8;  // dot products computed together, sharing one streamed vector

// out[r] = sum_{k < len} shared[k] * other[r][k] for r < kGroup: the shared vector is loaded once for all
// eight, which is what makes the factorizations below fast (they are made of such dots). Multiversioned like
// the Hessian kernel.
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void dots(
    const double* shared, const double* const* other, int64_t len, double* out) {
  typedef double v4 __attribute__((vector_size(32)));
  v4 acc[kGroup] = {};
  int64_t k = 0;
  for (; k + 4 <= len; k += 4) {
    v4 s;
    __builtin_memcpy(&s, shared + k, sizeof s);
    for (int r = 0; r < kGroup; ++r) {
      v4 o;
      __builtin_memcpy(&o, other[r] + k, sizeof o);
      acc[r] += s * o;
    }
  }
  for (int r = 0; r < kGroup; ++r) {
    double t = (acc[r][0] + acc[r][1]) + (acc[r][2] + acc[r][3]);
    for (int64_t q = k; q < len; ++q) t += shared[q] * other[r][q];
    out[r] = t;
  }
}

// The lazy batch update: rows[r][j] -= e[r][k] * u[k][j] for r < nr, j in [from, n), k < nk with
// e[r][k] != 0 (rows: [nr, n], e: [nr, lde], u: the block's nk rows of U, [nk, n]). Each element gets the
// operations the plain loop (a row at a time, k by k) gives it, in the same order and unfused, so the result
// is the same bits; the columns go in chunks of 32 so the block of U's rows is read from cache across the
// batch's rows instead of streamed again for each (at n = 14336, 15 MB per row and block).
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"),
               optimize("fp-contract=off"))) void
lazy_update(double* rows, int64_t nr, int64_t n, const double* e, int64_t lde, int64_t nk, const double* u,
            int64_t from) {
  typedef double v4 __attribute__((vector_size(32)));
  constexpr int64_t kChunk = 32;
  std::vector<int32_t> ks(static_cast<size_t>(nr * nk));  // per row, the k with e != 0
  std::vector<int64_t> count(static_cast<size_t>(nr), 0);
  for (int64_t r = 0; r < nr; ++r)
    for (int64_t k = 0; k < nk; ++k)
      if (e[r * lde + k] != 0) ks[static_cast<size_t>(r * nk + count[r]++)] = static_cast<int32_t>(k);
  int64_t j = from;
  for (; j + kChunk <= n; j += kChunk)
    for (int64_t r = 0; r < nr; ++r) {
      double* row = rows + r * n + j;
      v4 acc[kChunk / 4];
      __builtin_memcpy(acc, row, sizeof acc);
      for (int64_t c = 0; c < count[r]; ++c) {
        const int64_t k = ks[static_cast<size_t>(r * nk + c)];
        const double ek = e[r * lde + k];
        const v4 ev = {ek, ek, ek, ek};
        const double* uk = u + k * n + j;
        for (int64_t q = 0; q < kChunk / 4; ++q) {
          v4 uv;
          __builtin_memcpy(&uv, uk + 4 * q, sizeof uv);
          acc[q] -= ev * uv;
        }
      }
      __builtin_memcpy(row, acc, sizeof acc);
    }
  for (int64_t r = 0; r < nr; ++r)  // the last columns
    for (int64_t c = 0; c < count[r]; ++c) {
      const int64_t k = ks[static_cast<size_t>(r * nk + c)];
      const double ek = e[r * lde + k];
      for (int64_t jj = j; jj < n; ++jj) rows[r * n + jj] -= ek * u[k * n + jj];
    }
}

// Upper Cholesky factor U of H^-1 (H^-1 = U^T U), H symmetric row-major n x n. With P the reversal
// permutation and P H P = L L^T, H^-1 = P L^-T L^-1 P = U^T U for U = P L^-1 P, which is upper triangular
// with a positive diagonal: one Cholesky and one triangular inverse instead of inverting H and factoring
// again. Throws Error if H is not (numerically) positive definite.
std::vector<double> upper_cholesky_of_inverse(std::vector<double> h, int64_t n) {
  auto H = [&](int64_t i, int64_t j) { return h[static_cast<size_t>((n - 1 - i) * n + (n - 1 - j))]; };
  // Left-looking Cholesky, kGroup rows at a time: their dots with each finished row j share its load.
  std::vector<double> l(static_cast<size_t>(n * n), 0.0);
  const double* rows[kGroup];
  double out[kGroup];
  for (int64_t i0 = 0; i0 < n; i0 += kGroup) {
    const int64_t nb = std::min<int64_t>(kGroup, n - i0);
    for (int r = 0; r < kGroup; ++r) rows[r] = l.data() + std::min(i0 + r, n - 1) * n;
    for (int64_t j = 0; j < i0; ++j) {
      const double* lj = l.data() + j * n;
      dots(lj, rows, j, out);
      for (int64_t r = 0; r < nb; ++r)
        l[static_cast<size_t>((i0 + r) * n + j)] = (H(i0 + r, j) - out[r]) / lj[j];
    }
    for (int64_t i = i0; i < i0 + nb; ++i) {  // the group's own triangle
      double* li = l.data() + i * n;
      for (int64_t j = i0; j <= i; ++j) {
        const double* lj = l.data() + j * n;
        double s = H(i, j);
        for (int64_t k = 0; k < j; ++k) s -= li[k] * lj[k];
        if (i == j) {
          if (!(s > 1e-10 * H(i, i))) {
            throw Error("the Hessian is not positive definite (at input column " + std::to_string(n - 1 - i) +
                        "); increase the dampening or the calibration data");
          }
          li[i] = std::sqrt(s);
        } else {
          li[j] = s / lj[j];
        }
      }
    }
  }
  std::vector<double>().swap(h);  // n = 14336 (Llama 3.1 8B's down_proj): 1.6 GB per matrix, three at most
  // M = L^-1 by columns (independent, so OpenMP over groups of kGroup columns): m_c[c] = 1 / L_cc and
  // m_c[i] = -(sum_{k=c}^{i-1} L_ik m_c[k]) / L_ii for i > c. Stored column-wise: mt[c * n + i] = M_ic.
  std::vector<double> mt(static_cast<size_t>(n * n), 0.0);
  const int64_t groups = (n + kGroup - 1) / kGroup;
#pragma omp parallel for schedule(dynamic)
  for (int64_t gi = 0; gi < groups; ++gi) {
    const int64_t c0 = gi * kGroup, nc = std::min<int64_t>(kGroup, n - c0);
    const double* cols[kGroup];
    double o[kGroup];
    for (int r = 0; r < kGroup; ++r) cols[r] = mt.data() + std::min(c0 + r, n - 1) * n + c0;
    for (int64_t i = c0; i < n; ++i) {
      dots(l.data() + i * n + c0, cols, i - c0, o);  // m_c[k] = 0 for k < c, so all start at c0
      const double inv = 1.0 / l[static_cast<size_t>(i * n + i)];
      for (int64_t r = 0; r < nc; ++r) {
        const int64_t c = c0 + r;
        mt[static_cast<size_t>(c * n + i)] = i < c ? 0.0 : i == c ? inv : -o[r] * inv;
      }
    }
  }
  std::vector<double>().swap(l);
  std::vector<double> u(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i; j < n; ++j)
      u[static_cast<size_t>(i * n + j)] = mt[static_cast<size_t>((n - 1 - j) * n + (n - 1 - i))];
  return u;
}

}  // namespace

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
  const std::vector<double> u = upper_cholesky_of_inverse(std::move(hm), n);

  Mask mask(static_cast<size_t>(rows * cols), 1);
  const int64_t block = options.block_size;
  constexpr int64_t kRowBatch = 32;
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
        lazy_update(wd.data(), nr, n, errs.data(), block, i2 - i1, u.data() + i1 * n, i2);
      }
      for (int64_t r = 0; r < nr; ++r)
        for (int64_t j = 0; j < n; ++j)
          w[(r0 + r) * n + j] = static_cast<float>(wd[static_cast<size_t>(r * n + j)]);
    }
  }
  return mask;
}

}  // namespace sparse24
