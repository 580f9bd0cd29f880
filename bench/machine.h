// What the benchmark needs to know and measure about the machine: CPU name and features, a per-thread FMA
// probe (for the quiet gate and the peak), and STREAM-like memory bandwidth.
#pragma once
#include <cstddef>
#include <string>

namespace sparse24::bench {

// sparse24::cpu_name() (spmm.h): "model name" from /proc/cpuinfo with the CPU family and model.
std::string cpu_model();
bool cpu_has_avx512f();
bool cpu_has_avx2_fma();
// "avx512f", "avx2" or "baseline": the widest vector ISA the FMA probe and the bandwidth loops use.
const char* probe_isa();

// Runs a register-only multiply-add loop on `threads` OpenMP threads at once (about 0.2 ms each) and
// returns the slowest thread's rate in GFLOP/s (2 per FMA lane).
double fma_probe_gflops(int threads);

// Runnable tasks on the machine right now (procs_running in /proc/stat), -1 if unknown.
int procs_running();

// What the scheduler did to this process over an interval: involuntary context switches (another task
// took the CPU) and the machine's steal time (the host took it), from getrusage and /proc/stat.
struct SchedSnapshot {
  long involuntary_switches = 0;
  long steal_ticks = 0;
};
SchedSnapshot sched_snapshot();
// True if the interval between a and b (lasting wall_s seconds) was disturbed: more involuntary switches
// than a few per second of kernel housekeeping, or any steal time.
bool sched_disturbed(const SchedSnapshot& a, const SchedSnapshot& b, double wall_s);

// Waits before each timed measurement until every thread of the probe runs near the best rate seen so far:
// the host sometimes shares these vCPUs, and a measurement taken while it does says nothing about the code.
class QuietGate {
 public:
  // threads: how many threads the timed code uses. enabled=false makes wait() a no-op.
  QuietGate(int threads, bool enabled);
  // Calibrates the reference rate (best of a few dozen probes).
  void calibrate();
  // Returns once no other task is runnable beyond what the free cores absorb and a probe reaches
  // `fraction` of the best rate seen, or after max_wait_s (a timeout).
  void wait();
  double best_gflops() const { return best_; }
  long waits() const { return waits_; }        // probes that found the machine busy
  long timeouts() const { return timeouts_; }  // measurements taken although the machine stayed busy
  void reset_counters() { waits_ = timeouts_ = 0; }
  bool enabled() const { return enabled_; }

 private:
  int threads_;
  bool enabled_;
  double best_ = 0;
  double fraction_ = 0.9;
  double max_wait_s_ = 2.0;
  long waits_ = 0;
  long timeouts_ = 0;
  bool busy_ = false;
};

struct Bandwidth {
  double read_gbps = 0;  // sum over a large array: bytes read / time
  double copy_gbps = 0;  // STREAM "copy" convention: (bytes read + bytes written) / time
};
// Best of `reps` passes over arrays of `bytes` each (use >> the last-level cache), `threads` threads.
Bandwidth measure_bandwidth(int threads, size_t bytes, int reps);

}  // namespace sparse24::bench
