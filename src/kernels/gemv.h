// A dense matrix-vector product with bfloat16, fp32 or int8 weights (fp32 activations and accumulation), for
// the decoder's output head at batch 1: y[r] = sum_c W[r, c] * x[c] for r < rows, W row-major [rows, cols]. A
// decoded token's head is a GEMV over the whole vocabulary (49,152 x 576 for SmolLM2): its time is its
// bytes over the memory bandwidth, read as eight long streams at once (gemv_avx2.cc: eight row regions, or
// four of int8 rows with their scales). fp32, SmolLM2's tied head, one thread, quiet Zen 3: see
// gemv_avx2.cc for the rates against oneDNN's sgemm. Also the dense small-N GEMM (gemm_small, below).
#pragma once
#include <cstdint>

#include "convert.h"
#include "sparse24/reference.h"

namespace sparse24::kernels {

// On `threads` OpenMP threads (rows split between them); the AVX2 path where the CPU has AVX2 and FMA,
// the reference elsewhere.
void gemv_bf16(const uint16_t* w, int64_t rows, int64_t cols, const float* x, float* y, int threads);
// The plain loop (fp32 accumulation in column order), for tests and CPUs without AVX2.
void gemv_bf16_reference(const uint16_t* w, int64_t rows, int64_t cols, const float* x, float* y);
// The AVX2 path on rows [r0, r1) (gemv_avx2.cc; call only where AVX2 and FMA exist).
void gemv_bf16_avx2(const uint16_t* w, int64_t r0, int64_t r1, int64_t cols, const float* x, float* y);

// The same with fp32 weights.
void gemv_f32(const float* w, int64_t rows, int64_t cols, const float* x, float* y, int threads);
void gemv_f32_reference(const float* w, int64_t rows, int64_t cols, const float* x, float* y);
void gemv_f32_avx2(const float* w, int64_t r0, int64_t r1, int64_t cols, const float* x, float* y);

// int8 weights with an fp32 scale per kGemvI8Group columns of a row: y[r] = sum over groups g of
// scales[r, g] * sum_{c in g} W[r, c] x[c]. scales: [rows, ceil(cols / kGemvI8Group)]. The decoder's output
// head with int8 weights (1.06 bytes per weight with the scales, as llama.cpp's Q8_0 head).
// (kGemvI8Group and quantize_gemv_i8: convert.h.)
void gemv_i8(const int8_t* w, const float* scales, int64_t rows, int64_t cols, const float* x, float* y,
             int threads);
void gemv_i8_reference(const int8_t* w, const float* scales, int64_t rows, int64_t cols, const float* x,
                       float* y);
void gemv_i8_avx2(const int8_t* w, const float* scales, int64_t r0, int64_t r1, int64_t cols, const float* x,
                  float* y);
// The same with AVX-512 (gemv_avx512.cc; call only where AVX-512 F/BW/VL exist). gemv_i8 takes it on Intel's
// cores; AMD's keep the AVX2 rows (not measured there).
void gemv_i8_avx512(const int8_t* w, const float* scales, int64_t r0, int64_t r1, int64_t cols,
                    const float* x, float* y);

// Rows of ggml blocks as a GGUF file stores them, the decoder's output head left in its mapped file: F32,
// F16, BF16, and the quantized Q8_0 and Q6_K (the heads llama.cpp writes: a Q8_0 file's Q8_0, every other
// quantized file's Q6_K).
// Each block is dequantized in registers, its sums over x scaled as the block's scales say: never widened to
// an fp32 table (Llama 3's 128k x 4096 Q6_K head: 430 MB as stored, 2.1 GB in fp32). w: `rows` rows of
// ggml_row_bytes(type, cols) bytes, cols a whole number of the type's blocks.
bool gemv_ggml_supported(uint32_t ggml_type);
int64_t ggml_row_bytes(uint32_t ggml_type, int64_t cols);  // (0 for an unsupported type)
void gemv_ggml(uint32_t ggml_type, const uint8_t* w, int64_t rows, int64_t cols, const float* x, float* y,
               int threads);
// Each row dequantized (sparse24::dequantize_row, gguf.h) and summed in column order: the fast path's check.
void gemv_ggml_reference(uint32_t ggml_type, const uint8_t* w, int64_t rows, int64_t cols, const float* x,
                         float* y);
// The rows as fp32 into out[rows * cols] (a head widened a block at a time for many tokens): dequantize_row
// (its AVX2 paths: Q6_K 0.5 ns a value into a 64 MB buffer where the plain loop took 1.4-2.3, Intel Xeon
// model 207).
void ggml_rows_to_floats(uint32_t ggml_type, const uint8_t* w, int64_t rows, int64_t cols, float* out);
// The AVX2 path on rows [r0, r1) (call only where AVX2, FMA and F16C exist).
void gemv_ggml_avx2(uint32_t ggml_type, const uint8_t* w, int64_t r0, int64_t r1, int64_t cols,
                    const float* x, float* y);
// The AVX-512 path (gemv_avx512.cc; call only where AVX-512 F/BW/VL exist): the quantized types, Q8_0 and
// Q6_K, on 16 lanes, half the widenings, conversions and FMAs per value of the AVX2 rows; the float types
// on the AVX2 rows. gemv_ggml takes it where gemv_i8 takes its AVX-512 rows.
void gemv_ggml_avx512(uint32_t ggml_type, const uint8_t* w, int64_t r0, int64_t r1, int64_t cols,
                      const float* x, float* y);
// Every IEEE half as fp32 (65,536 floats, made once): a ggml block's fp16 scale is then one load, no
// conversion on the shuffle port (two of the six shuffle-port uops per Q8_0 block that bound the AVX2 rows
// at 12.5 GB/s on an Intel Xeon model 207).
const float* half_floats();

// A dense product at small N, the engine's dense layers on short inputs: Y = epilogue(W X + bias), W [m, k]
// row-major fp32, X [k, n] and Y [m, n] row-major (ld n), bias [m] or null, 1 <= n <= kGemmSmallMaxN. The
// AVX2 path (gemv_avx2.cc) streams W in place, eight rows at a time from eight regions of the rows (six
// past 8 columns), the n columns in one or two vectors; the reference (gemm_reference) elsewhere.
constexpr int64_t kGemmSmallMaxN = 16;
void gemm_small(const float* w, int64_t m, int64_t k, const float* x, int64_t n, float* y, const float* bias,
                Epilogue ep, int threads);
// The AVX2 path on rows [r0, r1) (call only where AVX2 and FMA exist).
void gemm_small_avx2(const float* w, int64_t r0, int64_t r1, int64_t k, const float* x, int64_t n, float* y,
                     const float* bias, Epilogue ep);

}  // namespace sparse24::kernels
