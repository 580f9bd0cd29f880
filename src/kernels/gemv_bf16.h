// Dense matrix-vector product with bfloat16 weights and fp32 activations and accumulation: the decoder's
// output head at batch 1 when its weights are held as bf16 (half the bytes a decoded token reads there).
#pragma once
#include <cstdint>

namespace sparse24::kernels {

// y[r] = sum_c bf16_to_float(w[r * cols + c]) * x[c] for r < rows, on `threads` OpenMP threads (rows split
// between them). The AVX2 path runs where the CPU has AVX2 and FMA, the reference elsewhere.
void gemv_bf16(const uint16_t* w, int64_t rows, int64_t cols, const float* x, float* y, int threads);
// The plain loop (fp32 accumulation in column order), for tests and CPUs without AVX2.
void gemv_bf16_reference(const uint16_t* w, int64_t rows, int64_t cols, const float* x, float* y);
// The AVX2 path on rows [r0, r1) (gemv_bf16_avx2.cc; call only where AVX2 and FMA exist).
void gemv_bf16_avx2(const uint16_t* w, int64_t r0, int64_t r1, int64_t cols, const float* x, float* y);

}  // namespace sparse24::kernels
