// The one list of SIMD kernel sets: one row per ISA with its tile sizes and entry points. Dispatch
// (spmm.cc), pack and the tests all go through it; adding an ISA is one row here plus its source file.
#pragma once
#include "packed.h"

namespace sparse24::kernels {

using SpmmFn = void (*)(const PackedMatrix::Impl&, const SpmmArgs&);

struct KernelSet {
  Isa isa;
  bool (*cpu_has)();  // the CPU runs this ISA's instructions
  int gemm_mr;        // compute-bound layout: rows per block
  int gemm_kc;        // compute-bound layout: K per block (multiple of 4)
  int gemm_chunk;     // compute-bound layout: row blocks per chunk
  int gemv_rb;        // memory-bound layout: rows per block
  int gemv_kb;        // memory-bound layout: K per block (multiple of 16)
  int small_n_max;    // N <= this uses the memory-bound path
  SpmmFn gemm;        // compute-bound path
  SpmmFn gemv;        // memory-bound path
};

// The row for a SIMD ISA; null for Isa::kRef (which delegates to spmm_reference).
const KernelSet* kernel_set(Isa isa);

// Per-ISA entry points (spmm_avx2.cc, spmm_avx512.cc).
void gemm_avx2(const PackedMatrix::Impl&, const SpmmArgs&);
void gemv_avx2(const PackedMatrix::Impl&, const SpmmArgs&);
void gemm_avx512(const PackedMatrix::Impl&, const SpmmArgs&);
void gemv_avx512(const PackedMatrix::Impl&, const SpmmArgs&);

// Pack steps (pack.cc).
GemmLayout pack_gemm(const Compressed& w, int mr, int kc, int chunk, bool round_bf16);
GemvLayout pack_gemv(const Compressed& w, int rb, int kb, bool bf16);
LanesLayout pack_lanes(const Compressed& w, int kb);

// GELU support (gelu.cc): gelu(y) = y * Phi(y); the kernels evaluate Q(t) = Phi(-t) = phi(t) * R(t) for
// t = |y| < 8, with R (the Mills ratio) as a degree-11 Taylor polynomial around the centre of each unit
// interval [i, i+1), i = 0..7. gelu_coefficients()[n * 8 + i] is the coefficient of (t - i - 0.5)^n on
// interval i, pre-multiplied by 1/sqrt(2 pi).
inline constexpr int kGeluDegree = 11;
const float* gelu_coefficients();

}  // namespace sparse24::kernels
