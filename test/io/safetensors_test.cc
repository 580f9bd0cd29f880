// safetensors: bit-exact round trips of every dtype, Tensor conversions, and a hostile-file corpus.
#include <string>
#include <utility>
#include <vector>

#include "common/seed.h"
#include "io/io_test_util.h"
#include "sparse24/io.h"

namespace sparse24 {
namespace {

using testing::random_bytes;
using testing::random_tensor;
using testing::TempDir;
using testing::to_bytes;

const std::vector<std::string> kAllDTypes = {"BOOL", "U8",  "I8",  "I16", "U16", "F16",     "BF16",   "I32",
                                             "U32",  "F32", "F64", "I64", "U64", "F8_E4M3", "F8_E5M2"};
const std::vector<std::vector<int64_t>> kShapes = {
    {}, {1}, {3}, {4}, {5}, {63}, {64}, {65}, {0}, {3, 5}, {2, 0, 3}, {4, 63}, {1, 1}, {65, 3}, {2, 3, 4, 5}};

// A file from the header length, header text and data buffer as given (nothing checked or padded).
std::vector<uint8_t> file_with_length(uint64_t header_len, const std::string& header,
                                      const std::vector<uint8_t>& data = {}) {
  std::vector<uint8_t> out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(header_len >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}
std::vector<uint8_t> file(const std::string& header, const std::vector<uint8_t>& data = {}) {
  return file_with_length(header.size(), header, data);
}

SafeTensors parse(const std::vector<uint8_t>& bytes) {
  return parse_safetensors(bytes.data(), bytes.size(), "m.st");
}

uint64_t header_length(const std::vector<uint8_t>& f) {
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(f[static_cast<size_t>(i)]) << (8 * i);
  return n;
}

TEST(SafeTensors, RoundTripsEveryDtypeAndShapeBitForBit) {
  SPARSE24_SEED_TRACE();
  auto g = testing::rng(11);
  SafeTensors st;
  st.metadata = {{"format", "pt"}, {"note", "quotes \" and \\ and ünïcode"}, {"", "empty key"}};
  int n = 0;
  for (const std::string& dtype : kAllDTypes) {
    for (const auto& shape : kShapes) {
      const size_t nbytes = static_cast<size_t>(testing::product(shape)) * st_dtype_size(dtype);
      st.add("t" + std::to_string(n++) + "." + dtype, StTensor{dtype, shape, random_bytes(g, nbytes)});
    }
  }
  const std::vector<uint8_t> f = encode_safetensors(st);
  EXPECT_EQ(header_length(f) % 8, 0u);  // padded as the reference implementation does
  const std::string header(f.begin() + 8, f.begin() + 8 + static_cast<std::ptrdiff_t>(header_length(f)));
  EXPECT_EQ(header.rfind("{\"__metadata__\":", 0), 0u);

  const SafeTensors back = parse(f);
  EXPECT_EQ(back.metadata, st.metadata);
  ASSERT_EQ(back.tensors.size(), st.tensors.size());
  // Tensors of zero bytes share offsets with their neighbours, so only the nonempty ones keep a fixed order;
  // look each one up by name.
  for (const auto& [name, t] : st.tensors) {
    SCOPED_TRACE(name);
    const StTensor& b = back.at(name);
    EXPECT_EQ(b.dtype, t.dtype);
    EXPECT_EQ(b.shape, t.shape);
    EXPECT_EQ(b.bytes, t.bytes);
  }
  EXPECT_EQ(encode_safetensors(back).size(), f.size());
}

TEST(SafeTensors, ParsedTensorsAreInDataOrder) {
  SafeTensors st;
  st.add("zeta", StTensor{"U8", {2}, {1, 2}});
  st.add("alpha", StTensor{"U8", {1}, {3}});
  st.add("mid", StTensor{"I16", {1}, {4, 5}});
  const SafeTensors back = parse(encode_safetensors(st));
  ASSERT_EQ(back.tensors.size(), 3u);
  EXPECT_EQ(back.tensors[0].first, "zeta");
  EXPECT_EQ(back.tensors[1].first, "alpha");
  EXPECT_EQ(back.tensors[2].first, "mid");
  EXPECT_TRUE(back.metadata.empty());
}

TEST(SafeTensors, EmptyFileRoundTrips) {
  const std::vector<uint8_t> f = encode_safetensors(SafeTensors{});
  EXPECT_EQ(f.size(), 16u);  // "{}" padded to 8
  const SafeTensors back = parse(f);
  EXPECT_TRUE(back.tensors.empty());
  EXPECT_TRUE(back.metadata.empty());
}

TEST(SafeTensors, ConvertsToAndFromTensor) {
  SPARSE24_SEED_TRACE();
  auto g = testing::rng(12);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kI8}) {
    Tensor t = random_tensor(g, dtype, {3, 65});
    StTensor s = to_st(t);
    EXPECT_EQ(s.dtype, st_dtype_name(dtype));
    EXPECT_EQ(dtype_from_st(s.dtype), dtype);
    Tensor back = from_st(s, "x");
    EXPECT_EQ(back.dtype, dtype);
    EXPECT_EQ(back.shape, t.shape);
    EXPECT_EQ(back.bytes, t.bytes);
  }
  EXPECT_ERROR(from_st(StTensor{"U8", {2}, {1, 2}}, "tensor 'm'"),
               "tensor 'm': safetensors dtype 'U8' is not supported");
  EXPECT_ERROR(from_st(StTensor{"F32", {2}, {1, 2}}, "t"), "does not match 2 bytes");
  EXPECT_ERROR(dtype_from_st("F64"), "not supported");
  EXPECT_ERROR(st_dtype_size("F128"), "unknown safetensors dtype 'F128'");
}

TEST(SafeTensors, FileRoundTripIsAtomic) {
  TempDir dir;
  SafeTensors st;
  st.add("w", StTensor{"F32", {2}, {0, 0, 128, 63, 0, 0, 0, 64}});
  write_safetensors(dir.file("m.safetensors"), st);
  EXPECT_EQ(read_safetensors(dir.file("m.safetensors")).at("w").bytes, st.at("w").bytes);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"m.safetensors"});
  EXPECT_ERROR(write_safetensors(dir.file("missing/m.safetensors"), st), "No such file or directory");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"m.safetensors"});
  EXPECT_ERROR(read_safetensors(dir.file("other")), "cannot open");
}

