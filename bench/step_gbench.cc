// The inner step of the AVX-512 rows-in-lanes tiles alone, in L1: what bounds a tile's instructions on a
// core, apart from memory and the driver (docs/kernels.md, sessions 28 and 29):
//   sparse24_step_gbench [--benchmark_filter=...]
// Each row does the same 8192 multiply-adds per pass, again and again: 8 columns times 64 groups of 8 rows x
// 2 slots (the bf16x rows: 32 groups of 16 rows x 2 slots), int8 (or bf16) values. Counter dense_FLOPS =
// dense-equivalent flops per second (4 per kept multiply-add), as spmm_gbench's. Rows:
//   broadcast  the group's 4 activations broadcast from memory (`vbroadcastf32x4`) and `vpermilps` by the
//              codes, then an FMA: 16 multiply-adds (8 rows x 2 slots) per column and group (Intel's form);
//   table      a column's 16 activations of 4 groups as the memory operand of `vpermps` (AMD's form);
//   bf16x_i8   activations rounded to bf16, a column's 32 of 8 groups selected by `vpermw`, `vdpbf16ps`:
//              32 multiply-adds per pair of instructions (16 rows x 2 slots), int8 values widened to bf16
//              once per group; needs AVX512_BF16 (the library's form of it: lanes_bf16x_tile, spmm_lanes.h);
//   bf16x_bf16 the same with bf16 values (no widening);
//   pair_f32   rows not in lanes (the pair kernel of sessions 5-13): per row and group one FMA of the row's
//              two values (a 64-bit broadcast load) with a pair-table entry (lanes 2n, 2n+1: column n at the
//              group's kept positions), the entry's plane chosen by the row's positions: 16 multiply-adds
//              per FMA and two loads, no permute; fp32 values;
//   pair_i8    the same with int8 values widened into an L1 buffer first (8 rows x 64 groups per pass);
//   mixed_i8   both forms at once on 16 rows (8 table, 8 pair), so permutes and loads share the core.
// The values are arbitrary (the step's speed does not depend on them); a row the CPU cannot run is skipped
// with an error. Not a kernel test: the kernels' results are tested against the reference in spmm_test.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <bit>
#include <cstdint>

namespace {

constexpr int kCols = 8;     // columns
constexpr int kGroups = 64;  // groups of 4 positions, 8 rows x 2 slots each (the fp32 forms)
constexpr double kFlopsPerPass = 4.0 * 16 * kGroups * kCols;

struct Data {
  alignas(64) float table[kGroups / 4 * kCols * 16];       // [16 positions][column][16]
  alignas(64) float group[kGroups * kCols * 4];            // [group][column][4]
  alignas(64) uint16_t table16[kGroups / 8 * kCols * 32];  // [32 positions][column][32], bf16
  alignas(64) int8_t w8[kGroups * 32];                     // per group 32 int8 values
  alignas(64) uint16_t w16[kGroups * 32];                  // per group 32 bf16 values
  alignas(64) uint32_t codes[kGroups];                     // per 16 groups a vector of 16 code words
  alignas(64) float pair_table[16 * kGroups * 16];         // [a | b << 2][group][column][2]
  alignas(64) float w32[8 * kGroups * 2];                  // [row][group][slot], fp32
  alignas(64) uint64_t nibbles[8 * kGroups / 16];          // [row][16 groups]: a | b << 2 per group
  Data() {
    for (float& v : pair_table) v = 1.f;
    for (int i = 0; i < 8 * kGroups * 2; ++i) w32[i] = static_cast<float>(i % 7 - 3);
    static constexpr uint64_t kPairs[6] = {0 | 1 << 2, 0 | 2 << 2, 0 | 3 << 2,
                                           1 | 2 << 2, 1 | 3 << 2, 2 | 3 << 2};
    for (int i = 0; i < 8 * kGroups / 16; ++i) {
      nibbles[i] = 0;
      for (int q = 0; q < 16; ++q) nibbles[i] |= kPairs[(i * 16 + q) * 2654435761u % 6] << (4 * q);
    }
    for (float& v : table) v = 1.f;
    for (float& v : group) v = 1.f;
    for (uint16_t& v : table16) v = 0x3f80;  // 1.0 in bf16
    for (int i = 0; i < kGroups * 32; ++i) {
      w8[i] = static_cast<int8_t>(i % 7 - 3);
      w16[i] = 0x3f80;
    }
    for (int i = 0; i < kGroups; ++i) codes[i] = 0x9c6e1b27u * static_cast<uint32_t>(i + 1);
  }
};

// 16 int8 values from v as fp32.
__attribute__((target("avx512f"))) inline __m512 widen16(const int8_t* v) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(v))));
}

