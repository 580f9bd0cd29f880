// Rows in lanes (LanesLayout, packed.h), N <= 16, for fp32, bf16 and int8 weights: one kernel written once,
// compiled in spmm_avx2.cc (16 vector registers) and spmm_avx512.cc (32; the same 256-bit code,
// EVEX-encoded there). Templates over the file's own traits class T only, so each ISA's instantiation
// stays in its file (the rule of spmm_driver.h).
//
// Lane r of every vector is row r of an 8-row block, so no lane holds a dropped position and no lane sum is
// needed. Per group q of a super chunk (64 positions) and column n: the group's 4 activations broadcast to
// both 128-bit halves, one in-lane `vpermilps` with the code vector picks each row's position (the low 2
// bits of its lane; the code vector is shifted 4 bits per group), and one FMA per slot with the 8 rows'
// weights. Per 8 kept weights: one load (widened from bf16 by a zero extension and a shift, from int8 by a
// sign extension and a conversion), one permute, one FMA and half a shift (AVX-512 has a 512-bit tile
// with both slots of a group in one vector, lanes_slots_tile: one permute per 16). int8: the super chunk's
// scale vector (the 8 rows' scales) multiplies the partial sums once per super chunk when the registers hold
// a partial sum per stream and column (small N), else each converted slot vector once (shared by the N
// columns). fp32 activations and accumulation throughout. int8 from N = 8 on AVX2 also has a mixed tile
// (lanes_mix_tile: half of each super chunk in columns in lanes, no permutes), the variant avx2_lanes_i8_mix.
//
// Streams: small N reads several row blocks at once (4 at N = 1) that lie in separate regions of the
// thread's rows, each a long sequential stream with its own FMA chains (docs/kernels.md: one Zen 3 core
// streams from DRAM at the rate of the streams in flight, and the prefetcher needs each to be long).
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "sparse24/dtype.h"
#include "spmm_driver.h"

