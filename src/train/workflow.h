// NVIDIA's 2:4 workflow on a real dataset: train dense, evaluate; prune 2:4 once by magnitude, evaluate;
// retrain with the same epochs and schedule and the mask fixed, evaluate; export (compressed pruned layers +
// architecture config), reload and check identical predictions; write DIR/report.{md,json} and density maps.
// And the sweep: accuracy against density. This header does not include libtorch, so the CLI compiles fast.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace sparse24::train {

struct WorkflowOptions {
  std::string dataset = "fashion-mnist";
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::string model = "cnn";  // mlp | cnn
  int epochs = 0;             // 0 = the model's default
  uint64_t seed = 1;
  std::string out = "workflow-out";
  int64_t limit = 0;          // > 0: only the first `limit` training images (smoke tests)
  int64_t batch = 0;          // 0 = the model's default
  double lr = 0;              // 0 = the model's default
  bool transposable = false;  // transposable 2:4 masks instead of 1-D magnitude
  std::vector<std::string> allow, deny;
  int threads = 0;  // 0 = every usable core
  std::FILE* log = stdout;
};

struct WorkflowResult {
  double dense_accuracy = 0, oneshot_accuracy = 0, retrained_accuracy = 0, reload_accuracy = 0;
  bool reload_identical = false;
  double seconds = 0;
};

// Runs everything and writes the outputs under options.out (created if missing). Throws Error on bad input.
WorkflowResult run_workflow(const WorkflowOptions& options);

struct SweepOptions : WorkflowOptions {
  std::vector<double> densities = {1.0, 0.5, 0.35, 0.15};  // unstructured magnitude, per layer
};
// Trains dense once, then for each density (unstructured) and for 2:4: one-shot and retrained accuracy.
// Writes DIR/sweep.md, DIR/sweep.json and DIR/sweep.png (gnuplot, when installed).
void run_sweep(const SweepOptions& options);

}  // namespace sparse24::train
