// An assertion for the checkpoint tests: two checkpoints hold the same tensors.
#pragma once
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "sparse24/checkpoint.h"

namespace sparse24::testing {

// The same names, each dense in both (the same type and bytes) or 2:4 in both (the same values and codes),
// in any order.
inline void expect_same_tensors(const Checkpoint& a, const Checkpoint& b) {
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  std::map<std::string, const CheckpointTensor*> by_name;
  for (const CheckpointTensor& t : b.tensors) by_name[t.name] = &t;
  for (const CheckpointTensor& t : a.tensors) {
    ASSERT_TRUE(by_name.count(t.name)) << t.name;
    const CheckpointTensor& u = *by_name.at(t.name);
    ASSERT_EQ(t.sparse.has_value(), u.sparse.has_value()) << t.name;
    if (t.sparse) {
      EXPECT_EQ(t.sparse->dtype, u.sparse->dtype) << t.name;
      EXPECT_EQ(t.sparse->values, u.sparse->values) << t.name;
      EXPECT_EQ(t.sparse->metadata, u.sparse->metadata) << t.name;
      EXPECT_EQ(t.sparse->scale_group, u.sparse->scale_group) << t.name;
      EXPECT_EQ(t.sparse->scales, u.sparse->scales) << t.name;
    } else {
      EXPECT_EQ(t.dense.dtype, u.dense.dtype) << t.name;
      EXPECT_EQ(t.dense.bytes, u.dense.bytes) << t.name;
    }
  }
}

}  // namespace sparse24::testing
