// The compressed 2:4 file: round trips for every dtype and shape, and refusal of inconsistent files.
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/seed.h"
#include "io/io_test_util.h"
#include "sparse24/compressed.h"
#include "sparse24/io.h"

namespace sparse24 {
namespace {

using testing::TempDir;

const std::vector<std::vector<int64_t>> kShapes = {
    {1},     {3},     {4},     {5},    {63},      {64},         {65},         {3, 5},
    {4, 63}, {2, 64}, {3, 65}, {0, 8}, {2, 3, 8}, {4, 3, 2, 2}, {8, 5, 1, 3}, {65, 64}};

Compressed make(std::mt19937_64& g, DType dtype, const std::vector<int64_t>& shape) {
  const auto values = testing::random_floats(g, static_cast<size_t>(testing::product(shape)), -100.f, 100.f);
  return compress(Tensor::from_float(values, shape, dtype), /*prune=*/true);
}

void expect_same(const Compressed& a, const Compressed& b) {
  EXPECT_EQ(a.dtype, b.dtype);
  EXPECT_EQ(a.shape, b.shape);
  EXPECT_EQ(a.rows, b.rows);
  EXPECT_EQ(a.cols, b.cols);
  EXPECT_EQ(a.values, b.values);
  EXPECT_EQ(a.metadata, b.metadata);
}

Compressed parse(const std::vector<uint8_t>& f) { return parse_compressed(f.data(), f.size(), "w.s24"); }

StTensor& tensor(SafeTensors& st, const std::string& name) {
  for (auto& [n, t] : st.tensors)
    if (n == name) return t;
  throw std::runtime_error("no tensor " + name);
}

TEST(CompressedFile, RoundTripsEveryDtypeAndShapeBitForBit) {
  SPARSE24_SEED_TRACE();
  auto g = testing::rng(21);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kI8}) {
    for (const auto& shape : kShapes) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + shape_string(shape));
      const Compressed c = make(g, dtype, shape);
      const Compressed back = parse(encode_compressed(c));
      expect_same(back, c);
      EXPECT_EQ(decompress(back).bytes, decompress(c).bytes);
    }
  }
}

TEST(CompressedFile, IsASafetensorsFileWithTheDocumentedLayout) {
  SPARSE24_SEED_TRACE();
  auto g = testing::rng(22);
  const Compressed c = make(g, DType::kF16, {6, 10});
  const std::vector<uint8_t> f = encode_compressed(c);
  const SafeTensors st = parse_safetensors(f.data(), f.size(), "w.s24");
  EXPECT_EQ(st.metadata,
            (std::map<std::string, std::string>{
                {"format", "sparse24"}, {"pattern", "2:4"}, {"shape", "[6, 10]"}, {"dtype", "float16"}}));
  ASSERT_EQ(st.tensors.size(), 2u);
  EXPECT_EQ(st.tensors[0].first, "values");
  EXPECT_EQ(st.at("values").dtype, "F16");
  EXPECT_EQ(st.at("values").shape, (std::vector<int64_t>{6, 6}));
  EXPECT_EQ(st.at("metadata").dtype, "U8");
  EXPECT_EQ(st.at("metadata").shape, (std::vector<int64_t>{6, 2}));
}

TEST(CompressedFile, SaveAndLoadAreAtomic) {
  SPARSE24_SEED_TRACE();
  auto g = testing::rng(23);
  TempDir dir;
  const Compressed c = make(g, DType::kBF16, {16, 33});
  save_compressed(dir.file("w.s24"), c);
  expect_same(load_compressed(dir.file("w.s24")), c);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"w.s24"});
  EXPECT_ERROR(save_compressed(dir.file("nope/w.s24"), c), "No such file or directory");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"w.s24"});
  EXPECT_ERROR(load_compressed(dir.file("x.s24")), "cannot open");
}

TEST(CompressedFile, InvalidCompressedIsNotWritten) {
  SPARSE24_SEED_TRACE();
  auto g = testing::rng(24);
  Compressed c = make(g, DType::kF32, {2, 8});
  c.metadata[0] = 0xFF;  // code 0xF: idx0 == idx1
  EXPECT_THROW(encode_compressed(c), Error);
  TempDir dir;
  EXPECT_THROW(save_compressed(dir.file("w.s24"), c), Error);
  EXPECT_TRUE(dir.entries().empty());
}

