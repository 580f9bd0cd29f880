#include "harness.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "dense.h"
#include "sparse24/dtype.h"
#include "sparse24/error.h"
#include "sparse24/mask.h"
#include "sparse24/reference.h"
#include "sparse24/spmm.h"
#include "sparse24/tensor.h"

namespace sparse24::bench {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// xorshift64*: fast and good enough for test data; replayable from the seed.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull) {
    if (s_ == 0) s_ = 1;
  }
  // Uniform in [-1, 1).
  float uniform() {
    s_ ^= s_ >> 12;
    s_ ^= s_ << 25;
    s_ ^= s_ >> 27;
    uint64_t r = s_ * 0x2545F4914F6CDD1Dull;
    return static_cast<float>(static_cast<double>(r >> 40) * (2.0 / 16777216.0) - 1.0);
  }

 private:
  uint64_t s_;
};

uint64_t shape_seed(const Shape& s, uint64_t seed) {
  return seed ^ (static_cast<uint64_t>(s.m) << 40) ^ (static_cast<uint64_t>(s.k) << 20) ^
         static_cast<uint64_t>(s.n);
}

bool parse_dims(const std::string& text, std::vector<int64_t>& dims) {
  dims.clear();
  size_t i = 0;
  while (i < text.size()) {
    size_t j = i;
    while (j < text.size() && text[j] >= '0' && text[j] <= '9') ++j;
    if (j == i || j - i > 9) return false;
    dims.push_back(std::stoll(text.substr(i, j - i)));
    if (j == text.size()) break;
    if (text[j] != 'x' && text[j] != 'X') return false;
    i = j + 1;
    if (i == text.size()) return false;
  }
  return dims.size() == 2 || dims.size() == 3;
}

}  // namespace

std::string shape_label(const Shape& s) {
  return std::to_string(s.m) + "x" + std::to_string(s.k) + "x" + std::to_string(s.n) +
         (s.cold ? " cold" : "");
}

std::vector<Shape> full_shapes() {
  std::vector<Shape> out;
  for (auto [m, k] : {std::pair<int64_t, int64_t>{768, 768}, {3072, 768}, {768, 3072}})
    for (int64_t n : {128, 512}) out.push_back({m, k, n, false});
  for (auto [m, k] : {std::pair<int64_t, int64_t>{4096, 4096}, {11008, 4096}}) {
    for (int64_t n : {1, 8, 64, 512}) out.push_back({m, k, n, false});
    for (int64_t n : {1, 8}) out.push_back({m, k, n, true});
  }
  return out;
}

std::vector<Shape> quick_shapes() {
  return {{768, 768, 128, false}, {3072, 768, 1, false}, {4096, 1024, 8, true}};
}

std::vector<Shape> select_shapes(const std::vector<Shape>& predefined,
                                 const std::vector<std::string>& tokens) {
  if (tokens.empty()) return predefined;
  std::vector<bool> keep(predefined.size(), false);
  std::vector<Shape> custom;
  for (const std::string& token : tokens) {
    std::string dims_text = token;
    int want_cold = -1;  // -1 either, 0 hot, 1 cold
    const size_t colon = token.find(':');
    if (colon != std::string::npos) {
      const std::string mode = token.substr(colon + 1);
      dims_text = token.substr(0, colon);
      if (mode != "cold" && mode != "hot")
        throw Error("bad shape '" + token + "': the suffix must be :cold or :hot");
      want_cold = mode == "cold";
    }
    std::vector<int64_t> dims;
    if (!parse_dims(dims_text, dims) || std::count(dims.begin(), dims.end(), 0) > 0)
      throw Error("bad shape '" + token +
                  "': expected MxK or MxKxN (positive), optionally with :cold or :hot");
    bool matched = false;
    for (size_t i = 0; i < predefined.size(); ++i) {
      const Shape& s = predefined[i];
      if (dims[0] != s.m || dims[1] != s.k || (dims.size() == 3 && dims[2] != s.n)) continue;
      if (want_cold >= 0 && (want_cold == 1) != s.cold) continue;
      keep[i] = matched = true;
    }
    if (matched || dims.size() != 3) continue;
    for (bool cold : {false, true})
      if (want_cold < 0 || (want_cold == 1) == cold) custom.push_back({dims[0], dims[1], dims[2], cold});
  }
  std::vector<Shape> out;
  for (size_t i = 0; i < predefined.size(); ++i)
    if (keep[i]) out.push_back(predefined[i]);
  out.insert(out.end(), custom.begin(), custom.end());
  if (out.empty())
    throw Error("no benchmark shape matches --shapes (an MxK filter selects predefined rows only)");
  return out;
}

