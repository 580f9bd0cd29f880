// SparseGPT's Hessian H = 2/n X^T X. The accumulation is the hot part (cols^2 * tokens / 2 multiply-adds):
// token blocks are packed into 16-column panels, 16x16 (AVX-512) or 8x16 tiles of X^T X are accumulated in
// float over one block (registers) and added into the double sum, so float only ever sums kBlock products.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "sparse24/error.h"
#include "sparse24/prune.h"
#include "sparse24/spmm.h"

namespace sparse24 {
namespace {

constexpr int64_t kBlock = 256;  // tokens per float accumulation block
constexpr int64_t kPanel = 16;   // columns per packed panel
constexpr int64_t kTileRows = 8;

// acc[k][l] = sum_t xi[t][k] * xj[t][l] over one packed block (rows of 16 floats), 8 rows of a panel: 16 ymm
// accumulators, two vectors of xj per token and 8 values of xi broadcast. Every kernel here sums each
// element's products in token order with fused multiply-adds (written out, not left to the compiler's
// contraction, which -O1 builds skip): the same bits on every ISA.
__attribute__((target("avx2,fma"))) void tile_kernel_avx2(const float* xi, const float* xj, int64_t tokens,
                                                          float* acc_out) {
  // Named accumulators, not an array (GCC stored an array's elements back on every iteration).
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00,
         c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00, c61 = c00, c70 = c00, c71 = c00;
  for (int64_t t = 0; t < tokens; ++t) {
    const __m256 b0 = _mm256_loadu_ps(xj + t * kPanel), b1 = _mm256_loadu_ps(xj + t * kPanel + 8);
    const float* a = xi + t * kPanel;
    __m256 x = _mm256_broadcast_ss(a);
    c00 = _mm256_fmadd_ps(x, b0, c00), c01 = _mm256_fmadd_ps(x, b1, c01);
    x = _mm256_broadcast_ss(a + 1);
    c10 = _mm256_fmadd_ps(x, b0, c10), c11 = _mm256_fmadd_ps(x, b1, c11);
    x = _mm256_broadcast_ss(a + 2);
    c20 = _mm256_fmadd_ps(x, b0, c20), c21 = _mm256_fmadd_ps(x, b1, c21);
    x = _mm256_broadcast_ss(a + 3);
    c30 = _mm256_fmadd_ps(x, b0, c30), c31 = _mm256_fmadd_ps(x, b1, c31);
    x = _mm256_broadcast_ss(a + 4);
    c40 = _mm256_fmadd_ps(x, b0, c40), c41 = _mm256_fmadd_ps(x, b1, c41);
    x = _mm256_broadcast_ss(a + 5);
    c50 = _mm256_fmadd_ps(x, b0, c50), c51 = _mm256_fmadd_ps(x, b1, c51);
    x = _mm256_broadcast_ss(a + 6);
    c60 = _mm256_fmadd_ps(x, b0, c60), c61 = _mm256_fmadd_ps(x, b1, c61);
    x = _mm256_broadcast_ss(a + 7);
    c70 = _mm256_fmadd_ps(x, b0, c70), c71 = _mm256_fmadd_ps(x, b1, c71);
  }
  const __m256 acc[kTileRows * 2] = {c00, c01, c10, c11, c20, c21, c30, c31,
                                     c40, c41, c50, c51, c60, c61, c70, c71};
  for (int i = 0; i < kTileRows * 2; ++i) _mm256_storeu_ps(acc_out + 8 * i, acc[i]);
}

// The same on any x86-64 (SPARSE24_ISA=ref or a CPU without AVX2): std::fma per product, slow.
void tile_kernel_portable(const float* xi, const float* xj, int64_t tokens, float* acc_out) {
  float acc[kTileRows * kPanel] = {};
  for (int64_t t = 0; t < tokens; ++t)
    for (int k = 0; k < kTileRows; ++k)
      for (int l = 0; l < kPanel; ++l)
        acc[k * kPanel + l] = std::fma(xi[t * kPanel + k], xj[t * kPanel + l], acc[k * kPanel + l]);
  std::copy(acc, acc + kTileRows * kPanel, acc_out);
}

// The same for a whole 16 x 16 tile with AVX-512: 16 zmm accumulators, one vector of xj per token and the
// 16 values of xi broadcast.
__attribute__((target("avx512f"))) void tile_kernel_avx512(const float* xi, const float* xj, int64_t tokens,
                                                           float* acc_out) {
  __m512 acc[kPanel];
  for (int k = 0; k < kPanel; ++k) acc[k] = _mm512_setzero_ps();
  for (int64_t t = 0; t < tokens; ++t) {
    const __m512 b = _mm512_loadu_ps(xj + t * kPanel);
    for (int k = 0; k < kPanel; ++k) acc[k] = _mm512_fmadd_ps(_mm512_set1_ps(xi[t * kPanel + k]), b, acc[k]);
  }
  for (int k = 0; k < kPanel; ++k) _mm512_storeu_ps(acc_out + k * kPanel, acc[k]);
}

// sum[k][l] += acc[k][l] for a whole 16 x 16 tile (rows of sum `cols` apart). GCC 12's AVX-512 conversion
// intrinsics trip its own uninitialized-value warning (as in src/kernels' AVX-512 file).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"))) void add_tile_avx512(const float* acc, double* sum, int64_t cols) {
  for (int k = 0; k < kPanel; ++k) {
    double* row = sum + k * cols;
    for (int h = 0; h < 2; ++h) {
      const __m512d v = _mm512_cvtps_pd(_mm256_loadu_ps(acc + k * kPanel + 8 * h));
      _mm512_storeu_pd(row + 8 * h, _mm512_add_pd(_mm512_loadu_pd(row + 8 * h), v));
    }
  }
}
#pragma GCC diagnostic pop

// sum[i][j] += (X^T X)[i][j] of one block, upper triangle (j >= i).
void accumulate_block(const float* packed, int64_t tokens, int64_t panels, int64_t cols, double* sum) {
  if (active_isa() == Isa::kAvx512) {  // tiles of 16 rows: a panel of rows
#pragma omp parallel for schedule(dynamic)
    for (int64_t ip = 0; ip < panels; ++ip) {
      alignas(64) float acc[kPanel * kPanel];
      for (int64_t jp = ip; jp < panels; ++jp) {
        tile_kernel_avx512(packed + ip * kBlock * kPanel, packed + jp * kBlock * kPanel, tokens, acc);
        if (jp > ip && (jp + 1) * kPanel <= cols) {  // wholly above the diagonal and inside
          add_tile_avx512(acc, sum + ip * kPanel * cols + jp * kPanel, cols);
          continue;
        }
        for (int64_t k = 0; k < kPanel && ip * kPanel + k < cols; ++k) {
          const int64_t i = ip * kPanel + k;
          for (int64_t l = 0; l < kPanel; ++l) {
            const int64_t j = jp * kPanel + l;
            if (j >= i && j < cols) sum[i * cols + j] += static_cast<double>(acc[k * kPanel + l]);
          }
        }
      }
    }
    return;
  }
  const auto tile_kernel = active_isa() == Isa::kAvx2 ? tile_kernel_avx2 : tile_kernel_portable;
  const int64_t tiles = panels * (kPanel / kTileRows);
#pragma omp parallel for schedule(dynamic)
  for (int64_t ti = 0; ti < tiles; ++ti) {
    const int64_t i0 = ti * kTileRows, ip = i0 / kPanel, io = i0 % kPanel;
    if (i0 >= cols) continue;
    float acc[kTileRows * kPanel];
    for (int64_t jp = ip; jp < panels; ++jp) {
      tile_kernel(packed + ip * kBlock * kPanel + io, packed + jp * kBlock * kPanel, tokens, acc);
      for (int k = 0; k < kTileRows; ++k) {
        const int64_t i = i0 + k;
        if (i >= cols) break;
        for (int l = 0; l < kPanel; ++l) {
          const int64_t j = jp * kPanel + l;
          if (j >= i && j < cols) sum[i * cols + j] += static_cast<double>(acc[k * kPanel + l]);
        }
      }
    }
  }
}

}  // namespace

