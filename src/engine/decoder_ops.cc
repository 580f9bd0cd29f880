// The decoder's own ops (decoder.h): RMSNorm, RoPE, SwiGLU and grouped-query causal attention over a KV
// cache. Plain loops over contiguous memory that the compiler vectorises (the KV cache keeps each head's
// keys and values token-major, so every dot product and every weighted sum of V runs over head_dim
// contiguous floats); a prefill's attention runs as oneDNN GEMMs over blocks of queries. The tests'
// reference is a double-precision attention over the whole sequence (test/engine/decoder_test.cc).
#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <cmath>

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

std::vector<float> rope_inv_freq(const RopeConfig& r, int64_t head_dim) {
  std::vector<float> inv(static_cast<size_t>(head_dim / 2));
  for (int64_t i = 0; i < head_dim / 2; ++i)  // fp32 as transformers computes it
    inv[i] = 1.0f /
             std::pow(static_cast<float>(r.theta), static_cast<float>(2 * i) / static_cast<float>(head_dim));
  if (r.type == "default") return inv;
  if (r.type != "llama3") throw Error("rope type '" + r.type + "' is not supported (default, llama3)");
  // Llama 3.1: wavelengths shorter than original / high_freq_factor are kept, longer than original /
  // low_freq_factor divided by factor, and those between interpolated.
  const double orig = static_cast<double>(r.original_max_positions);
  const double low_wavelen = orig / r.low_freq_factor, high_wavelen = orig / r.high_freq_factor;
  for (float& f : inv) {
    const double wavelen = 2.0 * M_PI / f;
    if (wavelen < high_wavelen) continue;
    if (wavelen > low_wavelen) {
      f = static_cast<float>(f / r.factor);
      continue;
    }
    const double smooth = (orig / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
    f = static_cast<float>((1.0 - smooth) * f / r.factor + smooth * f);
  }
  return inv;
}

std::vector<float> rope_table(const std::vector<float>& inv_freq, int64_t positions) {
  const size_t half = inv_freq.size();
  std::vector<float> t(static_cast<size_t>(positions) * half * 2);
  for (int64_t p = 0; p < positions; ++p)
    for (size_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(p) * inv_freq[i];  // fp32 product, as transformers
      t[(p * half + i) * 2] = static_cast<float>(std::cos(static_cast<double>(angle)));
      t[(p * half + i) * 2 + 1] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  return t;
}

void rope(float* x, int64_t heads, int64_t head_dim, int64_t n, int64_t pos0, const float* cos_sin) {
  const int64_t half = head_dim / 2;
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

void swiglu(const float* gu, int64_t ffn, int64_t n, float* y) {
  for (int64_t i = 0; i < ffn * n; ++i) {
    const float g = gu[i];
    y[i] = g / (1.0f + std::exp(-g)) * gu[ffn * n + i];
  }
}

namespace {

// Query tokens per block of the prefill path: each block's scores (kQueryBlock x keys) are one GEMM.
constexpr int64_t kQueryBlock = 32;
// From this many new tokens on, attention runs as blocks of GEMMs; below it, one query at a time.
constexpr int64_t kGemmFrom = 8;

// p[t] = scale * q . k_t for the len keys of kc ([len, d], token-major): 16 partial sums per dot product
// (vectorised without -ffast-math), one clone per ISA.
__attribute__((target_clones("avx512f", "avx2", "default"))) void scores(const float* q, const float* kc,
                                                                         int64_t len, int64_t d, float scale,
                                                                         float* p) {
  for (int64_t t = 0; t < len; ++t) {
    const float* k = kc + t * d;
    float part[16] = {};
    int64_t c = 0;
    for (; c + 16 <= d; c += 16)
      for (int l = 0; l < 16; ++l) part[l] += q[c + l] * k[c + l];
    float s = 0.0f;
    for (; c < d; ++c) s += q[c] * k[c];
    for (int l = 0; l < 16; ++l) s += part[l];
    p[t] = s * scale;
  }
}

// acc[0, d) = sum_t p[t] v_t over the len rows of vc ([len, d]).
__attribute__((target_clones("avx512f", "avx2", "default"))) void weighted_sum(const float* p,
                                                                               const float* vc, int64_t len,
                                                                               int64_t d, float* acc) {
  std::fill(acc, acc + d, 0.0f);
  int64_t t = 0;
  for (; t + 2 <= len; t += 2) {
    const float w0 = p[t], w1 = p[t + 1];
    const float *v0 = vc + t * d, *v1 = v0 + d;
    for (int64_t c = 0; c < d; ++c) acc[c] += w0 * v0[c] + w1 * v1[c];
  }
  for (; t < len; ++t)
    for (int64_t c = 0; c < d; ++c) acc[c] += p[t] * vc[t * d + c];
}

}  // namespace

int64_t attention_scratch(int threads, int64_t capacity) {
  return static_cast<int64_t>(threads) * kQueryBlock * capacity;
}

void attention_cached(const float* qkv, int64_t heads, int64_t kv_heads, int64_t d, int64_t n, int64_t pos0,
                      int64_t capacity, float* k_cache, float* v_cache, float* out, float* scratch,
                      int threads) {
  if (kv_heads <= 0 || heads % kv_heads != 0 || pos0 < 0 || n < 1 || pos0 + n > capacity || d < 1 || d > 512)
    throw Error("attention: bad heads or cache position");
  const float* k_new = qkv + heads * d * n;
  const float* v_new = k_new + kv_heads * d * n;
  for (int64_t g = 0; g < kv_heads; ++g)  // the new keys and values into the cache, token-major
    for (int64_t c = 0; c < d; ++c)
      for (int64_t j = 0; j < n; ++j) {
        k_cache[(g * capacity + pos0 + j) * d + c] = k_new[(g * d + c) * n + j];
        v_cache[(g * capacity + pos0 + j) * d + c] = v_new[(g * d + c) * n + j];
      }
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const int64_t group = heads / kv_heads;
  const int64_t per_scratch = kQueryBlock * capacity;
  if (n < kGemmFrom) {  // one query per task: dot products with the cached keys, softmax, sum of values
    const int64_t tasks = heads * n;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (threads > 1 && tasks > 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t h = task / n, j = task % n, len = pos0 + j + 1;
      float* p = scratch + static_cast<int64_t>(omp_get_thread_num()) * per_scratch;
      float q[512], acc[512];
      for (int64_t c = 0; c < d; ++c) q[c] = qkv[(h * d + c) * n + j];
      const float* kc = k_cache + (h / group) * capacity * d;
      const float* vc = v_cache + (h / group) * capacity * d;
      scores(q, kc, len, d, scale, p);
      softmax_rows(p, 1, len);
      weighted_sum(p, vc, len, d, acc);
      for (int64_t c = 0; c < d; ++c) out[(h * d + c) * n + j] = acc[c];
    }
    return;
  }
  // Blocks of kQueryBlock queries per task: S = scale Q K^T over the keys up to the block's last position
  // (one GEMM), each row's softmax over the keys up to its own position (zero beyond), then O = S V.
  const int64_t blocks = (n + kQueryBlock - 1) / kQueryBlock, tasks = heads * blocks;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (threads > 1 && tasks > 1)
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t h = task / blocks, j0 = task % blocks * kQueryBlock;
    const int64_t rows = std::min(kQueryBlock, n - j0), keys = pos0 + j0 + rows;
    float* s = scratch + static_cast<int64_t>(omp_get_thread_num()) * per_scratch;
    const float* kc = k_cache + (h / group) * capacity * d;
    const float* vc = v_cache + (h / group) * capacity * d;
    dnnl_sgemm('T', 'T', rows, keys, d, scale, qkv + h * d * n + j0, n, kc, d, 0.0f, s, keys);
    for (int64_t i = 0; i < rows; ++i) {
      float* row = s + i * keys;
      const int64_t len = pos0 + j0 + i + 1;
      softmax_rows(row, 1, len);
      std::fill(row + len, row + keys, 0.0f);
    }
    dnnl_sgemm('T', 'T', d, rows, keys, 1.0f, vc, d, s, keys, 0.0f, out + h * d * n + j0, n);
  }
}

}  // namespace sparse24::engine::detail
