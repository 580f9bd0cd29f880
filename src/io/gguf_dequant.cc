// GGUF tensors to fp32 (sparse24/gguf.h): each ggml block type's dequantization as llama.cpp's reference
// computes it (plain loops, compiled without FMA), the AVX2 paths beside them (kernels/convert.h, bit for
// bit the same), and whole tensors checked against their bytes first.
#include <cstring>
#include <string>

#include "../kernels/convert.h"
#include "io_util.h"
#include "sparse24/dtype.h"
#include "sparse24/error.h"
#include "sparse24/gguf.h"
#include "sparse24/tensor.h"

namespace sparse24 {
namespace {

using io_detail::printable;

// Block layouts of the dequantized types (ggml-common.h), pinned like ggml pins them.
constexpr int kQK = 32;     // elements per Q4_0 / Q4_1 / Q8_0 block
constexpr int kQK_K = 256;  // elements per K-quant super-block
static_assert(2 + kQK / 2 == 18, "Q4_0: f16 d, 16 bytes of nibbles");
static_assert(2 + 2 + kQK / 2 == 20, "Q4_1: f16 d, f16 m, 16 bytes of nibbles");
static_assert(2 + kQK == 34, "Q8_0: f16 d, 32 int8");
static_assert(2 + 2 + 12 + kQK_K / 2 == 144, "Q4_K: f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, nibbles");
static_assert(kQK_K / 2 + kQK_K / 4 + kQK_K / 16 + 2 == 210, "Q6_K: ql, qh, int8 scales, f16 d");
static_assert(2 + 4 + kQK / 2 == 22, "Q5_0: f16 d, u32 of fifth bits, nibbles");
static_assert(2 + 2 + 4 + kQK / 2 == 24, "Q5_1: f16 d, f16 m, u32 of fifth bits, nibbles");
static_assert(kQK_K / 16 + kQK_K / 4 + 2 + 2 == 84,
              "Q2_K: 4-bit scales and mins, 2-bit values, f16 d, f16 dmin");
static_assert(kQK_K / 8 + kQK_K / 4 + 12 + 2 == 110,
              "Q3_K: high-bit mask, 2-bit values, 6-bit scales, f16 d");
static_assert(2 + 2 + 12 + kQK_K / 8 + kQK_K / 2 == 176,
              "Q5_K: Q4_K's fields and a byte of fifth bits per 8");
static_assert(2 + kQK / 2 == 18, "IQ4_NL: f16 d, 16 bytes of nibbles");
static_assert(2 + 2 + kQK_K / 64 + kQK_K / 2 == 136,
              "IQ4_XS: f16 d, u16 high scale bits, low scale nibbles, nibbles");

float f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return half_to_float(h);
}

// The dequantization kernels. Each mirrors the reference's order of float operations (products in float32,
// no fused multiply-add: this file is compiled without FMA, so the compiler cannot contract them).
void deq_q4_0(const uint8_t* b, float* y) {
  const float d = f16(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = d * static_cast<float>((qs[j] & 0x0F) - 8);
    y[j + kQK / 2] = d * static_cast<float>((qs[j] >> 4) - 8);
  }
}
void deq_q4_1(const uint8_t* b, float* y) {
  const float d = f16(b), m = f16(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = d * static_cast<float>(qs[j] & 0x0F) + m;
    y[j + kQK / 2] = d * static_cast<float>(qs[j] >> 4) + m;
  }
}
void deq_q8_0(const uint8_t* b, float* y) {
  const float d = f16(b);
  for (int j = 0; j < kQK; ++j) y[j] = d * static_cast<float>(static_cast<int8_t>(b[2 + j]));
}
// Q5_0 / Q5_1: the Q4_0 / Q4_1 nibbles with a fifth bit per element, bit j of the little-endian u32 qh.
void q5_values(const uint8_t* qh, const uint8_t* qs, int* q) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  for (int j = 0; j < kQK; ++j)
    q[j] = (j < kQK / 2 ? (qs[j] & 0x0F) : (qs[j - kQK / 2] >> 4)) | static_cast<int>(((h >> j) & 1) << 4);
}
void deq_q5_0(const uint8_t* b, float* y, bool fast) {
  const float d = f16(b);
  if (fast) return kernels::q5_values_avx2(b + 2, b + 6, d, 0.0f, true, y);
  int q[kQK];
  q5_values(b + 2, b + 6, q);
  for (int j = 0; j < kQK; ++j) y[j] = d * static_cast<float>(q[j] - 16);
}
void deq_q5_1(const uint8_t* b, float* y, bool fast) {
  const float d = f16(b), m = f16(b + 2);
  if (fast) return kernels::q5_values_avx2(b + 4, b + 8, d, m, false, y);
  int q[kQK];
  q5_values(b + 4, b + 8, q);
  for (int j = 0; j < kQK; ++j) y[j] = d * static_cast<float>(q[j]) + m;
}
// The 6-bit scale and min of sub-block j of Q4_K and Q5_K, packed into 12 bytes.
void k_scale_min(const uint8_t* s, int j, uint8_t& sc, uint8_t& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = static_cast<uint8_t>((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4));
    m = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}
