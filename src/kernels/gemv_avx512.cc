// The int8 GEMV and the quantized ggml rows (Q8_0, Q6_K) with AVX-512 (gemv.h): gemv_rows.h's rows with 16
// lanes, half the widenings, conversions and FMAs per value (those, not the memory, bound the 8-lane rows on
// an Intel Xeon model 207: docs/kernels.md, sessions 46 and 48).
#include <immintrin.h>

#include <cstring>

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
  static T mul(T a, T b) { return _mm512_mul_ps(a, b); }
  static T fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static T splat(const float* p) { return _mm512_set1_ps(*p); }
  static float sum(T v) { return _mm512_reduce_add_ps(v); }

  // Q6_K (210 bytes per 256 columns): each half of 128 from 64 bytes of low nibbles ql and 32 bytes of 2-bit
  // highs qh; q = (low | high << 4) - 32. A half's 128 q as two vectors of 64: its ql (low nibbles for the
  // first 64, high for the next) and its qh in both 256-bit halves, each half's highs brought to bits 4-5 by
  // its own 16-bit shift (left 4 and 2, right 0 and 2), one bit select, then the two high bits cleared.
  // (16-bit shifts: the bits a byte takes from its neighbour are masked away.)
  static void stage_q6_k(const uint8_t* b, int8_t* q, float* scale, const float* halves) {
    uint16_t d;
    std::memcpy(&d, b + 208, 2);
    const __m512i s16 = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192)));
    _mm512_store_ps(scale, _mm512_mul_ps(_mm512_set1_ps(halves[d]), _mm512_cvtepi32_ps(s16)));
    const __m512i low4 = _mm512_set1_epi8(0x0F), six = _mm512_set1_epi8(0x3F), k32 = _mm512_set1_epi8(32);
    const __m512i left = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i right = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    constexpr int kSelect = 0xE4;  // (a & c) | (b & ~c): c's set bits from a
    for (int half = 0; half < 2; ++half) {
      const __m512i l = _mm512_loadu_si512(b + 64 * half);
      const __m512i h =
          _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * half)));
      const __m512i lo = _mm512_ternarylogic_epi32(l, _mm512_sllv_epi16(h, left), low4, kSelect);
      const __m512i hi =
          _mm512_ternarylogic_epi32(_mm512_srli_epi16(l, 4), _mm512_srlv_epi16(h, right), low4, kSelect);
      _mm512_store_si512(q + 128 * half, _mm512_sub_epi8(_mm512_and_si512(lo, six), k32));
      _mm512_store_si512(q + 128 * half + 64, _mm512_sub_epi8(_mm512_and_si512(hi, six), k32));
    }
  }
};

}  // namespace

void gemv_i8_avx512(const int8_t* w, const float* scales, int64_t r0, int64_t r1, int64_t cols,
                    const float* x, float* y) {
  gemv_i8_regions<I8Avx512>(w, scales, r0, r1, cols, x, y);
}

void gemv_ggml_avx512(uint32_t ggml_type, const uint8_t* w, int64_t r0, int64_t r1, int64_t cols,
                      const float* x, float* y) {
  const auto type = static_cast<GgmlType>(ggml_type);
  if (type == GgmlType::kQ8_0 || type == GgmlType::kQ6_K)
    return ggml_quantized_regions<I8Avx512>(type, w, r0, r1, cols, x, y);
  gemv_ggml_avx2(ggml_type, w, r0, r1, cols, x, y);  // the float types: already at the memory's rate
}

}  // namespace sparse24::kernels
