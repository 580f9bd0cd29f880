// The loops around the micro-kernels, written once over an ISA traits class T (spmm_avx2.cc,
// spmm_avx512.cc define T inside an anonymous namespace, so every instantiation is private to its file and
// compiled with that file's ISA flags). Everything here is a template: nothing here may be a plain
// inline function, or the linker could hand one ISA's code to the other.
//
// Compute-bound path: per N panel of NR = NV * W columns, the activations are packed once into a
// [roundup(K, 4)][NR] aligned buffer (zero rows past K and zero columns past N); then per chunk of row
// blocks, per K block, per row block, a micro-kernel keeps MR x NV accumulators in registers, broadcasts
// each kept weight and multiply-adds it with the packed activation row its index selects. Between K
// blocks the tile's partial sums go to a contiguous per-thread buffer; the last K block adds the bias,
// applies the epilogue and stores to Y. Two threads split the row blocks, or the N panels when the rows
// are few and the panels many.
//
// Memory-bound path (N <= small_n_max): the rows-in-lanes kernels, spmm_lanes.h (and spmm_gemm_lanes.h over
// the compute-bound layout; both store through store_rows and gelu_rows_after below; their X transpose,
// transposed_x, is here).
#pragma once
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <concepts>
#include <cstring>
#include <tuple>
#include <utility>

#include "kernel_list.h"
#include "sparse24/error.h"