// Q2_K: sixteen sub-blocks of 16 with a 4-bit scale and a 4-bit min each; element e = 128 half + 32 k + l is
// bits 2k..2k+1 of qs[32 half + l].
void deq_q2_k(const uint8_t* b, float* y, bool fast) {
  const uint8_t* sc = b;
  const uint8_t* qs = b + kQK_K / 16;
  const float d = f16(b + kQK_K / 16 + kQK_K / 4), dmin = f16(b + kQK_K / 16 + kQK_K / 4 + 2);
  float dl[16], ml[16];
  for (int s = 0; s < 16; ++s) {
    dl[s] = d * static_cast<float>(sc[s] & 0x0F);
    ml[s] = dmin * static_cast<float>(sc[s] >> 4);
  }
  if (fast) return kernels::k2_values_avx2(qs, nullptr, dl, ml, y);
  for (int e = 0; e < kQK_K; ++e) {  // sub-block e / 16
    const int half = e / 128, k = (e % 128) / 32, l = e % 32;
    y[e] = dl[e / 16] * static_cast<float>((qs[32 * half + l] >> (2 * k)) & 3) - ml[e / 16];
  }
}
// Q3_K: Q2_K's 2-bit layout, minus 4 where bit e / 32 of hmask[e % 32] is clear; sixteen signed 6-bit scales
// (low 4 bits from bytes 0..7, high 2 from bytes 8..11), no mins.
void deq_q3_k(const uint8_t* b, float* y, bool fast) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + kQK_K / 8;
  const uint8_t* s = b + kQK_K / 8 + kQK_K / 4;
  const float d = f16(s + 12);
  float dl[16];
  for (int i = 0; i < 16; ++i) {
    const int lo = i < 8 ? (s[i] & 0x0F) : (s[i - 8] >> 4);
    const int hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
    dl[i] = d * static_cast<float>((lo | hi << 4) - 32);
  }
  if (fast) return kernels::k2_values_avx2(qs, hmask, dl, nullptr, y);
  for (int e = 0; e < kQK_K; ++e) {
    const int half = e / 128, k = (e % 128) / 32, l = e % 32;
    const int q = ((qs[32 * half + l] >> (2 * k)) & 3) - (((hmask[l] >> (e / 32)) & 1) ? 0 : 4);
    y[e] = dl[e / 16] * static_cast<float>(q);
  }
}
// Q4_K and Q5_K: eight sub-blocks of 32, each with a 6-bit scale and a 6-bit min packed into 12 bytes.
// Sub-block j: the low nibbles (even j) or high nibbles (odd j) of 32 bytes qs[32 * (j / 2) ...]; Q5_K adds
// a fifth bit, bit j of qh[l] for element l (qh null: Q4_K).
void deq_q45_k(const uint8_t* b, const uint8_t* qh, const uint8_t* qs, float* y, bool fast) {
  const float d = f16(b), dmin = f16(b + 2);
  float dl[8], ml[8];
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    k_scale_min(b + 4, j, sc, m);
    dl[j] = d * static_cast<float>(sc);
    ml[j] = dmin * static_cast<float>(m);
  }
  if (fast) return kernels::q45_k_values_avx2(qs, qh, dl, ml, y);
  for (int j = 0; j < 8; ++j) {
    const uint8_t* q = qs + 32 * (j / 2);
    const int shift = (j % 2) * 4;
    for (int l = 0; l < 32; ++l) {
      const int v = ((q[l] >> shift) & 0x0F) | (qh ? ((qh[l] >> j) & 1) << 4 : 0);
      y[32 * j + l] = dl[j] * static_cast<float>(v) - ml[j];
    }
  }
}
void deq_q5_k(const uint8_t* b, float* y, bool fast) { deq_q45_k(b, b + 16, b + 16 + kQK_K / 8, y, fast); }
// IQ4_NL / IQ4_XS: 4-bit indices into one fixed non-linear table of 16 int8 levels (ggml's kvalues_iq4nl).
constexpr int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
// 32 elements from 16 bytes: element l < 16 the low nibble of byte l, element l + 16 its high nibble.
void iq4_32(const uint8_t* qs, float dl, float* y) {
  for (int l = 0; l < 16; ++l) {
    y[l] = dl * static_cast<float>(kIq4Levels[qs[l] & 0x0F]);
    y[l + 16] = dl * static_cast<float>(kIq4Levels[qs[l] >> 4]);
  }
}
void deq_iq4_nl(const uint8_t* b, float* y) { iq4_32(b + 2, f16(b), y); }
// Q4_0's nibbles as levels of the same lookup (q - 8), for the AVX2 path shared with IQ4_NL.
constexpr int8_t kQ4Levels[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};
// IQ4_XS: eight sub-blocks of 32 with a signed 6-bit scale each (low 4 bits in scales_l, high 2 in the u16
// scales_h).
void deq_iq4_xs(const uint8_t* b, float* y, bool fast) {
  const float d = f16(b);
  uint16_t sh;
  std::memcpy(&sh, b + 2, 2);
  const uint8_t* sl = b + 4;
  const uint8_t* qs = b + 4 + kQK_K / 64;
  float dl[8];
  for (int j = 0; j < 8; ++j)
    dl[j] =
        d * static_cast<float>((((sl[j / 2] >> (4 * (j % 2))) & 0x0F) | (((sh >> (2 * j)) & 3) << 4)) - 32);
  if (fast) return kernels::nibble_subblocks_to_floats_avx2(qs, kIq4Levels, dl, y);
  for (int j = 0; j < 8; ++j) iq4_32(qs + 16 * j, dl[j], y + 32 * j);
}
// Q6_K: 6-bit values (4 low bits in ql, 2 high bits in qh), sixteen int8 scales of 16 values each.
void deq_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + kQK_K / 2;
  const auto* sc = reinterpret_cast<const int8_t*>(b + kQK_K / 2 + kQK_K / 4);
  const float d = f16(b + kQK_K / 2 + kQK_K / 4 + kQK_K / 16);
  for (int half = 0; half < 2; ++half) {  // two halves of 128 values
    const uint8_t* l = ql + 64 * half;
    const uint8_t* h = qh + 32 * half;
    float* out = y + 128 * half;
    const int8_t* s = sc + 8 * half;
    for (int i = 0; i < 32; ++i) {
      const int q1 = ((l[i] & 0x0F) | (((h[i] >> 0) & 3) << 4)) - 32;
      const int q2 = ((l[i + 32] & 0x0F) | (((h[i] >> 2) & 3) << 4)) - 32;
      const int q3 = ((l[i] >> 4) | (((h[i] >> 4) & 3) << 4)) - 32;
      const int q4 = ((l[i + 32] >> 4) | (((h[i] >> 6) & 3) << 4)) - 32;
      const int is = i / 16;
      out[i] = (d * static_cast<float>(s[is + 0])) * static_cast<float>(q1);
      out[i + 32] = (d * static_cast<float>(s[is + 2])) * static_cast<float>(q2);
      out[i + 64] = (d * static_cast<float>(s[is + 4])) * static_cast<float>(q3);
      out[i + 96] = (d * static_cast<float>(s[is + 6])) * static_cast<float>(q4);
    }
  }
}

}  // namespace

