// The compressed 2:4 format, as Ampere's Sparse Tensor Cores consume it.
//
// For a [rows, K] matrix (see pattern.h for how other ranks map to it), with G = ceil(K/4) groups per row
// (K padded with zeros to 4G):
//   values   [rows, 2G]  in the weight dtype, the 2 kept values of each group in increasing position order;
//   metadata [rows, ceil(G/2)] bytes: one 4-bit code per group, idx0 | idx1 << 2 with idx0 < idx1 (PTX
//            mma.sp "ordered metadata"); group 2j in the low nibble of byte j of its row, group 2j+1 in the
//            high nibble; an odd G leaves the last high nibble 0.
// A group with fewer than 2 nonzeros still stores 2 positions (explicit zeros), so every group costs the
// same; an all-zero group stores positions 0 and 1 (code 0x4). A group with one nonzero at position p
// stores p and the lowest other position.
//
// int8 values may carry fp32 scales (quantised weights, quantize_int8): scales [rows, ceil(K / scale_group)],
// the kept value of position k of row r is int8 * scales[r][k / scale_group]. scale_group is a positive
// multiple of 4 (a group of 4 never straddles two scales); without scales (scale_group 0) int8 values are
// plain integers.
#pragma once
#include <cstdint>
#include <vector>

#include "sparse24/dtype.h"
#include "sparse24/tensor.h"

namespace sparse24 {

struct Compressed {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;     // the original (dense) tensor shape
  int64_t rows = 0;               // matrix_view(shape).rows
  int64_t cols = 0;               // matrix_view(shape).cols = K
  std::vector<uint8_t> values;    // rows * values_per_row() elements of dtype
  std::vector<uint8_t> metadata;  // rows * meta_bytes_per_row() bytes
  int64_t scale_group = 0;        // int8 only: positions per scale along K; 0 = no scales
  std::vector<float> scales;      // rows * scales_per_row() (int8 with scale_group > 0)

  int64_t groups_per_row() const { return (cols + 3) / 4; }
  int64_t values_per_row() const { return 2 * groups_per_row(); }
  int64_t meta_bytes_per_row() const { return (groups_per_row() + 1) / 2; }
  int64_t scales_per_row() const { return scale_group > 0 ? (cols + scale_group - 1) / scale_group : 0; }
  // The 4-bit code of group g of row r.
  uint8_t code(int64_t r, int64_t g) const {
    uint8_t b = metadata[static_cast<size_t>(r * meta_bytes_per_row() + g / 2)];
    return (g & 1) ? static_cast<uint8_t>(b >> 4) : static_cast<uint8_t>(b & 0xF);
  }
  // Kept value j (0..2G-1) of row r as float (times its scale for scaled int8).
  float value(int64_t r, int64_t j) const;
  // (values bytes + metadata bytes) / dense bytes.
  double compression_ratio() const;
  // (values + metadata + scales bytes) / (rows * cols): what a kernel streams per weight.
  double bytes_per_weight() const;
};

// int8 weights with fp32 scales from float32 ones (or bfloat16 / float16 ones, widened exactly: the same
// int8 weights as from to_f32 of them): per row and per scale_group positions along K (a
// positive multiple of 4), scale = max |kept value| / 127 and q = round(v / scale) in -127..127 (symmetric,
// round to nearest even). Same codes. Measured on real weight matrices (docs/formats.md): groups of 64
// positions halve the per-row error.
Compressed quantize_int8(const Compressed& f32, int64_t scale_group);

// (values bytes + metadata bytes) / dense bytes of a compressed [rows, cols] matrix of dtype t.
double compression_ratio(int64_t rows, int64_t cols, DType t);

// True for the 6 valid codes: idx0 < idx1, both in 0..3.
bool valid_code(uint8_t code);
// Whether all 16 codes of 8 metadata bytes (little-endian) are valid.
bool all_codes_valid(uint64_t eight_bytes);

// Compresses a dense tensor. Without `prune`, a tensor that is not 2:4 is an error naming the first bad
// row and group; with it, magnitude 2:4 pruning is applied first. NaN is an error.
Compressed compress(const Tensor& dense, bool prune = false);
// compress(Tensor::from_float(w, {rows, cols}), true) without copying w: magnitude 2:4 pruning and
// compression of an fp32 matrix in one pass (what loading a model with --prune spends its time on).
Compressed compress_pruned_f32(const float* w, int64_t rows, int64_t cols);
// The same a block of rows at a time, and straight to bfloat16 or int8 values (what loading a model with
// --prune runs as it reads): an empty pruned [rows, cols] matrix of dtype float32, bfloat16 or int8 (with
// scale_group), and rows [r0, r0 + n) of it from the fp32 rows w [n, cols], as compress_pruned_f32, then
// to_bf16 or quantize_int8, give them (never the fp32 values of the whole matrix). Calls on disjoint rows
// may run at once. A NaN is compress_pruned_f32's error (the row counted from 0 of c).
Compressed pruned_layout(int64_t rows, int64_t cols, DType dtype, int64_t scale_group = 0);
void prune_rows(Compressed& c, int64_t r0, const float* w, int64_t n);
// Expands back to the dense tensor (bit for bit what compress() was given, after pruning). Throws Error
// on an invalid metadata code or inconsistent sizes.
Tensor decompress(const Compressed& c);
// Checks sizes and every metadata code; throws Error naming the first problem.
void validate(const Compressed& c);
// validate()'s checks of each of rows [r0, r1) (their metadata codes, values past K, scales), its errors
// numbering the rows from r0: a matrix filled a part at a time (a GEMM of several stored weights), each
// part checked as validate checks it alone. c's arrays must hold those rows (not yet the ones after);
// its sizes, shape and scale group are validate's to check.
void validate_rows(const Compressed& c, int64_t r0, int64_t r1);
// The same weights with float32 values: f16 and bf16 widened exactly, int8 times its scales; the codes as
// they are (validated first). What decompress + compress gave, without the dense matrix in between.
Compressed to_f32(Compressed c);
// The same weights with bfloat16 values: float32 ones rounded to nearest even (bf16 ones as they are; f16
// and int8 ones through to_f32 first). A kernel packs them as bf16 weights, half the bytes of fp32.
Compressed to_bf16(Compressed c);

}  // namespace sparse24