template <bool kTable>
__attribute__((target("avx512f"), noinline)) float run_fp32(const Data& d, int64_t passes) {
  __m512 acc[kCols];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  for (int64_t p = 0; p < passes; ++p)
    for (int b = 0; b < kGroups / 16; ++b) {
      __m512i c = _mm512_loadu_si512(d.codes + b * 16);
#pragma GCC unroll 16
      for (int q = 0; q < 16; ++q) {
        const int g = b * 16 + q;
        const __m512 w = widen16(d.w8 + g * 32);  // 8 rows x 2 slots
        if constexpr (kTable) {
          const __m512i idx =
              _mm512_ternarylogic_epi32(c, _mm512_set1_epi32(3), _mm512_set1_epi32(4 * (q % 4)), 0xEA);
#pragma GCC unroll 8
          for (int n = 0; n < kCols; ++n)
            acc[n] = _mm512_fmadd_ps(
                w, _mm512_permutexvar_ps(idx, _mm512_load_ps(d.table + ((g / 4) * kCols + n) * 16)), acc[n]);
        } else {
#pragma GCC unroll 8
          for (int n = 0; n < kCols; ++n) {
            const __m512 x = _mm512_broadcast_f32x4(_mm_load_ps(d.group + (g * kCols + n) * 4));
            acc[n] = _mm512_fmadd_ps(w, _mm512_permutevar_ps(x, c), acc[n]);
          }
        }
        c = _mm512_srli_epi32(c, 4);
      }
    }
  __m512 s = acc[0];
  for (int n = 1; n < kCols; ++n) s = _mm512_add_ps(s, acc[n]);
  return _mm512_reduce_add_ps(s);
}

// Rows not in lanes: per row and group one FMA of the row's two values (a 64-bit broadcast) with an entry of
// the pair table (lanes 2n, 2n+1 = the column n's activations at the group's kept positions a, b), chosen by
// the row's positions a | b << 2 (a 4 KB plane each). kInt8: the values widened from int8 into a buffer
// first, per 8 rows x 64 groups.
template <bool kInt8>
__attribute__((target("avx512f,bmi2"), noinline)) float run_pair(const Data& d, int64_t passes) {
  __m512 acc[8];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  alignas(64) float buf[8 * kGroups * 2];
  const char* table = reinterpret_cast<const char*>(d.pair_table);
  for (int64_t p = 0; p < passes; ++p) {
    const float* w = d.w32;
    if constexpr (kInt8) {
      for (int i = 0; i < 8 * kGroups * 2; i += 16) _mm512_store_ps(buf + i, widen16(d.w8 + i));
      w = buf;
      asm volatile("" ::: "memory");
    }
    for (int b = 0; b < kGroups / 16; ++b) {
      uint64_t nib[8];
      for (int r = 0; r < 8; ++r) nib[r] = d.nibbles[r * (kGroups / 16) + b];
#pragma GCC unroll 16
      for (int q = 0; q < 16; ++q) {
        const int g = b * 16 + q;
#pragma GCC unroll 8
        for (int r = 0; r < 8; ++r) {
          const uint64_t off = std::rotr(nib[r], (4 * q - 12) & 63) & 0xF000;
          const __m512 x = _mm512_load_ps(reinterpret_cast<const float*>(table + off) + g * 16);
          const __m512 wp =
              _mm512_castpd_ps(_mm512_set1_pd(*reinterpret_cast<const double*>(w + (r * kGroups + g) * 2)));
          acc[r] = _mm512_fmadd_ps(wp, x, acc[r]);
        }
      }
    }
  }
  __m512 s = acc[0];
  for (int n = 1; n < 8; ++n) s = _mm512_add_ps(s, acc[n]);
  return _mm512_reduce_add_ps(s);
}

// Both at once on 16 rows: 8 in lanes (the table form) and 8 as pairs, so the table form's permutes and the
// pair form's loads share the core. Twice the multiply-adds per pass.
__attribute__((target("avx512f,bmi2"), noinline)) float run_mixed(const Data& d, int64_t passes) {
  __m512 acc[8], pacc[8];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  for (__m512& a : pacc) a = _mm512_setzero_ps();
  alignas(64) float buf[8 * kGroups * 2];
  const char* table = reinterpret_cast<const char*>(d.pair_table);
  const __m512i perm = _mm512_set_epi32(15, 7, 14, 6, 13, 5, 12, 4, 11, 3, 10, 2, 9, 1, 8, 0);
  for (int64_t p = 0; p < passes; ++p) {
    for (int i = 0; i < 8 * kGroups * 2; i += 16)
      _mm512_store_ps(buf + i, _mm512_permutexvar_ps(perm, widen16(d.w8 + i)));
    asm volatile("" ::: "memory");
    for (int b = 0; b < kGroups / 16; ++b) {
      __m512i c = _mm512_loadu_si512(d.codes + b * 16);
      uint64_t nib[8];
      for (int r = 0; r < 8; ++r) nib[r] = d.nibbles[r * (kGroups / 16) + b];
#pragma GCC unroll 16
      for (int q = 0; q < 16; ++q) {
        const int g = b * 16 + q;
        const __m512 w = widen16(d.w8 + g * 32);
        const __m512i idx =
            _mm512_ternarylogic_epi32(c, _mm512_set1_epi32(3), _mm512_set1_epi32(4 * (q % 4)), 0xEA);
#pragma GCC unroll 8
        for (int n = 0; n < kCols; ++n) {
          acc[n] = _mm512_fmadd_ps(
              w, _mm512_permutexvar_ps(idx, _mm512_load_ps(d.table + ((g / 4) * kCols + n) * 16)), acc[n]);
          const uint64_t off = std::rotr(nib[n], (4 * q - 12) & 63) & 0xF000;
          const __m512 x = _mm512_load_ps(reinterpret_cast<const float*>(table + off) + g * 16);
          const __m512 wp =
              _mm512_castpd_ps(_mm512_set1_pd(*reinterpret_cast<const double*>(buf + (n * kGroups + g) * 2)));
          pacc[n] = _mm512_fmadd_ps(wp, x, pacc[n]);
        }
        c = _mm512_srli_epi32(c, 4);
      }
    }
  }
  __m512 s = acc[0];
  for (int n = 1; n < 8; ++n) s = _mm512_add_ps(s, _mm512_add_ps(acc[n], pacc[n]));
  return _mm512_reduce_add_ps(_mm512_add_ps(s, pacc[0]));
}

