#include <cstdio>
#include <exception>

#include "commands.h"

int main(int argc, char** argv) {
#ifdef SPARSE24_HAVE_TRAIN
  sparse24::cli::prepare_training_process(argc, argv);
#endif
#ifdef SPARSE24_HAVE_BENCH
  sparse24::cli::prepare_bench_process(argc, argv);
#endif
  CLI::App app{"sparse24: 2:4 structured sparsity for CPUs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "sparse24 0.1.0");
  sparse24::cli::register_prune(app);
  sparse24::cli::register_compress(app);
  sparse24::cli::register_decompress(app);
  sparse24::cli::register_inspect(app);
  sparse24::cli::register_demo(app);
  sparse24::cli::register_convert(app);
  sparse24::cli::register_export_gpu(app);
  sparse24::cli::register_bench_permute(app);
  sparse24::cli::register_tokenize(app);
#ifdef SPARSE24_HAVE_ENGINE
  sparse24::cli::register_run(app);
  sparse24::cli::register_profile(app);
  sparse24::cli::register_bench_bert(app);
  sparse24::cli::register_embed(app);
  sparse24::cli::register_prune_model(app);
  sparse24::cli::register_bench_model(app);
#endif
#ifdef SPARSE24_HAVE_BENCH
  sparse24::cli::register_bench(app);
#endif
#ifdef SPARSE24_HAVE_TRAIN
  sparse24::cli::register_workflow(app);
  sparse24::cli::register_sweep(app);
  sparse24::cli::register_lm_experiment(app);
#endif
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
