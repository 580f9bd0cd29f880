// The public multiply API: ISA choice (once per process), the kernel list, pack and dispatch.
#include "sparse24/spmm.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "kernel_list.h"
#include "lanes_stored.h"
#include "sparse24/error.h"

namespace sparse24 {

namespace kernels {

int64_t staggered_rows_per_region(int64_t rows, int regions, int64_t row_bytes) {
  const int64_t per = rows / regions;
  int64_t best = per;
  int best_spread = 0;
  for (int64_t p = per; p >= std::max<int64_t>(1, per - 7); --p) {
    unsigned used = 0;
    for (int i = 0; i < regions; ++i) used |= 1u << ((i * p * row_bytes) % 4096 / 512);
    if (const int spread = std::popcount(used); spread > best_spread) {
      best_spread = spread;
      best = p;
    }
  }
  return best;
}

bool cpu_has_avx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") &&
         __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2");
}
bool cpu_has_avx512() {
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}

bool cpu_has_avx512_bf16() { return cpu_has_avx512() && __builtin_cpu_supports("avx512bf16"); }
bool cpu_has_avx512_vnni_vbmi() {
  return cpu_has_avx512() && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vbmi");
}
bool cpu_runs_act(Act a) {
  return a == Act::kF32 || (a == Act::kBf16 ? cpu_has_avx512_bf16() : cpu_has_avx512_vnni_vbmi());
}

Cpu cpu_kind() {
  static const Cpu c = __builtin_cpu_is("intel") ? Cpu::kIntel : Cpu::kOther;
  return c;
}

namespace {

bool verbose() {
  static const bool v = [] {
    const char* e = std::getenv("SPARSE24_VERBOSE");
    return e && *e && std::strcmp(e, "0") != 0;
  }();
  return v;
}

// SPARSE24_KERNEL=<name>: that variant wherever it can run (its ISA, layout, weight type and N), the
// list's choice elsewhere. Read once; an unknown name is an error.
const Variant* forced_variant() {
  static const Variant* forced = [] {
    const char* e = std::getenv("SPARSE24_KERNEL");
    if (!e || !*e) return static_cast<const Variant*>(nullptr);
    const Variant* v = variant(e);
    if (!v) throw Error(std::string("SPARSE24_KERNEL=") + e + ": no such kernel variant");
    if (verbose()) std::fprintf(stderr, "sparse24: SPARSE24_KERNEL forces %s where it applies\n", e);
    return v;
  }();
  return forced;
}

bool can_run(const Variant& v, const PackedMatrix::Impl& p, Layout layout, int64_t n) {
  return v.isa == p.isa && v.layout == layout && v.reads(p.weights) && v.takes(n) && act_runs(v.act, p.act);
}

// The list's cost of v for n columns: the padded columns over its rate, roundup(n, nr) / rate.
double cost(const Variant& v, int64_t n) {
  return static_cast<double>(v.nr ? (n + v.nr - 1) / v.nr * v.nr : n) / static_cast<double>(v.rate);
}

// The variant for n columns on this layout: the forced one if it can run, else the list's pick; past every
// row's pick range (a chunk of a pack without the compute-bound layout), the same rule over the dispatchable
// rows that take n.
const Variant& choose(const PackedMatrix::Impl& p, Layout layout, int64_t n) {
  const Variant* f = forced_variant();
  if (f && can_run(*f, p, layout, n)) return *f;
  for (bool by_pick : {true, false}) {
    const Variant* best = nullptr;
    for (const Variant& v : kVariants) {
      if (!can_run(v, p, layout, n) || !v.dispatchable(cpu_kind()) || (by_pick && !v.picks(n, cpu_kind())))
        continue;
      // Faster for the padded columns (ties: the later row).
      if (!best || cost(v, n) <= cost(*best, n)) best = &v;
    }
    if (best) return *best;
  }
  throw Error("internal: no kernel variant for this layout and N");  // list_is_consistent()
}

// This core's L2 in bytes (1 MB where the system does not say).
size_t l2_bytes() {
  static const size_t b = [] {
    const long v = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return v > 0 ? static_cast<size_t>(v) : size_t{1} << 20;
  }();
  return b;
}

// The compute-bound layout's plan for n columns: one call of the list's pick, or the whole panels of a
// tile first and then the plan of the rest, where that costs at most 7/8 of the one call by the list's
// rates (kernel_list.inc; the margin is for the weights each further call reads again). `rest`: n is what
// is left after other columns. A rest on rows in lanes (nr = 0) is bound by that read where the weights do
// not stay in L2 between the calls: it costs at least 8 columns at rate 100 (Intel Xeon model 207, session
// 38: such a call at 1-4 columns took 0.45-0.64 of the 4x16 tile's at 16, weights in L3 or DRAM; so 17-20
// columns of weights past L2 stay on the 4x32 tile, where 16 + the rest lost 2-18%). Not a rest of bf16 or
// int8 values that for_each_call runs on the memory-bound layout: that reads a half or a third of the bytes
// and measured faster (mpnet's narrow Linears at 17-20 tokens as 16 + the rest, against one 4x32 call:
// int8 35.4-36.8 -> 31.6-34.0 ms, bf16 36.6-37.3 -> 34.1-35.2, int8 x int8 activations 35.1-36.0 ->
// 31.4-32.0; docs/kernels.md, session 40).
// Whether a rest of n columns (after whole compute-bound panels) runs on the memory-bound layout: on a
// pack with both layouts, where n is within its limit (for_each_call).
bool rest_on_lanes(const PackedMatrix::Impl& p, int64_t n) { return p.has_lanes && n <= p.small_n_max; }

struct GemmPlan {
  const Variant* first;
  int64_t cols;  // the columns `first` takes; the plan of n - cols follows
  double cost;
};
GemmPlan gemm_plan(const PackedMatrix::Impl& p, int64_t n, bool rest) {
  const Variant& one = choose(p, Layout::kGemm, n);
  GemmPlan single{&one, n, cost(one, n)};
  const bool narrow_on_lanes = rest && rest_on_lanes(p, n) && p.weights != Weights::kF32;
  if (rest && one.nr == 0 && !narrow_on_lanes && p.gemm.bytes() > l2_bytes() * 3 / 4)
    single.cost = std::max(single.cost, 8 / 100.0);
  if (forced_variant()) return single;  // SPARSE24_KERNEL: the forced variant or one pick, no plan
  GemmPlan best = single;
  for (const Variant& t : kVariants) {
    const int64_t cols = t.nr ? n / t.nr * t.nr : 0;
    if (cols == 0 || cols == n || !can_run(t, p, Layout::kGemm, cols) || !t.picks(cols, cpu_kind())) continue;
    const double c = cost(t, cols) + gemm_plan(p, n - cols, true).cost;
    if (c < best.cost) best = {&t, cols, c};
  }
  return best.cost <= single.cost * 7 / 8 ? best : single;
}

// On a pack without the compute-bound layout, the row of a compute-bound tile over the memory-bound layout
// (kLanesGemm: each block made from the memory-bound entries as the tile reaches it, once for all the panels)
// that runs the whole panels of n columns: the forced one, else the cheapest that picks n; null for none.
// Intel model 207, int8 2048x2048 in L3: N = 128 182-191 GFLOP/s against 114 in chunks of 16 (the
// compute-bound layout's 189-199); docs/kernels.md, session 41. None where the pack's bf16 or int8
// activations have rows to pick: those multiply 2 or 4 times as much per instruction (int8 x int8 at N = 64
// and 128: 190-229 GFLOP/s in chunks against 91-170 on the tile).
const Variant* lanes_gemm_pick(const PackedMatrix::Impl& p, int64_t n) {
  if (p.has_gemm || n <= p.small_n_take ||
      (p.act != Act::kF32 && picks_activations(p.isa, cpu_kind(), p.act)))
    return nullptr;
  const Variant* forced = forced_variant();
  const Variant* best = forced && can_run(*forced, p, Layout::kLanesGemm, n) ? forced : nullptr;
  if (!best)
    for (const Variant& v : kVariants)
      if (can_run(v, p, Layout::kLanesGemm, n) && v.picks(n, cpu_kind()) &&
          (!best || cost(v, n / v.nr * v.nr) <= cost(*best, n / best->nr * best->nr)))
        best = &v;
  return best && n >= best->nr ? best : nullptr;
}

// The calls dispatch makes for a.n columns: f(variant, first column, columns) in column order.
template <class F>
void for_each_call(const PackedMatrix::Impl& p, int64_t n, F&& f) {
  if (p.has_lanes && (n <= p.small_n_max || !p.has_gemm)) {
    int64_t c0 = 0;
    if (const Variant* t = lanes_gemm_pick(p, n)) {
      c0 = n / t->nr * t->nr;
      f(*t, 0, c0);
    }
    // The memory-bound kernels take up to small_n_take columns at a time (a single chunk where the
    // compute-bound layout is packed too: n <= small_n_max <= small_n_take).
    for (; c0 < n; c0 += p.small_n_take) {
      const int64_t c = std::min<int64_t>(p.small_n_take, n - c0);
      f(choose(p, Layout::kLanes, c), c0, c);
    }
    return;
  }
  for (int64_t c0 = 0; c0 < n;) {
    // The rest after whole panels, on a pack with both layouts, on the memory-bound one where it fits its
    // limit: its kernels read narrow values as they are and take narrow activations, where the rows in
    // lanes over the compute-bound layout widen every block (Intel model 207, mpnet 2:4 at 40 tokens as 32
    // + 8: int8 54.3-54.6 -> 52.1-52.7 ms, bf16 53.9-54.4 -> 51.3-51.7, int8 x int8 activations 54.0-55.6
    // -> 46.7-46.9; docs/kernels.md, session 40).
    if (c0 > 0 && rest_on_lanes(p, n - c0)) {
      f(choose(p, Layout::kLanes, n - c0), c0, n - c0);
      return;
    }
    const GemmPlan g = gemm_plan(p, n - c0, c0 > 0);
    f(*g.first, c0, g.cols);
    c0 += g.cols;
  }
}

}  // namespace

}  // namespace kernels

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kRef:
      return "ref";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "invalid";
}

