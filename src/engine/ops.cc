#include "ops.h"

#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace sparse24::engine::detail {
namespace {

// exp(x) for x <= 0 (softmax after subtracting the row max): 2^(x log2 e) = 2^i * 2^f with i the nearest
// integer, so f is in [-1/2, 1/2], where the degree-6 Taylor polynomial of 2^f is within 1.7e-7 relative
// (on [0, 1), as this was until session 13, it is 8.3e-6 off near f = 1); x is clamped at -87 (the
// smallest normal scale). Written so the compiler vectorises the loop around it.
inline float exp_nonpositive(float x) {
  x = x < -87.0f ? -87.0f : x;
  const float t = x * 1.4426950408889634f;
  // round(t) without std::nearbyint (not vectorisable at the baseline x86-64 ISA): t - 1/2 < 0, so the
  // truncating conversion rounds it up, to the integer nearest t.
  const int32_t i = static_cast<int32_t>(t - 0.5f);
  const float f = t - static_cast<float>(i);  // [-1/2, 1/2]
  float p = 1.5403530e-4f;
  p = p * f + 1.3333558e-3f;
  p = p * f + 9.6181291e-3f;
  p = p * f + 5.5504109e-2f;
  p = p * f + 2.4022651e-1f;
  p = p * f + 6.9314718e-1f;
  p = p * f + 1.0f;
  const int32_t e = i + 127;
  int32_t bits = e << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

}  // namespace

void im2col(const float* x, int64_t c, int64_t batch, int64_t h, int64_t w, int64_t kernel, int64_t stride,
            int64_t pad, int64_t oh, int64_t ow, float* col) {
  const int64_t ncols = batch * oh * ow;
  for (int64_t ky = 0; ky < kernel; ++ky)
    for (int64_t kx = 0; kx < kernel; ++kx)
      for (int64_t ci = 0; ci < c; ++ci) {
        float* dst = col + ((ky * kernel + kx) * c + ci) * ncols;
        for (int64_t b = 0; b < batch; ++b) {
          const float* src = x + ci * batch * h * w + b * h * w;
          for (int64_t oy = 0; oy < oh; ++oy) {
            float* d = dst + (b * oh + oy) * ow;
            const int64_t iy = oy * stride + ky - pad;
            if (iy < 0 || iy >= h) {
              std::fill(d, d + ow, 0.0f);
              continue;
            }
            const float* s = src + iy * w;
            if (stride == 1) {  // the valid ox form one run: a copy between zero edges
              const int64_t lo = std::clamp<int64_t>(pad - kx, 0, ow),
                            hi = std::clamp<int64_t>(w + pad - kx, lo, ow);
              std::fill(d, d + lo, 0.0f);
              std::copy(s + lo + kx - pad, s + hi + kx - pad, d + lo);
              std::fill(d + hi, d + ow, 0.0f);
              continue;
            }
            for (int64_t ox = 0; ox < ow; ++ox) {
              const int64_t ix = ox * stride + kx - pad;
              d[ox] = (ix >= 0 && ix < w) ? s[ix] : 0.0f;
            }
          }
        }
      }
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void maxpool(const float* x, int64_t c,
                                                                          int64_t batch, int64_t h, int64_t w,
                                                                          int64_t kernel, float* y) {
  const int64_t oh = h / kernel, ow = w / kernel;
  for (int64_t p = 0; p < c * batch; ++p)
    for (int64_t oy = 0; oy < oh; ++oy) {
      float* dst = y + (p * oh + oy) * ow;
      std::fill(dst, dst + ow, -std::numeric_limits<float>::infinity());
      // Window offsets outermost, so the inner loop runs along the output row (vectorised).
      for (int64_t ky = 0; ky < kernel; ++ky)
        for (int64_t kx = 0; kx < kernel; ++kx) {
          const float* src = x + (p * h + oy * kernel + ky) * w + kx;
          for (int64_t ox = 0; ox < ow; ++ox) {
            const float v = src[ox * kernel];
            dst[ox] = (v > dst[ox] || v != v) ? v : dst[ox];  // NaN propagates, as in PyTorch
          }
        }
    }
}

void flatten(const float* x, int64_t c, int64_t batch, int64_t p, float* y) {
  for (int64_t ci = 0; ci < c; ++ci)
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < p; ++i) y[(ci * p + i) * batch + b] = x[(ci * batch + b) * p + i];
}

void relu(const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void affine(const float* x, int64_t rows, int64_t cols, const float* scale, const float* shift, float* y) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) y[r * cols + j] = x[r * cols + j] * scale[r] + shift[r];
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void layer_norm(
    const float* x, const float* residual, int64_t rows, int64_t cols, const float* gamma, const float* beta,
    float eps, float* y) {
  // Column statistics accumulated row by row (contiguous, vectorised along the columns), in double-free
  // two passes: the sum first, then the centred squares.
  std::vector<float> mean(cols, 0.0f), var(cols, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    if (residual != nullptr) {
      const float* rr = residual + r * cols;
      for (int64_t j = 0; j < cols; ++j) yr[j] = xr[j] + rr[j];
    } else if (yr != xr) {
      std::memcpy(yr, xr, cols * sizeof(float));
    }
    for (int64_t j = 0; j < cols; ++j) mean[j] += yr[j];
  }
  const float inv_rows = 1.0f / static_cast<float>(rows);
  for (int64_t j = 0; j < cols; ++j) mean[j] *= inv_rows;
  for (int64_t r = 0; r < rows; ++r) {
    const float* yr = y + r * cols;
    for (int64_t j = 0; j < cols; ++j) {
      const float d = yr[j] - mean[j];
      var[j] += d * d;
    }
  }
  for (int64_t j = 0; j < cols; ++j) var[j] = 1.0f / std::sqrt(var[j] * inv_rows + eps);
  for (int64_t r = 0; r < rows; ++r) {
    float* yr = y + r * cols;
    const float g = gamma[r], b = beta[r];
    for (int64_t j = 0; j < cols; ++j) yr[j] = (yr[j] - mean[j]) * var[j] * g + b;
  }
}

// One clone per ISA (GCC function multi-versioning, chosen at load time by the CPU): the portable build
// only has SSE2, and softmax's exp is a visible share of attention.
__attribute__((target_clones("avx512f", "avx2", "default"))) void softmax_rows(float* p, int64_t rows,
                                                                               int64_t cols, float* row_max,
                                                                               float* row_sum) {
  for (int64_t i = 0; i < rows; ++i) {
    float* row = p + i * cols;
    float mx = -std::numeric_limits<float>::infinity();
    float mx8[8] = {mx, mx, mx, mx, mx, mx, mx, mx};  // 8 partial maxima: vectorises without fast-math
    int64_t j0 = 0;
    for (; j0 + 8 <= cols; j0 += 8)
      for (int l = 0; l < 8; ++l) mx8[l] = row[j0 + l] > mx8[l] ? row[j0 + l] : mx8[l];
    for (int l = 0; l < 8; ++l) mx = mx8[l] > mx ? mx8[l] : mx;
    for (int64_t j = j0; j < cols; ++j) mx = row[j] > mx ? row[j] : mx;
    float sum = 0.0f;
    for (int64_t j = 0; j < cols; ++j) {
      row[j] = exp_nonpositive(row[j] - mx);
      sum += row[j];
    }
    if (row_max != nullptr) row_max[i] = mx;
    if (row_sum != nullptr) row_sum[i] = sum;
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < cols; ++j) row[j] *= inv;
  }
}

