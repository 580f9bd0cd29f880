// AVX-512 kernels (compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma; reached only when
// cpu_has_avx512() said yes).
// GCC 12's AVX-512 headers implement _mm512_undefined_ps() as a self-initialised variable, which
// -Wuninitialized reports inside every intrinsic that uses it (GCC PR 105593): silence it for this file.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernel_list.h"
#include "spmm_driver.h"
#include "spmm_gemm_lanes.h"
#include "spmm_lanes.h"
#include "spmm_traits_avx2.h"

namespace sparse24::kernels {

namespace {

struct Avx512 {
  using V = __m512;
  using Mask = __mmask16;
  static constexpr int W = 16;

  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float v) { return _mm512_set1_ps(v); }
  // 4 floats into every 128-bit lane; lane(v, i) spreads element i of each lane (an in-lane permute).
  static V bcast4(const float* p) { return _mm512_broadcast_f32x4(_mm_loadu_ps(p)); }
  static V lane(V v, int i) {
    switch (i) {
      case 0:
        return _mm512_permute_ps(v, 0x00);
      case 1:
        return _mm512_permute_ps(v, 0x55);
      case 2:
        return _mm512_permute_ps(v, 0xAA);
      default:
        return _mm512_permute_ps(v, 0xFF);
    }
  }
  static V load(const float* p) { return _mm512_load_ps(p); }
  static void store(float* p, V v) { _mm512_store_ps(p, v); }
  static V loadu(const float* p) { return _mm512_loadu_ps(p); }
  static void storeu(float* p, V v) { _mm512_storeu_ps(p, v); }
  static Mask mask_first(int n) { return static_cast<Mask>((1u << n) - 1); }
  static V loadu_m(const float* p, Mask m) { return _mm512_maskz_loadu_ps(m, p); }
  static void storeu_m(float* p, V v, Mask m) { _mm512_mask_storeu_ps(p, m, v); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V widen_i8(const int8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static V widen_bf16(const uint16_t* p) {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
  }
  static void prefetch(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }

  // exp(x) for x in [-33, 0]: 2^n e^r, |r| <= ln2 / 2, degree-7 Taylor (relative error < 1e-8).
  static V exp_neg(V x) {
    const V n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    V r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    V p = _mm512_set1_ps(1.f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
    return _mm512_scalef_ps(p, n);
  }

  // gelu(y) = y Phi(y) with Q = Phi(-|y|) = phi(|y|) R(|y|) (see gelu_coefficients()).
  static V gelu(V y) {
    const float* coef = gelu_coefficients();
    const V t = _mm512_abs_ps(y);
    const V tc = _mm512_min_ps(t, _mm512_set1_ps(7.9999995f));
    const __m512i i = _mm512_cvttps_epi32(tc);
    const V u = _mm512_sub_ps(tc, _mm512_add_ps(_mm512_cvtepi32_ps(i), _mm512_set1_ps(0.5f)));
    V r = _mm512_permutexvar_ps(i, _mm512_castps256_ps512(_mm256_loadu_ps(coef + kGeluDegree * 8)));
    for (int d = kGeluDegree - 1; d >= 0; --d)
      r = _mm512_fmadd_ps(r, u,
                          _mm512_permutexvar_ps(i, _mm512_castps256_ps512(_mm256_loadu_ps(coef + d * 8))));
    const V hi = _mm512_mul_ps(tc, tc);
    const V lo = _mm512_fmsub_ps(tc, tc, hi);  // tc^2 = hi + lo exactly
    const V e = _mm512_mul_ps(exp_neg(_mm512_mul_ps(hi, _mm512_set1_ps(-0.5f))),
                              _mm512_fnmadd_ps(lo, _mm512_set1_ps(0.5f), _mm512_set1_ps(1.f)));
    V q = _mm512_mul_ps(e, r);
    q = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(t, _mm512_set1_ps(8.f), _CMP_LT_OQ), q);
    const Mask pos = _mm512_cmp_ps_mask(y, _mm512_setzero_ps(), _CMP_GE_OQ);
    const V phi = _mm512_mask_sub_ps(q, pos, _mm512_set1_ps(1.f), q);
    return _mm512_mul_ps(y, phi);
  }

  static V epilogue(V y, Epilogue ep) {
    switch (ep) {
      case Epilogue::kNone:
        return y;
      case Epilogue::kRelu:
        return _mm512_max_ps(y, _mm512_setzero_ps());
      case Epilogue::kGelu:
        return gelu(y);
    }
    return y;
  }
};
static_assert(KernelTraits<Avx512>);

}  // namespace

// Entry points: one per row of kernel_list.inc.

// 4 rows (the layout's row block) x NV vectors of 16 columns; _4x8: one 256-bit vector of 8 columns (the
// Avx2 traits compiled here), for N <= 8, which a 16-column panel pads to 16 (docs/kernels.md, session 31).
void avx512_gemm_4x8(const PackedMatrix::Impl& p, const SpmmArgs& a) { gemm_run<Avx2, 4, 1>(p, a); }
void avx512_gemm_4x16(const PackedMatrix::Impl& p, const SpmmArgs& a) { gemm_run<Avx512, 4, 1>(p, a); }
void avx512_gemm_4x32(const PackedMatrix::Impl& p, const SpmmArgs& a) { gemm_run<Avx512, 4, 2>(p, a); }
void avx512_gemm_4x64(const PackedMatrix::Impl& p, const SpmmArgs& a) { gemm_run<Avx512, 4, 4>(p, a); }
// The 4x64 tile over the memory-bound layout.
void avx512_lanes_gemm_4x64(const PackedMatrix::Impl& p, const SpmmArgs& a) {
  gemm_run<Avx512, 4, 4, true>(p, a);
}

// Rows in lanes over the compute-bound layout (spmm_gemm_lanes.h, gemm_lanes_run); _pf with the prefetch.
void avx512_gemm_lanes(const PackedMatrix::Impl& p, const SpmmArgs& a) {
  gemm_lanes_dispatch<Avx512, variant("avx512_gemm_lanes")->n_max, false>(p, a);
}
void avx512_gemm_lanes_pf(const PackedMatrix::Impl& p, const SpmmArgs& a) {
  gemm_lanes_dispatch<Avx512, variant("avx512_gemm_lanes_pf")->n_max, true>(p, a);
}

// Rows in lanes (spmm_lanes.h) with the 32 registers, up to 16 columns in one pass.
#define S24_LANES_ROW(name, tile) SPARSE24_LANES_ENTRY(Avx512, name, 16, 32, tile)
// The 256-bit tile.
S24_LANES_ROW(avx512_lanes_f32, kRows)
S24_LANES_ROW(avx512_lanes_i8, kRows)
// The two slots of a group per 512-bit vector (lanes_slots_tile). _pf: the broadcast form with the software
// prefetch, Intel's picks. Without _pf: the same without it, AMD's pick for N = 1 (Zen 4's hardware
// prefetcher alone streams the weights faster). _lanes16t: the table form, AMD's from N = 2, without and with
// (_pf) the prefetch (docs/kernels.md, sessions 27 and 28).
S24_LANES_ROW(avx512_lanes16_f32_pf, kSlotsPf)
S24_LANES_ROW(avx512_lanes16_bf16_pf, kSlotsPf)
S24_LANES_ROW(avx512_lanes16_i8_pf, kSlotsPf)
S24_LANES_ROW(avx512_lanes16_f32, kSlots)
S24_LANES_ROW(avx512_lanes16_bf16, kSlots)
S24_LANES_ROW(avx512_lanes16_i8, kSlots)
S24_LANES_ROW(avx512_lanes16t_f32, kTable)
S24_LANES_ROW(avx512_lanes16t_bf16, kTable)
S24_LANES_ROW(avx512_lanes16t_i8, kTable)
S24_LANES_ROW(avx512_lanes16t_f32_pf, kTablePf)
S24_LANES_ROW(avx512_lanes16t_bf16_pf, kTablePf)
S24_LANES_ROW(avx512_lanes16t_i8_pf, kTablePf)
// bf16 activations (lanes_bf16x_tile, its own AVX512_BF16 target; only on CPUs that have it).
S24_LANES_ROW(avx512_xbf16_bf16, kBf16x)
S24_LANES_ROW(avx512_xbf16_i8, kBf16x)
S24_LANES_ROW(avx512_xbf16_bf16_pf, kBf16xPf)
S24_LANES_ROW(avx512_xbf16_i8_pf, kBf16xPf)
// int8 activations (lanes_i8x_tile, its own VNNI and VBMI target; only on CPUs that have them).
S24_LANES_ROW(avx512_xi8_i8, kI8x)
S24_LANES_ROW(avx512_xi8_i8_pf, kI8xPf)
#undef S24_LANES_ROW

}  // namespace sparse24::kernels
