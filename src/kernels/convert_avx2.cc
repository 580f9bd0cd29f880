// The F16C conversions (convert.h): eight values per instruction, the tail through dtype.h's scalar ones.
#include <immintrin.h>

#include "convert.h"

namespace sparse24::kernels {

void floats_to_half_f16c(const float* x, int64_t n, uint16_t* y) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) y[i] = float_to_half(x[i]);
}

void half_to_floats_f16c(const uint16_t* x, int64_t n, float* y) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
  for (; i < n; ++i) y[i] = half_to_float(x[i]);
}

}  // namespace sparse24::kernels
