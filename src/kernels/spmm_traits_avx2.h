// The 256-bit traits class of the compute-bound loops (spmm_driver.h): AVX2 + FMA intrinsics only. Included
// by spmm_avx2.cc (the AVX2 rows) and spmm_avx512.cc (its 256-bit compute-bound row for N <= 8); the
// struct lives in an anonymous namespace, so each file compiles its own copy with its own ISA flags.
#pragma once
#include <immintrin.h>

#include "spmm_driver.h"

namespace sparse24::kernels {

namespace {

struct Avx2 {
  using V = __m256;
  using Mask = __m256i;
  static constexpr int W = 8;

  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float v) { return _mm256_set1_ps(v); }
  static V bcast4(const float* p) { return _mm256_broadcast_ps(reinterpret_cast<const __m128*>(p)); }
  static V lane(V v, int i) {
    switch (i) {
      case 0:
        return _mm256_permute_ps(v, 0x00);
      case 1:
        return _mm256_permute_ps(v, 0x55);
      case 2:
        return _mm256_permute_ps(v, 0xAA);
      default:
        return _mm256_permute_ps(v, 0xFF);
    }
  }
  static V load(const float* p) { return _mm256_load_ps(p); }
  static void store(float* p, V v) { _mm256_store_ps(p, v); }
  static V loadu(const float* p) { return _mm256_loadu_ps(p); }
  static void storeu(float* p, V v) { _mm256_storeu_ps(p, v); }
  static Mask mask_first(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static V loadu_m(const float* p, Mask m) { return _mm256_maskload_ps(p, m); }
  static void storeu_m(float* p, V v, Mask m) { _mm256_maskstore_ps(p, m, v); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V widen_i8(const int8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static V widen_bf16(const uint16_t* p) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
  }
  static void prefetch(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }

  // exp(x) for x in [-33, 0] (see spmm_avx512.cc).
  static V exp_neg(V x) {
    const V n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    V r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    V p = _mm256_set1_ps(1.f / 5040);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 720));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  }

  static V gelu(V y) {
    const float* coef = gelu_coefficients();
    const V t = _mm256_and_ps(y, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
    const V tc = _mm256_min_ps(t, _mm256_set1_ps(7.9999995f));
    const __m256i i = _mm256_cvttps_epi32(tc);
    const V u = _mm256_sub_ps(tc, _mm256_add_ps(_mm256_cvtepi32_ps(i), _mm256_set1_ps(0.5f)));
    V r = _mm256_permutevar8x32_ps(_mm256_loadu_ps(coef + kGeluDegree * 8), i);
    for (int d = kGeluDegree - 1; d >= 0; --d)
      r = _mm256_fmadd_ps(r, u, _mm256_permutevar8x32_ps(_mm256_loadu_ps(coef + d * 8), i));
    const V hi = _mm256_mul_ps(tc, tc);
    const V lo = _mm256_fmsub_ps(tc, tc, hi);
    const V e = _mm256_mul_ps(exp_neg(_mm256_mul_ps(hi, _mm256_set1_ps(-0.5f))),
                              _mm256_fnmadd_ps(lo, _mm256_set1_ps(0.5f), _mm256_set1_ps(1.f)));
    V q = _mm256_mul_ps(e, r);
    q = _mm256_and_ps(q, _mm256_cmp_ps(t, _mm256_set1_ps(8.f), _CMP_LT_OQ));
    const V pos = _mm256_cmp_ps(y, _mm256_setzero_ps(), _CMP_GE_OQ);
    const V phi = _mm256_blendv_ps(q, _mm256_sub_ps(_mm256_set1_ps(1.f), q), pos);
    return _mm256_mul_ps(y, phi);
  }

  static V epilogue(V y, Epilogue ep) {
    switch (ep) {
      case Epilogue::kNone:
        return y;
      case Epilogue::kRelu:
        return _mm256_max_ps(y, _mm256_setzero_ps());
      case Epilogue::kGelu:
        return gelu(y);
    }
    return y;
  }
};
static_assert(KernelTraits<Avx2>);

}  // namespace

}  // namespace sparse24::kernels
