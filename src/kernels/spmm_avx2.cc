// AVX2 kernels (compiled with -mavx2 -mfma -mf16c; reached only when cpu_has_avx2() said yes): nothing in
// this file runs before dispatch has checked the CPU.
#include <immintrin.h>

#include "kernel_list.h"
#include "spmm_driver.h"
#include "spmm_lanes.h"
#include "spmm_traits_avx2.h"

namespace sparse24::kernels {

// Entry points: one per row of kernel_list.inc.

// 4 rows x NV vectors of 8 columns (Avx2: spmm_traits_avx2.h). NV = 1 for N <= 8, which the 16-column panel
// pads to 16. NV = 3 (24 columns; 12 of the 16 registers hold sums) runs about 6%
// faster per computed column than NV = 2 (the rows' rates), but pads N up to a multiple of 24. AVX2 forced
// on an AVX-512 machine against AVX2 oneDNN and OpenBLAS (docs/performance.md): N = 128 and 64 +5-7% with
// 16 columns, N = 512 +3-5% with 24.
void avx2_gemm_4x8(const PackedMatrix::Impl& p, const SpmmArgs& a) { gemm_run<Avx2, 4, 1>(p, a); }
void avx2_gemm_4x16(const PackedMatrix::Impl& p, const SpmmArgs& a) { gemm_run<Avx2, 4, 2>(p, a); }
void avx2_gemm_4x24(const PackedMatrix::Impl& p, const SpmmArgs& a) { gemm_run<Avx2, 4, 3>(p, a); }
// The 4x24 tile over the memory-bound layout.
void avx2_lanes_gemm_4x24(const PackedMatrix::Impl& p, const SpmmArgs& a) {
  gemm_run<Avx2, 4, 3, true>(p, a);
}

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