namespace sparse24::kernels {

// The tile a rows-in-lanes kernel runs: kRows (lanes_tile, 256-bit), kRowsPf (the same with a software
// prefetch, kLanesPrefetch bytes ahead), kMix (lanes_mix_tile, AVX2 int8), kSlots (lanes_slots_tile,
// AVX-512: the two slots of a group in one 512-bit vector), kSlotsPf (the same with the prefetch), kTable and
// kTablePf (lanes_slots_tile reading each column's activations as a 16-entry table: AMD's form).
// kBf16x and kBf16xPf (lanes_bf16x_tile): bf16 activations (AVX512_BF16), without and with the prefetch.
// kI8x and kI8xPf (lanes_i8x_tile): int8 activations (AVX512_VNNI, AVX512_VBMI), without and with it.
enum class LanesTile {
  kRows,
  kRowsPf,
  kMix,
  kSlots,
  kSlotsPf,
  kTable,
  kTablePf,
  kBf16x,
  kBf16xPf,
  kI8x,
  kI8xPf
};
constexpr bool is_table(LanesTile t) { return t == LanesTile::kTable || t == LanesTile::kTablePf; }
constexpr bool is_bf16x(LanesTile t) { return t == LanesTile::kBf16x || t == LanesTile::kBf16xPf; }
constexpr bool is_i8x(LanesTile t) { return t == LanesTile::kI8x || t == LanesTile::kI8xPf; }
constexpr bool is_slots(LanesTile t) {
  return t == LanesTile::kSlots || t == LanesTile::kSlotsPf || is_table(t);
}
constexpr bool is_prefetch(LanesTile t) {
  return t == LanesTile::kRowsPf || t == LanesTile::kSlotsPf || t == LanesTile::kTablePf ||
         t == LanesTile::kBf16xPf || t == LanesTile::kI8xPf;
}

// The software prefetch distance of the tiles that prefetch: every line of each stream, this many bytes
// ahead (the entries are read in address order). Intel Xeon (session 14), AVX-512, 4096x4096 cold, GFLOP/s
// without -> with: int8 N = 8 132 -> 167-173, N = 4 106 -> 142-145, N = 1 47 -> 53-54; fp32 N = 1 14.5 ->
// 15.7-17, N = 8 86-93 -> 91-118. 1 KB and 4 KB ahead within a few per cent of 2 KB (AVX2 the same, session
// 15); every second line only (the pair line left to the hardware) lost the fp32 gain.
inline constexpr int kLanesPrefetch = 2048;

// Prefetches every line of the entry at es + i * estride (i < NS) kLanesPrefetch bytes ahead.
template <int NS, int kEntryBytes>
inline void lanes_prefetch(const uint8_t* es, size_t estride) {
#pragma GCC unroll 4
  for (int i = 0; i < NS; ++i)
#pragma GCC unroll 32
    for (int l = 0; l < kEntryBytes; l += 64)
      _mm_prefetch(reinterpret_cast<const char*>(es + i * estride + kLanesPrefetch + l), _MM_HINT_T0);
}

// The weight type of a LanesLayout's slots, at compile time: entry offsets and the slot load.
template <ValueType WT>
struct LanesSlots {
  static constexpr int kCodeOffset = LanesLayout::code_offset(WT);
  static constexpr int kScaleOffset = LanesLayout::scale_offset(WT);
  static constexpr int kEntryBytes = LanesLayout::entry_bytes(WT);
  static constexpr bool kScaled = WT == ValueType::kI8;
  // The 8 rows' values of slot s of the entry at e, as fp32.
  static __m256 load(const uint8_t* e, int s) {
    const uint8_t* p = e + LanesLayout::slot_at(WT, s);
    if constexpr (WT == ValueType::kF32) {
      return _mm256_load_ps(reinterpret_cast<const float*>(p));
    } else if constexpr (WT == ValueType::kBf16) {
      return _mm256_castsi256_ps(
          _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(p))), 16));
    } else {
      return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
    }
  }
  // AVX-512 only (lanes_slots_tile): slots 2q and 2q + 1 of the entry at e as one vector, [slot 2q's 8
  // rows, slot 2q + 1's 8 rows] (the layout stores them side by side).
  static __m512 load_pair(const uint8_t* e, int q) {
    const uint8_t* p = e + LanesLayout::slot_at(WT, 2 * q);
    if constexpr (WT == ValueType::kF32) {
      return _mm512_loadu_ps(reinterpret_cast<const float*>(p));
    } else if constexpr (WT == ValueType::kBf16) {
      return _mm512_castsi512_ps(_mm512_slli_epi32(
          _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
    } else {
      return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
    }
  }
};

// NS streams (stream i: the entry estride bytes after stream 0's, the same K positions) over ns super
// chunks; NC columns of Xt (rows ldxt apart). out[i][n]: stream i's 8 rows' sums for column n. VREGS: the
// vector registers the ISA has (16 or 32). PF: prefetch (lanes_prefetch).
template <class T, ValueType WT, int NC, int NS, int VREGS, bool PF>
void lanes_tile(const uint8_t* __restrict e, size_t estride, int64_t ns, const float* __restrict xt,
                int64_t ldxt, __m256 (&out)[NS][NC]) {
  using S = LanesSlots<WT>;
  // int8: partial sums per super chunk when they fit beside the sums (2 NS NC + 8 temporaries).
  constexpr bool kPart = S::kScaled && 2 * NS * NC + 8 <= VREGS;
  // fp32: two FMA chains per column where they fit (short chains at small N: N = 2..4 +2-7%). bf16 with two
  // chains ran at half the speed at N = 2 (its widening needs the registers).
  constexpr int A = WT == ValueType::kF32 && NC >= 2 && 2 * NS * NC <= 8 ? 2 : 1;
  __m256 acc[NS][NC][A];
  __m256 part[NS][NC];
#pragma GCC unroll 4
  for (int i = 0; i < NS; ++i)
#pragma GCC unroll 16
    for (int n = 0; n < NC; ++n)
#pragma GCC unroll 2
      for (int c = 0; c < A; ++c) acc[i][n][c] = _mm256_setzero_ps();
  for (int64_t s = 0; s < ns; ++s) {
    const float* xs = xt + s * LanesLayout::kSuper;
    const uint8_t* es = e + static_cast<size_t>(s) * S::kEntryBytes;
    if constexpr (PF) lanes_prefetch<NS, S::kEntryBytes>(es, estride);
    __m256 sc[NS];
    if constexpr (S::kScaled)
#pragma GCC unroll 4
      for (int i = 0; i < NS; ++i) {
        sc[i] = _mm256_load_ps(reinterpret_cast<const float*>(es + i * estride + S::kScaleOffset));
        if constexpr (kPart)
#pragma GCC unroll 16
          for (int n = 0; n < NC; ++n) part[i][n] = _mm256_setzero_ps();
      }
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m256i c[NS];
#pragma GCC unroll 4
      for (int i = 0; i < NS; ++i)
        c[i] = _mm256_load_si256(reinterpret_cast<const __m256i*>(es + i * estride + S::kCodeOffset) + h);
        // Streams innermost: the group's activations are loaded once for all NS streams (with the streams
        // outermost, g++ hoisted all 16 groups' broadcasts and spilled the accumulators).
#pragma GCC unroll 8
      for (int q = 0; q < 8; ++q) {
#pragma GCC unroll 4
        for (int i = 0; i < NS; ++i) {
          const uint8_t* ei = es + i * estride;
          __m256 w0 = S::load(ei, 16 * h + 2 * q);
          __m256 w1 = S::load(ei, 16 * h + 2 * q + 1);
          if constexpr (S::kScaled && !kPart) {
            w0 = _mm256_mul_ps(w0, sc[i]);
            w1 = _mm256_mul_ps(w1, sc[i]);
          }
          const __m256i c1 = _mm256_srli_epi32(c[i], 2);
#pragma GCC unroll 16
          for (int n = 0; n < NC; ++n) {
            const __m256 xq =
                _mm256_broadcast_ps(reinterpret_cast<const __m128*>(xs + n * ldxt + 32 * h + 4 * q));
            __m256& a0 = kPart ? part[i][n] : acc[i][n][0];
            __m256& a1 = kPart ? part[i][n] : acc[i][n][A - 1];
            a0 = _mm256_fmadd_ps(w0, _mm256_permutevar_ps(xq, c[i]), a0);
            a1 = _mm256_fmadd_ps(w1, _mm256_permutevar_ps(xq, c1), a1);
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

// int8, one stream, 8 columns: the mixed form. Rows in lanes spends two FP-pipe operations per FMA (the
// permute and the FMA), which caps it at one FMA per cycle on Zen 3 (the two share two pipes), while
// columns in lanes (a broadcast weight times an activation row of 8 columns) spends one FP operation but
// two loads per FMA, so it is capped by the two load ports at one FMA per cycle too. Groups 0..7 of a super
// chunk run rows in lanes, groups 8..15 columns in lanes, and the two are interleaved instruction by
// instruction so that both kinds of work are in flight at once: per group of the first kind, its 8
// columns' FMAs (16, with 16 permutes) beside row q's 16 FMAs of the second kind. The step is inline asm
// because g++ neither kept that order nor the 16 registers it needs (it hoisted the addresses and spilled).
// xm: this pass's 8 columns of X (zero-padded), per super chunk [group][column][4 positions] (2 KB, rows in
// lanes broadcasts one column's group) then [position][8 columns] (2 KB, a row of columns in lanes).

// One unit of each kind: column n of rows in lanes (group q's broadcast, two permutes, two FMAs), and the
// FMA of row q's kept weight `slot` (of slots 16..31) with the activation row of its position, whose byte
// offset (32 per position) is the slot's 2 code bits rotated to bits 5..6 (`rorx`) and masked.
// clang-format off
#define S24_MIX_P(n)                                                      \
  "vbroadcastf128 " #n "*16(%[xg]), %[xq]\n\t"                            \
  "vpermilps %[c0], %[xq], %[tm]\n\t"                                     \
  "vfmadd231ps %[tm], %[w0], %[p" #n "]\n\t"                              \
  "vpermilps %[c1], %[xq], %[tm]\n\t"                                     \
  "vfmadd231ps %[tm], %[w1], %[p" #n "]\n\t"
#define S24_MIX_C(slot, acc)                                              \
  "rorx $(((" #slot ") * 2 + 27) & 31), %k[code], %k[off]\n\t"            \
  "and $0x60, %k[off]\n\t"                                                \
  "vbroadcastss (" #slot ")*32(%[wb]), %[tm]\n\t"                         \
  "vfmadd231ps ((" #slot ")/2+8)*128(%[xc],%[off]), %[tm], %[" acc "]\n\t"
// Slots 2g, 2g + 1 of the 16, into one FMA chain each.
#define S24_MIX_C2(g) S24_MIX_C(2 * g, "a0") S24_MIX_C(2 * g + 1, "a1")
// clang-format on

template <class T>
void lanes_mix_tile(const uint8_t* __restrict e, int64_t ns, const float* __restrict xm, __m256 (&out)[8]) {
  using S = LanesSlots<ValueType::kI8>;
  constexpr int R = LanesLayout::kRows;
  alignas(32) float acc[8][R] = {};   // rows in lanes: column n's 8 rows
  alignas(32) float cacc[R][8] = {};  // columns in lanes: row r's 8 columns
  alignas(32) float wbuf[16][R];      // slots 16..31 as fp32 (unscaled)
  for (int64_t s = 0; s < ns; ++s) {
    const float* xg = xm + s * 2 * LanesLayout::kSuper * 8;
    const float* xc = xg + LanesLayout::kSuper * 8;
    const uint8_t* es = e + static_cast<size_t>(s) * S::kEntryBytes;
    const float* scale = reinterpret_cast<const float*>(es + S::kScaleOffset);
    const uint32_t* code1 = reinterpret_cast<const uint32_t*>(es + S::kCodeOffset + 32);
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) _mm256_store_ps(wbuf[j], S::load(es, 16 + j));
    __m256 p0 = _mm256_setzero_ps(), p1 = p0, p2 = p0, p3 = p0, p4 = p0, p5 = p0, p6 = p0, p7 = p0;
    __m256i c = _mm256_load_si256(reinterpret_cast<const __m256i*>(es + S::kCodeOffset));
#pragma GCC unroll 8
    for (int q = 0; q < 8; ++q) {
      const __m256 w0 = S::load(es, 2 * q), w1 = S::load(es, 2 * q + 1);
      const __m256i c1 = _mm256_srli_epi32(c, 2);
      __m256 a0, a1, xq, tm;
      uint64_t off;
      asm("vxorps %[a0], %[a0], %[a0]\n\t"
          "vxorps %[a1], %[a1], %[a1]\n\t"  //
          S24_MIX_P(0) S24_MIX_C2(0) S24_MIX_P(1) S24_MIX_C2(1) S24_MIX_P(2) S24_MIX_C2(2) S24_MIX_P(3)
              S24_MIX_C2(3) S24_MIX_P(4) S24_MIX_C2(4) S24_MIX_P(5) S24_MIX_C2(5) S24_MIX_P(6) S24_MIX_C2(6)
                  S24_MIX_P(7) S24_MIX_C2(7)
          : [p0] "+x"(p0), [p1] "+x"(p1), [p2] "+x"(p2), [p3] "+x"(p3), [p4] "+x"(p4), [p5] "+x"(p5),
            [p6] "+x"(p6), [p7] "+x"(p7), [a0] "=&x"(a0), [a1] "=&x"(a1), [xq] "=&x"(xq), [tm] "=&x"(tm),
            [off] "=&r"(off)
          : [c0] "x"(c), [c1] "x"(c1), [w0] "x"(w0), [w1] "x"(w1), [xg] "r"(xg + 32 * q),
            [wb] "r"(&wbuf[0][q]), [xc] "r"(xc), [code] "r"(code1[q])
          : "memory");
      c = _mm256_srli_epi32(c, 4);
      _mm256_store_ps(cacc[q], _mm256_fmadd_ps(_mm256_add_ps(a0, a1), _mm256_broadcast_ss(scale + q),
                                               _mm256_load_ps(cacc[q])));
    }
    const __m256 sc = _mm256_load_ps(scale);
    const __m256 p[8] = {p0, p1, p2, p3, p4, p5, p6, p7};
#pragma GCC unroll 8
    for (int n = 0; n < 8; ++n) _mm256_store_ps(acc[n], _mm256_fmadd_ps(p[n], sc, _mm256_load_ps(acc[n])));
  }
  for (int n = 0; n < 8; ++n) {
    alignas(32) float t[R];
    for (int r = 0; r < R; ++r) t[r] = acc[n][r] + cacc[r][n];
    out[n] = _mm256_load_ps(t);
  }
}
#undef S24_MIX_C2
#undef S24_MIX_C
#undef S24_MIX_P

// The mixed tile's X in the thread's scratch: per pass of 8 columns (xc_pass floats apart) and super chunk,
// [group][column][4 positions] then [position][8 columns], zero past k and N.
template <class T, int N>
float* lanes_mix_x(const SpmmArgs& a, int64_t k, size_t xc_pass) {
  constexpr int passes = (N + 7) / 8;
  float* xc = scratch<T, 2>(passes * xc_pass);
  std::memset(xc, 0, sizeof(float) * passes * xc_pass);
  const int64_t sk = a.x_row_stride(), sj = a.x_col_stride();
  for (int64_t kk = 0; kk < k; ++kk) {
    const int64_t su = kk / LanesLayout::kSuper, pos = kk % LanesLayout::kSuper;
    for (int j = 0; j < N; ++j) {
      float* xs = xc + j / 8 * xc_pass + su * 2 * LanesLayout::kSuper * 8;
      const float v = a.x[kk * sk + j * sj];
      xs[(pos / 4 * 8 + j % 8) * 4 + pos % 4] = v;
      xs[LanesLayout::kSuper * 8 + pos * 8 + j % 8] = v;
    }
  }
  return xc;
}

// The steps the two 512-bit tiles (lanes_slots_tile, lanes_bf16x_tile) share. Their sums acc[i][n] hold
// stream i's 8 rows twice (lanes L and L + 8: slot 0's and slot 1's products), part[i][n] a super chunk's
// partial sums of int8 weights. The scales of the super chunk's entries at es + i * estride, broadcast to
// both halves:
template <class S, int NS>
inline void slots_scales(const uint8_t* es, size_t estride, __m512 (&sc)[NS]) {
#pragma GCC unroll 4
  for (int i = 0; i < NS; ++i)
    sc[i] = _mm512_broadcast_f32x8(
        _mm256_load_ps(reinterpret_cast<const float*>(es + i * estride + S::kScaleOffset)));
}
// The code vectors of half h (groups 8h..8h + 7) of the entries at es + i * estride, as [codes, codes >> 2]:
// slot 2q's code in bits 0..1 of the lane's 4 bits of group q in the low half, slot 2q + 1's in the high.
template <class S, int NS>
inline void slots_codes(const uint8_t* es, size_t estride, int h, __m512i (&c)[NS]) {
  const __m512i half_shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi32(2), 1);
#pragma GCC unroll 4
  for (int i = 0; i < NS; ++i)
    c[i] = _mm512_srlv_epi32(_mm512_broadcast_i32x8(_mm256_load_si256(
                                 reinterpret_cast<const __m256i*>(es + i * estride + S::kCodeOffset) + h)),
                             half_shift);
}
template <int NS, int NC>
inline void slots_zero(__m512 (&acc)[NS][NC], __m512 (&part)[NS][NC]) {
#pragma GCC unroll 4
  for (int i = 0; i < NS; ++i)
#pragma GCC unroll 16
    for (int n = 0; n < NC; ++n) acc[i][n] = part[i][n] = _mm512_setzero_ps();
}
// acc += part * scales, part = 0 (the end of a super chunk):
template <int NS, int NC>
inline void slots_fold(__m512 (&part)[NS][NC], const __m512 (&sc)[NS], __m512 (&acc)[NS][NC]) {
#pragma GCC unroll 4
  for (int i = 0; i < NS; ++i)
#pragma GCC unroll 16
    for (int n = 0; n < NC; ++n) {
      acc[i][n] = _mm512_fmadd_ps(part[i][n], sc[i], acc[i][n]);
      part[i][n] = _mm512_setzero_ps();
    }
}
// The 8 rows' sums: the two halves added.
template <int NS, int NC>
inline void slots_out(const __m512 (&acc)[NS][NC], __m256 (&out)[NS][NC]) {
#pragma GCC unroll 4
  for (int i = 0; i < NS; ++i)
#pragma GCC unroll 16
    for (int n = 0; n < NC; ++n)
      out[i][n] = _mm256_add_ps(_mm512_castps512_ps256(acc[i][n]), _mm512_extractf32x8_ps(acc[i][n], 1));
}

// AVX-512 only: the two slots of group q in the two 256-bit halves of one vector (the 8 rows' slot 2q, then
// slot 2q + 1, which the layout stores next to each other), so one load (and for int8 one widening and one
// conversion) gives both; the group's 4 activations of column n broadcast to the four 128-bit lanes, one
// in-lane `vpermilps` with the code vector [codes, codes >> 2] picks each row's position of each slot, and
// one FMA does 16 multiply-adds. Per group and column: one permute and one FMA (half of lanes_tile's, which
// bound it at one FMA per cycle where shuffles have one port: Intel's port 5); the per-group work shared
// by the columns is one load, one code shift (and int8 one widening and one conversion). Session 13's tile
// of two columns per vector had the same per-column work but twice the shared work and a padded column for
// odd N; this one replaced it (docs/kernels.md, session 14). The halves are slot 0's and slot 1's partial
// sums, added at the end. X comes group by group (lanes_group_x: every column's 4 activations of a group
// side by side), so each broadcast is one pointer plus a constant (from the transposed X, g++ kept a pointer
// per column and group and spilled them).
//
// The table form (TABLE, AMD's rows): Zen 4 runs `vbroadcastf32x4` from memory as a load and a shuffle on
// the two shuffle pipes that the permute needs as well (and one of them is an FMA pipe), so per column and
// group the broadcast form spends three shuffle-pipe operations; there the activations of 4 groups of a
// column lie side by side (lanes_table_x: [16 positions][column][16]) and a full `vpermps` reads them from
// memory as its table, with the index (code & 3) + 4 (group mod 4), made once per group for all columns
// (`vpternlogd`). In L1 on Zen 4 (a standalone loop of int8 groups, 8 columns): 2.4-2.6 -> 1.7-1.8 cycles per
// column and group (docs/kernels.md, session 28). On Intel the broadcast is a load alone, so its rows keep
// the broadcast form.
//
// NS streams over ns super chunks; NC columns of xg, whose groups hold NX columns (lanes_group_x or
// lanes_table_x). out[i][n] as lanes_tile's. PF: the software prefetch (lanes_prefetch).
template <class T, ValueType WT, int NC, int NS, int NX, bool PF, bool TABLE>
void lanes_slots_tile(const uint8_t* __restrict e, size_t estride, int64_t ns, const float* __restrict xg,
                      __m256 (&out)[NS][NC]) {
  using S = LanesSlots<WT>;
  // int8: partial sums per super chunk (times the scales once) when they fit beside the sums.
  constexpr bool kPart = S::kScaled && 2 * NS * NC + 6 <= 32;
  __m512 acc[NS][NC], part[NS][NC];
  slots_zero(acc, part);
  for (int64_t s = 0; s < ns; ++s) {
    const float* xs = xg + s * LanesLayout::kSuper * NX;
    const uint8_t* es = e + static_cast<size_t>(s) * S::kEntryBytes;
    // PF: on Intel's core the hardware prefetcher fell behind this shorter instruction stream (session 14;
    // in L2, fp32 N = 1 runs 3-9% below the 256-bit tile with it); on Zen 4 it kept ahead alone at small N
    // (session 27, docs/kernels.md).
    if constexpr (PF) lanes_prefetch<NS, S::kEntryBytes>(es, estride);
    __m512 sc[NS];
    if constexpr (S::kScaled) slots_scales<S>(es, estride, sc);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m512i c[NS];
      slots_codes<S>(es, estride, h, c);
#pragma GCC unroll 8
      for (int q = 0; q < 8; ++q) {
#pragma GCC unroll 4
        for (int i = 0; i < NS; ++i) {
          __m512 w = S::load_pair(es + i * estride, 8 * h + q);
          if constexpr (S::kScaled && !kPart) w = _mm512_mul_ps(w, sc[i]);
          if constexpr (TABLE) {
            // (c & 3) | 4 (q mod 4): ternary-logic function A & B | C.
            const __m512i idx =
                _mm512_ternarylogic_epi32(c[i], _mm512_set1_epi32(3), _mm512_set1_epi32(4 * (q % 4)), 0xEA);
            const float* xt = xs + (2 * h + q / 4) * NX * 16;
#pragma GCC unroll 16
            for (int n = 0; n < NC; ++n) {
              __m512& a = kPart ? part[i][n] : acc[i][n];
              a = _mm512_fmadd_ps(w, _mm512_permutexvar_ps(idx, _mm512_load_ps(xt + n * 16)), a);
            }
          } else {
#pragma GCC unroll 16
            for (int n = 0; n < NC; ++n) {
              const __m512 xq = _mm512_broadcast_f32x4(_mm_load_ps(xs + ((8 * h + q) * NX + n) * 4));
              __m512& a = kPart ? part[i][n] : acc[i][n];
              a = _mm512_fmadd_ps(w, _mm512_permutevar_ps(xq, c[i]), a);
            }
          }
          c[i] = _mm512_srli_epi32(c[i], 4);
        }
      }
    }
    if constexpr (kPart) slots_fold(part, sc, acc);
  }
  slots_out(acc, out);
}

// The slots tile's X in the thread's scratch: per group of 4 positions, the N columns' 4 activations in
// turn ([group][column][4]); zero past k, from the group that holds position k on. (The scratch keeps
// earlier calls' X, and a padding slot, weight 0, times a stale inf or NaN is NaN. pack_lanes points padding
// slots at their group's first position, so only the groups wholly past k are read; the partial group is
// zeroed as well so that this does not have to hold.)
template <class T, int N>
float* lanes_group_x(const SpmmArgs& a, int64_t k, int64_t supers) {
  const size_t size = static_cast<size_t>(supers * LanesLayout::kSuper * N);
  const size_t tail = static_cast<size_t>(k / 4 * 4 * N);
  float* xg = scratch<T, 2>(size);
  std::memset(xg + tail, 0, sizeof(float) * (size - tail));
  const int64_t sk = a.x_row_stride(), sj = a.x_col_stride();
  for (int64_t kk = 0; kk < k; ++kk)
    for (int j = 0; j < N; ++j) xg[(kk / 4 * N + j) * 4 + kk % 4] = a.x[kk * sk + j * sj];
  return xg;
}

// The table form's X (lanes_slots_tile, TABLE) in the thread's scratch: per 16 positions (4 groups), the N
// columns' 16 activations in turn ([16 positions][column][16]); zero past k from the group that holds
// position k on (lanes_group_x's rule).
template <class T, int N>
float* lanes_table_x(const SpmmArgs& a, int64_t k, int64_t supers) {
  const size_t size = static_cast<size_t>(supers * LanesLayout::kSuper * N);
  const size_t tail = static_cast<size_t>(k / 16 * 16 * N);  // the 16 positions that hold position k on
  float* xt = scratch<T, 2>(size);
  std::memset(xt + tail, 0, sizeof(float) * (size - tail));
  const int64_t sk = a.x_row_stride(), sj = a.x_col_stride();
  for (int64_t kk = 0; kk < k; ++kk)
    for (int j = 0; j < N; ++j) xt[(kk / 16 * N + j) * 16 + kk % 16] = a.x[kk * sk + j * sj];
  return xt;
}

// bf16 activations (TILE kBf16x, kBf16xPf: AVX512_BF16, int8 and bf16 weights,
// PackOptions::bf16_activations): X rounded to bf16 (to nearest even), one `vdpbf16ps` per column does 32
// multiply-adds (16 fp32 lanes, each the sum of a pair of bf16 products) where the fp32 table form does 16
// with a `vpermps` and an FMA; the activations come from a `vpermw` of the column's 64-byte table of 32
// positions (8 groups, one half of the super chunk), the index made once per step for all columns. A step
// covers groups q and q + 4 of a half (q = 0..3): lane L < 8 holds row L's slot 0 products of both groups,
// lane L + 8 row L's slot 1 products (so a lane sums one row, and the halves add at the end as in
// lanes_slots_tile); word 2L of the weight vector is group q's value, word 2L + 1 group q + 4's. The index
// words: each lane's codes (slot 0's in lanes 0..7, slot 1's, shifted 2 bits, in 8..15) have groups 0..3 in
// the low word and 4..7 in the high word, 4 bits apart, so one 16-bit shift by 4q and `vpternlogd` ((c & 3) |
// 4q, | 4q + 16 in the high word) give the positions. The weights are the existing layout's, widened in
// registers: bf16 values by one word interleave (`vpermt2w`) of the two groups' slot pairs; int8 values by a
// sign extension and a conversion to fp32 per group, whose top 16 bits are the exact bf16 value (an int8 has
// at most 8 significant bits), merged with a shift and a `vpternlogd`. Products are exact in fp32 (8 x 8
// significant bits), sums fp32; `vdpbf16ps` treats bf16 subnormals as zero. int8: partial sums per super
// chunk, times the scales once (always: the bf16 weights cannot carry the scales exactly; lanes_passes keeps
// NC small enough). A function of its own with the AVX512_BF16 target (the caller is compiled without it),
// entered only by the rows that need AVX512_BF16 (kernel_list.inc). xb: this K block's table ([super
// chunk][half][column][32 words], NX columns).
template <class T, ValueType WT, int NC, int NS, int NX, bool PF>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16"), noinline)) void lanes_bf16x_tile(
    const uint8_t* __restrict e, size_t estride, int64_t ns, const uint16_t* __restrict xb,
    __m256 (&out)[NS][NC]) {
  static_assert(WT == ValueType::kBf16 || WT == ValueType::kI8, "bf16 activations: bf16 or int8 weights");
  using S = LanesSlots<WT>;
  constexpr bool kPart = S::kScaled;
  static_assert(!kPart || 2 * NS * NC + 8 <= 32, "int8: the partial sums must fit (lanes_passes)");
  __m512 acc[NS][NC], part[NS][NC];
  slots_zero(acc, part);
  // bf16 values: word 2L from the first group's 16 words, 2L + 1 from the second's (at word 32 on).
  const __m512i interleave = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
                                              39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i hi_words = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (int64_t s = 0; s < ns; ++s) {
    const uint8_t* es = e + static_cast<size_t>(s) * S::kEntryBytes;
    if constexpr (PF) lanes_prefetch<NS, S::kEntryBytes>(es, estride);
    __m512 sc[NS];
    if constexpr (S::kScaled) slots_scales<S>(es, estride, sc);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const uint16_t* xh = xb + (2 * s + h) * NX * 32;
      __m512i c[NS];
      slots_codes<S>(es, estride, h, c);
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) {
        const __m512i base = _mm512_set1_epi32(4 * q | (4 * q + 16) << 16);
#pragma GCC unroll 4
        for (int i = 0; i < NS; ++i) {
          const uint8_t* ei = es + i * estride;
          const uint8_t* pa = ei + LanesLayout::slot_at(WT, 2 * (8 * h + q));
          const uint8_t* pb = ei + LanesLayout::slot_at(WT, 2 * (8 * h + q + 4));
          __m512i w;
          if constexpr (WT == ValueType::kBf16) {
            w = _mm512_permutex2var_epi16(
                _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(pa))), interleave,
                _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb))));
          } else {
            const __m512i fa = _mm512_castps_si512(_mm512_cvtepi32_ps(
                _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pa)))));
            const __m512i fb = _mm512_castps_si512(_mm512_cvtepi32_ps(
                _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pb)))));
            // (fb & 0xFFFF0000) | (fa >> 16): ternary-logic function A & B | C.
            w = _mm512_ternarylogic_epi32(fb, hi_words, _mm512_srli_epi32(fa, 16), 0xEA);
          }
          const __m512i idx =
              _mm512_ternarylogic_epi32(_mm512_srli_epi16(c[i], 4 * q), _mm512_set1_epi16(3), base, 0xEA);
