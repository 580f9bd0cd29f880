// The packed layouts behind sparse24::PackedMatrix, and the per-ISA kernel entry points.
//
// Two layouts are prepared once by pack() (for the SIMD ISAs; the ref ISA keeps the compressed matrix):
//
// GemmLayout, the compute-bound path (N above the small-N threshold). Rows in blocks of `mr` (= 4), K in
// blocks of `kc` (a multiple of 4). Block (mb, kb) holds, for each of its kh = 2 * ceil(klen / 4) kept-value
// slots j and each row r of the block, vals[j][r] (fp32). Slots 2g and 2g+1 belong to group g of the block;
// one 16-bit code word per group (per slot pair) holds, in bits 2q..2q+1 for q = 4 * (j - 2g) + r, the
// position (0..3) within the group of the activation row vals[j][r] multiplies. The kernel broadcasts
// vals[j][r] and multiply-adds it with activation row 4g + position of the packed panel, vectorised over N.
// 2 bits per kept value: 0.53 of the dense fp32 bytes, as the compressed format. Padding rows (M tail) hold
// zeros; the last group's padding positions (>= K) hold value 0 and index a zero row of the packed
// activation panel, so X rows >= K are never read. bf16 and int8 weights keep their type (0.28 and 0.16 of
// the dense fp32 bytes): the kernels widen a block into an L1 buffer as they reach it (gemm_block_values,
// spmm_driver.h), once per block and N panel.
//
// LanesLayout, the memory-bound path (N <= small_n_max): below.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include "huge_pages.h"
#include "sparse24/spmm.h"

namespace sparse24::kernels {

// 64-byte aligned, uninitialised-then-zeroed array (the kernels read whole vectors).
template <class T>
class AlignedArray {
 public:
  AlignedArray() = default;
  explicit AlignedArray(size_t n) : n_(n) {
    if (n == 0) return;
    size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
    // Large arrays (packed weights) on 2 MB pages where the kernel gives them on request (transparent huge
    // pages in "madvise" mode): the memory-bound kernels stream them from DRAM, and on the AVX2-only Zen 3
    // machine rows in lanes ran 5-16% faster cold (N = 1, 4096x4096, best of 5, three runs; session 6).
    const bool huge = bytes >= kHugeMin;
    const size_t alloc = huge ? (bytes + kHugePage - 1) / kHugePage * kHugePage : bytes;
    p_.reset(static_cast<T*>(std::aligned_alloc(huge ? kHugePage : 64, alloc)));
    if (!p_) throw std::bad_alloc();
    if (huge) advise_huge_pages(p_.get(), alloc);
    std::memset(static_cast<void*>(p_.get()), 0, bytes);
  }
  // n elements someone else holds (a mapped file's bytes, 64-byte aligned), kept alive by `owner`: read
  // only (the kernels never write packed weights).
  static AlignedArray borrowed(const T* p, size_t n, std::shared_ptr<const void> owner) {
    AlignedArray a;
    a.p_ = std::unique_ptr<T, Free>(const_cast<T*>(p), Free{false});
    a.n_ = n;
    a.owner_ = std::move(owner);
    return a;
  }
  T* data() { return p_.get(); }
  const T* data() const { return p_.get(); }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }
  bool is_borrowed() const { return owner_ != nullptr; }

 private:
  struct Free {
    bool owned = true;
    void operator()(T* p) const {
      if (owned) std::free(p);
    }
  };
  std::unique_ptr<T, Free> p_;
  size_t n_ = 0;
  std::shared_ptr<const void> owner_;  // a borrowed array's holder
  static constexpr size_t kHugeMin = size_t{8} << 20;
};

// The type packed values are stored in (both layouts): fp32, bf16, or int8 with fp32 scales.
enum class ValueType : uint8_t { kF32, kBf16, kI8 };
constexpr int lanes_slot_bytes(ValueType w) {
  return w == ValueType::kF32 ? 4 : (w == ValueType::kBf16 ? 2 : 1);
}

