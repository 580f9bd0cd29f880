#include "dense.h"

#include <dnnl_debug.h>
#include <omp.h>

#include <cstring>
#include <dnnl.hpp>

#include "openblas.h"

namespace sparse24::bench {
namespace {

using dnnl::memory;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

struct OneDnnContext {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};

OneDnnContext& onednn() {
  static OneDnnContext ctx;
  return ctx;
}

void note(std::string* log, const std::string& s) {
  if (log) *log += s + "\n";
}

}  // namespace

std::shared_ptr<DenseWeights> make_dense_weights(const Problem& p, int copies) {
  auto w = std::make_shared<DenseWeights>();
  const size_t n = p.w.size();
  for (int r = 0; r < copies; ++r) {
    Buffer b(n);
    std::memcpy(b.data(), p.w.data(), n * sizeof(float));
    w->copies.push_back(std::move(b));
  }
  return w;
}

std::string openblas_info() {
  const OpenBlas& ob = OpenBlas::get();
  if (!ob.ok()) return "OpenBLAS: not available (" + ob.error() + ")";
  std::string s = "OpenBLAS: " + ob.config() + "; core " + ob.corename() +
                  " (OPENBLAS_CORETYPE=" + (ob.coretype_env().empty() ? "unset" : ob.coretype_env()) +
                  ") from " + ob.path();
  if (!ob.coretype_before().empty() && ob.coretype_before() != ob.coretype_env())
    s += "; the environment's OPENBLAS_CORETYPE=" + ob.coretype_before() + " was replaced";
  if (ob.was_preloaded())
    s += ob.core_as_expected() ? "; linked into the executable (the process re-executed itself with it set)"
                               : "; WARNING: it was loaded before the benchmark set OPENBLAS_CORETYPE";
  if (!ob.core_as_expected())
    s += "; WARNING: expected core " + ob.expected_core() + " on this CPU: OpenBLAS runs slower code";
  return s;
}

std::string onednn_info() {
  const dnnl_version_t* v = dnnl_version();
  std::string s = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                  std::to_string(v->patch) + " (" + v->hash + "), effective ISA " +
                  dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa());
  return s;
}

void add_openblas_candidates(const Problem& p, const std::shared_ptr<DenseWeights>& w, int threads,
                             std::vector<Candidate>& out, std::string* log) {
  const OpenBlas& ob = OpenBlas::get();
  if (!ob.ok()) {
    note(log, "skipping OpenBLAS: " + ob.error());
    return;
  }
  ob.set_threads(threads);
  const int m = static_cast<int>(p.shape.m), k = static_cast<int>(p.shape.k), n = static_cast<int>(p.shape.n);
  const int copies = static_cast<int>(w->copies.size());
  const double bytes = static_cast<double>(p.w.size()) * sizeof(float);
  const float* x = p.x.data();
  const float* xt = p.xt.data();
  {
    Candidate c{"openblas_sgemm_nn", "OpenBLAS", false, false, copies, bytes, Buffer(p.shape.m * p.shape.n)};
    float* y = c.y.data();
    c.run = [pob = &ob, w, x, y, m, n, k](int r) {
      pob->sgemm(OpenBlas::kNoTrans, OpenBlas::kNoTrans, m, n, k, w->copies[r].data(), k, x, n, y, n);
    };
    c.state = w;
    out.push_back(std::move(c));
  }
  {
    Candidate c{"openblas_sgemm_nt", "OpenBLAS", false, true, copies, bytes, Buffer(p.shape.m * p.shape.n)};
    float* y = c.y.data();
    c.run = [pob = &ob, w, xt, y, m, n, k](int r) {
      pob->sgemm(OpenBlas::kNoTrans, OpenBlas::kTrans, n, m, k, xt, k, w->copies[r].data(), k, y, m);
    };
    c.state = w;
    out.push_back(std::move(c));
  }
  if (n == 1) {
    Candidate c{"openblas_sgemv", "OpenBLAS", false, false, copies, bytes, Buffer(p.shape.m)};
    float* y = c.y.data();
    c.run = [pob = &ob, w, x, y, m, k](int r) { pob->sgemv(m, k, w->copies[r].data(), k, x, y); };
    c.state = w;
    out.push_back(std::move(c));
  }
}

