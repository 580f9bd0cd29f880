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
// Memory-bound path: the activations are transposed once into Xt [N][K] (zero-padded to whole 16-wide
// chunks); per K block, per row block, S rows at a time, each 16-wide chunk of weights is expanded to a
// dense vector and multiply-added with the N activation vectors. Per K block the lane sums are added into
// Y; the last K block adds the bias and applies the epilogue. Threads split the row blocks. From N ~ 7 on
// the pair path (below) reads the same layout with full-width FMAs.
#pragma once
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <concepts>
#include <cstring>

#include "kernel_list.h"
#include "sparse24/error.h"

namespace sparse24::kernels {

// What the loops below ask of an ISA's traits class T: a vector V of W floats, a column mask, loads and
// stores (aligned, unaligned, masked), arithmetic, the weight spreading of the compute-bound tile
// (bcast4 + lane), the pair kernel's interleaves and permute, the weight-stream prefetch and the vector
// epilogue. The spreading memory-bound kernel (gemv_run) also needs T::gemv_rows_per_pass<N> and
// T::chunk_fma<N> / chunk_fma_bf16<N> for the weight types it is instantiated with.
template <class T>
concept KernelTraits = requires(const float* cp, float* p, const uint16_t* hp, typename T::V v,
                                typename T::Mask m, int i) {
  requires std::same_as<decltype(T::W), const int>;
  { T::kPrefetchChunks } -> std::convertible_to<int>;
  { T::zero() } -> std::same_as<typename T::V>;
  { T::set1(1.f) } -> std::same_as<typename T::V>;
  { T::load(cp) } -> std::same_as<typename T::V>;
  { T::loadu(cp) } -> std::same_as<typename T::V>;
  { T::loadu_m(cp, m) } -> std::same_as<typename T::V>;
  { T::load8(cp) } -> std::same_as<typename T::V>;
  { T::load8(hp) } -> std::same_as<typename T::V>;
  T::store(p, v);
  T::storeu(p, v);
  T::storeu_m(p, v, m);
  { T::mask_first(i) } -> std::same_as<typename T::Mask>;
  { T::add(v, v) } -> std::same_as<typename T::V>;
  { T::fma(v, v, v) } -> std::same_as<typename T::V>;
  { T::reduce(v) } -> std::same_as<float>;
  { T::bcast4(cp) } -> std::same_as<typename T::V>;
  { T::lane(v, i) } -> std::same_as<typename T::V>;
  { T::interleave_lo(v, v) } -> std::same_as<typename T::V>;
  { T::interleave_hi(v, v) } -> std::same_as<typename T::V>;
  { T::pair(v, i) } -> std::same_as<typename T::V>;
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

template <class T, int MR, int NV>
void gemm_run(const PackedMatrix::Impl& p, const SpmmArgs& a) {
  constexpr int W = T::W;
  constexpr int NR = NV * W;
  const GemmLayout& L = p.gemm;
  if (L.mr != MR) throw Error("internal: packed row block does not match the kernel");
  const int64_t m = p.m, k = p.k, n = a.n;
  const int64_t kp = (k + 3) / 4 * 4;
  const int64_t panels = (n + NR - 1) / NR;
  const int nt = static_cast<int>(std::min<int64_t>(a.threads, std::max<int64_t>(panels, L.m_blocks)));
  // Two threads split the row blocks (each streams half the weights; splitting N panels made each stream
  // all of them: 2-thread N=128 at 1.0-1.17x of dense instead of 1.4-1.5x), unless the rows are too few
  // for whole chunks per thread and the panels many (a small matrix with a huge N).
  const bool split_n = nt > 1 && L.m_blocks < 2 * nt * L.chunk && panels >= 4 * nt;
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
  const size_t weight_bytes = L.vals.bytes() + L.codes.bytes();
  const bool small_x = static_cast<size_t>(panels * kp * NR) * sizeof(float) <= (size_t{512} << 10);
  const bool chunk_outer = panels > 1 && (weight_bytes > (size_t{16} << 20) || small_x);
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
  // Row blocks [mc, mce) (within one chunk) times K blocks [kb0, kb1) of panel pan, packed at xp; the
  // partial sums of row block mb live at part + (mb - mb0) * MR * NR between K blocks.
  auto multiply = [&](int64_t pan, const float* xp, int64_t mc, int64_t mce, int64_t kb0, int64_t kb1,
                      float* part, int64_t mb0) {
    const int64_t n0 = pan * NR;
    const int nc = static_cast<int>(std::min<int64_t>(NR, n - n0));
    typename T::Mask cm[NV];
    for (int c = 0; c < NV; ++c) cm[c] = T::mask_first(std::clamp(nc - c * W, 0, W));
    for (int64_t kb = kb0; kb < kb1; ++kb) {
      const int kh = L.slots_in(kb);
      const float* xb = xp + kb * L.kc * NR;
      const bool first = kb == 0, last = kb == L.k_blocks - 1;
      for (int64_t mb = mc; mb < mce; ++mb) {
        const size_t off = L.block_offset(mb, kb);
        const int rows = static_cast<int>(std::min<int64_t>(MR, m - mb * MR));
        float* y = a.tokens ? a.y + n0 * a.ldy + mb * MR : a.y + mb * MR * a.ldy + n0;
        float* pt = part + (mb - mb0) * MR * NR;
        if (a.tokens)
          gemm_tile<T, MR, NV, false, true>(L.vals.data() + off, L.codes.data() + off / (2 * MR), kh, xb, pt,
                                            y, a.ldy, rows, cm, first, last, a.bias, mb * MR, a.ep, nc);
        else if (nc == NR)
          gemm_tile<T, MR, NV, true>(L.vals.data() + off, L.codes.data() + off / (2 * MR), kh, xb, pt, y,
                                     a.ldy, rows, cm, first, last, a.bias, mb * MR, a.ep);
        else
          gemm_tile<T, MR, NV, false>(L.vals.data() + off, L.codes.data() + off / (2 * MR), kh, xb, pt, y,
                                      a.ldy, rows, cm, first, last, a.bias, mb * MR, a.ep);
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
    } else {  // whole chunks per thread when there are enough
      const int64_t unit = L.m_blocks >= 2 * nth * L.chunk ? L.chunk : 1;
      const int64_t units = (L.m_blocks + unit - 1) / unit;
      b0 = std::min(L.m_blocks, units * tid / nth * unit);
      b1 = std::min(L.m_blocks, units * (tid + 1) / nth * unit);
    }
    // Partial sums between K blocks go to a contiguous per-thread buffer, not to Y: a tile's rows of Y are
    // ldy apart and fall into a few L1 sets (N = 512: 8 of 64), where they evicted the packed activations
    // (768x768x512: 300 -> 320 GFLOP/s, 4096x4096x512: 272 -> 310; scratch benchmark, quiet machine).
    float* part = scratch<T, 3>(static_cast<size_t>(std::max<int64_t>(1, b1 - b0) * MR * NR));
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
        for (int64_t pan = p0; pan < p1; ++pan)
          multiply(pan, xs + pan * kp * NR, mc, mce, 0, L.k_blocks, part, b0);
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
            multiply(pan, xp, mc, mce, ks, std::min(L.k_blocks, ks + super), part, b0);
            mc = mce;
          }
      }
    }
  }
}

