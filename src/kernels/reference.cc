#include "sparse24/reference.h"

#include <cmath>
#include <vector>

#include "sparse24/error.h"

namespace sparse24 {

const char* epilogue_name(Epilogue e) {
  switch (e) {
    case Epilogue::kNone:
      return "none";
    case Epilogue::kRelu:
      return "relu";
    case Epilogue::kGelu:
      return "gelu";
  }
  return "invalid";
}

float apply_epilogue(float y, Epilogue e) {
  switch (e) {
    case Epilogue::kNone:
      return y;
    case Epilogue::kRelu:
      return y > 0.f ? y : 0.f;
    case Epilogue::kGelu:
      return 0.5f * y * (1.f + std::erf(y * 0.70710678118654752f));
  }
  return y;
}

namespace {

void check_args(int64_t n, int64_t ldx, int64_t ldy) {
  if (n < 0 || ldx < n || ldy < n) throw Error("invalid multiply arguments: need n >= 0, ldx >= n, ldy >= n");
}

void finish_row(float* y, const float* acc, int64_t n, float bias, Epilogue ep) {
  for (int64_t j = 0; j < n; ++j) y[j] = apply_epilogue(acc[j] + bias, ep);
}

}  // namespace

void spmm_reference(const Compressed& w, const float* x, int64_t n, int64_t ldx, float* y, int64_t ldy,
                    const float* bias, Epilogue ep) {
  check_args(n, ldx, ldy);
  std::vector<float> acc(static_cast<size_t>(n));
  for (int64_t m = 0; m < w.rows; ++m) {
    std::fill(acc.begin(), acc.end(), 0.f);
    for (int64_t g = 0; g < w.groups_per_row(); ++g) {
      const uint8_t code = w.code(m, g);
      for (int j = 0; j < 2; ++j) {
        // The multiplexer: the code names which of the group's 4 activation rows this value multiplies.
        const int64_t k = 4 * g + ((code >> (2 * j)) & 3);
        if (k >= w.cols) continue;  // zero padding of the last group
        const float v = w.value(m, 2 * g + j);
        const float* xr = x + k * ldx;
        for (int64_t c = 0; c < n; ++c) acc[static_cast<size_t>(c)] += v * xr[c];
      }
    }
    finish_row(y + m * ldy, acc.data(), n, bias ? bias[m] : 0.f, ep);
  }
}

void gemm_reference(const float* w, int64_t m, int64_t k, const float* x, int64_t n, int64_t ldx, float* y,
                    int64_t ldy, const float* bias, Epilogue ep) {
  check_args(n, ldx, ldy);
  std::vector<float> acc(static_cast<size_t>(n));
  for (int64_t r = 0; r < m; ++r) {
    std::fill(acc.begin(), acc.end(), 0.f);
    for (int64_t kk = 0; kk < k; ++kk) {
      const float v = w[r * k + kk];
      const float* xr = x + kk * ldx;
      for (int64_t c = 0; c < n; ++c) acc[static_cast<size_t>(c)] += v * xr[c];
    }
    finish_row(y + r * ldy, acc.data(), n, bias ? bias[r] : 0.f, ep);
  }
}

}  // namespace sparse24