namespace sparse24::kernels {

// What the loops below ask of an ISA's traits class T: a vector V of W floats, a column mask, loads and
// stores (aligned, unaligned, masked), arithmetic, the weight spreading of the compute-bound tile
// (bcast4 + lane), the widening of int8 and bf16 weights, the weight-stream prefetch and the vector epilogue.
// (The rows-in-lanes kernels of spmm_lanes.h are written in 256- and 512-bit intrinsics directly and ask
// nothing of T.)
template <class T>
concept KernelTraits = requires(const float* cp, float* p, const int8_t* i8, const uint16_t* b16,
                                typename T::V v, typename T::Mask m, int i) {
  requires std::same_as<decltype(T::W), const int>;
  { T::zero() } -> std::same_as<typename T::V>;
  { T::set1(1.f) } -> std::same_as<typename T::V>;
  { T::load(cp) } -> std::same_as<typename T::V>;
  { T::loadu(cp) } -> std::same_as<typename T::V>;
  { T::loadu_m(cp, m) } -> std::same_as<typename T::V>;
  T::store(p, v);
  T::storeu(p, v);
  T::storeu_m(p, v, m);
  { T::mask_first(i) } -> std::same_as<typename T::Mask>;
  { T::add(v, v) } -> std::same_as<typename T::V>;
  { T::mul(v, v) } -> std::same_as<typename T::V>;
  { T::fma(v, v, v) } -> std::same_as<typename T::V>;
  { T::widen_i8(i8) } -> std::same_as<typename T::V>;     // W int8 values as floats
  { T::widen_bf16(b16) } -> std::same_as<typename T::V>;  // W bf16 values as floats
  { T::bcast4(cp) } -> std::same_as<typename T::V>;
  { T::lane(v, i) } -> std::same_as<typename T::V>;
  T::prefetch(cp);
  { T::epilogue(v, Epilogue::kNone) } -> std::same_as<typename T::V>;
};

// A per-thread scratch buffer that only grows.
template <class T, int Slot>
float* scratch(size_t n) {
  static thread_local AlignedArray<float> buf;
  if (buf.size() < n) buf = AlignedArray<float>(n + 64);
  return buf.data();
}

// The calling thread's buffer for a narrow block widened (gemm_block_values); none for fp32 values.
template <class T>
float* wide_buffer(const GemmLayout& L) {
  return L.type == ValueType::kF32 ? nullptr : scratch<T, 4>(static_cast<size_t>(L.kc / 2 * L.mr + T::W));
}

// The fp32 values of block (mb, kb) of the compute-bound layout (kh slots, at value offset off): in place
// for fp32, otherwise widened (int8: times the rows' scales) into the thread's L1 buffer `buf`
// (wide_buffer), whole vectors at a time (the narrow arrays carry the padding that reads past a block). The
// narrow stream is prefetched `ahead` bytes on. Values are exactly what Compressed::value gives.
template <class T>
[[gnu::always_inline]] inline const float* gemm_block_values(const GemmLayout& L, size_t off, int64_t mb,
                                                             int64_t kb, int kh, float* buf) {
  constexpr int W = T::W;
  const int count = kh * L.mr;
  if (L.type == ValueType::kF32) return L.vals.data() + off;
  constexpr size_t ahead = 2048;
  if (L.type == ValueType::kBf16) {
    const uint16_t* src = L.vals16.data() + off;
    for (int i = 0; i < count; i += W) {
      if (i % 32 == 0) T::prefetch(reinterpret_cast<const char*>(src + i) + ahead);
      T::store(buf + i, T::widen_bf16(src + i));
    }
    return buf;
  }
  // int8: each kScaleUnit / 2 slots of the block (kScaleUnit positions) lie under one scale of each row;
  // bcast4 spreads the 4 rows' scales over the [slot][row] order (W a multiple of 4, the unit's values of W).
  const int8_t* src = L.vals8.data() + off;
  const float* sc = L.scales.data() + L.scale_at(mb, kb, 0);
  constexpr int unit_values = GemmLayout::kScaleUnit / 2 * 4;  // slots x 4 rows (bcast4: mr is 4)
  static_assert(unit_values % W == 0);
  for (int u = 0, i = 0; i < count; ++u) {
    const typename T::V s = T::bcast4(sc + u * L.mr);
    for (const int e = std::min(count, (u + 1) * unit_values); i < e; i += W) {
      if (i % 64 == 0) T::prefetch(reinterpret_cast<const char*>(src + i) + ahead);
      T::store(buf + i, T::mul(T::widen_i8(src + i), s));
    }
  }
  return buf;
}

// Compute-bound tiles over the memory-bound layout (a pack without the compute-bound one: a decoder's prompt,
// say): row blocks [mc, mce) of the compute-bound geometry (lanes_gemm_geometry), K block kb of kh slots,
// made from the LanesLayout entries as the tiles read them: the fp32 values [slot][4 rows] of row block mb at
// out + (mb - mc) * stride (gemm_block_values' form; stride >= roundup(kh, 4) * 4) and its code words
// (GemmLayout::codes' form) at codes + (mb - mc) * cstride. A lanes row block is two compute-bound ones
// (lanes 0-3 and 4-7); a K block (kc a multiple of 64) whole super chunks. The entries of the next K block
// are prefetched into L2 (the chunk's tiles of this one run in between).
template <class T>
void lanes_to_gemm_blocks(const LanesLayout& Ls, int64_t mc, int64_t mce, int64_t kb, int kc, int kh,
                          float* out, int64_t stride, uint16_t* codes, int64_t cstride) {
  using LL = LanesLayout;
  const ValueType wt = Ls.weights;
  const int eb = LL::entry_bytes(wt);
  const int64_t per = Ls.kb / LL::kSuper;
  const int64_t s0 = kb * kc / LL::kSuper;
  const int nsup = (kh + LL::kSlots - 1) / LL::kSlots;
  const __m256i split = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);  // 4 slots x 8 rows -> rows 0-3 | 4-7
  for (int64_t lb = mc / 2; 2 * lb < mce; ++lb) {
    float* o[2];
    uint16_t* c[2];
    for (int h = 0; h < 2; ++h) {
      const int64_t mb = 2 * lb + h;
      const bool in = mb >= mc && mb < mce;
      o[h] = in ? out + (mb - mc) * stride : nullptr;
      c[h] = in ? codes + (mb - mc) * cstride : nullptr;
    }
    // Super chunk s of this lanes row block.
    auto entry_at = [&](int64_t s) {
      return Ls.data.data() + Ls.entry(s / per, lb) + static_cast<size_t>((s % per) * eb);
    };
    if (s0 + nsup < Ls.supers) {  // the next K block's entries
      const uint8_t* en = entry_at(s0 + nsup);
      for (int off = 0; off < nsup * eb; off += 64)
        _mm_prefetch(reinterpret_cast<const char*>(en + off), _MM_HINT_T1);
    }
    for (int si = 0; si < nsup; ++si) {
      const uint8_t* e = entry_at(s0 + si);
      const int slots = std::min(LL::kSlots, kh - LL::kSlots * si);  // even; the values go in fours
      // Code words: lane r's word of code vector v holds groups 8v..8v+7, a nibble each (slot 2g in its low
      // 2 bits); one pdep per 4 groups puts a row's nibbles at bits 2r and 8 + 2r of 4 words.
      uint32_t cw[2][LL::kRows];
      std::memcpy(cw, e + LL::code_offset(wt), sizeof(cw));
      for (int h = 0; h < 2; ++h) {
        if (!c[h]) continue;
        uint64_t w4[4] = {0, 0, 0, 0};
        for (int r = 0; r < 4; ++r) {
          const uint64_t field = 0x0303030303030303ull << (2 * r);
          for (int v = 0; v < 2; ++v) {
            const uint32_t word = cw[v][4 * h + r];
            w4[2 * v] |= _pdep_u64(word & 0xffffu, field);
            w4[2 * v + 1] |= _pdep_u64(word >> 16, field);
          }
        }
        std::memcpy(c[h] + LL::kSlots / 2 * si, w4, sizeof(uint16_t) * static_cast<size_t>(slots / 2));
      }
      const uint8_t* src = e + LL::slot_at(wt, 0);
      float* d[2] = {o[0] ? o[0] + 4 * LL::kSlots * si : nullptr,
                     o[1] ? o[1] + 4 * LL::kSlots * si : nullptr};
      if (wt == ValueType::kI8) {
        const float* sc = reinterpret_cast<const float*>(e + LL::scale_offset(wt));
        const typename T::V scale[2] = {T::bcast4(sc), T::bcast4(sc + 4)};
        alignas(32) int8_t t[32];
        for (int j = 0; j < slots; j += 4) {
          const __m256i b = _mm256_load_si256(reinterpret_cast<const __m256i*>(src + 8 * j));
          _mm256_store_si256(reinterpret_cast<__m256i*>(t), _mm256_permutevar8x32_epi32(b, split));
          for (int h = 0; h < 2; ++h)
            if (d[h])
              for (int i = 0; i < 16; i += T::W)
                T::store(d[h] + 4 * j + i, T::mul(T::widen_i8(t + 16 * h + i), scale[h]));
        }
      } else if (wt == ValueType::kBf16) {
        const uint16_t* b = reinterpret_cast<const uint16_t*>(src);
        for (int j = 0; j < slots; ++j)
          for (int h = 0; h < 2; ++h)
            if (d[h]) {
              const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 8 * j + 4 * h));
              _mm_store_ps(d[h] + 4 * j, _mm_castsi128_ps(_mm_slli_epi32(_mm_cvtepu16_epi32(v), 16)));
            }
      } else {
        const float* f = reinterpret_cast<const float*>(src);
        for (int j = 0; j < slots; ++j)
          for (int h = 0; h < 2; ++h)
            if (d[h]) _mm_store_ps(d[h] + 4 * j, _mm_load_ps(f + 8 * j + 4 * h));
      }
    }
  }
}

