// The kernel list (kernel_list.inc) as C++: the entry points' prototypes, the constexpr table of
// variants, the per-ISA layout parameters and the compile-time checks that keep them consistent.
#pragma once
#include <cstdint>
#include <string_view>

#include "packed.h"

namespace sparse24::kernels {

using SpmmFn = void (*)(const PackedMatrix::Impl&, const SpmmArgs&);

// kGemm: the compute-bound layout and its tiles; kLanes: the memory-bound layout and its kernels;
// kLanesGemm: the compute-bound tiles over the memory-bound layout (a pack without the compute-bound one
// running a large N: its blocks made as the tiles reach them).
enum class Layout : uint8_t { kGemm, kLanes, kLanesGemm };
// The CPUs a variant is picked on (it runs on any CPU with its ISA): every CPU, Intel's, or the others.
enum class Cpu : uint8_t { kAny, kIntel, kOther };

// CPU checks (spmm.cc).
bool cpu_has_avx2();
bool cpu_has_avx512();
bool cpu_has_avx512_bf16();       // AVX-512 and AVX512_BF16 (the kBf16 activation rows)
bool cpu_has_avx512_vnni_vbmi();  // AVX-512, AVX512_VNNI and AVX512_VBMI (the kI8 activation rows)
// This CPU runs the instructions of rows reading activations a.
bool cpu_runs_act(Act a);
Cpu cpu_kind();  // this CPU's kind, for the list's cpu column

// The rows-in-lanes layout's weight type of a row that reads one type (kF32, kBf16 or kI8); at compile time
// anything else does not compile.
constexpr ValueType lanes_weights(Weights w) {
  switch (w) {
    case Weights::kF32:
      return ValueType::kF32;
    case Weights::kBf16:
      return ValueType::kBf16;
    case Weights::kI8:
      return ValueType::kI8;
    default:
      throw "lanes_weights: a rows-in-lanes row reads exactly one weight type";
  }
}

// Entry points, one per row (spmm_avx2.cc, spmm_avx512.cc).
#define SPARSE24_ISA(...)
#define SPARSE24_KERNEL(name, ...) void name(const PackedMatrix::Impl&, const SpmmArgs&);
#include "kernel_list.inc"
#undef SPARSE24_KERNEL
#undef SPARSE24_ISA

struct Variant {
  std::string_view name;
  Isa isa;
  Layout layout;
  Weights weights;
  int64_t n_max;     // 0 = any
  int64_t pick_min;  // dispatch picks it for pick_min <= N <= pick_max (0 = any)
  int64_t pick_max;
  int64_t nr;  // N is padded to a multiple of nr (0 = not padded)
  int64_t rate;
  Cpu cpu;
  Act act;
  SpmmFn fn;
  // w: one weight type (kF32, kBf16 or kI8).
  constexpr bool reads(Weights w) const {
    return (static_cast<unsigned>(weights) & static_cast<unsigned>(w)) != 0;
  }
  constexpr bool takes(int64_t n) const { return n_max == 0 || n <= n_max; }
  // Dispatch may pick it on CPUs of kind c (kIntel or kOther).
  constexpr bool dispatchable(Cpu c) const { return pick_min > 0 && (cpu == Cpu::kAny || cpu == c); }
  constexpr bool picks(int64_t n, Cpu c) const {
    return dispatchable(c) && n >= pick_min && (pick_max == 0 || n <= pick_max);
  }
};

inline constexpr Variant kVariants[] = {
#define SPARSE24_ISA(...)
// clang-format off
#define SPARSE24_KERNEL(name, isa, layout, weights, n_max, pick_min, pick_max, nr, rate, cpu, act) \
  {#name, Isa::isa, Layout::layout, Weights::weights, n_max, pick_min, pick_max, nr, rate, Cpu::cpu,  \
   Act::act, name},
// clang-format on
#include "kernel_list.inc"
#undef SPARSE24_KERNEL
#undef SPARSE24_ISA
};

struct IsaRow {
  Isa isa;
  bool (*cpu_has)();  // the CPU runs this ISA's instructions
  int gemm_mr;        // compute-bound layout: rows per block
  int gemm_kc;        // compute-bound layout: K per block (multiple of 4)
  int gemm_chunk;     // compute-bound layout: row blocks per chunk
  int lanes_kb;       // LanesLayout: K per block (multiple of 64)
};

inline constexpr IsaRow kIsas[] = {
#define SPARSE24_ISA(isa, cpu_has, mr, kc, chunk, kb) {Isa::isa, cpu_has, mr, kc, chunk, kb},
#define SPARSE24_KERNEL(...)
#include "kernel_list.inc"
#undef SPARSE24_KERNEL
#undef SPARSE24_ISA
};

// The row of a SIMD ISA; null for Isa::kRef (which delegates to spmm_reference).
constexpr const IsaRow* isa_row(Isa isa) {
  for (const IsaRow& r : kIsas)
    if (r.isa == isa) return &r;
  return nullptr;
}

// The variant named `name`; null if none. At compile time, variant("x")->n_max is how an ISA file
// reads its own rows.
constexpr const Variant* variant(std::string_view name) {
  for (const Variant& v : kVariants)
    if (v.name == name) return &v;
  return nullptr;
}

// The largest value of `field` among the ISA's small-N rows for weight type w that dispatch may pick on
// CPUs of kind c (kAny: on some CPU) for activations a (kBf16, kI8: the fp32 rows and those of a); 0: none.
constexpr int64_t small_rows_max(Isa isa, Weights w, int64_t Variant::*field, Cpu c = Cpu::kAny,
                                 Act a = Act::kF32) {
  int64_t n = 0;
  for (const Variant& v : kVariants)
    if (v.isa == isa && v.layout == Layout::kLanes && v.reads(w) && act_runs(v.act, a) && v.pick_min > 0 &&
        (c == Cpu::kAny || v.dispatchable(c)) && v.*field > n)
      n = v.*field;
  return n;
}

// On CPUs of kind c, N <= small_n_max(isa, w, c, a) takes the memory-bound path where both layouts are
// packed: the largest pick_max of those rows (a = kBf16, kI8: packs whose rows of those activations may run).
constexpr int64_t small_n_max(Isa isa, Weights w, Cpu c, Act a = Act::kF32) {
  return small_rows_max(isa, w, &Variant::pick_max, c, a);
}
// The most columns one call of the fp32 rows takes (their largest n_max): a pack without the compute-bound
// layout runs a larger N in chunks of this many columns, each chunk on the fastest of these rows that takes
// it (also past their pick ranges); the other activations' rows take no more.
constexpr int64_t small_n_take(Isa isa, Weights w) { return small_rows_max(isa, w, &Variant::n_max); }

// True if dispatch may pick a row of the ISA reading activations a (kBf16, kI8) on CPUs of kind c (where
// none is, a pack made for them runs the fp32-activation rows; bf16_activations_supported(),
// int8_activations_supported()).
constexpr bool picks_activations(Isa isa, Cpu c, Act a) {
  for (const Variant& v : kVariants)
    if (v.isa == isa && v.act == a && v.dispatchable(c)) return true;
  return false;
}

// The checks that used to be conventions: on every kind of CPU and for both activation types, every N up
// to the small-N limit picked by a row that takes it and every compute-bound N picked; names unique;
// the rows of other activations as kernel_list.inc's header says.
// (Indices and values only, no pointer comparisons: under -fsanitize=undefined GCC does not evaluate
// those in a constant expression.)
constexpr bool list_is_consistent() {
  constexpr size_t nv = sizeof(kVariants) / sizeof(kVariants[0]);
  for (size_t i = 0; i < nv; ++i) {
    const Variant& v = kVariants[i];
    bool has_isa = false;
    for (const IsaRow& r : kIsas) has_isa = has_isa || r.isa == v.isa;
    if (!has_isa || v.pick_min < 0 || v.rate <= 0) return false;
    // The tiles over the memory-bound layout: whole panels of fp32 activations, past the small-N limit, on
    // K blocks of whole super chunks (lanes_to_gemm_blocks: at most 256 positions).
    if (v.layout == Layout::kLanesGemm) {
      const IsaRow* r = isa_row(v.isa);
      if (v.nr == 0 || v.act != Act::kF32 || v.n_max != 0 || r->gemm_kc % 64 != 0 || r->gemm_kc > 256 ||
          (v.pick_min > 0 && v.pick_min <= small_n_take(v.isa, Weights::kF32)))
        return false;
    }
    if (v.n_max != 0 && v.pick_min > 0 && (v.pick_max == 0 || v.pick_max > v.n_max)) return false;
    for (size_t j = 0; j < nv; ++j)
      if (j != i && kVariants[j].name == v.name) return false;
    // bf16 activations: memory-bound rows of bf16 or int8 weights; int8 activations: of int8 weights; both
    // within the fp32 rows' chunks.
    if (v.act != Act::kF32 &&
        (v.layout != Layout::kLanes || v.n_max == 0 || v.n_max > small_n_take(v.isa, v.weights) ||
         (v.weights != Weights::kI8 && (v.act == Act::kI8 || v.weights != Weights::kBf16))))
      return false;
  }
  for (const IsaRow& r : kIsas)
    for (Weights w : {Weights::kF32, Weights::kBf16, Weights::kI8}) {
      for (Cpu c : {Cpu::kIntel, Cpu::kOther})
        for (Act a : {Act::kF32, Act::kBf16, Act::kI8}) {
          const int64_t lim = small_n_max(r.isa, w, c, a);
          // Every kind's chunks the same width, and at least the small-N limit.
          const int64_t take = small_rows_max(r.isa, w, &Variant::n_max, c);
          if (take < lim || take != small_n_take(r.isa, w)) return false;
          for (int64_t n = 1; n <= lim + 1; ++n) {
            bool small = false, large = false;
            for (const Variant& v : kVariants) {
              if (v.isa != r.isa || !v.reads(w) || !act_runs(v.act, a) || !v.picks(n, c) || !v.takes(n))
                continue;
              if (v.layout == Layout::kGemm) large = true;
              if (v.layout == Layout::kLanes) small = true;
            }
            if ((n <= lim && !small) || !large) return false;
          }
        }
    }
  return true;
}
static_assert(list_is_consistent(), "kernel_list.inc: see the rules at its top");

// Rows (or row blocks) per region for kernels that read `regions` regions of `rows` rows at once, one long
// stream each, rows `row_bytes` apart (gemv_avx2.cc, spmm_lanes.h): rows / regions, lowered by up to 7 where
// that spreads the streams' starts over more 512-byte eighths of a 4 KB page. Streams that start a multiple
// of 4 KB apart (e.g. 96 rows of 768 floats) map to the same L1 sets, and their loads and prefetches evict
// each other. (spmm.cc: portable code, callable from every ISA file.)
int64_t staggered_rows_per_region(int64_t rows, int regions, int64_t row_bytes);

// Pack steps (pack.cc).
GemmLayout pack_gemm(const Compressed& w, int mr, int kc, int chunk, bool bf16);
// w: fp32 (held as bf16 when bf16) or int8 (scaled or not).
LanesLayout pack_lanes(const Compressed& w, int kb, bool bf16);

// GELU support (gelu.cc): gelu(y) = y * Phi(y); the kernels evaluate Q(t) = Phi(-t) = phi(t) * R(t) for
// t = |y| < 8, with R (the Mills ratio) as a degree-11 Taylor polynomial around the centre of each unit
// interval [i, i+1), i = 0..7. gelu_coefficients()[n * 8 + i] is the coefficient of (t - i - 0.5)^n on
// interval i, pre-multiplied by 1/sqrt(2 pi).
inline constexpr int kGeluDegree = 11;
const float* gelu_coefficients();

}  // namespace sparse24::kernels
