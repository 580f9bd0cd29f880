// The memory-bound layout as a file stores it (docs/formats.md, the sparse24 layout's `<name>.lanes`):
// LanesLayout's bytes of fp32, bf16 or int8 values, read in place, checked, or turned back into the
// compressed matrix.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "packed.h"
#include "sparse24/compressed.h"
#include "sparse24/spmm.h"

namespace sparse24::kernels {

// The K block a file's layers are written with: what pack() takes on every ISA (kernel_list.inc's lanes_kb;
// a stored layer runs in place with its own).
inline constexpr int kStoredLanesKb = 1024;
// Whether a stored layer's K block is one the layout takes: a positive multiple of 64 up to 2^20.
inline bool valid_lanes_kb(int64_t kb) { return kb > 0 && kb % LanesLayout::kSuper == 0 && kb <= (1 << 20); }

// The value type a matrix is stored in: fp32, bf16, or int8 with each 64 positions of a row under one scale
// (a scale group of a multiple of 64, or one per row); throws Error for any other (f16, unscaled int8, ...).
ValueType lanes_type_of(const Compressed& c);
bool lanes_stores(const Compressed& c);  // whether lanes_type_of(c) has a type
// Its layout (pack_lanes, the values in their own type): what a file stores.
LanesLayout lanes_of(const Compressed& c, int kb);
// A stored layer's values' type as a DType (kF32, kBF16, kI8) and back (DType::kF16: never stored).
DType lanes_dtype(ValueType w);
ValueType lanes_value_type(DType d);
// "F32", "BF16", "I8" (safetensors' names), and back (false for another text).
const char* lanes_type_name(ValueType w);
bool parse_lanes_type(const std::string& text, ValueType* w);
// The bytes of the layout of a [rows, cols] matrix of values of type w (LanesLayout::data): one entry per 8
// rows and 64 positions, whatever the K block.
size_t lanes_bytes(int64_t rows, int64_t cols, ValueType w);
// The layout of a [rows, cols] matrix of type w over stored bytes in K blocks of kb positions (a positive
// multiple of 64): the bytes themselves where they are 32-byte aligned (`owner` keeps them alive; read only),
// else a copy. Not checked (check_lanes). Throws Error on a size or kb that does not fit.
LanesLayout lanes_over(std::span<const uint8_t> bytes, int64_t rows, int64_t cols, int kb, ValueType w,
                       std::shared_ptr<const void> owner);
// Throws Error naming the row and positions unless L holds exactly what pack_lanes makes of a valid
// [rows, cols] matrix of its type: every code two positions in increasing order, every value (fp32, bf16) or
// scale (int8) finite, zeros in the padding (rows past `rows`, positions past `cols`). Whole entries (rows a
// multiple of 8, cols of 64) are checked in place; other shapes through unpack_lanes.
void check_lanes(const LanesLayout& L, int64_t rows, int64_t cols);
// That matrix (int8: scale group 64, or the padded row when shorter), checked as check_lanes checks it.
Compressed unpack_lanes(const LanesLayout& L, int64_t rows, int64_t cols);
// Packed weights of the small-N path over L, which the caller checked (check_lanes): what pack() makes of
// unpack_lanes(L) with options.layouts kSmallN (bf16 values as bf16 weights), without copying L. The
// options' ISA must be a SIMD one.
PackedMatrix packed_from_lanes(LanesLayout L, int64_t rows, int64_t cols, const PackOptions& options);

}  // namespace sparse24::kernels