Isa parse_isa(const char* name) {
  const std::string s = name ? name : "";
  if (s == "ref") return Isa::kRef;
  if (s == "avx2") return Isa::kAvx2;
  if (s == "avx512") return Isa::kAvx512;
  throw Error("unknown ISA '" + s + "' (expected ref, avx2 or avx512)");
}

bool bf16_activations_supported() {
  return kernels::cpu_runs_act(kernels::Act::kBf16) &&
         kernels::picks_activations(active_isa(), kernels::cpu_kind(), kernels::Act::kBf16);
}

bool int8_activations_supported() {
  return kernels::cpu_runs_act(kernels::Act::kI8) &&
         kernels::picks_activations(active_isa(), kernels::cpu_kind(), kernels::Act::kI8);
}

void round_activations_int8(float* x, int64_t k, int64_t n, int64_t ldx) {
  int8_t q[kernels::kInt8ActBlock];
  for (int64_t j = 0; j < n; ++j)
    for (int64_t k0 = 0; k0 < k; k0 += kernels::kInt8ActBlock) {
      const int64_t len = std::min<int64_t>(kernels::kInt8ActBlock, k - k0);
      float* xb = x + k0 * ldx + j;
      const float scale = kernels::quantize_act_block(xb, len, ldx, q);
      for (int64_t i = 0; i < len; ++i) xb[i * ldx] = static_cast<float>(q[i]) * scale;
    }
}