// The compute-bound geometry over a pack's memory-bound layout: the ISA's row blocks, K blocks and chunks,
// no arrays (lanes_to_gemm_blocks makes each block's values and codes as the tiles reach it).
template <class T>
GemmLayout lanes_gemm_geometry(const PackedMatrix::Impl& p) {
  const IsaRow* s = isa_row(p.isa);
  GemmLayout g;
  g.mr = s->gemm_mr;
  g.kc = s->gemm_kc;
  g.chunk = s->gemm_chunk;
  g.m_blocks = (p.m + g.mr - 1) / g.mr;
  g.k_blocks = (p.k + g.kc - 1) / g.kc;
  g.slots_per_row = 2 * ((p.k + 3) / 4);
  g.type = p.lanes.weights;
  return g;
}

template <class T>
typename T::V finish(typename T::V acc, const float* bias, int64_t row, Epilogue ep) {
  if (bias) acc = T::add(acc, T::set1(bias[row]));
  return T::epilogue(acc, ep);
}

// y[0..n) = epilogue(y[0..n)), vectorised.
template <class T>
void epilogue_row(float* y, int n, Epilogue ep) {
  for (int c = 0; c < n; c += T::W) {
    const typename T::Mask mk = T::mask_first(std::min(T::W, n - c));
    T::storeu_m(y + c, T::epilogue(T::loadu_m(y + c, mk), ep), mk);
  }
}

// GELU of rows x (NV vectors) of Y, the tile just stored (in L1): a plain loop whose iterations the CPU
// overlaps, where applied to the accumulators in registers each GELU waited for the previous one's
// chain (3072x768x128 with GELU, scratch benchmark: 271 -> 278 GFLOP/s).
template <class T, int NV, bool FULL>
void gelu_rows(float* y, int64_t ldy, int rows, const typename T::Mask* cm) {
  constexpr int W = T::W;
  for (int i = 0; i < rows * NV; ++i) {
    float* p = y + (i / NV) * ldy + (i % NV) * W;
    if (FULL)
      T::storeu(p, T::gelu(T::loadu(p)));
    else
      T::storeu_m(p, T::gelu(T::loadu_m(p, cm[i % NV])), cm[i % NV]);
  }
}

