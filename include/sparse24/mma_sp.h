// A Sparse Tensor Core emulator: PTX `mma.sp.sync.aligned` (and `mma.sp::ordered_metadata`, which has the
// same register layout for these shapes) for m16n8k16 and m16n8k32 with .f16 / .bf16 A and B and .f32 C/D,
// computed from the per-thread registers of the 32 threads of a warp, the way a GPU kernel hands them to
// the instruction. It lets a kernel author check fragment and metadata preparation on a machine without a
// GPU. The layouts are written down, with their sources, in docs/gpu.md; in short (g = lane / 4,
// t = lane % 4, "row" and "col" index the dense 16xK matrix A, the KxN matrix B, the 16x8 matrices C/D):
//
//   A  m16n8k16: a[0] = the 2 kept values of row g,   chunk t (cols 4t..4t+3), first kept value in bits 0..15
//                a[1] = the same for row g+8
//      m16n8k32: a[0], a[1] as above for chunk t; a[2], a[3] the same for chunk 4+t (cols 16+4t..16+4t+3)
//   B  register i (0..K/8-1) holds B[8i + 2t][g] in bits 0..15 and B[8i + 2t + 1][g] in bits 16..31
//   C/D c[0], c[1] = C[g][2t], C[g][2t+1];  c[2], c[3] = C[g+8][2t], C[g+8][2t+1]
//   E  (metadata; only the threads the sparsity selector names are read)
//      m16n8k16: selector s in 0..3; thread 4g+s: bits 0..15 = row g, bits 16..31 = row g+8; chunk q (0..3)
//      in
//                bits 4q..4q+3 of its half
//      m16n8k32: selector s in 0..1; thread 4g+2s+h (h = 0, 1) covers chunks 4h..4h+3: bits 0..15 = row g,
//                bits 16..31 = row g+8, chunk 4h+q in bits 4q..4q+3 of its half
//   A chunk's 4 bits are idx0 | idx1 << 2: the positions (0..3) of its first and second kept value.
//
// Arithmetic: each product of two f16/bf16 values is exact in fp32; D = C + the products, accumulated in fp32
// in increasing K order (the order the reference multiply uses). PTX does not specify the Tensor Core's
// internal summation order or rounding, so real hardware agrees with this within fp32 rounding, not
// necessarily bit for bit.
#pragma once
#include <cstdint>

#include "sparse24/compressed.h"
#include "sparse24/dtype.h"

namespace sparse24 {

enum class MmaShape : uint8_t { kM16N8K16, kM16N8K32 };

// Which metadata codes the instruction accepts.
enum class MetaVariant : uint8_t {
  kOrdered,  // mma.sp::ordered_metadata: idx0 < idx1 (codes 0x4, 0x8, 0xC, 0x9, 0xD, 0xE)
  kSp,       // mma.sp: any idx0 != idx1 (PTX lists 0b0000, 0b0101, 0b1010, 0b1111 as invalid)
};

// "m16n8k16" / "m16n8k32".
const char* mma_shape_name(MmaShape s);
constexpr int mma_k(MmaShape s) { return s == MmaShape::kM16N8K16 ? 16 : 32; }
// .b32 registers per thread for A and for B (both K/8).
constexpr int mma_ab_regs(MmaShape s) { return mma_k(s) / 8; }
// Valid sparsity selectors are 0 .. mma_selectors(s) - 1.
constexpr int mma_selectors(MmaShape s) { return s == MmaShape::kM16N8K16 ? 4 : 2; }

// The registers of one warp, indexed [lane][register]. m16n8k16 uses a[.][0..1] and b[.][0..1].
struct WarpFragments {
  uint32_t a[32][4] = {};
  uint32_t b[32][4] = {};
  float c[32][4] = {};
  uint32_t e[32] = {};
};

struct WarpAccumulators {
  float d[32][4] = {};
};

// Places a compressed 16xK tile (dtype float16 or bfloat16, rows 16, cols K = mma_k(shape)), a dense B
// [K, 8] (row-major fp32, each value rounded to A's dtype) and C [16, 8] (row-major; nullptr = zeros) into
// the registers as a kernel would, with the metadata in the threads `selector` names (the other threads'
// e registers are 0). Throws Error on a wrong dtype, tile size or selector, or an invalid metadata code.
WarpFragments build_fragments(MmaShape shape, const Compressed& a, const float* b, const float* c,
                              int selector);

// D = A B + C computed from the registers alone, decoding the metadata as the hardware does. `dtype` is the
// A/B type (float16 or bfloat16). Throws Error on a selector out of range or a metadata code the variant
// does not accept (naming the lane, bits and code).
WarpAccumulators mma_sp(MmaShape shape, DType dtype, const WarpFragments& f, int selector,
                        MetaVariant variant = MetaVariant::kOrdered);

// The D fragments as a row-major [16, 8] matrix.
void gather_d(const WarpAccumulators& d, float* out);

}  // namespace sparse24
