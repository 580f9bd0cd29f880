// The row regions the GEMV files (gemv_avx2.cc, gemv_avx512.cc) read at once. Plain C++ (no intrinsics), in
// an unnamed namespace: each ISA file instantiates its own copies with its own row kernels.
#pragma once
#include <cstdint>

#include "kernel_list.h"

namespace sparse24::kernels {
namespace {

// Rows [r0, r1) as R long sequential streams: stream i holds rows r0 + i per + t (t < per), and rows(r,
// stride) runs rows r, r + stride, ..., r + (R - 1) stride (its template argument the count: R, or 1); the
// rows past R regions go R adjacent rows at a time, then one by one. `per` is staggered
// (staggered_rows_per_region, kernel_list.h): gemm_small, 8 regions, N = 8, cold, one thread, AMD EPYC Zen 4,
// scratch program: 768x768 16.4 -> 18.1-18.4 GB/s, 3072x768 16.0 -> 18.1, 1536x384 16.6 -> 18.8-18.9.
template <int R, class Rows>
void over_regions(int64_t r0, int64_t r1, int64_t row_bytes, const Rows& rows) {
  const int64_t per = staggered_rows_per_region(r1 - r0, R, row_bytes);
  for (int64_t t = 0; t < per; ++t) rows.template operator()<R>(r0 + t, per);
  int64_t r = r0 + R * per;
  for (; r + R <= r1; r += R) rows.template operator()<R>(r, 1);
  for (; r < r1; ++r) rows.template operator()<1>(r, 0);
}

}  // namespace
}  // namespace sparse24::kernels
