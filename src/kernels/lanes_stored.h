// The memory-bound layout as a file stores it (docs/formats.md, "int8 2:4 weights in the kernels' layout"):
// LanesLayout's bytes of int8 values, read in place, checked, or turned back into the compressed matrix.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "packed.h"
#include "sparse24/compressed.h"
#include "sparse24/spmm.h"

namespace sparse24::kernels {

// The K block a file's layers are written with: what pack() takes on every ISA (kernel_list.inc's lanes_kb;
// a stored layer runs in place with its own).
inline constexpr int kStoredLanesKb = 1024;

// The layout of an int8 matrix with each 64 positions of a row under one scale (pack_lanes; what a file
// stores).
LanesLayout lanes_i8_of(const Compressed& c, int kb);
// The bytes of the lanes layout of an int8 [rows, cols] matrix (LanesLayout::data): one entry per 8 rows
// and 64 positions, whatever the K block.
size_t lanes_i8_bytes(int64_t rows, int64_t cols);
// The layout of an int8 [rows, cols] matrix over stored bytes in K blocks of kb positions (a positive
// multiple of 64): the bytes themselves where they are 32-byte aligned (`owner` keeps them alive; read only),
// else a copy. Not checked (check_lanes_i8). Throws Error on a size or kb that does not fit.
LanesLayout lanes_i8_over(std::span<const uint8_t> bytes, int64_t rows, int64_t cols, int kb,
                          std::shared_ptr<const void> owner);
// Throws Error naming the row and position unless L holds exactly what pack_lanes makes of a valid int8
// matrix [rows, cols] with a scale per 64 positions: every scale finite, every code two positions in
// increasing order, zeros in the padding (rows past `rows`, positions past `cols`). Whole entries (rows a
// multiple of 8, cols of 64) are checked in place; other shapes through unpack_lanes_i8.
void check_lanes_i8(const LanesLayout& L, int64_t rows, int64_t cols);
// That matrix (scale group 64, or the padded row when shorter), checked as check_lanes_i8 checks it.
Compressed unpack_lanes_i8(const LanesLayout& L, int64_t rows, int64_t cols);
// Packed weights of the small-N path over L, which the caller checked (check_lanes_i8): what pack() makes of
// unpack_lanes_i8(L) with options.layouts kSmallN, without copying L. The options' ISA must be a SIMD one.
PackedMatrix packed_from_lanes(LanesLayout L, int64_t rows, int64_t cols, const PackOptions& options);

}  // namespace sparse24::kernels