bool isa_supported(Isa isa) {
  if (isa == Isa::kRef) return true;
  const kernels::IsaRow* s = kernels::isa_row(isa);
  return s && s->cpu_has();
}

std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, name = "unknown", family, model;
  auto value = [&] { return line.substr(line.find_first_not_of(" \t", line.find(':') + 1)); };
  while (std::getline(in, line) && line.find(':') != std::string::npos) {  // the first CPU only
    if (line.rfind("model name", 0) == 0) name = value();
    if (line.rfind("cpu family", 0) == 0) family = value();
    if (line.rfind("model\t", 0) == 0) model = value();
  }
  if (!family.empty() && !model.empty()) name += " (family " + family + ", model " + model + ")";
  return name;
}

Isa active_isa() {
  static const Isa chosen = [] {
    Isa isa = Isa::kRef;
    const char* env = std::getenv("SPARSE24_ISA");
    const bool forced = env && *env;
    if (forced) {
      isa = parse_isa(env);
      if (!isa_supported(isa)) throw Error(std::string("SPARSE24_ISA=") + env + ": this CPU does not run it");
    } else {
      for (Isa c : {Isa::kAvx512, Isa::kAvx2})
        if (isa_supported(c)) {
          isa = c;
          break;
        }
    }
    if (kernels::verbose())
      std::fprintf(stderr, "sparse24: using %s kernels (%s), the kernel list's rows for %s CPUs\n",
                   isa_name(isa), forced ? "SPARSE24_ISA" : "best the CPU supports",
                   kernels::cpu_kind() == kernels::Cpu::kIntel ? "Intel" : "non-Intel");
    return isa;
  }();
  return chosen;
}

