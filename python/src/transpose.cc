#include "transpose.h"

#include <immintrin.h>

#include <algorithm>

namespace sparse24::py {
namespace {

// One 8x8 block: rows of s become columns of d.
__attribute__((target("avx2"))) void block8_avx2(const float* s, int64_t lds, float* d, int64_t ldd) {
  __m256 r[8], t[8], u[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(s + i * lds);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);      // r_i0 r_{i+1}0 r_i1 r_{i+1}1 | (elements 4, 5)
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);  // elements 2, 3 | 6, 7
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));          // column 0 | 4 of rows i..i+3
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));      // column 1 | 5
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));  // column 2 | 6
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));  // column 3 | 7
  }
  for (int j = 0; j < 4; ++j) {
    _mm256_storeu_ps(d + j * ldd, _mm256_permute2f128_ps(u[j], u[j + 4], 0x20));
    _mm256_storeu_ps(d + (j + 4) * ldd, _mm256_permute2f128_ps(u[j], u[j + 4], 0x31));
  }
}

void block_scalar(const float* s, int64_t rows, int64_t cols, int64_t lds, float* d, int64_t ldd) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) d[c * ldd + r] = s[r * lds + c];
}

}  // namespace

void transpose(const float* s, int64_t rows, int64_t cols, int64_t lds, float* d, int64_t ldd, int threads) {
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  constexpr int64_t kB = 8;
  const int64_t row_blocks = (rows + kB - 1) / kB;
#pragma omp parallel for num_threads(threads) if (threads > 1 && rows * cols >= (1 << 16))
  for (int64_t rb = 0; rb < row_blocks; ++rb) {
    const int64_t r0 = rb * kB, nr = std::min(kB, rows - r0);
    for (int64_t c0 = 0; c0 < cols; c0 += kB) {
      const int64_t nc = std::min(kB, cols - c0);
      if (avx2 && nr == kB && nc == kB)
        block8_avx2(s + r0 * lds + c0, lds, d + c0 * ldd + r0, ldd);
      else
        block_scalar(s + r0 * lds + c0, nr, nc, lds, d + c0 * ldd + r0, ldd);
    }
  }
}

}  // namespace sparse24::py
