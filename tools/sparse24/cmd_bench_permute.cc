// sparse24 bench-permute [--rows 64] [--cols 128] [--trials 10] [--seed S] [--dist normal|uniform|asp]
//                        [--max-seconds T] [--json FILE]
// Channel permutation search on random matrices: the share of the gap between 2:4 magnitude and the per-row
// 50% bound that each method recovers, and its time (one thread). A benchmark, not a test.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "commands.h"
#include "sparse24/error.h"
#include "sparse24/io.h"
#include "sparse24/prune.h"

namespace sparse24::cli {

void register_bench_permute(CLI::App& app) {
  struct Opts {
    int64_t rows = 64, cols = 128, trials = 10;
    uint64_t seed = 1;
    std::string dist = "normal", json;
    double max_seconds = 1.0;
    int64_t max_evaluations = 0;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "bench-permute", "Benchmark channel permutation search (recovered share of the 2:4 gap, seconds)");
  cmd->add_option("--rows", o->rows, "rows of each random matrix")->capture_default_str();
  cmd->add_option("--cols", o->cols, "columns (input channels, a multiple of 4)")->capture_default_str();
  cmd->add_option("--trials", o->trials, "random matrices")->capture_default_str();
  cmd->add_option("--seed", o->seed, "seed of the matrices (trial t uses seed + t) and of the search")
      ->capture_default_str();
  cmd->add_option(
         "--dist", o->dist,
         "normal (N(0,1)), uniform ([0,1)) or asp (NumPy's rand([0,1)) with the same seed, the matrices of "
         "ASP's permutation_test.py)")
      ->capture_default_str();
  cmd->add_option("--max-seconds", o->max_seconds, "time budget per search")->capture_default_str();
  cmd->add_option("--max-evaluations", o->max_evaluations,
                  "work budget per search (0: none): split evaluations, the same stop on every machine")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 50))
      ->capture_default_str();
  cmd->add_option("--json", o->json, "write the per-trial results as a JSON list");
  cmd->callback([o] {
    if (o->rows < 1 || o->rows > (1 << 16)) throw Error("--rows must be in [1, 65536]");
    if (o->cols < 4 || o->cols > (1 << 16) || o->cols % 4 != 0)
      throw Error("--cols must be a multiple of 4 in [4, 65536]");
    if (o->trials < 1 || o->trials > 100000) throw Error("--trials must be in [1, 100000]");
    if (o->dist != "normal" && o->dist != "uniform" && o->dist != "asp")
      throw Error("--dist must be normal, uniform or asp");
    if (!(o->max_seconds > 0)) throw Error("--max-seconds must be positive");

    struct Method {
      const char* name;
      PermutationMethod method;
      double sum_rec = 0, min_rec = 1e300, sum_s = 0, max_s = 0, sum_evals = 0;
      int64_t stopped = 0;
    };
    Method methods[] = {{"swap", PermutationMethod::kSwap},
                        {"exhaustive", PermutationMethod::kExhaustive},
                        {"auto", PermutationMethod::kAuto}};
    nlohmann::json out = nlohmann::json::array();
    std::vector<float> w(static_cast<size_t>(o->rows * o->cols));
    for (int64_t t = 0; t < o->trials; ++t) {
      std::mt19937_64 g(o->seed + static_cast<uint64_t>(t));
      if (o->dist == "asp") {
        // NumPy's legacy np.random.seed(seed); np.random.rand(rows, cols): MT19937 seeded by init_genrand
        // (as std::mt19937), 53-bit doubles from two draws. ASP's permutation_test.py matrix for --seed 1.
        std::mt19937 mt(static_cast<uint32_t>(o->seed + static_cast<uint64_t>(t)));
        for (auto& x : w) {
          const uint32_t a = mt() >> 5, b = mt() >> 6;
          x = static_cast<float>((a * 67108864.0 + b) / 9007199254740992.0);
        }
      } else if (o->dist == "normal") {
        std::normal_distribution<float> d(0.f, 1.f);
        for (auto& x : w) x = d(g);
      } else {
        std::uniform_real_distribution<float> d(0.f, 1.f);
        for (auto& x : w) x = d(g);
      }
      for (Method& m : methods) {
        PermutationOptions opt;
        opt.method = m.method;
        opt.seed = o->seed + static_cast<uint64_t>(t);
        opt.max_seconds = o->max_seconds;
        opt.max_evaluations = static_cast<uint64_t>(o->max_evaluations);
        const PermutationResult r = search_permutation(w.data(), o->rows, o->cols, opt);
        const double rec = r.recovered();
        m.sum_rec += rec, m.min_rec = std::min(m.min_rec, rec);
        m.sum_s += r.seconds, m.max_s = std::max(m.max_s, r.seconds);
        m.sum_evals += static_cast<double>(r.evaluations), m.stopped += r.stopped_early;
        out.push_back({{"trial", t},
                       {"method", m.name},
                       {"rows", o->rows},
                       {"cols", o->cols},
                       {"dist", o->dist},
                       {"seed", o->seed + static_cast<uint64_t>(t)},
                       {"recovered", rec},
                       {"seconds", r.seconds},
                       {"evaluations", r.evaluations},
                       {"stopped_early", r.stopped_early},
                       {"kept_identity", r.kept_identity},
                       {"kept_permuted", r.kept_permuted},
                       {"kept_bound", r.kept_unstructured}});
      }
    }
    std::printf("channel permutations: %lld random %s matrices [%lld, %lld], seed %llu, 1 thread\n",
                (long long)o->trials, o->dist.c_str(), (long long)o->rows, (long long)o->cols,
                (unsigned long long)o->seed);
    std::printf("recovered = share of the gap between 2:4 magnitude and the per-row 50%% bound\n\n");
    if (o->trials == 1) {
      std::printf(
          "sum |w| %.3f, 2:4 kept %.3f, per-row 50%% bound %.3f\n\n",
          [&] {
            double s = 0;
            for (float x : w) s += std::fabs(x);
            return s;
          }(),
          out[0]["kept_identity"].get<double>(), out[0]["kept_bound"].get<double>());
    }
    std::printf("%-12s %14s %14s %12s %12s %16s %8s\n", "method", "recovered mean", "recovered min", "s mean",
                "s max", "evaluations mean", "stopped");
    for (const Method& m : methods) {
      std::printf("%-12s %13.1f%% %13.1f%% %12.4f %12.4f %16.0f %8lld\n", m.name,
                  100 * m.sum_rec / (double)o->trials, 100 * m.min_rec, m.sum_s / (double)o->trials, m.max_s,
                  m.sum_evals / (double)o->trials, static_cast<long long>(m.stopped));
    }
    if (!o->json.empty()) write_file_atomic(o->json, out.dump(1) + "\n");
  });
}

}  // namespace sparse24::cli
