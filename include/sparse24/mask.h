// Pruning masks on a row-major [rows, K] float matrix, groups running along K.
// A mask is one byte per element, 1 = keep, 0 = prune. When K is not a multiple of M, the last group is
// padded with zeros (the padding is never kept ahead of a real element of equal magnitude, because ties go
// to the lower index). Every function throws Error naming the row and column of a NaN.
#pragma once
#include <cstdint>
#include <vector>

#include "sparse24/pattern.h"

namespace sparse24 {

using Mask = std::vector<uint8_t>;

// Keeps the N largest |w| of each group of M; equal magnitudes go to the lower index. Deterministic.
Mask magnitude_mask(const float* w, int64_t rows, int64_t k, Pattern p = kPattern24);

enum class TransposableMethod { kGreedy, kExact };
// Transposable 2:4: in every 4x4 block each row and each column keeps exactly 2, so W and W^T are both
// 2:4. Rows and K are padded with zeros to multiples of 4 for the search.
//   kExact:  the best of the 90 valid 4x4 patterns by kept magnitude (first in enumeration order on ties).
//   kGreedy: take entries by decreasing magnitude while their row and column have fewer than 2; if that
//            leaves a row and a column one short, one swap completes the block (the best by magnitude).
Mask transposable_mask(const float* w, int64_t rows, int64_t k, TransposableMethod method);

// The 90 4x4 0/1 patterns with two ones in every row and column, as 16-bit masks (bit r*4+c), in a fixed
// order.
const std::vector<uint16_t>& transposable_patterns_4x4();

struct PatternCheck {
  bool valid = true;
  int64_t groups = 0;          // groups examined (rows * ceil(K/M))
  int64_t bad_groups = 0;      // groups with more than N nonzeros
  int64_t first_bad_row = -1;  // row and group index of the first bad group in row-major order
  int64_t first_bad_group = -1;
};
// Counts groups of M along K with more than N nonzeros (zero is compared by value: -0.0 is zero).
PatternCheck check_pattern(const float* w, int64_t rows, int64_t k, Pattern p = kPattern24);
// True if both W and W^T are 2:4 (every 4-column group of each row and 4-row group of each column).
bool is_transposable_24(const float* w, int64_t rows, int64_t k);

// Zeroes every element whose mask byte is 0.
void apply_mask(float* w, const Mask& mask);
// Fraction of sum |w| that the mask keeps (1.0 for an all-zero matrix).
double kept_magnitude(const float* w, const Mask& mask);
// Throws Error naming the first NaN ("NaN at row r, column c").
void reject_nan(const float* w, int64_t rows, int64_t k);

}  // namespace sparse24