TEST(CompressedFile, InconsistentFilesAreRefusedWithAClearMessage) {
  SPARSE24_SEED_TRACE();
  auto g = testing::rng(25);
  const Compressed c = make(g, DType::kF32, {4, 8});
  const std::vector<uint8_t> good = encode_compressed(c);
  auto mutated = [&](const std::function<void(SafeTensors&)>& edit) {
    SafeTensors st = parse_safetensors(good.data(), good.size(), "w.s24");
    edit(st);
    return encode_safetensors(st);
  };
  struct Case {
    std::function<void(SafeTensors&)> edit;
    std::string phrase;
  };
  const std::vector<Case> cases = {
      {[](SafeTensors& st) { st.metadata.erase("format"); },
       "not a sparse24 compressed file: __metadata__ has no 'format'"},
      {[](SafeTensors& st) { st.metadata["format"] = "pt"; }, "'format' is 'pt', expected 'sparse24'"},
      {[](SafeTensors& st) { st.metadata.erase("pattern"); }, "has no 'pattern'"},
      {[](SafeTensors& st) { st.metadata["pattern"] = "1:2"; },
       "'pattern' is '1:2'; only '2:4' is supported"},
      {[](SafeTensors& st) { st.metadata.erase("dtype"); }, "has no 'dtype'"},
      {[](SafeTensors& st) { st.metadata["dtype"] = "float64"; }, "__metadata__ 'dtype'"},
      {[](SafeTensors& st) { st.metadata["dtype"] = "float16"; },
       "tensor 'values' has dtype F32, expected F16"},
      {[](SafeTensors& st) { st.metadata.erase("shape"); }, "has no 'shape'"},
      {[](SafeTensors& st) { st.metadata["shape"] = "[4, x]"; }, "'shape' '[4, x]' is not a valid shape"},
      {[](SafeTensors& st) { st.metadata["shape"] = "[4, -8]"; }, "is not a valid shape"},
      {[](SafeTensors& st) { st.metadata["shape"] = "[4, 8"; }, "is not a valid shape"},
      {[](SafeTensors& st) { st.metadata["shape"] = "4, 8"; }, "is not a valid shape"},
      {[](SafeTensors& st) { st.metadata["shape"] = "[4, 8] x"; }, "is not a valid shape"},
      {[](SafeTensors& st) { st.metadata["shape"] = "[99999999999999999999, 8]"; }, "is not a valid shape"},
      {[](SafeTensors& st) { st.metadata["shape"] = "[4611686018427387904, 4611686018427387904, 0]"; },
       "is not a valid shape"},
      {[](SafeTensors& st) { st.metadata["shape"] = "[0, 9223372036854775807]"; }, "is too large"},
      {[](SafeTensors& st) { st.metadata["shape"] = "[]"; }, "__metadata__ 'shape' []: "},
      {[](SafeTensors& st) { st.metadata["shape"] = "[1, 2, 3, 4, 5]"; },
       "__metadata__ 'shape' [1, 2, 3, 4, 5]: "},
      {[](SafeTensors& st) { st.metadata["shape"] = "[8, 8]"; },
       "tensor 'values' has shape [4, 4], expected [8, 4] for a [8, 8] matrix"},
      {[](SafeTensors& st) { st.metadata["shape"] = "[4, 12]"; },
       "tensor 'values' has shape [4, 4], expected [4, 6]"},
      {[](SafeTensors& st) {
         st.add("extra", StTensor{"U8", {1}, {0}});
       },
       "unexpected tensor 'extra'"},
      {[](SafeTensors& st) { st.tensors.erase(st.tensors.begin()); }, "no tensor 'values'"},
      {[](SafeTensors& st) { st.tensors.pop_back(); }, "no tensor 'metadata'"},
      {[](SafeTensors& st) { tensor(st, "metadata").dtype = "I8"; },
       "tensor 'metadata' has dtype I8, expected U8"},
      {[](SafeTensors& st) {
         tensor(st, "values").shape = {2, 8};
       },
       "tensor 'values' has shape [2, 8]"},
      {[](SafeTensors& st) { tensor(st, "metadata").bytes[3] = 0x0F; }, "invalid metadata code"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i) + ": " + cases[i].phrase);
    const std::vector<uint8_t> f = mutated(cases[i].edit);
    EXPECT_ERROR(parse(f), cases[i].phrase);
    EXPECT_ERROR(parse(f), "w.s24: ");
  }
}

