// Element types sparse24 stores. Masks are computed on float copies (every supported dtype converts to
// float exactly), so one mask algorithm serves all dtypes.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

namespace sparse24 {

enum class DType : uint8_t { kF32, kF16, kBF16, kI8 };

// Bytes per element.
size_t dtype_size(DType t);
// Canonical lowercase name: "float32", "float16", "bfloat16", "int8".
const char* dtype_name(DType t);
// Parses a canonical name (also accepts "f32", "f16", "bf16", "i8"); throws Error on anything else.
DType parse_dtype(const std::string& name);

// IEEE binary16 <-> float. float_to_half rounds to nearest even; NaN stays NaN, overflow gives inf.
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
// bfloat16 <-> float. float_to_bf16 rounds to nearest even; NaN stays NaN.
inline float bf16_to_float(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
  x += 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

// One element of dtype t stored at p (any alignment), converted to float (exact for every dtype).
float element_to_float(DType t, const uint8_t* p);

}  // namespace sparse24
