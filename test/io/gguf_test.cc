// GGUF reader: files built byte by byte here (independently of encode_gguf), dequantization against values
// worked out by hand, round trips through encode_gguf, and the hostile-file corpus.
#include "sparse24/gguf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "common/seed.h"
#include "io/io_test_util.h"
#include "sparse24/dtype.h"

namespace sparse24 {
namespace {

using testing::random_bytes;

// A little-endian byte builder for hand-made files.
struct Bytes {
  std::vector<uint8_t> b;
  template <typename T>
  Bytes& put(T v) {
    uint8_t tmp[sizeof(T)];
    std::memcpy(tmp, &v, sizeof(T));
    b.insert(b.end(), tmp, tmp + sizeof(T));
    return *this;
  }
  Bytes& u32(uint32_t v) { return put(v); }
  Bytes& u64(uint64_t v) { return put(v); }
  Bytes& str(const std::string& s) {
    u64(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& raw(const std::vector<uint8_t>& v) {
    b.insert(b.end(), v.begin(), v.end());
    return *this;
  }
  Bytes& pad_to(size_t align) {
    b.resize((b.size() + align - 1) / align * align, 0);
    return *this;
  }
};

Gguf parse(const std::vector<uint8_t>& b) { return parse_gguf(b.data(), b.size(), "m.gguf"); }

uint16_t h(float f) { return float_to_half(f); }

// One Q4_1 block: d = 0.5, m = -1, nibbles q[j] = j % 16 (element j), so x[j] = 0.5 * (j % 16) - 1.
std::vector<uint8_t> q4_1_block() {
  Bytes b;
  b.put(h(0.5f)).put(h(-1.f));
  for (int j = 0; j < 16; ++j) b.put<uint8_t>(static_cast<uint8_t>((j % 16) | (((j + 16) % 16) << 4)));
  return b.b;
}

// A minimal valid v3 file: two metadata pairs, one F32 tensor [2, 3] and one Q4_1 tensor [1, 32].
std::vector<uint8_t> small_file(uint32_t version = 3) {
  Bytes f;
  f.raw({'G', 'G', 'U', 'F'}).u32(version).u64(2).u64(2);
  f.str("general.architecture").u32(8).str("llama");
  f.str("llama.block_count").u32(4).u32(30);
  f.str("w").u32(2).u64(3).u64(2).u32(0).u64(0);    // F32, ne = [3, 2] -> shape [2, 3]
  f.str("q").u32(2).u64(32).u64(1).u32(3).u64(32);  // Q4_1 at offset 32 (24 bytes of F32 padded to 32)
  f.pad_to(32);
  for (int i = 0; i < 6; ++i) f.put<float>(static_cast<float>(i) + 0.25f);
  f.pad_to(32);
  f.raw(q4_1_block());
  return f.b;
}

TEST(Gguf, ReadsAHandMadeFile) {
  for (uint32_t version : {2u, 3u}) {
    const std::vector<uint8_t> bytes = small_file(version);
    const Gguf g = parse(bytes);
    EXPECT_EQ(g.version, version);
    EXPECT_EQ(g.alignment, 32u);
    ASSERT_EQ(g.metadata.size(), 2u);
    EXPECT_EQ(g.get_string("general.architecture"), "llama");
    EXPECT_EQ(g.get_int("llama.block_count"), 30);
    ASSERT_EQ(g.tensors.size(), 2u);
    const GgufTensor& w = g.tensors[0];
    EXPECT_EQ(w.name, "w");
    EXPECT_EQ(w.shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(w.bytes.size(), 24u);
    const Tensor wt = dequantize(w);
    EXPECT_EQ(wt.shape, (std::vector<int64_t>{2, 3}));
    for (int i = 0; i < 6; ++i) EXPECT_EQ(wt.get(i), static_cast<float>(i) + 0.25f);
    const Tensor qt = dequantize(*g.find_tensor("q"));
    EXPECT_EQ(qt.shape, (std::vector<int64_t>{1, 32}));
    for (int j = 0; j < 32; ++j) EXPECT_EQ(qt.get(j), 0.5f * static_cast<float>(j % 16) - 1.f) << j;
  }
}

TEST(Gguf, MetadataOfEveryTypeRoundTrips) {
  Gguf g;
  g.metadata = {
      {"u8", GgufValue::of_int(GgufType::kU8, 255)},
      {"i8", GgufValue::of_int(GgufType::kI8, -128)},
      {"u16", GgufValue::of_int(GgufType::kU16, 65535)},
      {"i16", GgufValue::of_int(GgufType::kI16, -32768)},
      {"u32", GgufValue::of_int(GgufType::kU32, 4000000000)},
      {"i32", GgufValue::of_int(GgufType::kI32, -2000000000)},
      {"u64", GgufValue::of_int(GgufType::kU64, -1)},  // 2^64 - 1
      {"i64", GgufValue::of_int(GgufType::kI64, INT64_MIN)},
      {"f32", GgufValue::of_float(GgufType::kF32, 0.1f)},
      {"f64", GgufValue::of_float(GgufType::kF64, 0.1)},
      {"bool", GgufValue::of_int(GgufType::kBool, 1)},
      {"str", GgufValue::of_string(std::string("a\0b\xff", 4))},
      {"strs", GgufValue::of_strings({"", "x", "Ġthe"})},
      {"ints", GgufValue::of_ints(GgufType::kI32, {3, -1, 7})},
      {"bools", GgufValue::of_ints(GgufType::kBool, {0, 1})},
      {"floats", GgufValue::of_floats(GgufType::kF32, {1.5, -2})},
      {"empty", GgufValue::of_ints(GgufType::kU8, {})},
  };
  const std::vector<uint8_t> bytes = encode_gguf(g);
  const Gguf back = parse(bytes);
  ASSERT_EQ(back.metadata.size(), g.metadata.size());
  for (size_t i = 0; i < g.metadata.size(); ++i) {
    const auto& [k, v] = g.metadata[i];
    const auto& [bk, bv] = back.metadata[i];
    EXPECT_EQ(bk, k);
    EXPECT_EQ(bv.type, v.type) << k;
    EXPECT_EQ(bv.elem, v.elem) << k;
    EXPECT_EQ(bv.ints, v.ints) << k;
    EXPECT_EQ(bv.strings, v.strings) << k;
    if (v.elem == GgufType::kF32) {
      ASSERT_EQ(bv.floats.size(), v.floats.size());
      for (size_t j = 0; j < v.floats.size(); ++j) EXPECT_EQ(bv.floats[j], static_cast<float>(v.floats[j]));
    } else {
      EXPECT_EQ(bv.floats, v.floats) << k;
    }
  }
  EXPECT_EQ(back.get_int("u32"), 4000000000);
  EXPECT_EQ(static_cast<uint64_t>(back.find("u64")->ints[0]), UINT64_MAX);
  EXPECT_ERROR(back.get_int("u64"), "is too large");
  EXPECT_EQ(back.get_float("f64"), 0.1);
  EXPECT_EQ(back.get_float("i8"), -128.0);
  EXPECT_TRUE(back.get_bool("bool"));
  EXPECT_EQ(back.get_strings("strs")[2], "Ġthe");
  EXPECT_EQ(back.get_ints("ints"), (std::vector<int64_t>{3, -1, 7}));
  EXPECT_ERROR(back.get_string("u8"), "metadata 'u8' is U8, expected STRING");
  EXPECT_ERROR(back.get_strings("ints"), "is ARRAY of I32, expected an ARRAY of STRING");
  EXPECT_ERROR(back.get_int("nope"), "metadata 'nope' is missing");
  EXPECT_ERROR(back.get_bool("str"), "expected BOOL");
}

// Tensors of every dequantizable type with random bytes (scales made finite) round-trip bit for bit, at
// an alignment other than the default.
TEST(Gguf, TensorsRoundTripAtAnyAlignment) {
  SPARSE24_SEED_TRACE();
  auto rng = testing::rng(1);
  std::vector<std::vector<uint8_t>> storage;
  Gguf g;
  g.alignment = 64;
  g.metadata = {{"general.alignment", GgufValue::of_int(GgufType::kU32, 64)}};
  const std::vector<std::pair<GgmlType, std::vector<int64_t>>> specs = {
      {GgmlType::kF32, {3, 5}},    {GgmlType::kF16, {7}},       {GgmlType::kBF16, {2, 1, 3}},
      {GgmlType::kQ8_0, {2, 64}},  {GgmlType::kQ4_0, {1, 32}},  {GgmlType::kQ4_1, {3, 2, 32}},
      {GgmlType::kQ4_K, {2, 256}}, {GgmlType::kQ6_K, {1, 512}}, {GgmlType::kQ5_0, {2, 32}},
      {GgmlType::kQ5_1, {64}},     {GgmlType::kQ2_K, {256}},    {GgmlType::kQ3_K, {2, 256}},
      {GgmlType::kQ5_K, {256}},    {GgmlType::kIQ4_NL, {96}},   {GgmlType::kIQ4_XS, {256}},
      {GgmlType::kIQ2_XXS, {256}},
  };
  for (const auto& [type, shape] : specs) {
    const GgmlTypeInfo* ti = ggml_type_info(static_cast<uint32_t>(type));
    ASSERT_NE(ti, nullptr);
    storage.push_back(
        random_bytes(rng, static_cast<size_t>(testing::product(shape) / ti->block * ti->block_bytes)));
    GgufTensor t;
    t.name = std::string("t.") + ti->name;
    t.shape = shape;
    t.type = ti->id;
    t.bytes = storage.back();
    g.tensors.push_back(t);
  }
  const std::vector<uint8_t> bytes = encode_gguf(g);
  const Gguf back = parse(bytes);
  EXPECT_EQ(back.alignment, 64u);
  EXPECT_EQ(back.data_offset % 64, 0u);
  ASSERT_EQ(back.tensors.size(), g.tensors.size());
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    const GgufTensor& t = back.tensors[i];
    EXPECT_EQ(t.name, g.tensors[i].name);
    EXPECT_EQ(t.shape, g.tensors[i].shape);
    EXPECT_EQ(t.offset % 64, 0u);
    EXPECT_TRUE(
        std::equal(t.bytes.begin(), t.bytes.end(), g.tensors[i].bytes.begin(), g.tensors[i].bytes.end()));
    if (ggml_type_info(t.type)->dequantizable)
      EXPECT_EQ(dequantize(t).numel(), t.numel());
    else
      EXPECT_ERROR(dequantize(t), "cannot dequantize ggml type IQ2_XXS");
  }
}

// Reference dequantizations written from the block layouts in docs/formats.md, element by element.
TEST(Gguf, DequantizesEachBlockLayout) {
  SPARSE24_SEED_TRACE();
  auto rng = testing::rng(2);
  auto f16 = [](const uint8_t* p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return half_to_float(v);
  };
  auto finite_scale = [&](uint8_t* p) {
    const uint16_t v = h(std::ldexp(static_cast<float>(rng() % 1000) / 1000.f, -static_cast<int>(rng() % 8)));
    std::memcpy(p, &v, 2);
  };
  std::vector<float> y(512);
  {  // Q8_0: d, 32 x int8
    std::vector<uint8_t> b = random_bytes(rng, 34);
    finite_scale(b.data());
    dequantize_row(8, b.data(), y.data(), 32);
    for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], f16(b.data()) * static_cast<int8_t>(b[2 + j]));
  }
  {  // Q4_0: element j < 16 is the low nibble of byte j, element j + 16 its high nibble; minus 8
    std::vector<uint8_t> b = random_bytes(rng, 18);
    finite_scale(b.data());
    dequantize_row(2, b.data(), y.data(), 32);
    for (int j = 0; j < 16; ++j) {
      EXPECT_EQ(y[j], f16(b.data()) * static_cast<float>((b[2 + j] & 15) - 8));
      EXPECT_EQ(y[j + 16], f16(b.data()) * static_cast<float>((b[2 + j] >> 4) - 8));
    }
  }
  {  // Q4_K: element 32s + l of sub-block s: nibble (s odd: high) of byte 32 (s / 2) + l; scale/min 6-bit
    std::vector<uint8_t> b = random_bytes(rng, 144);
    finite_scale(b.data());
    finite_scale(b.data() + 2);
    dequantize_row(12, b.data(), y.data(), 256);
    const uint8_t* sc = b.data() + 4;
    for (int s = 0; s < 8; ++s) {
      const int scale = s < 4 ? (sc[s] & 63) : ((sc[s + 4] & 15) | ((sc[s - 4] >> 6) << 4));
      const int min = s < 4 ? (sc[s + 4] & 63) : ((sc[s + 4] >> 4) | ((sc[s] >> 6) << 4));
      for (int l = 0; l < 32; ++l) {
        const int q = (b[16 + 32 * (s / 2) + l] >> (4 * (s % 2))) & 15;
        const float want = f16(b.data()) * static_cast<float>(scale) * static_cast<float>(q) -
                           f16(b.data() + 2) * static_cast<float>(min);
        EXPECT_EQ(y[32 * s + l], want) << s << " " << l;
      }
    }
  }
  {  // Q6_K: element e = 128 half + 32 k + i: low 4 bits from ql, high 2 from qh, scale e / 16; minus 32
    std::vector<uint8_t> b = random_bytes(rng, 210);
    finite_scale(b.data() + 208);
    dequantize_row(14, b.data(), y.data(), 256);
    for (int e = 0; e < 256; ++e) {
      const int half = e / 128, k = (e % 128) / 32, i = e % 32;
      const uint8_t l = b[64 * half + i + 32 * (k % 2)];
      const int lo = k < 2 ? (l & 15) : (l >> 4);
      const int hi = (b[128 + 32 * half + i] >> (2 * k)) & 3;
      const float want = f16(b.data() + 208) * static_cast<float>(static_cast<int8_t>(b[192 + e / 16])) *
                         static_cast<float>((lo | hi << 4) - 32);
      EXPECT_EQ(y[e], want) << e;
    }
  }
  // The 5-bit types: bit j of the little-endian u32 qh is element j's fifth bit.
  auto bit5 = [](const uint8_t* qh, int j) { return ((qh[j / 8] >> (j % 8)) & 1) << 4; };
  {  // Q5_0: d, qh, 16 bytes of nibbles as Q4_0; minus 16
    std::vector<uint8_t> b = random_bytes(rng, 22);
    finite_scale(b.data());
    dequantize_row(6, b.data(), y.data(), 32);
    for (int j = 0; j < 32; ++j) {
      const int lo = j < 16 ? (b[6 + j] & 15) : (b[6 + j - 16] >> 4);
      EXPECT_EQ(y[j], f16(b.data()) * static_cast<float>((lo | bit5(b.data() + 2, j)) - 16)) << j;
    }
  }
  {  // Q5_1: d, m, qh, nibbles; d * q + m
    std::vector<uint8_t> b = random_bytes(rng, 24);
    finite_scale(b.data());
    finite_scale(b.data() + 2);
    dequantize_row(7, b.data(), y.data(), 32);
    for (int j = 0; j < 32; ++j) {
      const int lo = j < 16 ? (b[8 + j] & 15) : (b[8 + j - 16] >> 4);
      const float want = f16(b.data()) * static_cast<float>(lo | bit5(b.data() + 4, j)) + f16(b.data() + 2);
      EXPECT_EQ(y[j], want) << j;
    }
  }
  {  // Q2_K: scales[16] (low nibble scale, high nibble min), qs[64], d, dmin; element e = 128 h + 32 k + l is
     // bits 2k of qs[32 h + l], in sub-block e / 16
    std::vector<uint8_t> b = random_bytes(rng, 84);
    finite_scale(b.data() + 80);
    finite_scale(b.data() + 82);
    dequantize_row(10, b.data(), y.data(), 256);
    for (int e = 0; e < 256; ++e) {
      const int h = e / 128, k = (e % 128) / 32, l = e % 32;
      const int q = (b[16 + 32 * h + l] >> (2 * k)) & 3;
      const float want = f16(b.data() + 80) * static_cast<float>(b[e / 16] & 15) * static_cast<float>(q) -
                         f16(b.data() + 82) * static_cast<float>(b[e / 16] >> 4);
      EXPECT_EQ(y[e], want) << e;
    }
  }
  {  // Q3_K: hmask[32], qs[64], 12 bytes of sixteen 6-bit scales (offset 32), d; minus 4 where the mask bit
     // e / 32 of hmask[e % 32] is clear
    std::vector<uint8_t> b = random_bytes(rng, 110);
    finite_scale(b.data() + 108);
    dequantize_row(11, b.data(), y.data(), 256);
    const uint8_t* sc = b.data() + 96;
    for (int e = 0; e < 256; ++e) {
      const int s = e / 16;
      const int scale =
          ((s < 8 ? sc[s] & 15 : sc[s - 8] >> 4) | (((sc[8 + s % 4] >> (2 * (s / 4))) & 3) << 4)) - 32;
      const int h = e / 128, k = (e % 128) / 32, l = e % 32;
      const int q = ((b[32 + 32 * h + l] >> (2 * k)) & 3) - ((b[l] >> (e / 32)) & 1 ? 0 : 4);
      EXPECT_EQ(y[e], f16(b.data() + 108) * static_cast<float>(scale) * static_cast<float>(q)) << e;
    }
  }
  {  // Q5_K: Q4_K's d, dmin and scales, qh[32], qs[128]; element l of sub-block s gets bit s of qh[l]
    std::vector<uint8_t> b = random_bytes(rng, 176);
    finite_scale(b.data());
    finite_scale(b.data() + 2);
    dequantize_row(13, b.data(), y.data(), 256);
    const uint8_t* sc = b.data() + 4;
    for (int s = 0; s < 8; ++s) {
      const int scale = s < 4 ? (sc[s] & 63) : ((sc[s + 4] & 15) | ((sc[s - 4] >> 6) << 4));
      const int min = s < 4 ? (sc[s + 4] & 63) : ((sc[s + 4] >> 4) | ((sc[s] >> 6) << 4));
      for (int l = 0; l < 32; ++l) {
        const int q = ((b[48 + 32 * (s / 2) + l] >> (4 * (s % 2))) & 15) | (((b[16 + l] >> s) & 1) << 4);
        const float want = f16(b.data()) * static_cast<float>(scale) * static_cast<float>(q) -
                           f16(b.data() + 2) * static_cast<float>(min);
        EXPECT_EQ(y[32 * s + l], want) << s << " " << l;
      }
    }
  }
  // IQ4_NL and IQ4_XS: nibbles index ggml's fixed table of 16 levels.
  const int levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  {  // IQ4_NL: d, 16 bytes of nibbles in Q4_0's order
    std::vector<uint8_t> b = random_bytes(rng, 18);
    finite_scale(b.data());
    dequantize_row(20, b.data(), y.data(), 32);
    for (int j = 0; j < 32; ++j)
      EXPECT_EQ(y[j],
                f16(b.data()) * static_cast<float>(levels[j < 16 ? b[2 + j] & 15 : b[2 + j - 16] >> 4]));
  }
  {  // IQ4_XS: d, u16 scales_h, scales_l[4], qs[128]; sub-block s: scale (low nibble s of scales_l | bits 2s
     // of scales_h << 4) - 32, its 32 values from qs[16 s ...] in Q4_0's order
    std::vector<uint8_t> b = random_bytes(rng, 136);
    finite_scale(b.data());
    dequantize_row(23, b.data(), y.data(), 256);
    const int sh = b[2] | b[3] << 8;
    for (int e = 0; e < 256; ++e) {
      const int s = e / 32, j = e % 32;
      const int scale = (((b[4 + s / 2] >> (4 * (s % 2))) & 15) | (((sh >> (2 * s)) & 3) << 4)) - 32;
      const uint8_t q = b[8 + 16 * s + j % 16];
      const int level = levels[j < 16 ? q & 15 : q >> 4];
      EXPECT_EQ(y[e], f16(b.data()) * static_cast<float>(scale) * static_cast<float>(level)) << e;
    }
  }
  {                                           // F16, BF16
    const uint16_t v[2] = {h(1.5f), 0x3FC0};  // 1.5 in f16; 1.5 in bf16
    dequantize_row(1, reinterpret_cast<const uint8_t*>(v), y.data(), 1);
    EXPECT_EQ(y[0], 1.5f);
    dequantize_row(30, reinterpret_cast<const uint8_t*>(v + 1), y.data(), 1);
    EXPECT_EQ(y[0], 1.5f);
  }
  EXPECT_ERROR(dequantize_row(3, nullptr, y.data(), 31), "not whole Q4_1 blocks");
  EXPECT_ERROR(dequantize_row(16, nullptr, y.data(), 256), "cannot dequantize ggml type IQ2_XXS");
  EXPECT_ERROR(dequantize_row(16, nullptr, y.data(), 256),
               "supported: F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0");
  EXPECT_ERROR(dequantize_row(99, nullptr, y.data(), 256), "cannot dequantize ggml type type 99");
}

// The AVX2 paths of dequantize_row (Q4_0, Q5_0, Q5_1, Q8_0, Q2_K to Q6_K, IQ4_NL, IQ4_XS) against its plain
// loops, bit for bit: runs of 1 to 9 random blocks (finite fp16 scales at each layout's offsets), from odd
// addresses too.
TEST(Gguf, DequantizeFastPathsMatchThePlainLoops) {
  SPARSE24_SEED_TRACE();
  auto rng = testing::rng(9);
  struct Layout {
    uint32_t type;
    size_t bytes;
    int values;
    std::vector<size_t> scales;  // where its fp16 scales are
  };
  for (const Layout& l : {Layout{2, 18, 32, {0}}, Layout{6, 22, 32, {0}}, Layout{7, 24, 32, {0, 2}},
                          Layout{8, 34, 32, {0}}, Layout{10, 84, 256, {80, 82}}, Layout{11, 110, 256, {108}},
                          Layout{12, 144, 256, {0, 2}}, Layout{13, 176, 256, {0, 2}},
                          Layout{14, 210, 256, {208}}, Layout{20, 18, 32, {0}}, Layout{23, 136, 256, {0}}})
    for (size_t blocks : {1, 2, 3, 9})
      for (size_t offset : {0, 1}) {
        std::vector<uint8_t> b = random_bytes(rng, offset + blocks * l.bytes);
        for (size_t k = 0; k < blocks; ++k)
          for (size_t at : l.scales) {
            const uint16_t v =
                h(std::ldexp(static_cast<float>(rng() % 2001) / 1000.f - 1.f, -static_cast<int>(rng() % 9)));
            std::memcpy(b.data() + offset + k * l.bytes + at, &v, 2);
          }
        const auto n = static_cast<int64_t>(blocks) * l.values;
        std::vector<float> fast(static_cast<size_t>(n)), plain(fast.size());
        dequantize_row(l.type, b.data() + offset, fast.data(), n);
        dequantize_row(l.type, b.data() + offset, plain.data(), n, false);
        ASSERT_EQ(std::memcmp(fast.data(), plain.data(), fast.size() * sizeof(float)), 0)
            << "type " << l.type << ", " << blocks << " blocks, offset " << offset;
      }
}

TEST(Gguf, MappedFileAndNoTensors) {
  testing::TempDir dir;
  Gguf g;
  g.metadata = {{"general.architecture", GgufValue::of_string("llama")}};
  const std::vector<uint8_t> bytes = encode_gguf(g);
  write_file_atomic(dir.file("m.gguf"), bytes);
  const MappedGguf m(dir.file("m.gguf"));
  EXPECT_EQ(m.gguf.get_string("general.architecture"), "llama");
  EXPECT_TRUE(m.gguf.tensors.empty());
  EXPECT_ERROR(MappedGguf(dir.file("none.gguf")), "cannot open");
}

// Every hostile variant is refused with a one-line Error naming the problem.
TEST(Gguf, RefusesHostileFiles) {
  const std::vector<uint8_t> good = small_file();
  ASSERT_NO_THROW(parse(good));
  // Every truncation of a valid file is refused (none crashes).
  for (size_t n = 0; n < good.size(); ++n) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_THROW(parse(cut), Error) << "truncated to " << n;
  }
  EXPECT_ERROR(parse(std::vector<uint8_t>(good.begin(), good.begin() + 30)), "metadata count 2 cannot fit");
  EXPECT_ERROR(parse(std::vector<uint8_t>(good.begin(), good.begin() + 75)), "truncated");
  EXPECT_ERROR(parse(testing::to_bytes("GGML....")), "not a GGUF file");

