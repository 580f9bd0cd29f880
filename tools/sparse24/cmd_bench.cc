// sparse24 bench: sparse24's multiply against the fastest dense libraries, measured in the same run.
#include <omp.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "dense.h"
#include "harness.h"
#include "machine.h"
#include "openblas.h"
#include "report.h"
#include "sparse24/error.h"
#include "sparse24/spmm.h"

namespace sparse24::cli {
namespace {

struct BenchOptions {
  int threads = 1;
  std::string json;
  bool quick = false;
  std::vector<std::string> shapes;
  int reps = 0;  // 0 = default (5, or 2 with --quick)
  double min_time = 0;
  double cold_mb = 600;
  bool no_gate = false;
  bool variants = false;
  bool verbose = false;
};

// The variables that change how the libraries run, as this process sees them.
std::string relevant_env() {
  std::string s;
  for (char** e = environ; *e; ++e) {
    std::string v = *e;
    for (const char* prefix : {"OMP_", "GOMP_", "KMP_", "OPENBLAS_", "DNNL_", "ONEDNN_", "SPARSE24_"})
      if (v.rfind(prefix, 0) == 0) s += " " + v;
  }
  return s.empty() ? " (none)" : s;
}

std::string today() {
  std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S %Z", std::localtime(&t));
  return buf;
}

void run_bench(const BenchOptions& o) {
  namespace b = sparse24::bench;
  // First of all: OpenBLAS must load with OPENBLAS_CORETYPE set (see bench/openblas.h).
  const b::OpenBlas& ob = b::OpenBlas::get();
  (void)ob;
  const std::vector<b::Shape> shapes =
      b::select_shapes(o.quick ? b::quick_shapes() : b::full_shapes(), o.shapes);

  b::RunOptions ro;
  ro.threads = o.threads;
  ro.rounds = o.reps > 0 ? o.reps : (o.quick ? 2 : 5);
  ro.min_time = o.min_time > 0 ? o.min_time : (o.quick ? 0.01 : 0.05);
  ro.cold_bytes = (o.quick ? 64.0 : o.cold_mb) * 1e6;
  ro.retries = o.quick ? 0 : 2;
  ro.gate = !o.no_gate && !o.quick;
  ro.variants = o.variants;

  omp_set_num_threads(o.threads);
  std::printf("sparse24 bench  %s\n", today().c_str());
  std::printf("cpu: %s, %d logical CPUs, vector ISA %s\n", b::cpu_model().c_str(), omp_get_num_procs(),
              b::probe_isa());
  std::printf("sparse24: ISA %s\n", isa_name(active_isa()));
  std::printf("%s\n%s\n", b::openblas_info().c_str(), b::onednn_info().c_str());
  std::printf("environment:%s\n", relevant_env().c_str());
  b::QuietGate gate(o.threads, ro.gate);
  gate.calibrate();
  std::printf("threads %d, %d interleaved rounds, >= %.3f s per measurement, quiet gate %s", o.threads,
              ro.rounds, ro.min_time, ro.gate ? "on" : "off");
  std::printf(" (FMA probe best %.1f GFLOP/s per thread)\n", gate.best_gflops());
  double stream_read = 0;
  if (!o.quick) {
    b::Bandwidth bw = b::measure_bandwidth(o.threads, size_t{512} << 20, 5);
    stream_read = bw.read_gbps;
    std::printf("memory, %d thread(s), 512 MiB arrays: read %.1f GB/s, copy %.1f GB/s (STREAM convention)\n",
                o.threads, bw.read_gbps, bw.copy_gbps);
  }
  std::printf("cold rows rotate >= %.0f MB of weight copies per method%s\n", ro.cold_bytes / 1e6,
              o.quick ? " (--quick: too few to leave the last-level cache; a smoke test only)" : "");
  std::printf("\n%s\n%s\n", b::table_legend().c_str(), b::table_header().c_str());
  std::fflush(stdout);

  nlohmann::json all = nlohmann::json::array();
  std::vector<std::string> wrong;
  for (const b::Shape& s : shapes) {
    std::string log;
    b::Row row = b::run_row(s, ro, gate, &log);
    if (o.verbose && !log.empty()) std::printf("%s", log.c_str());
    std::printf("%s\n%s", b::table_line(row).c_str(), b::row_notes(row, stream_read).c_str());
    std::fflush(stdout);
    for (const b::MethodResult& m : row.methods)
      if (!m.ok) wrong.push_back(m.name + " at " + b::shape_label(s) + " (" + m.error + ")");
    all.push_back(b::row_json(row));
    if (stream_read > 0) all.back()["stream_read_gbps"] = stream_read;
    if (!o.json.empty()) b::write_json_atomic(o.json, all);
  }
  if (!wrong.empty()) {
    std::string msg = std::to_string(wrong.size()) + " wrong result(s):";
    for (const std::string& w : wrong) msg += "\n  " + w;
    throw Error(msg);
  }
}

}  // namespace

void prepare_bench_process(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "bench") == 0) bench::reexec_with_wanted_openblas_coretype(argv);
}

void register_bench(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Benchmark sparse24's 2:4 multiply against oneDNN and OpenBLAS (dense-equivalent GFLOP/s)");
  cmd->add_option("--threads", o->threads, "Threads for every library (1 or 2 on this machine)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--json", o->json, "Also write the rows as JSON to FILE (atomically)");
  cmd->add_flag("--quick", o->quick, "A few small rows and short timing: a smoke test that runs in seconds");
  cmd->add_option(
      "--shapes", o->shapes,
      "Only rows matching any of: MxK, MxKxN, optionally with :cold or :hot (e.g. 4096x4096x1:cold); an "
      "MxKxN no row has is run as well (e.g. 576x1536x1:cold)");
  cmd->add_option("--reps", o->reps, "Interleaved rounds per row; each method's best counts (default 5)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--min-time", o->min_time, "Seconds per measurement (default 0.05)")
      ->check(CLI::Range(0.0, 60.0));
  cmd->add_option("--cold-mb", o->cold_mb, "MB of weight copies each method rotates through on cold rows")
      ->check(CLI::Range(1.0, 16000.0));
  cmd->add_flag("--variants", o->variants,
                "Also time every kernel variant of the list that runs each row (forced by name, s24:<name>)");
  cmd->add_flag("--no-gate", o->no_gate, "Do not wait for a quiet machine before each measurement");
  cmd->add_flag("--verbose", o->verbose, "Print library notes (oneDNN implementations) per row");
  cmd->callback([o] { run_bench(*o); });
}

}  // namespace sparse24::cli
