// 2:4 layers (fp32, bf16, int8) stored in the kernels' layout inside the sparse24 checkpoint layout
// (docs/formats.md): written, read back as the same matrices (eager and deferred), laid out for in-place
// reads, refused when damaged, and converted to the other layouts as any 2:4 layer.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/seed.h"
#include "sparse24/checkpoint.h"
#include "sparse24/compressed.h"
#include "sparse24/error.h"
#include "sparse24/io.h"

namespace sparse24 {
namespace {

Compressed random_i8(std::mt19937_64& g, int64_t rows, int64_t cols) {
  std::vector<float> w = testing::random_floats(g, static_cast<size_t>(rows * cols));
  return quantize_int8(compress(Tensor::from_float(w, {rows, cols}), true), 64);
}

std::vector<float> dense(const Compressed& c) { return decompress(c).to_float(); }

Checkpoint lanes_checkpoint(std::mt19937_64& g) {
  Checkpoint ck;
  ck.tensors.push_back({"norm.weight", StTensor{"F32", {16}, std::vector<uint8_t>(64, 0)}, {}});
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{16, 128}, {9, 70}, {24, 2048}}) {
    CheckpointTensor t{"l" + std::to_string(cols) + ".weight", {}, random_i8(g, rows, cols)};
    t.lanes_kb = 1024;
    ck.tensors.push_back(std::move(t));
  }
  for (bool bf16 : {false, true}) {  // fp32 and bf16 values
    Compressed c = compress(Tensor::from_float(testing::random_floats(g, 16 * 72), {16, 72}), true);
    CheckpointTensor t{bf16 ? "bf16.weight" : "f32.weight", {}, bf16 ? to_bf16(std::move(c)) : std::move(c)};
    t.lanes_kb = 64;
    ck.tensors.push_back(std::move(t));
  }
  CheckpointTensor plain{"plain.weight", {}, random_i8(g, 8, 64)};  // (the usual tensors)
  ck.tensors.push_back(std::move(plain));
  return ck;
}

TEST(LanesCheckpoint, RoundTripsAndReadsInPlace) {
  SPARSE24_SEED_TRACE();
  auto g = testing::rng(53);
  const Checkpoint ck = lanes_checkpoint(g);
  const SafeTensors st = encode_checkpoint(ck, CheckpointFormat::kSparse24);
  EXPECT_EQ(st.metadata.at("l128.weight.lanes_kb"), "1024");
  EXPECT_EQ(st.metadata.at("l128.weight.lanes_dtype"), "I8");
  EXPECT_EQ(st.metadata.at("bf16.weight.lanes_dtype"), "BF16");
  EXPECT_EQ(st.metadata.at("f32.weight.lanes_dtype"), "F32");
  EXPECT_EQ(st.find("l128.weight.lanes")->dtype, "U8");
  EXPECT_EQ(st.find("l128.weight.values"), nullptr);
  EXPECT_NE(st.find("plain.weight.values"), nullptr);
  const std::vector<uint8_t> file = encode_safetensors(st);
  const SafeTensorsView view = parse_safetensors_view(file.data(), file.size(), "ck");
  const Checkpoint back = read_checkpoint(view, "ck");
  EXPECT_TRUE(back.metadata.empty());  // (the layout's keys taken)
  ASSERT_EQ(back.tensors.size(), ck.tensors.size());
  for (const CheckpointTensor& want : ck.tensors) {
    SCOPED_TRACE(want.name);
    const CheckpointTensor* got = back.find(want.name);
    ASSERT_TRUE(got != nullptr);
    ASSERT_EQ(got->sparse.has_value(), want.sparse.has_value());
    if (!want.sparse) continue;
    EXPECT_EQ(got->lanes_kb, want.lanes_kb);
    EXPECT_EQ(got->sparse->dtype, want.sparse->dtype);
    EXPECT_EQ(got->sparse->shape, want.sparse->shape);
    EXPECT_EQ(dense(*got->sparse), dense(*want.sparse));
  }
  // Deferred: the bytes where they are in the file, 64-byte aligned from the data buffer (which starts at a
  // multiple of 64), decoded on demand to the same matrix.
  const CheckpointView deferred = read_checkpoint_view(view, "ck", true);
  for (const CheckpointTensorView& t : deferred.tensors) {
    if (t.lanes_kb == 0) continue;
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.lanes.data(), view.find(t.name + ".lanes")->bytes.data());
    EXPECT_EQ((t.lanes.data() - file.data()) % 32, 0);
    ASSERT_TRUE(t.decode != nullptr);
    EXPECT_EQ(dense(t.decode()), dense(*ck.find(t.name)->sparse));
  }
  // Written again from what was read: the same bytes.
  EXPECT_EQ(encode_safetensors(encode_checkpoint(back, CheckpointFormat::kSparse24)), file);
  // The other layouts: as any 2:4 int8 layer (dense: dequantized; sparse-24-bitmask has no scales).
  const SafeTensors plain = encode_checkpoint(back, CheckpointFormat::kDense);
  EXPECT_EQ(plain.find("l70.weight")->dtype, "F32");
  EXPECT_THROW(encode_checkpoint(back, CheckpointFormat::kBitmask24), Error);
}