#pragma GCC unroll 16
          for (int n = 0; n < NC; ++n) {
            __m512& a = kPart ? part[i][n] : acc[i][n];
            const __m512i xq = _mm512_permutexvar_epi16(idx, _mm512_load_si512(xh + n * 32));
            a = _mm512_dpbf16_ps(a, reinterpret_cast<__m512bh>(w), reinterpret_cast<__m512bh>(xq));
          }
        }
      }
    }
    if constexpr (kPart) slots_fold(part, sc, acc);
  }
  slots_out(acc, out);
}

// The bf16 tile's X in the thread's scratch: per half super chunk (32 positions), the N columns' 32
// activations rounded to bf16 in turn ([32 positions][column][32]); zero past k from the 32 positions that
// hold position k on (lanes_group_x's rule).
template <class T, int N>
const uint16_t* lanes_bf16_x(const SpmmArgs& a, int64_t k, int64_t supers) {
  const size_t size = static_cast<size_t>(supers * LanesLayout::kSuper * N);  // words
  const size_t tail = static_cast<size_t>(k / 32 * 32 * N);
  uint16_t* xb = reinterpret_cast<uint16_t*>(scratch<T, 2>(size / 2 + 1));
  std::memset(xb + tail, 0, sizeof(uint16_t) * (size - tail));
  const int64_t sk = a.x_row_stride(), sj = a.x_col_stride();
  for (int64_t kk = 0; kk < k; ++kk)
    for (int j = 0; j < N; ++j) xb[(kk / 32 * N + j) * 32 + kk % 32] = float_to_bf16(a.x[kk * sk + j * sj]);
  return xb;
}