void dequantize_row(uint32_t type, const uint8_t* src, float* y, int64_t n) {
  dequantize_row(type, src, y, n, true);
}

void dequantize_row(uint32_t type, const uint8_t* src, float* y, int64_t n, bool fast) {
  fast = fast && kernels::f16c_supported();
  const GgmlTypeInfo* ti = ggml_type_info(type);
  if (!ti || !ti->dequantizable)
    throw Error("cannot dequantize ggml type " + ggml_type_name(type) +
                " (supported: " + dequantizable_type_names() + ")");
  if (n < 0 || n % ti->block != 0)
    throw Error("dequantize: " + std::to_string(n) + " elements are not whole " + ti->name + " blocks");
  const int64_t blocks = n / ti->block;
  const size_t bb = static_cast<size_t>(ti->block_bytes);
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
      if (n > 0) std::memcpy(y, src, static_cast<size_t>(n) * 4);
      return;
    case GgmlType::kF16:
      kernels::elements_to_floats(DType::kF16, src, n, y);
      return;
    case GgmlType::kBF16:
      kernels::elements_to_floats(DType::kBF16, src, n, y);
      return;
    case GgmlType::kQ4_0:
      if (fast) return kernels::nibble_blocks_to_floats_avx2(src, blocks, kQ4Levels, y);
      for (int64_t i = 0; i < blocks; ++i) deq_q4_0(src + i * bb, y + i * kQK);
      return;
    case GgmlType::kQ4_1:
      for (int64_t i = 0; i < blocks; ++i) deq_q4_1(src + i * bb, y + i * kQK);
      return;
    case GgmlType::kQ8_0:
      if (fast) return kernels::q8_0_to_floats_avx2(src, blocks, y);
      for (int64_t i = 0; i < blocks; ++i) deq_q8_0(src + i * bb, y + i * kQK);
      return;
    case GgmlType::kQ4_K:
      for (int64_t i = 0; i < blocks; ++i)
        deq_q45_k(src + i * bb, nullptr, src + i * bb + 16, y + i * kQK_K, fast);
      return;
    case GgmlType::kQ6_K:
      if (fast) return kernels::q6_k_to_floats_avx2(src, blocks, y);
      for (int64_t i = 0; i < blocks; ++i) deq_q6_k(src + i * bb, y + i * kQK_K);
      return;
    case GgmlType::kQ5_0:
      for (int64_t i = 0; i < blocks; ++i) deq_q5_0(src + i * bb, y + i * kQK, fast);
      return;
    case GgmlType::kQ5_1:
      for (int64_t i = 0; i < blocks; ++i) deq_q5_1(src + i * bb, y + i * kQK, fast);
      return;
    case GgmlType::kQ2_K:
      for (int64_t i = 0; i < blocks; ++i) deq_q2_k(src + i * bb, y + i * kQK_K, fast);
      return;
    case GgmlType::kQ3_K:
      for (int64_t i = 0; i < blocks; ++i) deq_q3_k(src + i * bb, y + i * kQK_K, fast);
      return;
    case GgmlType::kQ5_K:
      for (int64_t i = 0; i < blocks; ++i) deq_q5_k(src + i * bb, y + i * kQK_K, fast);
      return;
    case GgmlType::kIQ4_NL:
      if (fast) return kernels::nibble_blocks_to_floats_avx2(src, blocks, kIq4Levels, y);
      for (int64_t i = 0; i < blocks; ++i) deq_iq4_nl(src + i * bb, y + i * kQK);
      return;
    case GgmlType::kIQ4_XS:
      for (int64_t i = 0; i < blocks; ++i) deq_iq4_xs(src + i * bb, y + i * kQK_K, fast);
      return;
    default:
      break;
  }
  throw Error("cannot dequantize ggml type " + ggml_type_name(type));
}

