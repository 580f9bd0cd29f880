// AVX2 kernels (compiled with -mavx2 -mfma -mf16c; reached only when cpu_has_avx2() said yes). Tables
// are constexpr: nothing in this file runs before dispatch has checked the CPU.
#include <immintrin.h>

#include <array>
#include <cstring>

#include "kernel_list.h"
#include "spmm_driver.h"
#include "spmm_lanes_i8.h"

namespace sparse24::kernels {

namespace {

struct ExpandTables {
  // For an 8-bit keep mask: lane i takes packed value rank[i] (its rank among the kept lanes); keep[i] is
  // all ones when kept.
  int32_t rank[256][8];
  int32_t keep[256][8];
};

constexpr ExpandTables make_tables() {
  ExpandTables t{};
  for (int m = 0; m < 256; ++m) {
    int r = 0;
    for (int i = 0; i < 8; ++i) {
      const bool kept = (m >> i) & 1;
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

  // A 16-wide chunk of bf16 weights as two 8-wide halves (slots 0-3 and 4-7); in a half, the kept lanes'
  // slots are their ranks among the kept lanes (2 per group, and only the row's last group can have fewer).
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
static_assert(KernelTraits<Avx2>);

// Rows in lanes (LanesLayout, fp32 weights, N <= 8). Lane r of every vector is row r of an 8-row block, so
// no lane holds a dropped position and no lane sum is needed. Per group q of a super chunk and column n:
// the group's 4 activations broadcast to both 128-bit halves, one in-lane `vpermilps` with the code vector
// picks each row's position (the low 2 bits of its lane; the code vector is shifted 4 bits per group),
// one FMA per slot with the 8 rows' weights. Per 8 kept weights: one load, one permute, one FMA and
// half a shift, against about 12 instructions per row-chunk of 8 kept weights in the spreading kernel.
// N = 1 (2) reads 4 (2) streams at a time, each with its own FMA chains: the rate at which one Zen 3 core
// streams from DRAM grows with the number of streams in flight (docs/kernels.md, session 6).
template <int N>
constexpr int lanes_blocks = N == 1 ? 4 : (N == 2 ? 2 : 1);
template <int N>
constexpr int lanes_chains = N <= 4 && N != 1 ? 2 : 1;

// NS row blocks over ns super chunks of one K block. e: the first block's first entry, the next block's
// estride floats on; xt: Xt at the K block's first position, rows ldxt apart. out[i][n]: block i's
// 8 rows' sums for column n.
// KS (K split): stream i is K block i of the same rows instead (estride floats on in the layout, its
// activations xstride floats on in Xt).
template <int N, int NS, bool KS = false>
void lanes_tile(const float* __restrict e, size_t estride, int64_t ns, const float* __restrict xt,
                int64_t ldxt, int64_t xstride, __m256 (&out)[NS][N]) {
  constexpr int A = lanes_chains<N>;
  constexpr int EF = LanesLayout::kEntryFloats;
  __m256 acc[NS][N][A];
#pragma GCC unroll 8
  for (int i = 0; i < NS; ++i)
#pragma GCC unroll 8
    for (int n = 0; n < N; ++n)
#pragma GCC unroll 2
      for (int a = 0; a < A; ++a) acc[i][n][a] = _mm256_setzero_ps();
  for (int64_t s = 0; s < ns; ++s) {
    const float* xs = xt + s * LanesLayout::kSuper;
    const float* es = e + static_cast<size_t>(s * EF);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m256i c[NS];
#pragma GCC unroll 4
      for (int i = 0; i < NS; ++i)
        c[i] = _mm256_load_si256(reinterpret_cast<const __m256i*>(es + i * estride + 256) + h);
        // Blocks innermost: the group's activations are loaded once for all NS blocks (with the blocks
        // outermost, g++ hoisted all 16 groups' broadcasts and spilled the accumulators).
#pragma GCC unroll 8
      for (int q = 0; q < 8; ++q) {
#pragma GCC unroll 4
        for (int i = 0; i < NS; ++i) {
          const float* ei = es + i * estride;
          const __m256 w0 = _mm256_load_ps(ei + (16 * h + 2 * q) * 8);
          const __m256 w1 = _mm256_load_ps(ei + (16 * h + 2 * q + 1) * 8);
          const __m256i c1 = _mm256_srli_epi32(c[i], 2);
#pragma GCC unroll 8
          for (int n = 0; n < N; ++n) {
            const __m256 xq = _mm256_broadcast_ps(
                reinterpret_cast<const __m128*>(xs + (KS ? i * xstride : 0) + n * ldxt + 32 * h + 4 * q));
            acc[i][n][0] = _mm256_fmadd_ps(w0, _mm256_permutevar_ps(xq, c[i]), acc[i][n][0]);
            acc[i][n][A - 1] = _mm256_fmadd_ps(w1, _mm256_permutevar_ps(xq, c1), acc[i][n][A - 1]);
          }
          c[i] = _mm256_srli_epi32(c[i], 4);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < NS; ++i)
#pragma GCC unroll 8
    for (int n = 0; n < N; ++n)
      out[i][n] = A == 1 ? acc[i][n][0] : _mm256_add_ps(acc[i][n][0], acc[i][n][A - 1]);
}

template <int N, bool KSPLIT = false>
void lanes_run(const PackedMatrix::Impl& p, const SpmmArgs& a) {
  constexpr int NS = lanes_blocks<N>;
  constexpr int R = LanesLayout::kRows;
  const LanesLayout& L = p.lanes;
  const int64_t m = p.m, k = p.k;
  const int64_t ldxt = L.supers * LanesLayout::kSuper + 16;  // + 16: rows of Xt not 4 KiB apart
  float* xt = transposed_x<Avx2, N>(a, k, ldxt);
  const int nt = static_cast<int>(std::min<int64_t>(a.threads, L.m_blocks));
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    const int tid = omp_get_thread_num();
    const int nth = omp_get_num_threads();
    const int64_t b0 = L.m_blocks * tid / nth, b1 = L.m_blocks * (tid + 1) / nth;
    for (int64_t kb = 0; kb < L.k_blocks;) {
      const int64_t ns = L.supers_in(kb);
      const size_t estride = static_cast<size_t>(ns * LanesLayout::kEntryFloats);
      const float* xb = xt + kb * L.kb;
      // K split: NS whole K blocks at once (the last one must be as long as the others).
      const bool ks = KSPLIT && kb + NS <= L.k_blocks && L.supers_in(kb + NS - 1) == ns;
      const int64_t kend = ks ? kb + NS : kb + 1;
      const bool first = kb == 0, last = kend == L.k_blocks;
      auto emit = [&](int64_t mb, const __m256(&v)[N]) {
        alignas(32) float t[N][R];
        for (int j = 0; j < N; ++j) _mm256_store_ps(t[j], v[j]);
        for (int r = 0; r < R && mb * R + r < m; ++r) {
          const int64_t row = mb * R + r;
          float* y = a.y + row * a.ldy;
          for (int j = 0; j < N; ++j) {
            float sum = first ? t[j][r] : y[j] + t[j][r];
            if (last && a.bias) sum += a.bias[row];
            y[j] = sum;
          }
          if (last && a.ep != Epilogue::kNone) epilogue_row<Avx2>(y, N, a.ep);
        }
      };
      int64_t mb = b0;
      if (ks) {
        // K block kb + i of row block mb starts L.entry(kb + i, mb) = L.entry(kb, mb) + i * m_blocks *
        // estride.
        for (; mb < b1; ++mb) {
          __m256 out[NS][N];
          lanes_tile<N, NS, true>(L.data.data() + L.entry(kb, mb), static_cast<size_t>(L.m_blocks) * estride,
                                  ns, xb, ldxt, L.kb, out);
          for (int i = 1; i < NS; ++i)
            for (int j = 0; j < N; ++j) out[0][j] = _mm256_add_ps(out[0][j], out[i][j]);
          emit(mb, out[0]);
        }
      } else {
        for (; mb + NS <= b1; mb += NS) {
          __m256 out[NS][N];
          lanes_tile<N, NS>(L.data.data() + L.entry(kb, mb), estride, ns, xb, ldxt, 0, out);
          for (int i = 0; i < NS; ++i) emit(mb + i, out[i]);
        }
      }
      for (; mb < b1; ++mb) {
        __m256 out[1][N];
        lanes_tile<N, 1>(L.data.data() + L.entry(kb, mb), estride, ns, xb, ldxt, 0, out);
        emit(mb, out[0]);
      }
      kb = kend;
    }
  }
}

template <bool KSPLIT, int N = 1>
void lanes_dispatch(const PackedMatrix::Impl& p, const SpmmArgs& a) {
  if constexpr (N <= variant("avx2_lanes_f32")->n_max) {
    if (a.n == N) return lanes_run<N, KSPLIT>(p, a);
    return lanes_dispatch<KSPLIT, N + 1>(p, a);
  } else {
    throw Error("internal: avx2_lanes_f32 got more columns than its n_max");
  }
}

}  // namespace

// Entry points: one per row of kernel_list.inc.

// 4 rows x NV vectors of 8 columns. NV = 3 (24 columns; 12 of the 16 registers hold sums) runs about 6%
// faster per computed column than NV = 2 (the rows' rates), but pads N up to a multiple of 24. AVX2 forced
// on an AVX-512 machine against AVX2 oneDNN and OpenBLAS (docs/performance.md): N = 128 and 64 +5-7% with
// 16 columns, N = 512 +3-5% with 24.
void avx2_gemm_4x16(const PackedMatrix::Impl& p, const SpmmArgs& a) { gemm_run<Avx2, 4, 2>(p, a); }
void avx2_gemm_4x24(const PackedMatrix::Impl& p, const SpmmArgs& a) { gemm_run<Avx2, 4, 3>(p, a); }

// Rows in lanes; N = 1 and 2 read 4 or 2 K blocks of the same rows at once (streams ~M x 2.2 KB apart).
// Against 4 or 2 row blocks at once (avx2_lanes_rows_f32, streams 17 KB apart), 4096x4096 and
// 11008x4096 cold, N = 1: +8-49% (median of 5 interleaved rounds, 5 runs), N = 2: +15-60%.
void avx2_lanes_f32(const PackedMatrix::Impl& p, const SpmmArgs& a) { lanes_dispatch<true>(p, a); }
void avx2_lanes_rows_f32(const PackedMatrix::Impl& p, const SpmmArgs& a) { lanes_dispatch<false>(p, a); }

void avx2_gemv_bf16(const PackedMatrix::Impl& p, const SpmmArgs& a) {
  gemv_dispatch<Avx2, true, variant("avx2_gemv_bf16")->n_max>(p, a);
}

// The pair kernel (spmm_driver.h) on bf16 weights. Measured with fp32 weights in GemvLayout, 2048x2048
// (GFLOP/s, spreading kernel -> pair): N=4 66 -> 108, N=5 68 -> 64 (10 of 16 lanes used), N=6 68 -> 76,
// N=8 66 -> 102.
void avx2_pair4_bf16(const PackedMatrix::Impl& p, const SpmmArgs& a) { pair_run<Avx2, 1>(p, a); }
void avx2_pair8_bf16(const PackedMatrix::Impl& p, const SpmmArgs& a) { pair_run<Avx2, 2>(p, a); }

// int8 weights, rows in lanes (spmm_lanes_i8.h): up to 8 columns per pass in the 16 registers.
void avx2_lanes_i8(const PackedMatrix::Impl& p, const SpmmArgs& a) {
  lanes_i8_dispatch<Avx2, variant("avx2_lanes_i8")->n_max, 8, 16>(p, a);
}
// The same with passes of up to 4 columns (each with per-super-chunk partial sums, no spills), for the
// comparison in docs/kernels.md.
void avx2_lanes_i8_c4(const PackedMatrix::Impl& p, const SpmmArgs& a) {
  lanes_i8_dispatch<Avx2, variant("avx2_lanes_i8_c4")->n_max, 4, 16>(p, a);
}

}  // namespace sparse24::kernels
