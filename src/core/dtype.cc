#include "sparse24/dtype.h"

#include <cmath>

#include "sparse24/error.h"

namespace sparse24 {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kI8:
      return 1;
  }
  throw Error("invalid dtype");
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "float32";
    case DType::kF16:
      return "float16";
    case DType::kBF16:
      return "bfloat16";
    case DType::kI8:
      return "int8";
  }
  return "invalid";
}

DType parse_dtype(const std::string& name) {
  if (name == "float32" || name == "f32") return DType::kF32;
  if (name == "float16" || name == "f16") return DType::kF16;
  if (name == "bfloat16" || name == "bf16") return DType::kBF16;
  if (name == "int8" || name == "i8") return DType::kI8;
  throw Error("unknown dtype '" + name + "' (expected float32, float16, bfloat16 or int8)");
}

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t man = h & 0x3FF;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: value = man * 2^-24, exact in float
      float f = std::ldexp(static_cast<float>(man), -24);
      std::memcpy(&bits, &f, 4);
      bits |= sign;
    }
  } else if (exp == 31) {
    bits = sign | 0x7F800000u | (man << 13);  // inf or NaN (payload kept)
  } else {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) {  // inf or NaN
    return static_cast<uint16_t>(sign | 0x7C00 | (abs > 0x7F800000u ? 0x200 | ((abs >> 13) & 0x3FF) : 0));
  }
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal or zero
    // value / 2^-24, rounded to nearest even, is the subnormal mantissa.
    float a;
    std::memcpy(&a, &abs, 4);
    float scaled = a * 16777216.0f;    // exact (power of two)
    float r = std::nearbyint(scaled);  // default rounding mode: nearest even
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(r));
  }
  // Normal: rebias exponent, round mantissa to 10 bits, nearest even. A carry into the exponent is right.
  uint32_t v = abs - (112u << 23);
  uint32_t rounded = v + 0xFFFu + ((v >> 13) & 1u);
  return static_cast<uint16_t>(sign | (rounded >> 13));
}

float element_to_float(DType t, const uint8_t* p) {
  switch (t) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return half_to_float(h);
    }
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return bf16_to_float(h);
    }
    case DType::kI8:
      return static_cast<float>(static_cast<int8_t>(*p));
  }
  return 0.f;
}

}  // namespace sparse24
