// Attention over a KV cache at one position, AVX2 + FMA + F16C (attend.h). Scores: up to four query heads
// against two key rows at a time (eight accumulators), each key row loaded (and widened from half) once for
// all of them. Values: up to four query heads times 16 columns of the value rows per pass (eight
// accumulators), the row slices of later passes coming back from L1/L2. Both stream the cache once; what
// bounds them at long contexts is the cache's bytes (see attend.h).
#include <immintrin.h>

#include <type_traits>

#include "attend.h"
#include "sparse24/dtype.h"

namespace sparse24::kernels {
namespace {

inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

template <int G, typename T>
void scores_group(const float* q, const T* k, int64_t len, int64_t d, float scale, float* p, int64_t ldp) {
  int64_t t = 0;
  for (; t + 2 <= len; t += 2) {
    __m256 a[G][2];
    for (int g = 0; g < G; ++g) a[g][0] = a[g][1] = _mm256_setzero_ps();
    const T* k0 = k + t * d;
    const T* k1 = k0 + d;
    for (int64_t c = 0; c < d; c += 8) {
      const __m256 x0 = load8(k0 + c), x1 = load8(k1 + c);
      for (int g = 0; g < G; ++g) {
        const __m256 qq = _mm256_loadu_ps(q + g * d + c);
        a[g][0] = _mm256_fmadd_ps(qq, x0, a[g][0]);
        a[g][1] = _mm256_fmadd_ps(qq, x1, a[g][1]);
      }
    }
    for (int g = 0; g < G; ++g) {
      p[g * ldp + t] = hsum(a[g][0]) * scale;
      p[g * ldp + t + 1] = hsum(a[g][1]) * scale;
    }
  }
  if (t < len) {
    __m256 a[G];
    for (int g = 0; g < G; ++g) a[g] = _mm256_setzero_ps();
    const T* k0 = k + t * d;
    for (int64_t c = 0; c < d; c += 8) {
      const __m256 x0 = load8(k0 + c);
      for (int g = 0; g < G; ++g) a[g] = _mm256_fmadd_ps(_mm256_loadu_ps(q + g * d + c), x0, a[g]);
    }
    for (int g = 0; g < G; ++g) p[g * ldp + t] = hsum(a[g]) * scale;
  }
}

template <int G, typename T>
void values_group(const float* p, int64_t ldp, const T* v, int64_t len, int64_t d, float* out) {
  for (int64_t c = 0; c < d; c += 16) {
    const bool two = c + 16 <= d;  // d is a multiple of 8: the last pass may have 8 columns
    __m256 a[G][2];
    for (int g = 0; g < G; ++g) a[g][0] = a[g][1] = _mm256_setzero_ps();
    for (int64_t t = 0; t < len; ++t) {
      const T* row = v + t * d + c;
      const __m256 x0 = load8(row);
      const __m256 x1 = two ? load8(row + 8) : _mm256_setzero_ps();
      for (int g = 0; g < G; ++g) {
        const __m256 w = _mm256_broadcast_ss(p + g * ldp + t);
        a[g][0] = _mm256_fmadd_ps(w, x0, a[g][0]);
        a[g][1] = _mm256_fmadd_ps(w, x1, a[g][1]);
      }
    }
    for (int g = 0; g < G; ++g) {
      _mm256_storeu_ps(out + g * d + c, a[g][0]);
      if (two) _mm256_storeu_ps(out + g * d + c + 8, a[g][1]);
    }
  }
}

// Groups of up to four query heads, G a compile-time count so the accumulators stay in registers.
template <typename F>
void by_groups(int64_t queries, F&& f) {
  for (int64_t g0 = 0; g0 < queries; g0 += 4) {
    switch (queries - g0 < 4 ? queries - g0 : 4) {  // (no std::min: see gemv_avx2.cc on inline copies)
      case 1:
        f(std::integral_constant<int, 1>{}, g0);
        break;
      case 2:
        f(std::integral_constant<int, 2>{}, g0);
        break;
      case 3:
        f(std::integral_constant<int, 3>{}, g0);
        break;
      default:
        f(std::integral_constant<int, 4>{}, g0);
        break;
    }
  }
}

}  // namespace

template <typename T>
void attend_scores_avx2(const float* q, int64_t queries, const T* k, int64_t len, int64_t d, float scale,
                        float* p, int64_t ldp) {
  by_groups(queries, [&](auto n, int64_t g0) {
    scores_group<decltype(n)::value>(q + g0 * d, k, len, d, scale, p + g0 * ldp, ldp);
  });
}

template <typename T>
void attend_values_avx2(const float* p, int64_t queries, int64_t ldp, const T* v, int64_t len, int64_t d,
                        float* out) {
  by_groups(queries, [&](auto n, int64_t g0) {
    values_group<decltype(n)::value>(p + g0 * ldp, ldp, v, len, d, out + g0 * d);
  });
}

template void attend_scores_avx2(const float*, int64_t, const float*, int64_t, int64_t, float, float*,
                                 int64_t);
template void attend_scores_avx2(const float*, int64_t, const uint16_t*, int64_t, int64_t, float, float*,
                                 int64_t);
template void attend_values_avx2(const float*, int64_t, int64_t, const float*, int64_t, int64_t, float*);
template void attend_values_avx2(const float*, int64_t, int64_t, const uint16_t*, int64_t, int64_t, float*);

}  // namespace sparse24::kernels
