// The reference multiply: the definition every fast kernel must match.
//
//   Y[M, N] = epilogue(W[M, K] X[K, N] + bias[M])
//
// W is compressed 2:4 (any dtype; values converted to float), X and Y are row-major fp32 with leading
// dimensions ldx >= N and ldy >= N. For each kept value the metadata code names the activation row it
// multiplies, as the Sparse Tensor Core's multiplexer does: a plain scalar loop, fp32 accumulation in
// increasing K order. Rows of X past K (the zero padding of the last group) are never read.
#pragma once
#include <cstdint>

#include "sparse24/compressed.h"

namespace sparse24 {

enum class Epilogue : uint8_t {
  kNone,
  kRelu,  // max(y, 0)
  kGelu,  // y * 0.5 * (1 + erf(y / sqrt(2)))  (the exact form; kernels may approximate within 1e-6 relative)
};
const char* epilogue_name(Epilogue e);
// Applies the epilogue to one value (the reference definition).
float apply_epilogue(float y, Epilogue e);

// bias may be null (no bias).
void spmm_reference(const Compressed& w, const float* x, int64_t n, int64_t ldx, float* y, int64_t ldy,
                    const float* bias = nullptr, Epilogue ep = Epilogue::kNone);

// Dense reference for comparisons: Y = epilogue(W X + bias) with W [M, K] row-major fp32.
void gemm_reference(const float* w, int64_t m, int64_t k, const float* x, int64_t n, int64_t ldx, float* y,
                    int64_t ldy, const float* bias = nullptr, Epilogue ep = Epilogue::kNone);

}  // namespace sparse24
