// Attention of one decoded position over a KV cache, for the decoder at batch 1: the query heads that share
// one KV head (grouped-query attention) read each cached key and value row once, together. The cache rows
// are token-major ([len, d]) and hold fp32 or IEEE half values (uint16_t bits, as llama.cpp's default KV
// cache): at long contexts the cache is a large share of what a token reads (SmolLM2 at 1,024 positions:
// 47 MB fp32 against 130 MB of int8 2:4 weights), so half a cache is close to half its time.
#pragma once
#include <cstdint>

namespace sparse24::kernels {

// Scores: p[g * ldp + t] = scale * (q_g . k_t) for the `queries` query vectors q_g = q + g * d and the len
// key rows k_t = k + t * d.
void attend_scores(const float* q, int64_t queries, const float* k, int64_t len, int64_t d, float scale,
                   float* p, int64_t ldp);
void attend_scores(const float* q, int64_t queries, const uint16_t* k, int64_t len, int64_t d, float scale,
                   float* p, int64_t ldp);
// Values: out[g * d + c] = sum_t p[g * ldp + t] * v_t[c] over the len value rows v_t = v + t * d.
void attend_values(const float* p, int64_t queries, int64_t ldp, const float* v, int64_t len, int64_t d,
                   float* out);
void attend_values(const float* p, int64_t queries, int64_t ldp, const uint16_t* v, int64_t len, int64_t d,
                   float* out);

// The plain loops (fp32 accumulation in key / position order), for the tests and CPUs without AVX2.
template <typename T>
void attend_scores_reference(const float* q, int64_t queries, const T* k, int64_t len, int64_t d, float scale,
                             float* p, int64_t ldp);
template <typename T>
void attend_values_reference(const float* p, int64_t queries, int64_t ldp, const T* v, int64_t len, int64_t d,
                             float* out);

// The AVX2 + FMA + F16C paths (attend_avx2.cc): d a multiple of 8; call only where the CPU has them. The
// dispatching functions above pick them when it does.
template <typename T>
void attend_scores_avx2(const float* q, int64_t queries, const T* k, int64_t len, int64_t d, float scale,
                        float* p, int64_t ldp);
template <typename T>
void attend_values_avx2(const float* p, int64_t queries, int64_t ldp, const T* v, int64_t len, int64_t d,
                        float* out);
bool attend_avx2_supported();

}  // namespace sparse24::kernels
