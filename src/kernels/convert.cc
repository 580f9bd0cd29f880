// Row conversions and the finiteness check (convert.h): the dispatch and the portable loops.
#include "convert.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace sparse24::kernels {

bool f16c_supported() {
  // AVX2 stands for AVX + F16C (every AVX2 CPU has F16C; clang's __builtin_cpu_supports has no "f16c").
  static const bool ok = __builtin_cpu_supports("avx2");
  return ok;
}

void floats_to_half(const float* x, int64_t n, uint16_t* y) {
  if (f16c_supported()) return floats_to_half_f16c(x, n, y);
  for (int64_t i = 0; i < n; ++i) y[i] = float_to_half(x[i]);
}

void half_to_floats(const uint16_t* x, int64_t n, float* y) {
  if (f16c_supported()) return half_to_floats_f16c(x, n, y);
  for (int64_t i = 0; i < n; ++i) y[i] = half_to_float(x[i]);
}

void floats_to_bf16(const float* x, int64_t n, uint16_t* y) {
  if (f16c_supported()) return floats_to_bf16_avx2(x, n, y);
  for (int64_t i = 0; i < n; ++i) y[i] = float_to_bf16(x[i]);
}

void elements_to_floats(DType t, const uint8_t* p, int64_t n, float* y) {
  if (n <= 0) return;
  switch (t) {
    case DType::kF32:
      std::memcpy(y, p, static_cast<size_t>(n) * 4);
      return;
    case DType::kF16:
    case DType::kBF16: {
      // A bounce buffer keeps the source's alignment out of the loops (p may be odd).
      uint16_t buf[1024];
      for (int64_t i = 0; i < n; i += 1024) {
        const int64_t m = std::min<int64_t>(1024, n - i);
        std::memcpy(buf, p + 2 * i, static_cast<size_t>(m) * 2);
        if (t == DType::kF16) {
          half_to_floats(buf, m, y + i);
        } else {
          for (int64_t j = 0; j < m; ++j) {  // the bits moved up: vectorised by the compiler
            const uint32_t u = static_cast<uint32_t>(buf[j]) << 16;
            std::memcpy(y + i + j, &u, 4);
          }
        }
      }
      return;
    }
    case DType::kI8:
      for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(static_cast<int8_t>(p[i]));
      return;
  }
}

bool all_finite(const float* x, int64_t n) {
  // Non-finite means an all-ones exponent, which adding one to the exponent carries into the sign bit: OR
  // over a block of such sums (16 lanes, vectorised by the compiler) has it set if any value is non-finite.
  // Blocks of 1,024 values end early.
  const auto carry = [](const float* p) {
    uint32_t u;
    std::memcpy(&u, p, 4);
    return (u & 0x7F800000u) + 0x00800000u;
  };
  int64_t i = 0;
  for (; i + 1024 <= n; i += 1024) {
    uint32_t m[16] = {};
    for (int64_t j = 0; j < 1024; j += 16)
      for (int k = 0; k < 16; ++k) m[k] |= carry(x + i + j + k);
    uint32_t any = 0;
    for (uint32_t v : m) any |= v;
    if (any & 0x80000000u) return false;
  }
  for (; i < n; ++i)
    if (carry(x + i) & 0x80000000u) return false;
  return true;
}

bool all_finite_bf16(const uint16_t* x, int64_t n) {
  uint16_t any = 0;  // all_finite's carry into the sign bit, on bfloat16's 8-bit exponent
  for (int64_t i = 0; i < n; ++i) any |= static_cast<uint16_t>((x[i] & 0x7F80u) + 0x0080u);
  return (any & 0x8000u) == 0;
}

bool all_finite_elements(DType t, const uint8_t* p, int64_t n) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  if (t == DType::kF32 && at % alignof(float) == 0) return all_finite(reinterpret_cast<const float*>(p), n);
  if (t == DType::kBF16 && at % alignof(uint16_t) == 0)
    return all_finite_bf16(reinterpret_cast<const uint16_t*>(p), n);
  constexpr int64_t kPiece = 4096;
  float piece[kPiece];
  const size_t size = dtype_size(t);
  for (int64_t i = 0; i < n; i += kPiece) {
    const int64_t c = std::min(kPiece, n - i);
    elements_to_floats(t, p + static_cast<size_t>(i) * size, c, piece);
    if (!all_finite(piece, c)) return false;
  }
  return true;
}

