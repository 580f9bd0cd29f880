// Rows in lanes over the compute-bound layout (GemmLayout), AVX-512 only: the rows avx512_gemm_lanes*
// (kernel_list.inc), included by spmm_avx512.cc. Templates over the file's traits T (the rule of
// spmm_driver.h). Its X is the table form's (lanes_table_x, spmm_lanes.h).
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "spmm_driver.h"
#include "spmm_lanes.h"

namespace sparse24::kernels {

// Rows in lanes over the compute-bound layout (GemmLayout, AVX-512; the rows avx512_gemm_lanes*), N <= 16: a
// pack made for a batch of many tokens (an encoder's) holds only that layout, and on Intel's core its 4-row
// tiles ran a short input at half the memory-bound kernels' rate, the 8- and the 16-column tile alike at
// N = 8 (66 GFLOP/s): bound by the work per kept weight (a spread, a 2-bit position made an address, an
// FMA with an indexed load), not by the vector width (docs/kernels.md, session 36). Here a 512-bit vector
// holds 16 consecutive values of a (row block, K block) tile, two groups of [slot][row]: lane L holds row
// L % 4, slot L / 4 % 2, group L / 8. The two groups' 16-bit position words, read as one 32-bit word and
// broadcast, shifted right by 2L in lane L, masked to 2 bits and offset by the group's place among 4 (one
// `vpternlogd`), index a `vpermps` into the column's table of 16 activations (4 groups; lanes_table_x):
// per column two permutes and two FMAs per 4 groups (32 kept weights), the index made once for all the
// columns. A row block's tiles are taken in turn (kc / 2 * 4 * chunk floats apart in the layout's
// [chunk][K block][row block] order), its sums kept in registers and reduced to the 4 rows (the sum of the
// 128-bit quarters) at the end. PF: a software prefetch of the tile kPfTiles on, two lines per step.
template <class T, int N, bool PF>
void gemm_lanes_tile(const float* __restrict v, const uint16_t* __restrict codes, int groups,
                     const float* __restrict xb, const float* pf, __m512 (&acc)[N][N <= 8 ? 2 : 1]) {
  constexpr int A = N <= 8 ? 2 : 1;  // a second chain per column where the registers allow (small N)
  const __m512i shifts = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i three = _mm512_set1_epi32(3);
  const __m512i off0 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4);
  const __m512i off1 = _mm512_setr_epi32(8, 8, 8, 8, 8, 8, 8, 8, 12, 12, 12, 12, 12, 12, 12, 12);
  // The index of a vector whose lanes 0..7 hold group word w's slots and 8..15 word w + 1's (c: both
  // words): ((c >> 2L) & 3) | off (ternary-logic function A & B | C).
  auto index = [&](uint32_t c, __m512i off) {
    return _mm512_ternarylogic_epi32(_mm512_srlv_epi32(_mm512_set1_epi32(static_cast<int>(c)), shifts), three,
                                     off, 0xEA);
  };
  auto word2 = [](const uint16_t* c) {  // words c[0] and c[1] as one 32-bit word (a broadcast load)
    uint32_t w;
    std::memcpy(&w, c, sizeof w);
    return w;
  };
  int j = 0;
  for (; j + 4 <= groups; j += 4) {
    if constexpr (PF) {
      _mm_prefetch(reinterpret_cast<const char*>(pf), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(pf + 16), _MM_HINT_T0);
      pf += 32;
    }
    const __m512 w0 = _mm512_loadu_ps(v), w1 = _mm512_loadu_ps(v + 16);
    const __m512i i0 = index(word2(codes + j), off0), i1 = index(word2(codes + j + 2), off1);
#pragma GCC unroll 16
    for (int n = 0; n < N; ++n) {
      const __m512 t = _mm512_load_ps(xb + n * 16);
      acc[n][0] = _mm512_fmadd_ps(w0, _mm512_permutexvar_ps(i0, t), acc[n][0]);
      acc[n][A - 1] = _mm512_fmadd_ps(w1, _mm512_permutexvar_ps(i1, t), acc[n][A - 1]);
    }
    v += 32;
    xb += N * 16;
  }
  if (j < groups) {  // 1 to 3 groups: the lanes past them belong to the next tile and are left out
    const int rest = groups - j;
    const __mmask16 m0 = rest >= 2 ? 0xFFFF : 0x00FF, m1 = rest == 3 ? 0x00FF : 0;
    const __m512 w0 = _mm512_maskz_loadu_ps(m0, v), w1 = _mm512_maskz_loadu_ps(m1, v + 16);
    const __m512i i0 = index(rest >= 2 ? word2(codes + j) : codes[j], off0),
                  i1 = index(rest == 3 ? codes[j + 2] : 0, off1);
#pragma GCC unroll 16
    for (int n = 0; n < N; ++n) {
      const __m512 t = _mm512_load_ps(xb + n * 16);
      acc[n][0] = _mm512_mask3_fmadd_ps(w0, _mm512_permutexvar_ps(i0, t), acc[n][0], m0);
      acc[n][A - 1] = _mm512_mask3_fmadd_ps(w1, _mm512_permutexvar_ps(i1, t), acc[n][A - 1], m1);
    }
  }
}

