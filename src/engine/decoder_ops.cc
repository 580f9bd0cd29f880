// The decoder's own ops (decoder.h): RMSNorm, RoPE, SwiGLU and grouped-query causal attention over a KV
// cache. Plain loops over contiguous memory that the compiler vectorises (the KV cache keeps each head's
// keys and values token-major, so every dot product and every weighted sum of V runs over head_dim
// contiguous floats); a prefill's attention runs as oneDNN GEMMs over blocks of queries. The tests'
// reference is a double-precision attention over the whole sequence (test/engine/decoder_test.cc).
#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "kernels/attend.h"
#include "kernels/convert.h"
#include "ops.h"
#include "sparse24/decoder.h"
#include "sparse24/error.h"

namespace sparse24::engine::detail {

void rms_norm(const float* x, int64_t rows, int64_t n, const float* w, float eps, float* y) {
  std::vector<float> ss(static_cast<size_t>(n), 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) ss[j] += x[r * n + j] * x[r * n + j];
  for (int64_t j = 0; j < n; ++j) ss[j] = 1.0f / std::sqrt(ss[j] / static_cast<float>(rows) + eps);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) y[r * n + j] = w[r] * (x[r * n + j] * ss[j]);
}

std::vector<float> rope_table(const std::vector<float>& inv_freq, int64_t positions, float scale) {
  const size_t half = inv_freq.size();
  std::vector<float> t(static_cast<size_t>(positions) * half * 2);
  for (int64_t p = 0; p < positions; ++p)
    for (size_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(p) * inv_freq[i];  // fp32 product, as transformers
      t[(p * half + i) * 2] = static_cast<float>(std::cos(static_cast<double>(angle))) * scale;
      t[(p * half + i) * 2 + 1] = static_cast<float>(std::sin(static_cast<double>(angle))) * scale;
    }
  return t;
}

void rope(float* x, int64_t heads, int64_t head_dim, int64_t n, int64_t pos0, const float* cos_sin,
          int64_t rotary_dim) {
  const int64_t half = (rotary_dim > 0 ? rotary_dim : head_dim) / 2;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < half; ++i) {
      float* a = x + (h * head_dim + i) * n;
      float* b = x + (h * head_dim + i + half) * n;
      for (int64_t j = 0; j < n; ++j) {
        const float c = cos_sin[((pos0 + j) * half + i) * 2], s = cos_sin[((pos0 + j) * half + i) * 2 + 1];
        const float u = a[j], v = b[j];
        a[j] = u * c - v * s;
        b[j] = v * c + u * s;
      }
    }
}

void swiglu(const float* gu, int64_t ffn, int64_t n, float* y, bool gelu) {
  if (gelu) {                             // PyTorch's gelu(approximate="tanh")
    const float k = 0.7978845608028654f;  // sqrt(2 / pi)
    for (int64_t i = 0; i < ffn * n; ++i) {
      const float g = gu[i];
      y[i] = 0.5f * g * (1.0f + std::tanh(k * (g + 0.044715f * g * g * g))) * gu[ffn * n + i];
    }
    return;
  }
  for (int64_t i = 0; i < ffn * n; ++i) {
    const float g = gu[i];
    y[i] = g / (1.0f + std::exp(-g)) * gu[ffn * n + i];
  }
}

namespace {

// Query tokens per block of the prefill path: each block's scores (kQueryBlock x keys) are one GEMM.
constexpr int64_t kQueryBlock = 32;
// From this many new tokens on, attention runs as blocks of GEMMs; below it, one position at a time.
constexpr int64_t kGemmFrom = 8;
// The fewest keys a span of one position's keys has when they are split between threads.
constexpr int64_t kMinSpan = 128, kMaxSpans = 64;

// Per thread: a position's queries, outputs and scores (one-position path), or a block's scores and, for a
// half cache, its rows widened to fp32 (GEMM path).
int64_t per_thread(int64_t group, int64_t d, int64_t capacity, bool half) {
  return std::max(group * (2 * d + capacity), kQueryBlock * capacity + (half ? 2 * capacity * d : 0));
}

// Cache rows from .. from + rows - 1 of kv head g as fp32: the rows themselves, or widened into buf.
const float* rows_f32(const KvCache& kv, bool keys, int64_t g, int64_t from, int64_t rows, float* buf) {
  const int64_t off = (g * kv.rows() + kv.row(from)) * kv.d;
  if (!kv.half) return (keys ? kv.k.data() : kv.v.data()) + off;
  kernels::half_to_floats((keys ? kv.kh.data() : kv.vh.data()) + off, rows * kv.d, buf);
  return buf;
}

}  // namespace

