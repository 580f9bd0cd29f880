// The mma.sp emulator. Layouts: include/sparse24/mma_sp.h and docs/gpu.md.
#include "sparse24/mma_sp.h"

#include <cstdio>
#include <cstring>
#include <string>

#include "sparse24/error.h"

namespace sparse24 {

namespace {

void check_dtype(DType t) {
  if (t != DType::kF16 && t != DType::kBF16) {
    throw Error(std::string("mma.sp emulator: A and B must be float16 or bfloat16, not ") + dtype_name(t));
  }
}

void check_selector(MmaShape shape, int selector) {
  if (selector < 0 || selector >= mma_selectors(shape)) {
    throw Error(std::string("mma.sp ") + mma_shape_name(shape) + ": sparsity selector " +
                std::to_string(selector) + " out of range 0.." + std::to_string(mma_selectors(shape) - 1));
  }
}

float to_float(DType t, uint16_t bits) {
  return t == DType::kF16 ? half_to_float(bits) : bf16_to_float(bits);
}
uint16_t from_float(DType t, float v) { return t == DType::kF16 ? float_to_half(v) : float_to_bf16(v); }

uint32_t pack(uint16_t lo, uint16_t hi) {
  return static_cast<uint32_t>(lo) | static_cast<uint32_t>(hi) << 16;
}

// Where the metadata of chunk q (0 .. K/4-1) of row r (0..15) lives: lane and bit offset.
struct MetaLoc {
  int lane;
  int shift;
};
MetaLoc meta_loc(MmaShape shape, int selector, int r, int q) {
  const int g = r % 8, half = r / 8;
  if (shape == MmaShape::kM16N8K16) return {4 * g + selector, 16 * half + 4 * q};
  return {4 * g + 2 * selector + q / 4, 16 * half + 4 * (q % 4)};
}

// Register of a thread of group g holding chunk q's values for row half `half` (row g + 8*half).
// The thread is 4g + q % 4.
int a_reg(int half, int q) { return half + 2 * (q / 4); }

}  // namespace

const char* mma_shape_name(MmaShape s) { return s == MmaShape::kM16N8K16 ? "m16n8k16" : "m16n8k32"; }

WarpFragments build_fragments(MmaShape shape, const Compressed& a, const float* b, const float* c,
                              int selector) {
  check_dtype(a.dtype);
  check_selector(shape, selector);
  const int K = mma_k(shape);
  if (a.rows != 16 || a.cols != K) {
    throw Error(std::string("mma.sp ") + mma_shape_name(shape) + ": A must be a 16x" + std::to_string(K) +
                " tile, got " + std::to_string(a.rows) + "x" + std::to_string(a.cols));
  }
  validate(a);
  WarpFragments f;
  const int chunks = K / 4;
  for (int r = 0; r < 16; ++r) {
    const int g = r % 8, half = r / 8;
    for (int q = 0; q < chunks; ++q) {
      uint16_t v[2];
      for (int j = 0; j < 2; ++j) {
        std::memcpy(&v[j], a.values.data() + static_cast<size_t>(r * a.values_per_row() + 2 * q + j) * 2, 2);
      }
      f.a[4 * g + q % 4][a_reg(half, q)] = pack(v[0], v[1]);
      const MetaLoc m = meta_loc(shape, selector, r, q);
      f.e[m.lane] |= static_cast<uint32_t>(a.code(r, q)) << m.shift;
    }
  }
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int i = 0; i < mma_ab_regs(shape); ++i) {
      const int k = 8 * i + 2 * t;
      f.b[lane][i] = pack(from_float(a.dtype, b[k * 8 + g]), from_float(a.dtype, b[(k + 1) * 8 + g]));
    }
    for (int i = 0; i < 4; ++i) {
      const int row = g + 8 * (i / 2), col = 2 * t + i % 2;
      f.c[lane][i] = c ? c[row * 8 + col] : 0.f;
    }
  }
  return f;
}

WarpAccumulators mma_sp(MmaShape shape, DType dtype, const WarpFragments& f, int selector,
                        MetaVariant variant) {
  check_dtype(dtype);
  check_selector(shape, selector);
  const int chunks = mma_k(shape) / 4;
  // Decode A: the dense 16xK matrix the metadata and values describe (zeros elsewhere), as float.
  float a[16][32] = {};
  for (int r = 0; r < 16; ++r) {
    const int g = r % 8, half = r / 8;
    for (int q = 0; q < chunks; ++q) {
      const MetaLoc m = meta_loc(shape, selector, r, q);
      const unsigned code = (f.e[m.lane] >> m.shift) & 0xF;
      const unsigned i0 = code & 3, i1 = code >> 2;
      const bool ok = variant == MetaVariant::kOrdered ? i0 < i1 : i0 != i1;
      if (!ok) {
        char buf[200];
        std::snprintf(buf, sizeof buf,
                      "mma.sp %s: invalid metadata code 0x%X (idx0 %u, idx1 %u%s) in lane %d bits %d..%d "
                      "(row %d, columns %d..%d)",
                      mma_shape_name(shape), code, i0, i1,
                      variant == MetaVariant::kOrdered ? "; ordered metadata needs idx0 < idx1" : "", m.lane,
                      m.shift + 3, m.shift, r, 4 * q, 4 * q + 3);
        throw Error(buf);
      }
      const uint32_t reg = f.a[4 * g + q % 4][a_reg(half, q)];
      a[r][4 * q + static_cast<int>(i0)] = to_float(dtype, static_cast<uint16_t>(reg & 0xFFFF));
      a[r][4 * q + static_cast<int>(i1)] = to_float(dtype, static_cast<uint16_t>(reg >> 16));
    }
  }
  // Decode B [K, 8] and C [16, 8].
  float b[32][8] = {};
  float c[16][8] = {};
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int i = 0; i < mma_ab_regs(shape); ++i) {
      const int k = 8 * i + 2 * t;
      b[k][g] = to_float(dtype, static_cast<uint16_t>(f.b[lane][i] & 0xFFFF));
      b[k + 1][g] = to_float(dtype, static_cast<uint16_t>(f.b[lane][i] >> 16));
    }
    for (int i = 0; i < 4; ++i) c[g + 8 * (i / 2)][2 * t + i % 2] = f.c[lane][i];
  }
  // D = C + A B. Only kept positions contribute: the metadata selects which B rows are multiplied, so an inf
  // or NaN in a B row no stored value selects does not reach D (as in spmm_reference).
  WarpAccumulators d;
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; ++i) {
      const int row = g + 8 * (i / 2), col = 2 * t + i % 2;
      float acc = c[row][col];
      for (int q = 0; q < chunks; ++q) {
        const MetaLoc m = meta_loc(shape, selector, row, q);
        const unsigned code = (f.e[m.lane] >> m.shift) & 0xF;
        const int i0 = static_cast<int>(code & 3), i1 = static_cast<int>(code >> 2);
        const int lo = i0 < i1 ? i0 : i1, hi = i0 < i1 ? i1 : i0;
        acc += a[row][4 * q + lo] * b[4 * q + lo][col];
        acc += a[row][4 * q + hi] * b[4 * q + hi][col];
      }
      d.d[lane][i] = acc;
    }
  }
  return d;
}

void gather_d(const WarpAccumulators& d, float* out) {
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; ++i) out[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2] = d.d[lane][i];
  }
}

}  // namespace sparse24