// int8 activations (TILE kI8x, kI8xPf: AVX512_VNNI and AVX512_VBMI, int8 weights,
// PackOptions::int8_activations): each column's activations quantised per super chunk (64 positions,
// quantize_act_block) and stored as unsigned bytes q + 128, a 64-byte table per column and super chunk; one
// `vpermb` picks each kept weight's activation from the table and one `vpdpbusd` does 64 multiply-adds
// (16 int32 lanes, each the sum of 4 products), where the fp32 broadcast form does 16 with a permute and an
// FMA. On the Xeon of session 35 (family 6 model 207) a `vpermb` and a `vpdpbusd` issue together at 0.93
// pairs per cycle, as the fp32 form's `vpermilps` and FMA (0.90): four times the multiply-adds per cycle. A
// step is one 64-byte load of 8 slots' values ([slot][8 rows]); a byte permute (shared by the columns) puts
// row r's 4 values of slots 4d..4d + 3 in lane 2r + d, and the activation index of byte t of that lane is 4
// (group) + the slot's 2-bit code: the row's code word holds the 4 codes of those slots in one byte, so
// `vpmultishiftqb` (qword r = row r's code word) moves code t to byte t's low 2 bits and `vpternlogd` adds
// the group's position. The sums of a super chunk are exact in int32 (at most 32 products of 127 x 255);
// the bias of the unsigned bytes (128 times the sum of the row's values, one `vpdpbusd` per step for all
// columns) is subtracted, and the sum converted and multiplied by the row's scale times the column's
// (fp32) into the column's fp32 sum. xq: this K block's tables ([super chunk][column][128 bytes]: 64 bytes
// of activations, then the scale as a float; NX columns). A function of its own with the VNNI and VBMI
// target, entered only by the rows that need them (kernel_list.inc).
template <class T, int NC, int NS, int NX, bool PF>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi"), noinline)) void
lanes_i8x_tile(const uint8_t* __restrict e, size_t estride, int64_t ns, const uint8_t* __restrict xq,
               __m256 (&out)[NS][NC]) {
  using S = LanesSlots<ValueType::kI8>;
  static_assert(2 * NS * NC + 2 * NS + 8 <= 32, "the int32 and fp32 sums must fit (lanes_passes)");
  // Byte 4 (2r + d) + t of a step's weights from byte 8 (4d + t) + r of its load; the multishift's bit
  // offsets of byte (d, t) of qword r: code byte 2 (j % 2) + d, code t; the positions' base 16j + 8d + 4(t /
  // 2).
  struct Consts {
    alignas(64) uint8_t wperm[64], shift[2][64], base[4][64];
  };
  static constexpr Consts kC = [] {
    Consts c{};
    for (int r = 0; r < 8; ++r)
      for (int d = 0; d < 2; ++d)
        for (int t = 0; t < 4; ++t) {
          const int b = 4 * (2 * r + d) + t;
          c.wperm[b] = static_cast<uint8_t>(8 * (4 * d + t) + r);
          for (int jj = 0; jj < 2; ++jj) c.shift[jj][b] = static_cast<uint8_t>(8 * (2 * jj + d) + 2 * t);
          for (int j = 0; j < 4; ++j) c.base[j][b] = static_cast<uint8_t>(16 * j + 8 * d + 4 * (t / 2));
        }
    return c;
  }();
  const __m512i wperm = _mm512_load_si512(kC.wperm);
  const __m512i three = _mm512_set1_epi8(3), bias = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i row_of_lane = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
  __m512 acc[NS][NC];
#pragma GCC unroll 4
  for (int i = 0; i < NS; ++i)
#pragma GCC unroll 16
    for (int n = 0; n < NC; ++n) acc[i][n] = _mm512_setzero_ps();
  for (int64_t s = 0; s < ns; ++s) {
    const uint8_t* es = e + static_cast<size_t>(s) * S::kEntryBytes;
    const uint8_t* xs = xq + s * NX * 128;
    if constexpr (PF) lanes_prefetch<NS, S::kEntryBytes>(es, estride);
    __m512i sum[NS][NC], corr[NS];
#pragma GCC unroll 4
    for (int i = 0; i < NS; ++i) {
      corr[i] = _mm512_setzero_si512();
#pragma GCC unroll 16
      for (int n = 0; n < NC; ++n) sum[i][n] = _mm512_setzero_si512();
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m512i words[NS];
#pragma GCC unroll 4
      for (int i = 0; i < NS; ++i)
        words[i] = _mm512_cvtepu32_epi64(
            _mm256_load_si256(reinterpret_cast<const __m256i*>(es + i * estride + S::kCodeOffset) + h));
#pragma GCC unroll 2
      for (int jj = 0; jj < 2; ++jj) {
        const int j = 2 * h + jj;
#pragma GCC unroll 4
        for (int i = 0; i < NS; ++i) {
          const __m512i w = _mm512_permutexvar_epi8(
              wperm, _mm512_loadu_si512(es + i * estride + LanesLayout::slot_at(ValueType::kI8, 8 * j)));
          const __m512i idx = _mm512_ternarylogic_epi32(
              _mm512_multishift_epi64_epi8(_mm512_load_si512(kC.shift[jj]), words[i]), three,
              _mm512_load_si512(kC.base[j]), 0xEA);
          corr[i] = _mm512_dpbusd_epi32(corr[i], bias, w);
#pragma GCC unroll 16
          for (int n = 0; n < NC; ++n)
            sum[i][n] = _mm512_dpbusd_epi32(sum[i][n],
                                            _mm512_permutexvar_epi8(idx, _mm512_load_si512(xs + n * 128)), w);
        }
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < NS; ++i) {
      const __m512 sc = _mm512_permutexvar_ps(
          row_of_lane, _mm512_castps256_ps512(_mm256_load_ps(
                           reinterpret_cast<const float*>(es + i * estride + S::kScaleOffset))));
#pragma GCC unroll 16
      for (int n = 0; n < NC; ++n) {
        float xscale;
        std::memcpy(&xscale, xs + n * 128 + 64, sizeof(float));
        acc[i][n] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(sum[i][n], corr[i])),
                                    _mm512_mul_ps(sc, _mm512_set1_ps(xscale)), acc[i][n]);
      }
    }
  }
  // Lanes 2r and 2r + 1 are row r's: add the pairs, then gather the even lanes.
  const __m512i evens = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 14, 12, 10, 8, 6, 4, 2, 0);
