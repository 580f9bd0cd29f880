// sparse24 workflow: train dense, prune 2:4 once, retrain with the mask fixed, export, report.
#include <cstring>
#include <memory>

#include "commands.h"
#include "train/cpu_env.h"
#include "train/workflow.h"

namespace sparse24::cli {

void prepare_training_process(int argc, char** argv) {
  if (argc >= 2 && (std::strcmp(argv[1], "workflow") == 0 || std::strcmp(argv[1], "sweep") == 0 ||
                    std::strcmp(argv[1], "lm-experiment") == 0 || std::strcmp(argv[1], "retrain") == 0))
    train::reexec_with_openblas_coretype(argv);
}

// Options shared by workflow and sweep.
void add_training_options(CLI::App* cmd, train::WorkflowOptions& o) {
  cmd->add_option("--dataset", o.dataset, "dataset")
      ->capture_default_str()
      ->check(CLI::IsMember({"fashion-mnist"}));
  cmd->add_option("--data-dir", o.data_dir, "directory of the gzipped IDX files")->capture_default_str();
  cmd->add_option("--model", o.model, "model")->capture_default_str()->check(CLI::IsMember({"mlp", "cnn"}));
  cmd->add_option("--epochs", o.epochs, "epochs per training phase (default: the model's)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--seed", o.seed, "random seed (initialisation and data order)")->capture_default_str();
  cmd->add_option("--out", o.out, "output directory")->capture_default_str();
  cmd->add_option("--limit", o.limit, "use only the first N training images (smoke tests)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  cmd->add_option("--batch", o.batch, "batch size (default: the model's)")->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--lr", o.lr, "peak learning rate (default: the model's)")->check(CLI::PositiveNumber);
  cmd->add_option("--threads", o.threads, "threads (default: every usable core)")->check(CLI::Range(1, 1024));
  cmd->add_option("--allow", o.allow, "prune only these layers (names, e.g. conv2 fc1)");
  cmd->add_option("--deny", o.deny, "never prune these layers");
}

void register_workflow(CLI::App& app) {
  auto o = std::make_shared<train::WorkflowOptions>();
  CLI::App* cmd = app.add_subcommand(
      "workflow", "Train dense, prune 2:4 once, retrain with the mask fixed, export, write DIR/report.md");
  add_training_options(cmd, *o);
  cmd->add_flag("--transposable", o->transposable, "transposable 2:4 masks (W and W^T both 2:4)");
  cmd->callback([o] { train::run_workflow(*o); });
}

}  // namespace sparse24::cli
