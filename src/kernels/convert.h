// Rows of stored elements to fp32 and back, and the finiteness check every loader runs: what loading a
// model spends its time on besides reading the file (a 0.6B-parameter F16 GGUF: 1.2 GB widened, checked
// and hashed). Each gives exactly dtype.h's per-element values; the F16C paths are picked where the CPU has
// them, the plain loops otherwise (and by the tests).
#pragma once
#include <cstdint>

#include "sparse24/dtype.h"

namespace sparse24::kernels {

// IEEE half <-> fp32 (round to nearest even), as half_to_float / float_to_half.
void floats_to_half(const float* x, int64_t n, uint16_t* y);
void half_to_floats(const uint16_t* x, int64_t n, float* y);
// fp32 -> bfloat16 bits, as float_to_bf16 (round to nearest even, a NaN stays a quiet NaN).
void floats_to_bf16(const float* x, int64_t n, uint16_t* y);
// n elements of dtype t stored at p (any alignment) as floats: element_to_float over the row.
void elements_to_floats(DType t, const uint8_t* p, int64_t n, float* y);
// gemv_i8's weights (gemv.h): int8 with an fp32 scale per kGemvI8Group columns of a row. Symmetric
// round-to-nearest quantization of W [rows, cols]: each group's scale is its largest magnitude / 127 (1 for
// an all-zero group). q: rows * cols, scales: rows * ceil(cols / kGemvI8Group). Here, not beside gemv_i8,
// because the loaders (which the fuzz harnesses link without the kernels) quantize tables as they read.
constexpr int64_t kGemvI8Group = 64;
void quantize_gemv_i8(const float* w, int64_t rows, int64_t cols, int8_t* q, float* scales);
// The int8 rounding both int8 weight forms share (quantize_gemv_i8 above, and sparse24::quantize_int8's
// 2:4 values): n values as q = round(x / scale) to nearest even, clamped to -127..127, with scale = max |x|
// / 127; returns that scale (0, and q all zero, for an all-zero group). x finite.
float quantize_i8(const float* x, int64_t n, int8_t* q);
// One value of it: v (x / scale) clamped and rounded to nearest even (as the vector conversion rounds).
// Static: the AVX2 file's copy (built with its flags) is never the one a plain loop calls.
static inline int8_t round_i8(float v) {
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding and taking it off rounds |v| <= 2^22
  const float c = v < -127.f ? -127.f : v > 127.f ? 127.f : v;
  return static_cast<int8_t>((c + kRound) - kRound);
}
// Magnitude 2:4 pruning and compression of one fp32 row of `cols` values, as
// sparse24::compress(..., prune = true) stores it: of each group of 4 the two largest magnitudes are kept
// (the lower position first among equal ones; a zero is never kept), their values at values[2g], [2g+1] in
// position order and the group's code (position 0 | position 1 << 2, completed by the lowest other
// positions, whose values are +0) in meta[g / 2]'s low (g even) or high nibble. A tail group is padded with
// zeros. values: 2 * ceil(cols / 4) floats; meta: ceil(cols / 8) bytes, both written whole. Returns false
// (and leaves them unspecified) if the row holds a NaN.
bool prune24_row(const float* x, int64_t cols, float* values, uint8_t* meta);
// Its plain loop (the whole row where there is no AVX2, a row's last cols % 16 where there is).
bool prune24_row_plain(const float* x, int64_t cols, float* values, uint8_t* meta);
// Whether no x[i] is an infinity or a NaN.
bool all_finite(const float* x, int64_t n);
// The same for n bfloat16 values (their bits) at x.
bool all_finite_bf16(const uint16_t* x, int64_t n);
// The same for n stored values of type t at p (any alignment): fp32 and bf16 ones checked where they are
// when aligned for their type, others (and unaligned ones) through fp32 a piece at a time.
bool all_finite_elements(DType t, const uint8_t* p, int64_t n);

// The F16C paths (convert_avx2.cc): call only where f16c_supported() (taken as AVX2: every AVX2 CPU has it).
bool f16c_supported();
void floats_to_half_f16c(const float* x, int64_t n, uint16_t* y);
void half_to_floats_f16c(const uint16_t* x, int64_t n, float* y);
void floats_to_bf16_avx2(const float* x, int64_t n, uint16_t* y);
// AVX2 paths, taken where f16c_supported(): quantize_i8 whole; prune24_row on whole blocks of 16 values
// (the values of 4 groups, 2 metadata bytes), returning false if any is a NaN.
float quantize_i8_avx2(const float* x, int64_t n, int8_t* q);
bool prune24_blocks_avx2(const float* x, int64_t blocks, float* values, uint8_t* meta);
// ggml blocks to fp32, exactly as dequantize_row's plain loops (sparse24/gguf.h), which take them where
// f16c_supported(): whole Q8_0 and Q6_K blocks, and of a Q4_K or Q5_K block its 128 bytes of nibbles (and
// Q5_K's 32 bytes of fifth bits qh, bit j of qh[l] for element l of sub-block j; null for Q4_K), sub-block j
// (32 values) as dl[j] * q - ml[j] (its scale and min unpacked by the caller).
void q8_0_to_floats_avx2(const uint8_t* w, int64_t blocks, float* y);
void q45_k_values_avx2(const uint8_t* qs, const uint8_t* qh, const float* dl, const float* ml, float* y);
// Blocks of 18 bytes, an fp16 d then 16 bytes of nibbles (element l < 16 the low nibble of byte l, l + 16
// its high one), each nibble mapped through `levels` (16 int8) times d: Q4_0 (levels q - 8) and IQ4_NL (its
// non-linear table). And 128 bytes of such nibbles as eight sub-blocks of 32, sub-block j times dl[j]
// (IQ4_XS, its scales unpacked by the caller).
void nibble_blocks_to_floats_avx2(const uint8_t* w, int64_t blocks, const int8_t* levels, float* y);
void nibble_subblocks_to_floats_avx2(const uint8_t* qs, const int8_t* levels, const float* dl, float* y);
// The 256 values of a Q2_K or Q3_K block from its 64 bytes of 2-bit values qs (element 128 half + 32 k + l
// is bits 2k..2k+1 of qs[32 half + l]), Q3_K minus 4 where bit 4 half + k of hmask[l] is clear (hmask null:
// Q2_K): sub-block s (16 values) as dl[s] * q - ml[s] (ml null: Q3_K, dl[s] * q).
void k2_values_avx2(const uint8_t* qs, const uint8_t* hmask, const float* dl, const float* ml, float* y);
// The 32 values of a Q5_0 (minus16: d * (q - 16)) or Q5_1 (d * q + m) block: its nibbles qs (element j < 16
// the low nibble of qs[j], j + 16 its high one) with bit j of the little-endian u32 at qh as bit 4.
void q5_values_avx2(const uint8_t* qh, const uint8_t* qs, float d, float m, bool minus16, float* y);
void q6_k_to_floats_avx2(const uint8_t* w, int64_t blocks, float* y);
// The byte tables both paths of prune24_row read: for the kept positions of two groups (bits 0-3 the even
// group's, 4-7 the odd one's, at most two per group), the stored positions of each group (4 bytes: the
// even group's two, then 4 + the odd group's two) and their codes as a metadata byte.
struct Prune24Tables {
  uint32_t positions[256];
  uint8_t meta[256];
};
const Prune24Tables& prune24_tables();

}  // namespace sparse24::kernels