#pragma GCC unroll 4
  for (int i = 0; i < NS; ++i)
#pragma GCC unroll 16
    for (int n = 0; n < NC; ++n)
      out[i][n] = _mm512_castps512_ps256(
          _mm512_permutexvar_ps(evens, _mm512_add_ps(acc[i][n], _mm512_permute_ps(acc[i][n], 0xB1))));
}

// The int8 tile's X in the thread's scratch: per super chunk and column, 128 bytes (lanes_i8x_tile): the
// 64 positions' codes + 128 (position k on: 128, code 0), then the block's scale. Each block gathered into
// 64 floats (zero past k) and quantised in vectors with quantize_act_block's rule (the same bits: the
// default rounding of `vcvtps2dq` is to nearest even); a block holding an infinity or a NaN goes through
// quantize_act_block itself.
template <class T, int N>
const uint8_t* lanes_i8_x(const SpmmArgs& a, int64_t k, int64_t supers) {
  constexpr int B = LanesLayout::kSuper;
  static_assert(B == kInt8ActBlock && B == 64);
  uint8_t* xq = reinterpret_cast<uint8_t*>(scratch<T, 2>(static_cast<size_t>(supers * N * 128 / 4)));
  const int64_t sk = a.x_row_stride(), sj = a.x_col_stride();
  alignas(64) float col[N][B];
  const __m512 sign = _mm512_set1_ps(-0.f);
  for (int64_t s = 0; s < supers; ++s) {
    const int64_t len = std::clamp<int64_t>(k - s * B, 0, B);
    const float* xs = a.x + s * B * sk;
    for (int64_t i = 0; i < len; ++i)
      for (int j = 0; j < N; ++j) col[j][i] = xs[i * sk + j * sj];
    for (int j = 0; j < N; ++j) {
      std::fill(col[j] + len, col[j] + B, 0.f);
      uint8_t* t = xq + (s * N + j) * 128;
      __m512 v[4], amax = _mm512_setzero_ps();
      __mmask16 bad = 0;
      for (int c = 0; c < 4; ++c) {
        v[c] = _mm512_load_ps(col[j] + 16 * c);
        const __m512 m = _mm512_andnot_ps(sign, v[c]);
        bad |= _mm512_cmp_ps_mask(m, _mm512_set1_ps(3.4028235e38f), _CMP_NLE_UQ);  // inf or NaN
        amax = _mm512_max_ps(amax, m);
      }
      float scale;
      if (bad) {
        int8_t q[B];
        scale = quantize_act_block(xs + j * sj, len, sk, q);
        for (int i = 0; i < B; ++i) t[i] = static_cast<uint8_t>(i < len ? q[i] + 128 : 128);
      } else {
        const float m = _mm512_reduce_max_ps(amax);
        const __m512 inv = _mm512_set1_ps(m > 0.f ? 127.f / m : 0.f);
        for (int c = 0; c < 4; ++c) {
          __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(v[c], inv));
          q = _mm512_min_epi32(_mm512_max_epi32(q, _mm512_set1_epi32(-127)), _mm512_set1_epi32(127));
          _mm_store_si128(reinterpret_cast<__m128i*>(t + 16 * c),
                          _mm512_cvtepi32_epi8(_mm512_add_epi32(q, _mm512_set1_epi32(128))));
        }
        scale = m / 127.f;
      }
      std::memcpy(t + B, &scale, sizeof(float));
    }
  }
  return xq;
}

