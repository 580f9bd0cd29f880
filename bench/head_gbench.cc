// Google Benchmark rows for the decoder's output head at one token (a GEMV over vocab x hidden rows), in
// each form the engine holds it: rows of a GGUF file's types as stored (kernels::gemv_ggml: F32, F16, BF16,
// Q8_0, Q6_K), the int8 table (kernels::gemv_i8), and the dense libraries over the fp32 rows beside them
// (OpenBLAS's sgemv, its core chosen from the CPU as `sparse24 bench` chooses it; oneDNN's sgemm):
//   sparse24_head_gbench [--benchmark_filter=...] [--cold-mb=1200]
// One thread. Cold rows rotate through copies of the rows beyond the last-level cache (--cold-mb of them),
// one copy per iteration; one_copy rows read the same copy each time (hot where it fits the caches).
// Counters: bytes_per_second of the form's own bytes, ns_per_value (what a token spends per weight of the
// head; Google Benchmark prints it with an "s"). Every form is checked against gemv_ggml_reference over the
// same values before it is timed (a wrong one is reported as an error, not timed).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dnnl.hpp>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/convert.h"
#include "kernels/gemv.h"
#include "openblas.h"
#include "sparse24/dtype.h"
#include "sparse24/gguf.h"

namespace {

using namespace sparse24;
namespace bench = sparse24::bench;

double g_cold_bytes = 1200e6;

struct Shape {
  const char* model;
  int64_t rows, cols;
};
// SmolLM2-135M's, TinyLlama-1.1B's and Llama 3.2 1B's heads.
constexpr Shape kShapes[] = {{"smollm2", 49152, 576}, {"tinyllama", 32000, 2048}, {"llama3.2", 128256, 2048}};

// Random rows of a ggml type with finite values (the scales small, the quantized bits random).
std::vector<uint8_t> random_rows(uint32_t type, int64_t rows, int64_t cols, std::mt19937_64& g) {
  std::vector<uint8_t> w(static_cast<size_t>(rows * kernels::ggml_row_bytes(type, cols)));
  for (uint8_t& b : w) b = static_cast<uint8_t>(g());
  std::uniform_real_distribution<float> u(-0.05f, 0.05f);
  const auto put16 = [&](size_t at, uint16_t h) { std::memcpy(w.data() + at, &h, 2); };
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
      for (size_t i = 0; i < w.size(); i += 4) {
        const float f = u(g);
        std::memcpy(w.data() + i, &f, 4);
      }
      break;
    case GgmlType::kF16:
      for (size_t i = 0; i < w.size(); i += 2) put16(i, float_to_half(u(g)));
      break;
    case GgmlType::kBF16:
      for (size_t i = 0; i < w.size(); i += 2) put16(i, float_to_bf16(u(g)));
      break;
    case GgmlType::kQ8_0:
      for (size_t i = 0; i < w.size(); i += 34) put16(i, float_to_half(u(g) / 127));
      break;
    case GgmlType::kQ6_K:
      for (size_t i = 0; i < w.size(); i += 210) put16(i + 208, float_to_half(u(g) / 4096));
      break;
    default:
      std::abort();
  }
  return w;
}

// One form of the head: its copies (cold) or one copy (hot), and the GEMV over copy i.
struct Form {
  size_t bytes = 0;  // of one copy
  int copies = 1;
  std::function<void(int, const float*, float*)> run;
};

