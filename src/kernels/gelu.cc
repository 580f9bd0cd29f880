#include <cmath>

#include "kernel_list.h"

namespace sparse24::kernels {

const float* gelu_coefficients() {
  // R(t) = Q(t) / phi(t) satisfies R' = t R - 1, hence R^(n) = t R^(n-1) + (n-1) R^(n-2) (Leibniz): the
  // Taylor coefficients follow from R at the centre, computed from erfc in double.
  static const auto table = [] {
    struct Table {
      float c[(kGeluDegree + 1) * 8];
    } t{};
    const double inv_sqrt_2pi = 0.3989422804014327;
    for (int i = 0; i < 8; ++i) {
      const double c = i + 0.5;
      double d[kGeluDegree + 1];
      d[0] = 0.5 * std::erfc(c / std::sqrt(2.0)) / (inv_sqrt_2pi * std::exp(-0.5 * c * c));
      d[1] = c * d[0] - 1.0;
      for (int n = 2; n <= kGeluDegree; ++n) d[n] = c * d[n - 1] + (n - 1) * d[n - 2];
      double fact = 1.0;
      for (int n = 0; n <= kGeluDegree; ++n) {
        if (n > 0) fact *= n;
        t.c[n * 8 + i] = static_cast<float>(d[n] / fact * inv_sqrt_2pi);
      }
    }
    return t;
  }();
  return table.c;
}

}  // namespace sparse24::kernels
