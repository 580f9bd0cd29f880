// Rows in lanes with int8 weights (LanesI8Layout, packed.h), N <= 16: the AVX2 kernel, compiled in both
// spmm_avx2.cc (16 vector registers) and spmm_avx512.cc (32: N <= 16 in one pass; the same 256-bit code,
// EVEX-encoded there). Templates over the file's own traits class T only, so each ISA's instantiation stays
// in its file (the rule of spmm_driver.h).
//
// Per super chunk (64 positions) and 8-row block: 32 slot vectors of 8 int8 (`vpmovsxbd` + `vcvtdq2ps`
// each), the group's 4 activations broadcast to both 128-bit halves, one in-lane `vpermilps` with the code
// vector per slot and column (as the fp32 rows-in-lanes kernel, spmm_avx2.cc), one FMA. The super chunk's
// scale vector (the 8 rows' scales) is applied once per super chunk to the partial sums when the registers
// hold a partial sum per chain (small N: one FMA per 32), else to the converted weights (one multiply per
// slot vector, shared by the N columns). fp32 activations and accumulation throughout.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "spmm_driver.h"

namespace sparse24::kernels {

// The 8 rows' int8 values of one slot (8 bytes at p) as fp32.
template <class T>
inline __m256 lanes_i8_slot(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// NS streams (K split: stream i is K block i of the same row block, estride bytes on in the layout and
// xstride floats on in Xt) over ns super chunks; NC columns of Xt (rows ldxt apart). out[i][n]: stream i's
// 8 rows' sums for column n. VREGS: the vector registers the ISA has (16 or 32).
template <class T, int NC, int NS, bool KS, int VREGS>
void lanes_i8_tile(const uint8_t* __restrict e, size_t estride, int64_t ns, const float* __restrict xt,
                   int64_t ldxt, int64_t xstride, __m256 (&out)[NS][NC]) {
  using L = LanesI8Layout;
  // Partial sums per super chunk when they fit beside the sums (2 NS NC + 8 temporaries).
  constexpr bool kPart = 2 * NS * NC + 8 <= VREGS;
  // Two FMA chains per column where registers allow (short chains at small N).
  constexpr int A = !kPart && 2 * NS * NC + 8 <= VREGS ? 2 : 1;
  __m256 acc[NS][NC][A];
  __m256 part[NS][NC];
#pragma GCC unroll 4
  for (int i = 0; i < NS; ++i)
#pragma GCC unroll 16
    for (int n = 0; n < NC; ++n)
#pragma GCC unroll 2
      for (int c = 0; c < A; ++c) acc[i][n][c] = _mm256_setzero_ps();
  for (int64_t s = 0; s < ns; ++s) {
    const float* xs = xt + s * L::kSuper;
    const uint8_t* es = e + static_cast<size_t>(s) * L::kEntryBytes;
    __m256 sc[NS];
#pragma GCC unroll 4
    for (int i = 0; i < NS; ++i) {
      sc[i] = _mm256_load_ps(reinterpret_cast<const float*>(es + i * estride + L::kScaleOffset));
      if constexpr (kPart)
#pragma GCC unroll 16
        for (int n = 0; n < NC; ++n) part[i][n] = _mm256_setzero_ps();
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m256i c[NS];
#pragma GCC unroll 4
      for (int i = 0; i < NS; ++i)
        c[i] = _mm256_load_si256(reinterpret_cast<const __m256i*>(es + i * estride + L::kCodeOffset) + h);
#pragma GCC unroll 8
      for (int q = 0; q < 8; ++q) {
#pragma GCC unroll 4
        for (int i = 0; i < NS; ++i) {
          const uint8_t* ei = es + i * estride;
          __m256 w0 = lanes_i8_slot<T>(ei + (16 * h + 2 * q) * 8);
          __m256 w1 = lanes_i8_slot<T>(ei + (16 * h + 2 * q + 1) * 8);
          if constexpr (!kPart) {
            w0 = _mm256_mul_ps(w0, sc[i]);
            w1 = _mm256_mul_ps(w1, sc[i]);
          }
          const __m256i c1 = _mm256_srli_epi32(c[i], 2);
#pragma GCC unroll 16
          for (int n = 0; n < NC; ++n) {
            const __m256 xq = _mm256_broadcast_ps(
                reinterpret_cast<const __m128*>(xs + (KS ? i * xstride : 0) + n * ldxt + 32 * h + 4 * q));
            if constexpr (kPart) {
              part[i][n] = _mm256_fmadd_ps(w0, _mm256_permutevar_ps(xq, c[i]), part[i][n]);
              part[i][n] = _mm256_fmadd_ps(w1, _mm256_permutevar_ps(xq, c1), part[i][n]);
            } else {
              acc[i][n][0] = _mm256_fmadd_ps(w0, _mm256_permutevar_ps(xq, c[i]), acc[i][n][0]);
              acc[i][n][A - 1] = _mm256_fmadd_ps(w1, _mm256_permutevar_ps(xq, c1), acc[i][n][A - 1]);
            }
          }
          c[i] = _mm256_srli_epi32(c[i], 4);
        }
      }
    }
    if constexpr (kPart)
#pragma GCC unroll 4
      for (int i = 0; i < NS; ++i)
#pragma GCC unroll 16
        for (int n = 0; n < NC; ++n) acc[i][n][0] = _mm256_fmadd_ps(part[i][n], sc[i], acc[i][n][0]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < NS; ++i)
#pragma GCC unroll 16
    for (int n = 0; n < NC; ++n)
      out[i][n] = A == 1 ? acc[i][n][0] : _mm256_add_ps(acc[i][n][0], acc[i][n][A - 1]);
}

// Columns C0.. of N in passes of up to CMAX over one row block's K block (its weights from L1 after the
// first pass): v[C0..N).
template <class T, int N, int CMAX, int VREGS, int C0>
void lanes_i8_passes(const uint8_t* e0, int64_t ns, const float* xb, int64_t ldxt, __m256 (&v)[N]) {
  constexpr int NC = N - C0 < CMAX ? N - C0 : CMAX;
  __m256 out[1][NC];
  lanes_i8_tile<T, NC, 1, false, VREGS>(e0, 0, ns, xb + C0 * ldxt, ldxt, 0, out);
  for (int j = 0; j < NC; ++j) v[C0 + j] = out[0][j];
  if constexpr (C0 + NC < N) lanes_i8_passes<T, N, CMAX, VREGS, C0 + NC>(e0, ns, xb, ldxt, v);
}

// N columns; CMAX: the most columns one pass keeps in registers (8 with 16 registers, 16 with 32). N = 1
// (2) reads 4 (2) K blocks of the same rows at once, as the fp32 kernel (more streams in flight: docs/
// kernels.md, session 6); N > CMAX makes further passes of up to CMAX columns over each K block's weights
// of a row block (5.5 KB, from L1).
template <class T, int N, int CMAX, int VREGS>
void lanes_i8_run(const PackedMatrix::Impl& p, const SpmmArgs& a) {
  using L = LanesI8Layout;
  constexpr int NS = N == 1 ? 4 : (N == 2 ? 2 : 1);
  constexpr int NC1 = N < CMAX ? N : CMAX;
  constexpr int R = L::kRows;
  const LanesI8Layout& lay = p.lanes_i8;
  const int64_t m = p.m, k = p.k;
  const int64_t ldxt = lay.supers * L::kSuper + 16;  // + 16: rows of Xt not 4 KiB apart
  float* xt = transposed_x<T, N>(a, k, ldxt);
  const int nt = static_cast<int>(std::min<int64_t>(a.threads, lay.m_blocks));
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    const int tid = omp_get_thread_num();
    const int nth = omp_get_num_threads();
    const int64_t b0 = lay.m_blocks * tid / nth, b1 = lay.m_blocks * (tid + 1) / nth;
    for (int64_t kb = 0; kb < lay.k_blocks;) {
      const int64_t ns = lay.supers_in(kb);
      const size_t estride = static_cast<size_t>(ns * L::kEntryBytes);
      const float* xb = xt + kb * lay.kb;
      // K split: NS whole K blocks at once (the last one as long as the others).
      const bool ks = NS > 1 && kb + NS <= lay.k_blocks && lay.supers_in(kb + NS - 1) == ns;
      const int64_t kend = ks ? kb + NS : kb + 1;
      const bool first = kb == 0, last = kend == lay.k_blocks;
      for (int64_t mb = b0; mb < b1; ++mb) {
        const uint8_t* e0 = lay.data.data() + lay.entry(kb, mb);
        __m256 v[N];
        if (ks) {
          // K block kb + i of row block mb starts lay.entry(kb, mb) + i * m_blocks * estride.
          __m256 out[NS][NC1];
          lanes_i8_tile<T, NC1, NS, true, VREGS>(e0, static_cast<size_t>(lay.m_blocks) * estride, ns, xb,
                                                 ldxt, lay.kb, out);
          for (int j = 0; j < NC1; ++j) {
            v[j] = out[0][j];
            for (int i = 1; i < NS; ++i) v[j] = _mm256_add_ps(v[j], out[i][j]);
          }
        } else {
          __m256 out[1][NC1];
          lanes_i8_tile<T, NC1, 1, false, VREGS>(e0, 0, ns, xb, ldxt, 0, out);
          for (int j = 0; j < NC1; ++j) v[j] = out[0][j];
        }
        if constexpr (N > NC1) lanes_i8_passes<T, N, CMAX, VREGS, NC1>(e0, ns, xb, ldxt, v);
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
          if (last && a.ep != Epilogue::kNone) epilogue_row<T>(y, N, a.ep);
        }
      }
      kb = kend;
    }
  }
}

template <class T, int NMax, int CMAX, int VREGS, int N = 1>
void lanes_i8_dispatch(const PackedMatrix::Impl& p, const SpmmArgs& a) {
  if constexpr (N <= NMax) {
    if (a.n == N) return lanes_i8_run<T, N, CMAX, VREGS>(p, a);
    return lanes_i8_dispatch<T, NMax, CMAX, VREGS, N + 1>(p, a);
  } else {
    throw Error("internal: the int8 rows-in-lanes kernel got more columns than its n_max");
  }
}

}  // namespace sparse24::kernels