TEST(LanesCheckpoint, RefusesWhatIsNotTheLayout) {
  SPARSE24_SEED_TRACE();
  auto g = testing::rng(54);
  const Checkpoint ck = lanes_checkpoint(g);
  const SafeTensors good = encode_checkpoint(ck, CheckpointFormat::kSparse24);
  const auto refusal = [](const SafeTensors& st) -> std::string {
    const std::vector<uint8_t> file = encode_safetensors(st);
    try {
      read_checkpoint(parse_safetensors_view(file.data(), file.size(), "ck"), "ck");
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  SafeTensors st = good;
  st.metadata["l128.weight.lanes_kb"] = "100";
  EXPECT_NE(refusal(st).find("not a positive multiple of 64"), std::string::npos) << refusal(st);
  st = good;
  for (auto& [name, t] : st.tensors)
    if (name == "l128.weight.lanes") t.bytes.pop_back(), t.shape[0] -= 1;
  EXPECT_NE(refusal(st).find("expected U8"), std::string::npos) << refusal(st);
  st = good;
  for (auto& [name, t] : st.tensors)
    if (name == "l128.weight.lanes") {
      const float nan = std::nanf("");
      std::memcpy(t.bytes.data() + 64, &nan, 4);  // row 0's scale of the first entry
    }
  EXPECT_NE(refusal(st).find("not finite"), std::string::npos) << refusal(st);
  EXPECT_NE(refusal(st).find("l128.weight"), std::string::npos) << refusal(st);
  st = good;
  st.metadata.erase("l128.weight.lanes_dtype");
  EXPECT_NE(refusal(st).find("lanes_dtype' is missing"), std::string::npos) << refusal(st);
  st.metadata["l128.weight.lanes_dtype"] = "BF16";  // (then its size is not that type's)
  EXPECT_NE(refusal(st).find("expected U8"), std::string::npos) << refusal(st);
  st = good;
  for (auto& [name, t] : st.tensors)
    if (name == "f32.weight.lanes") {
      const float inf = INFINITY;
      std::memcpy(t.bytes.data() + 64 + 4 * 5, &inf, 4);  // row 5's first value
    }
  EXPECT_NE(refusal(st).find("row 5 holds a non-finite value"), std::string::npos) << refusal(st);
  st = good;
  st.metadata["l128.weight.scale_group"] = "64";
  EXPECT_NE(refusal(st).find("not allowed"), std::string::npos) << refusal(st);
  // The writer: fp32, bf16, or int8 with a scale per 64 positions, all finite.
  Checkpoint bad = ck;
  bad.tensors[1].sparse = quantize_int8(to_f32(*bad.tensors[1].sparse), 32);
  EXPECT_THROW(encode_checkpoint(bad, CheckpointFormat::kSparse24), Error);
  bad.tensors[1].sparse = to_f32(*ck.tensors[1].sparse);
  bad.tensors[1].sparse->values[3] = 0xff;  // (a NaN's bytes in the first value)
  bad.tensors[1].sparse->values[2] = 0xff;
  bad.tensors[1].sparse->values[1] = 0xff;
  bad.tensors[1].sparse->values[0] = 0xff;
  EXPECT_THROW(encode_checkpoint(bad, CheckpointFormat::kSparse24), Error);
}

}  // namespace
}  // namespace sparse24