// NS streams of N columns, in passes of up to CMAX columns: v[i][n], stream i's sums for column n. Passes
// after the first read the same weights again (one K block of a row block: at most 17 KB, from L1/L2).
// x: this K block's part of X in the tile's order (lanes_x: floats, or bf16 words for kBf16x); xstride: the
// tile's step in floats between columns (kRows: the transposed X's rows) or passes (kMix: one stream, CMAX
// = 8); kSlots and kBf16x take every column in one pass (CMAX = 16).
template <class T, ValueType WT, int N, int NS, int CMAX, int VREGS, LanesTile TILE, int C0 = 0>
void lanes_passes(const uint8_t* e, size_t estride, int64_t ns, const void* xv, int64_t xstride,
                  __m256 (&v)[NS][N]) {
  // int8 with bf16 activations keeps a partial sum per column beside each sum (the scales cannot multiply
  // the bf16 weights exactly): all columns in one pass while both fit in the registers, else passes of 8.
  // int8 activations keep an int32 and an fp32 sum per column: passes of 8 where they do not fit.
  constexpr int CM = (is_bf16x(TILE) && WT == ValueType::kI8 && 2 * NS * N + 8 > 32) ||
                             (is_i8x(TILE) && 2 * NS * N + 2 * NS + 8 > 32)
                         ? 8
                         : CMAX;
  constexpr int NC = N - C0 < CM ? N - C0 : CM;
  const float* x = static_cast<const float*>(xv);
  __m256 out[NS][NC];
  if constexpr (is_i8x(TILE)) {
    static_assert(WT == ValueType::kI8, "int8 activations: int8 weights");
    lanes_i8x_tile<T, NC, NS, N, is_prefetch(TILE)>(e, estride, ns,
                                                    static_cast<const uint8_t*>(xv) + C0 * 128, out);
  } else if constexpr (is_bf16x(TILE)) {
    lanes_bf16x_tile<T, WT, NC, NS, N, is_prefetch(TILE)>(e, estride, ns,
                                                          static_cast<const uint16_t*>(xv) + C0 * 32, out);
  } else if constexpr (is_slots(TILE)) {
    lanes_slots_tile<T, WT, NC, NS, N, is_prefetch(TILE), is_table(TILE)>(
        e, estride, ns, x + C0 * (is_table(TILE) ? 16 : 4), out);
  } else if constexpr (TILE == LanesTile::kMix) {
    // Fewer than 8 columns run the 8-column tile on zero-padded columns.
    static_assert(NS == 1 && CMAX == 8 && WT == ValueType::kI8);
    __m256 o8[8];
    lanes_mix_tile<T>(e, ns, x + C0 / 8 * xstride, o8);
    for (int j = 0; j < NC; ++j) out[0][j] = o8[j];
  } else {
    lanes_tile<T, WT, NC, NS, VREGS, is_prefetch(TILE)>(e, estride, ns, x + C0 * xstride, xstride, out);
  }
  for (int i = 0; i < NS; ++i)
    for (int j = 0; j < NC; ++j) v[i][C0 + j] = out[i][j];
  if constexpr (C0 + NC < N)
    lanes_passes<T, WT, N, NS, CMAX, VREGS, TILE, C0 + NC>(e, estride, ns, xv, xstride, v);
}

