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

void quantize_gemv_i8(const float* w, int64_t rows, int64_t cols, int8_t* q, float* scales) {
  const int64_t groups = (cols + kGemvI8Group - 1) / kGemvI8Group;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t c0 = g * kGemvI8Group, c1 = std::min(cols, c0 + kGemvI8Group);
      float mx = 0;
      for (int64_t c = c0; c < c1; ++c) mx = std::max(mx, std::fabs(w[r * cols + c]));
      const float scale = mx > 0 ? mx / 127.0f : 1.0f;
      scales[r * groups + g] = scale;
      for (int64_t c = c0; c < c1; ++c)
        q[r * cols + c] =
            static_cast<int8_t>(std::clamp(std::nearbyint(w[r * cols + c] / scale), -127.0f, 127.0f));
    }
}

}  // namespace sparse24::kernels