Buffer::Buffer(size_t n) : n_(n) {
  size_t bytes = (std::max<size_t>(n, 1) * sizeof(float) + 63) / 64 * 64;
  p_.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
  if (!p_) throw Error("out of memory allocating " + std::to_string(bytes) + " bytes");
}

Problem make_problem(const Shape& s, uint64_t seed) {
  Problem p;
  p.shape = s;
  const size_t mk = static_cast<size_t>(s.m * s.k), kn = static_cast<size_t>(s.k * s.n);
  Rng rng(shape_seed(s, seed));
  std::vector<float> w(mk);
  for (float& v : w) v = rng.uniform();
  apply_mask(w.data(), magnitude_mask(w.data(), s.m, s.k));
  p.w = Buffer(mk);
  std::memcpy(p.w.data(), w.data(), mk * sizeof(float));
  p.wc = compress(Tensor::from_float(w, {s.m, s.k}), /*prune=*/false);
  if (s.n <= 16) p.wq = quantize_int8(p.wc, 64);
  p.x = Buffer(kn);
  p.xt = Buffer(kn);
  for (size_t i = 0; i < kn; ++i) p.x[i] = rng.uniform();
  for (int64_t kk = 0; kk < s.k; ++kk)
    for (int64_t nn = 0; nn < s.n; ++nn) p.xt[nn * s.k + kk] = p.x[kk * s.n + nn];
  return p;
}

int copies_for(double bytes_per_copy, double cold_bytes) {
  if (cold_bytes <= 0) return 1;
  return std::max(2, static_cast<int>(std::ceil(cold_bytes / std::max(bytes_per_copy, 1.0))));
}

const char* weights_name(Weights w) {
  switch (w) {
    case Weights::kBf16:
      return "bf16";
    case Weights::kI8:
      return "int8";
    case Weights::kF32:
      break;
  }
  return "fp32";
}

const char* xact_name(XAct a) { return a == XAct::kF32 ? "fp32" : a == XAct::kBf16 ? "bf16" : "int8"; }

