// The dense bf16 GEMV, AVX2 + FMA (gemv.h): eight rows at a time, one from each of eight regions of the
// rows (eight long sequential streams in flight, one accumulator each), eight columns per step; a bf16 value
// widens to fp32 by a 16-bit left shift of its zero-extended bits. The SmolLM2 head (49,152 x 576, 57 MB),
// one thread, quiet AMD EPYC Zen 3, scratch program, best of 20 (GB/s): eight adjacent rows 10.8-11.1 (a
// row is 1152 bytes: the streams were too short for the prefetcher), 6 regions 20.9, 8 regions 22.0-22.4
// (the machine's plain read: 22.8-23.0), 12 regions 15.5, 16 regions 8.8.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "gemv.h"

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
inline float widen(float v) { return v; }
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

// Rows r, r + stride, ..., r + (R - 1) stride.
template <int R, typename T>
void gemv_rows(const T* w, int64_t r, int64_t stride, int64_t cols, const float* x, float* y) {
  const int64_t c8 = cols & ~int64_t{7};
  __m256 a[R];
  for (int i = 0; i < R; ++i) a[i] = _mm256_setzero_ps();
  for (int64_t c = 0; c < c8; c += 8) {
    const __m256 xv = _mm256_loadu_ps(x + c);
    for (int i = 0; i < R; ++i) a[i] = _mm256_fmadd_ps(load8(w + (r + i * stride) * cols + c), xv, a[i]);
  }
  for (int i = 0; i < R; ++i) {
    const int64_t row = r + i * stride;
    float s = hsum(a[i]);
    for (int64_t c = c8; c < cols; ++c) s += widen(w[row * cols + c]) * x[c];
    y[row] = s;
  }
}

constexpr int kStreams = 8;

template <typename T>
void gemv_regions(const T* w, int64_t r0, int64_t r1, int64_t cols, const float* x, float* y) {
  const int64_t per = (r1 - r0) / kStreams;
  for (int64_t t = 0; t < per; ++t) gemv_rows<kStreams>(w, r0 + t, per, cols, x, y);
  for (int64_t r = r0 + kStreams * per; r < r1; ++r) gemv_rows<1>(w, r, 0, cols, x, y);
}

inline __m256 widen8(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// int8 rows r, r + stride, ...: per group of kGemvI8Group columns a partial sum per row, scaled into the
// row's total (the reference's order of operations per group; its sums within a group differ by lanes).
// Whole groups run a fixed-length inner loop with nothing else in it; a last, partial group (cols not a
// multiple of the group) runs 8 columns at a time and then one by one. (The first form, one loop for every
// group with its bounds and its one-by-one tail computed per group, streamed the SmolLM2 head at 13.8 GB/s
// against the bf16 GEMV's 20.6 on a Zen 4: the group's bookkeeping, not the memory, was its bound.)
template <int R>
void gemv_i8_rows(const int8_t* w, const float* scales, int64_t r, int64_t stride, int64_t cols,
                  const float* x, float* y) {
  const int64_t groups = (cols + kGemvI8Group - 1) / kGemvI8Group, whole = cols / kGemvI8Group;
  const int8_t* row[R];
  const float* scale[R];
  for (int i = 0; i < R; ++i) {
    row[i] = w + (r + i * stride) * cols;
    scale[i] = scales + (r + i * stride) * groups;
  }
  __m256 a[R];
  for (int i = 0; i < R; ++i) a[i] = _mm256_setzero_ps();
  for (int64_t g = 0; g < whole; ++g) {
    const int64_t c0 = g * kGemvI8Group;
    __m256 p[R];
    for (int i = 0; i < R; ++i) p[i] = _mm256_setzero_ps();
    for (int64_t c = c0; c < c0 + kGemvI8Group; c += 8) {
      const __m256 xv = _mm256_loadu_ps(x + c);
      for (int i = 0; i < R; ++i) p[i] = _mm256_fmadd_ps(widen8(row[i] + c), xv, p[i]);
    }
    for (int i = 0; i < R; ++i) a[i] = _mm256_fmadd_ps(p[i], _mm256_broadcast_ss(scale[i] + g), a[i]);
  }
  float s[R];
  for (int i = 0; i < R; ++i) s[i] = hsum(a[i]);
  if (whole < groups) {
    const int64_t c0 = whole * kGemvI8Group, c8 = c0 + ((cols - c0) & ~int64_t{7});
    for (int i = 0; i < R; ++i) {
      __m256 p = _mm256_setzero_ps();
      for (int64_t c = c0; c < c8; c += 8) p = _mm256_fmadd_ps(widen8(row[i] + c), _mm256_loadu_ps(x + c), p);
      float t = hsum(p);
      for (int64_t c = c8; c < cols; ++c) t += static_cast<float>(row[i][c]) * x[c];
      s[i] += scale[i][whole] * t;
    }
  }
  for (int i = 0; i < R; ++i) y[r + i * stride] = s[i];
}

// int8 rows come from 4 regions: each region is two streams, its weights and its scales, so 4 regions are the
// 8 streams the bf16 GEMV reads. The SmolLM2 head (49,152 x 576, 30 MB with its scales), one thread, AMD EPYC
// Zen 4 (family 25 model 17), scratch program, best of 40 over 4 copies (GB/s): 8 regions 14.9-15.8, 6
// 16.7, 5 20.0-20.2, 4 18.9-20.1, 3 19.5-21.2, 2 16.5; the bf16 GEMV beside it 20-21. (With the first form of
// gemv_i8_rows above, 4 regions read 16.6-17.1.)
constexpr int kI8Regions = 4;

}  // namespace

void gemv_i8_avx2(const int8_t* w, const float* scales, int64_t r0, int64_t r1, int64_t cols, const float* x,
                  float* y) {
  const int64_t per = (r1 - r0) / kI8Regions;
  for (int64_t t = 0; t < per; ++t) gemv_i8_rows<kI8Regions>(w, scales, r0 + t, per, cols, x, y);
  for (int64_t r = r0 + kI8Regions * per; r < r1; ++r) gemv_i8_rows<1>(w, scales, r, 0, cols, x, y);
}

void gemv_bf16_avx2(const uint16_t* w, int64_t r0, int64_t r1, int64_t cols, const float* x, float* y) {
  gemv_regions(w, r0, r1, cols, x, y);
}
void gemv_f32_avx2(const float* w, int64_t r0, int64_t r1, int64_t cols, const float* x, float* y) {
  gemv_regions(w, r0, r1, cols, x, y);
}

}  // namespace sparse24::kernels
