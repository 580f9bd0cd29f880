// sparse24 demo: prune a random matrix, compress it in every dtype, multiply it, and print what it cost.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

#include "commands.h"
#include "sparse24/compressed.h"
#include "sparse24/mask.h"
#include "sparse24/reference.h"
#include "sparse24/spmm.h"

namespace sparse24::cli {
namespace {

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, static_cast<double>(std::fabs(a[i] - b[i])));
  return d;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Fraction of sum |w| kept by the best unstructured 50% mask: the bound any 2:4 mask is measured against.
double unstructured_half_kept(const std::vector<float>& w) {
  std::vector<float> a(w.size());
  std::transform(w.begin(), w.end(), a.begin(), [](float x) { return std::fabs(x); });
  std::sort(a.begin(), a.end(), std::greater<float>());
  double kept = 0, total = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    total += a[i];
    if (i < a.size() / 2) kept += a[i];
  }
  return total > 0 ? kept / total : 1.0;
}

}  // namespace

void register_demo(CLI::App& app) {
  struct Opts {
    int64_t rows = 768, cols = 768, n = 64;
    uint64_t seed = 1;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd =
      app.add_subcommand("demo", "Prune, compress and multiply a random matrix; print the compression table");
  cmd->add_option("--rows", o->rows, "rows (M)")->capture_default_str()->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--cols", o->cols, "columns (K, the reduction dimension)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("-n", o->n, "activation columns (N)")->capture_default_str()->check(CLI::Range(1, 4096));
  cmd->add_option("--seed", o->seed, "random seed")->capture_default_str();
  cmd->callback([o] {
    const int64_t M = o->rows, K = o->cols, N = o->n;
    std::mt19937_64 g(o->seed);
    std::normal_distribution<float> normal(0.f, 0.02f);
    std::vector<float> w(static_cast<size_t>(M * K));
    for (auto& x : w) x = normal(g);
    std::printf("sparse24 demo: W [%lld, %lld] ~ N(0, 0.02^2), X [%lld, %lld], seed %llu\n\n", (long long)M,
                (long long)K, (long long)K, (long long)N, (unsigned long long)o->seed);

    std::printf("%-34s %s\n", "mask", "kept magnitude");
    std::printf("%-34s %.4f\n", "unstructured 50% (upper bound)", unstructured_half_kept(w));
    const Mask magnitude = magnitude_mask(w.data(), M, K);
    std::printf("%-34s %.4f\n", "2:4 magnitude", kept_magnitude(w.data(), magnitude));
    std::printf("%-34s %.4f\n", "2:4 transposable (exact)",
                kept_magnitude(w.data(), transposable_mask(w.data(), M, K, TransposableMethod::kExact)));
    std::printf("%-34s %.4f\n\n", "2:4 transposable (greedy)",
                kept_magnitude(w.data(), transposable_mask(w.data(), M, K, TransposableMethod::kGreedy)));

    std::vector<float> pruned = w;
    apply_mask(pruned.data(), magnitude);
    std::printf("%-9s %12s %12s %10s %8s\n", "dtype", "dense B", "values B", "meta B", "ratio");
    for (DType dt : {DType::kF32, DType::kF16, DType::kBF16, DType::kI8}) {
      std::vector<float> scaled = pruned;
      if (dt == DType::kI8)  // symmetric per-tensor quantisation, just to have int8 weights to store
        for (auto& x : scaled) x = std::round(x / 0.1f * 127.f);
      const Compressed c = compress(Tensor::from_float(scaled, {M, K}, dt));
      std::printf("%-9s %12lld %12zu %10zu %8.5f\n", dtype_name(dt), (long long)(M * K * dtype_size(dt)),
                  c.values.size(), c.metadata.size(), c.compression_ratio());
    }

    const Compressed c = compress(Tensor::from_float(pruned, {M, K}));
    std::vector<float> x(static_cast<size_t>(K * N));
    std::uniform_real_distribution<float> uni(-1.f, 1.f);
    for (auto& v : x) v = uni(g);
    std::vector<float> y_dense(static_cast<size_t>(M * N)), y_ref(y_dense), y_fast(y_dense);
    auto t0 = std::chrono::steady_clock::now();
    gemm_reference(pruned.data(), M, K, x.data(), N, N, y_dense.data(), N);
    const double t_dense = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    spmm_reference(c, x.data(), N, N, y_ref.data(), N);
    const double t_ref = seconds_since(t0);
    const PackedMatrix packed = pack(c);
    spmm(packed, x.data(), N, N, y_fast.data(), N);  // warm up
    t0 = std::chrono::steady_clock::now();
    spmm(packed, x.data(), N, N, y_fast.data(), N);
    const double t_fast = seconds_since(t0);
    std::printf(
        "\nY = W X with N = %lld                      max |diff| vs dense   time (one run; see `sparse24 "
        "bench`)\n",
        (long long)N);
    std::printf("%-44s %-21s %.3f ms\n", "dense scalar loop (decompressed W)", "-", t_dense * 1e3);
    std::printf("%-44s %-21.3g %.3f ms\n", "2:4 reference (scalar, metadata selects X)",
                max_abs_diff(y_ref, y_dense), t_ref * 1e3);
    std::printf("%-44s %-21.3g %.3f ms\n",
                ("2:4 fast kernel (" + std::string(isa_name(packed.isa())) + ")").c_str(),
                max_abs_diff(y_fast, y_dense), t_fast * 1e3);
  });
}

}  // namespace sparse24::cli
