// sparse24 lm-experiment: a byte-level transformer on the King James Bible, pruned 2:4 one-shot (magnitude,
// Wanda, SparseGPT, each with and without permutations) and by magnitude plus a short masked retraining.
#include <memory>
#include <string>

#include "commands.h"
#include "train/lm.h"

namespace sparse24::cli {

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
  cmd->add_option("--lr", o->lr, "peak learning rate of the dense training (AdamW, warm-up, cosine)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_flag(
      "--bos", o->config.bos,
      "a beginning-of-sequence token in front of every window (the model then predicts every byte)");
  cmd->add_option("--retrain-steps", o->retrain_steps, "masked retraining steps (default 300)")
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--calibration", o->calibration, "calibration sequences for Wanda and SparseGPT")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--permutation-seconds", o->permutation_seconds, "time budget per permutation search")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option(
         "--permutation-evaluations", o->permutation_evaluations,
         "work budget per permutation search (0: none); reached first, the same permutations on every "
         "machine")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 50));
  cmd->add_option("--text", o->text_file,
                  "read the verses from this file (`bible -f` format) instead of `bible`");
  cmd->add_option("--threads", o->threads, "libtorch threads")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  cmd->callback([o] { train::run_lm_experiment(*o); });
}

}  // namespace sparse24::cli
