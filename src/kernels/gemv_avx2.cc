// The dense GEMVs (bf16, fp32, int8) and the small-N GEMM, AVX2 + FMA (gemv.h). The bf16 GEMV: eight rows at
// a time, one from each of eight regions of the rows (eight long sequential streams in flight, one
// accumulator each), eight columns per step; a bf16 value widens to fp32 by a 16-bit left shift of its
// zero-extended bits. The SmolLM2 head (49,152 x 576, 57 MB),
// one thread, quiet AMD EPYC Zen 3, scratch program, best of 20 (GB/s): eight adjacent rows 10.8-11.1 (a
// row is 1152 bytes: the streams were too short for the prefetcher), 6 regions 20.9, 8 regions 22.0-22.4
// (the machine's plain read: 22.8-23.0), 12 regions 15.5, 16 regions 8.8.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "gemv.h"
#include "gemv_rows.h"
#include "ggml_avx2.h"
#include "sparse24/gguf.h"
#include "spmm_traits_avx2.h"

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
struct Half {  // an IEEE half, as a GGUF file's F16 rows hold it
  uint16_t bits;
};
inline float widen(Half h) { return _cvtsh_ss(h.bits); }
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const Half* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
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
  over_regions<kStreams>(r0, r1, cols * static_cast<int64_t>(sizeof(T)),
                         [&]<int R>(int64_t r, int64_t stride) { gemv_rows<R>(w, r, stride, cols, x, y); });
}

// The int8 rows' vector (gemv_rows.h).
struct I8Avx2 {
  using T = __m256;
  static constexpr int kLanes = 8;
  static T zero() { return _mm256_setzero_ps(); }
  static T load(const float* p) { return _mm256_loadu_ps(p); }
  static T widen(const int8_t* p) { return widen8(p); }
  static T mul(T a, T b) { return _mm256_mul_ps(a, b); }
  static T fma(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static T splat(const float* p) { return _mm256_broadcast_ss(p); }
  static float sum(T v) { return hsum(v); }
  static void stage_q6_k(const uint8_t* b, int8_t* q, float* scale, const float* /*halves*/) {
    q6_k_stage(b, q, scale);
  }
};

}  // namespace

void gemv_i8_avx2(const int8_t* w, const float* scales, int64_t r0, int64_t r1, int64_t cols, const float* x,
                  float* y) {
  gemv_i8_regions<I8Avx2>(w, scales, r0, r1, cols, x, y);
}

void gemv_bf16_avx2(const uint16_t* w, int64_t r0, int64_t r1, int64_t cols, const float* x, float* y) {
  gemv_regions(w, r0, r1, cols, x, y);
}
void gemv_f32_avx2(const float* w, int64_t r0, int64_t r1, int64_t cols, const float* x, float* y) {
  gemv_regions(w, r0, r1, cols, x, y);
}

// The float types through gemv_regions; the quantized ones from 4 row regions, as the int8 rows
// (gemv_rows.h).
void gemv_ggml_avx2(uint32_t ggml_type, const uint8_t* w, int64_t r0, int64_t r1, int64_t cols,
                    const float* x, float* y) {
  switch (static_cast<GgmlType>(ggml_type)) {
    case GgmlType::kF32:
      return gemv_regions(reinterpret_cast<const float*>(w), r0, r1, cols, x, y);
    case GgmlType::kF16:
      return gemv_regions(reinterpret_cast<const Half*>(w), r0, r1, cols, x, y);
    case GgmlType::kBF16:
      return gemv_regions(reinterpret_cast<const uint16_t*>(w), r0, r1, cols, x, y);
    case GgmlType::kQ8_0:
    case GgmlType::kQ6_K:
      return ggml_quantized_regions<I8Avx2>(static_cast<GgmlType>(ggml_type), w, r0, r1, cols, x, y);
    default:  // (gemv_ggml lets only the types above through)
      break;
  }
}

namespace {

// Dense small N: rows r, r + stride, ..., r + (R - 1) stride; per column of W one broadcast weight per row
// times the NV vectors of X's row (the n columns; masked past n), so W streams in place and every FMA lane
// is a useful multiply-add. Bias and epilogue on the sums in registers.
template <int R, int NV>
void gemm_small_rows(const float* w, int64_t r, int64_t stride, int64_t k, const float* x, int64_t n,
                     float* y, const float* bias, Epilogue ep) {
  const __m256i mask = Avx2::mask_first(static_cast<int>(n - (NV - 1) * 8));
  const float* row[R];
  __m256 acc[R][NV];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    row[i] = w + (r + i * stride) * k;
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_setzero_ps();
  }
  // A software prefetch of each row's line 1 KB ahead, once per line (staggered regions, N = 8, cold: 768x768
  // 18.1-18.4 -> 18.8 GB/s, 3072x768 18.1 -> 19.1-19.2, 1536x384 18.8 -> 19.6).
  constexpr int64_t kAhead = 256;
  for (int64_t c = 0; c < k; ++c) {
    if (c % 16 == 0)
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i)
        _mm_prefetch(reinterpret_cast<const char*>(row[i] + c + kAhead), _MM_HINT_T0);
    __m256 xv[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV - 1; ++v) xv[v] = _mm256_loadu_ps(x + c * n + 8 * v);
    xv[NV - 1] = _mm256_maskload_ps(x + c * n + 8 * (NV - 1), mask);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const __m256 wv = _mm256_broadcast_ss(row[i] + c);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_fmadd_ps(wv, xv[v], acc[i][v]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    float* yr = y + (r + i * stride) * n;
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      const __m256 o = finish<Avx2>(acc[i][v], bias, r + i * stride, ep);
      if (v < NV - 1)
        _mm256_storeu_ps(yr + 8 * v, o);
      else
        _mm256_maskstore_ps(yr + 8 * v, mask, o);
    }
  }
}

}  // namespace

// N <= 8: one vector of columns, 8 regions (8 sums, 8 streams); N = 9..16: two vectors, 6 regions (12 sums,
// 2 activation vectors and the broadcast weight in the 16 registers). AMD EPYC Zen 4 (family 25 model 17),
// one thread, cold, scratch program, weight GB/s at N = 8 for 4096x4096 / 1536x384 / 384x1536 / 384x384: 8
// adjacent rows 14.9 / 8.4 / 14.9 / 8.5 (short rows: too short a stream for the prefetcher), 4 regions 12.0 /
// 14.4 / 12.5 / 14.3, 6 regions 13.7 / 16.2 / 16.1 / 16.7, 8 regions 15.8 / 16.5 / 16.2 / 16.8; oneDNN's
// matmul over the same plain W 11.2 / 7.8 / 11.0, over W prepacked in its own layout 14.5 / 14.6 / 15.3.
void gemm_small_avx2(const float* w, int64_t r0, int64_t r1, int64_t k, const float* x, int64_t n, float* y,
                     const float* bias, Epilogue ep) {
  const int64_t row_bytes = k * static_cast<int64_t>(sizeof(float));
  if (n <= 8)
    over_regions<8>(r0, r1, row_bytes, [&]<int R>(int64_t r, int64_t stride) {
      gemm_small_rows<R, 1>(w, r, stride, k, x, n, y, bias, ep);
    });
  else
    over_regions<6>(r0, r1, row_bytes, [&]<int R>(int64_t r, int64_t stride) {
      gemm_small_rows<R, 2>(w, r, stride, k, x, n, y, bias, ep);
    });
}

}  // namespace sparse24::kernels
