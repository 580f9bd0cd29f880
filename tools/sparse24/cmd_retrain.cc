// sparse24 retrain: a 2:4-pruned sentence encoder retrained with its masks fixed, distilled from the dense
// model (src/train/retrain.h, docs/training.md).
#include <memory>

#include "commands.h"
#include "train/retrain.h"

#ifdef SPARSE24_TRAIN_HAVE_ENGINE
namespace sparse24::cli {

void register_retrain(CLI::App& app) {
  auto o = std::make_shared<train::RetrainOptions>();
  CLI::App* cmd = app.add_subcommand(
      "retrain",
      "Retrain a 2:4-pruned sentence encoder (PRUNED_DIR) with its masks fixed, distilled from the dense "
      "MODEL_DIR; writes OUT_DIR like PRUNED_DIR");
  cmd->add_option("model", o->model_dir, "the dense model directory (the teacher)")->required();
  cmd->add_option("pruned", o->pruned_dir, "its 2:4-pruned copy (sparse24 prune-model)")->required();
  cmd->add_option("-o,--output", o->out_dir, "new model directory (must not exist)")->required();
  cmd->add_option("--corpus", o->corpus,
                  "training text, one sentence per line (default: the KJV training books from `bible`, the "
                  "lines of make_corpora.sh's kjv-train.txt)");
  cmd->add_option("--eval", o->eval,
                  "also print the mean cosine to MODEL_DIR's embeddings on this file before and after");
  cmd->add_option("--steps", o->steps, "optimizer steps")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000000));
  cmd->add_option("--batch", o->batch, "sentences per step")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--max-tokens", o->max_tokens, "tokens per sentence at most (special tokens included)")
      ->capture_default_str()
      ->check(CLI::Range(3, 65536));
  cmd->add_option("--lr", o->lr, "AdamW peak learning rate (5% linear warm-up, cosine decay to 0)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--hidden-weight", o->hidden_weight,
                  "weight of the per-layer hidden-state loss beside the embedding loss (0: embeddings only)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--similarity-weight", o->similarity_weight,
                  "weight of the batch's neighbour loss (KL between the teacher's and the student's softmax "
                  "over in-batch cosine similarities, temperature 0.05; 0: off)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_flag("--train-embeddings", o->train_embeddings,
                "also train the embedding tables and their LayerNorm (default: frozen)");
  cmd->add_option("--seed", o->seed, "random seed (sentence order)")->capture_default_str();
  cmd->add_option("--threads", o->threads, "threads (default: every usable core)")
      ->check(CLI::Range(1, 1024));
  cmd->callback([o] { train::run_retrain(*o); });
}

}  // namespace sparse24::cli
#endif
