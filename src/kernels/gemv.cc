// The dense GEMV: the references and the dispatch (gemv.h).
#include "gemv.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernel_list.h"
#include "sparse24/dtype.h"
#include "sparse24/error.h"
#include "sparse24/gguf.h"

namespace sparse24::kernels {

namespace {

float widen(uint16_t v) { return bf16_to_float(v); }
float widen(float v) { return v; }

template <typename T>
void reference(const T* w, int64_t rows, int64_t cols, const float* x, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    float s = 0;
    for (int64_t c = 0; c < cols; ++c) s += widen(w[r * cols + c]) * x[c];
    y[r] = s;
  }
}

bool has_avx2() {
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return avx2;
}

// Where the int8 and quantized ggml rows run on AVX-512: Intel's cores (measured there, docs/kernels.md,
// sessions 46 and 48); AMD's keep the AVX2 rows (not measured there).
bool gemv_avx512() {
  static const bool avx512 = cpu_has_avx512() && __builtin_cpu_is("intel");
  return avx512;
}

// avx2_rows(r0, r1) on `threads` OpenMP threads, each a contiguous share of the rows (in multiples of 8).
template <typename RowsFn>
void split_rows(int64_t rows, int threads, const RowsFn& avx2_rows) {
  const int t = static_cast<int>(std::clamp<int64_t>(threads, 1, std::max<int64_t>(1, rows / 64)));
  const int64_t share = ((rows + 7) / 8 + t - 1) / t * 8;
#pragma omp parallel for num_threads(t) schedule(static, 1) if (t > 1)
  for (int i = 0; i < t; ++i) {
    const int64_t r0 = std::min(rows, i * share), r1 = std::min(rows, r0 + share);
    if (r0 < r1) avx2_rows(r0, r1);
  }
}

template <typename T>
void dispatch(const T* w, int64_t rows, int64_t cols, const float* x, float* y, int threads,
              void (*avx2_rows)(const T*, int64_t, int64_t, int64_t, const float*, float*)) {
  if (!has_avx2()) return reference(w, rows, cols, x, y);
  split_rows(rows, threads, [&](int64_t r0, int64_t r1) { avx2_rows(w, r0, r1, cols, x, y); });
}

}  // namespace

void gemv_bf16_reference(const uint16_t* w, int64_t rows, int64_t cols, const float* x, float* y) {
  reference(w, rows, cols, x, y);
}
void gemv_f32_reference(const float* w, int64_t rows, int64_t cols, const float* x, float* y) {
  reference(w, rows, cols, x, y);
}
void gemv_bf16(const uint16_t* w, int64_t rows, int64_t cols, const float* x, float* y, int threads) {
  dispatch(w, rows, cols, x, y, threads, gemv_bf16_avx2);
}
void gemv_f32(const float* w, int64_t rows, int64_t cols, const float* x, float* y, int threads) {
  dispatch(w, rows, cols, x, y, threads, gemv_f32_avx2);
}

void gemv_i8_reference(const int8_t* w, const float* scales, int64_t rows, int64_t cols, const float* x,
                       float* y) {
  const int64_t groups = (cols + kGemvI8Group - 1) / kGemvI8Group;
  for (int64_t r = 0; r < rows; ++r) {
    float s = 0;
    for (int64_t g = 0; g < groups; ++g) {
      float part = 0;
      for (int64_t c = g * kGemvI8Group; c < std::min(cols, (g + 1) * kGemvI8Group); ++c)
        part += static_cast<float>(w[r * cols + c]) * x[c];
      s += scales[r * groups + g] * part;
    }
    y[r] = s;
  }
}

void gemv_i8(const int8_t* w, const float* scales, int64_t rows, int64_t cols, const float* x, float* y,
             int threads) {
  if (!has_avx2()) return gemv_i8_reference(w, scales, rows, cols, x, y);
  split_rows(rows, threads, [&](int64_t r0, int64_t r1) {
    (gemv_avx512() ? gemv_i8_avx512 : gemv_i8_avx2)(w, scales, r0, r1, cols, x, y);
  });
}

const float* half_floats() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t h = 0; h < 65536; ++h) t[h] = half_to_float(static_cast<uint16_t>(h));
    return t;
  }();
  return table.data();
}

bool gemv_ggml_supported(uint32_t ggml_type) {
  switch (static_cast<GgmlType>(ggml_type)) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
    case GgmlType::kQ8_0:
    case GgmlType::kQ6_K:
      return true;
    default:
      return false;
  }
}

int64_t ggml_row_bytes(uint32_t ggml_type, int64_t cols) {
  const GgmlTypeInfo* ti = ggml_type_info(ggml_type);
  if (!gemv_ggml_supported(ggml_type) || ti == nullptr || cols % ti->block != 0) return 0;
  return cols / ti->block * ti->block_bytes;
}

namespace {

// ggml_row_bytes, or an Error naming `who` for a type or width the GEMV does not run.
int64_t checked_row_bytes(uint32_t ggml_type, int64_t cols, const char* who) {
  const int64_t row_bytes = ggml_row_bytes(ggml_type, cols);
  if (row_bytes == 0)
    throw Error(std::string(who) + ": " + ggml_type_name(ggml_type) + " rows of " + std::to_string(cols) +
                " are not supported");
  return row_bytes;
}

}  // namespace

void gemv_ggml_reference(uint32_t ggml_type, const uint8_t* w, int64_t rows, int64_t cols, const float* x,
                         float* y) {
  const int64_t row_bytes = checked_row_bytes(ggml_type, cols, "gemv_ggml");
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(ggml_type, w + r * row_bytes, row.data(), cols);
    float s = 0;
    for (int64_t c = 0; c < cols; ++c) s += row[c] * x[c];
    y[r] = s;
  }
}

void gemv_ggml(uint32_t ggml_type, const uint8_t* w, int64_t rows, int64_t cols, const float* x, float* y,
               int threads) {
  checked_row_bytes(ggml_type, cols, "gemv_ggml");
  // (Every AVX2 CPU has F16C, as convert.cc assumes.)
  if (!has_avx2()) return gemv_ggml_reference(ggml_type, w, rows, cols, x, y);
  split_rows(rows, threads, [&](int64_t r0, int64_t r1) {
    (gemv_avx512() ? gemv_ggml_avx512 : gemv_ggml_avx2)(ggml_type, w, r0, r1, cols, x, y);
  });
}

void ggml_rows_to_floats(uint32_t ggml_type, const uint8_t* w, int64_t rows, int64_t cols, float* out) {
  checked_row_bytes(ggml_type, cols, "ggml_rows_to_floats");
  dequantize_row(ggml_type, w, out, rows * cols);  // (rows of whole blocks, one after another)
}

void gemm_small(const float* w, int64_t m, int64_t k, const float* x, int64_t n, float* y, const float* bias,
                Epilogue ep, int threads) {
  if (n < 1 || n > kGemmSmallMaxN) throw Error("gemm_small: n must be 1.." + std::to_string(kGemmSmallMaxN));
  if (!has_avx2()) return gemm_reference(w, m, k, x, n, n, y, n, bias, ep);
  split_rows(m, threads, [&](int64_t r0, int64_t r1) { gemm_small_avx2(w, r0, r1, k, x, n, y, bias, ep); });
}

}  // namespace sparse24::kernels