void quantize_gemv_i8(const float* w, int64_t rows, int64_t cols, int8_t* q, float* scales) {
  const int64_t groups = (cols + kGemvI8Group - 1) / kGemvI8Group;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t c0 = g * kGemvI8Group, c1 = std::min(cols, c0 + kGemvI8Group);
      const float scale = quantize_i8(w + r * cols + c0, c1 - c0, q + r * cols + c0);
      scales[r * groups + g] = scale > 0 ? scale : 1.0f;  // (an all-zero group: q is zero either way)
    }
}

float quantize_i8(const float* x, int64_t n, int8_t* q) {
  if (f16c_supported()) return quantize_i8_avx2(x, n, q);
  float amax = 0.f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float scale = amax / 127.f;
  for (int64_t i = 0; i < n; ++i) q[i] = scale == 0.f ? 0 : round_i8(x[i] / scale);
  return scale;
}

const Prune24Tables& prune24_tables() {
  static const Prune24Tables tables = [] {
    // A group's stored positions for its kept ones (bits of m): those, completed with the lowest others.
    int pos[16][2];
    for (int m = 0; m < 16; ++m) {
      int n = 0;
      for (int i = 0; i < 4 && n < 2; ++i)
        if ((m >> i) & 1) pos[m][n++] = i;
      for (int i = 0; i < 4 && n < 2; ++i)
        if (!((m >> i) & 1)) pos[m][n++] = i;
      if (pos[m][0] > pos[m][1]) std::swap(pos[m][0], pos[m][1]);
    }
    Prune24Tables t{};
    for (int b = 0; b < 256; ++b) {
      const int* lo = pos[b & 15];
      const int* hi = pos[b >> 4];
      t.positions[b] = static_cast<uint32_t>(lo[0] | lo[1] << 8 | (4 + hi[0]) << 16 | (4 + hi[1]) << 24);
      t.meta[b] = static_cast<uint8_t>(lo[0] | lo[1] << 2 | (hi[0] | hi[1] << 2) << 4);
    }
    return t;
  }();
  return tables;
}

bool prune24_row(const float* x, int64_t cols, float* values, uint8_t* meta) {
  if (!f16c_supported() || cols < 16) return prune24_row_plain(x, cols, values, meta);
  const int64_t blocks = cols / 16;  // (4 groups, 2 metadata bytes each)
  const bool finite = prune24_blocks_avx2(x, blocks, values, meta);
  return prune24_row_plain(x + 16 * blocks, cols - 16 * blocks, values + 8 * blocks, meta + 2 * blocks) &&
         finite;
}

bool prune24_row_plain(const float* x, int64_t cols, float* values, uint8_t* meta) {
  const int64_t G = (cols + 3) / 4;
  bool finite = true;  // (no NaN)
  const Prune24Tables& t = prune24_tables();
  for (int64_t g = 0; g < G; g += 2) {  // two groups (a metadata byte) at a time
    float y[8] = {};                    // their kept values (+0 for the others and past the row's end)
    int m = 0;
    for (int h = 0; h < 2 && g + h < G; ++h) {
      const int64_t c0 = 4 * (g + h);
      float v[4] = {0.f, 0.f, 0.f, 0.f};
      for (int64_t i = 0; i < std::min<int64_t>(4, cols - c0); ++i) {
        v[i] = x[c0 + i];
        finite &= !std::isnan(v[i]);
      }
      const float a0 = std::fabs(v[0]), a1 = std::fabs(v[1]), a2 = std::fabs(v[2]), a3 = std::fabs(v[3]);
      // Kept: the two of rank < 2 (ahead of i: larger, or as large at a lower index), as magnitude_mask; a
      // padded tail group's zeros rank behind every real element, so they never displace one.
      const int g10 = a1 > a0, g20 = a2 > a0, g30 = a3 > a0, g21 = a2 > a1, g31 = a3 > a1, g32 = a3 > a2;
      const int rank[4] = {g10 + g20 + g30, 1 - g10 + g21 + g31, 2 - g20 - g21 + g32, 3 - g30 - g31 - g32};
      for (int i = 0; i < 4; ++i) {
        const bool kept = rank[i] < 2 && v[i] != 0.f;
        m |= static_cast<int>(kept) << (4 * h + i);
        y[4 * h + i] = kept ? v[i] : 0.f;
      }
    }
    const uint32_t p = t.positions[m];
    values[2 * g] = y[p & 0xFF];
    values[2 * g + 1] = y[(p >> 8) & 0xFF];
    if (g + 1 < G) {
      values[2 * g + 2] = y[(p >> 16) & 0xFF];
      values[2 * g + 3] = y[p >> 24];
    }
    meta[g / 2] = static_cast<uint8_t>(g + 1 < G ? t.meta[m] : t.meta[m] & 0x0F);  // (no odd group: nibble 0)
  }
  return finite;
}

}  // namespace sparse24::kernels
