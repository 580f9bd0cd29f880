// Google Benchmark rows for sparse24 and the dense libraries, one per (shape, threads, method):
//   sparse24_gbench [--benchmark_filter=...] [--threads=1,2] [--cold-mb=600]
// Counters: dense_FLOPS = 2*M*N*K per second (dense-equivalent, the number to compare across methods) and
// nonzero_FLOPS = M*N*K per second (the multiply-adds a 2:4 kernel performs), per house style. Cold rows
// rotate through weight copies beyond the last-level cache, one copy per iteration. Every method is checked
// against the reference before it is timed; a wrong one is reported as an error, not timed.
// `sparse24 bench` is the interleaved, gated comparison; this program is for profiling single rows.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dense.h"
#include "harness.h"
#include "openblas.h"

namespace {

namespace b = sparse24::bench;

// The problem and candidates of the current (shape, threads): benchmarks of one shape run back to back,
// so one set is alive at a time.
struct Current {
  std::string key;
  std::unique_ptr<b::Problem> problem;
  std::vector<b::Candidate> candidates;
  std::map<std::string, std::string> errors;  // candidate name -> why it is wrong
};
Current g_current;
double g_cold_bytes = 600e6;

b::Candidate* prepare(const b::Shape& s, int threads, const std::string& name, std::string* error) {
  const std::string key = b::shape_label(s) + "/" + std::to_string(threads);
  if (g_current.key != key) {
    g_current.candidates.clear();
    g_current.problem.reset();
    g_current.errors.clear();
    g_current.key = key;
    g_current.problem = std::make_unique<b::Problem>(b::make_problem(s, 24));
    b::BuildOptions o;
    o.threads = threads;
    o.cold_bytes = s.cold ? g_cold_bytes : 0;
    g_current.candidates = b::make_candidates(*g_current.problem, o);
    b::Reference ref = b::make_reference(*g_current.problem);
    for (b::Candidate& c : g_current.candidates) {
      b::CheckResult r = b::check_candidate(c, *g_current.problem, ref, 0);
      if (!r.ok) g_current.errors[c.name] = r.what;
    }
  }
  omp_set_num_threads(threads);
  for (b::Candidate& c : g_current.candidates) {
    if (c.name != name) continue;
    auto it = g_current.errors.find(name);
    if (it != g_current.errors.end()) *error = "WRONG result: " + it->second;
    return &c;
  }
  *error = name + " is not available for this shape (library missing?)";
  return nullptr;
}

void run(benchmark::State& state, b::Shape s, int threads, std::string name) {
  std::string error;
  b::Candidate* c = prepare(s, threads, name, &error);
  if (!error.empty()) {
    state.SkipWithError(error.c_str());
    for (auto _ : state) {
    }
    return;
  }
  int copy = 0;
  for (auto _ : state) {
    c->run(copy);
    if (s.cold && ++copy == c->copies) copy = 0;
  }
  const double mnk = static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
  state.counters["dense_FLOPS"] = benchmark::Counter(2 * mnk, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["nonzero_FLOPS"] = benchmark::Counter(mnk, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["weight_Bps"] =
      benchmark::Counter(c->weight_bytes, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["copies"] = c->copies;
}

const char* kMethods[] = {"sparse24",     "openblas_sgemm_nn", "openblas_sgemm_nt",   "openblas_sgemv",
                          "onednn_sgemm", "onednn_matmul",     "onednn_matmul_packed"};

}  // namespace

int main(int argc, char** argv) {
  const b::OpenBlas& ob = b::OpenBlas::get();  // before anything else (OPENBLAS_CORETYPE)
  (void)ob;
  std::vector<int> threads = {1};
  // Our own flags first; Google Benchmark's are left for benchmark::Initialize.
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--threads=", 10) == 0) {
      threads.clear();
      for (const char* p = argv[i] + 10; *p;) {
        threads.push_back(std::atoi(p));
        while (*p && *p != ',') ++p;
        if (*p == ',') ++p;
      }
    } else if (std::strncmp(argv[i], "--cold-mb=", 10) == 0) {
      g_cold_bytes = std::atof(argv[i] + 10) * 1e6;
    } else {
      rest.push_back(argv[i]);
    }
  }
  int rest_argc = static_cast<int>(rest.size());
  std::fprintf(stderr, "%s\n%s\n", b::openblas_info().c_str(), b::onednn_info().c_str());
  for (const b::Shape& s : b::full_shapes()) {
    for (int t : threads) {
      if (t < 1) continue;
      for (const char* m : kMethods) {
        if (std::strcmp(m, "openblas_sgemv") == 0 && s.n != 1) continue;
        std::string name = std::string(m) + "/" + std::to_string(s.m) + "x" + std::to_string(s.k) + "x" +
                           std::to_string(s.n) + (s.cold ? "/cold" : "") + "/threads:" + std::to_string(t);
        benchmark::RegisterBenchmark(name.c_str(), run, s, t, std::string(m))
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
      }
    }
  }
  benchmark::Initialize(&rest_argc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rest_argc, rest.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