int64_t relative_bucket(int64_t rel, int64_t buckets, int64_t max_distance) {
  // transformers' MPNet: n = -rel; half the buckets for each sign; exact below half of that half, then
  // logarithmic up to max_distance, in float32 as PyTorch computes it.
  int64_t n = -rel;
  const int64_t half = buckets / 2;
  int64_t ret = n < 0 ? half : 0;
  n = n < 0 ? -n : n;
  const int64_t max_exact = half / 2;
  if (n < max_exact) return ret + n;
  const float ratio = static_cast<float>(n) / static_cast<float>(max_exact);
  const float scale =
      static_cast<float>(std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)));
  const float v = std::log(ratio) / scale * static_cast<float>(half - max_exact);
  const int64_t large = max_exact + static_cast<int64_t>(v);
  return ret + std::min(large, half - 1);
}

void attention(const float* qkv, int64_t hidden, int64_t heads, const int64_t* offsets, int64_t sequences,
               int64_t ld, const RelativeBias* bias, float* ctx, float* scratch, int threads) {
  const int64_t d = hidden / heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  int64_t longest = 0;
  for (int64_t s = 0; s < sequences; ++s) longest = std::max(longest, offsets[s + 1] - offsets[s]);
  // The bias of each relative position (key - query) in [-(longest-1), longest-1], per head.
  std::vector<float> rel;
  if (bias != nullptr && bias->buckets > 0) {
    rel.resize(static_cast<size_t>(heads * (2 * longest - 1)));
    for (int64_t r = -(longest - 1); r <= longest - 1; ++r) {
      const int64_t bucket = relative_bucket(r, bias->buckets, bias->max_distance);
      for (int64_t h = 0; h < heads; ++h)
        rel[h * (2 * longest - 1) + r + longest - 1] = bias->table[bucket * heads + h];
    }
  }
  const int64_t tasks = sequences * heads;
  // One (sequence, head) per task; dnnl_sgemm inside a parallel region runs on the calling thread.
#pragma omp parallel for num_threads(threads) schedule(dynamic)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t s = t / heads, h = t % heads;
    const int64_t c0 = offsets[s], n = offsets[s + 1] - c0;
    float* p = scratch + static_cast<int64_t>(omp_get_thread_num()) * longest * longest;
    const float* q = qkv + (h * d) * ld + c0;
    const float* k = qkv + (hidden + h * d) * ld + c0;
    const float* v = qkv + (2 * hidden + h * d) * ld + c0;
    // P[i, j] = scale * sum_c Q[c, i] K[c, j] (+ bias[j - i])
    dnnl_sgemm('T', 'N', n, n, d, scale, q, ld, k, ld, 0.0f, p, n);
    if (!rel.empty()) {
      const float* rb = rel.data() + h * (2 * longest - 1) + longest - 1;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) p[i * n + j] += rb[j - i];
    }
    softmax_rows(p, n, n);
    // ctx[c, i] = sum_j V[c, j] P[i, j]
    dnnl_sgemm('N', 'T', d, n, n, 1.0f, v, ld, p, n, 0.0f, ctx + (h * d) * ld + c0, ld);
  }
}