  auto header = [](uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    Bytes f;
    f.raw({'G', 'G', 'U', 'F'}).u32(version).u64(n_tensors).u64(n_kv);
    return f;
  };
  EXPECT_ERROR(parse(header(1, 0, 0).b), "version 1 is not supported");
  EXPECT_ERROR(parse(header(7, 0, 0).b), "unsupported GGUF version 7");
  EXPECT_ERROR(parse(header(3u << 24, 0, 0).b), "big-endian");
  EXPECT_ERROR(parse(header(3, 0, UINT64_MAX).b), "metadata count 18446744073709551615 cannot fit");
  EXPECT_ERROR(parse(header(3, 1ull << 60, 0).b), "tensor count 1152921504606846976 cannot fit");

  auto kv = [&](const std::function<void(Bytes&)>& value) {
    Bytes f = header(3, 0, 1);
    f.str("k");
    value(f);
    return f.b;
  };
  EXPECT_ERROR(parse(kv([](Bytes& f) { f.u32(13).u32(0); })), "metadata 'k' has unknown value type 13");
  EXPECT_ERROR(parse(kv([](Bytes& f) { f.u32(7).put<uint8_t>(2); })), "BOOL of value 2");
  EXPECT_ERROR(parse(kv([](Bytes& f) { f.u32(8).u64(1000).str("x"); })), "length 1000 runs past the end");
  EXPECT_ERROR(parse(kv([](Bytes& f) { f.u32(8).u64(UINT64_MAX); })), "runs past the end");
  EXPECT_ERROR(parse(kv([](Bytes& f) { f.u32(9).u32(9).u64(1); })), "array of arrays");
  EXPECT_ERROR(parse(kv([](Bytes& f) { f.u32(9).u32(20).u64(1); })), "array of unknown value type 20");
  EXPECT_ERROR(parse(kv([](Bytes& f) { f.u32(9).u32(8).u64(1ull << 62).u64(0); })),
               "array length 4611686018427387904 of STRING cannot fit");
  EXPECT_ERROR(parse(kv([](Bytes& f) { f.u32(9).u32(12).u64(3).put<double>(1).put<double>(2); })),
               "array length 3 of F64 cannot fit in the 16 bytes left");
  EXPECT_ERROR(parse(kv([](Bytes& f) { f.u32(9).u32(8).u64(2).str("abc").u64(9); })), "runs past the end");
  {
    Bytes f = header(3, 0, 2);
    f.str("k").u32(4).u32(1).str("k").u32(4).u32(2);
    EXPECT_ERROR(parse(f.b), "duplicate metadata key 'k'");
  }
  {
    Bytes f = header(3, 0, 1);
    f.str("general.alignment").u32(4).u32(24);
    EXPECT_ERROR(parse(f.b), "general.alignment 24 is not a power of two");
    Bytes z = header(3, 0, 1);
    z.str("general.alignment").u32(4).u32(0);
    EXPECT_ERROR(parse(z.b), "general.alignment 0 is not a power of two");
    Bytes t = header(3, 0, 1);
    t.str("general.alignment").u32(10).u64(32);
    EXPECT_ERROR(parse(t.b), "general.alignment is U64, expected U32");
  }

