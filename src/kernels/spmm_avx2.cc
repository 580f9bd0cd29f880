// AVX2 kernels (compiled with -mavx2 -mfma -mf16c; reached only when cpu_has_avx2() said yes): nothing in
// this file runs before dispatch has checked the CPU.
#include <immintrin.h>

#include "kernel_list.h"
#include "spmm_driver.h"
#include "spmm_lanes.h"

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
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static void prefetch(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }
  static __m256i row(const int32_t (&t)[8]) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(t)); }

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

// Entry points: one per row of kernel_list.inc.

// 4 rows x NV vectors of 8 columns. NV = 3 (24 columns; 12 of the 16 registers hold sums) runs about 6%
// faster per computed column than NV = 2 (the rows' rates), but pads N up to a multiple of 24. AVX2 forced
// on an AVX-512 machine against AVX2 oneDNN and OpenBLAS (docs/performance.md): N = 128 and 64 +5-7% with
// 16 columns, N = 512 +3-5% with 24.
void avx2_gemm_4x16(const PackedMatrix::Impl& p, const SpmmArgs& a) { gemm_run<Avx2, 4, 2>(p, a); }
void avx2_gemm_4x24(const PackedMatrix::Impl& p, const SpmmArgs& a) { gemm_run<Avx2, 4, 3>(p, a); }

// Rows in lanes (spmm_lanes.h) in the 16 registers, cmax columns per pass.
#define S24_LANES_ROW(name, cmax, tile) SPARSE24_LANES_ENTRY(Avx2, name, cmax, 16, tile)
// Up to 8 columns per pass; _pf with the software prefetch (picked on Intel CPUs: kernel_list.inc).
S24_LANES_ROW(avx2_lanes_f32, 8, kRows)
S24_LANES_ROW(avx2_lanes_bf16, 8, kRows)
S24_LANES_ROW(avx2_lanes_i8, 8, kRows)
S24_LANES_ROW(avx2_lanes_f32_pf, 8, kRowsPf)
S24_LANES_ROW(avx2_lanes_bf16_pf, 8, kRowsPf)
S24_LANES_ROW(avx2_lanes_i8_pf, 8, kRowsPf)
// Passes of up to 4 columns (each with per-super-chunk partial sums, no spills), for the comparison in
// docs/kernels.md.
S24_LANES_ROW(avx2_lanes_i8_c4, 4, kRows)
// int8 in the mixed form (spmm_lanes.h, lanes_mix_tile): half the groups rows in lanes, half columns in
// lanes, passes of 8 columns.
S24_LANES_ROW(avx2_lanes_i8_mix, 8, kMix)
#undef S24_LANES_ROW

}  // namespace sparse24::kernels