namespace {

XAct variant_act(const KernelVariantInfo& v) {
  return v.int8_activations ? XAct::kI8 : v.bf16_activations ? XAct::kBf16 : XAct::kF32;
}

// True if the kernels of activations a run on this CPU when forced by name (where dispatch does not pick
// them, e.g. bf16_activations_supported() is false, only `--variants` times them).
bool act_kernels_run(XAct a) {
  for (const KernelVariantInfo& v : kernel_variants())
    if (variant_act(v) == a && v.runs) return true;
  return false;
}

// sparse24 on weights `wc` packed as `wt` ("sparse24", "sparse24_bf16", "sparse24_int8"; with xa = kBf16,
// PackOptions::bf16_activations: "sparse24_bf16_xbf16", "sparse24_int8_xbf16"; with kI8,
// PackOptions::int8_activations: "sparse24_int8_xi8"), then with o.variants every variant of the kernel
// list that runs this pack at this N, forced by name (s24:<name>; the fp32 pack's compute-bound and
// memory-bound variants, the bf16 and int8 packs' memory-bound ones, only those of activations xa). The
// dispatched row only where `dispatched` (where dispatch picks the rows of those activations).
void add_sparse24(const Problem& p, const Compressed& wc, Weights wt, XAct xa, bool dispatched,
                  const BuildOptions& o, std::vector<Candidate>& out) {
  const int64_t m = wc.rows, n = p.shape.n;
  PackOptions po;
  po.bf16_weights = wt == Weights::kBf16;
  po.bf16_activations = xa == XAct::kBf16;
  po.int8_activations = xa == XAct::kI8;
  auto packs = std::make_shared<std::vector<PackedMatrix>>();
  packs->push_back(pack(wc, po));
  // The packed object may hold several layouts (one per path) of which a call streams one, so copies are
  // counted from the compressed size in the candidate's weight type (values + metadata + int8 scales),
  // the least a call must read.
  const double values = static_cast<double>(wc.values.size()) / (wt == Weights::kBf16 ? 2 : 1);
  const double format_bytes =
      values + static_cast<double>(wc.metadata.size() + wc.scales.size() * sizeof(float));
  const int copies = copies_for(format_bytes, o.cold_bytes);
  for (int r = 1; r < copies; ++r) packs->push_back(pack(wc, po));
  const double layout_bytes = static_cast<double>(packs->front().bytes());
  const float* x = p.x.data();
  const int threads = o.threads;
  auto add = [&](const std::string& name, bool variant) {
    Candidate c{name,         "sparse24",   !variant && wt == Weights::kF32, false, copies,
                format_bytes, Buffer(m * n)};
    c.variant = variant;
    c.weights = wt;
    c.x_act = xa;
    c.layout_bytes = layout_bytes;
    float* y = c.y.data();
    if (variant) {
      c.run = [packs, x, y, n, threads, v = name.substr(4)](int r) {
        spmm_variant(v, (*packs)[r], x, n, n, y, n, nullptr, Epilogue::kNone, threads);
      };
    } else {
      for (const KernelCall& k : spmm_plan(packs->front(), n))
        c.calls += (c.calls.empty() ? "" : " + ") + k.variant + " x" + std::to_string(k.columns);
      c.run = [packs, x, y, n, threads](int r) {
        spmm((*packs)[r], x, n, n, y, n, nullptr, Epilogue::kNone, threads);
      };
    }
    c.state = packs;
    out.push_back(std::move(c));
  };
  if (dispatched)
    add((wt == Weights::kF32 ? "sparse24" : std::string("sparse24_") + weights_name(wt)) +
            (xa == XAct::kF32    ? ""
             : xa == XAct::kBf16 ? "_xbf16"
                                 : "_xi8"),
        false);
  if (!o.variants) return;
  Buffer scratch(m * n);
  for (const KernelVariantInfo& v : kernel_variants()) {
    const bool reads = wt == Weights::kF32 ? v.fp32 : !v.large_n && (wt == Weights::kBf16 ? v.bf16 : v.int8);
    if (v.isa != packs->front().isa() || !reads || variant_act(v) != xa || (v.n_max != 0 && n > v.n_max))
      continue;
    try {
      spmm_variant(v.name, packs->front(), x, n, n, scratch.data(), n, nullptr, Epilogue::kNone, threads);
    } catch (const Error&) {
      continue;  // reads a layout this pack does not have at this N
    }
    add("s24:" + v.name, true);
  }
}

}  // namespace