// X in a tile's order in the thread's scratch, its bytes per K position (K block kb starts
// kb * lay.kb * per_k bytes in) and the tile's stride in floats (lanes_passes).
struct LanesX {
  const uint8_t* x;
  int64_t per_k;
  int64_t stride;
};

template <class T, int N, LanesTile TILE>
LanesX lanes_x(const SpmmArgs& a, const LanesLayout& lay, int64_t k) {
  auto bytes = [](const void* p) { return static_cast<const uint8_t*>(p); };
  constexpr int64_t F = sizeof(float);
  if constexpr (is_i8x(TILE)) {
    return {bytes(lanes_i8_x<T, N>(a, k, lay.supers)), N * 2, 0};
  } else if constexpr (is_bf16x(TILE)) {
    return {bytes(lanes_bf16_x<T, N>(a, k, lay.supers)), N * 2, 0};
  } else if constexpr (is_table(TILE)) {
    return {bytes(lanes_table_x<T, N>(a, k, lay.supers)), N * F, 0};
  } else if constexpr (is_slots(TILE)) {
    return {bytes(lanes_group_x<T, N>(a, k, lay.supers)), N * F, 0};
  } else if constexpr (TILE == LanesTile::kMix) {
    const int64_t pass = lay.supers * LanesLayout::kSuper * 2 * 8;
    return {bytes(lanes_mix_x<T, N>(a, k, static_cast<size_t>(pass))), 2 * 8 * F, pass};
  } else {
    const int64_t ldxt = lay.supers * LanesLayout::kSuper + 16;  // + 16: rows of Xt not 4 KiB apart
    return {bytes(transposed_x<T, N>(a, k, ldxt)), F, ldxt};
  }
}

