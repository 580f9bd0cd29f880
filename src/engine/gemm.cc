#include "gemm.h"

#include <omp.h>

#include <dnnl.hpp>
#include <optional>
#include <string>
#include <vector>

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

// The dense path at 2 <= N <= kMatmulMaxN where oneDNN's matmul primitive runs its brgemm kernel (AVX-512):
// the same feature-major product Y = W X (W as the primitive's source, X as its "weights", both plain),
// bias preloaded into Y and a sum post-op, the epilogue an eltwise post-op. dnnl_sgemm's AVX-512 kernel
// runs N = 2..16 in about the time of 16 columns; this form in about the time of 8 (docs/design.md). N = 1
// (dnnl_sgemm's GEMV is faster) and larger N (no more than 1.0-1.2x, and a primitive per N) keep
// dnnl_sgemm; so does a CPU without brgemm (AVX2: the jit gemm, no faster).
constexpr int64_t kMatmulMaxN = 16;
struct SmallNMatmul {
  int threads = 0;  // 0: not made yet; oneDNN's OpenMP primitives keep the thread count they were made with
  bool brgemm = false;  // false: this N keeps dnnl_sgemm
  dnnl::matmul prim;
  dnnl::memory::desc w, x, y;
};

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
  // The small-N matmul per N (index N), made at first use and again when the thread count changes.
  mutable std::vector<SmallNMatmul> small;

  const SmallNMatmul* small_n(int64_t cols, int threads) const;
};

const SmallNMatmul* GemmExec::Impl::small_n(int64_t cols, int threads) const {
  if (cols < 2 || cols > kMatmulMaxN) return nullptr;
  if (small.empty()) small.resize(kMatmulMaxN + 1);
  SmallNMatmul& mm = small[static_cast<size_t>(cols)];
  if (mm.threads != threads) {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    mm.threads = threads;
    mm.w = dnnl::memory::desc({m, k}, dt::f32, tag::ab);
    mm.x = dnnl::memory::desc({k, cols}, dt::f32, tag::ab);
    mm.y = dnnl::memory::desc({m, cols}, dt::f32, tag::ab);
    dnnl::post_ops po;
    if (!bias.empty()) po.append_sum(1.0f);
    if (eltwise != dnnl::algorithm::undef) po.append_eltwise(1.0f, eltwise, 0.0f, 0.0f);
    dnnl::primitive_attr attr;
    attr.set_post_ops(po);
    try {
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(mm.w, mm.x, mm.y), attr, dnnl_ctx().engine);
      mm.brgemm = std::string(pd.impl_info_str()).rfind("brg", 0) == 0;
      if (mm.brgemm) mm.prim = dnnl::matmul(pd);
    } catch (const dnnl::error&) {
      mm.brgemm = false;
    }
  }
  return mm.brgemm ? &mm : nullptr;
}

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
  o.layouts = layouts_for_n(n, g.sparse, o);
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
  float beta = 0.0f;
  if (!s.bias.empty()) {
    for (int64_t r = 0; r < s.m; ++r) std::fill(y + r * n, y + (r + 1) * n, s.bias[r]);
    beta = 1.0f;
  }
  if (const SmallNMatmul* mm = s.small_n(n, threads)) {
    Dnnl& ctx = dnnl_ctx();
    mm->prim.execute(ctx.stream,
                     {{DNNL_ARG_SRC, dnnl::memory(mm->w, ctx.engine, const_cast<float*>(s.w.data()))},
                      {DNNL_ARG_WEIGHTS, dnnl::memory(mm->x, ctx.engine, const_cast<float*>(x))},
                      {DNNL_ARG_DST, dnnl::memory(mm->y, ctx.engine, y)}});
    ctx.stream.wait();
    return;
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
