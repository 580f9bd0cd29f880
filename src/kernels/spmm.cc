// The public multiply API: ISA choice (once per process), the kernel list, pack and dispatch.
#include "sparse24/spmm.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernel_list.h"
#include "sparse24/error.h"

namespace sparse24 {

namespace kernels {

namespace {

bool cpu_has_avx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") &&
         __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2");
}
bool cpu_has_avx512() {
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}

// THE kernel list. Tile sizes and why: docs/kernels.md.
const KernelSet kSets[] = {
    // isa         cpu_has        mr  kc  chunk rb  kb    small_n  gemm         gemv
    {Isa::kAvx2, cpu_has_avx2, 4, 128, 64, 4, 1024, 8, gemm_avx2, gemv_avx2},
    {Isa::kAvx512, cpu_has_avx512, 4, 128, 64, 4, 1024, 16, gemm_avx512, gemv_avx512},
};

}  // namespace

const KernelSet* kernel_set(Isa isa) {
  for (const KernelSet& s : kSets)
    if (s.isa == isa) return &s;
  return nullptr;
}

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

bool isa_supported(Isa isa) {
  if (isa == Isa::kRef) return true;
  const kernels::KernelSet* s = kernels::kernel_set(isa);
  return s && s->cpu_has();
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
    const char* verbose = std::getenv("SPARSE24_VERBOSE");
    if (verbose && *verbose && std::strcmp(verbose, "0") != 0)
      std::fprintf(stderr, "sparse24: using %s kernels (%s)\n", isa_name(isa),
                   forced ? "SPARSE24_ISA" : "best the CPU supports");
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
  return p.ref.values.size() + p.ref.metadata.size() + p.gemm.vals.bytes() + p.gemm.codes.bytes() +
         p.gemv.vals.bytes() + p.gemv.vals16.bytes() + p.gemv.masks.bytes() + p.lanes.data.bytes();
}

PackedMatrix pack(const Compressed& w, const PackOptions& options) {
  if (w.dtype != DType::kF32)
    throw Error(std::string("pack: weights must be float32, got ") + dtype_name(w.dtype));
  validate(w);
  const Isa isa = options.isa_set ? options.isa : active_isa();
  if (!isa_supported(isa)) throw Error(std::string("pack: this CPU does not run ISA ") + isa_name(isa));
  PackedMatrix out;
  PackedMatrix::Impl& p = *out.impl_;
  p.isa = isa;
  p.m = w.rows;
  p.k = w.cols;
  p.bf16 = options.bf16_weights;
  const kernels::KernelSet* s = kernels::kernel_set(isa);
  if (!s) {
    p.ref = w;
    if (p.bf16) {
      for (size_t i = 0; i + 4 <= p.ref.values.size(); i += 4) {
        float v;
        std::memcpy(&v, &p.ref.values[i], 4);
        v = bf16_to_float(float_to_bf16(v));
        std::memcpy(&p.ref.values[i], &v, 4);
      }
    }
    return out;
  }
  p.small_n_max = s->small_n_max;
  p.has_gemm = options.layouts != PackLayouts::kSmallN;
  p.has_gemv = options.layouts != PackLayouts::kLargeN;
  if (p.has_gemm) p.gemm = kernels::pack_gemm(w, s->gemm_mr, s->gemm_kc, s->gemm_chunk, p.bf16);
  if (p.has_gemv) {
    // AVX2 with fp32 weights: rows in lanes (docs/kernels.md, session 6); otherwise the spreading layout.
    if (isa == Isa::kAvx2 && !p.bf16)
      p.lanes = kernels::pack_lanes(w, s->gemv_kb);
    else
      p.gemv = kernels::pack_gemv(w, s->gemv_rb, s->gemv_kb, p.bf16);
  }
  return out;
}

PackLayouts layouts_for_n(int64_t n, Isa isa) {
  const kernels::KernelSet* s = kernels::kernel_set(isa);
  if (!s) return PackLayouts::kBoth;  // the ref ISA keeps the compressed matrix either way
  return n <= s->small_n_max ? PackLayouts::kSmallN : PackLayouts::kLargeN;
}

void spmm(const PackedMatrix& w, const float* x, int64_t n, int64_t ldx, float* y, int64_t ldy,
          const float* bias, Epilogue ep, int threads) {
  if (n < 0 || ldx < n || ldy < n) throw Error("spmm: need n >= 0, ldx >= n, ldy >= n");
  if (threads < 1) throw Error("spmm: threads must be >= 1");
  const PackedMatrix::Impl& p = w.impl();
  if (n == 0 || p.m == 0) return;
  if (p.k == 0) {  // empty sum: the epilogue of the bias
    for (int64_t r = 0; r < p.m; ++r)
      for (int64_t c = 0; c < n; ++c) y[r * ldy + c] = apply_epilogue(bias ? bias[r] : 0.f, ep);
    return;
  }
  const kernels::KernelSet* s = kernels::kernel_set(p.isa);
  if (!s) {
    spmm_reference(p.ref, x, n, ldx, y, ldy, bias, ep);
    return;
  }
  if (p.has_gemv && (n <= p.small_n_max || !p.has_gemm)) {
    // The memory-bound kernels take up to small_n_max columns at a time.
    for (int64_t c0 = 0; c0 < n; c0 += p.small_n_max)
      s->gemv(p, {x + c0, std::min<int64_t>(p.small_n_max, n - c0), ldx, y + c0, ldy, bias, ep, threads});
  } else {
    s->gemm(p, {x, n, ldx, y, ldy, bias, ep, threads});
  }
}

}  // namespace sparse24
