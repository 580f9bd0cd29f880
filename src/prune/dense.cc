// Dense double-precision kernels for SparseGPT (dense.h). The product is blocked as BLIS does: a kKc x nc
// panel of B and an mc x kKc block of A are packed into slivers of NR columns and MR rows, and an MR x NR
// tile of C is accumulated in registers over the packed slivers (broadcast A, vectors of B).
#include "dense.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "sparse24/error.h"

namespace sparse24::dense {
namespace {

constexpr int64_t kMc = 192;   // rows of A per packed block (a multiple of every MR)
constexpr int64_t kNc = 1536;  // columns of B per packed panel (a multiple of every NR)

// C[mr, nr] -= the tile's sums (acc, row-major MR x NR), only the valid part of an edge tile.
inline void subtract_tile(const double* acc, int64_t full_nr, double* c, int64_t ldc, int64_t mr,
                          int64_t nr) {
  for (int64_t i = 0; i < mr; ++i)
    for (int64_t j = 0; j < nr; ++j) c[i * ldc + j] -= acc[i * full_nr + j];
}

__attribute__((target("avx512f,avx512vl,fma"))) void kernel_avx512(int64_t kc, const double* ap,
                                                                   const double* bp, double* c, int64_t ldc,
                                                                   int64_t mr, int64_t nr) {
  constexpr int MR = 12;
  __m512d acc[MR][2];
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_pd();
  for (int64_t p = 0; p < kc; ++p) {
    const __m512d b0 = _mm512_load_pd(bp + p * 16), b1 = _mm512_load_pd(bp + p * 16 + 8);
    for (int i = 0; i < MR; ++i) {
      const __m512d a = _mm512_set1_pd(ap[p * MR + i]);
      acc[i][0] = _mm512_fmadd_pd(a, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_pd(a, b1, acc[i][1]);
    }
  }
  if (mr == MR && nr == 16) {
    for (int i = 0; i < MR; ++i) {
      double* ci = c + i * ldc;
      _mm512_storeu_pd(ci, _mm512_sub_pd(_mm512_loadu_pd(ci), acc[i][0]));
      _mm512_storeu_pd(ci + 8, _mm512_sub_pd(_mm512_loadu_pd(ci + 8), acc[i][1]));
    }
    return;
  }
  alignas(64) double t[MR * 16];
  for (int i = 0; i < MR; ++i)
    _mm512_store_pd(t + i * 16, acc[i][0]), _mm512_store_pd(t + i * 16 + 8, acc[i][1]);
  subtract_tile(t, 16, c, ldc, mr, nr);
}

// Named accumulators, not an array: with 15 of the 16 ymm registers in use, GCC kept an array's elements in
// registers but also stored them back on every iteration (half the speed).
__attribute__((target("avx2,fma"))) void kernel_avx2(int64_t kc, const double* ap, const double* bp,
                                                     double* c, int64_t ldc, int64_t mr, int64_t nr) {
  constexpr int MR = 6;
  __m256d c00 = _mm256_setzero_pd(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00,
          c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (int64_t p = 0; p < kc; ++p) {
    const __m256d b0 = _mm256_load_pd(bp + p * 8), b1 = _mm256_load_pd(bp + p * 8 + 4);
    const double* a = ap + p * MR;
    __m256d x = _mm256_broadcast_sd(a);
    c00 = _mm256_fmadd_pd(x, b0, c00), c01 = _mm256_fmadd_pd(x, b1, c01);
    x = _mm256_broadcast_sd(a + 1);
    c10 = _mm256_fmadd_pd(x, b0, c10), c11 = _mm256_fmadd_pd(x, b1, c11);
    x = _mm256_broadcast_sd(a + 2);
    c20 = _mm256_fmadd_pd(x, b0, c20), c21 = _mm256_fmadd_pd(x, b1, c21);
    x = _mm256_broadcast_sd(a + 3);
    c30 = _mm256_fmadd_pd(x, b0, c30), c31 = _mm256_fmadd_pd(x, b1, c31);
    x = _mm256_broadcast_sd(a + 4);
    c40 = _mm256_fmadd_pd(x, b0, c40), c41 = _mm256_fmadd_pd(x, b1, c41);
    x = _mm256_broadcast_sd(a + 5);
    c50 = _mm256_fmadd_pd(x, b0, c50), c51 = _mm256_fmadd_pd(x, b1, c51);
  }
  alignas(32) double t[MR * 8];
  const __m256d acc[MR * 2] = {c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51};
  if (mr == MR && nr == 8) {
    for (int i = 0; i < MR; ++i) {
      double* ci = c + i * ldc;
      _mm256_storeu_pd(ci, _mm256_sub_pd(_mm256_loadu_pd(ci), acc[2 * i]));
      _mm256_storeu_pd(ci + 4, _mm256_sub_pd(_mm256_loadu_pd(ci + 4), acc[2 * i + 1]));
    }
    return;
  }
  for (int i = 0; i < 2 * MR; ++i) _mm256_store_pd(t + 4 * i, acc[i]);
  subtract_tile(t, 8, c, ldc, mr, nr);
}

void kernel_portable(int64_t kc, const double* ap, const double* bp, double* c, int64_t ldc, int64_t mr,
                     int64_t nr) {
  constexpr int MR = 4, NR = 4;
  double acc[MR * NR] = {};
  for (int64_t p = 0; p < kc; ++p)
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j)
        acc[i * NR + j] = std::fma(ap[p * MR + i], bp[p * NR + j], acc[i * NR + j]);
  subtract_tile(acc, NR, c, ldc, mr, nr);
}

// A micro-kernel and its tile of C in registers: MR rows, NR columns.
struct Micro {
  int64_t mr, nr;
  void (*fn)(int64_t kc, const double* ap, const double* bp, double* c, int64_t ldc, int64_t mr, int64_t nr);
};

Micro micro_of(Isa isa) {
  if (isa == Isa::kAvx512) return {12, 16, kernel_avx512};  // 24 zmm accumulators
  if (isa == Isa::kAvx2) return {6, 8, kernel_avx2};        // 12 ymm accumulators
  return {4, 4, kernel_portable};
}

// Packing buffers, one pair per thread, kept between calls (the factorization calls the product often),
// aligned to cache lines so no vector load of a sliver splits across two.
double* pack_buffer(std::vector<double>& v, int64_t size) {
  if (static_cast<int64_t>(v.size()) < size + 8) v.resize(static_cast<size_t>(size + 8));
  const auto addr = reinterpret_cast<uintptr_t>(v.data());
  return v.data() + ((64 - addr % 64) % 64) / sizeof(double);
}

// A[m, kc] into slivers of MR rows: out[s][p][i] = A(s * MR + i, p), zero past m.
void pack_a(const double* a, int64_t rs, int64_t cs, int64_t m, int64_t kc, int64_t mr, double* out) {
  for (int64_t s = 0; s * mr < m; ++s) {
    const int64_t rows = std::min(mr, m - s * mr);
    double* o = out + s * mr * kc;
    for (int64_t p = 0; p < kc; ++p) {
      for (int64_t i = 0; i < rows; ++i) o[p * mr + i] = a[(s * mr + i) * rs + p * cs];
      for (int64_t i = rows; i < mr; ++i) o[p * mr + i] = 0;
    }
  }
}

// B[kc, n] into slivers of NR columns: out[s][p][j] = B(p, s * NR + j), zero past n.
void pack_b(const double* b, int64_t rs, int64_t cs, int64_t kc, int64_t n, int64_t nr, double* out) {
  for (int64_t s = 0; s * nr < n; ++s) {
    const int64_t cols = std::min(nr, n - s * nr);
    double* o = out + s * nr * kc;
    for (int64_t p = 0; p < kc; ++p) {
      const double* bp = b + p * rs + s * nr * cs;
      if (cs == 1 && cols == nr) {
        std::memcpy(o + p * nr, bp, static_cast<size_t>(nr) * sizeof(double));
        continue;
      }
      for (int64_t j = 0; j < cols; ++j) o[p * nr + j] = bp[j * cs];
      for (int64_t j = cols; j < nr; ++j) o[p * nr + j] = 0;
    }
  }
}

}  // namespace

void gemm_sub(int64_t m, int64_t n, int64_t k, View a, View b, double* c, int64_t ldc, Isa isa) {
  if (m <= 0 || n <= 0 || k <= 0) return;
  const Micro t = micro_of(isa);
  thread_local std::vector<double> a_buffer, b_buffer;
  double* pa = pack_buffer(a_buffer, kKc * kMc);
  double* pb = pack_buffer(b_buffer, kKc * std::min(kNc, (n + t.nr - 1) / t.nr * t.nr));
  for (int64_t jc = 0; jc < n; jc += kNc) {
    const int64_t nc = std::min(kNc, n - jc);
    for (int64_t pc = 0; pc < k; pc += kKc) {
      const int64_t kc = std::min(kKc, k - pc);
      pack_b(b.data + pc * b.rs + jc * b.cs, b.rs, b.cs, kc, nc, t.nr, pb);
      for (int64_t ic = 0; ic < m; ic += kMc) {
        const int64_t mc = std::min(kMc, m - ic);
        pack_a(a.data + ic * a.rs + pc * a.cs, a.rs, a.cs, mc, kc, t.mr, pa);
        for (int64_t ir = 0; ir < mc; ir += t.mr)  // C tiles row by row: few streams for the prefetcher
          for (int64_t jr = 0; jr < nc; jr += t.nr)
            t.fn(kc, pa + ir * kc, pb + jr * kc, c + (ic + ir) * ldc + jc + jr, ldc, std::min(t.mr, mc - ir),
                 std::min(t.nr, nc - jr));
      }
    }
  }
}

namespace {

[[noreturn]] void not_positive_definite(int64_t column) {
  throw Error("the Hessian is not positive definite (at input column " + std::to_string(column) +
              "); increase the dampening or the calibration data");
}

constexpr int64_t kSub = 32;    // columns solved by substitution between two products
constexpr int64_t kChunk = 96;  // rows per thread's share of a solve

// X := X L^-T in place (x: m rows of kb, leading dimension ldx; l: kb x kb lower, leading dimension ldl):
// row x becomes the z with z L^T = x, z_j = (x_j - sum_{t<j} z_t L_jt) / L_jj. kSub columns at a time by
// substitution, the columns after them updated by one product; rows in parallel chunks.
void solve_rows_by_lower_transposed(double* x, int64_t ldx, int64_t m, const double* l, int64_t ldl,
                                    int64_t kb, Isa isa) {
#pragma omp parallel for schedule(static)
  for (int64_t i0 = 0; i0 < m; i0 += kChunk) {
    const int64_t mi = std::min(kChunk, m - i0);
    double* xc = x + i0 * ldx;
    for (int64_t s0 = 0; s0 < kb; s0 += kSub) {
      const int64_t s1 = std::min(kb, s0 + kSub);
      for (int64_t i = 0; i < mi; ++i) {
        double* xi = xc + i * ldx;
        for (int64_t j = s0; j < s1; ++j) {
          const double* lj = l + j * ldl;
          double v = xi[j];
          for (int64_t t = s0; t < j; ++t) v -= xi[t] * lj[t];
          xi[j] = v / lj[j];
        }
      }
      gemm_sub(mi, kb - s1, s1 - s0, View{xc + s0, ldx, 1}, View{l + s1 * ldl + s0, 1, ldl}, xc + s1, ldx,
               isa);
    }
  }
}

// X := X L^-1 in place (the z with z L = x, z_j = (x_j - sum_{t>j} z_t L_tj) / L_jj, from the last column),
// kSub columns at a time by substitution (over a transposed copy of L's block, read along rows), the
// columns before them updated by one product; rows in parallel chunks.
void solve_rows_by_lower(double* x, int64_t ldx, int64_t m, const double* l, int64_t ldl, int64_t kb,
                         Isa isa) {
  std::vector<double> lt(static_cast<size_t>(kb * kb));  // lt[j * kb + t] = L_tj
  for (int64_t t = 0; t < kb; ++t)
    for (int64_t j = 0; j <= t; ++j) lt[static_cast<size_t>(j * kb + t)] = l[t * ldl + j];
#pragma omp parallel for schedule(static)
  for (int64_t i0 = 0; i0 < m; i0 += kChunk) {
    const int64_t mi = std::min(kChunk, m - i0);
    double* xc = x + i0 * ldx;
    for (int64_t s1 = kb; s1 > 0; s1 -= kSub) {
      const int64_t s0 = std::max<int64_t>(0, s1 - kSub);
      for (int64_t i = 0; i < mi; ++i) {
        double* xi = xc + i * ldx;
        for (int64_t j = s1 - 1; j >= s0; --j) {
          const double* ltj = lt.data() + j * kb;
          double v = xi[j];
          for (int64_t t = j + 1; t < s1; ++t) v -= xi[t] * ltj[t];
          xi[j] = v / ltj[j];
        }
      }
      gemm_sub(mi, s0, s1 - s0, View{xc + s0, ldx, 1}, View{l + s0 * ldl, ldl, 1}, xc, ldx, isa);
    }
  }
}

// In place, A (row-major n x n, lower triangle used) = L L^T, block of columns by block: the diagonal block
// by plain loops, the panel below it by substitution (rows in parallel), the trailing lower triangle
// updated by products of the panel with itself (tiles in parallel). diag0: A's diagonal before, for the
// definiteness test. The strict upper triangle is zeroed at the end.
void cholesky_lower(double* a, int64_t n, int64_t block, const std::vector<double>& diag0, Isa isa) {
  auto at = [&](int64_t i, int64_t j) -> double& { return a[i * n + j]; };
  for (int64_t k0 = 0; k0 < n; k0 += block) {
    const int64_t kb = std::min(block, n - k0), k1 = k0 + kb;
    for (int64_t j = k0; j < k1; ++j) {  // the diagonal block
      double s = at(j, j);
      for (int64_t t = k0; t < j; ++t) s -= at(j, t) * at(j, t);
      if (!(s > 1e-10 * diag0[static_cast<size_t>(j)])) not_positive_definite(n - 1 - j);
      at(j, j) = std::sqrt(s);
      for (int64_t i = j + 1; i < k1; ++i) {
        double v = at(i, j);
        for (int64_t t = k0; t < j; ++t) v -= at(i, t) * at(j, t);
        at(i, j) = v / at(j, j);
      }
    }
    if (k1 == n) break;
    solve_rows_by_lower_transposed(a + k1 * n + k0, n, n - k1, a + k0 * n + k0, n, kb, isa);
    // The trailing lower triangle: A[i, j] -= sum_t L[i, t] L[j, t], t in the block, for tiles on or below
    // the diagonal.
    constexpr int64_t kTileSize = 192;
    const int64_t tiles = (n - k1 + kTileSize - 1) / kTileSize;
#pragma omp parallel for schedule(dynamic)
    for (int64_t q = 0; q < tiles * (tiles + 1) / 2; ++q) {
      int64_t ti = 0;
      while ((ti + 1) * (ti + 2) / 2 <= q) ++ti;
      const int64_t tj = q - ti * (ti + 1) / 2;
      const int64_t i0 = k1 + ti * kTileSize, j0 = k1 + tj * kTileSize;
      const int64_t mi = std::min(kTileSize, n - i0), nj = std::min(kTileSize, n - j0);
      gemm_sub(mi, nj, kb, View{a + i0 * n + k0, n, 1}, View{a + j0 * n + k0, 1, n}, a + i0 * n + j0, n, isa);
    }
  }
  for (int64_t i = 0; i < n; ++i) std::fill(a + i * n + i + 1, a + (i + 1) * n, 0.0);
}

// In place, L (lower, zeros above) -> L^-1, blocks of columns from the last: with the trailing part already
// T = L22^-1, the block column below the diagonal becomes -T L21 L11^-1 (a product over T's lower block
// triangle, rows of blocks in parallel, then a substitution, rows in parallel), and L11 is inverted.
void invert_lower(double* a, int64_t n, int64_t block, Isa isa) {
  std::vector<double> y;
  const int64_t last = (n - 1) / block * block;
  for (int64_t j0 = last; j0 >= 0; j0 -= block) {
    const int64_t jb = std::min(block, n - j0), r0 = j0 + jb, m = n - r0;
    if (m > 0) {
      y.assign(static_cast<size_t>(m * jb), 0.0);  // Y = -T X, X = A[r0:, j0:r0]
      const int64_t row_blocks = (m + block - 1) / block;
#pragma omp parallel for schedule(dynamic)
      for (int64_t bi = row_blocks - 1; bi >= 0; --bi) {  // the longest rows first
        const int64_t i0 = bi * block, mi = std::min(block, m - i0);
        for (int64_t k0 = 0; k0 <= i0; k0 += block) {
          const int64_t kk = std::min(block, m - k0);
          gemm_sub(mi, jb, kk, View{a + (r0 + i0) * n + r0 + k0, n, 1}, View{a + (r0 + k0) * n + j0, n, 1},
                   y.data() + i0 * jb, jb, isa);
        }
      }
      solve_rows_by_lower(y.data(), jb, m, a + j0 * n + j0, n, jb, isa);  // Z L11 = Y
      for (int64_t i = 0; i < m; ++i)
        std::copy(y.data() + i * jb, y.data() + (i + 1) * jb, a + (r0 + i) * n + j0);
    }
    // L11 := L11^-1, column by column: m_cc = 1 / l_cc, m_ic = -(sum_{t=c}^{i-1} l_it m_tc) / l_ii.
    std::vector<double> inv(static_cast<size_t>(jb * jb), 0.0);
    for (int64_t c = 0; c < jb; ++c) {
      inv[static_cast<size_t>(c * jb + c)] = 1.0 / a[(j0 + c) * n + j0 + c];
      for (int64_t i = c + 1; i < jb; ++i) {
        double s = 0;
        for (int64_t t = c; t < i; ++t) s += a[(j0 + i) * n + j0 + t] * inv[static_cast<size_t>(t * jb + c)];
        inv[static_cast<size_t>(i * jb + c)] = -s / a[(j0 + i) * n + j0 + i];
      }
    }
    for (int64_t i = 0; i < jb; ++i)
      for (int64_t c = 0; c <= i; ++c) a[(j0 + i) * n + j0 + c] = inv[static_cast<size_t>(i * jb + c)];
  }
}

}  // namespace

// With P the reversal permutation and P H P = L L^T, H^-1 = P L^-T L^-1 P = U^T U for U = P L^-1 P, upper
// triangular with a positive diagonal: one Cholesky and one triangular inverse instead of inverting H and
// factoring again. P X P of a row-major matrix is its storage reversed.
std::vector<double> upper_cholesky_of_inverse(std::vector<double> h, int64_t n, int64_t block, Isa isa) {
  if (block < 1) throw Error("invalid block " + std::to_string(block));
  std::reverse(h.begin(), h.end());
  std::vector<double> diag0(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) diag0[static_cast<size_t>(i)] = h[static_cast<size_t>(i * n + i)];
  cholesky_lower(h.data(), n, block, diag0, isa);
  invert_lower(h.data(), n, block, isa);
  std::reverse(h.begin(), h.end());
  return h;
}

std::vector<double> upper_cholesky_of_inverse_reference(std::vector<double> h, int64_t n) {
  auto H = [&](int64_t i, int64_t j) { return h[static_cast<size_t>((n - 1 - i) * n + (n - 1 - j))]; };
  std::vector<double> l(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      double s = H(i, j);
      for (int64_t t = 0; t < j; ++t)
        s -= l[static_cast<size_t>(i * n + t)] * l[static_cast<size_t>(j * n + t)];
      if (i == j) {
        if (!(s > 1e-10 * H(i, i))) not_positive_definite(n - 1 - i);
        l[static_cast<size_t>(i * n + i)] = std::sqrt(s);
      } else {
        l[static_cast<size_t>(i * n + j)] = s / l[static_cast<size_t>(j * n + j)];
      }
    }
  std::vector<double> m(static_cast<size_t>(n * n), 0.0);  // L^-1, column by column
  for (int64_t c = 0; c < n; ++c) {
    m[static_cast<size_t>(c * n + c)] = 1.0 / l[static_cast<size_t>(c * n + c)];
    for (int64_t i = c + 1; i < n; ++i) {
      double s = 0;
      for (int64_t t = c; t < i; ++t)
        s += l[static_cast<size_t>(i * n + t)] * m[static_cast<size_t>(t * n + c)];
      m[static_cast<size_t>(i * n + c)] = -s / l[static_cast<size_t>(i * n + i)];
    }
  }
  std::reverse(m.begin(), m.end());
  return m;
}

}  // namespace sparse24::dense
