#include "train/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace sparse24::train {

std::string format_duration(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

Progress::Progress(std::string label, int64_t batches, std::FILE* out, std::string metric)
    : label_(std::move(label)),
      metric_(std::move(metric)),
      batches_(batches),
      out_(out),
      tty_(isatty(fileno(out)) != 0),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

double Progress::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::string Progress::metric_text(double value) const {
  char buf[64];
  if (metric_ == "acc")
    std::snprintf(buf, sizeof buf, "acc %.2f%%", 100 * value);
  else
    std::snprintf(buf, sizeof buf, "%s %.4f", metric_.c_str(), value);
  return buf;
}

void Progress::update(int64_t batch, double loss, double accuracy) {
  loss_ = loss;
  accuracy_ = accuracy;
  if (!tty_) return;
  const auto now = std::chrono::steady_clock::now();
  if (batch < batches_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * batch / std::max<int64_t>(batches_, 1));
  std::string bar(static_cast<size_t>(filled), '=');
  if (filled < kWidth) bar += '>';
  bar.resize(kWidth, ' ');
  const double elapsed = seconds();
  const double eta =
      batch > 0 ? elapsed * static_cast<double>(batches_ - batch) / static_cast<double>(batch) : 0;
  std::fprintf(out_, "\r%s [%s] %lld/%lld loss %.4f %s ETA %s ", label_.c_str(), bar.c_str(),
               static_cast<long long>(batch), static_cast<long long>(batches_), loss,
               metric_text(accuracy).c_str(), format_duration(eta).c_str());
  std::fflush(out_);
}

void Progress::finish(const std::string& extra) {
  if (tty_) std::fprintf(out_, "\r\033[K");
  std::fprintf(out_, "%s: %lld batches, loss %.4f, train %s, %s%s\n", label_.c_str(),
               static_cast<long long>(batches_), loss_, metric_text(accuracy_).c_str(),
               format_duration(seconds()).c_str(), extra.empty() ? "" : (", " + extra).c_str());
  std::fflush(out_);
}

}  // namespace sparse24::train
