// What the GEMV files (gemv_avx2.cc, gemv_avx512.cc) share: the row regions they read at once, the int8
// rows and the rows of ggml blocks (Q8_0, Q6_K), written once over a vector type. Plain C++ (no intrinsics),
// in an unnamed namespace: each ISA file instantiates its own copies with its own vector struct, so no ISA's
// code can leak into another's.
#pragma once
#include <cstdint>
#include <cstring>

#include "gemv.h"
#include "ggml_blocks.h"
#include "kernel_list.h"
#include "sparse24/gguf.h"

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

// int8 rows r, r + stride, ...: per group of kGemvI8Group columns a partial sum per row, scaled into the
// row's total (the reference's order of operations per group; its sums within a group differ by lanes).
// Whole groups run a fixed-length inner loop with nothing else in it; a last, partial group (cols not a
// multiple of the group) runs V::kLanes columns at a time and then one by one. (The first form, one loop for
// every group with its bounds and its one-by-one tail computed per group, streamed the SmolLM2 head at 13.8
// GB/s against the bf16 GEMV's 20.6 on a Zen 4: the group's bookkeeping, not the memory, was its bound.)
// V: the vector (V::T) of kLanes floats, zero(), load(const float*), widen(const int8_t*: kLanes int8 as
// floats), fma(a, b, c), splat(const float*), sum(v).
template <class V, int R>
void gemv_i8_rows(const int8_t* w, const float* scales, int64_t r, int64_t stride, int64_t cols,
                  const float* x, float* y) {
  static_assert(kGemvI8Group % V::kLanes == 0);
  const int64_t groups = (cols + kGemvI8Group - 1) / kGemvI8Group, whole = cols / kGemvI8Group;
  const int8_t* row[R];
  const float* scale[R];
  for (int i = 0; i < R; ++i) {
    row[i] = w + (r + i * stride) * cols;
    scale[i] = scales + (r + i * stride) * groups;
  }
  typename V::T a[R];
  for (int i = 0; i < R; ++i) a[i] = V::zero();
  for (int64_t g = 0; g < whole; ++g) {
    const int64_t c0 = g * kGemvI8Group;
    typename V::T p[R];
    for (int i = 0; i < R; ++i) p[i] = V::zero();
    for (int64_t c = c0; c < c0 + kGemvI8Group; c += V::kLanes) {
      const typename V::T xv = V::load(x + c);
      for (int i = 0; i < R; ++i) p[i] = V::fma(V::widen(row[i] + c), xv, p[i]);
    }
    for (int i = 0; i < R; ++i) a[i] = V::fma(p[i], V::splat(scale[i] + g), a[i]);
  }
  float s[R];
  for (int i = 0; i < R; ++i) s[i] = V::sum(a[i]);
  if (whole < groups) {
    const int64_t c0 = whole * kGemvI8Group, cv = c0 + (cols - c0) / V::kLanes * V::kLanes;
    for (int i = 0; i < R; ++i) {
      typename V::T p = V::zero();
      for (int64_t c = c0; c < cv; c += V::kLanes) p = V::fma(V::widen(row[i] + c), V::load(x + c), p);
      float t = V::sum(p);
      for (int64_t c = cv; c < cols; ++c) t += static_cast<float>(row[i][c]) * x[c];
      s[i] += scale[i][whole] * t;
    }
  }
  for (int i = 0; i < R; ++i) y[r + i * stride] = s[i];
}

// int8 rows come from 4 regions: each region is two streams, its weights and its scales, so 4 regions are the
// 8 streams the bf16 GEMV reads. The SmolLM2 head (49,152 x 576, 30 MB with its scales), one thread, AMD EPYC
// Zen 4 (family 25 model 17), scratch program, best of 40 over 4 copies (GB/s): 8 regions 14.9-15.8, 6
// 16.7, 5 20.0-20.2, 4 18.9-20.1, 3 19.5-21.2, 2 16.5; the bf16 GEMV beside it 20-21. (With the first form of
// gemv_i8_rows above, 4 regions read 16.6-17.1.)
constexpr int kI8Regions = 4;

template <class V>
void gemv_i8_regions(const int8_t* w, const float* scales, int64_t r0, int64_t r1, int64_t cols,
                     const float* x, float* y) {
  over_regions<kI8Regions>(r0, r1, cols, [&]<int R>(int64_t r, int64_t stride) {
    gemv_i8_rows<V, R>(w, scales, r, stride, cols, x, y);
  });
}

// The rows of ggml blocks as a GGUF file stores them (gemv_ggml), from kI8Regions regions as the int8 rows.
// V as above, with mul(a, b) and, for Q6_K, stage_q6_k(block, q, scale): the block's 256 q as int8 in order
// into q and its 16 d * scale (one per 16 columns) as fp32 into scale, the reference's (d * scale) * q then
// one multiply.