struct GemmLayout {
  int mr = 0;     // rows per row block
  int kc = 0;     // K per block (multiple of 4)
  int chunk = 0;  // row blocks per chunk: the kernels sweep a chunk per K block
  int64_t m_blocks = 0, k_blocks = 0;
  int64_t slots_per_row = 0;  // 2 * groups_per_row
  // Storage order [chunk][K block][row block in chunk][slot][row]: the order the kernels read, so the
  // weights stream sequentially.
  // The values in one of three arrays by type (the others empty), each indexed by block_offset:
  ValueType type = ValueType::kF32;
  AlignedArray<float> vals;
  AlignedArray<uint16_t> vals16;  // bf16 bits
  AlignedArray<int8_t> vals8;     // int8; times scales[scale_at(mb, kb, j / (kScaleUnit / 2)) + row]
  // int8: per row block, K block and unit of kScaleUnit positions in it, the mr rows' scales (kc a multiple
  // of the unit, and the matrix's scale group a multiple of it or the whole row; otherwise fp32 values).
  static constexpr int kScaleUnit = 64;
  AlignedArray<float> scales;
  AlignedArray<uint16_t> codes;  // one word per slot pair: codes[block_offset / (2 * mr) + g]; + 1 padding
  size_t scale_at(int64_t mb, int64_t kb, int64_t unit) const {
    return static_cast<size_t>(((mb * k_blocks + kb) * (kc / kScaleUnit) + unit) * mr);
  }
  size_t bytes() const {
    return vals.bytes() + vals16.bytes() + vals8.bytes() + scales.bytes() + codes.bytes();
  }
  size_t block_offset(int64_t mb, int64_t kb) const {
    const int64_t c0 = mb / chunk * chunk;
    const int64_t nb = m_blocks - c0 < chunk ? m_blocks - c0 : chunk;
    return static_cast<size_t>((c0 * slots_per_row + kb * (kc / 2) * nb + (mb - c0) * slots_in(kb)) * mr);
  }
  // Kept slots per row in K block kb.
  int slots_in(int64_t kb) const {
    const int64_t rest = slots_per_row - kb * (kc / 2);
    return static_cast<int>(rest < kc / 2 ? rest : kc / 2);
  }
};

// LanesLayout, the memory-bound path of the rows-in-lanes kernels (spmm_lanes.h): fp32, bf16 and int8
// weights (2:4 kept values as int8 with fp32 scales) on both ISAs. Rows in blocks of 8 (one per lane of a
// 256-bit vector; the AVX-512 tile reads slots 2q and 2q + 1 as the two halves of one 512-bit vector), K
// in blocks of `kb` (a multiple of 64) and, inside a K block, in super chunks of 64 positions (16 groups,
// 32 slots). Storage order [K block][row block][super chunk], one sequential
// stream. Per (row block, super chunk) one entry: two code vectors of 8 x 32 bits (lane r of code vector h
// holds row r's 2-bit positions, 0..3 within the group, of slots 16h..16h+15, slot s in bits 2(s % 16)),
// for int8 one scale vector (the 8 rows' fp32 scale of these 64 positions), then 32 slot vectors (slot
// 2q + t: the 8 rows' t-th kept value of group q, in position order; 8 x 4, 2 or 1 bytes). The codes come
// first because every permute of the entry waits for them: with them last, a core streaming from DRAM
// held the whole entry's work until its last line arrived (docs/kernels.md, session 12). Entry bytes:
// fp32 1088 (2.125 per weight, as the compressed format), bf16 576 (1.125), int8 352 (0.6875: a super chunk
// lies under one scale of each row, so the matrix's scale group must be a multiple of 64 positions or the
// whole row). Every vector load is 32-byte aligned. A slot's value is 0 where the format has no kept
// position there (positions >= K, padding rows).
struct LanesLayout {
  static constexpr int kRows = 8;
  static constexpr int kSuper = 64;  // positions per super chunk
  static constexpr int kSlots = 32;  // kept-value slots per super chunk
  // The codes first, then (int8) the scales, then the slots: what every operation of the entry needs first.
  static constexpr int code_offset(ValueType) { return 0; }
  static constexpr int scale_offset(ValueType) { return 64; }
  static constexpr int slot_offset(ValueType w) { return w == ValueType::kI8 ? 96 : 64; }
  // Byte offset of slot s (its 8 rows' values) in an entry.
  static constexpr int slot_at(ValueType w, int s) {
    return slot_offset(w) + s * kRows * lanes_slot_bytes(w);
  }
  static constexpr int entry_bytes(ValueType w) { return slot_at(w, kSlots); }
  ValueType weights = ValueType::kF32;
  int kb = 0;                                      // K per block (multiple of kSuper)
  int64_t m_blocks = 0, k_blocks = 0, supers = 0;  // supers = ceil(K / 64)
  AlignedArray<uint8_t> data;
  int64_t supers_in(int64_t kblk) const {
    const int64_t s0 = kblk * (kb / kSuper);
    return supers - s0 < kb / kSuper ? supers - s0 : kb / kSuper;
  }
  // Byte offset of the first super chunk of K block kblk, row block mb.
  size_t entry(int64_t kblk, int64_t mb) const {
    const int64_t s0 = kblk * (kb / kSuper);
    return static_cast<size_t>((m_blocks * s0 + mb * supers_in(kblk)) * entry_bytes(weights));
  }
};

