// The ggml blocks' AVX2 unpacking shared by the row conversions (convert_avx2.cc: dequantize_row's fast
// paths) and the GEMV over stored rows (gemv_avx2.cc). In an unnamed namespace: each file compiles its own
// copy with its own flags (no inline function of one ISA's build kept by the linker for another's callers).
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "ggml_blocks.h"

namespace sparse24::kernels {
namespace {

inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline __m256 widen8(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// Q6_K (210 bytes per 256 columns): two halves of 128, each from 64 bytes of low nibbles ql, 32 bytes of
// 2-bit highs qh; q = (low | high << 4) - 32 as int8, 32 columns per vector; sixteen int8 scales (one per 16
// columns) times the fp16 d. A block is staged: its 256 q in order and its 16 d * scale as fp32 (the
// reference's (d * scale) * q then one multiply), so that each 8 of q widen straight from memory and each
// scale is a broadcast load (from registers, the extracts, byte shifts and broadcasts also held the shuffle
// port; either way 6 GB/s on an Intel Xeon model 207: the vector ports' work per value, not the memory).
inline void q6_k_stage(const uint8_t* b, int8_t* q, float* scale) {
  const __m256 d = _mm256_set1_ps(half_at(b + 208));
  const __m128i s16 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192));
  _mm256_storeu_ps(scale, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(s16))));
  _mm256_storeu_ps(scale + 8,
                   _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(s16, 8)))));
  const __m256i low4 = _mm256_set1_epi8(0x0F), bits45 = _mm256_set1_epi8(0x30), k32 = _mm256_set1_epi8(32);
  for (int half = 0; half < 2; ++half) {
    const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 64 * half)),
                  l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 64 * half + 32)),
                  h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * half));
    // (16-bit shifts: the bits a byte takes from its neighbour are masked away.)
    const __m256i v[4] = {
        _mm256_or_si256(_mm256_and_si256(l0, low4), _mm256_and_si256(_mm256_slli_epi16(h, 4), bits45)),
        _mm256_or_si256(_mm256_and_si256(l1, low4), _mm256_and_si256(_mm256_slli_epi16(h, 2), bits45)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), _mm256_and_si256(h, bits45)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                        _mm256_and_si256(_mm256_srli_epi16(h, 2), bits45))};
    for (int k = 0; k < 4; ++k)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 128 * half + 32 * k), _mm256_sub_epi8(v[k], k32));
  }
}

}  // namespace
}  // namespace sparse24::kernels