// TOK (spmm_tokens): y is token-major, Y[n][row] at y + n * ldy + row; nc of the NR columns are real.
template <class T, int MR, int NV, bool FULL, bool TOK = false>
void gemm_tile(const float* __restrict v, const uint16_t* __restrict codes, int kh,
               const float* __restrict xb, float* __restrict part, float* __restrict y, int64_t ldy, int rows,
               const typename T::Mask* cm, bool first, bool last, const float* bias, int64_t row0,
               Epilogue ep, int nc = 0) {
  using V = typename T::V;
  constexpr int W = T::W;
  constexpr int NR = NV * W;
  V acc[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < NV; ++c) {
      acc[r][c] = first ? T::zero() : T::load(part + (r * NV + c) * W);
    }
  // One group (two slots, 8 weights) per step: one 16-bit word of their positions (split with shifts, not
  // loads) and per slot one 4-value broadcast whose lanes are spread by in-lane permutes: the load ports
  // are the bound, and this leaves them almost only to the activation loads (docs/kernels.md).
  static_assert(MR == 4, "the weight broadcast handles 4 rows per slot");
  // Field q of the code word times the panel's row bytes: when those are a power of two (1 << S), one
  // rotate and one and (rorx leaves the word intact: no copies).
  constexpr unsigned kRowBytes = NR * sizeof(float);
  constexpr int S = std::countr_zero(kRowBytes);
  // acc[row q % 4] += w * (activation row of field q of pos).
  auto fma_field = [&](const V& w, uint32_t pos, int q) {
    size_t off;
    if constexpr (std::has_single_bit(kRowBytes))
      off = std::rotr(pos, (2 * q - S) & 31) & (3u << S);
    else
      off = ((pos >> (2 * q)) & 3) * kRowBytes;
    const float* xp = reinterpret_cast<const float*>(reinterpret_cast<const char*>(xb) + off);
#pragma GCC unroll 8
    for (int c = 0; c < NV; ++c) acc[q % 4][c] = T::fma(w, T::load(xp + c * W), acc[q % 4][c]);
  };
  // Weights stream from L3 or DRAM (a deployed model's layers are cold): prefetch 4 KB (~4 tiles) ahead
  // (cold 3072x768x128: +4-6%; 2 or 8 KB the same); a prefetch past the array is harmless.
  constexpr int kWeightPrefetch = 1024;
  // The code word is loaded a group ahead, so the activation loads never wait for it (+9% in-L1).
  uint32_t next = *codes;
  for (int j = 0; j < kh; j += 2) {
    const uint32_t pos = next;
    next = *++codes;  // one word past the block is the next block's, or the layout's padding word
    const V w4[2] = {T::bcast4(v), T::bcast4(v + 4)};
    T::prefetch(v + kWeightPrefetch);
#pragma GCC unroll 8
    for (int q = 0; q < 8; ++q) fma_field(T::lane(w4[q / 4], q % 4), pos, q);
    v += 8;
    xb += 4 * NR;
  }
  if (!last) {
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
      for (int c = 0; c < NV; ++c) T::store(part + (r * NV + c) * W, acc[r][c]);
    return;
  }
  if constexpr (TOK) {
    // The tile (epilogue in registers) to a buffer, then out 4 x 4 at a time transposed: Y's rows are
    // tokens, each tile row's 4 values of one token adjacent.
    static_assert(MR == 4);
    alignas(64) float t[MR][NR];
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
      for (int c = 0; c < NV; ++c)
        T::store(t[r] + c * W,
                 T::epilogue(r < rows && bias ? T::add(acc[r][c], T::set1(bias[row0 + r])) : acc[r][c], ep));
    int n = 0;
    if (rows == MR)
      for (; n + 4 <= nc; n += 4) {
        __m128 a0 = _mm_load_ps(t[0] + n), a1 = _mm_load_ps(t[1] + n), a2 = _mm_load_ps(t[2] + n),
               a3 = _mm_load_ps(t[3] + n);
        _MM_TRANSPOSE4_PS(a0, a1, a2, a3);
        _mm_storeu_ps(y + (n + 0) * ldy, a0);
        _mm_storeu_ps(y + (n + 1) * ldy, a1);
        _mm_storeu_ps(y + (n + 2) * ldy, a2);
        _mm_storeu_ps(y + (n + 3) * ldy, a3);
      }
    for (; n < nc; ++n)
      for (int r = 0; r < rows; ++r) y[n * ldy + r] = t[r][n];
    return;
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    if (r >= rows) break;
#pragma GCC unroll 8
    for (int c = 0; c < NV; ++c) {
      // ReLU in registers; GELU (~45 dependent operations per vector) in a loop over the stored rows.
      const V o = finish<T>(acc[r][c], bias, row0 + r, ep == Epilogue::kGelu ? Epilogue::kNone : ep);
      if (FULL)
        T::storeu(y + r * ldy + c * W, o);
      else
        T::storeu_m(y + r * ldy + c * W, o, cm[c]);
    }
  }
  if (ep == Epilogue::kGelu) gelu_rows<T, NV, FULL>(y, ldy, rows, cm);
}

