// The int8 GEMV with AVX-512 (gemv.h): gemv_rows.h's int8 rows with 16 lanes, half the widenings,
// conversions and FMAs per value (those, not the memory, bound the 8-lane rows on an Intel Xeon model 207:
// docs/kernels.md, session 46).
#include <immintrin.h>

#include "gemv.h"
#include "gemv_rows.h"

namespace sparse24::kernels {
namespace {

struct I8Avx512 {
  using T = __m512;
  static constexpr int kLanes = 16;
  static T zero() { return _mm512_setzero_ps(); }
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  static T widen(const int8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static T fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static T splat(const float* p) { return _mm512_set1_ps(*p); }
  static float sum(T v) { return _mm512_reduce_add_ps(v); }
};

}  // namespace

void gemv_i8_avx512(const int8_t* w, const float* scales, int64_t r0, int64_t r1, int64_t cols,
                    const float* x, float* y) {
  gemv_i8_regions<I8Avx512>(w, scales, r0, r1, cols, x, y);
}

}  // namespace sparse24::kernels
