// Dense bf16 GEMV, AVX2 + FMA (gemv_bf16.h): four rows at a time, eight columns per step; a bf16 value
// widens to fp32 by a 16-bit left shift of its zero-extended bits.
#include <immintrin.h>

#include <cstring>

#include "gemv_bf16.h"

namespace sparse24::kernels {
namespace {

// (Not dtype.h's inline bf16_to_float: an out-of-line copy built with AVX2 flags could be the one the
// linker keeps for every caller.)
inline float widen(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline __m256 load_bf16x8(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

}  // namespace

void gemv_bf16_avx2(const uint16_t* w, int64_t r0, int64_t r1, int64_t cols, const float* x, float* y) {
  const int64_t c8 = cols & ~int64_t{7};
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) {
    const uint16_t* w0 = w + r * cols;
    const uint16_t* w1 = w0 + cols;
    const uint16_t* w2 = w1 + cols;
    const uint16_t* w3 = w2 + cols;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t c = 0; c < c8; c += 8) {
      const __m256 xv = _mm256_loadu_ps(x + c);
      a0 = _mm256_fmadd_ps(load_bf16x8(w0 + c), xv, a0);
      a1 = _mm256_fmadd_ps(load_bf16x8(w1 + c), xv, a1);
      a2 = _mm256_fmadd_ps(load_bf16x8(w2 + c), xv, a2);
      a3 = _mm256_fmadd_ps(load_bf16x8(w3 + c), xv, a3);
    }
    float s0 = hsum(a0), s1 = hsum(a1), s2 = hsum(a2), s3 = hsum(a3);
    for (int64_t c = c8; c < cols; ++c) {
      s0 += widen(w0[c]) * x[c];
      s1 += widen(w1[c]) * x[c];
      s2 += widen(w2[c]) * x[c];
      s3 += widen(w3[c]) * x[c];
    }
    y[r] = s0;
    y[r + 1] = s1;
    y[r + 2] = s2;
    y[r + 3] = s3;
  }
  for (; r < r1; ++r) {
    const uint16_t* wr = w + r * cols;
    __m256 a = _mm256_setzero_ps();
    for (int64_t c = 0; c < c8; c += 8) a = _mm256_fmadd_ps(load_bf16x8(wr + c), _mm256_loadu_ps(x + c), a);
    float s = hsum(a);
    for (int64_t c = c8; c < cols; ++c) s += widen(wr[c]) * x[c];
    y[r] = s;
  }
}

}  // namespace sparse24::kernels