TEST(SafeTensors, WriterRefusesInvalidRecords) {
  SafeTensors st;
  st.add("a", StTensor{"U8", {1}, {1}});
  EXPECT_ERROR(st.add("a", StTensor{"U8", {1}, {1}}), "duplicate tensor name 'a'");
  EXPECT_ERROR(st.add("__metadata__", StTensor{"U8", {1}, {1}}), "reserved");
  EXPECT_ERROR(st.at("b"), "no tensor 'b'");

  SafeTensors dup;
  dup.tensors = {{"x", StTensor{"U8", {1}, {1}}}, {"x", StTensor{"U8", {1}, {2}}}};
  EXPECT_ERROR(encode_safetensors(dup), "duplicate name");
  SafeTensors bad_dtype;
  bad_dtype.tensors = {{"x", StTensor{"Q4", {1}, {1}}}};
  EXPECT_ERROR(encode_safetensors(bad_dtype), "unknown dtype 'Q4'");
  SafeTensors bad_size;
  bad_size.tensors = {{"x", StTensor{"F32", {2}, {1, 2, 3}}}};
  EXPECT_ERROR(encode_safetensors(bad_size), "does not match 3 bytes");
  SafeTensors bad_utf8;
  bad_utf8.tensors = {{"\xff", StTensor{"U8", {1}, {1}}}};
  EXPECT_ERROR(encode_safetensors(bad_utf8), "not valid UTF-8");
}

TEST(SafeTensors, AcceptsGapsAndAnyKeyOrder) {
  // Not what the reference writer produces, but unambiguous: read it.
  const std::string h =
      R"({"b":{"data_offsets":[4,6],"shape":[2],"dtype":"U8"},"a":{"shape":[1],"dtype":"U8","data_offsets":[0,1]}})";
  const SafeTensors st = parse(file(h, {9, 0, 0, 0, 7, 8}));
  ASSERT_EQ(st.tensors.size(), 2u);
  EXPECT_EQ(st.tensors[0].first, "a");
  EXPECT_EQ(st.at("a").bytes, std::vector<uint8_t>{9});
  EXPECT_EQ(st.at("b").bytes, (std::vector<uint8_t>{7, 8}));
}