void head(benchmark::State& state, Shape s, std::string form, uint32_t type, bool cold) {
  if (kernels::ggml_row_bytes(type, s.cols) == 0) {
    state.SkipWithError("the type's blocks do not divide the rows");
    for (auto _ : state) {
    }
    return;
  }
  std::mt19937_64 g(7);
  const std::vector<uint8_t> base = random_rows(type, s.rows, s.cols, g);
  std::vector<float> x(static_cast<size_t>(s.cols)), y(static_cast<size_t>(s.rows)),
      want(static_cast<size_t>(s.rows)), values(static_cast<size_t>(s.rows * s.cols));
  for (float& v : x) v = std::uniform_real_distribution<float>(-1, 1)(g);
  kernels::gemv_ggml_reference(type, base.data(), s.rows, s.cols, x.data(), want.data());
  kernels::ggml_rows_to_floats(type, base.data(), s.rows, s.cols, values.data());
  // The form's copies of the same values.
  std::vector<std::vector<uint8_t>> rows;
  std::vector<std::vector<float>> fp32;
  std::vector<std::vector<int8_t>> i8;
  std::vector<std::vector<float>> scales;
  Form f;
  const int64_t groups = (s.cols + kernels::kGemvI8Group - 1) / kernels::kGemvI8Group;
  if (form == "stored") f.bytes = base.size();
  if (form == "onednn" || form == "openblas") f.bytes = values.size() * sizeof(float);
  if (form == "int8_table") f.bytes = values.size() + static_cast<size_t>(s.rows * groups) * sizeof(float);
  f.copies = cold ? std::max<int>(2, static_cast<int>(g_cold_bytes / static_cast<double>(f.bytes)) + 1) : 1;
  for (int i = 0; i < f.copies; ++i) {
    if (form == "stored") rows.push_back(base);
    if (form == "onednn" || form == "openblas") fp32.push_back(values);
    if (form == "int8_table") {
      i8.emplace_back(values.size());
      scales.emplace_back(static_cast<size_t>(s.rows * groups));
      kernels::quantize_gemv_i8(values.data(), s.rows, s.cols, i8.back().data(), scales.back().data());
    }
  }
  if (form == "stored")
    f.run = [&](int i, const float* in, float* out) {
      kernels::gemv_ggml(type, rows[i].data(), s.rows, s.cols, in, out, 1);
    };
  if (form == "onednn")
    f.run = [&](int i, const float* in, float* out) {
      dnnl_sgemm('N', 'N', s.rows, 1, s.cols, 1.0f, fp32[i].data(), s.cols, in, 1, 0.0f, out, 1);
    };
  const bench::OpenBlas& ob = bench::OpenBlas::get();
  if (form == "openblas") {
    if (!ob.ok()) {
      state.SkipWithError(("OpenBLAS: " + ob.error()).c_str());
      for (auto _ : state) {
      }
      return;
    }
    ob.set_threads(1);
    f.run = [&](int i, const float* in, float* out) {
      ob.sgemv(static_cast<int>(s.rows), static_cast<int>(s.cols), fp32[i].data(), static_cast<int>(s.cols),
               in, out);
    };
  }
  if (form == "int8_table")
    f.run = [&](int i, const float* in, float* out) {
      kernels::gemv_i8(i8[i].data(), scales[i].data(), s.rows, s.cols, in, out, 1);
    };
  // Checked first: within 1e-5 of the row's sum of |w x| (an int8 table: its rounding, 1e-2).
  f.run(0, x.data(), y.data());
  for (int64_t r = 0; r < s.rows; ++r) {
    double mag = 0;
    for (int64_t c = 0; c < s.cols; ++c) mag += std::fabs(double{values[r * s.cols + c]} * x[c]);
    if (!(std::fabs(y[r] - want[r]) <= (form == "int8_table" ? 1e-2 : 1e-5) * mag + 1e-30)) {
      const std::string what = "WRONG result at row " + std::to_string(r);
      state.SkipWithError(what.c_str());
      for (auto _ : state) {
      }
      return;
    }
  }
  int copy = 0;
  for (auto _ : state) {
    f.run(copy, x.data(), y.data());
    benchmark::DoNotOptimize(y.data());
    if (++copy == f.copies) copy = 0;
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(f.bytes));
  state.counters["ns_per_value"] =
      benchmark::Counter(static_cast<double>(s.rows * s.cols) * 1e-9,
                         benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void register_all() {
  for (const Shape& s : kShapes)
    for (bool cold : {true, false}) {
      const std::string tail = std::string("/") + s.model + (cold ? "/cold" : "/one_copy");
      for (GgmlType t : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0, GgmlType::kQ6_K}) {
        const auto type = static_cast<uint32_t>(t);
        benchmark::RegisterBenchmark(("head/" + ggml_type_name(type) + tail).c_str(), head, s, "stored", type,
                                     cold)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
      }
      const auto f32 = static_cast<uint32_t>(GgmlType::kF32);
      for (const char* form : {"int8_table", "openblas", "onednn"})
        benchmark::RegisterBenchmark(("head/" + std::string(form) + tail).c_str(), head, s, form, f32, cold)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
    }
}

}  // namespace

int main(int argc, char** argv) {
  (void)bench::OpenBlas::get();  // before anything else (OPENBLAS_CORETYPE)
  std::vector<char*> rest;       // our flag first; Google Benchmark's are left for benchmark::Initialize
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--cold-mb=", 10) == 0)
      g_cold_bytes = std::atof(argv[i] + 10) * 1e6;
    else
      rest.push_back(argv[i]);
  }
  int rest_argc = static_cast<int>(rest.size());
  register_all();
  benchmark::Initialize(&rest_argc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rest_argc, rest.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