  // Tensor infos: (name, dims innermost first, type, offset), followed by `data` bytes of data section.
  auto tensors =
      [&](const std::vector<std::tuple<std::string, std::vector<uint64_t>, uint32_t, uint64_t>>& ts,
          size_t data) {
        Bytes f = header(3, ts.size(), 0);
        for (const auto& [name, dims, type, offset] : ts) {
          f.str(name).u32(static_cast<uint32_t>(dims.size()));
          for (uint64_t d : dims) f.u64(d);
          f.u32(type).u64(offset);
        }
        f.pad_to(32);
        f.b.resize(f.b.size() + data, 0);
        return f.b;
      };
  EXPECT_NO_THROW(parse(tensors({{"a", {4, 2}, 0, 0}, {"b", {32}, 2, 32}}, 64)));
  EXPECT_ERROR(parse(tensors({{"a", {4, 2}, 0, 0}}, 31)), "tensor 'a' bytes [0, 0 + 32) run past the end");
  EXPECT_ERROR(parse(tensors({{"a", {4, 2}, 0, 0}, {"a", {4}, 0, 32}}, 64)), "duplicate tensor 'a'");
  EXPECT_ERROR(parse(tensors({{"a", {1, 1, 1, 1, 1}, 0, 0}}, 64)), "has 5 dimensions (at most 4)");
  EXPECT_ERROR(parse(tensors({{"a", {4}, 77, 0}}, 64)), "tensor 'a' has unknown ggml type 77");
  EXPECT_ERROR(parse(tensors({{"a", {16, 2}, 3, 0}}, 64)),
               "row of 16 elements, not a multiple of its block of 32");
  EXPECT_ERROR(parse(tensors({{"a", {4}, 0, 8}}, 64)), "offset 8 is not a multiple of the alignment 32");
  EXPECT_ERROR(parse(tensors({{"a", {1ull << 62, 1ull << 62}, 0, 0}}, 64)), "is too large");
  EXPECT_ERROR(parse(tensors({{"a", {1ull << 63}, 0, 0}}, 64)), "dimension 9223372036854775808 is too large");
  // A zero dimension does not excuse the others (the fuzzer's find: the 0 first in the file, last in shape).
  EXPECT_ERROR(parse(tensors({{"a", {0, 1ull << 40, 1ull << 40}, 0, 0}}, 64)), "is too large");
  EXPECT_NO_THROW(parse(tensors({{"a", {0, 1ull << 20, 1ull << 20}, 0, 0}}, 64)));
  EXPECT_ERROR(parse(tensors({{"a", {1ull << 60}, 0, 0}}, 64)), "run past the end of the data section");
  EXPECT_ERROR(parse(tensors({{"a", {4}, 0, UINT64_MAX - 31}}, 64)), "run past the end");
  EXPECT_ERROR(parse(tensors({{"a", {16}, 0, 0}, {"b", {4}, 0, 32}}, 96)), "tensors 'a' and 'b' overlap");
  EXPECT_ERROR(parse(tensors({{std::string(64, 'n'), {4}, 0, 0}}, 64)), "name is longer than 63 bytes");
  {
    // Names from the file are printed safely.
    const std::vector<uint8_t> b = tensors({{"a\n\xff", {4}, 99, 0}}, 64);
    EXPECT_ERROR(parse(b), "tensor 'a\\x0a\\xff' has unknown ggml type 99");
  }
}

TEST(Gguf, EncoderRefusesWhatTheReaderWould) {
  std::vector<uint8_t> three(12);
  Gguf g;
  GgufTensor t;
  t.name = "t";
  t.shape = {4};
  t.type = 0;
  t.bytes = three;
  g.tensors = {t};
  EXPECT_ERROR(encode_gguf(g), "12 bytes do not hold F32 [4]");
  g.tensors[0].type = 3;
  EXPECT_ERROR(encode_gguf(g), "do not hold Q4_1 [4]");
  g.tensors[0] = t;
  g.tensors[0].shape = {3};
  g.tensors.push_back(g.tensors[0]);
  EXPECT_ERROR(encode_gguf(g), "duplicate name");
  Gguf a;
  a.alignment = 64;
  EXPECT_ERROR(encode_gguf(a), "general.alignment does not match");
}

}  // namespace
}  // namespace sparse24