std::vector<Candidate> make_candidates(const Problem& p, const BuildOptions& o) {
  omp_set_num_threads(o.threads);
  std::vector<Candidate> out;
  if (o.with_sparse) {
    add_sparse24(p, p.wc, Weights::kF32, XAct::kF32, true, o, out);
    if (p.wq.rows > 0) {
      add_sparse24(p, p.wc, Weights::kBf16, XAct::kF32, true, o, out);
      add_sparse24(p, p.wq, Weights::kI8, XAct::kF32, true, o, out);
      const bool picked = bf16_activations_supported();
      if (picked || (o.variants && act_kernels_run(XAct::kBf16))) {
        add_sparse24(p, p.wc, Weights::kBf16, XAct::kBf16, picked, o, out);
        add_sparse24(p, p.wq, Weights::kI8, XAct::kBf16, picked, o, out);
      }
      const bool picked8 = int8_activations_supported();
      if (picked8 || (o.variants && act_kernels_run(XAct::kI8)))
        add_sparse24(p, p.wq, Weights::kI8, XAct::kI8, picked8, o, out);
    }
  }
  if (o.with_dense) {
    auto w = make_dense_weights(p, copies_for(static_cast<double>(p.w.size()) * sizeof(float), o.cold_bytes));
    add_onednn_candidates(p, w, o.threads, o.cold_bytes, out, o.log);
    add_openblas_candidates(p, w, o.threads, out, o.log);
    omp_set_num_threads(o.threads);
  }
  return out;
}

Reference make_reference(const Problem& p) {
  const Shape& s = p.shape;
  Reference ref;
  const bool all = static_cast<double>(s.m) * s.k * s.n <= 3e8 || s.n <= 16;
  for (int64_t c = 0; c < s.n; ++c) {
    // Outside small problems: both edges of every 64-column panel, one column inside it, and the last 2.
    int64_t r = c % 64;
    if (all || r == 0 || r == 1 || r == 17 || r == 62 || r == 63 || c >= s.n - 2) ref.cols.push_back(c);
  }
  const int64_t ns = static_cast<int64_t>(ref.cols.size());
  std::vector<float> xs(static_cast<size_t>(s.k * ns)), xa(xs.size());
  for (int64_t kk = 0; kk < s.k; ++kk)
    for (int64_t j = 0; j < ns; ++j) {
      float v = p.x[kk * s.n + ref.cols[j]];
      xs[kk * ns + j] = v;
      xa[kk * ns + j] = std::fabs(v);
    }
  Compressed wabs = p.wc;
  for (size_t i = 3; i < wabs.values.size(); i += 4) wabs.values[i] &= 0x7F;  // |fp32|, little-endian
  ref.y.resize(static_cast<size_t>(s.m * ns));
  ref.scale.resize(ref.y.size());
  spmm_reference(p.wc, xs.data(), ns, ns, ref.y.data(), ns);
  spmm_reference(wabs, xa.data(), ns, ns, ref.scale.data(), ns);
  if (p.wq.rows > 0) {
    Compressed wb = p.wc;  // the values rounded to bf16, as the bf16 pack stores them
    for (size_t i = 0; i + 4 <= wb.values.size(); i += 4) {
      float v;
      std::memcpy(&v, &wb.values[i], 4);
      v = bf16_to_float(float_to_bf16(v));
      std::memcpy(&wb.values[i], &v, 4);
    }
    ref.y_bf16.resize(ref.y.size());
    spmm_reference(wb, xs.data(), ns, ns, ref.y_bf16.data(), ns);
    ref.y_i8.resize(ref.y.size());
    spmm_reference(p.wq, xs.data(), ns, ns, ref.y_i8.data(), ns);
    if (act_kernels_run(XAct::kI8)) {
      std::vector<float> xr(xs);
      round_activations_int8(xr.data(), s.k, ns, ns);
      ref.y_i8_xi8.resize(ref.y.size());
      spmm_reference(p.wq, xr.data(), ns, ns, ref.y_i8_xi8.data(), ns);
    }
    if (act_kernels_run(XAct::kBf16)) {
      std::vector<float> xr(xs);
      for (float& v : xr) v = bf16_to_float(float_to_bf16(v));
      ref.y_bf16_xbf16.resize(ref.y.size());
      ref.y_i8_xbf16.resize(ref.y.size());
      spmm_reference(wb, xr.data(), ns, ns, ref.y_bf16_xbf16.data(), ns);
      spmm_reference(p.wq, xr.data(), ns, ns, ref.y_i8_xbf16.data(), ns);
    }
  }
  return ref;
}