// Streams (row regions read at once) for N columns: 4 at N = 1, 2 up to N = 4, except where two would cost
// int8 its per-super-chunk partial sums (N = 3, 4 with 16 registers: 0.9x of one stream), 1 from N = 5.
// Measured (docs/kernels.md, session 9): N = 1 and 2 against the K split or adjacent blocks +20-40% on the
// decoder's shapes; N = 3 and 4 against one stream +15-30% (fp32), +0-20% (bf16).
// The table form (AMD's rows) reads two regions up to N = 8 for fp32 and bf16: Zen 4, 4096x4096 cold, weight
// GB/s one region -> two: fp32 N = 5 11.7 -> 13.2, 6 10.7 -> 12.3, 8 9.1 -> 10.9; bf16 11.8 -> 12.7, 10.7 ->
// 11.1, 8.7 -> 9.0; int8 (which would lose its partial sums) 7.7 -> 8.1, 6.8 -> 6.9, 5.4 -> 5.2 (session 28).
template <ValueType WT, int N, int VREGS, bool TABLE = false>
constexpr int lanes_streams() {
  if (N == 1) return 4;
  if (N == 2 || (N <= 4 && (WT != ValueType::kI8 || 4 * N + 8 <= VREGS))) return 2;
  if (TABLE && N <= 8 && WT != ValueType::kI8) return 2;
  return 1;
}

// N columns; CMAX: the most columns one pass keeps in registers (8 with 16 registers, 16 with 32).
template <class T, ValueType WT, int N, int CMAX, int VREGS, LanesTile TILE>
void lanes_run(const PackedMatrix::Impl& p, const SpmmArgs& a) {
  constexpr int NS = TILE == LanesTile::kMix ? 1 : lanes_streams < WT, N, VREGS,
                is_table(TILE) || is_bf16x(TILE) > ();
  constexpr int R = LanesLayout::kRows;
  const LanesLayout& lay = p.lanes;
  const int64_t m = p.m, k = p.k;
  const LanesX x = lanes_x<T, N, TILE>(a, lay, k);
  const int nt = static_cast<int>(std::min<int64_t>(a.threads, lay.m_blocks));
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    const int tid = omp_get_thread_num();
    const int nth = omp_get_num_threads();
    const int64_t b0 = lay.m_blocks * tid / nth, b1 = lay.m_blocks * (tid + 1) / nth;
    for (int64_t kb = 0; kb < lay.k_blocks; ++kb) {
      const int64_t ns = lay.supers_in(kb);
      const size_t bstride = static_cast<size_t>(ns * LanesSlots<WT>::kEntryBytes);  // next row block
      // NS regions of `per` row blocks (staggered: kernel_list.h), then NS adjacent blocks at a time, then
      // the rest one block at a time.
      const int64_t per = NS > 1 ? staggered_rows_per_region(b1 - b0, NS, static_cast<int64_t>(bstride)) : 0;
      const uint8_t* xb = x.x + kb * lay.kb * x.per_k;
      const bool first = kb == 0, last = kb + 1 == lay.k_blocks;
      auto emit = [&](int64_t mb, const __m256(&v)[N]) {
        alignas(32) float t[N][R];
        for (int j = 0; j < N; ++j) _mm256_store_ps(t[j], v[j]);
        store_rows<T, N, R>(a, t, mb * R, static_cast<int>(std::min<int64_t>(R, m - mb * R)), first, last);
      };
      int64_t mb = b0;
      if constexpr (NS > 1) {
        auto streams = [&](int64_t mb0, int64_t apart) {
          __m256 v[NS][N];
          lanes_passes<T, WT, N, NS, CMAX, VREGS, TILE>(lay.data.data() + lay.entry(kb, mb0), bstride * apart,
                                                        ns, xb, x.stride, v);
          for (int i = 0; i < NS; ++i) emit(mb0 + i * apart, v[i]);
        };
        for (int64_t t = 0; t < per; ++t) streams(b0 + t, per);
        for (mb = b0 + NS * per; mb + NS <= b1; mb += NS) streams(mb, 1);
      }
      for (; mb < b1; ++mb) {
        __m256 v[1][N];
        lanes_passes<T, WT, N, 1, CMAX, VREGS, TILE>(lay.data.data() + lay.entry(kb, mb), 0, ns, xb, x.stride,
                                                     v);
        emit(mb, v[0]);
      }
    }
    gelu_rows_after<T>(a, b0 * R, std::min(m, b1 * R));
  }
}

template <class T, ValueType WT, int NMax, int CMAX, int VREGS, LanesTile TILE = LanesTile::kRows, int N = 1>
void lanes_dispatch(const PackedMatrix::Impl& p, const SpmmArgs& a) {
  if constexpr (N <= NMax) {
    if (a.n == N) return lanes_run<T, WT, N, CMAX, VREGS, TILE>(p, a);
    return lanes_dispatch<T, WT, NMax, CMAX, VREGS, TILE, N + 1>(p, a);
  } else {
    throw Error("internal: a rows-in-lanes kernel got more columns than its n_max");
  }
}

// The entry point of the list row `name` (kernel_list.inc) on traits T: its weight type and n_max read from
// the row, CMAX columns per pass in VREGS vector registers, tile LanesTile::TILE. The ISA files bind T,
// CMAX and VREGS in a one-line macro of their own.
#define SPARSE24_LANES_ENTRY(T, name, CMAX, VREGS, TILE)                                          \
  void name(const PackedMatrix::Impl& p, const SpmmArgs& a) {                                     \
    lanes_dispatch<T, lanes_weights(variant(#name)->weights), variant(#name)->n_max, CMAX, VREGS, \
                   LanesTile::TILE>(p, a);                                                        \
  }

}  // namespace sparse24::kernels