// GELU over rows [r0, r1) of Y's n columns, once a thread has written them (store_rows, and gemm_run at one
// partial panel, leave it out): the GELUs of a long loop overlap, where a tile's few waited for each other.
// Y's rows without padding (the engine's) as one run of floats: a row at a time, each masked store overlapped
// the next row's load and held it (fp32 1536x384x8 with bias and GELU, weights in L3, 62 GFLOP/s against
// 109 without; docs/kernels.md, sessions 36 and 37).
template <class T>
void gelu_rows_after(const SpmmArgs& a, int64_t r0, int64_t r1) {
  if (a.ep != Epilogue::kGelu || r0 >= r1) return;
  auto run = [&](float* y, int64_t len) {
    for (int64_t i = 0; i < len; i += 4096)
      epilogue_row<T>(y + i, static_cast<int>(std::min<int64_t>(4096, len - i)), a.ep);
  };
  if (a.tokens) {
    for (int64_t j = 0; j < a.n; ++j) run(a.y + j * a.ldy + r0, r1 - r0);
  } else if (a.ldy == a.n) {
    run(a.y + r0 * a.ldy, (r1 - r0) * a.n);
  } else {
    for (int64_t r = r0; r < r1; ++r) run(a.y + r * a.ldy, a.n);
  }
}

// Row blocks [first, second) of the compute-bound layout for thread tid of nth: whole chunks per thread when
// there are enough (each thread's weights one sequential stream), else single row blocks.
inline std::pair<int64_t, int64_t> thread_row_blocks(const GemmLayout& L, int tid, int nth) {
  const int64_t unit = L.m_blocks >= 2 * nth * L.chunk ? L.chunk : 1;
  const int64_t units = (L.m_blocks + unit - 1) / unit;
  return {std::min(L.m_blocks, units * tid / nth * unit),
          std::min(L.m_blocks, units * (tid + 1) / nth * unit)};
}

