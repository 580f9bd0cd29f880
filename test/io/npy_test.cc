// .npy: bit-exact round trips, the header variants numpy and others write, and a hostile-file corpus.
#include <string>
#include <vector>

#include "common/seed.h"
#include "io/io_test_util.h"
#include "sparse24/io.h"

namespace sparse24 {
namespace {

using testing::random_tensor;
using testing::TempDir;
using testing::to_bytes;

const std::vector<std::vector<int64_t>> kShapes = {
    {},  {1},    {3},       {4},     {5},      {63},      {64},         {65},
    {0}, {3, 5}, {2, 0, 3}, {4, 63}, {65, 64}, {1, 1, 1}, {2, 3, 4, 5}, {64, 65}};

// A .npy file from header text (padding and '\n' added) and raw data.
std::vector<uint8_t> npy(const std::string& dict, const std::vector<uint8_t>& data, int major = 1,
                         int minor = 0) {
  std::string header = dict + "\n";
  std::vector<uint8_t> out = to_bytes("\x93NUMPY");
  out.push_back(static_cast<uint8_t>(major));
  out.push_back(static_cast<uint8_t>(minor));
  const size_t len_bytes = major == 1 ? 2 : 4;
  for (size_t i = 0; i < len_bytes; ++i) out.push_back(static_cast<uint8_t>(header.size() >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

Tensor parse(const std::vector<uint8_t>& bytes) { return parse_npy(bytes.data(), bytes.size(), "t.npy"); }

const std::vector<uint8_t> kTwelveFloats(48, 0);
const std::string kGoodDict = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }";

TEST(Npy, RoundTripsEveryDtypeAndShapeBitForBit) {
  SPARSE24_SEED_TRACE();
  auto g = testing::rng(1);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kI8}) {
    for (const auto& shape : kShapes) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + shape_string(shape));
      Tensor t = random_tensor(g, dtype, shape);
      std::vector<uint8_t> file = encode_npy(t);
      EXPECT_EQ(file[6], 1);                               // version 1.0
      EXPECT_EQ((file.size() - t.bytes.size()) % 64, 0u);  // data 64-byte aligned, as numpy writes it
      Tensor back = parse(file);
      EXPECT_EQ(back.dtype, dtype);
      EXPECT_EQ(back.shape, shape);
      EXPECT_EQ(back.bytes, t.bytes);
    }
  }
}

TEST(Npy, WritesTheHeaderNumpyWrites) {
  Tensor t = Tensor::zeros(DType::kF32, {5});
  std::vector<uint8_t> file = encode_npy(t);
  std::string header(file.begin() + 10, file.end() - 20);
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }";
  ASSERT_GT(header.size(), dict.size());
  EXPECT_EQ(header, dict + std::string(header.size() - dict.size() - 1, ' ') + "\n");
  EXPECT_EQ(file[8] | file[9] << 8, static_cast<int>(header.size()));

  Tensor s = Tensor::zeros(DType::kI8, {});
  std::vector<uint8_t> scalar = encode_npy(s);
  EXPECT_NE(std::string(scalar.begin(), scalar.end())
                .find("{'descr': '|i1', 'fortran_order': False, 'shape': (), }"),
            std::string::npos);
}

TEST(Npy, FileRoundTripLeavesNoTemporaryFiles) {
  SPARSE24_SEED_TRACE();
  auto g = testing::rng(2);
  TempDir dir;
  Tensor t = random_tensor(g, DType::kF16, {7, 9});
  write_npy(dir.file("w.npy"), t);
  Tensor back = read_npy(dir.file("w.npy"));
  EXPECT_EQ(back.bytes, t.bytes);
  EXPECT_EQ(back.shape, t.shape);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"w.npy"});
  EXPECT_ERROR(read_npy(dir.file("nope.npy")), "cannot open");
}

TEST(Npy, Bfloat16CannotBeWritten) {
  Tensor t = Tensor::zeros(DType::kBF16, {4});
  EXPECT_ERROR(encode_npy(t), "bfloat16 has no .npy dtype");
  TempDir dir;
  EXPECT_ERROR(write_npy(dir.file("b.npy"), t), "bfloat16");
  EXPECT_TRUE(dir.entries().empty());
}

TEST(Npy, InconsistentTensorCannotBeWritten) {
  Tensor t = Tensor::zeros(DType::kF32, {4});
  t.bytes.pop_back();
  EXPECT_ERROR(encode_npy(t), "has 15 bytes");
  EXPECT_ERROR(encode_npy(Tensor::zeros(DType::kF32, std::vector<int64_t>(65, 1))), "65 dimensions");
}