CheckResult check_candidate(Candidate& c, const Problem& p, const Reference& ref, int copy) {
  const Shape& s = p.shape;
  const size_t out_n = c.y.size();
  std::fill(c.y.data(), c.y.data() + out_n, std::numeric_limits<float>::quiet_NaN());
  CheckResult r;
  try {
    c.run(copy);
  } catch (const std::exception& e) {
    r.what = std::string("threw: ") + e.what();
    return r;
  }
  const int64_t ns = static_cast<int64_t>(ref.cols.size());
  constexpr double kTol = 1e-4;
  r.ok = true;
  for (int64_t m = 0; m < s.m; ++m) {
    for (int64_t j = 0; j < ns; ++j) {
      const int64_t n = ref.cols[j];
      const float got = c.y_transposed ? c.y[n * s.m + m] : c.y[m * s.n + n];
      const std::vector<float>& y_ref = c.weights == Weights::kI8     ? ref.y_i8
                                        : c.weights == Weights::kBf16 ? ref.y_bf16
                                                                      : ref.y;
      // bf16 or int8 activations: X rounded, or not where the option does not apply (the compute-bound
      // path).
      const std::vector<float>* y_alt = c.x_act == XAct::kF32       ? nullptr
                                        : c.x_act == XAct::kI8      ? &ref.y_i8_xi8
                                        : c.weights == Weights::kI8 ? &ref.y_i8_xbf16
                                                                    : &ref.y_bf16_xbf16;
      float want = y_ref[m * ns + j];
      if (y_alt && std::fabs(got - (*y_alt)[m * ns + j]) < std::fabs(got - want)) want = (*y_alt)[m * ns + j];
      const double err = std::fabs(static_cast<double>(got) - want) / (ref.scale[m * ns + j] + 1e-30);
      if (!(err <= kTol)) {  // NaN fails too
        if (r.ok) {
          char buf[200];
          std::snprintf(buf, sizeof buf, "copy %d: y[%lld, %lld] = %.9g, reference %.9g (|W||X| = %.6g)",
                        copy, static_cast<long long>(m), static_cast<long long>(n), static_cast<double>(got),
                        static_cast<double>(want), static_cast<double>(ref.scale[m * ns + j]));
          r.what = buf;
        }
        r.ok = false;
      }
      if (std::isfinite(err)) r.max_err = std::max(r.max_err, err);
    }
  }
  return r;
}

Timing time_candidate(Candidate& c, bool cold, double min_time) {
  long calls = 0;
  const SchedSnapshot before = sched_snapshot();
  const double t0 = now_s();
  double t = t0;
  do {
    if (cold) {
      for (int r = 0; r < c.copies; ++r) c.run(r);
      calls += c.copies;
    } else {
      c.run(0);
      ++calls;
    }
    t = now_s();
  } while (t - t0 < min_time);
  Timing out;
  out.seconds = (t - t0) / static_cast<double>(calls);
  out.disturbed = sched_disturbed(before, sched_snapshot(), t - t0);
  return out;
}

const MethodResult* Row::find(const std::string& name) const {
  for (const MethodResult& m : methods)
    if (m.name == name) return &m;
  return nullptr;
}