TEST(SafeTensors, HostileFilesAreRefusedWithAClearMessage) {
  struct Case {
    std::vector<uint8_t> file;
    std::string phrase;
  };
  const std::vector<uint8_t> four(4, 0);
  auto one = [&](const std::string& entry, const std::vector<uint8_t>& data = std::vector<uint8_t>(4, 0)) {
    return file("{\"t\":" + entry + "}", data);
  };
  std::string deep(100000, '[');
  const std::vector<Case> cases = {
      {{}, "too short to be a safetensors file (0 bytes"},
      {{1, 0, 0, 0}, "too short"},
      {file_with_length(~0ull, "{}"), "exceeds the limit"},
      {file_with_length(100'000'001, "{}"), "header length 100000001 exceeds the limit of 100000000 bytes"},
      {file_with_length(3, "{}"), "header length 3 runs past the end of the file (10 bytes)"},
      {file_with_length(1000, "{}"), "runs past the end"},
      {file(""), "not valid JSON"},
      {file("{\"a\": "), "not valid JSON"},
      {file("{\"a\": 1,}"), "not valid JSON"},
      {file("{} {}"), "not valid JSON"},
      {file("{\"t\xff\": 1}"), "not valid JSON"},  // invalid UTF-8
      {file(std::string("{}\0\0\0\0\0\0", 8)), "not valid JSON"},
      {file("[1, 2]"), "not a JSON object"},
      {file("\"text\""), "not a JSON object"},
      {file("null"), "not a JSON object"},
      {file(deep), "nested too deeply"},
      {file("{\"t\":{\"dtype\":\"U8\",\"shape\":[[[[1]]]],\"data_offsets\":[0,1]}}"), "nested too deeply"},
      {one("5"), "tensor 't' is not a JSON object"},
      {one("{\"shape\":[4],\"data_offsets\":[0,4]}"), "tensor 't' has no string 'dtype'"},
      {one("{\"dtype\":7,\"shape\":[4],\"data_offsets\":[0,4]}"), "no string 'dtype'"},
      {one("{\"dtype\":\"F128\",\"shape\":[4],\"data_offsets\":[0,4]}"),
       "tensor 't' has unknown dtype 'F128'"},
      {one("{\"dtype\":\"u8\",\"shape\":[4],\"data_offsets\":[0,4]}"), "unknown dtype 'u8'"},
      {one("{\"dtype\":\"U8\",\"data_offsets\":[0,4]}"), "has no array 'shape'"},
      {one("{\"dtype\":\"U8\",\"shape\":4,\"data_offsets\":[0,4]}"), "has no array 'shape'"},
      {one("{\"dtype\":\"U8\",\"shape\":[-4],\"data_offsets\":[0,4]}"), "shape dimension is negative"},
      {one("{\"dtype\":\"U8\",\"shape\":[4.0],\"data_offsets\":[0,4]}"), "shape dimension is not an integer"},
      {one("{\"dtype\":\"U8\",\"shape\":[\"4\"],\"data_offsets\":[0,4]}"),
       "shape dimension is not an integer"},
      {one("{\"dtype\":\"U8\",\"shape\":[1e30],\"data_offsets\":[0,4]}"),
       "shape dimension is not an integer"},
      {one("{\"dtype\":\"U8\",\"shape\":[18446744073709551615],\"data_offsets\":[0,4]}"),
       "dimension is too large"},
      {one("{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}"), "is too large"},
      {one("{\"dtype\":\"U64\",\"shape\":[1152921504606846976],\"data_offsets\":[0,4]}"), "is too large"},
      {one("{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,5]}"),
       "data_offsets end 5 is past the end of the data (4 bytes)"},
      {one("{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[18446744073709551615,18446744073709551615]}"),
       "past the end of the data"},
      {one("{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,0]}"), "end before they begin"},
      {one("{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[-1,3]}"), "data_offsets begin is negative"},
      {one("{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0]}"), "has no 'data_offsets' [begin, end]"},
      {one("{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4,8]}"), "has no 'data_offsets'"},
      {one("{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":{\"a\":1}}"), "has no 'data_offsets'"},
      {one("{\"dtype\":\"U8\",\"shape\":[4]}"), "has no 'data_offsets'"},
      {one("{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,4]}"), "has 4 bytes but U8 [3] needs 3"},
      {one("{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}"), "has 4 bytes but F32 [2] needs 8"},
      {one("{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4],\"extra\":1}"), "unexpected key 'extra'"},
      {file("{\"a\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]},"
            "\"b\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[1,4]}}",
            four),
       "tensors 'a' [0, 3) and 'b' [1, 4) overlap"},
      {file("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
            "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}",
            four),
       "overlap"},
      {file("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
            "\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}",
            four),
       "duplicate key 'a'"},
      {one("{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}"),
       "duplicate key 'dtype'"},
      {file("{\"__metadata__\":{\"a\":1}}"), "__metadata__ value for 'a' is not a string"},
      {file("{\"__metadata__\":{\"a\":null}}"), "is not a string"},
      {file("{\"__metadata__\":{\"a\":[\"x\"]}}"), "is not a string"},
      {file("{\"__metadata__\":[\"a\"]}"), "__metadata__ is not a JSON object"},
      {file("{\"__metadata__\":\"a\"}"), "__metadata__ is not a JSON object"},
      {file("{\"__metadata__\":{\"a\":\"x\",\"a\":\"y\"}}"), "duplicate key 'a'"},
      {file("{\"t\\n\":5}"), "tensor 't\\x0a' is not a JSON object"},  // names are made printable
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i) + ": " + cases[i].phrase);
    EXPECT_ERROR(parse(cases[i].file), cases[i].phrase);
    EXPECT_ERROR(parse(cases[i].file), "m.st: ");  // every message names the file
  }
}

