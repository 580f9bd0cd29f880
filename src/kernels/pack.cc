// The pack step: from the compressed format to the layouts the kernels stream (see packed.h).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

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
  const int64_t groups = w.groups_per_row(), vpr = w.values_per_row();
  for (int64_t r = 0; r < w.rows; ++r) {
    const int64_t mb = r / mr;
    const int rr = static_cast<int>(r % mr);
    for (int64_t g = 0; g < groups; ++g) {
      const uint8_t code = w.code(r, g);
      const int64_t kb = 4 * g / kc;
      const size_t base = p.block_offset(mb, kb);
      const int64_t j0 = 2 * g - kb * (kc / 2);  // slot of the group's first value within the block
      for (int j = 0; j < 2; ++j) {
        const int64_t pos = 4 * g + ((code >> (2 * j)) & 3);
        const size_t at = base + static_cast<size_t>((j0 + j) * mr + rr);
        if (pos < w.cols) {  // padding positions and rows hold zero
          if (p.type == ValueType::kI8)
            p.vals8.data()[at] = static_cast<int8_t>(w.values[static_cast<size_t>(r * vpr + 2 * g + j)]);
          else if (p.type == ValueType::kBf16)
            p.vals16.data()[at] = float_to_bf16(w.value(r, 2 * g + j));
          else
            p.vals.data()[at] = w.value(r, 2 * g + j);
        }
        p.codes.data()[(base + static_cast<size_t>(j0 * mr)) / static_cast<size_t>(2 * mr)] |=
            static_cast<uint16_t>(((code >> (2 * j)) & 3) << (2 * (j * mr + rr)));
      }
    }
  }
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
  const int eb = L::entry_bytes(p.weights), sb = lanes_slot_bytes(p.weights);
  const int code_at = L::code_offset(p.weights), scale_at = L::scale_offset(p.weights);
  p.data = AlignedArray<uint8_t>(static_cast<size_t>(p.m_blocks * p.supers * eb));
  const int64_t groups = w.groups_per_row();
  const int64_t per_block = kb / L::kSuper;
  // Kept value j of row r as float: read in place from float32 values (what the loaders give), otherwise
  // through Compressed::value.
  const int64_t vpr = w.values_per_row(), mbpr = w.meta_bytes_per_row();
  const float* f32 = w.dtype == DType::kF32 ? reinterpret_cast<const float*>(w.values.data()) : nullptr;
  auto value = [&](int64_t r, int64_t j) { return f32 != nullptr ? f32[r * vpr + j] : w.value(r, j); };
  // Kept value j of row r into slot bytes v in the layout's type (bf16 from bf16 values: their bits).
  const bool bf16_in = w.dtype == DType::kBF16;
  auto store = [&](uint8_t* v, int64_t r, int64_t j) {
    const size_t at = static_cast<size_t>(r * vpr + j);
    if (i8) {
      *v = w.values[at];
    } else if (bf16) {
      const uint16_t b = bf16_in ? static_cast<uint16_t>(w.values[2 * at] | w.values[2 * at + 1] << 8)
                                 : float_to_bf16(value(r, j));
      std::memcpy(v, &b, 2);
    } else {
      const float f = value(r, j);
      std::memcpy(v, &f, 4);
    }
  };
  auto at = [&](int64_t mb, int64_t s) {
    const int64_t kblk = s / per_block;
    return p.data.data() + p.entry(kblk, mb) + static_cast<size_t>((s - kblk * per_block) * eb);
  };
  // Entry by entry (a row block's super chunk), lane by lane: the entry's bytes are written together and
  // each lane's two code words once.
  for (int64_t mb = 0; mb < p.m_blocks; ++mb)
    for (int64_t s = 0; s < p.supers; ++s) {
      uint8_t* e = at(mb, s);
      const int64_t g0 = 16 * s, g1 = std::min(groups, g0 + 16);
      for (int lane = 0; lane < L::kRows && mb * L::kRows + lane < w.rows; ++lane) {
        const int64_t r = mb * L::kRows + lane;
        if (i8) {
          const float scale = scale_of(w, r, s * L::kSuper);
          std::memcpy(e + scale_at + 4 * lane, &scale, 4);
        }
        uint32_t codes[2] = {0, 0};  // slots 0..15, 16..31
        if (4 * (g0 + 16) <= w.cols) {
          // A whole super chunk: its 32 values in slot order, and its code words are the row's metadata
          // bytes as they are (group g's nibble is bits 4 (g % 8) of word (g % 16) / 8, both ways).
          std::memcpy(codes, w.metadata.data() + r * mbpr + g0 / 2, sizeof(codes));
          uint8_t* v = e + L::slot_at(p.weights, 0) + lane * sb;
          const int stride = L::kRows * sb;
          for (int slot = 0; slot < L::kSlots; ++slot, v += stride) {
            store(v, r, 2 * g0 + slot);
          }
        } else {
          for (int64_t g = g0; g < g1; ++g) {
            const uint8_t code = w.code(r, g);
            for (int t = 0; t < 2; ++t) {
              const int slot = 2 * static_cast<int>(g - g0) + t;
              const int idx = (code >> (2 * t)) & 3;
              if (4 * g + idx >= w.cols) continue;  // the last group's padding: value 0, code 0
              uint8_t* v = e + L::slot_at(p.weights, slot) + lane * sb;
              store(v, r, 2 * g + t);
              codes[slot / 16] |= static_cast<uint32_t>(idx) << (2 * (slot % 16));
            }
          }
        }
        for (int h = 0; h < 2; ++h) std::memcpy(e + code_at + 4 * (h * L::kRows + lane), &codes[h], 4);
      }
    }
  return p;
}

}  // namespace sparse24::kernels
