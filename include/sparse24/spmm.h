// Fast 2:4 sparse x dense multiply on the CPU.
//
//   Y[M, N] = epilogue(W[M, K] X[K, N] + bias[M])        (the definition: spmm_reference in reference.h)
//
// Usage: pack once (like a cuSPARSELt plan), multiply many times.
//   sparse24::PackedMatrix p = sparse24::pack(compressed);        // fp32 compressed weights
//   sparse24::spmm(p, x, n, ldx, y, ldy, bias, Epilogue::kRelu, threads);
//
// The instruction set is chosen once per process from the CPU's features (best of avx512, avx2, ref),
// overridable with the environment variable SPARSE24_ISA=ref|avx2|avx512 (an ISA the CPU lacks is an
// error). With SPARSE24_VERBOSE=1 the choice is logged to stderr.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sparse24/compressed.h"
#include "sparse24/reference.h"

namespace sparse24 {

enum class Isa : uint8_t { kRef, kAvx2, kAvx512 };
const char* isa_name(Isa isa);
// Parses "ref", "avx2", "avx512"; throws Error otherwise.
Isa parse_isa(const char* name);
// True if this build has the ISA's kernels and this CPU runs them.
bool isa_supported(Isa isa);
// The ISA in use: SPARSE24_ISA if set (validated), else the best supported. Decided once per process.
Isa active_isa();
// The CPU, for reports: "model name" of /proc/cpuinfo with its family and model ("AMD EPYC (family 25,
// model 1)": virtual machines often name only the brand), or "unknown".
std::string cpu_name();

// Which packed layouts to prepare. Both: spmm picks the memory-bound layout for small N and the
// compute-bound one otherwise, where a larger N may be split into the whole panels of a compute-bound
// tile and a rest of at most the small-N limit, which then runs on the memory-bound layout. One: half the
// bytes; spmm runs every N on it (correct at any N, slower outside the range it was made for: the
// memory-bound layout alone runs a large N as whole panels of a compute-bound tile whose blocks are made from
// it as the tile reaches them, AVX-512 from N = 64, and the rest in chunks). An engine that knows its N packs
// only the layout that N uses (layouts_for_n).
enum class PackLayouts : uint8_t { kBoth, kLargeN, kSmallN };

struct PackOptions {
  // Which ISA's layout to prepare; kernels of that ISA run it. Unset = active_isa().
  bool isa_set = false;
  Isa isa = Isa::kRef;
  // Store the weights of the memory-bound (small-N) path as bfloat16 (fp32 activations and accumulation).
  bool bf16_weights = false;
  // Let the memory-bound kernels of bf16 and int8 weights round the activations to bfloat16 (to nearest
  // even; the products and sums stay fp32), as llama.cpp's BF16 and F16 dot products do: about twice the
  // multiply-adds per instruction (`vdpbf16ps`). Only where bf16_activations_supported() (AVX512_BF16,
  // not on Intel's cores) and N <= the small-N limit (or any N on a pack of only the small-N
  // layout, or a larger N's rest: PackLayouts); elsewhere, and for fp32 weights, the activations stay fp32.
  // Each activation then carries a relative error up to 2^-8 (docs/accuracy.md has what that does to a
  // model's logits).
  bool bf16_activations = false;
  // Let the memory-bound kernels of int8 weights quantise the activations to int8 (per column and block of
  // 64 positions along K, symmetric, the scale max|x| / 127: round_activations_int8) and multiply in
  // integers (`vpdpbusd`, 64 multiply-adds per instruction; the block's sums exact in int32, then scaled in
  // fp32), as llama.cpp's Q8_0 dot products do. Only where int8_activations_supported() (AVX512_VNNI and
  // AVX512_VBMI) and 2 <= N <= the small-N limit (or any N from 2 on a pack of only the small-N layout,
  // or a larger N's rest of 2 or more columns: PackLayouts; at N = 1 the weights' bytes bound the time either
  // way, so X stays exact); elsewhere, and for fp32 or bf16 weights, the activations stay fp32. Each
  // activation then carries an absolute error up to half its block's step (max|x| / 254); docs/accuracy.md.
  // Excludes bf16_activations.
  bool int8_activations = false;
  PackLayouts layouts = PackLayouts::kBoth;
};

// True if PackOptions::bf16_activations takes effect here: the CPU has AVX512_BF16, AVX-512 is the active ISA
// (not with SPARSE24_ISA=avx2), and dispatch picks the bf16-activation kernels on this kind of CPU (not on
// Intel's: there they measured slower than the fp32-activation kernels, which then run; docs/kernels.md).
bool bf16_activations_supported();

// True if PackOptions::int8_activations takes effect here: the CPU has AVX512_VNNI and AVX512_VBMI, AVX-512
// is the active ISA and dispatch picks the int8-activation kernels on this kind of CPU.
bool int8_activations_supported();

// X (K x N, rows ldx apart) as the int8-activation kernels see it, in place: each column's blocks of 64
// positions quantised (PackOptions::int8_activations) and dequantised (the reference for those kernels).
void round_activations_int8(float* x, int64_t k, int64_t n, int64_t ldx);

// The single layout a multiply with n columns of w, packed with `options` (its ISA and weight type; its
// `layouts` aside), uses: where the memory-bound kernels stop depends on the weight type they read.
PackLayouts layouts_for_n(int64_t n, const Compressed& w, const PackOptions& options);

namespace kernels {
struct PackedAccess;  // (the library's own constructors of packed weights)
}

// Weights prepared for the kernels of one ISA: every layout the kernels want, prepared once.
class PackedMatrix {
 public:
  PackedMatrix();
  ~PackedMatrix();
  PackedMatrix(PackedMatrix&&) noexcept;
  PackedMatrix& operator=(PackedMatrix&&) noexcept;

