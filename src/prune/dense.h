// Double-precision dense linear algebra for SparseGPT (internal): a blocked matrix product with packed
// operands and register-tiled kernels per ISA, and the factorization SparseGPT needs (the upper Cholesky
// factor of H^-1) built on it, blocked and multi-threaded.
//
// Every kernel sums the products of one element in k order with fused multiply-adds, in chunks of kKc, and
// subtracts each chunk's sum from C: the result does not depend on the ISA (AVX-512, AVX2 or the portable
// loop), on the tile shape or on the number of threads.
#pragma once
#include <cstdint>
#include <vector>

#include "sparse24/spmm.h"

namespace sparse24::dense {

constexpr int64_t kKc = 128;  // products summed before each subtraction from C

// A matrix operand: element (i, j) at data[i * rs + j * cs].
struct View {
  const double* data;
  int64_t rs, cs;
};

// C[m, n] -= A[m, k] B[k, n] (C row-major with leading dimension ldc), on the calling thread, with the
// kernels of `isa` (kRef: the portable loop).
void gemm_sub(int64_t m, int64_t n, int64_t k, View a, View b, double* c, int64_t ldc,
              Isa isa = active_isa());

// U, upper triangular with a positive diagonal and zeros below it, with U^T U = H^-1, for H symmetric
// positive definite (row-major n x n, taken over: the result is computed in its memory). Blocked in
// `block` columns, multi-threaded (OpenMP), its products on `isa`'s kernels: the same bits for any ISA and
// thread count. Throws Error naming the input column if H is not (numerically) positive definite.
std::vector<double> upper_cholesky_of_inverse(std::vector<double> h, int64_t n, int64_t block = 192,
                                              Isa isa = active_isa());

// The same by plain loops (Cholesky, triangular inverse, one element at a time): the reference.
std::vector<double> upper_cholesky_of_inverse_reference(std::vector<double> h, int64_t n);

}  // namespace sparse24::dense
