// The pack step: from the compressed format to the layouts the kernels stream (see packed.h).
#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "convert.h"
#include "kernel_list.h"
#include "sparse24/error.h"

namespace sparse24::kernels {

namespace {

// Whether each 64 positions (GemmLayout::kScaleUnit, a lanes super chunk) of a row lie under one scale of an
// int8 matrix (unscaled int8 included).
bool one_scale_per_unit(const Compressed& w) {
  const int64_t sg = w.scale_group;
  return sg <= 0 || sg % GemmLayout::kScaleUnit == 0 || sg >= w.cols;
}
// Row r's scale of position pos (1 for unscaled int8).
float scale_of(const Compressed& w, int64_t r, int64_t pos) {
  return w.scale_group > 0 ? w.scales[static_cast<size_t>(r * w.scales_per_row() + pos / w.scale_group)]
                           : 1.f;
}

// Kept values j0 .. j0 + n - 1 of row r in a layout's type T: float from float32 values, int8 from int8,
// bf16 bits from bfloat16 or float32 values (pack_weights), and float from int8 values times their scales
// (the compute-bound layout of an int8 matrix whose scale groups split its units).
template <typename T>
void row_values(const Compressed& w, int64_t r, int64_t j0, int n, T* out) {
  const size_t at = static_cast<size_t>(r * w.values_per_row() + j0);
  if constexpr (std::is_same_v<T, uint16_t>) {
    if (w.dtype == DType::kF32)
      floats_to_bf16(reinterpret_cast<const float*>(w.values.data()) + at, n, out);
    else
      std::memcpy(out, w.values.data() + 2 * at, 2 * static_cast<size_t>(n));
  } else if (sizeof(T) == dtype_size(w.dtype)) {
    std::memcpy(out, w.values.data() + sizeof(T) * at, sizeof(T) * static_cast<size_t>(n));
  } else {
    for (int i = 0; i < n; ++i) out[i] = static_cast<T>(w.value(r, j0 + i));
  }
}

// The compute-bound layout's values of type T and codes, block by block (row block, K block): each row's
// kept values of the block gathered, then stored slot by slot.
template <typename T>
void fill_gemm(const Compressed& w, GemmLayout& p, T* vals) {
  const int mr = p.mr, half = p.kc / 2;
  std::vector<T> rows(static_cast<size_t>(mr * half));
  for (int64_t mb = 0; mb < p.m_blocks; ++mb) {
    const int in_block = static_cast<int>(std::min<int64_t>(mr, w.rows - mb * mr));
    for (int64_t kb = 0; kb < p.k_blocks; ++kb) {
      const size_t base = p.block_offset(mb, kb);
      const int slots = p.slots_in(kb);
      const int64_t j0 = kb * half;  // the block's first slot of a row
      uint16_t* codes = p.codes.data() + base / static_cast<size_t>(2 * mr);  // a word per group
      for (int rr = 0; rr < in_block; ++rr) {
        const int64_t r = mb * mr + rr;
        row_values(w, r, j0, slots, rows.data() + rr * slots);
        // The group's two 2-bit positions, of slots 2g and 2g + 1 (a position in the last group's
        // padding included: its value is 0, as validate requires).
        for (int g = 0; g < slots / 2; ++g) {
          const uint8_t code = w.code(r, j0 / 2 + g);
          codes[g] |= static_cast<uint16_t>((code & 3) << (2 * rr) | (code >> 2 & 3) << (2 * (mr + rr)));
        }
      }
      T* out = vals + base;
      for (int slot = 0; slot < slots; ++slot)
        for (int rr = 0; rr < in_block; ++rr)
          out[slot * mr + rr] = rows[static_cast<size_t>(rr * slots + slot)];
    }
  }
}

// The lanes layout with values of type T. Entries are written in memory order (K block, row block, super
// chunk): each row block's super chunk gathers its rows' 32 kept values (at most 32 and their codes: a
// whole chunk's code words are the row's metadata bytes as they are, group g's nibble being bits 4 (g % 8)
// of word (g % 16) / 8 both ways) and stores them slot by slot.
template <typename T>
void fill_lanes(const Compressed& w, LanesLayout& p) {
  using L = LanesLayout;
  constexpr bool kI8 = std::is_same_v<T, int8_t>;
  const int64_t groups = w.groups_per_row(), mbpr = w.meta_bytes_per_row();
  const int64_t per_block = p.kb / L::kSuper;
  const int code_at = L::code_offset(p.weights), scale_at = L::scale_offset(p.weights);
  const int slot0 = L::slot_at(p.weights, 0);
  for (int64_t kblk = 0; kblk < p.k_blocks; ++kblk)
    for (int64_t mb = 0; mb < p.m_blocks; ++mb) {
      const int lanes = static_cast<int>(std::min<int64_t>(L::kRows, w.rows - mb * L::kRows));
      for (int64_t s = kblk * per_block; s < kblk * per_block + p.supers_in(kblk); ++s) {
        uint8_t* e =
            p.data.data() + p.entry(kblk, mb) +
            static_cast<size_t>((s - kblk * per_block)) * static_cast<size_t>(L::entry_bytes(p.weights));
        const int64_t g0 = 16 * s, g1 = std::min(groups, g0 + 16);
        const bool whole = 4 * (g0 + 16) <= w.cols;
        T v[L::kRows][L::kSlots] = {};
        uint32_t codes[2][L::kRows] = {};  // slots 0..15, 16..31
        for (int lane = 0; lane < lanes; ++lane) {
          const int64_t r = mb * L::kRows + lane;
          if constexpr (kI8) {
            const float scale = scale_of(w, r, s * L::kSuper);
            std::memcpy(e + scale_at + 4 * lane, &scale, 4);
          }
          row_values(w, r, 2 * g0, static_cast<int>(2 * (g1 - g0)), v[lane]);
          if (whole) {
            uint32_t c[2];
            std::memcpy(c, w.metadata.data() + r * mbpr + g0 / 2, sizeof(c));
            codes[0][lane] = c[0];
            codes[1][lane] = c[1];
            continue;
          }
          for (int64_t g = g0; g < g1; ++g) {
            const uint8_t code = w.code(r, g);
            for (int t = 0; t < 2; ++t) {
              const int slot = 2 * static_cast<int>(g - g0) + t;
              const int idx = (code >> (2 * t)) & 3;
              // A position in the last group's padding (its value 0, as validate requires): code 0.
              if (4 * g + idx < w.cols)
                codes[slot / 16][lane] |= static_cast<uint32_t>(idx) << (2 * (slot % 16));
            }
          }
        }
        std::memcpy(e + code_at, codes, sizeof(codes));
        T* out = reinterpret_cast<T*>(e + slot0);  // (entries and slots are aligned for T)
        for (int slot = 0; slot < L::kSlots; ++slot)
          for (int lane = 0; lane < L::kRows; ++lane) out[slot * L::kRows + lane] = v[lane][slot];
      }
    }
}

}  // namespace

GemmLayout pack_gemm(const Compressed& w, int mr, int kc, int chunk, bool bf16) {
  GemmLayout p;
  p.mr = mr;
  p.kc = kc;
  p.chunk = chunk;
  p.m_blocks = (w.rows + mr - 1) / mr;
  p.k_blocks = (w.cols + kc - 1) / kc;
  p.slots_per_row = w.values_per_row();
  // int8 stays int8 where each 64 positions lie under one scale of a row; otherwise (a scale group of 32,
  // say) the layout holds the dequantised values.
  const bool i8 = w.dtype == DType::kI8 && kc % GemmLayout::kScaleUnit == 0 && one_scale_per_unit(w);
  p.type = i8 ? ValueType::kI8 : (bf16 ? ValueType::kBf16 : ValueType::kF32);
  const size_t total = static_cast<size_t>(p.m_blocks * p.slots_per_row * mr);
  // + 64: the widening reads whole vectors past a block's last value.
  if (p.type == ValueType::kF32) p.vals = AlignedArray<float>(total);
  if (p.type == ValueType::kBf16) p.vals16 = AlignedArray<uint16_t>(total + 64);
  if (p.type == ValueType::kI8) {
    p.vals8 = AlignedArray<int8_t>(total + 64);
    p.scales = AlignedArray<float>(p.scale_at(p.m_blocks, 0, 0));
    const int64_t units = kc / GemmLayout::kScaleUnit;
    for (int64_t r = 0; r < w.rows; ++r)
      for (int64_t kb = 0; kb < p.k_blocks; ++kb)
        for (int64_t u = 0; u < units && kb * kc + u * GemmLayout::kScaleUnit < w.cols; ++u)
          p.scales.data()[p.scale_at(r / mr, kb, u) + static_cast<size_t>(r % mr)] =
              scale_of(w, r, kb * kc + u * GemmLayout::kScaleUnit);
  }
  p.codes = AlignedArray<uint16_t>(total / static_cast<size_t>(2 * mr) + 1);  // + 1: the kernel reads ahead
  if (p.type == ValueType::kI8)
    fill_gemm(w, p, p.vals8.data());
  else if (p.type == ValueType::kBf16)
    fill_gemm(w, p, p.vals16.data());
  else
    fill_gemm(w, p, p.vals.data());
  return p;
}

LanesLayout pack_lanes(const Compressed& w, int kb, bool bf16) {
  using L = LanesLayout;
  const bool i8 = w.dtype == DType::kI8;
  if (i8 && bf16) throw Error("internal: pack_lanes with int8 and bf16 weights");
  static_assert(L::kSuper == GemmLayout::kScaleUnit);
  if (i8 && !one_scale_per_unit(w))
    throw Error("pack: int8 scale groups of " + std::to_string(w.scale_group) +
                " positions; the kernels take a multiple of 64 positions or one scale per row");
  L p;
  p.weights = i8 ? ValueType::kI8 : (bf16 ? ValueType::kBf16 : ValueType::kF32);
  p.kb = kb;
  p.m_blocks = (w.rows + L::kRows - 1) / L::kRows;
  p.supers = (w.cols + L::kSuper - 1) / L::kSuper;
  p.k_blocks = (w.cols + kb - 1) / kb;
  p.data = AlignedArray<uint8_t>(static_cast<size_t>(p.m_blocks * p.supers * L::entry_bytes(p.weights)));
  if (i8)
    fill_lanes<int8_t>(w, p);
  else if (bf16)
    fill_lanes<uint16_t>(w, p);
  else
    fill_lanes<float>(w, p);
  return p;
}

}  // namespace sparse24::kernels
