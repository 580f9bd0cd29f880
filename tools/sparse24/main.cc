#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>

#include "commands.h"

namespace {

#ifdef SPARSE24_HAVE_TRAIN
// Runs a training command in sparse24-train (beside this executable), which links libtorch; returns only
// when that fails.
int exec_training(char** argv) {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::string train = (ec ? std::filesystem::path(argv[0]) : self).parent_path() / "sparse24-train";
  argv[0] = const_cast<char*>(train.c_str());
  execv(train.c_str(), argv);
  std::fprintf(stderr, "sparse24: error: cannot run %s: %s\n", train.c_str(), std::strerror(errno));
  return 1;
}
#endif

}  // namespace

int main(int argc, char** argv) {
#ifdef SPARSE24_HAVE_TRAIN
  if (argc >= 2)
    for (const auto& c : sparse24::cli::kTrainingCommands)
      if (std::strcmp(argv[1], c[0]) == 0) return exec_training(argv);
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
  sparse24::cli::register_bench_embed(app);
  sparse24::cli::register_decode_commands(app);
#endif
#ifdef SPARSE24_HAVE_BENCH
  sparse24::cli::register_bench(app);
#endif
#ifdef SPARSE24_HAVE_TRAIN
  for (const auto& c : sparse24::cli::kTrainingCommands)  // listed here, run by sparse24-train
    app.add_subcommand(c[0], std::string(c[1]) + " (sparse24-train)")->allow_extras();
#endif
  return sparse24::cli::run_app(app, argc, argv);
}
