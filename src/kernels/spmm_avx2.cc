// AVX2 kernels (compiled with -mavx2 -mfma -mf16c; reached only when cpu_has_avx2() said yes). Tables
// are constexpr: nothing in this file runs before dispatch has checked the CPU.
#include <immintrin.h>

#include <array>

#include "kernel_list.h"
#include "spmm_driver.h"

namespace sparse24::kernels {

namespace {

struct ExpandTables {
  // For an 8-bit keep mask: lane i takes packed value perm[i] (its rank among the kept lanes), or lane 4
  // (a zero lane of the zero-extended 4-value vector) when not kept; keep[i] is all ones when kept.
  int32_t perm[256][8];
  int32_t rank[256][8];
  int32_t keep[256][8];
};

constexpr ExpandTables make_tables() {
  ExpandTables t{};
  for (int m = 0; m < 256; ++m) {
    int r = 0;
    for (int i = 0; i < 8; ++i) {
      const bool kept = (m >> i) & 1;
      t.perm[m][i] = kept ? r : 4;
      t.rank[m][i] = kept ? r : 0;
      t.keep[m][i] = kept ? -1 : 0;
      if (kept) ++r;
    }
  }
  return t;
}

alignas(64) constexpr ExpandTables kTables = make_tables();

struct Avx2 {
  using V = __m256;
  using Mask = __m256i;
  static constexpr int W = 8;
  static constexpr int kGemvMaxN = 8;
  static constexpr int kPrefetchChunks = 48;
  template <int N>
  static constexpr int gemv_rows_per_pass = N <= 3 ? 4 : (N <= 6 ? 2 : 1);

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
  static V interleave_lo(V a, V b) {
    return _mm256_permute2f128_ps(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b), 0x20);
  }
  static V interleave_hi(V a, V b) {
    return _mm256_permute2f128_ps(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b), 0x31);
  }
  static V load8(const float* p) { return _mm256_load_ps(p); }
  static V load8(const uint16_t* p) {
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(p))), 16));
  }
  static V pair(V w, int q) {
    return _mm256_permutevar8x32_ps(w, _mm256_set1_epi64x((int64_t{2 * q + 1} << 32) | (2 * q)));
  }
  static V loadu(const float* p) { return _mm256_loadu_ps(p); }
  static void storeu(float* p, V v) { _mm256_storeu_ps(p, v); }
  static Mask mask_first(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static V loadu_m(const float* p, Mask m) { return _mm256_maskload_ps(p, m); }
  static void storeu_m(float* p, V v, Mask m) { _mm256_maskstore_ps(p, m, v); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static float reduce(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static void prefetch(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }
  static __m256i row(const int32_t (&t)[8]) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(t)); }

  // A 16-wide chunk as two 8-wide halves (slots 0-3 and 4-7); in a half, the kept lanes' slots are their
  // ranks among the kept lanes (2 per group, and only the row's last group can have fewer).
  template <int N>
  static void chunk_fma(const float* vals, uint16_t mask, const float* xt, int64_t ldxt, V* acc) {
    const int lo = mask & 0xFF, hi = mask >> 8;
    const V wl = _mm256_permutevar8x32_ps(_mm256_zextps128_ps256(_mm_load_ps(vals)), row(kTables.perm[lo]));
    const V wh =
        _mm256_permutevar8x32_ps(_mm256_zextps128_ps256(_mm_load_ps(vals + 4)), row(kTables.perm[hi]));
#pragma GCC unroll 16
    for (int j = 0; j < N; ++j) {
      acc[j] = _mm256_fmadd_ps(wl, _mm256_load_ps(xt + j * ldxt), acc[j]);
      acc[j] = _mm256_fmadd_ps(wh, _mm256_load_ps(xt + j * ldxt + 8), acc[j]);
    }
  }
  template <int N>
  static void chunk_fma_bf16(const uint16_t* vals, uint16_t mask, const float* xt, int64_t ldxt, V* acc) {
    const int lo = mask & 0xFF, hi = mask >> 8;
    const V v8 = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(vals))), 16));
    const V wl = _mm256_and_ps(_mm256_permutevar8x32_ps(v8, row(kTables.rank[lo])),
                               _mm256_castsi256_ps(row(kTables.keep[lo])));
    const __m256i ih = _mm256_add_epi32(row(kTables.rank[hi]), _mm256_set1_epi32(4));
    const V wh = _mm256_and_ps(_mm256_permutevar8x32_ps(v8, ih), _mm256_castsi256_ps(row(kTables.keep[hi])));
#pragma GCC unroll 16
    for (int j = 0; j < N; ++j) {
      acc[j] = _mm256_fmadd_ps(wl, _mm256_load_ps(xt + j * ldxt), acc[j]);
      acc[j] = _mm256_fmadd_ps(wh, _mm256_load_ps(xt + j * ldxt + 8), acc[j]);
    }
  }

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

// The N at which fp32 weights in the memory-bound layout run the pair kernel (spmm_driver.h). Measured
// 2048x2048 (GFLOP/s, memory-bound kernel -> pair): N=4 66 -> 108, N=5 68 -> 64 (10 of 16 lanes used),
// N=6 68 -> 76, N=8 66 -> 102.
constexpr bool use_pair(int64_t n) { return n == 4 || n >= 6; }

}  // namespace

void gemm_avx2(const PackedMatrix::Impl& p, const SpmmArgs& a) {
  // 4 rows x NV vectors of 8 columns. NV = 3 (24 columns; 12 of the 16 registers hold sums) runs about 6%
  // faster per computed column than NV = 2, but pads N up to a multiple of 24: take the one that computes
  // fewer columns for the same time (N <= 16 always takes 16). AVX2 forced on this machine against AVX2
  // oneDNN and OpenBLAS (docs/performance.md): N = 128 and 64 +5-7% with 16 columns, N = 512 +3-5% with 24.
  const int64_t cols24 = (a.n + 23) / 24 * 24, cols16 = (a.n + 15) / 16 * 16;
  if (100 * cols24 > 106 * cols16) return gemm_run<Avx2, 4, 2>(p, a);
  return gemm_run<Avx2, 4, 3>(p, a);
}

void gemv_avx2(const PackedMatrix::Impl& p, const SpmmArgs& a) {
  if (use_pair(a.n)) return a.n <= 4 ? pair_run<Avx2, 1>(p, a) : pair_run<Avx2, 2>(p, a);
  if (p.gemv.bf16)
    gemv_dispatch<Avx2, true>(p, a);
  else
    gemv_dispatch<Avx2, false>(p, a);
}

}  // namespace sparse24::kernels
