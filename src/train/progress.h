// Per-epoch progress: a bar redrawn in place on a terminal (batches, loss, accuracy, ETA), one plain line
// per epoch otherwise (logs, CI).
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace sparse24::train {

class Progress {
 public:
  // `label` e.g. "dense 3/8"; `out` is where to print (a TTY check decides the style). `metric` names the
  // second number: "acc" is shown as a percentage, anything else (e.g. "cos") as it is.
  Progress(std::string label, int64_t batches, std::FILE* out = stdout, std::string metric = "acc");
  // After each batch: running mean loss and accuracy (0..1) of the epoch so far.
  void update(int64_t batch, double loss, double accuracy);
  // Ends the epoch's line; `extra` is appended (e.g. the test accuracy).
  void finish(const std::string& extra);
  double seconds() const;

 private:
  std::string metric_text(double value) const;
  std::string label_, metric_;
  int64_t batches_;
  std::FILE* out_;
  bool tty_;
  double loss_ = 0, accuracy_ = 0;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

// "1:05", "12:03:09".
std::string format_duration(double seconds);

}  // namespace sparse24::train