TEST(SafeTensors, EveryTruncationIsRefused) {
  SPARSE24_SEED_TRACE();
  auto g = testing::rng(13);
  SafeTensors st;
  st.metadata = {{"k", "v"}};
  st.add("a", StTensor{"F16", {3}, random_bytes(g, 6)});
  st.add("b", StTensor{"U8", {2, 2}, random_bytes(g, 4)});
  const std::vector<uint8_t> f = encode_safetensors(st);
  for (size_t n = 0; n < f.size(); ++n) {
    SCOPED_TRACE("prefix of " + std::to_string(n) + " bytes");
    std::vector<uint8_t> prefix(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_THROW(parse_safetensors(prefix.data(), prefix.size(), "m.st"), Error);
  }
}

TEST(SafeTensors, RandomCorruptionNeverCrashes) {
  // Every mutated file either parses into consistent records or is refused with an Error.
  SPARSE24_SEED_TRACE();
  auto g = testing::rng(14);
  SafeTensors st;
  st.metadata = {{"format", "pt"}};
  st.add("w", StTensor{"F32", {2, 3}, random_bytes(g, 24)});
  st.add("m", StTensor{"U8", {5}, random_bytes(g, 5)});
  const std::vector<uint8_t> f = encode_safetensors(st);
  const size_t header_end = 8 + header_length(f);
  for (int iter = 0; iter < 5000; ++iter) {
    std::vector<uint8_t> m = f;
    const int edits = 1 + static_cast<int>(g() % 3);
    for (int k = 0; k < edits; ++k) {
      const size_t pos = g() % header_end;
      // Mostly characters JSON cares about, sometimes any byte.
      static const char kChars[] = "{}[]\",:0123456789-.e ";
      m[pos] =
          (g() % 4) ? static_cast<uint8_t>(kChars[g() % (sizeof(kChars) - 1)]) : static_cast<uint8_t>(g());
    }
    try {
      const SafeTensors p = parse_safetensors(m.data(), m.size(), "m.st");
      for (const auto& [name, t] : p.tensors)
        EXPECT_EQ(t.bytes.size(), static_cast<size_t>(testing::product(t.shape)) * st_dtype_size(t.dtype));
    } catch (const Error&) {
    }
  }
}

}  // namespace
}  // namespace sparse24