  int64_t rows() const;  // M
  int64_t cols() const;  // K
  Isa isa() const;
  // Bytes the packed layouts occupy.
  size_t bytes() const;

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  friend PackedMatrix pack(const Compressed&, const PackOptions&);
  friend struct kernels::PackedAccess;
  std::unique_ptr<Impl> impl_;
};

// w must be float32 (bf16 weights are requested through PackOptions, converted here), bfloat16 (packed as
// bf16 weights, bf16_weights or not: exactly its values) or int8 (with or without scales, quantize_int8).
// Both layouts keep bf16 and int8 values in their type, which the kernels widen to fp32 as they read them
// (exactly Compressed::value); the memory-bound layout takes an int8 scale group of a multiple of 64
// positions or the whole row, and the compute-bound one holds other groups' values dequantised in fp32.
// Throws Error on another dtype or an invalid matrix.
PackedMatrix pack(const Compressed& w, const PackOptions& options = {});

// x: [K, N] row-major with leading dimension ldx >= N (any alignment); y: [M, N], ldy >= N. bias: M floats
// or null. threads: 1 or more (OpenMP); the kernel splits work where it pays.
void spmm(const PackedMatrix& w, const float* x, int64_t n, int64_t ldx, float* y, int64_t ldy,
          const float* bias = nullptr, Epilogue ep = Epilogue::kNone, int threads = 1);

// The token-major form, as a Linear layer holds its activations (PyTorch's [T, K] in, [T, M] out): x [N, K]
// row-major with ldx >= K, y [N, M] with ldy >= M; y[n, :] = epilogue(W x[n, :] + bias). The same result as
// spmm on the transposes (up to fp32 summation order, which is the same: the same kernels run). The
// kernels read X and write Y in this layout themselves (the transposes fused into the compute-bound path's
// panel packing and stores, and into the memory-bound path's copy of X and its stores).
void spmm_tokens(const PackedMatrix& w, const float* x, int64_t n, int64_t ldx, float* y, int64_t ldy,
                 const float* bias = nullptr, Epilogue ep = Epilogue::kNone, int threads = 1);

// The kernel variants of this build, one per row of src/kernels/kernel_list.inc (for tests and
// benchmarks). spmm picks among them; the environment variable SPARSE24_KERNEL=<name> makes spmm use
// that variant wherever it can run (its ISA, layout, weight type and N) and the usual choice elsewhere.
struct KernelVariantInfo {
  std::string name;
  Isa isa;
  bool large_n;           // reads the compute-bound (large-N) layout; else the small-N one
  bool fp32, bf16;        // the packed weight types it reads (PackOptions::bf16_weights)
  bool int8;              // reads int8 weights (pack of an int8 Compressed, e.g. quantize_int8)
  int64_t n_max;          // the most columns one call takes; 0 = any
  bool bf16_activations;  // rounds X to bf16 (runs on packs with PackOptions::bf16_activations)
  bool int8_activations;  // quantises X to int8 (runs on packs with PackOptions::int8_activations)
  bool runs;  // this CPU runs its instructions (its ISA; AVX512_BF16 for bf16 activations, VNNI and VBMI
              // for int8 activations)
};
std::vector<KernelVariantInfo> kernel_variants();

// The kernel calls spmm (and spmm_tokens, for n >= 2) makes for n columns of these packed weights, in
// column order: columns [first, first + columns) on the named variant. The compute-bound layout may split N
// into whole panels of a tile and the rest (where the kernel list's rates say that is faster than padding);
// the memory-bound one runs a large N as whole panels of a tile over it (where a row of the list picks N) and
// chunks. Empty where no kernel runs (n, M or K zero, Isa::kRef).
struct KernelCall {
  std::string variant;
  int64_t first, columns;
};
std::vector<KernelCall> spmm_plan(const PackedMatrix& w, int64_t n);

// spmm with the named variant. Throws Error if the variant cannot run these packed weights (another ISA,
// the layout it reads not packed, another weight type, bf16 or int8 activations on a pack without them or a
// CPU without their instructions) or n > its n_max.
void spmm_variant(const std::string& name, const PackedMatrix& w, const float* x, int64_t n, int64_t ldx,
                  float* y, int64_t ldy, const float* bias = nullptr, Epilogue ep = Epilogue::kNone,
                  int threads = 1);

}  // namespace sparse24