PackedMatrix::PackedMatrix() : impl_(std::make_unique<Impl>()) {}
PackedMatrix::~PackedMatrix() = default;
PackedMatrix::PackedMatrix(PackedMatrix&&) noexcept = default;
PackedMatrix& PackedMatrix::operator=(PackedMatrix&&) noexcept = default;

int64_t PackedMatrix::rows() const { return impl_ ? impl_->m : 0; }
int64_t PackedMatrix::cols() const { return impl_ ? impl_->k : 0; }
Isa PackedMatrix::isa() const { return impl_ ? impl_->isa : Isa::kRef; }
size_t PackedMatrix::bytes() const {
  if (!impl_) return 0;
  const Impl& p = *impl_;
  return p.ref.values.size() + p.ref.metadata.size() + p.gemm.bytes() + p.lanes.data.bytes() +
         p.ref.scales.size() * sizeof(float);
}

namespace {
// What `pack` prepares for: the ISA, the weight type of the memory-bound layout and the activations.
Isa pack_isa(const PackOptions& options) { return options.isa_set ? options.isa : active_isa(); }
kernels::Weights pack_weights(const Compressed& w, const PackOptions& options) {
  if (w.dtype == DType::kI8) return kernels::Weights::kI8;
  return options.bf16_weights || w.dtype == DType::kBF16 ? kernels::Weights::kBf16 : kernels::Weights::kF32;
}
// The activations its kernels may read: bf16 or int8 where asked for and the CPU runs those rows.
kernels::Act pack_act(const PackOptions& options) {
  if (options.bf16_activations && options.int8_activations)
    throw Error("pack: bf16_activations and int8_activations exclude each other");
  const kernels::Act a = options.int8_activations   ? kernels::Act::kI8
                         : options.bf16_activations ? kernels::Act::kBf16
                                                    : kernels::Act::kF32;
  return kernels::cpu_runs_act(a) ? a : kernels::Act::kF32;
}
}  // namespace

PackedMatrix pack(const Compressed& w, const PackOptions& options) {
  if (w.dtype != DType::kF32 && w.dtype != DType::kBF16 && w.dtype != DType::kI8)
    throw Error(std::string("pack: weights must be float32, bfloat16 or int8, got ") + dtype_name(w.dtype));
  if (w.dtype == DType::kI8 && options.bf16_weights) throw Error("pack: bf16_weights with int8 weights");
  validate(w);
  const Isa isa = pack_isa(options);
  if (!isa_supported(isa)) throw Error(std::string("pack: this CPU does not run ISA ") + isa_name(isa));
  PackedMatrix out;
  PackedMatrix::Impl& p = *out.impl_;
  p.isa = isa;
  p.m = w.rows;
  p.k = w.cols;
  p.weights = pack_weights(w, options);
  const bool bf16 = p.weights == kernels::Weights::kBf16;
  const kernels::IsaRow* s = kernels::isa_row(isa);
  if (!s) {
    p.ref = to_f32(w);
    if (bf16) {
      for (size_t i = 0; i + 4 <= p.ref.values.size(); i += 4) {
        float v;
        std::memcpy(&v, &p.ref.values[i], 4);
        v = bf16_to_float(float_to_bf16(v));
        std::memcpy(&p.ref.values[i], &v, 4);
      }
    }
    return out;
  }
  p.act = pack_act(options);
  p.small_n_max = static_cast<int>(kernels::small_n_max(isa, p.weights, kernels::cpu_kind(), p.act));
  p.small_n_take = static_cast<int>(kernels::small_n_take(isa, p.weights));
  p.has_gemm = options.layouts != PackLayouts::kSmallN;
  p.has_lanes = options.layouts != PackLayouts::kLargeN;
  // bf16 and int8 weights keep their type in both layouts (the compute-bound one: dequantised where an int8
  // scale group is not a multiple of 64 positions).
  if (p.has_gemm) p.gemm = kernels::pack_gemm(w, s->gemm_mr, s->gemm_kc, s->gemm_chunk, bf16);
  if (p.has_lanes) p.lanes = kernels::pack_lanes(w, s->lanes_kb, bf16);
  return out;
}

