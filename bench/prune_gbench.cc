// Google Benchmark of the one-shot pruners at real layers' shapes: SparseGPT (factorization, mask choice and
// updates) and the Hessian it is built from. One thread unless OMP_NUM_THREADS says otherwise; random
// weights and calibration inputs (the work does not depend on the values).
//
//   build/sparse24_prune_gbench --benchmark_filter=SparseGpt
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "prune/dense.h"
#include "sparse24/prune.h"

namespace {

std::vector<float> random_floats(int64_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(g);
  return v;
}

// A Hessian of `tokens` random inputs (full rank for tokens >= cols).
sparse24::Hessian random_hessian(int64_t cols, int64_t tokens) {
  sparse24::Hessian h(cols);
  const std::vector<float> x = random_floats(tokens * cols, 2);
  h.add(x.data(), tokens);
  return h;
}

// SparseGPT on a [rows, cols] weight: args rows, cols.
void BM_SparseGpt(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1);
  const sparse24::Hessian h = random_hessian(cols, cols + 256);
  const std::vector<float> w0 = random_floats(rows * cols, 1);
  for (auto _ : state) {
    state.PauseTiming();
    std::vector<float> w = w0;
    state.ResumeTiming();
    benchmark::DoNotOptimize(sparse24::sparsegpt_prune(w.data(), rows, cols, h, {}));
  }
  state.counters["weights"] = static_cast<double>(rows * cols);
}
// Llama 3.1 8B's attention output [4096, 4096] and MLP down projection's input size at fewer rows (its
// factorization is the same; the updates scale with the rows); Llama 3.2 1B's down [2048, 8192].
BENCHMARK(BM_SparseGpt)
    ->Args({1024, 4096})
    ->Args({4096, 4096})
    ->Args({2048, 8192})
    ->Unit(benchmark::kSecond)
    ->Iterations(1)
    ->UseRealTime();

// SparseGPT's factorization (the upper Cholesky factor of H^-1) alone: args cols; `reference` = 1 runs the
// plain loops. Counted as cols^3 / 3 multiply-adds (Cholesky and triangular inverse, n^3 / 6 each).
void BM_Factorization(benchmark::State& state) {
  const int64_t n = state.range(0);
  const std::vector<double> h = random_hessian(n, n + 256).matrix();
  for (auto _ : state) {
    std::vector<double> u = state.range(1) ? sparse24::dense::upper_cholesky_of_inverse_reference(h, n)
                                           : sparse24::dense::upper_cholesky_of_inverse(h, n);
    benchmark::DoNotOptimize(u.data());
  }
  state.counters["multiply_adds/s"] = benchmark::Counter(
      static_cast<double>(n * n) * static_cast<double>(n) / 3 * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Factorization)
    ->ArgNames({"cols", "reference"})
    ->Args({1024, 1})
    ->Args({1024, 0})
    ->Args({4096, 0})
    ->Args({8192, 0})
    ->Unit(benchmark::kSecond)
    ->UseRealTime();

// The product C -= A B of the lazy update at a Llama down projection's width: args rows (the row batch).
void BM_LazyUpdateProduct(benchmark::State& state) {
  const int64_t m = state.range(0), k = 128, n = 14336;
  const std::vector<float> af = random_floats(m * k, 4), bf = random_floats(k * n, 5);
  const std::vector<double> a(af.begin(), af.end()), b(bf.begin(), bf.end());
  std::vector<double> c(static_cast<size_t>(m * n), 0.0);
  for (auto _ : state) {
    sparse24::dense::gemm_sub(m, n, k, {a.data(), k, 1}, {b.data(), n, 1}, c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["multiply_adds/s"] = benchmark::Counter(
      static_cast<double>(m * n * k) * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_LazyUpdateProduct)->Arg(64)->Unit(benchmark::kMillisecond)->UseRealTime();

// The Hessian of 2,048 calibration tokens: args cols.
void BM_Hessian(benchmark::State& state) {
  const int64_t cols = state.range(0), tokens = 2048;
  const std::vector<float> x = random_floats(tokens * cols, 3);
  for (auto _ : state) {
    sparse24::Hessian h(cols);
    h.add(x.data(), tokens);
    benchmark::DoNotOptimize(h.samples());
  }
  state.counters["multiply_adds/s"] =
      benchmark::Counter(static_cast<double>(cols * cols * tokens) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Hessian)->Arg(4096)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
