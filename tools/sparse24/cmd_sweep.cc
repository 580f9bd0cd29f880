// sparse24 sweep: accuracy against density (unstructured magnitude and 2:4, one-shot and retrained).
#include <memory>

#include "commands.h"
#include "train/workflow.h"

namespace sparse24::cli {

void add_training_options(CLI::App* cmd, train::WorkflowOptions& o);  // cmd_workflow.cc

void register_sweep(CLI::App& app) {
  auto o = std::make_shared<train::SweepOptions>();
  o->out = "sweep-out";
  o->model = "mlp";  // six trainings: the fast model by default
  CLI::App* cmd = app.add_subcommand(
      "sweep", "Accuracy against density: unstructured magnitude and 2:4, one-shot and retrained");
  add_training_options(cmd, *o);
  cmd->add_option("--densities", o->densities, "unstructured densities (fractions)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->callback([o] { train::run_sweep(*o); });
}

}  // namespace sparse24::cli