// LANES: the tiles over the memory-bound layout (lanes_to_gemm_blocks), always in the widen-once order.
template <class T, int MR, int NV, bool LANES = false>
void gemm_run(const PackedMatrix::Impl& p, const SpmmArgs& a) {
  constexpr int W = T::W;
  constexpr int NR = NV * W;
  const GemmLayout geometry = LANES ? lanes_gemm_geometry<T>(p) : GemmLayout{};
  const GemmLayout& L = LANES ? geometry : p.gemm;
  if (L.mr != MR) throw Error("internal: packed row block does not match the kernel");
  const int64_t m = p.m, k = p.k, n = a.n;
  const int64_t kp = (k + 3) / 4 * 4;
  const int64_t panels = (n + NR - 1) / NR;
  const int nt = static_cast<int>(std::min<int64_t>(a.threads, std::max<int64_t>(panels, L.m_blocks)));
  // Two threads split the row blocks (each streams half the weights; splitting N panels made each stream
  // all of them: 2-thread N=128 at 1.0-1.17x of dense instead of 1.4-1.5x), unless the rows are too few
  // for whole chunks per thread and the panels many (a small matrix with a huge N).
  const bool split_n = nt > 1 && L.m_blocks < 2 * nt * L.chunk && panels >= 4 * nt;
  // GELU at one partial panel (N < NR) once the thread's rows are written (gelu_rows_after), not per tile:
  // there each row's masked store held the masked load of its GELU (1536x384 with bias and GELU, weights in
  // L2, Intel model 207: N = 20 +19%, 17 +20%, 12 on the 4x16 tile +28%, 5 on the 4x8 +25%; full panels
  // and several panels gained nothing; docs/kernels.md, session 37).
  const bool gelu_after = a.ep == Epilogue::kGelu && !a.tokens && !split_n && n < NR;
  const Epilogue tile_ep = gelu_after ? Epilogue::kNone : a.ep;
  // Loop order. Weights that fit in the last-level cache: per N panel (packed into a small per-thread
  // buffer that stays in L2), per chunk of row blocks; the weights come from L3 once per panel. Larger
  // weights: every panel is packed first (in parallel), then each chunk of row blocks sweeps all its
  // panels, so a chunk's weights stay in L2 instead of streaming from DRAM once per panel
  // (4096x4096x512 +10%; for a small matrix with a huge N, e.g. a conv over 12544 pixels, packing all of
  // X would instead send it through DRAM). Also when all the packed panels fit in half the L2 together:
  // then sweeping them per chunk costs nothing and the weights are read once (BERT's K = 768 GEMMs at
  // N = 128: +2-4% with weights in L3, +4-8% from DRAM; K = 3072, whose X does not fit, loses 2-3%).
  // Small panels are packed by every thread for itself, as in the panel-outer order: reading a panel the
  // other core packed costs a cross-core transfer of every line (2 threads, 768x768x128: 1.40x of dense
  // with own copies, 1.19x with shared ones).
  const size_t weight_bytes = L.bytes();
  const bool small_x = static_cast<size_t>(panels * kp * NR) * sizeof(float) <= (size_t{512} << 10);
  const bool chunk_outer_by_size = panels > 1 && (weight_bytes > (size_t{16} << 20) || small_x);
  // Narrow values (bf16, int8) widen block by block (gemm_block_values): 2 (bf16) or 3 (int8) operations
  // per vector of values, each time a panel reads the block, against the tile's NV multiply-adds per
  // vector. Over several panels narrower than 64 columns (AVX2's 24: six at N = 128) each K block is
  // widened once for all of them (multiply_widened, in the chunk-outer order). AVX2 tiles on Intel model
  // 207, mpnet at 128 tokens: int8 263-264 -> 242 ms, bf16 258-259 -> 244-245 (fp32 239-243). On AVX-512's
  // 64-column panels it did not pay: int8 +0.5-2% per Linear but the encoder 2% slower, -2-4% with 2
  // threads where X is past L2, bf16 -1-3% (docs/kernels.md, session 40).
  // Over the memory-bound layout every block is made once for all panels (LANES).
  const bool widen_once = LANES || (L.type != ValueType::kF32 && panels > 1 && NR < 64);
  const bool chunk_outer = chunk_outer_by_size || widen_once;
  const bool shared_x = chunk_outer && !small_x;
  float* xall = shared_x ? scratch<T, 0>(static_cast<size_t>(panels * kp * NR)) : nullptr;
  auto pack_panel = [&](int64_t pan, float* xp) {
    const int64_t n0 = pan * NR;
    const int nc = static_cast<int>(std::min<int64_t>(NR, n - n0));
    if (a.tokens) {  // X [N, K]: the panel is its transpose, 4 x 4 blocks at a time
      for (int64_t kk = 0; kk < kp; kk += 4) {
        float* dst = xp + kk * NR;
        int c = 0;
        if (kk + 4 <= k)
          for (; c + 4 <= nc; c += 4) {
            const float* src = a.x + (n0 + c) * a.ldx + kk;
            __m128 r0 = _mm_loadu_ps(src), r1 = _mm_loadu_ps(src + a.ldx), r2 = _mm_loadu_ps(src + 2 * a.ldx),
                   r3 = _mm_loadu_ps(src + 3 * a.ldx);
            _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
            _mm_store_ps(dst + c, r0);
            _mm_store_ps(dst + NR + c, r1);
            _mm_store_ps(dst + 2 * NR + c, r2);
            _mm_store_ps(dst + 3 * NR + c, r3);
          }
        for (; c < nc; ++c)
          for (int j = 0; j < 4; ++j) dst[j * NR + c] = kk + j < k ? a.x[(n0 + c) * a.ldx + kk + j] : 0.f;
        for (int j = 0; j < 4; ++j)
          if (nc < NR) std::memset(dst + j * NR + nc, 0, sizeof(float) * static_cast<size_t>(NR - nc));
      }
      return;
    }
    for (int64_t kk = 0; kk < kp; ++kk) {
      float* dst = xp + kk * NR;
      int c0 = 0;
      if (kk < k) {
        std::memcpy(dst, a.x + kk * a.ldx + n0, sizeof(float) * static_cast<size_t>(nc));
        c0 = nc;
      }
      if (c0 < NR) std::memset(dst + c0, 0, sizeof(float) * static_cast<size_t>(NR - c0));
    }
  };
  // Panel pan's column mask (its nc real columns).
  auto panel_mask = [&](int64_t pan, typename T::Mask(&cm)[NV]) {
    const int nc = static_cast<int>(std::min<int64_t>(NR, n - pan * NR));
    for (int c = 0; c < NV; ++c) cm[c] = T::mask_first(std::clamp(nc - c * W, 0, W));
    return nc;
  };
  // The tile of row block mb, K block kb (kh slots) of panel pan: fp32 values v, code words codes, the
  // block's packed X xb, partial sums pt.
  auto tile = [&](int64_t pan, int64_t mb, int64_t kb, int kh, const uint16_t* codes, const float* v,
                  const float* xb, float* pt, const typename T::Mask* cm, int nc) {
    const int64_t n0 = pan * NR;
    const bool first = kb == 0, last = kb == L.k_blocks - 1;
    const int rows = static_cast<int>(std::min<int64_t>(MR, m - mb * MR));
    float* y = a.tokens ? a.y + n0 * a.ldy + mb * MR : a.y + mb * MR * a.ldy + n0;
    if (a.tokens)
      gemm_tile<T, MR, NV, false, true>(v, codes, kh, xb, pt, y, a.ldy, rows, cm, first, last, a.bias,
                                        mb * MR, a.ep, nc);
    else if (nc == NR)
      gemm_tile<T, MR, NV, true>(v, codes, kh, xb, pt, y, a.ldy, rows, cm, first, last, a.bias, mb * MR,
                                 tile_ep);
    else
      gemm_tile<T, MR, NV, false>(v, codes, kh, xb, pt, y, a.ldy, rows, cm, first, last, a.bias, mb * MR,
                                  tile_ep);
  };
  // Row blocks [mc, mce) (within one chunk) times K blocks [kb0, kb1) of panel pan, packed at xp; the
  // partial sums of row block mb live at part + (mb - mb0) * MR * NR between K blocks.
  auto multiply = [&](int64_t pan, const float* xp, int64_t mc, int64_t mce, int64_t kb0, int64_t kb1,
                      float* part, int64_t mb0, float* wide) {
    typename T::Mask cm[NV];
    const int nc = panel_mask(pan, cm);
    for (int64_t kb = kb0; kb < kb1; ++kb) {
      const int kh = L.slots_in(kb);
      for (int64_t mb = mc; mb < mce; ++mb) {
        const size_t off = L.block_offset(mb, kb);
        tile(pan, mb, kb, kh, L.codes.data() + off / (2 * MR), gemm_block_values<T>(L, off, mb, kb, kh, wide),
             xp + kb * L.kc * NR, part + (mb - mb0) * MR * NR, cm, nc);
      }
    }
  };
  // Narrow values and several panels: row blocks [mc, mce) (within one chunk) times every K block of
  // panels [g0, g1) (packed at xs), each K block of the row blocks widened once into `slab` (in L2: one
  // K block of a chunk) for all the panels, not once per panel; the partial sums of row block mb, panel pan
  // at part + ((pan - g0) * (mce - mc) + mb - mc) * MR * NR.
  // LANES: the values and codes made from the memory-bound layout, the codes into `cslab` (cstride words
  // per row block).
  constexpr int64_t cstride = 64;  // >= kc / 4 code words (kc <= 256)
  auto multiply_widened = [&](const float* xs, int64_t g0, int64_t g1, int64_t mc, int64_t mce, float* part,
                              float* slab, uint16_t* cslab) {
    typename T::Mask cm[NV];
    for (int64_t kb = 0; kb < L.k_blocks; ++kb) {
      const int kh = L.slots_in(kb);
      const int64_t stride = ((kh + 3) / 4 * 4 * MR + W - 1) / W * W;  // whole (aligned) vectors per block
      // The row blocks of one chunk and K block lie one after another (GemmLayout's storage order).
      const size_t off0 = LANES ? 0 : L.block_offset(mc, kb);
      if constexpr (LANES)
        lanes_to_gemm_blocks<T>(p.lanes, mc, mce, kb, L.kc, kh, slab, stride, cslab, cstride);
      else
        for (int64_t mb = mc; mb < mce; ++mb)
          gemm_block_values<T>(L, off0 + (mb - mc) * kh * MR, mb, kb, kh, slab + (mb - mc) * stride);
      for (int64_t pan = g0; pan < g1; ++pan) {
        const int nc = panel_mask(pan, cm);
        const float* xb = xs + pan * kp * NR + kb * L.kc * NR;
        for (int64_t mb = mc; mb < mce; ++mb)
          tile(pan, mb, kb, kh,
               LANES ? cslab + (mb - mc) * cstride : L.codes.data() + (off0 + (mb - mc) * kh * MR) / (2 * MR),
               slab + (mb - mc) * stride, xb, part + ((pan - g0) * (mce - mc) + mb - mc) * MR * NR, cm, nc);
      }
    }
  };
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    const int tid = omp_get_thread_num();
    const int nth = omp_get_num_threads();
    int64_t p0 = 0, p1 = panels, b0 = 0, b1 = L.m_blocks;
    if (split_n) {
      p0 = panels * tid / nth;
      p1 = panels * (tid + 1) / nth;
    } else {
      std::tie(b0, b1) = thread_row_blocks(L, tid, nth);
    }
    // Partial sums between K blocks go to a contiguous per-thread buffer, not to Y: a tile's rows of Y are
    // ldy apart and fall into a few L1 sets (N = 512: 8 of 64), where they evicted the packed activations
    // (768x768x512: 300 -> 320 GFLOP/s, 4096x4096x512: 272 -> 310; scratch benchmark, quiet machine).
    // widen_once: partial sums for a group of panels (at most 256 KB of them, so they stay in L2 beside
    // the slab of widened values), the slab one K block of a chunk.
    const int64_t span = std::min<int64_t>(L.chunk, std::max<int64_t>(1, b1 - b0));
    const int64_t group =
        widen_once
            ? std::max<int64_t>(1, std::min<int64_t>(p1 - p0, (int64_t{256} << 10) /
                                                                  (span * MR * NR * int64_t{sizeof(float)})))
            : 0;
    float* part =
        scratch<T, 3>(static_cast<size_t>(std::max(std::max<int64_t>(1, b1 - b0), group * span) * MR * NR));
    float* wide = widen_once
                      ? scratch<T, 4>(static_cast<size_t>(L.chunk * ((L.kc / 2 * MR + W - 1) / W * W) + W))
                      : wide_buffer<T>(L);
    uint16_t* cslab =
        LANES ? reinterpret_cast<uint16_t*>(scratch<T, 5>(static_cast<size_t>(L.chunk * cstride / 2 + 16)))
              : nullptr;
    if (chunk_outer) {
      float* xs = xall;
      if (shared_x) {
#pragma omp for schedule(static)
        for (int64_t pan = 0; pan < panels; ++pan) pack_panel(pan, xall + pan * kp * NR);
      } else if (b0 < b1) {
        xs = scratch<T, 0>(static_cast<size_t>(panels * kp * NR));
        for (int64_t pan = p0; pan < p1; ++pan) pack_panel(pan, xs + pan * kp * NR);
      }
      for (int64_t mc = b0; mc < b1;) {
        const int64_t mce = std::min(b1, (mc / L.chunk + 1) * L.chunk);
        if (widen_once)
          for (int64_t g0 = p0; g0 < p1; g0 += group)
            multiply_widened(xs, g0, std::min(p1, g0 + group), mc, mce, part, wide, cslab);
        else
          for (int64_t pan = p0; pan < p1; ++pan)
            multiply(pan, xs + pan * kp * NR, mc, mce, 0, L.k_blocks, part, b0, wide);
        mc = mce;
      }
    } else {
      float* xp = scratch<T, 0>(static_cast<size_t>(kp * NR));
      // K in super blocks whose packed X (<= 256 KB) stays in L2 while every chunk sweeps it.
      const int64_t super = std::max<int64_t>(1, (int64_t{256} << 10) / (L.kc * NR * int64_t{sizeof(float)}));
      for (int64_t pan = p0; pan < p1 && b0 < b1; ++pan) {
        pack_panel(pan, xp);
        for (int64_t ks = 0; ks < L.k_blocks; ks += super)
          for (int64_t mc = b0; mc < b1;) {
            const int64_t mce = std::min(b1, (mc / L.chunk + 1) * L.chunk);
            multiply(pan, xp, mc, mce, ks, std::min(L.k_blocks, ks + super), part, b0, wide);
            mc = mce;
          }
      }
    }
    if (gelu_after) gelu_rows_after<T>(a, b0 * MR, std::min(m, b1 * MR));
  }
}

