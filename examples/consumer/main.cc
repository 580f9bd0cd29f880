// Prunes a small matrix to 2:4, compresses it, multiplies with the fast kernel and checks the reference.
#include <sparse24/compressed.h>
#include <sparse24/spmm.h>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  const int64_t m = 8, k = 16, n = 5;
  std::vector<float> w(m * k), x(k * n), y(m * n), y_ref(m * n);
  for (int64_t i = 0; i < m * k; ++i) w[i] = std::sin(0.7f * static_cast<float>(i));
  for (int64_t i = 0; i < k * n; ++i) x[i] = std::cos(0.3f * static_cast<float>(i));

  const sparse24::Compressed c = sparse24::compress(sparse24::Tensor::from_float(w, {m, k}), /*prune=*/true);
  const sparse24::PackedMatrix p = sparse24::pack(c);
  sparse24::spmm(p, x.data(), n, n, y.data(), n);
  sparse24::spmm_reference(c, x.data(), n, n, y_ref.data(), n);

  double err = 0;
  for (int64_t i = 0; i < m * n; ++i) err = std::fmax(err, std::fabs(y[i] - y_ref[i]));
  std::printf("consumer: compression ratio %.5f, isa %s, max |fast - reference| = %g\n",
              c.compression_ratio(), sparse24::isa_name(p.isa()), err);
  return err < 1e-4 ? 0 : 1;
}