Hessian::Hessian(int64_t cols) : cols_(cols) {
  if (cols < 1 || cols > (1 << 16)) throw Error("invalid Hessian size " + std::to_string(cols));
  sum_.assign(static_cast<size_t>(cols * cols), 0.0);
}

void Hessian::add(const float* x, int64_t tokens) {
  if (tokens < 0) throw Error("invalid token count " + std::to_string(tokens));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t c = 0; c < cols_; ++c)
      if (!std::isfinite(x[t * cols_ + c])) {
        throw Error("non-finite calibration input at token " + std::to_string(t) + ", column " +
                    std::to_string(c));
      }
  const int64_t panels = (cols_ + kPanel - 1) / kPanel;
  std::vector<float> packed(static_cast<size_t>(panels * kBlock * kPanel));
  for (int64_t t0 = 0; t0 < tokens; t0 += kBlock) {
    const int64_t nt = std::min(kBlock, tokens - t0);
    std::fill(packed.begin(), packed.end(), 0.f);
    for (int64_t t = 0; t < nt; ++t)
      for (int64_t c = 0; c < cols_; ++c)
        packed[static_cast<size_t>((c / kPanel) * kBlock * kPanel + t * kPanel + c % kPanel)] =
            x[(t0 + t) * cols_ + c];
    accumulate_block(packed.data(), nt, panels, cols_, sum_.data());
  }
  n_ += tokens;
}

std::vector<double> Hessian::matrix() const {
  if (n_ == 0) throw Error("the Hessian has no calibration samples");
  std::vector<double> h(static_cast<size_t>(cols_ * cols_));
  const double scale = 2.0 / static_cast<double>(n_);
  for (int64_t i = 0; i < cols_; ++i)
    for (int64_t j = i; j < cols_; ++j) {
      const double v = sum_[static_cast<size_t>(i * cols_ + j)] * scale;
      h[static_cast<size_t>(i * cols_ + j)] = v;
      h[static_cast<size_t>(j * cols_ + i)] = v;
    }
  return h;
}

std::vector<float> Hessian::column_norms() const {
  std::vector<float> norms(static_cast<size_t>(cols_));
  for (int64_t c = 0; c < cols_; ++c)
    norms[static_cast<size_t>(c)] = static_cast<float>(std::sqrt(sum_[static_cast<size_t>(c * cols_ + c)]));
  return norms;
}

Hessian Hessian::permuted(const std::vector<int64_t>& perm) const {
  if (static_cast<int64_t>(perm.size()) != cols_) throw Error("permutation of the wrong length");
  std::vector<char> seen(static_cast<size_t>(cols_), 0);
  for (int64_t p : perm) {
    if (p < 0 || p >= cols_ || seen[static_cast<size_t>(p)]) throw Error("not a permutation");
    seen[static_cast<size_t>(p)] = 1;
  }
  Hessian h(cols_);
  h.n_ = n_;
  for (int64_t i = 0; i < cols_; ++i)
    for (int64_t j = i; j < cols_; ++j) {
      const int64_t a = std::min(perm[i], perm[j]), b = std::max(perm[i], perm[j]);
      h.sum_[static_cast<size_t>(i * cols_ + j)] = sum_[static_cast<size_t>(a * cols_ + b)];
    }
  return h;
}

}  // namespace sparse24
