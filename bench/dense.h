// The dense baselines: OpenBLAS (loaded at run time, see openblas.h) and oneDNN, each in the forms a user
// would pick for Y = W X:
//   openblas_sgemm_nn     cblas_sgemm  Y[M,N] = W[M,K] X[K,N]
//   openblas_sgemm_nt     cblas_sgemm  Y^T[N,M] = X^T[N,K] W^T  (the "Linear" form: one token per row)
//   openblas_sgemv        cblas_sgemv  (N = 1)
//   onednn_sgemm          dnnl_sgemm   Y = W X
//   onednn_matmul         matmul primitive, src = W, weights = X, plain layouts
//   onednn_matmul_packed  matmul primitive in the Linear form, src = X^T, weights = W^T reordered once into
//                         the layout the primitive asks for (format_tag::any), dst = Y^T
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "harness.h"

namespace sparse24::bench {

// Rotated copies of the pruned dense weights, shared by the dense methods that read W in place.
struct DenseWeights {
  std::vector<Buffer> copies;
};
std::shared_ptr<DenseWeights> make_dense_weights(const Problem& p, int copies);

void add_openblas_candidates(const Problem& p, const std::shared_ptr<DenseWeights>& w, int threads,
                             std::vector<Candidate>& out, std::string* log);
void add_onednn_candidates(const Problem& p, const std::shared_ptr<DenseWeights>& w, int threads,
                           double cold_bytes, std::vector<Candidate>& out, std::string* log);

// One line each: "OpenBLAS 0.3.21 ... core SkylakeX (OPENBLAS_CORETYPE=SKYLAKEX) from PATH" or why it is
// missing; "oneDNN 2.6.x, effective ISA avx512_core_bf16".
std::string openblas_info();
std::string onednn_info();

}  // namespace sparse24::bench