void attention(const float* qkv, int64_t hidden, int64_t heads, int64_t batch, int64_t seq, float* ctx,
               float* scratch, int threads) {
  std::vector<int64_t> offsets(batch + 1);
  for (int64_t b = 0; b <= batch; ++b) offsets[b] = b * seq;
  attention(qkv, hidden, heads, offsets.data(), batch, batch * seq, nullptr, ctx, scratch, threads);
}

void embed(const int32_t* ids, const int64_t* offsets, int64_t sequences, const float* word,
           const StoredRows& stored, const float* positions, int64_t position_offset, int64_t hidden,
           float* y) {
  const int64_t ld = offsets[sequences];
  std::vector<float> row(word == nullptr ? static_cast<size_t>(hidden) : 0);
  for (int64_t s = 0; s < sequences; ++s)
    for (int64_t t = offsets[s]; t < offsets[s + 1]; ++t) {
      const float* w = row.data();
      if (word != nullptr)
        w = word + static_cast<int64_t>(ids[t]) * hidden;
      else
        stored.row(ids[t], row.data());
      const float* p = positions + (t - offsets[s] + position_offset) * hidden;
      for (int64_t r = 0; r < hidden; ++r) y[r * ld + t] = w[r] + p[r];
    }
}

void pool(const float* x, int64_t rows, int64_t ld, const int64_t* offsets, int64_t sequences, PoolMode mode,
          float* y) {
  for (int64_t s = 0; s < sequences; ++s) {
    const int64_t c0 = offsets[s], n = offsets[s + 1] - c0;
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * ld + c0;
      if (mode == PoolMode::kCls) {
        y[r * sequences + s] = xr[0];
        continue;
      }
      float sum = 0.0f;
      for (int64_t j = 0; j < n; ++j) sum += xr[j];
      y[r * sequences + s] = sum / static_cast<float>(n);
    }
  }
}

void l2norm(const float* x, int64_t rows, int64_t cols, float* y) {
  std::vector<float> sq(cols, 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) sq[j] += x[r * cols + j] * x[r * cols + j];
  for (int64_t j = 0; j < cols; ++j) sq[j] = 1.0f / std::max(std::sqrt(sq[j]), 1e-12f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) y[r * cols + j] = x[r * cols + j] * sq[j];
}

}  // namespace sparse24::engine::detail
