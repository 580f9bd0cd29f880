#include "sparse24/pattern.h"

#include <gtest/gtest.h>

#include "sparse24/error.h"

namespace sparse24 {

TEST(Pattern, Parse) {
  EXPECT_EQ(parse_pattern("2:4"), (Pattern{2, 4}));
  EXPECT_EQ(parse_pattern("1:2"), (Pattern{1, 2}));
  EXPECT_EQ(parse_pattern("4:8"), (Pattern{4, 8}));
  EXPECT_EQ(pattern_string({4, 8}), "4:8");
  EXPECT_THROW(parse_pattern("3:4"), Error);
  EXPECT_THROW(parse_pattern(""), Error);
}

TEST(Pattern, MatrixViewByRank) {
  EXPECT_EQ(matrix_view({7}).rows, 1);
  EXPECT_EQ(matrix_view({3, 5}).cols, 5);
  EXPECT_EQ(matrix_view({2, 3, 5}).rows, 6);
  MatrixView conv = matrix_view({8, 16, 3, 3});
  EXPECT_TRUE(conv.conv);
  EXPECT_EQ(conv.rows, 8 * 9);
  EXPECT_EQ(conv.cols, 16);
  EXPECT_THROW(matrix_view({}), Error);
  EXPECT_THROW(matrix_view({4, 0}), Error);  // K = 0
  EXPECT_THROW(matrix_view({1, 2, 3, 4, 5}), Error);
  EXPECT_THROW(matrix_view({-1, 4}), Error);
}

// Conv weights: the matrix row (o, h, w) holds the input channels of that output and kernel position.
TEST(Pattern, ConvGatherScatter) {
  const std::vector<int64_t> shape = {2, 5, 2, 3};
  std::vector<float> t(2 * 5 * 2 * 3);
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<float>(i);
  const std::vector<float> m = gather_matrix(t, shape);
  // Row (o=1, h=1, w=2) = 1*6 + 1*3 + 2 = 11, column i=4: tensor element ((1*5+4)*2+1)*3+2.
  EXPECT_EQ(m[11 * 5 + 4], static_cast<float>(((1 * 5 + 4) * 2 + 1) * 3 + 2));
  EXPECT_EQ(scatter_from_matrix(m, shape), t);
}

}  // namespace sparse24