// S rows of one row block over one K block: out[r][n] = sum over the block of W[r, k] Xt[n][k].
template <class T, int S, int N, bool BF16>
void gemv_rows(const GemvLayout& L, size_t e0, int64_t nc, const float* __restrict xt, int64_t ldxt,
               float (&out)[S][N]) {
  using V = typename T::V;
  V acc[S][N];
#pragma GCC unroll 16
  for (int r = 0; r < S; ++r)
#pragma GCC unroll 16
    for (int j = 0; j < N; ++j) acc[r][j] = T::zero();
  const uint16_t* masks = L.masks.data() + e0;
  const int rb = L.rb;
  for (int64_t c = 0; c < nc; ++c) {
#pragma GCC unroll 16
    for (int r = 0; r < S; ++r) {
      const size_t e = static_cast<size_t>(c * rb + r);
      if constexpr (BF16)
        T::template chunk_fma_bf16<N>(L.vals16.data() + (e0 + e) * 8, masks[e], xt + c * 16, ldxt, acc[r]);
      else
        T::template chunk_fma<N>(L.vals.data() + (e0 + e) * 8, masks[e], xt + c * 16, ldxt, acc[r]);
    }
    // The weights stream from memory: prefetch every line this step will need kPrefetchChunks steps on.
    if constexpr (BF16) {
      const uint16_t* pf = L.vals16.data() + (e0 + static_cast<size_t>((c + T::kPrefetchChunks) * rb)) * 8;
#pragma GCC unroll 4
      for (int r = 0; r < S; r += 4) T::prefetch(pf + r * 8);
    } else {
      const float* pf = L.vals.data() + (e0 + static_cast<size_t>((c + T::kPrefetchChunks) * rb)) * 8;
#pragma GCC unroll 4
      for (int r = 0; r < S; r += 2) T::prefetch(pf + r * 8);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < S; ++r)
#pragma GCC unroll 16
    for (int j = 0; j < N; ++j) out[r][j] = T::reduce(acc[r][j]);
}

// X [k, N] transposed into the thread's scratch as N rows of ldxt floats, zero past k: the memory-bound
// kernels read each column of X as one contiguous stream.
template <class T, int N>
float* transposed_x(const SpmmArgs& a, int64_t k, int64_t ldxt) {
  float* xt = scratch<T, 1>(static_cast<size_t>(N * ldxt));
  for (int j = 0; j < N; ++j)
    std::memset(xt + j * ldxt + k, 0, sizeof(float) * static_cast<size_t>(ldxt - k));
  for (int64_t kk = 0; kk < k; ++kk)
    for (int j = 0; j < N; ++j) xt[j * ldxt + kk] = a.x[kk * a.ldx + j];
  return xt;
}

template <class T, int N, bool BF16>
void gemv_run(const PackedMatrix::Impl& p, const SpmmArgs& a) {
  constexpr int S = T::template gemv_rows_per_pass<N>;
  const GemvLayout& L = p.gemv;
  const int64_t m = p.m, k = p.k;
  const int64_t ldxt = L.chunks * 16 + 16;  // + 16: rows of Xt not 4 KiB apart
  float* xt = transposed_x<T, N>(a, k, ldxt);
  const int nt = static_cast<int>(std::min<int64_t>(a.threads, L.m_blocks));
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    const int tid = omp_get_thread_num();
    const int nth = omp_get_num_threads();
    const int64_t b0 = L.m_blocks * tid / nth, b1 = L.m_blocks * (tid + 1) / nth;
    for (int64_t kb = 0; kb < L.k_blocks; ++kb) {
      const int64_t nc = L.chunks_in(kb);
      const float* xb = xt + kb * L.kb;
      const bool first = kb == 0, last = kb == L.k_blocks - 1;
      for (int64_t mb = b0; mb < b1; ++mb) {
        const size_t e = L.entry(kb, mb);
        const int rows = static_cast<int>(std::min<int64_t>(L.rb, m - mb * L.rb));
        for (int r0 = 0; r0 < rows; r0 += S) {
          float out[S][N];
          gemv_rows<T, S, N, BF16>(L, e + static_cast<size_t>(r0), nc, xb, ldxt, out);
          for (int r = 0; r < S && r0 + r < rows; ++r) {
            const int64_t row = mb * L.rb + r0 + r;
            float* y = a.y + row * a.ldy;
            for (int j = 0; j < N; ++j) {
              float s = first ? out[r][j] : y[j] + out[r][j];
              if (last && a.bias) s += a.bias[row];
              y[j] = s;
            }
            if (last && a.ep != Epilogue::kNone) epilogue_row<T>(y, N, a.ep);
          }
        }
      }
    }
  }
}