// PF: the tile this many on is prefetched as a tile runs (1 KB each at kc = 128). Intel Xeon model 207,
// 4096x4096x8 cold, 1 tile ahead about 61 GFLOP/s, 2 to 4 tiles 76-87, 8 69-79 (a noisy VM: session 36).
inline constexpr int64_t kPfTiles = 3;

template <class T, int N, bool PF>
void gemm_lanes_run(const PackedMatrix::Impl& p, const SpmmArgs& a) {
  constexpr int MR = 4, A = N <= 8 ? 2 : 1;
  const GemmLayout& L = p.gemm;
  if (L.mr != MR || L.kc % 16 != 0)
    throw Error("internal: gemm_lanes_run needs 4-row blocks and kc % 16 == 0");
  const int64_t m = p.m, k = p.k;
  const float* xt = lanes_table_x<T, N>(a, k, (k + LanesLayout::kSuper - 1) / LanesLayout::kSuper);
  const int nt = static_cast<int>(std::min<int64_t>(a.threads, L.m_blocks));
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    const int tid = omp_get_thread_num();
    const int nth = omp_get_num_threads();
    const auto [b0, b1] = thread_row_blocks(L, tid, nth);
    const bool narrow = L.type != ValueType::kF32;
    float* wide = wide_buffer<T>(L);
    for (int64_t mb = b0; mb < b1; ++mb) {
      __m512 acc[N][A];
#pragma GCC unroll 16
      for (int n = 0; n < N; ++n)
#pragma GCC unroll 2
        for (int c = 0; c < A; ++c) acc[n][c] = _mm512_setzero_ps();
      // Tile kb of row block mb without block_offset's divisions: all but the last K block hold kc / 2 slots
      // per row, so a row block's tiles lie a fixed stride apart.
      struct Row {
        size_t first, stride, last;
      };
      auto row_of = [&](int64_t b) {
        const int64_t c0 = b / L.chunk * L.chunk;
        return Row{L.block_offset(b, 0),
                   static_cast<size_t>(L.kc / 2 * std::min<int64_t>(L.chunk, L.m_blocks - c0) * MR),
                   L.block_offset(b, L.k_blocks - 1)};
      };
      auto tile = [&](const Row& r, int64_t kb) {
        return kb + 1 < L.k_blocks ? r.first + kb * r.stride : r.last;
      };
      const Row here = row_of(mb), after = mb + 1 < b1 ? row_of(mb + 1) : here;
      for (int64_t kb = 0; kb < L.k_blocks; ++kb) {
        const size_t off = tile(here, kb);
        // PF: the tile kPfTiles on (in this row block or the next), as this one goes (fp32 values; narrow
        // ones are prefetched by their widening).
        const int64_t ahead = kb + kPfTiles;
        const size_t next = ahead < L.k_blocks ? tile(here, ahead)
                                               : tile(after, std::min(ahead - L.k_blocks, L.k_blocks - 1));
        const float* v = gemm_block_values<T>(L, off, mb, kb, L.slots_in(kb), wide);
        gemm_lanes_tile<T, N, PF>(v, L.codes.data() + off / (2 * MR), L.slots_in(kb) / 2,
                                  xt + kb * (L.kc / 16) * N * 16, narrow ? wide : L.vals.data() + next, acc);
        if constexpr (PF)
          _mm_prefetch(reinterpret_cast<const char*>(L.codes.data() + next / (2 * MR)), _MM_HINT_T0);
      }
      // Row r: the sum of lanes r, r + 4, r + 8, r + 12.
      alignas(16) float t[N][MR];
#pragma GCC unroll 16
      for (int n = 0; n < N; ++n) {
        const __m512 s = A == 2 ? _mm512_add_ps(acc[n][0], acc[n][A - 1]) : acc[n][0];
        const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(s), _mm512_extractf32x8_ps(s, 1));
        _mm_store_ps(t[n], _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
      }
      store_rows<T, N, MR>(a, t, mb * MR, static_cast<int>(std::min<int64_t>(MR, m - mb * MR)), true, true);
    }
    gelu_rows_after<T>(a, b0 * MR, std::min(m, b1 * MR));
  }
}

template <class T, int NMax, bool PF, int N = 1>
void gemm_lanes_dispatch(const PackedMatrix::Impl& p, const SpmmArgs& a) {
  if constexpr (N <= NMax) {
    if (a.n == N) return gemm_lanes_run<T, N, PF>(p, a);
    return gemm_lanes_dispatch<T, NMax, PF, N + 1>(p, a);
  } else {
    throw Error("internal: a rows-in-lanes kernel got more columns than its n_max");
  }
}

}  // namespace sparse24::kernels