TEST(Npy, AcceptsHeaderVariants) {
  const std::vector<uint8_t> data(12, 0);
  struct Case {
    std::string dict;
    std::vector<int64_t> shape;
    DType dtype;
  };
  const std::vector<Case> cases = {
      {"{'shape': (3,), 'fortran_order': False, 'descr': '<f4'}", {3}, DType::kF32},
      {"{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (3,)}", {3}, DType::kF32},
      {"{ 'descr' : '<f2' ,\n 'fortran_order' : False , 'shape' : ( 2 , 3 ) , }   ", {2, 3}, DType::kF16},
      {"{'descr': '<f2', 'fortran_order': False, 'shape': (6)}", {6}, DType::kF16},
      {"{'descr': '<f2', 'fortran_order': False, 'shape': (2L, 3L), }", {2, 3}, DType::kF16},
      {"{'descr': '|i1', 'fortran_order': False, 'shape': (12,), }", {12}, DType::kI8},
      {"{'descr': '<i1', 'fortran_order': False, 'shape': (3, 4), }", {3, 4}, DType::kI8},
      {"{'descr': 'i1', 'fortran_order': False, 'shape': (2, 2, 3), }", {2, 2, 3}, DType::kI8},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.dict);
    Tensor t = parse(npy(c.dict, data));
    EXPECT_EQ(t.shape, c.shape);
    EXPECT_EQ(t.dtype, c.dtype);
  }
  // Versions 2.0 and 3.0 have a 32-bit header length.
  for (int major : {2, 3}) {
    Tensor t = parse(npy(kGoodDict, kTwelveFloats, major));
    EXPECT_EQ(t.shape, (std::vector<int64_t>{3, 4}));
  }
  // Scalars and empty arrays.
  EXPECT_EQ(parse(npy("{'descr': '<f4', 'fortran_order': False, 'shape': ()}", {1, 2, 3, 4})).shape.size(),
            0u);
  EXPECT_EQ(parse(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 5)}", {})).bytes.size(), 0u);
}