// Pair path: the memory-bound layout at N from about 7 up (fp32 or bf16 weights). The memory-bound
// kernel spreads a 16-wide chunk of weights and multiply-adds it with each of the N transposed activation
// rows: half the lanes of every FMA are dropped positions, so from small N on it is compute-bound at half
// rate.
// Here the roles turn: a row's two kept weights of a group are adjacent in the layout (slots 2q, 2q+1 in
// position order), so one permute of the row's 8 weights of a chunk gives [wa, wb, wa, wb, ...]; a
// table built once per call holds, per group of 4 activation rows and per 4-bit keep mask m, the entry
// whose lanes 2n, 2n+1 are X[a][n], X[b][n] (a < b the kept positions of m; zero where m has fewer, and in
// lanes >= 2N). One FMA with the entry the row's mask selects does a useful multiply-add in every lane;
// lanes 2n and 2n+1 of the accumulator sum to Y[r][n]. Per FMA: the entry load, a quarter of a weight
// load and one permute (N <= W / 2), or half a permute. In L1 (scratch microbenchmark, N = 8): 3.8 G
// FMA/s, against 3.2 with a 64-bit broadcast load per pair (2 loads per FMA).
//
// Table: K in sub-blocks of G groups, G entries of NV vectors = 4 KB per mask ("plane"), 16 planes per
// sub-block: the entry of (group g, mask m) is m planes + g entries on, so the mask nibble shifted to
// bit 12 is the byte offset (rorx + and). A row reads only the 6 two-bit planes (the K tail also fewer
// bits): 24 KB that stay in L1 while every row block of the thread passes, each plane spread over all L1
// sets (entries of one group 64 B apart put the 6 used lines of 64 groups in 24 sets: 16 per 12-way set,
// and every FMA missed L1). Between sub-blocks, the partial sums go to a buffer of NV vectors per row.
template <class T, int NV>
struct PairGeometry {
  static constexpr int kEntryFloats = NV * T::W;
  static constexpr int kPlaneShift = 12;
  static constexpr int64_t kGroups = (int64_t{1} << kPlaneShift) / (kEntryFloats * sizeof(float));
  static constexpr int64_t kSubFloats = 16 * kGroups * kEntryFloats;  // one sub-block's table
};