void add_onednn_candidates(const Problem& p, const std::shared_ptr<DenseWeights>& w, int threads,
                           double cold_bytes, std::vector<Candidate>& out, std::string* log) {
  // oneDNN (OpenMP runtime) takes its thread count from the OpenMP runtime, when primitives are created
  // and when they run.
  omp_set_num_threads(threads);
  const int64_t m = p.shape.m, k = p.shape.k, n = p.shape.n;
  const int copies = static_cast<int>(w->copies.size());
  const double bytes = static_cast<double>(p.w.size()) * sizeof(float);
  const float* x = p.x.data();
  {
    Candidate c{"onednn_sgemm", "oneDNN", false, false, copies, bytes, Buffer(m * n)};
    float* y = c.y.data();
    c.run = [w, x, y, m, n, k](int r) {
      dnnl_sgemm('N', 'N', m, n, k, 1.0f, w->copies[r].data(), k, x, n, 0.0f, y, n);
    };
    c.state = w;
    out.push_back(std::move(c));
  }
  OneDnnContext& ctx = onednn();
  try {  // matmul, plain layouts: src = W [M, K], weights = X [K, N], dst = Y [M, N]
    struct State {
      std::shared_ptr<DenseWeights> w;
      dnnl::matmul prim;
      std::vector<memory> src;
      memory wei, dst;
    };
    auto st = std::make_shared<State>();
    memory::desc a({m, k}, dt::f32, tag::ab), b({k, n}, dt::f32, tag::ab), d({m, n}, dt::f32, tag::ab);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, d), ctx.engine);
    Candidate c{"onednn_matmul", "oneDNN", false, false, copies, bytes, Buffer(m * n)};
    st->w = w;
    st->prim = dnnl::matmul(pd);
    for (auto& copy : w->copies) st->src.emplace_back(a, ctx.engine, copy.data());
    st->wei = memory(b, ctx.engine, const_cast<float*>(x));
    st->dst = memory(d, ctx.engine, c.y.data());
    note(log, "onednn_matmul impl: " + std::string(pd.impl_info_str()));
    State* s = st.get();
    c.run = [s, pctx = &ctx](int r) {
      s->prim.execute(pctx->stream,
                      {{DNNL_ARG_SRC, s->src[r]}, {DNNL_ARG_WEIGHTS, s->wei}, {DNNL_ARG_DST, s->dst}});
      pctx->stream.wait();
    };
    c.state = st;
    out.push_back(std::move(c));
  } catch (const dnnl::error& e) {
    note(log, std::string("skipping onednn_matmul: ") + e.what());
  }
  try {  // matmul, Linear form with prepacked weights: src = X^T [N, K], weights = W^T [K, M], dst = Y^T
    struct State {
      dnnl::matmul prim;
      std::vector<memory> wei;
      memory src, dst;
    };
    auto st = std::make_shared<State>();
    memory::desc a({n, k}, dt::f32, tag::ab), b_any({k, m}, dt::f32, tag::any), d({n, m}, dt::f32, tag::ab);
    memory::desc b_plain({k, m}, dt::f32, tag::ba);  // W row-major [M, K] seen as [K, M]
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b_any, d), ctx.engine);
    const double packed_bytes = static_cast<double>(pd.weights_desc().get_size());
    const int packed_copies = copies_for(packed_bytes, cold_bytes);
    Candidate c{"onednn_matmul_packed", "oneDNN", false, true, packed_copies, bytes, Buffer(m * n)};
    c.layout_bytes = packed_bytes;
    st->prim = dnnl::matmul(pd);
    memory plain(b_plain, ctx.engine, w->copies[0].data());
    for (int r = 0; r < packed_copies; ++r) {
      memory packed(pd.weights_desc(), ctx.engine);
      dnnl::reorder(plain, packed).execute(ctx.stream, plain, packed);
      st->wei.push_back(packed);
    }
    ctx.stream.wait();
    st->src = memory(a, ctx.engine, p.xt.data());
    st->dst = memory(d, ctx.engine, c.y.data());
    note(log, "onednn_matmul_packed impl: " + std::string(pd.impl_info_str()));
    State* s = st.get();
    c.run = [s, pctx = &ctx](int r) {
      s->prim.execute(pctx->stream,
                      {{DNNL_ARG_SRC, s->src}, {DNNL_ARG_WEIGHTS, s->wei[r]}, {DNNL_ARG_DST, s->dst}});
      pctx->stream.wait();
    };
    c.state = st;
    out.push_back(std::move(c));
  } catch (const dnnl::error& e) {
    note(log, std::string("skipping onednn_matmul_packed: ") + e.what());
  }
}

}  // namespace sparse24::bench
