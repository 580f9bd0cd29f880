// Rows of stored elements to fp32 and back, and the finiteness check every loader runs: what loading a
// model spends its time on besides reading the file (a 0.6B-parameter F16 GGUF: 1.2 GB widened, checked
// and hashed). Each gives exactly dtype.h's per-element values; the F16C paths are picked where the CPU has
// them, the plain loops otherwise (and by the tests).
#pragma once
#include <cstdint>

#include "sparse24/dtype.h"

namespace sparse24::kernels {

// IEEE half <-> fp32 (round to nearest even), as half_to_float / float_to_half.
void floats_to_half(const float* x, int64_t n, uint16_t* y);
void half_to_floats(const uint16_t* x, int64_t n, float* y);
// n elements of dtype t stored at p (any alignment) as floats: element_to_float over the row.
void elements_to_floats(DType t, const uint8_t* p, int64_t n, float* y);
// gemv_i8's weights (gemv.h): int8 with an fp32 scale per kGemvI8Group columns of a row. Symmetric
// round-to-nearest quantization of W [rows, cols]: each group's scale is its largest magnitude / 127 (1 for
// an all-zero group). q: rows * cols, scales: rows * ceil(cols / kGemvI8Group). Here, not beside gemv_i8,
// because the loaders (which the fuzz harnesses link without the kernels) quantize tables as they read.
constexpr int64_t kGemvI8Group = 64;
void quantize_gemv_i8(const float* w, int64_t rows, int64_t cols, int8_t* q, float* scales);
// Whether no x[i] is an infinity or a NaN.
bool all_finite(const float* x, int64_t n);
// The same for n bfloat16 values (their bits) at x.
bool all_finite_bf16(const uint16_t* x, int64_t n);

// The F16C paths (convert_avx2.cc): call only where f16c_supported() (taken as AVX2: every AVX2 CPU has it).
bool f16c_supported();
void floats_to_half_f16c(const float* x, int64_t n, uint16_t* y);
void half_to_floats_f16c(const uint16_t* x, int64_t n, float* y);

}  // namespace sparse24::kernels
