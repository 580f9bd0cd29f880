#include "sparse24/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "sparse24/error.h"
#include "sparse24/tensor.h"

namespace sparse24 {

TEST(DType, NamesAndSizes) {
  EXPECT_EQ(dtype_size(DType::kF32), 4u);
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kI8), 1u);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI8})
    EXPECT_EQ(parse_dtype(dtype_name(t)), t);
  EXPECT_THROW(parse_dtype("float64"), Error);
}

// Every finite half converts to float and back to the same bits; NaNs stay NaN.
TEST(DType, HalfRoundTripsAllValues) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = half_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(half_to_float(float_to_half(f)))) << h;
      continue;
    }
    ASSERT_EQ(float_to_half(f), h) << "half bits " << h << " -> " << f;
  }
}

TEST(DType, HalfRounding) {
  EXPECT_EQ(half_to_float(float_to_half(1.0f)), 1.0f);
  EXPECT_EQ(half_to_float(float_to_half(65504.f)), 65504.f);
  EXPECT_TRUE(std::isinf(half_to_float(float_to_half(65520.f))));
  EXPECT_EQ(half_to_float(float_to_half(65519.f)), 65504.f);
  // 1 + 2^-11 is halfway between 1 and the next half: ties to even (1.0).
  EXPECT_EQ(half_to_float(float_to_half(1.0f + std::ldexp(1.f, -11))), 1.0f);
  EXPECT_EQ(half_to_float(float_to_half(1.0f + 3 * std::ldexp(1.f, -11))), 1.0f + std::ldexp(1.f, -9));
  EXPECT_EQ(half_to_float(float_to_half(std::ldexp(1.f, -24))), std::ldexp(1.f, -24));  // smallest subnormal
  EXPECT_EQ(half_to_float(float_to_half(std::ldexp(1.f, -26))), 0.f);
  EXPECT_EQ(float_to_half(-0.f), 0x8000);
}

TEST(DType, BFloat16) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = bf16_to_float(static_cast<uint16_t>(b));
    if (!std::isnan(f)) {
      ASSERT_EQ(float_to_bf16(f), b);
    }
  }
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + std::ldexp(1.f, -8))), 1.0f);  // tie to even
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(Tensor, ConvertsAndSaturates) {
  Tensor t = Tensor::from_float({1.5f, -200.f, 300.f, -3.f}, {4}, DType::kI8);
  EXPECT_EQ(t.to_float(), (std::vector<float>{2.f, -128.f, 127.f, -3.f}));
  EXPECT_THROW(Tensor::from_float({1.f}, {2}), Error);
  Tensor big;
  big.shape = {1ll << 40, 1ll << 40};
  EXPECT_THROW(big.numel(), Error);
}

}  // namespace sparse24
