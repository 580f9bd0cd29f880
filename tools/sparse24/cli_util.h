// Small helpers shared by the text-model commands (embed, prune-model, eval-embed, prune-experiment).
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "commands.h"
#include "sparse24/decoder.h"
#include "sparse24/engine.h"
#include "sparse24/error.h"
#include "sparse24/io.h"

namespace sparse24::cli {

// Ctrl-C (SIGINT) or SIGTERM while a long command writes its output: the first asks it to stop (stop_asked()
// turns true; the command throws at its next step, so its temporary output is removed as on any error), a
// second ends the process at once.
inline std::atomic<bool> g_stop_asked{false};
extern "C" inline void on_stop_signal(int sig) {
  if (g_stop_asked.exchange(true)) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  static const char msg[] =
      "\nstopping after the current step (again to quit at once, leaving its temporary files)\n";
  (void)!::write(2, msg, sizeof msg - 1);
}
inline void stop_on_signals() {
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}
inline bool stop_asked() { return g_stop_asked.load(); }

// An encoder's 2:4 Linears in a narrower type (engine::set_sparse_precision): embed's and eval-embed's flags.
struct EncoderPrecisionFlags {
  bool bf16 = false, int8 = false, bf16_act = false, int8_act = false;
  void add_to(CLI::App* cmd) {
    CLI::Option* b = cmd->add_flag(
        "--bf16", bf16, "the 2:4 Linears' values held as bfloat16 (half the bytes a short input streams)");
    cmd->add_flag("--int8", int8,
                  "the 2:4 Linears' values held as int8 with an fp32 scale per 64 positions (a quarter of "
                  "the bytes)")
        ->excludes(b);
    CLI::Option* xb = cmd->add_flag(
        "--bf16-activations", bf16_act,
        "with --bf16 or --int8: the 2:4 Linears round their inputs to bfloat16 on AMD CPUs with "
        "AVX512_BF16 (faster at short inputs; not on Intel's, where fp32 ones are; docs/accuracy.md)");
    cmd->add_flag("--int8-activations", int8_act,
                  "with --int8: the 2:4 Linears quantise their inputs to int8 per 64 positions and multiply "
                  "in integers on CPUs with AVX512_VNNI and AVX512_VBMI (faster at short inputs; "
                  "docs/accuracy.md)")
        ->excludes(xb);
  }
  engine::SparseActivations activations() const {
    return int8_act   ? engine::SparseActivations::kInt8
           : bf16_act ? engine::SparseActivations::kBf16
                      : engine::SparseActivations::kF32;
  }
  engine::SparseValues values() const {
    return int8   ? engine::SparseValues::kInt8
           : bf16 ? engine::SparseValues::kBf16
                  : engine::SparseValues::kF32;
  }
  void apply(engine::TextEncoder::Options& o) const {
    if (bf16_act && !bf16 && !int8) throw sparse24::Error("--bf16-activations needs --bf16 or --int8");
    if (int8_act && !int8) throw sparse24::Error("--int8-activations needs --int8");
    o.sparse_values = values();
    o.sparse_activations = activations();
  }
};

// A `--text S...` option: any number of texts, each taken as it is (CLI11 would otherwise split a value
// written "[a, b]" into the list a, b for an option taking several values).
inline CLI::Option* add_texts_option(CLI::App* cmd, const std::string& name, std::vector<std::string>& texts,
                                     const std::string& help) {
  return cmd->add_option(name, texts, help)->allow_extra_args(false)->expected(1, 1 << 20);
}

// The lines of a text file (a trailing \r dropped; a last line without \n kept).
inline std::vector<std::string> read_lines(const std::string& path) {
  const std::vector<uint8_t> b = read_file(path);
  std::vector<std::string> lines;
  std::string cur;
  for (uint8_t c : b) {
    if (c == '\n') {
      if (!cur.empty() && cur.back() == '\r') cur.pop_back();
      lines.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(static_cast<char>(c));
    }
  }
  if (!cur.empty()) lines.push_back(cur);
  return lines;
}

// s in single quotes for a shell command line.
inline std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs a shell command (shown on stderr as "what: cmd"); an Error naming it when it fails.
inline void run_or_throw(const std::string& cmd, const char* what) {
  std::fprintf(stderr, "%s: %s\n", what, cmd.c_str());
  std::fflush(nullptr);
  const int rc = std::system(cmd.c_str());
  if (rc != 0)
    throw Error(std::string(what) + " failed (exit " + std::to_string(WEXITSTATUS(rc)) + "): " + cmd);
}

// At most n lines spread evenly over the file (all of them when n <= 0 or n >= their count), in order.
inline std::vector<std::string> spread_lines(const std::vector<std::string>& lines, int64_t n) {
  const int64_t total = static_cast<int64_t>(lines.size());
  if (n <= 0 || n >= total) return lines;
  std::vector<std::string> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(lines[static_cast<size_t>(i * total / n)]);
  return out;
}

// One line on a terminal, redrawn: done/total, rate and time left.
class Progress {
 public:
  Progress(std::string what, int64_t total) : what_(std::move(what)), total_(total), t0_(Clock::now()) {}
  void update(int64_t done) {
    const double s = ms_since(t0_) / 1000;
    if (s - last_ < 0.5 && done < total_) return;
    last_ = s;
    const double rate = done / std::max(s, 1e-9);
    std::fprintf(stderr, "\r%s %lld/%lld  %.1f/s  %.0f s left   ", what_.c_str(),
                 static_cast<long long>(done), static_cast<long long>(total_), rate,
                 (total_ - done) / std::max(rate, 1e-9));
    if (done >= total_) std::fprintf(stderr, "\n");
  }

 private:
  std::string what_;
  int64_t total_;
  Clock::time_point t0_;
  double last_ = -1;
};

}  // namespace sparse24::cli
