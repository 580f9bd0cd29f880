// The AVX2 paths of convert.h: the F16C conversions (eight values per instruction, the tail through
// dtype.h's scalar ones), ggml blocks to fp32, the int8 rounding and the 2:4 pruning of a row (four groups
// of 4 per step: the ranks from three rotations within each group, the kept values gathered by one permute
// from a table). No FMA: each product rounds before a difference, as in the plain loops.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "convert.h"
#include "ggml_avx2.h"

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

void floats_to_bf16_avx2(const float* x, int64_t n, uint16_t* y) {
  const __m256i one = _mm256_set1_epi32(1), half = _mm256_set1_epi32(0x7FFF);
  const __m256i magnitude = _mm256_set1_epi32(0x7FFFFFFF), inf = _mm256_set1_epi32(0x7F800000);
  const __m256i quiet = _mm256_set1_epi32(0x400000);  // a NaN's high half | 0x40
  // 8 values' bf16 bits in the low halves of their 32-bit lanes.
  const auto narrow = [&](__m256i v) {
    const __m256i rounded =
        _mm256_add_epi32(v, _mm256_add_epi32(half, _mm256_and_si256(_mm256_srli_epi32(v, 16), one)));
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(v, magnitude), inf);
    return _mm256_srli_epi32(_mm256_blendv_epi8(rounded, _mm256_or_si256(v, quiet), nan), 16);
  };
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = narrow(_mm256_castps_si256(_mm256_loadu_ps(x + i)));
    const __m256i b = narrow(_mm256_castps_si256(_mm256_loadu_ps(x + i + 8)));
    // packus interleaves the 128-bit halves (a0-3 b0-3 a4-7 b4-7); the permute puts them back in order.
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i),
                        _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), _MM_SHUFFLE(3, 1, 2, 0)));
  }
  for (; i < n; ++i) y[i] = float_to_bf16(x[i]);
}

float quantize_i8_avx2(const float* x, int64_t n, int8_t* q) {
  const __m256 sign = _mm256_set1_ps(-0.f);
  __m256 mx = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
  float lanes[8];
  _mm256_storeu_ps(lanes, mx);
  float amax = 0.f;
  for (float l : lanes) amax = std::max(amax, l);
  for (; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float scale = amax / 127.f;
  if (scale == 0.f) {
    if (n > 0) std::memset(q, 0, static_cast<size_t>(n));
    return scale;
  }
  // x / scale (divided, as the plain loop: the same quotients), clamped, converted to nearest even.
  const __m256 s = _mm256_set1_ps(scale), lo = _mm256_set1_ps(-127.f), hi = _mm256_set1_ps(127.f);
  const auto ints = [&](const float* p) {
    return _mm256_cvtps_epi32(_mm256_min_ps(hi, _mm256_max_ps(lo, _mm256_div_ps(_mm256_loadu_ps(p), s))));
  };
  i = 0;
  for (; i + 32 <= n; i += 32) {
    // Packing works within 128-bit lanes: the eight 4-byte pieces come out in the order 0 2 4 6 1 3 5 7.
    const __m256i w0 = _mm256_packs_epi32(ints(x + i), ints(x + i + 8));
    const __m256i w1 = _mm256_packs_epi32(ints(x + i + 16), ints(x + i + 24));
    const __m256i b =
        _mm256_permutevar8x32_epi32(_mm256_packs_epi16(w0, w1), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i), b);
  }
  for (; i < n; ++i) q[i] = round_i8(x[i] / scale);
  return scale;
}