// Q8_0 (34 bytes per 32 columns: an fp16 scale d, 32 int8 q; w = d q): per block and row the sum of q x,
// then times d into the row's total; d read from `halves` (half_floats(): a load, no conversion).
template <class V, int R>
void q8_0_rows(const uint8_t* w, int64_t r, int64_t stride, int64_t cols, const float* x, float* y,
               const float* halves) {
  constexpr int kSteps = 32 / V::kLanes;
  const int64_t row_bytes = cols / 32 * kQ8Bytes;
  const uint8_t* row[R];
  typename V::T a[R];
  for (int i = 0; i < R; ++i) {
    row[i] = w + (r + i * stride) * row_bytes;
    a[i] = V::zero();
  }
  for (int64_t c = 0, at = 0; c < cols; c += 32, at += kQ8Bytes) {
    typename V::T xv[kSteps];
    for (int k = 0; k < kSteps; ++k) xv[k] = V::load(x + c + k * V::kLanes);
    for (int i = 0; i < R; ++i) {
      const auto* q = reinterpret_cast<const int8_t*>(row[i] + at + 2);
      typename V::T s = V::mul(V::widen(q), xv[0]);
      for (int k = 1; k < kSteps; ++k) s = V::fma(V::widen(q + k * V::kLanes), xv[k], s);
      uint16_t d;
      std::memcpy(&d, row[i] + at, 2);
      a[i] = V::fma(s, V::splat(halves + d), a[i]);
    }
  }
  for (int i = 0; i < R; ++i) y[r + i * stride] = V::sum(a[i]);
}

// Q6_K (210 bytes per 256 columns): each row's block staged (V::stage_q6_k), then per 16 columns the sum of
// q x, times d * scale into the row's total; x read once per 16 columns for the R rows. Each row's lines
// kAhead bytes on are prefetched (the next row's block, for 2048 columns): Llama 3.2 1B's head, cold, one
// thread, AVX-512, Intel Xeon model 207, four alternating pairs of a scratch program, 0.084-0.100 ns a value
// without, 0.073-0.092 with.
template <class V, int R>
void q6_k_rows(const uint8_t* w, int64_t r, int64_t stride, int64_t cols, const float* x, float* y,
               const float* halves) {
  constexpr int kSteps = 16 / V::kLanes;
  constexpr int64_t kAhead = 1680;
  const int64_t row_bytes = cols / 256 * kQ6Bytes;
  const uint8_t* row[R];
  typename V::T a[R];
  for (int i = 0; i < R; ++i) {
    row[i] = w + (r + i * stride) * row_bytes;
    a[i] = V::zero();
  }
  alignas(64) int8_t q[R][256];
  alignas(64) float scale[R][16];
  for (int64_t c = 0, at = 0; c < cols; c += 256, at += kQ6Bytes) {
    for (int i = 0; i < R; ++i) {
      for (int64_t l = 0; l < kQ6Bytes; l += 64) __builtin_prefetch(row[i] + at + kAhead + l);
      V::stage_q6_k(row[i] + at, q[i], scale[i], halves);
    }
    for (int g = 0; g < 16; ++g) {
      typename V::T xv[kSteps];
      for (int k = 0; k < kSteps; ++k) xv[k] = V::load(x + c + 16 * g + k * V::kLanes);
      for (int i = 0; i < R; ++i) {
        typename V::T s = V::mul(V::widen(q[i] + 16 * g), xv[0]);
        for (int k = 1; k < kSteps; ++k) s = V::fma(V::widen(q[i] + 16 * g + k * V::kLanes), xv[k], s);
        a[i] = V::fma(s, V::splat(scale[i] + g), a[i]);
      }
    }
  }
  for (int i = 0; i < R; ++i) y[r + i * stride] = V::sum(a[i]);
}

// Q8_0 and Q6_K rows [r0, r1) (the types gemv_ggml's quantized rows hold).
template <class V>
void ggml_quantized_regions(GgmlType type, const uint8_t* w, int64_t r0, int64_t r1, int64_t cols,
                            const float* x, float* y) {
  const float* halves = half_floats();
  if (type == GgmlType::kQ8_0) {
    over_regions<kI8Regions>(r0, r1, cols / 32 * kQ8Bytes, [&]<int R>(int64_t r, int64_t stride) {
      q8_0_rows<V, R>(w, r, stride, cols, x, y, halves);
    });
  } else {
    over_regions<kI8Regions>(r0, r1, cols / 256 * kQ6Bytes, [&]<int R>(int64_t r, int64_t stride) {
      q6_k_rows<V, R>(w, r, stride, cols, x, y, halves);
    });
  }
}

}  // namespace
}  // namespace sparse24::kernels
