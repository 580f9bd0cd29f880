// The engine's non-GEMM ops on feature-major tensors ([rows, cols] row-major, one column per token, pixel
// or sample). The same code runs in the dense and the sparse path, so the end-to-end comparison changes
// nothing but the GEMMs. Plain loops the compiler vectorises along the columns.
#pragma once
#include <cstdint>

#include "sparse24/engine.h"

namespace sparse24::engine::detail {

// x [c, batch*h*w] -> col [(ky*kernel + kx)*c + ci, batch*oh*ow], zero outside the padded image.
void im2col(const float* x, int64_t c, int64_t batch, int64_t h, int64_t w, int64_t kernel, int64_t stride,
            int64_t pad, int64_t oh, int64_t ow, float* col);
// Max over kernel x kernel windows with stride = kernel; oh = h / kernel, ow = w / kernel.
void maxpool(const float* x, int64_t c, int64_t batch, int64_t h, int64_t w, int64_t kernel, float* y);
// [c, batch*p] -> [c*p, batch].
void flatten(const float* x, int64_t c, int64_t batch, int64_t p, float* y);
void relu(const float* x, int64_t n, float* y);
// y[r, j] = x[r, j] * scale[r] + shift[r].
void affine(const float* x, int64_t rows, int64_t cols, const float* scale, const float* shift, float* y);
// Per column j: v = x[:, j] (+ residual[:, j]); y = (v - mean) / sqrt(var + eps) * gamma + beta.
void layer_norm(const float* x, const float* residual, int64_t rows, int64_t cols, const float* gamma,
                const float* beta, float eps, float* y);
// Softmax of each row of p [rows, cols], in place. row_max / row_sum (rows floats each, or null) receive each
// row's maximum and its sum of exp(p - max) before the division.
void softmax_rows(float* p, int64_t rows, int64_t cols, float* row_max = nullptr, float* row_sum = nullptr);
// Multi-head self-attention over sequences packed one after another: sequence s owns columns
// [offsets[s], offsets[s+1]) of qkv [3*hidden, ld] (rows: Q, then K, then V; head h owns rows h*d .. h*d+d-1
// of each) and of ctx [hidden, ld]: ctx_h = V_h softmax(Q_h^T K_h / sqrt(d) + bias_h)^T per sequence, with
// MPNet's relative position bias when bias is non-null. scratch: threads * longest^2 floats.
void attention(const float* qkv, int64_t hidden, int64_t heads, const int64_t* offsets, int64_t sequences,
               int64_t ld, const RelativeBias* bias, float* ctx, float* scratch, int threads);
// The bucket of relative position `rel` (key position - query position), as transformers' MPNet computes it.
int64_t relative_bucket(int64_t rel, int64_t buckets, int64_t max_distance);
// Token embeddings: y[:, t] = word[ids[t]] + positions[i + position_offset] for the i-th token of its
// sequence; y is [hidden, tokens]; the word rows from `word`, or when it is null from `stored`.
void embed(const int32_t* ids, const int64_t* offsets, int64_t sequences, const float* word,
           const StoredRows& stored, const float* positions, int64_t position_offset, int64_t hidden,
           float* y);
// Per sequence, the mean of its columns of x [rows, ld] (or its first column), into column s of y [rows,
// sequences].
void pool(const float* x, int64_t rows, int64_t ld, const int64_t* offsets, int64_t sequences, PoolMode mode,
          float* y);
// Each column of x [rows, cols] divided by max(its L2 norm, 1e-12).
void l2norm(const float* x, int64_t rows, int64_t cols, float* y);
// The fixed-length form: batch sequences of seq tokens each.
// qkv [3*hidden, batch*seq] (rows: Q, then K, then V; head h owns rows h*d .. h*d+d-1 of each), ctx
// [hidden, batch*seq]: ctx_h = V_h softmax(Q_h^T K_h / sqrt(d))^T per sample. scratch: threads*seq*seq.
void attention(const float* qkv, int64_t hidden, int64_t heads, int64_t batch, int64_t seq, float* ctx,
               float* scratch, int threads);

}  // namespace sparse24::engine::detail
