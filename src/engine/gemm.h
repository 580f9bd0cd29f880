// One GEMM layer, prepared for the N it will mostly run at (the sparse path packs the layout that N uses)
// and run at any N: the 2:4 sparse kernel (packed weights, one layout) or dense: at N = 2..16 the project's
// small-N kernel (kernels::gemm_small, the weights in place, bias and epilogue in registers), else oneDNN
// (dnnl_sgemm over the dense weights, bias preloaded into Y with beta = 1, ReLU/GELU by a oneDNN eltwise
// primitive in place). Y[M, N] = epilogue(W X + bias), X [K, N], Y [M, N] row-major, ld = N.
#pragma once
#include <cstdint>
#include <memory>

#include "sparse24/engine.h"

namespace sparse24::engine::detail {

class GemmExec {
 public:
  // Prepares the sparse path; g must be pruned.
  static GemmExec sparse(const Gemm& g, int64_t n);
  // Prepares the dense path (a pruned g is decompressed).
  static GemmExec dense(const Gemm& g, int64_t n);
  GemmExec();
  ~GemmExec();
  GemmExec(GemmExec&&) noexcept;
  GemmExec& operator=(GemmExec&&) noexcept;

  void run(const float* x, float* y, int64_t n, int threads) const;
  bool is_sparse() const;
  size_t weight_bytes() const;  // weights + bias

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  Impl& init(const Gemm& g, int64_t n);
};

}  // namespace sparse24::engine::detail
