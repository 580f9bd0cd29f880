// sparse24 lm-experiment: a byte-level transformer on the King James Bible, pruned 2:4 one-shot (magnitude,
// Wanda, SparseGPT, each with and without permutations) and by magnitude plus a short masked retraining.
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "train/cpu_env.h"
#include "train/lm.h"

namespace sparse24::cli {
namespace {

// main() sets OPENBLAS_CORETYPE only for workflow and sweep; do the same here, from /proc/self/cmdline.
void reexec_for_openblas() {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (size_t pos = 0; pos < all.size();) {
    const size_t end = all.find('\0', pos);
    args.push_back(all.substr(pos, end == std::string::npos ? std::string::npos : end - pos));
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  if (args.empty()) return;
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  train::reexec_with_openblas_coretype(argv.data());
}

}  // namespace

void register_lm_experiment(CLI::App& app) {
  auto o = std::make_shared<train::LmExperimentOptions>();
  CLI::App* cmd = app.add_subcommand(
      "lm-experiment",
      "Byte-level transformer on the King James Bible: dense, one-shot 2:4 (magnitude, Wanda, SparseGPT, "
      "+/- permutations), magnitude + masked retraining; writes DIR/report.{md,json}");
  cmd->add_option("--out", o->out, "output directory (the dense model is cached there)")
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "random seed (initialisation, batches, calibration)")
      ->capture_default_str();
  cmd->add_option("--steps", o->steps, "dense training steps (default 1500)")->check(CLI::Range(1, 1000000));
  cmd->add_option("--retrain-steps", o->retrain_steps, "masked retraining steps (default 300)")
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--calibration", o->calibration, "calibration sequences for Wanda and SparseGPT")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--permutation-seconds", o->permutation_seconds, "time budget per permutation search")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--text", o->text_file,
                  "read the verses from this file (`bible -f` format) instead of `bible`");
  cmd->add_option("--threads", o->threads, "libtorch threads")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  cmd->callback([o] {
    reexec_for_openblas();
    train::run_lm_experiment(*o);
  });
}

}  // namespace sparse24::cli