// Row blocks of 4 rows, RB of them, over nch chunks of one sub-block. vals/masks: the first row block's
// entry for the sub-block's first chunk; the next row block's is estride entries on. tab: the table at
// the sub-block's first group. acc_io: the row blocks' partial sums (4 * RB rows of NV vectors).
template <class T, int NV, int RB, class Wt>
void pair_tile(const Wt* __restrict vals, const uint16_t* __restrict masks, size_t estride, int64_t nch,
               const float* __restrict tab, float* __restrict acc_io, bool first, size_t prefetch_entries) {
  using V = typename T::V;
  using G = PairGeometry<T, NV>;
  constexpr int W = T::W;
  constexpr int EW = G::kEntryFloats;
  constexpr int S = G::kPlaneShift;
  V acc[4 * RB][NV];
#pragma GCC unroll 8
  for (int r = 0; r < 4 * RB; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = first ? T::zero() : T::load(acc_io + (r * NV + v) * W);
  for (int64_t c = 0; c < nch; ++c) {
    const char* tc = reinterpret_cast<const char*>(tab + c * 4 * EW);
#pragma GCC unroll 2
    for (int h = 0; h < RB; ++h) {
      const size_t e = h * estride + static_cast<size_t>(c * 4);
      uint64_t m4;  // the 4 rows' 16-bit keep masks
      std::memcpy(&m4, masks + e, sizeof m4);
      const Wt* vv = vals + e * 8;
      // The weights stream from memory, one row block's run at a time: prefetch the run 4 tiles on.
#pragma GCC unroll 2
      for (size_t b = 0; b < 4 * 8 * sizeof(Wt); b += 64)
        T::prefetch(reinterpret_cast<const char*>(vv + prefetch_entries * 8) + b);
      if (c % 8 == 0) T::prefetch(masks + e + prefetch_entries);
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) {
        const V w8 = T::load8(vv + r * 8);  // the row's 8 kept weights of the chunk (fp32 or bf16)
#pragma GCC unroll 4
        for (int q = 0; q < 4; ++q) {
          const unsigned field = 16 * r + 4 * q;  // mask nibble of row r, group q
          const size_t off = std::rotr(m4, static_cast<int>((field - S) & 63)) & (uint64_t{15} << S);
          const float* xe = reinterpret_cast<const float*>(tc + off) + q * EW;
          const V w = T::pair(w8, q);
#pragma GCC unroll 4
          for (int v = 0; v < NV; ++v) acc[h * 4 + r][v] = T::fma(w, T::load(xe + v * W), acc[h * 4 + r][v]);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < 4 * RB; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) T::store(acc_io + (r * NV + v) * W, acc[r][v]);
}

template <class T, int NV>
void pair_run(const PackedMatrix::Impl& p, const SpmmArgs& a) {
  using G = PairGeometry<T, NV>;
  constexpr int W = T::W;
  constexpr int EW = G::kEntryFloats;
  const GemvLayout& L = p.gemv;
  const int64_t sub = G::kGroups / 4;  // chunks per sub-block
  if (L.rb != 4 || 2 * a.n > EW || a.n > W || (L.kb / 16) % sub != 0)
    throw Error("internal: the pair kernel does not take this layout");
  const int64_t m = p.m, k = p.k, n = a.n;
  const int64_t subs = (L.chunks + sub - 1) / sub;
  float* tab = scratch<T, 2>(static_cast<size_t>(subs * G::kSubFloats));
  float* accbuf = scratch<T, 3>(static_cast<size_t>(L.m_blocks * 4 * EW));
  const typename T::Mask nmask = T::mask_first(static_cast<int>(n));
  const int nt = static_cast<int>(std::min<int64_t>(a.threads, L.m_blocks));
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    const int tid = omp_get_thread_num();
    const int nth = omp_get_num_threads();
#pragma omp for schedule(static)
    for (int64_t g = 0; g < L.chunks * 4; ++g) {
      typename T::V x[5];  // activation rows 4g..4g+3 (zero past K), and x[4] = 0
      for (int i = 0; i < 4; ++i)
        x[i] = 4 * g + i < k ? T::loadu_m(a.x + (4 * g + i) * a.ldx, nmask) : T::zero();
      x[4] = T::zero();
      float* ent0 = tab + g / G::kGroups * G::kSubFloats + g % G::kGroups * EW;
      // Every group's rows read its 6 two-bit masks; the K tail's group and the padding groups fewer bits.
      const bool tail = 4 * g + 4 > k;
      for (unsigned mk = 0; mk < 16; ++mk) {
        const int bits = std::popcount(mk);
        if (bits > 2 || (bits < 2 && !tail)) continue;
        const int pa = mk ? std::countr_zero(mk) : 4;
        const int pb = bits == 2 ? std::countr_zero(mk & (mk - 1)) : 4;
        float* ent = ent0 + mk * G::kGroups * EW;
        T::store(ent, T::interleave_lo(x[pa], x[pb]));
        if constexpr (NV == 2) T::store(ent + W, T::interleave_hi(x[pa], x[pb]));
      }
    }
    const int64_t b0 = L.m_blocks * tid / nth, b1 = L.m_blocks * (tid + 1) / nth;
    for (int64_t kb = 0; kb < L.k_blocks; ++kb) {
      const int64_t nc = L.chunks_in(kb);
      const size_t estride = static_cast<size_t>(nc * 4);
      for (int64_t c0 = 0; c0 < nc; c0 += sub) {
        const int64_t nch = std::min(sub, nc - c0);
        const float* tb = tab + (kb * (L.kb / 16) + c0) / sub * G::kSubFloats;
        const bool first = kb == 0 && c0 == 0;
        const size_t pf = 8 * estride;  // 4 two-block tiles on
        auto tiles = [&](const auto* vals) {
          int64_t mb = b0;
          for (; mb + 2 <= b1; mb += 2) {
            const size_t e = L.entry(kb, mb) + static_cast<size_t>(c0 * 4);
            pair_tile<T, NV, 2>(vals + e * 8, L.masks.data() + e, estride, nch, tb, accbuf + mb * 4 * EW,
                                first, pf);
          }
          if (mb < b1) {
            const size_t e = L.entry(kb, mb) + static_cast<size_t>(c0 * 4);
            pair_tile<T, NV, 1>(vals + e * 8, L.masks.data() + e, estride, nch, tb, accbuf + mb * 4 * EW,
                                first, pf);
          }
        };
        if (L.bf16)
          tiles(L.vals16.data());
        else
          tiles(L.vals.data());
      }
    }
    // Lanes 2j and 2j + 1 of a row's sums are Y[row][j].
    for (int64_t row = b0 * 4; row < std::min(m, b1 * 4); ++row) {
      const float* s = accbuf + row * EW;
      float* y = a.y + row * a.ldy;
      const float b = a.bias ? a.bias[row] : 0.f;
      for (int64_t j = 0; j < n; ++j) y[j] = s[2 * j] + s[2 * j + 1] + b;
      if (a.ep != Epilogue::kNone) epilogue_row<T>(y, static_cast<int>(n), a.ep);
    }
  }
}

// Runtime N (1..NMax, the variant's n_max in kernel_list.inc) to the template instantiation.
template <class T, bool BF16, int64_t NMax, int N = 1>
void gemv_dispatch(const PackedMatrix::Impl& p, const SpmmArgs& a) {
  if constexpr (N <= NMax) {
    if (a.n == N) return gemv_run<T, N, BF16>(p, a);
    return gemv_dispatch<T, BF16, NMax, N + 1>(p, a);
  } else {
    throw Error("internal: the memory-bound kernel got more columns than its row's n_max");
  }
}

}  // namespace sparse24::kernels