namespace kernels {
struct PackedAccess {
  static PackedMatrix::Impl& impl(PackedMatrix& p) { return *p.impl_; }
};

PackedMatrix packed_from_lanes(LanesLayout lanes, int64_t rows, int64_t cols, const PackOptions& options) {
  if (lanes.data.size() != lanes_bytes(rows, cols, lanes.weights))
    throw Error("internal: packed_from_lanes of another layout");
  const Isa isa = pack_isa(options);
  if (!isa_supported(isa)) throw Error(std::string("pack: this CPU does not run ISA ") + isa_name(isa));
  const IsaRow* s = isa_row(isa);
  if (!s) throw Error("internal: packed_from_lanes for the reference ISA");
  PackedMatrix out;
  PackedMatrix::Impl& p = PackedAccess::impl(out);
  p.isa = isa;
  p.m = rows;
  p.k = cols;
  p.weights = lanes.weights == ValueType::kI8     ? Weights::kI8
              : lanes.weights == ValueType::kBf16 ? Weights::kBf16
                                                  : Weights::kF32;
  p.act = pack_act(options);
  p.small_n_max = static_cast<int>(small_n_max(isa, p.weights, cpu_kind(), p.act));
  p.small_n_take = static_cast<int>(small_n_take(isa, p.weights));
  p.has_lanes = true;
  p.lanes = std::move(lanes);
  return out;
}
}  // namespace kernels

PackLayouts layouts_for_n(int64_t n, const Compressed& w, const PackOptions& options) {
  const Isa isa = pack_isa(options);
  if (!kernels::isa_row(isa))
    return PackLayouts::kBoth;  // the ref ISA keeps the compressed matrix either way
  return n <= kernels::small_n_max(isa, pack_weights(w, options), kernels::cpu_kind(), pack_act(options))
             ? PackLayouts::kSmallN
             : PackLayouts::kLargeN;
}

namespace {

// The checks and special cases every multiply shares; false when nothing is left for a kernel.
bool prologue(const PackedMatrix::Impl& p, const float* x, int64_t n, int64_t ldx, float* y, int64_t ldy,
              const float* bias, Epilogue ep, int threads) {
  if (n < 0 || ldx < n || ldy < n) throw Error("spmm: need n >= 0, ldx >= n, ldy >= n");
  if (threads < 1) throw Error("spmm: threads must be >= 1");
  if (n == 0 || p.m == 0) return false;
  if (p.k == 0) {  // empty sum: the epilogue of the bias
    for (int64_t r = 0; r < p.m; ++r)
      for (int64_t c = 0; c < n; ++c) y[r * ldy + c] = apply_epilogue(bias ? bias[r] : 0.f, ep);
    return false;
  }
  if (!kernels::isa_row(p.isa)) {
    spmm_reference(p.ref, x, n, ldx, y, ldy, bias, ep);
    return false;
  }
  return true;
}

// The layout and variants dispatch picks for a.n columns (a.tokens: token-major X and Y), run.
void dispatch(const PackedMatrix::Impl& p, const kernels::SpmmArgs& a) {
  kernels::for_each_call(p, a.n, [&](const kernels::Variant& v, int64_t c0, int64_t cols) {
    kernels::SpmmArgs c = a;
    c.n = cols;
    c.x = a.x + c0 * a.x_col_stride();
    c.y = a.y + c0 * a.y_col_stride();
    v.fn(p, c);
  });
}

}  // namespace