Row run_row(const Shape& s, const RunOptions& o, QuietGate& gate, std::string* log) {
  const double t_start = now_s();
  Row row;
  row.shape = s;
  row.threads = o.threads;
  row.rounds = o.rounds;
  row.isa = isa_name(active_isa());
  Problem p = make_problem(s, o.seed);
  BuildOptions bo;
  bo.threads = o.threads;
  bo.cold_bytes = s.cold ? o.cold_bytes : 0;
  bo.log = log;
  bo.variants = o.variants;
  std::vector<Candidate> cands = make_candidates(p, bo);
  {
    Reference ref = make_reference(p);
    for (Candidate& c : cands) {
      MethodResult m;
      m.name = c.name;
      m.lib = c.lib;
      m.sparse = c.sparse;
      m.variant = c.variant;
      m.weights = c.weights;
      m.x_act = c.x_act;
      m.copies = c.copies;
      m.weight_bytes = c.weight_bytes;
      m.layout_bytes = c.layout_bytes > 0 ? c.layout_bytes : c.weight_bytes;
      m.calls = c.calls;
      CheckResult cr = check_candidate(c, p, ref, 0);
      if (cr.ok && c.copies > 1) {
        CheckResult last = check_candidate(c, p, ref, c.copies - 1);
        if (!last.ok) cr = last;
        cr.max_err = std::max(cr.max_err, last.max_err);
      }
      m.ok = cr.ok;
      m.error = cr.what;
      m.max_err = cr.max_err;
      m.seconds = std::numeric_limits<double>::infinity();
      row.methods.push_back(m);
    }
  }
  gate.reset_counters();
  const size_t nc = cands.size();
  std::vector<double> best_any(nc, std::numeric_limits<double>::infinity());
  for (int round = 0; round < o.rounds; ++round) {
    for (size_t i = 0; i < nc; ++i) {
      const size_t ci = (i + static_cast<size_t>(round)) % nc;
      MethodResult& m = row.methods[ci];
      if (!m.ok) continue;
      for (int attempt = 0; attempt <= o.retries; ++attempt) {
        gate.wait();
        const Timing t = time_candidate(cands[ci], s.cold, o.min_time);
        ++m.measurements;
        best_any[ci] = std::min(best_any[ci], t.seconds);
        if (!t.disturbed) {
          m.seconds = std::min(m.seconds, t.seconds);
          break;
        }
        ++m.disturbed;
      }
    }
  }
  for (size_t ci = 0; ci < nc; ++ci) {
    MethodResult& m = row.methods[ci];
    if (m.ok && !std::isfinite(m.seconds)) {
      m.seconds = best_any[ci];
      m.all_disturbed = true;
      row.disturbed = true;
    }
  }
  row.gate_waits = gate.waits();
  row.gate_timeouts = gate.timeouts();
  const double flops = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
  for (MethodResult& m : row.methods) {
    if (!m.ok) {
      m.seconds = 0;
      continue;
    }
    m.gflops = flops / m.seconds / 1e9;
    m.weight_gbps = m.weight_bytes / m.seconds / 1e9;
    if (m.sparse) {
      row.sparse_ok = true;
      row.sparse_gflops = m.gflops;
      row.sparse_nonzero_gflops = m.gflops / 2;
    } else if (m.weights == Weights::kI8) {
      if (!m.variant && m.x_act == XAct::kF32) row.int8_gflops = m.gflops;
    } else if (m.weights == Weights::kBf16) {
      if (!m.variant && m.x_act == XAct::kF32) row.bf16_gflops = m.gflops;
    } else if (!m.variant && m.gflops > row.best_dense_gflops) {
      row.best_dense_gflops = m.gflops;
      row.best_dense_lib = m.name;
    }
  }
  if (row.sparse_ok && row.best_dense_gflops > 0) row.speedup = row.sparse_gflops / row.best_dense_gflops;
  if (row.bf16_gflops > 0 && row.best_dense_gflops > 0)
    row.bf16_speedup = row.bf16_gflops / row.best_dense_gflops;
  if (row.int8_gflops > 0 && row.best_dense_gflops > 0)
    row.int8_speedup = row.int8_gflops / row.best_dense_gflops;
  for (const MethodResult& m : row.methods)
    if (m.ok && !m.variant && m.x_act != XAct::kF32 && row.best_dense_gflops > 0)
      (m.x_act == XAct::kI8        ? row.int8_xi8_speedup
       : m.weights == Weights::kI8 ? row.int8_xbf16_speedup
                                   : row.bf16_xbf16_speedup) = m.gflops / row.best_dense_gflops;
  cands.clear();  // frees the weight copies before the next shape
  row.wall_s = now_s() - t_start;
  return row;
}

}  // namespace sparse24::bench
