// The sparse24 command-line tool: each command lives in its own cmd_*.cc and registers itself here.
// Commands parse arguments and call the library; the work lives in the library.
#pragma once
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <exception>
#include <string>

namespace sparse24::cli {

using Clock = std::chrono::steady_clock;
inline double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Parses and runs the command line; a parse error is CLI11's message, any other error one line
// "sparse24: error: ..." and exit code 1.
inline int run_app(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sparse24: error: %s\n", e.what());
    return 1;
  }
  return 0;
}

// Each registers one subcommand (and its callback) on the app.
void register_prune(CLI::App& app);
void register_compress(CLI::App& app);
void register_decompress(CLI::App& app);
void register_inspect(CLI::App& app);
void register_demo(CLI::App& app);
void register_convert(CLI::App& app);
void register_export_gpu(CLI::App& app);
void register_bench_permute(CLI::App& app);
void register_tokenize(CLI::App& app);  // cmd_tokenize.cc
#ifdef SPARSE24_HAVE_BENCH
void register_bench(CLI::App& app);
// Re-executes `bench` with the OPENBLAS_CORETYPE it wants when a linked OpenBLAS read another (cmd_bench.cc).
void prepare_bench_process(int argc, char** argv);
#endif
#ifdef SPARSE24_HAVE_ENGINE
void register_run(CLI::App& app);
void register_profile(CLI::App& app);
void register_bench_bert(CLI::App& app);
void register_embed(CLI::App& app);        // cmd_embed.cc
void register_prune_model(CLI::App& app);  // cmd_prune_model.cc: prune-model, eval-embed, prune-experiment
void register_bench_model(CLI::App& app);  // cmd_embed.cc
void register_bench_embed(CLI::App& app);  // cmd_embed.cc
// generate, perplexity, logits, bench-decode (cmd_decode.cc)
void register_decode_commands(CLI::App& app);
// The checkout the tool was built from, whose scripts (bench/peers/, scripts/) bench-model, bench-decode and
// prune-experiment run; its venv's python unless SPARSE24_PYTHON names another (source_dir.cc).
std::string source_dir();
std::string default_python();
#endif
#ifdef SPARSE24_HAVE_TRAIN
void register_workflow(CLI::App& app);
void register_sweep(CLI::App& app);
void register_lm_experiment(CLI::App& app);  // cmd_lm_experiment.cc
void register_retrain(CLI::App& app);        // cmd_retrain.cc (needs the engine: SPARSE24_TRAIN_HAVE_ENGINE)
// Re-executes the process with OPENBLAS_CORETYPE set when argv names a training command (cmd_workflow.cc).
void prepare_training_process(int argc, char** argv);
// In `sparse24`: the training commands, listed in its help, run by executing sparse24-train beside it
// (main.cc).
inline constexpr const char* kTrainingCommands[][2] = {
    {"workflow", "Train dense, prune 2:4 once, retrain with the mask fixed, export, write DIR/report.md"},
    {"sweep", "Compare 2:4 with unstructured pruning at 50% and beyond"},
    {"lm-experiment", "One-shot 2:4 pruning methods on a byte-level transformer trained on the KJV"},
    {"retrain",
     "Retrain a 2:4-pruned sentence encoder with its masks fixed, distilled from the dense model"}};
#endif

}  // namespace sparse24::cli
