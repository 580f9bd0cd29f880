#include "sparse24/mask.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>

#include "sparse24/error.h"

namespace sparse24 {
namespace {

void check_dims(int64_t rows, int64_t k) {
  if (rows < 0 || k <= 0) {
    throw Error("invalid matrix [" + std::to_string(rows) + ", " + std::to_string(k) +
                "] (K must be positive)");
  }
}

void check_pattern_supported(Pattern p) {
  if (p.m <= 0 || p.n < 0 || p.n > p.m || p.m > 64) throw Error("invalid pattern " + pattern_string(p));
}

}  // namespace

void reject_nan(const float* w, int64_t rows, int64_t k) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < k; ++c)
      if (std::isnan(w[r * k + c])) {
        throw Error("NaN at row " + std::to_string(r) + ", column " + std::to_string(c));
      }
}

Mask magnitude_mask(const float* w, int64_t rows, int64_t k, Pattern p) {
  check_dims(rows, k);
  check_pattern_supported(p);
  reject_nan(w, rows, k);
  Mask mask(static_cast<size_t>(rows * k), 0);
  std::array<int, 64> order;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = w + r * k;
    for (int64_t g0 = 0; g0 < k; g0 += p.m) {
      // Only the real elements of a padded tail group compete: padding is zero, and a zero never beats a
      // real element of equal magnitude (ties go to the lower index), so dropping it changes nothing.
      const int len = static_cast<int>(std::min<int64_t>(p.m, k - g0));
      if (p.m == 4 && p.n == 2 && len == 4) {  // 2:4, a whole group: keep the two of rank < 2
        float a[4];
        for (int i = 0; i < 4; ++i) a[i] = std::fabs(row[g0 + i]);
        for (int i = 0; i < 4; ++i) {
          int rank = 0;  // elements ahead of i: larger, or as large at a lower index
          for (int j = 0; j < 4; ++j) rank += (a[j] > a[i]) | ((a[j] == a[i]) & (j < i));
          mask[static_cast<size_t>(r * k + g0 + i)] = rank < 2;
        }
        continue;
      }
      // A stable sort by descending magnitude, by insertion (a group is at most 64 long; std::stable_sort's
      // buffer allocation per group took most of a decoder's in-memory pruning time).
      for (int i = 0; i < len; ++i) {
        const float a = std::fabs(row[g0 + i]);
        int j = i;
        for (; j > 0 && std::fabs(row[g0 + order[j - 1]]) < a; --j) order[j] = order[j - 1];
        order[j] = i;
      }
      for (int i = 0; i < std::min(len, p.n); ++i) mask[static_cast<size_t>(r * k + g0 + order[i])] = 1;
    }
  }
  return mask;
}

const std::vector<uint16_t>& transposable_patterns_4x4() {
  static const std::vector<uint16_t> patterns = [] {
    std::vector<uint16_t> out;
    for (uint32_t bits = 0; bits < (1u << 16); ++bits) {
      if (std::popcount(bits) != 8) continue;
      bool ok = true;
      for (int i = 0; i < 4 && ok; ++i) {
        ok = std::popcount((bits >> (4 * i)) & 0xFu) == 2 && std::popcount(bits & (0x1111u << i)) == 2;
      }
      if (ok) out.push_back(static_cast<uint16_t>(bits));
    }
    return out;
  }();
  return patterns;
}