// int8 with fp32 scales (quantize_int8): the scales and their group round-trip bit for bit, decompress gives
// the dequantised float32 matrix, and inconsistent scale fields are refused.
TEST(CompressedFile, Int8ScalesRoundTripAndAreChecked) {
  SPARSE24_SEED_TRACE();
  auto g = testing::rng(27);
  for (const auto& shape : kShapes) {
    if (testing::product(shape) == 0) continue;
    for (int64_t group : {4, 64, 1 << 20}) {
      SCOPED_TRACE(shape_string(shape) + " group " + std::to_string(group));
      const Compressed c = quantize_int8(make(g, DType::kF32, shape), group);
      const Compressed back = parse(encode_compressed(c));
      expect_same(back, c);
      EXPECT_EQ(back.scale_group, c.scale_group);
      EXPECT_EQ(back.scales, c.scales);
      const Tensor d = decompress(back);
      EXPECT_EQ(d.dtype, DType::kF32);
      EXPECT_EQ(d.bytes, decompress(c).bytes);
    }
  }
  const Compressed c = quantize_int8(make(g, DType::kF32, {4, 8}), 4);
  EXPECT_NEAR(c.bytes_per_weight(), (16.0 + 4 + 4 * 2 * 4) / 32, 1e-12);
  const std::vector<uint8_t> good = encode_compressed(c);
  auto mutated = [&](const std::function<void(SafeTensors&)>& edit) {
    SafeTensors st = parse_safetensors(good.data(), good.size(), "w.s24");
    edit(st);
    return encode_safetensors(st);
  };
  const std::vector<std::pair<std::function<void(SafeTensors&)>, std::string>> cases = {
      {[](SafeTensors& st) { st.metadata["scale_group"] = "6"; },
       "'scale_group' '6' is not a positive multiple"},
      {[](SafeTensors& st) { st.metadata["scale_group"] = "0"; }, "is not a positive multiple"},
      {[](SafeTensors& st) { st.metadata["scale_group"] = "12"; }, "is not a positive multiple"},
      {[](SafeTensors& st) { st.metadata["scale_group"] = "-4"; }, "is not a positive multiple"},
      {[](SafeTensors& st) { st.metadata["scale_group"] = "99999999999999999999"; },
       "is not a positive multiple"},
      {[](SafeTensors& st) { st.metadata["dtype"] = "float32"; }, "(only int8 has scales)"},
      {[](SafeTensors& st) { st.metadata["scale_group"] = "8"; },
       "tensor 'scales' has shape [4, 2], expected [4, 1]"},
      {[](SafeTensors& st) { st.metadata.erase("scale_group"); }, "unexpected tensor 'scales'"},
      {[](SafeTensors& st) { std::erase_if(st.tensors, [](const auto& t) { return t.first == "scales"; }); },
       "without a tensor 'scales'"},
      {[](SafeTensors& st) {
         tensor(st, "scales").dtype = "F16";
         tensor(st, "scales").shape = {4, 4};
       },
       "tensor 'scales' has dtype F16"},
      {[](SafeTensors& st) {
         auto& b = tensor(st, "scales").bytes;
         const float nan = std::numeric_limits<float>::quiet_NaN();
         std::memcpy(b.data(), &nan, 4);
       },
       "is not finite"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i) + ": " + cases[i].second);
    EXPECT_ERROR(parse(mutated(cases[i].first)), cases[i].second);
  }
}

TEST(CompressedFile, ValuesPastKAreRefused) {
  // Column 7 holds a kept nonzero; a file claiming K = 7 would put it in the zero padding.
  const Compressed c = compress(Tensor::from_float({0, 0, 0, 0, 0, 0, 1, 2}, {1, 8}));
  const std::vector<uint8_t> good = encode_compressed(c);
  SafeTensors st = parse_safetensors(good.data(), good.size(), "w.s24");
  st.metadata["shape"] = "[1, 7]";
  const std::vector<uint8_t> f = encode_safetensors(st);
  EXPECT_ERROR(parse(f), "w.s24: ");
  EXPECT_ERROR(parse(f), "padding");
}

TEST(CompressedFile, EveryTruncationIsRefused) {
  SPARSE24_SEED_TRACE();
  auto g = testing::rng(26);
  const std::vector<uint8_t> f = encode_compressed(make(g, DType::kI8, {3, 9}));
  for (size_t n = 0; n < f.size(); ++n) {
    SCOPED_TRACE("prefix of " + std::to_string(n) + " bytes");
    std::vector<uint8_t> prefix(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_THROW(parse_compressed(prefix.data(), prefix.size(), "w.s24"), Error);
  }
}

TEST(CompressedFile, RandomCorruptionNeverCrashes) {
  // A mutated file is either refused with an Error or is a valid Compressed (every code valid).
  SPARSE24_SEED_TRACE();
  auto g = testing::rng(27);
  const std::vector<uint8_t> f = encode_compressed(make(g, DType::kF16, {4, 12}));
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<uint8_t> m = f;
    const int edits = 1 + static_cast<int>(g() % 3);
    for (int k = 0; k < edits; ++k) m[g() % m.size()] = static_cast<uint8_t>(g());
    try {
      const Compressed c = parse_compressed(m.data(), m.size(), "w.s24");
      EXPECT_NO_THROW(validate(c));
    } catch (const Error&) {
    }
  }
}

}  // namespace
}  // namespace sparse24