TEST(Npy, HostileFilesAreRefusedWithAClearMessage) {
  struct Case {
    std::vector<uint8_t> file;
    std::string phrase;
  };
  auto dict = [](const std::string& d, size_t data_bytes = 48) {
    return npy(d, std::vector<uint8_t>(data_bytes));
  };
  std::string ones_65 = "1";
  for (int i = 1; i < 65; ++i) ones_65 += ", 1";
  std::vector<uint8_t> bad_magic = npy(kGoodDict, kTwelveFloats);
  bad_magic[1] = 'M';
  std::vector<uint8_t> long_header = npy(kGoodDict, kTwelveFloats);
  long_header[8] = 0xFF;
  long_header[9] = 0xFF;
  std::vector<uint8_t> v2_huge = npy(kGoodDict, kTwelveFloats, 2);
  v2_huge[11] = 0xFF;
  const std::vector<Case> cases = {
      {{}, "bad magic"},
      {to_bytes("PK\x03\x04 this is a zip"), "bad magic"},
      {bad_magic, "bad magic"},
      {to_bytes("\x93NUMPY"), "truncated"},
      {to_bytes("\x93NUMPY\x01"), "truncated"},
      {to_bytes("\x93NUMPY\x01\x00\x10"), "truncated"},
      {npy(kGoodDict, kTwelveFloats, 4), "unsupported .npy format version 4.0"},
      {npy(kGoodDict, kTwelveFloats, 0), "unsupported .npy format version 0.0"},
      {npy(kGoodDict, kTwelveFloats, 1, 1), "unsupported .npy format version 1.1"},
      {long_header, "header length 65535 runs past the end"},
      {v2_huge, "runs past the end"},
      {dict("{'descr': '<f4', 'fortran_order': True, 'shape': (3, 4), }"),
       "Fortran-order arrays are not supported"},
      {dict("{'descr': '>f4', 'fortran_order': False, 'shape': (3, 4), }"), "big-endian"},
      {dict("{'descr': '>f2', 'fortran_order': False, 'shape': (3, 4), }", 24), "big-endian"},
      {dict("{'descr': '<f8', 'fortran_order': False, 'shape': (3, 2), }"), "unsupported .npy dtype '<f8'"},
      {dict("{'descr': '|u1', 'fortran_order': False, 'shape': (48,), }"), "unsupported .npy dtype"},
      {dict("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (12,), }"), "structured"},
      {npy(kGoodDict, std::vector<uint8_t>(44)), "truncated: expected 48 bytes of data, found 44"},
      {npy(kGoodDict, {}), "truncated: expected 48 bytes of data, found 0"},
      {npy(kGoodDict, std::vector<uint8_t>(49)), "trailing bytes: expected 48 bytes of data, found 49"},
      {dict("{'descr': '<f4', 'fortran_order': False}"), "missing key 'shape'"},
      {dict("{'descr': '<f4', 'shape': (3, 4)}"), "missing key 'fortran_order'"},
      {dict("{'fortran_order': False, 'shape': (3, 4)}"), "missing key 'descr'"},
      {dict("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (3, 4)}"),
       "duplicate key 'descr'"},
      {dict("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), 'x': 1}"), "unexpected key 'x'"},
      {dict("{'descr': '<f4', 'fortran_order': False, 'shape': (-3, 4)}"), "negative dimension"},
      {dict("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}"),
       "dimension too large"},
      {dict("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296)}"), "too large"},
      {dict("{'descr': '<f4', 'fortran_order': False, 'shape': (1152921504606846976, 4)}"), "too large"},
      {dict("{'descr': '<f4', 'fortran_order': False, 'shape': (3.0, 4)}"), "expected ',' or ')'"},
      {dict("{'descr': '<f4', 'fortran_order': False, 'shape': [3, 4]}"), "expected '('"},
      {dict("{'descr': '<f4', 'fortran_order': 0, 'shape': (3, 4)}"), "expected True or False"},
      {dict("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4)} junk"),
       "unexpected text after the dict"},
      {dict("{'descr': '<f4, 'fortran_order': False, 'shape': (3, 4)}"), "expected ',' or '}'"},
      {dict("{'descr' '<f4', 'fortran_order': False, 'shape': (3, 4)}"), "expected ':'"},
      {dict("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4)"), "expected ',' or '}'"},
      {dict("{'descr': '<f4"), "unterminated string"},
      {dict("[1, 2, 3]"), "expected '{'"},
      {dict("{'descr': '<f4', 'fortran_order': False, 'shape': (" + ones_65 + ")}", 4),
       "more than 64 dimensions"},
      {dict(""), "expected '{'"},
      {dict("{descr: '<f4'}"), "expected a quoted string"},
      {dict(std::string("{'descr") + '\0' + "': '<f4', 'fortran_order': False, 'shape': (3, 4)}"),
       "unexpected key"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i) + ": " + cases[i].phrase);
    EXPECT_ERROR(parse(cases[i].file), cases[i].phrase);
    EXPECT_ERROR(parse(cases[i].file), "t.npy: ");  // every message names the file
  }
}

TEST(Npy, EveryTruncationIsRefused) {
  SPARSE24_SEED_TRACE();
  auto g = testing::rng(3);
  for (DType dtype : {DType::kF32, DType::kI8}) {
    std::vector<uint8_t> file = encode_npy(random_tensor(g, dtype, {3, 5}));
    for (size_t n = 0; n < file.size(); ++n) {
      SCOPED_TRACE("prefix of " + std::to_string(n) + " bytes");
      std::vector<uint8_t> prefix(file.begin(), file.begin() + static_cast<std::ptrdiff_t>(n));
      EXPECT_THROW(parse_npy(prefix.data(), prefix.size(), "t.npy"), Error);
    }
  }
}

TEST(Npy, RandomCorruptionNeverCrashes) {
  // Every mutated file either parses into a consistent tensor or is refused with an Error.
  SPARSE24_SEED_TRACE();
  auto g = testing::rng(4);
  const std::vector<uint8_t> file = encode_npy(random_tensor(g, DType::kF16, {4, 6}));
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<uint8_t> f = file;
    const int flips = 1 + static_cast<int>(g() % 4);
    for (int k = 0; k < flips; ++k) f[g() % 128] = static_cast<uint8_t>(g());
    try {
      Tensor t = parse_npy(f.data(), f.size(), "t.npy");
      EXPECT_EQ(t.bytes.size(), static_cast<size_t>(testing::product(t.shape)) * dtype_size(t.dtype));
    } catch (const Error&) {
    }
  }
}

}  // namespace
}  // namespace sparse24
