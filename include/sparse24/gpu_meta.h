// GPU-ready metadata for fp16/bf16 weights: the arrangement CUTLASS's sparse GEMM (and PyTorch's
// semi-structured sparsity, CUTLASS backend) reads. See docs/gpu.md for the derivation and sources.
//
// For a [rows, K] weight (rows % 32 == 0, K % 32 == 0):
//   values   [rows, K/2] in the weight dtype, the 2 kept values of each group of 4 in position order
//            (byte for byte the values of our Compressed);
//   metadata [rows, K/16] 16-bit words. The logical word w of row r holds the 4-bit codes
//            (idx0 | idx1 << 2) of groups 4w..4w+3, group 4w+i in bits 4i..4i+3 (so a row whose groups all
//            keep positions 2 and 3 has words 0xEEEE). The logical words are then stored in CUTLASS's
//            reordered (interleaved) order: word (r, w) goes to flat position cutlass_meta_offset(r, w,
//            rows). After it, each aligned pair of words is the 32-bit metadata register of one thread of
//            mma.sp m16n8k32: row r and row r+8 of one 16-column slice.
#pragma once
#include <cstdint>
#include <vector>

#include "sparse24/compressed.h"
#include "sparse24/io.h"

namespace sparse24 {

// The logical words [rows, K/16] of a compressed matrix (K % 16 == 0; any dtype).
std::vector<uint16_t> meta_words(const Compressed& c);

// Flat index in the reordered array of logical word (r, w) of a [rows, ncols] word matrix
// (rows % 32 == 0, ncols even, 0 <= r < rows, 0 <= w < ncols). A bijection onto 0 .. rows*ncols-1.
int64_t cutlass_meta_offset(int64_t r, int64_t w, int64_t rows);
// Logical [rows, ncols] words -> reordered, and back. Throw Error on sizes the layout does not support.
std::vector<uint16_t> cutlass_reorder_meta(const std::vector<uint16_t>& words, int64_t rows, int64_t ncols);
std::vector<uint16_t> cutlass_unreorder_meta(const std::vector<uint16_t>& reordered, int64_t rows,
                                             int64_t ncols);

// A 2:4 weight in the CUTLASS layout.
struct CutlassSparse {
  DType dtype = DType::kF16;    // float16 or bfloat16
  std::vector<int64_t> shape;   // the original dense shape
  int64_t rows = 0, cols = 0;   // the [rows, K] matrix view
  std::vector<uint8_t> values;  // rows * cols/2 elements
  std::vector<uint16_t> meta;   // rows * cols/16 reordered words
};

// Throws Error unless c is float16/bfloat16 with rows % 32 == 0 and K % 32 == 0.
CutlassSparse to_cutlass(const Compressed& c);
// The inverse; validates sizes and every code (the result passes sparse24::validate).
Compressed from_cutlass(const CutlassSparse& s);

// A copy of c with its values converted to float16/bfloat16 (rounded to nearest even). Throws Error if a
// finite value overflows the target type. Metadata is unchanged.
Compressed convert_values(const Compressed& c, DType to);

// The export-gpu file: tensors "values" (F16/BF16, [rows, K/2]) and "metadata" (I16, [rows, K/16], the
// reordered words, as torch.int16 in PyTorch), and __metadata__ {"format": "sparse24-gpu", "layout":
// "cutlass", "pattern": "2:4", "dtype", "shape" (original dense shape), "matrix" ("[rows, K]"),
// "meta_dtype": "int16", "meta_words": "...", "meta_reorder": "..."}.
SafeTensors encode_cutlass_file(const CutlassSparse& s);
// Reads it back, checking every field.
CutlassSparse decode_cutlass_file(const SafeTensors& st, const std::string& what);

}  // namespace sparse24
