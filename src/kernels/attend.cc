// Attention over a KV cache at one position: the references and the dispatch (attend.h).
#include "attend.h"

#include <algorithm>

#include "sparse24/dtype.h"

namespace sparse24::kernels {

namespace {

float widen(float v) { return v; }
float widen(uint16_t h) { return half_to_float(h); }

template <typename T>
void scores(const float* q, int64_t queries, const T* k, int64_t len, int64_t d, float scale, float* p,
            int64_t ldp) {
  if (attend_avx2_supported() && d % 8 == 0) return attend_scores_avx2(q, queries, k, len, d, scale, p, ldp);
  attend_scores_reference(q, queries, k, len, d, scale, p, ldp);
}

template <typename T>
void values(const float* p, int64_t queries, int64_t ldp, const T* v, int64_t len, int64_t d, float* out) {
  if (attend_avx2_supported() && d % 8 == 0) return attend_values_avx2(p, queries, ldp, v, len, d, out);
  attend_values_reference(p, queries, ldp, v, len, d, out);
}

}  // namespace

bool attend_avx2_supported() {
  static const bool ok =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return ok;
}

template <typename T>
void attend_scores_reference(const float* q, int64_t queries, const T* k, int64_t len, int64_t d, float scale,
                             float* p, int64_t ldp) {
  for (int64_t g = 0; g < queries; ++g)
    for (int64_t t = 0; t < len; ++t) {
      float s = 0.0f;
      for (int64_t c = 0; c < d; ++c) s += q[g * d + c] * widen(k[t * d + c]);
      p[g * ldp + t] = s * scale;
    }
}

template <typename T>
void attend_values_reference(const float* p, int64_t queries, int64_t ldp, const T* v, int64_t len, int64_t d,
                             float* out) {
  for (int64_t g = 0; g < queries; ++g) {
    float* o = out + g * d;
    std::fill(o, o + d, 0.0f);
    for (int64_t t = 0; t < len; ++t)
      for (int64_t c = 0; c < d; ++c) o[c] += p[g * ldp + t] * widen(v[t * d + c]);
  }
}

template void attend_scores_reference(const float*, int64_t, const float*, int64_t, int64_t, float, float*,
                                      int64_t);
template void attend_scores_reference(const float*, int64_t, const uint16_t*, int64_t, int64_t, float, float*,
                                      int64_t);
template void attend_values_reference(const float*, int64_t, int64_t, const float*, int64_t, int64_t, float*);
template void attend_values_reference(const float*, int64_t, int64_t, const uint16_t*, int64_t, int64_t,
                                      float*);

void attend_scores(const float* q, int64_t queries, const float* k, int64_t len, int64_t d, float scale,
                   float* p, int64_t ldp) {
  scores(q, queries, k, len, d, scale, p, ldp);
}
void attend_scores(const float* q, int64_t queries, const uint16_t* k, int64_t len, int64_t d, float scale,
                   float* p, int64_t ldp) {
  scores(q, queries, k, len, d, scale, p, ldp);
}
void attend_values(const float* p, int64_t queries, int64_t ldp, const float* v, int64_t len, int64_t d,
                   float* out) {
  values(p, queries, ldp, v, len, d, out);
}
void attend_values(const float* p, int64_t queries, int64_t ldp, const uint16_t* v, int64_t len, int64_t d,
                   float* out) {
  values(p, queries, ldp, v, len, d, out);
}

}  // namespace sparse24::kernels