// 16 rows x 2 slots per vector: half the groups of the fp32 forms for the same multiply-adds.
template <bool kInt8>
__attribute__((target("avx512f,avx512bw,avx512bf16"), noinline)) float run_bf16x(const Data& d,
                                                                                 int64_t passes) {
  __m512 acc[kCols];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  for (int64_t p = 0; p < passes; ++p)
    for (int b = 0; b < kGroups / 2 / 16; ++b) {
      __m512i c = _mm512_loadu_si512(d.codes + b * 16);
#pragma GCC unroll 16
      for (int q = 0; q < 16; ++q) {
        const int g = b * 16 + q;
        __m512bh w;
        if constexpr (kInt8) {
          w = _mm512_cvtne2ps_pbh(widen16(d.w8 + g * 32 + 16), widen16(d.w8 + g * 32));
        } else {
          w = reinterpret_cast<__m512bh>(_mm512_load_si512(d.w16 + g * 32));
        }
        const __m512i idx =
            _mm512_ternarylogic_epi32(c, _mm512_set1_epi16(3), _mm512_set1_epi16(4 * (q % 8)), 0xEA);
#pragma GCC unroll 8
        for (int n = 0; n < kCols; ++n) {
          const __m512i x =
              _mm512_permutexvar_epi16(idx, _mm512_load_si512(d.table16 + ((g / 8) * kCols + n) * 32));
          acc[n] = _mm512_dpbf16_ps(acc[n], w, reinterpret_cast<__m512bh>(x));
        }
        c = _mm512_srli_epi16(c, 2);
      }
    }
  __m512 s = acc[0];
  for (int n = 1; n < kCols; ++n) s = _mm512_add_ps(s, acc[n]);
  return _mm512_reduce_add_ps(s);
}

template <float (*kRun)(const Data&, int64_t), int kTimes = 1>
void step(benchmark::State& state, bool runs) {
  if (!runs) {
    state.SkipWithError("this CPU does not run this step's instructions");
    return;
  }
  static const Data d;
  constexpr int64_t kPasses = 64;
  for (auto _ : state) benchmark::DoNotOptimize(kRun(d, kPasses));
  state.counters["dense_FLOPS"] =
      benchmark::Counter(kTimes * kFlopsPerPass * kPasses * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

bool has_avx512() { return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"); }
bool has_bf16() { return has_avx512() && __builtin_cpu_supports("avx512bf16"); }

void BM_broadcast(benchmark::State& s) { step<run_fp32<false>>(s, has_avx512()); }
void BM_table(benchmark::State& s) { step<run_fp32<true>>(s, has_avx512()); }
void BM_bf16x_i8(benchmark::State& s) { step<run_bf16x<true>>(s, has_bf16()); }
void BM_bf16x_bf16(benchmark::State& s) { step<run_bf16x<false>>(s, has_bf16()); }
void BM_pair_f32(benchmark::State& s) { step<run_pair<false>>(s, has_avx512()); }
void BM_pair_i8(benchmark::State& s) { step<run_pair<true>>(s, has_avx512()); }
void BM_mixed_i8(benchmark::State& s) { step<run_mixed, 2>(s, has_avx512()); }
BENCHMARK(BM_mixed_i8);
BENCHMARK(BM_pair_f32);
BENCHMARK(BM_pair_i8);
BENCHMARK(BM_broadcast);
BENCHMARK(BM_table);
BENCHMARK(BM_bf16x_i8);
BENCHMARK(BM_bf16x_bf16);

}  // namespace

BENCHMARK_MAIN();