bool prune24_blocks_avx2(const float* x, int64_t blocks, float* values, uint8_t* meta) {
  const Prune24Tables& t = prune24_tables();
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  // Element i + s (mod 4) of a group is ahead of element i on a tie when it comes first: i >= 4 - s.
  const __m256 tie1 = _mm256_castsi256_ps(_mm256_setr_epi32(0, 0, 0, -1, 0, 0, 0, -1));
  const __m256 tie2 = _mm256_castsi256_ps(_mm256_setr_epi32(0, 0, -1, -1, 0, 0, -1, -1));
  const __m256 tie3 = _mm256_castsi256_ps(_mm256_setr_epi32(0, -1, -1, -1, 0, -1, -1, -1));
  // Two groups' kept values (others +0) and their kept bits (movemask: bit i for element i).
  const auto kept = [&](__m256 v, int* m) {
    const __m256 a = _mm256_and_ps(v, magnitude);
    const auto ahead = [&](__m256 r, __m256 tie) {
      return _mm256_or_ps(_mm256_cmp_ps(r, a, _CMP_GT_OQ),
                          _mm256_and_ps(_mm256_cmp_ps(r, a, _CMP_EQ_OQ), tie));
    };
    const __m256 c1 = ahead(_mm256_permute_ps(a, _MM_SHUFFLE(0, 3, 2, 1)), tie1);
    const __m256 c2 = ahead(_mm256_permute_ps(a, _MM_SHUFFLE(1, 0, 3, 2)), tie2);
    const __m256 c3 = ahead(_mm256_permute_ps(a, _MM_SHUFFLE(2, 1, 0, 3)), tie3);
    // Rank >= 2 (two or three of the others ahead) is the majority of c1, c2, c3; a zero is never kept.
    const __m256 behind = _mm256_or_ps(_mm256_and_ps(c1, _mm256_or_ps(c2, c3)), _mm256_and_ps(c2, c3));
    const __m256 keep = _mm256_andnot_ps(behind, _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_NEQ_OQ));
    *m = _mm256_movemask_ps(keep);
    return _mm256_and_ps(v, keep);
  };
  __m256 nan = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    int ma, mb;
    const __m256 xa = _mm256_loadu_ps(x + 16 * b), xb = _mm256_loadu_ps(x + 16 * b + 8);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(xa, xb, _CMP_UNORD_Q));
    const __m256 ya = kept(xa, &ma);
    const __m256 yb = kept(xb, &mb);
    // Elements 0-3 gathered from ya's groups, 4-7 from yb's (its table entry indexes past 4 already).
    const __m256i idx = _mm256_cvtepu8_epi32(
        _mm_setr_epi32(static_cast<int>(t.positions[ma]), static_cast<int>(t.positions[mb]), 0, 0));
    _mm256_storeu_ps(values + 8 * b, _mm256_blend_ps(_mm256_permutevar8x32_ps(ya, idx),
                                                     _mm256_permutevar8x32_ps(yb, idx), 0xF0));
    meta[2 * b] = t.meta[ma];
    meta[2 * b + 1] = t.meta[mb];
  }
  return _mm256_movemask_ps(nan) == 0;
}

void q8_0_to_floats_avx2(const uint8_t* w, int64_t blocks, float* y) {
  for (int64_t b = 0; b < blocks; ++b, w += kQ8Bytes, y += 32) {
    const __m256 d = _mm256_set1_ps(half_at(w));
    const auto* q = reinterpret_cast<const int8_t*>(w + 2);
    for (int i = 0; i < 32; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(d, widen8(q + i)));
  }
}

namespace {

// The four 8-byte quarters of v, each in the low half of its own vector (8 values to widen).
inline void quarters(__m256i v, __m128i* part) {
  const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
  part[0] = lo;
  part[1] = _mm_srli_si128(lo, 8);
  part[2] = hi;
  part[3] = _mm_srli_si128(hi, 8);
}

// 32 values from 16 bytes of nibbles (element l < 16 the low nibble of qs[l], l + 16 its high one), each
// mapped through the 16 int8 levels, times d.
inline void nibbles32(const uint8_t* qs, __m128i levels, __m256 d, float* y) {
  const __m128i low4 = _mm_set1_epi8(0x0F), b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i lo = _mm_shuffle_epi8(levels, _mm_and_si128(b, low4)),
                hi = _mm_shuffle_epi8(levels, _mm_and_si128(_mm_srli_epi16(b, 4), low4));
  const __m128i part[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
  for (int k = 0; k < 4; ++k)
    _mm256_storeu_ps(y + 8 * k, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part[k]))));
}

}  // namespace

void q45_k_values_avx2(const uint8_t* qs, const uint8_t* qh, const float* dl, const float* ml, float* y) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), bit4 = _mm256_set1_epi8(0x10);
  const __m256i highs =
      qh ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh)) : _mm256_setzero_si256();
  for (int p = 0; p < 4; ++p) {  // 32 bytes: sub-block 2p in their low nibbles, 2p + 1 in their high ones
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * p));
    __m256i nib[2] = {_mm256_and_si256(q, low4), _mm256_and_si256(_mm256_srli_epi16(q, 4), low4)};
    for (int h = 0; h < 2; ++h) {
      const int j = 2 * p + h;
      if (qh) {  // Q5_K: bit j of qh[l] as bit 4 of element l
        const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << j));
        const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(highs, bit), bit);
        nib[h] = _mm256_or_si256(nib[h], _mm256_and_si256(set, bit4));
      }
      const __m256 d = _mm256_set1_ps(dl[j]), m = _mm256_set1_ps(ml[j]);
      __m128i part[4];
      quarters(nib[h], part);
      for (int k = 0; k < 4; ++k)
        _mm256_storeu_ps(
            y + 32 * j + 8 * k,
            _mm256_sub_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(part[k]))), m));
    }
  }
}

