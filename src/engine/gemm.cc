#include "gemm.h"

#include <omp.h>

#include <dnnl.hpp>
#include <optional>
#include <vector>

#include "kernels/gemv.h"
#include "sparse24/error.h"
#include "sparse24/spmm.h"

namespace sparse24::engine::detail {
namespace {

struct Dnnl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};
Dnnl& dnnl_ctx() {
  static Dnnl ctx;
  return ctx;
}

}  // namespace

struct GemmExec::Impl {
  int64_t m = 0, k = 0, n = 0;
  Epilogue ep = Epilogue::kNone;
  std::vector<float> bias;
  // sparse
  std::optional<PackedMatrix> packed;
  // dense
  std::vector<float> w;
  dnnl::algorithm eltwise = dnnl::algorithm::undef;
  // The eltwise primitive for the last N it ran at (created again when N changes).
  mutable int64_t eltwise_n = -1;
  mutable std::optional<dnnl::eltwise_forward> eltwise_prim;
  mutable dnnl::memory::desc eltwise_md;
};

GemmExec::GemmExec() = default;
GemmExec::~GemmExec() = default;
GemmExec::GemmExec(GemmExec&&) noexcept = default;
GemmExec& GemmExec::operator=(GemmExec&&) noexcept = default;

// The fields both paths share.
GemmExec::Impl& GemmExec::init(const Gemm& g, int64_t n) {
  impl_ = std::make_unique<Impl>();
  Impl& s = *impl_;
  s.m = g.m;
  s.k = g.k;
  s.n = n;
  s.ep = g.epilogue;
  s.bias = g.bias;
  return s;
}

GemmExec GemmExec::sparse(const Gemm& g, int64_t n) {
  if (!g.pruned) throw Error("layer '" + g.name + "' is not pruned: no sparse path");
  GemmExec e;
  Impl& s = e.init(g, n);
  PackOptions o;
  o.bf16_activations = g.activations == SparseActivations::kBf16;
  o.int8_activations = g.activations == SparseActivations::kInt8;
  o.layouts = layouts_for_n(n, g.sparse, o);
  // bf16 or int8 values: short inputs (a query at a capacity of many tokens) get the memory-bound layout as
  // well, whose kernels compute on the narrow values where the compute-bound ones first widen each block
  // to fp32 (and until session 39 that layout held them as fp32: 2.1 bytes per weight). With
  // AVX-512 only: there its kernels ran every N they pick as fast as the compute-bound tile or faster
  // (Zen 4); the AVX2 ones, forced on the same Zen 4, lost to it at 8 tokens (mpnet 18.4 ms against 13.7,
  // docs/performance.md, session 33), and their limits are Zen 3's, set before that tile existed.
  if (g.sparse.dtype != DType::kF32 && o.layouts == PackLayouts::kLargeN && active_isa() == Isa::kAvx512)
    o.layouts = PackLayouts::kBoth;
  s.packed = pack(g.sparse, o);
  return e;
}

GemmExec GemmExec::dense(const Gemm& g, int64_t n) {
  GemmExec e;
  Impl& s = e.init(g, n);
  s.w = g.pruned ? decompress(g.sparse).to_float() : g.dense;
  if (static_cast<int64_t>(s.w.size()) != g.m * g.k)
    throw Error("layer '" + g.name + "': weight size mismatch");
  if (s.ep != Epilogue::kNone)
    s.eltwise = s.ep == Epilogue::kRelu ? dnnl::algorithm::eltwise_relu : dnnl::algorithm::eltwise_gelu_erf;
  return e;
}

void GemmExec::run(const float* x, float* y, int64_t n, int threads) const {
  const Impl& s = *impl_;
  if (s.packed) {
    spmm(*s.packed, x, n, n, y, n, s.bias.empty() ? nullptr : s.bias.data(), s.ep, threads);
    return;
  }
  // Short inputs: our small-N kernel (kernels/gemv.h), which streams W in place with bias and epilogue in
  // registers. In the engine it ran MiniLM's dense GEMMs at 8 tokens in about half the time of oneDNN's
  // matmul primitive (brgemm, the path until session 32) and of dnnl_sgemm on AVX2 (docs/design.md).
  if (n >= 2 && n <= kernels::kGemmSmallMaxN) {
    kernels::gemm_small(s.w.data(), s.m, s.k, x, n, y, s.bias.empty() ? nullptr : s.bias.data(), s.ep,
                        threads);
    return;
  }
  float beta = 0.0f;
  if (!s.bias.empty()) {
    for (int64_t r = 0; r < s.m; ++r) std::fill(y + r * n, y + (r + 1) * n, s.bias[r]);
    beta = 1.0f;
  }
  dnnl_sgemm('N', 'N', s.m, n, s.k, 1.0f, s.w.data(), s.k, x, n, beta, y, n);
  if (s.eltwise != dnnl::algorithm::undef) {
    Dnnl& ctx = dnnl_ctx();
    if (s.eltwise_n != n) {
      s.eltwise_md = dnnl::memory::desc({s.m * n}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::a);
      dnnl::eltwise_forward::primitive_desc pd(
          dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, s.eltwise, s.eltwise_md, 0.0f,
                                      0.0f),
          ctx.engine);
      s.eltwise_prim = dnnl::eltwise_forward(pd);
      s.eltwise_n = n;
    }
    dnnl::memory mem(s.eltwise_md, ctx.engine, y);
    s.eltwise_prim->execute(ctx.stream, {{DNNL_ARG_SRC, mem}, {DNNL_ARG_DST, mem}});
    ctx.stream.wait();
  }
}

bool GemmExec::is_sparse() const { return impl_ && impl_->packed.has_value(); }

size_t GemmExec::weight_bytes() const {
  const Impl& s = *impl_;
  const size_t b = s.bias.size() * sizeof(float);
  return b + (s.packed ? s.packed->bytes() : s.w.size() * sizeof(float));
}

}  // namespace sparse24::engine::detail