// Rows [row0, row0 + rows) of Y from a tile's sums (column j's of row r at t[j][r]): added to what Y holds
// unless first; at the last K block plus the bias and ReLU (GELU: gelu_rows_after, once the thread's rows
// are all written).
template <class T, int N, int R>
void store_rows(const SpmmArgs& a, const float (&t)[N][R], int64_t row0, int rows, bool first, bool last) {
  alignas(64) float out[R][N];
  const int64_t ys = a.y_col_stride(), yr = a.y_row_stride();
  for (int r = 0; r < rows; ++r) {
    const float* y = a.y + (row0 + r) * yr;
    for (int j = 0; j < N; ++j) {
      float sum = first ? t[j][r] : y[j * ys] + t[j][r];
      if (last && a.bias) sum += a.bias[row0 + r];
      out[r][j] = sum;
    }
  }
  if (last && a.ep == Epilogue::kRelu) epilogue_row<T>(&out[0][0], rows * N, a.ep);
  for (int r = 0; r < rows; ++r) {
    float* y = a.y + (row0 + r) * yr;
    for (int j = 0; j < N; ++j) y[j * ys] = out[r][j];
  }
}

// X [k, N] transposed into the thread's scratch as N rows of ldxt floats, zero past k: the memory-bound
// kernels read each column of X as one contiguous stream.
template <class T, int N>
float* transposed_x(const SpmmArgs& a, int64_t k, int64_t ldxt) {
  float* xt = scratch<T, 1>(static_cast<size_t>(N * ldxt));
  for (int j = 0; j < N; ++j)
    std::memset(xt + j * ldxt + k, 0, sizeof(float) * static_cast<size_t>(ldxt - k));
  const int64_t sk = a.x_row_stride(), sj = a.x_col_stride();
  for (int64_t kk = 0; kk < k; ++kk)
    for (int j = 0; j < N; ++j) xt[j * ldxt + kk] = a.x[kk * sk + j * sj];
  return xt;
}

}  // namespace sparse24::kernels