void nibble_blocks_to_floats_avx2(const uint8_t* w, int64_t blocks, const int8_t* levels, float* y) {
  const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(levels));
  for (int64_t b = 0; b < blocks; ++b, w += kQ4_0Bytes, y += 32)
    nibbles32(w + 2, table, _mm256_set1_ps(half_at(w)), y);
}

void nibble_subblocks_to_floats_avx2(const uint8_t* qs, const int8_t* levels, const float* dl, float* y) {
  const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(levels));
  for (int j = 0; j < 8; ++j) nibbles32(qs + 16 * j, table, _mm256_set1_ps(dl[j]), y + 32 * j);
}

void k2_values_avx2(const uint8_t* qs, const uint8_t* hmask, const float* dl, const float* ml, float* y) {
  const __m256i three = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
  const __m256i hm =
      hmask ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hmask)) : _mm256_setzero_si256();
  for (int half = 0; half < 2; ++half) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * half));
    for (int k = 0; k < 4; ++k) {  // elements 128 half + 32 k + l: sub-blocks 8 half + 2 k and the next
      __m256i v = _mm256_and_si256(_mm256_srli_epi16(q, 2 * k), three);
      if (hmask) {  // Q3_K: minus 4 where bit 4 half + k of hmask[l] is clear
        const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << (4 * half + k)));
        const __m256i clear = _mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), _mm256_setzero_si256());
        v = _mm256_sub_epi8(v, _mm256_and_si256(clear, four));
      }
      __m128i part[4];
      quarters(v, part);
      float* out = y + 128 * half + 32 * k;
      for (int p = 0; p < 4; ++p) {
        const int s = 8 * half + 2 * k + p / 2;
        const __m256 w =
            _mm256_mul_ps(_mm256_set1_ps(dl[s]), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part[p])));
        _mm256_storeu_ps(out + 8 * p, ml ? _mm256_sub_ps(w, _mm256_set1_ps(ml[s])) : w);
      }
    }
  }
}

void q5_values_avx2(const uint8_t* qh, const uint8_t* qs, float d, float m, bool minus16, float* y) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  // bit j of h to byte j: byte j of the vector takes byte j / 8 of h, then its bit j % 8 is tested
  const __m256i spread =
      _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(h)),
                          _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2,
                                           2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bits = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
  const __m256i fifth =
      _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bits), bits), _mm256_set1_epi8(0x10));
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)), low4 = _mm_set1_epi8(0x0F);
  __m256i v = _mm256_or_si256(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(b, low4)),
                                                      _mm_and_si128(_mm_srli_epi16(b, 4), low4), 1),
                              fifth);
  if (minus16) v = _mm256_sub_epi8(v, _mm256_set1_epi8(16));
  __m128i part[4];
  quarters(v, part);
  const __m256 dv = _mm256_set1_ps(d), mv = _mm256_set1_ps(m);
  for (int p = 0; p < 4; ++p) {
    const __m256 w = _mm256_mul_ps(dv, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part[p])));
    _mm256_storeu_ps(y + 8 * p, minus16 ? w : _mm256_add_ps(w, mv));
  }
}

void q6_k_to_floats_avx2(const uint8_t* w, int64_t blocks, float* y) {
  alignas(32) int8_t q[256];
  alignas(32) float scale[16];
  for (int64_t b = 0; b < blocks; ++b, y += 256) {
    q6_k_stage(w + b * kQ6Bytes, q, scale);
    for (int g = 0; g < 16; ++g) {
      const __m256 sc = _mm256_broadcast_ss(scale + g);
      _mm256_storeu_ps(y + 16 * g, _mm256_mul_ps(sc, widen8(q + 16 * g)));
      _mm256_storeu_ps(y + 16 * g + 8, _mm256_mul_ps(sc, widen8(q + 16 * g + 8)));
    }
  }
}

}  // namespace sparse24::kernels
