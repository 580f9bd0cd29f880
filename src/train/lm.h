// The language-model experiment (issue 7): a small decoder-only transformer trained byte by byte on the King
// James Bible, pruned 2:4 one-shot by magnitude, Wanda and SparseGPT (each with and without channel
// permutations), and by magnitude followed by a short retraining with the mask fixed. Writes
// DIR/report.{md,json}. The dense model is cached in DIR (dense.pt + dense.json) and reused when the
// configuration, seed and data match. This header does not include libtorch, so the CLI compiles fast.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

namespace sparse24::train {

// Architecture of the language model (docs/accuracy.md, "Language model"). Every Linear's in_features
// (d_model, d_ff) must be a multiple of 4, and d_model a multiple of 4 * heads (so 2:4 groups never cross a
// head).
struct LmConfig {
  int64_t vocab = 256;  // bytes
  int64_t d_model = 128;
  int64_t layers = 4;
  int64_t heads = 4;
  int64_t d_ff = 512;
  int64_t context = 128;
  // A beginning-of-sequence token (id `vocab`, an extra embedding row; never predicted) in front of every
  // window: the model reads [BOS, b0, ..., b_{T-2}] and predicts b0 ... b_{T-1}.
  bool bos = false;
  void validate() const;  // throws Error
};

struct LmExperimentOptions {
  std::string out = "lm-out";
  // The text: empty = run `bible_program -f Gen1:1-Rev22:21` (Debian's bible-kjv); otherwise a file in that
  // output format (one verse per line, "<Book><chapter>:<verse> <text>"), for tests.
  std::string text_file;
  std::string bible_program = "bible";
  LmConfig config;
  uint64_t seed = 1;
  int64_t steps = 0;          // dense training steps; 0 = default (kDefaultSteps)
  int64_t retrain_steps = 0;  // masked retraining steps; 0 = default (kDefaultRetrainSteps)
  int64_t batch = 32;         // sequences of `context` bytes per step
  double lr = 2e-3;           // AdamW peak; linear warm-up, cosine decay to lr/10
  double retrain_lr = 1e-3;
  int64_t calibration = 128;            // calibration sequences (training split) for Wanda and SparseGPT
  int64_t eval_sequences = 0;           // > 0: evaluate on the first N validation windows only (tests)
  double permutation_seconds = 1;       // time budget per permutation search
  int64_t permutation_evaluations = 0;  // work budget per search (0: none; the same stop on every machine)
  // libtorch threads. 1 by default: this model's ops are small, and on the shared 2-core machine two OpenMP
  // threads spent more time waiting for each other than computing (0.61 CPU-s per step with 1 thread, 1.32
  // with 2; docs/accuracy.md). 0 = every usable core.
  int threads = 1;
  std::FILE* log = stdout;
};

inline constexpr int64_t kDefaultSteps = 1500;
inline constexpr int64_t kDefaultRetrainSteps = 300;

struct LmMethodResult {
  double ppl = 0, seconds = 0;
};

struct LmExperimentResult {
  double dense_ppl = 0;
  bool dense_cached = false;  // the dense model came from DIR/dense.pt
  double dense_train_seconds = 0;
  LmMethodResult magnitude, magnitude_perm, wanda, wanda_perm, sparsegpt, sparsegpt_perm, magnitude_retrained;
  LmMethodResult dense_continued;  // control: the dense model trained retrain_steps more, no mask
  double seconds = 0;
};

// Runs everything; throws Error on bad input (e.g. an --out that is not a directory).
LmExperimentResult run_lm_experiment(const LmExperimentOptions& options);

}  // namespace sparse24::train