// The packed weight types a variant reads (a bit set); packed weights are one of kF32, kBf16, kI8. The
// compute-bound kernels widen every type to fp32 as they go, so their rows read kAny.
enum class Weights : uint8_t { kF32 = 1, kBf16 = 2, kF32Bf16 = 3, kI8 = 4, kAny = 7 };
// The activations a variant reads: fp32, rounded to bf16 (AVX512_BF16, PackOptions::bf16_activations), or
// quantised to int8 (AVX512_VNNI and AVX512_VBMI, PackOptions::int8_activations).
enum class Act : uint8_t { kF32, kBf16, kI8 };
// A variant reading activations v runs on a pack made for activations a (fp32 ones run on every pack).
constexpr bool act_runs(Act v, Act a) { return v == Act::kF32 || v == a; }

// PackOptions::int8_activations' rounding of one column's block of up to kInt8ActBlock positions (count
// values, stride apart): codes q[i] = round(x * 127 / max|x|) (to nearest even) in -127..127 and the scale
// max|x| / 127, returned (q * scale approximates x). A block of zeros: scale 0. A block holding an infinity
// or a NaN: codes 0 and an infinite or NaN scale, so the sums that read the block are NaN, not finite.
inline constexpr int kInt8ActBlock = 64;
inline float quantize_act_block(const float* x, int64_t count, int64_t stride, int8_t* q) {
  float amax = 0.f;
  for (int64_t i = 0; i < count; ++i) {
    const float v = std::fabs(x[i * stride]);
    if (v > amax || v != v) amax = v;
    if (v != v) break;
  }
  const bool finite = amax > 0.f && amax <= 3.4028235e38f;
  const float inv = finite ? 127.f / amax : 0.f;
  for (int64_t i = 0; i < count; ++i) {
    const float t = x[i * stride] * inv;
    q[i] = static_cast<int8_t>(finite ? std::clamp(std::nearbyint(t), -127.f, 127.f) : 0.f);
  }
  return amax / 127.f;
}

// Arguments of one multiply, validated.
struct SpmmArgs {
  const float* x;
  int64_t n, ldx;
  float* y;
  int64_t ldy;
  const float* bias;
  Epilogue ep;
  int threads;
  // Token-major (spmm_tokens): x is [N, K] (row n at x + n * ldx), y is [N, M]. Every kernel takes it:
  // the compute-bound ones transpose in their panel packing and store, the memory-bound ones read X through
  // these strides as they copy it into their own layout and write Y through the strides below.
  bool tokens = false;
  int64_t x_row_stride() const { return tokens ? 1 : ldx; }  // between positions along K
  int64_t x_col_stride() const { return tokens ? ldx : 1; }  // between columns of X (tokens)
  int64_t y_row_stride() const { return tokens ? 1 : ldy; }  // between rows of W (outputs)
  int64_t y_col_stride() const { return tokens ? ldy : 1; }  // between columns of X (tokens)
};

}  // namespace sparse24::kernels

namespace sparse24 {

struct PackedMatrix::Impl {
  Isa isa = Isa::kRef;
  int64_t m = 0, k = 0;
  // int8 weights: both layouts hold int8 values and scales (the compute-bound one dequantised fp32 values
  // where the scale group is not a multiple of 64 positions or the row).
  kernels::Weights weights = kernels::Weights::kF32;
  // kBf16 / kI8: the bf16- or int8-activation rows may run (PackOptions::bf16_activations on a CPU with
  // AVX512_BF16, int8_activations on one with AVX512_VNNI and AVX512_VBMI).
  kernels::Act act = kernels::Act::kF32;
  int small_n_max = 0;   // N <= this takes the memory-bound path (when both layouts are packed)
  int small_n_take = 0;  // the memory-bound path's largest chunk of columns (kernels::small_n_take)
  bool has_gemm = false, has_lanes = false;
  Compressed ref;  // the ref ISA: the (possibly bf16-rounded) compressed matrix
  kernels::GemmLayout gemm;
  kernels::LanesLayout lanes;  // the small-N layout (the rows-in-lanes kernels, spmm_lanes.h)
};

}  // namespace sparse24