KvCache::KvCache(int64_t kv_heads_, int64_t capacity_, int64_t d_, bool half_, int64_t ring_)
    : kv_heads(kv_heads_), capacity(capacity_), d(d_), ring(ring_), half(half_) {
  if (ring < 0 || ring > capacity) throw Error("kv cache: a ring of " + std::to_string(ring) + " positions");
  const size_t size = static_cast<size_t>(kv_heads * rows() * d);
  if (half) {
    kh.assign(size, 0);
    vh.assign(size, 0);
  } else {
    k.assign(size, 0.0f);
    v.assign(size, 0.0f);
  }
}

int64_t attention_scratch(int threads, int64_t heads, int64_t kv_heads, int64_t d, int64_t capacity,
                          bool half) {
  return static_cast<int64_t>(threads) *
         per_thread(heads / std::max<int64_t>(kv_heads, 1), d, capacity, half);
}

void attention_cached(const float* qkv, int64_t heads, int64_t n, int64_t pos0, KvCache& kv, float* out,
                      float* scratch, int threads, const AttentionOptions& options) {
  const int64_t kv_heads = kv.kv_heads, d = kv.d, capacity = kv.capacity, window = options.window;
  if (kv_heads <= 0 || heads % kv_heads != 0 || pos0 < 0 || n < 1 || pos0 + n > capacity || d < 1 ||
      d > 512 || window < 0 || !(options.softcap >= 0.0f))
    throw Error("attention: bad heads, cache position or options");
  if (kv.ring > 0 && (window == 0 || n + window - 1 > kv.ring))
    throw Error("attention: " + std::to_string(n) + " new tokens and a window of " + std::to_string(window) +
                " do not fit a ring cache of " + std::to_string(kv.ring) + " positions");
  const int64_t cache_rows = kv.rows();
  const float scale = options.scale != 0.0f ? options.scale : 1.0f / std::sqrt(static_cast<float>(d));
  const float cap = options.softcap;
  auto soft_cap = [cap](float* x, int64_t count) {  // as transformers: (x / cap).tanh() * cap
    if (cap > 0.0f)
      for (int64_t i = 0; i < count; ++i) x[i] = std::tanh(x[i] / cap) * cap;
  };
  // The first key position p attends to.
  auto first_key = [window](int64_t p) { return window > 0 ? std::max<int64_t>(0, p + 1 - window) : 0; };
  const float* k_new = qkv + heads * d * n;
  const float* v_new = k_new + kv_heads * d * n;
  for (int64_t g = 0; g < kv_heads; ++g)  // the new keys and values into the cache, token-major
    for (int64_t j = 0; j < n; ++j) {
      float kr[512], vr[512];
      for (int64_t c = 0; c < d; ++c) {
        kr[c] = k_new[(g * d + c) * n + j];
        vr[c] = v_new[(g * d + c) * n + j];
      }
      const int64_t row0 = (g * cache_rows + kv.row(pos0 + j)) * d;
      for (int64_t at : {row0, row0 + kv.ring * d}) {  // a ring holds each position twice
        if (kv.half) {
          kernels::floats_to_half(kr, d, kv.kh.data() + at);
          kernels::floats_to_half(vr, d, kv.vh.data() + at);
        } else {
          std::copy(kr, kr + d, kv.k.data() + at);
          std::copy(vr, vr + d, kv.v.data() + at);
        }
        if (kv.ring == 0) break;
      }
    }
  const int64_t group = heads / kv_heads, stride = per_thread(group, d, capacity, kv.half);
  if (n < kGemmFrom) {
    // One task per (kv head, position, span of keys): the kv head's query heads read each cached key and
    // value row once. With fewer (kv head, position) pairs than two per thread, each position's keys are
    // split into spans of at least kMinSpan keys whose softmax-weighted sums are merged after by their
    // maxima and sums (as flash-decoding does): a model with one or three kv heads still uses every thread.
    const int64_t pairs = kv_heads * n;
    int64_t spans = 1;
    if (threads > 1 && pairs < 2 * threads)
      spans =
          std::min({(2 * threads + pairs - 1) / pairs, (pos0 + 1 - first_key(pos0)) / kMinSpan, kMaxSpans});
    spans = std::max<int64_t>(spans, 1);
    const int64_t tasks = pairs * spans, part_floats = group * (d + 2);
    std::vector<float> parts(spans > 1 ? static_cast<size_t>(tasks * part_floats) : 0);
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (threads > 1 && tasks > 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t pair = task / spans, span = task % spans, g = pair / n, j = pair % n;
      const int64_t first = first_key(pos0 + j), len = pos0 + j + 1 - first;
      const int64_t t0 = first + len * span / spans, keys = first + len * (span + 1) / spans - t0;
      float* q = scratch + static_cast<int64_t>(omp_get_thread_num()) * stride;
      float* o = q + group * d;
      float* p = o + group * d;
      for (int64_t r = 0; r < group * d; ++r) q[r] = qkv[(g * group * d + r) * n + j];
      const int64_t at = (g * cache_rows + kv.row(first) + (t0 - first)) * d;
      // One span: the outputs themselves; several: [group, d] normalised sums, then the maxima and sums.
      float* dst = spans > 1 ? parts.data() + task * part_floats : o;
      auto attend = [&](const auto* k, const auto* v) {  // the cache's rows, fp32 or half
        kernels::attend_scores(q, group, k + at, keys, d, scale, p, keys);
        soft_cap(p, group * keys);
        if (spans > 1)
          softmax_rows(p, group, keys, dst + group * d, dst + group * d + group);
        else
          softmax_rows(p, group, keys);
        kernels::attend_values(p, group, keys, v + at, keys, d, dst);
      };
      if (kv.half)
        attend(kv.kh.data(), kv.vh.data());
      else
        attend(kv.k.data(), kv.v.data());
      if (spans == 1)
        for (int64_t r = 0; r < group * d; ++r) out[(g * group * d + r) * n + j] = o[r];
    }
    for (int64_t pair = 0; spans > 1 && pair < pairs; ++pair) {
      const int64_t g = pair / n, j = pair % n;
      const float* first = parts.data() + pair * spans * part_floats;
      for (int64_t i = 0; i < group; ++i) {
        float top = -INFINITY, total = 0.0f, w[kMaxSpans];
        for (int64_t s = 0; s < spans; ++s) top = std::max(top, first[s * part_floats + group * d + i]);
        for (int64_t s = 0; s < spans; ++s) {
          const float* part = first + s * part_floats;
          w[s] = std::exp(part[group * d + i] - top) * part[group * d + group + i];
          total += w[s];
        }
        for (int64_t c = 0; c < d; ++c) {
          float v = 0.0f;
          for (int64_t s = 0; s < spans; ++s) v += w[s] * first[s * part_floats + i * d + c];
          out[(g * group * d + i * d + c) * n + j] = v / total;
        }
      }
    }
    return;
  }
  // Blocks of kQueryBlock queries per task: S = scale Q K^T over the keys from the block's first row's first
  // key up to its last position (one GEMM), each row's softmax over its own keys (zero elsewhere), then
  // O = S V.
  const int64_t blocks = (n + kQueryBlock - 1) / kQueryBlock, tasks = heads * blocks;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (threads > 1 && tasks > 1)
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t h = task / blocks, j0 = task % blocks * kQueryBlock;
    const int64_t rows = std::min(kQueryBlock, n - j0), kf = first_key(pos0 + j0),
                  keys = pos0 + j0 + rows - kf;
    float* s = scratch + static_cast<int64_t>(omp_get_thread_num()) * stride;
    float* wide = s + kQueryBlock * capacity;  // the half cache's rows widened: keys, then values
    const float* kc = rows_f32(kv, true, h / group, kf, keys, wide);
    const float* vc = rows_f32(kv, false, h / group, kf, keys, wide + capacity * d);
    dnnl_sgemm('T', 'T', rows, keys, d, scale, qkv + h * d * n + j0, n, kc, d, 0.0f, s, keys);
    for (int64_t i = 0; i < rows; ++i) {
      float* row = s + i * keys;
      const int64_t lo = first_key(pos0 + j0 + i) - kf, hi = pos0 + j0 + i + 1 - kf;
      std::fill(row, row + lo, 0.0f);
      soft_cap(row + lo, hi - lo);
      softmax_rows(row + lo, 1, hi - lo);
      std::fill(row + hi, row + keys, 0.0f);
    }
    dnnl_sgemm('T', 'T', d, rows, keys, 1.0f, vc, d, s, keys, 0.0f, out + h * d * n + j0, n);
  }
}

}  // namespace sparse24::engine::detail