namespace {

// t's element count, after checking that its bytes hold that many (before anything is allocated for them).
size_t held_numel(const GgufTensor& t) {
  const GgmlTypeInfo* ti = ggml_type_info(t.type);
  const int64_t n = t.numel();
  if (!ti || n % ti->block != 0 || static_cast<uint64_t>(n / ti->block) * ti->block_bytes != t.bytes.size())
    throw Error("tensor '" + printable(t.name) + "': " + std::to_string(t.bytes.size()) +
                " bytes do not hold " + ggml_type_name(t.type) + " " + shape_string(t.shape));
  return static_cast<size_t>(n);
}

void dequantize_into(const GgufTensor& t, float* out, size_t n) {
  try {
    dequantize_row(t.type, t.bytes.data(), out, static_cast<int64_t>(n));
  } catch (const Error& e) {
    throw Error("tensor '" + printable(t.name) + "': " + e.what());
  }
}

}  // namespace

Tensor dequantize(const GgufTensor& t) {
  const size_t n = held_numel(t);
  Tensor out;
  out.dtype = DType::kF32;
  out.shape = t.shape;
  out.bytes.resize(n * 4);
  dequantize_into(t, reinterpret_cast<float*>(out.bytes.data()), n);
  return out;
}

std::vector<float> dequantize_floats(const GgufTensor& t) {
  std::vector<float> out(held_numel(t));
  dequantize_into(t, out.data(), out.size());
  return out;
}

void dequantize_floats_into(const GgufTensor& t, float* out, size_t n) {
  if (held_numel(t) != n)
    throw Error("tensor '" + printable(t.name) + "': " + std::to_string(n) + " floats for " +
                std::to_string(t.numel()) + " elements");
  dequantize_into(t, out, n);
}

}  // namespace sparse24