namespace {

// Best of the 90 patterns by kept magnitude; the first in enumeration order on ties.
uint16_t exact_block(const std::array<float, 16>& a) {
  uint16_t best = 0;
  double best_sum = -1;
  for (uint16_t pat : transposable_patterns_4x4()) {
    double s = 0;
    for (int i = 0; i < 16; ++i)
      if (pat >> i & 1) s += a[i];
    if (s > best_sum) {
      best_sum = s;
      best = pat;
    }
  }
  return best;
}

uint16_t greedy_block(const std::array<float, 16>& a) {
  std::array<int, 16> order;
  for (int i = 0; i < 16; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return a[x] > a[y]; });
  uint16_t pat = 0;
  int row_n[4] = {0, 0, 0, 0}, col_n[4] = {0, 0, 0, 0};
  for (int i : order) {
    const int r = i / 4, c = i % 4;
    if (row_n[r] < 2 && col_n[c] < 2) {
      pat |= static_cast<uint16_t>(1u << i);
      ++row_n[r];
      ++col_n[c];
    }
  }
  if (std::popcount(pat) == 8) return pat;
  // Greedy can stop at 7: one row r and one column c are one short while (r, c) is already taken. Then
  // swapping a taken (r2, c2) for (r, c2) and (r2, c) completes the block; take the best such swap.
  int r = 0, c = 0;
  while (row_n[r] == 2) ++r;
  while (col_n[c] == 2) ++c;
  double best_gain = -1e300;
  uint16_t best = 0;
  for (int r2 = 0; r2 < 4; ++r2)
    for (int c2 = 0; c2 < 4; ++c2) {
      const int taken = r2 * 4 + c2, add1 = r * 4 + c2, add2 = r2 * 4 + c;
      if (r2 == r || c2 == c || !(pat >> taken & 1) || (pat >> add1 & 1) || (pat >> add2 & 1)) continue;
      const double gain = static_cast<double>(a[add1]) + a[add2] - a[taken];
      if (gain > best_gain) {
        best_gain = gain;
        best = static_cast<uint16_t>((pat & ~(1u << taken)) | (1u << add1) | (1u << add2));
      }
    }
  // A swap always exists in a 4x4 block (checked by the tests over random blocks); stay safe regardless.
  return best ? best : exact_block(a);
}

}  // namespace

Mask transposable_mask(const float* w, int64_t rows, int64_t k, TransposableMethod method) {
  check_dims(rows, k);
  reject_nan(w, rows, k);
  Mask mask(static_cast<size_t>(rows * k), 0);
  std::array<float, 16> a;
  for (int64_t r0 = 0; r0 < rows; r0 += 4)
    for (int64_t c0 = 0; c0 < k; c0 += 4) {
      for (int i = 0; i < 16; ++i) {
        const int64_t r = r0 + i / 4, c = c0 + i % 4;
        a[i] = (r < rows && c < k) ? std::fabs(w[r * k + c]) : 0.f;  // zero padding
      }
      const uint16_t pat = method == TransposableMethod::kExact ? exact_block(a) : greedy_block(a);
      for (int i = 0; i < 16; ++i) {
        const int64_t r = r0 + i / 4, c = c0 + i % 4;
        if (r < rows && c < k && (pat >> i & 1)) mask[static_cast<size_t>(r * k + c)] = 1;
      }
    }
  return mask;
}

PatternCheck check_pattern(const float* w, int64_t rows, int64_t k, Pattern p) {
  check_dims(rows, k);
  check_pattern_supported(p);
  PatternCheck out;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g * p.m < k; ++g) {
      ++out.groups;
      int nz = 0;
      for (int64_t c = g * p.m; c < std::min<int64_t>(k, (g + 1) * p.m); ++c) nz += w[r * k + c] != 0.f;
      if (nz > p.n) {
        if (out.valid) {
          out.valid = false;
          out.first_bad_row = r;
          out.first_bad_group = g;
        }
        ++out.bad_groups;
      }
    }
  return out;
}

bool is_transposable_24(const float* w, int64_t rows, int64_t k) {
  if (!check_pattern(w, rows, k, kPattern24).valid) return false;
  for (int64_t c = 0; c < k; ++c)
    for (int64_t r0 = 0; r0 < rows; r0 += 4) {
      int nz = 0;
      for (int64_t r = r0; r < std::min(rows, r0 + 4); ++r) nz += w[r * k + c] != 0.f;
      if (nz > 2) return false;
    }
  return true;
}

void apply_mask(float* w, const Mask& mask) {
  for (size_t i = 0; i < mask.size(); ++i)
    if (!mask[i]) w[i] = 0.f;
}

double kept_magnitude(const float* w, const Mask& mask) {
  double kept = 0, total = 0;
  for (size_t i = 0; i < mask.size(); ++i) {
    const double a = std::fabs(static_cast<double>(w[i]));
    total += a;
    if (mask[i]) kept += a;
  }
  return total > 0 ? kept / total : 1.0;
}

}  // namespace sparse24
