// The int8 GEMV with AVX-512 (gemv.h): gemv_avx2.cc's int8 rows with 16 lanes, half the widenings,
// conversions and FMAs per value (those, not the memory, bound the 8-lane rows: 14.6 GB/s where the bf16
// rows stream 20; docs/kernels.md, session 46).
#include <immintrin.h>

#include "gemv.h"
#include "gemv_regions.h"

namespace sparse24::kernels {
namespace {

inline __m512 widen16(const int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

// int8 rows r, r + stride, ...: per group of kGemvI8Group columns a partial sum per row, scaled into the
// row's total (the reference's order of operations per group); a last, partial group 16 columns at a time,
// the rest masked.
template <int R>
void gemv_i8_rows(const int8_t* w, const float* scales, int64_t r, int64_t stride, int64_t cols,
                  const float* x, float* y) {
  static_assert(kGemvI8Group % 16 == 0);
  const int64_t groups = (cols + kGemvI8Group - 1) / kGemvI8Group, whole = cols / kGemvI8Group;
  const int8_t* row[R];
  const float* scale[R];
  for (int i = 0; i < R; ++i) {
    row[i] = w + (r + i * stride) * cols;
    scale[i] = scales + (r + i * stride) * groups;
  }
  __m512 a[R];
  for (int i = 0; i < R; ++i) a[i] = _mm512_setzero_ps();
  for (int64_t g = 0; g < whole; ++g) {
    const int64_t c0 = g * kGemvI8Group;
    __m512 p[R];
    for (int i = 0; i < R; ++i) p[i] = _mm512_setzero_ps();
    for (int64_t c = c0; c < c0 + kGemvI8Group; c += 16) {
      const __m512 xv = _mm512_loadu_ps(x + c);
      for (int i = 0; i < R; ++i) p[i] = _mm512_fmadd_ps(widen16(row[i] + c), xv, p[i]);
    }
    for (int i = 0; i < R; ++i) a[i] = _mm512_fmadd_ps(p[i], _mm512_set1_ps(scale[i][g]), a[i]);
  }
  if (whole < groups) {
    const int64_t c0 = whole * kGemvI8Group;
    __m512 p[R];
    for (int i = 0; i < R; ++i) p[i] = _mm512_setzero_ps();
    for (int64_t c = c0; c < cols; c += 16) {
      const __mmask16 m = cols - c >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (cols - c)) - 1);
      const __m512 xv = _mm512_maskz_loadu_ps(m, x + c);
      for (int i = 0; i < R; ++i)
        p[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, row[i] + c))),
                               xv, p[i]);
    }
    for (int i = 0; i < R; ++i) a[i] = _mm512_fmadd_ps(p[i], _mm512_set1_ps(scale[i][whole]), a[i]);
  }
  for (int i = 0; i < R; ++i) y[r + i * stride] = _mm512_reduce_add_ps(a[i]);
}

constexpr int kI8Regions = 4;  // (as the AVX2 rows: each region two streams, weights and scales)

}  // namespace

void gemv_i8_avx512(const int8_t* w, const float* scales, int64_t r0, int64_t r1, int64_t cols,
                    const float* x, float* y) {
  over_regions<kI8Regions>(r0, r1, cols, [&]<int R>(int64_t r, int64_t stride) {
    gemv_i8_rows<R>(w, scales, r, stride, cols, x, y);
  });
}

}  // namespace sparse24::kernels