void spmm(const PackedMatrix& w, const float* x, int64_t n, int64_t ldx, float* y, int64_t ldy,
          const float* bias, Epilogue ep, int threads) {
  const PackedMatrix::Impl& p = w.impl();
  if (!prologue(p, x, n, ldx, y, ldy, bias, ep, threads)) return;
  dispatch(p, {x, n, ldx, y, ldy, bias, ep, threads});
}

void spmm_tokens(const PackedMatrix& w, const float* x, int64_t n, int64_t ldx, float* y, int64_t ldy,
                 const float* bias, Epilogue ep, int threads) {
  const PackedMatrix::Impl& p = w.impl();
  if (n < 0 || ldx < p.k || ldy < p.m) throw Error("spmm_tokens: need n >= 0, ldx >= K, ldy >= M");
  if (threads < 1) throw Error("spmm_tokens: threads must be >= 1");
  if (n == 0 || p.m == 0) return;
  if (n == 1) return spmm(w, x, 1, 1, y, 1, bias, ep, threads);  // one token is one column already
  if (kernels::isa_row(p.isa) && p.k > 0) {
    kernels::SpmmArgs a{x, n, ldx, y, ldy, bias, ep, threads};
    a.tokens = true;
    dispatch(p, a);
    return;
  }
  // The ref ISA and K = 0: spmm on transposed copies.
  std::vector<float> xt(static_cast<size_t>(p.k * n)), yt(static_cast<size_t>(p.m * n));
  for (int64_t j = 0; j < n; ++j)
    for (int64_t kk = 0; kk < p.k; ++kk) xt[static_cast<size_t>(kk * n + j)] = x[j * ldx + kk];
  spmm(w, xt.data(), n, n, yt.data(), n, bias, ep, threads);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t r = 0; r < p.m; ++r) y[j * ldy + r] = yt[static_cast<size_t>(r * n + j)];
}

std::vector<KernelVariantInfo> kernel_variants() {
  std::vector<KernelVariantInfo> out;
  for (const kernels::Variant& v : kernels::kVariants)
    out.push_back({std::string(v.name), v.isa, v.layout == kernels::Layout::kGemm,
                   v.reads(kernels::Weights::kF32), v.reads(kernels::Weights::kBf16),
                   v.reads(kernels::Weights::kI8), v.n_max, v.act == kernels::Act::kBf16,
                   v.act == kernels::Act::kI8, isa_supported(v.isa) && kernels::cpu_runs_act(v.act)});
  return out;
}

std::vector<KernelCall> spmm_plan(const PackedMatrix& w, int64_t n) {
  const PackedMatrix::Impl& p = w.impl();
  std::vector<KernelCall> out;
  if (n <= 0 || p.m == 0 || p.k == 0 || !kernels::isa_row(p.isa)) return out;
  kernels::for_each_call(p, n, [&](const kernels::Variant& v, int64_t c0, int64_t cols) {
    out.push_back({std::string(v.name), c0, cols});
  });
  return out;
}

void spmm_variant(const std::string& name, const PackedMatrix& w, const float* x, int64_t n, int64_t ldx,
                  float* y, int64_t ldy, const float* bias, Epilogue ep, int threads) {
  const kernels::Variant* v = kernels::variant(name);
  if (!v) throw Error("spmm_variant: no kernel variant '" + name + "'");
  const PackedMatrix::Impl& p = w.impl();
  const bool large = v->layout == kernels::Layout::kGemm;
  if (!kernels::can_run(*v, p, v->layout, n) || (large ? !p.has_gemm : !p.has_lanes))
    throw Error("spmm_variant: " + name + " cannot run these packed weights with n = " + std::to_string(n));
  if (!prologue(p, x, n, ldx, y, ldy, bias, ep, threads)) return;
  v->fn(p, {x, n, ldx, y, ldy, bias, ep, threads});
}

}  // namespace sparse24
