// sparse24-train: the training commands (libtorch). `sparse24 workflow|sweep|lm-experiment|retrain` executes
// this.
#include <cstdio>
#include <exception>

#include "commands.h"

int main(int argc, char** argv) {
  sparse24::cli::prepare_training_process(argc, argv);
  CLI::App app{"sparse24-train: the libtorch training commands of sparse24"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "sparse24 0.1.0");
  sparse24::cli::register_workflow(app);
  sparse24::cli::register_sweep(app);
  sparse24::cli::register_lm_experiment(app);
#ifdef SPARSE24_TRAIN_HAVE_ENGINE
  sparse24::cli::register_retrain(app);
#endif
  return sparse24::cli::run_app(app, argc, argv);
}
