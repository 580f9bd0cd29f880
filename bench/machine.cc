#include "machine.h"

#include <immintrin.h>
#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>

#include "sparse24/spmm.h"

namespace sparse24::bench {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

constexpr long kProbeIters = 20000;
constexpr int kProbeChains = 24;  // independent FMA chains: enough to cover latency x 2 ports

// Horizontal sum through memory (GCC 12's _mm512_reduce_add_ps trips -Wuninitialized).
__attribute__((target("avx512f"))) float hsum512(__m512 v) {
  alignas(64) float out[16];
  _mm512_store_ps(out, v);
  float r = 0;
  for (float x : out) r += x;
  return r;
}

__attribute__((target("avx512f"), noinline)) float probe_avx512(long iters) {
  __m512 acc[kProbeChains];
  for (int i = 0; i < kProbeChains; ++i) acc[i] = _mm512_set1_ps(1.0f + static_cast<float>(i) * 1e-7f);
  const __m512 b = _mm512_set1_ps(0.9999999f);
  const __m512 c = _mm512_set1_ps(1e-7f);
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < kProbeChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], b, c);
  }
  __m512 s = acc[0];
  for (int i = 1; i < kProbeChains; ++i) s = _mm512_add_ps(s, acc[i]);
  return hsum512(s);
}

__attribute__((target("avx2,fma"), noinline)) float probe_avx2(long iters) {
  __m256 acc[kProbeChains];
  for (int i = 0; i < kProbeChains; ++i) acc[i] = _mm256_set1_ps(1.0f + static_cast<float>(i) * 1e-7f);
  const __m256 b = _mm256_set1_ps(0.9999999f);
  const __m256 c = _mm256_set1_ps(1e-7f);
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < kProbeChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], b, c);
  }
  __m256 s = acc[0];
  for (int i = 1; i < kProbeChains; ++i) s = _mm256_add_ps(s, acc[i]);
  alignas(32) float out[8];
  _mm256_store_ps(out, s);
  float r = 0;
  for (float v : out) r += v;
  return r;
}

__attribute__((noinline)) float probe_scalar(long iters) {
  float acc[8];
  for (int i = 0; i < 8; ++i) acc[i] = 1.0f + static_cast<float>(i) * 1e-7f;
  for (long it = 0; it < iters; ++it)
    for (float& a : acc) a = a * 0.9999999f + 1e-7f;
  float r = 0;
  for (float a : acc) r += a;
  return r;
}

// FLOPs one probe call performs.
double probe_flops(long iters) {
  if (cpu_has_avx512f()) return static_cast<double>(iters) * kProbeChains * 16 * 2;
  if (cpu_has_avx2_fma()) return static_cast<double>(iters) * kProbeChains * 8 * 2;
  return static_cast<double>(iters) * 8 * 2;
}

float run_probe(long iters) {
  if (cpu_has_avx512f()) return probe_avx512(iters);
  if (cpu_has_avx2_fma()) return probe_avx2(iters);
  return probe_scalar(iters);
}

__attribute__((target("avx512f"), noinline)) float sum_avx512(const float* p, size_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
  }
  float r = hsum512(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
  for (; i < n; ++i) r += p[i];
  return r;
}

__attribute__((target("avx2"), noinline)) float sum_avx2(const float* p, size_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
  }
  alignas(32) float out[8];
  _mm256_store_ps(out, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  float r = 0;
  for (float v : out) r += v;
  for (; i < n; ++i) r += p[i];
  return r;
}

float sum_floats(const float* p, size_t n) {
  if (cpu_has_avx512f()) return sum_avx512(p, n);
  if (cpu_has_avx2_fma()) return sum_avx2(p, n);
  float r = 0;
  for (size_t i = 0; i < n; ++i) r += p[i];
  return r;
}

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};

}  // namespace

std::string cpu_model() { return cpu_name(); }

bool cpu_has_avx512f() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

bool cpu_has_avx2_fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

const char* probe_isa() {
  if (cpu_has_avx512f()) return "avx512f";
  if (cpu_has_avx2_fma()) return "avx2";
  return "baseline";
}

double fma_probe_gflops(int threads) {
  double worst = 1e300;
  volatile float sink = 0;
#pragma omp parallel num_threads(threads) reduction(min : worst)
  {
    double t0 = now_s();
    float r = run_probe(kProbeIters);
    double dt = now_s() - t0;
    sink = r;
    worst = std::min(worst, probe_flops(kProbeIters) / std::max(dt, 1e-9) / 1e9);
  }
  (void)sink;
  return worst;
}

int procs_running() {
  std::ifstream in("/proc/stat");
  std::string key;
  long value = 0;
  while (in >> key) {
    if (key == "procs_running" && (in >> value)) return static_cast<int>(value);
    in.ignore(1 << 20, '\n');
  }
  return -1;
}

SchedSnapshot sched_snapshot() {
  SchedSnapshot s;
  rusage ru{};
  if (getrusage(RUSAGE_SELF, &ru) == 0) s.involuntary_switches = ru.ru_nivcsw;
  std::ifstream in("/proc/stat");
  std::string cpu;
  long v[8] = {};
  if (in >> cpu && cpu == "cpu") {
    for (long& x : v) in >> x;
    s.steal_ticks = v[7];  // user nice system idle iowait irq softirq steal
  }
  return s;
}

bool sched_disturbed(const SchedSnapshot& a, const SchedSnapshot& b, double wall_s) {
  const long switches = b.involuntary_switches - a.involuntary_switches;
  return switches > 2 + static_cast<long>(20 * wall_s) || b.steal_ticks > a.steal_ticks;
}

QuietGate::QuietGate(int threads, bool enabled) : threads_(threads), enabled_(enabled) {}

void QuietGate::calibrate() {
  for (int i = 0; i < 40; ++i) best_ = std::max(best_, fma_probe_gflops(threads_));
}

void QuietGate::wait() {
  if (!enabled_) return;
  // After a timeout the machine is known to be busy: give up sooner until a probe passes again, so that a
  // long busy spell costs minutes, not hours.
  const double limit = busy_ ? max_wait_s_ / 8 : max_wait_s_;
  double t0 = now_s();
  for (;;) {
    double g = fma_probe_gflops(threads_);
    best_ = std::max(best_, g);
    // Our own threads count as running (an OpenMP worker spins a while after a parallel region); one more
    // task is harmless while a core is free.
    const int allowed = threads_ + (omp_get_num_procs() > threads_ ? 1 : 0);
    const int running = procs_running();
    if (g >= fraction_ * best_ && running <= allowed) {
      busy_ = false;
      return;
    }
    ++waits_;
    if (now_s() - t0 > limit) {
      ++timeouts_;
      busy_ = true;
      return;
    }
    usleep(5000);
  }
}

Bandwidth measure_bandwidth(int threads, size_t bytes, int reps) {
  size_t n = bytes / sizeof(float) / 64 * 64;
  std::unique_ptr<float, FreeDeleter> a(static_cast<float*>(std::aligned_alloc(64, n * sizeof(float))));
  std::unique_ptr<float, FreeDeleter> b(static_cast<float*>(std::aligned_alloc(64, n * sizeof(float))));
  if (!a || !b) return {};
  float* pa = a.get();
  float* pb = b.get();
  // First touch by the threads that use the memory.
#pragma omp parallel for num_threads(threads) schedule(static)
  for (size_t i = 0; i < n; ++i) {
    pa[i] = 1.0f;
    pb[i] = 0.0f;
  }
  Bandwidth best;
  volatile float sink = 0;
  for (int r = 0; r < reps; ++r) {
    double t0 = now_s();
    float total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
      int t = omp_get_thread_num(), nt = omp_get_num_threads();
      size_t chunk = (n / nt) / 64 * 64;
      size_t begin = chunk * t, end = t == nt - 1 ? n : begin + chunk;
      total += sum_floats(pa + begin, end - begin);
    }
    double dt = now_s() - t0;
    sink = total;
    best.read_gbps = std::max(best.read_gbps, static_cast<double>(n) * sizeof(float) / dt / 1e9);

    t0 = now_s();
#pragma omp parallel num_threads(threads)
    {
      int t = omp_get_thread_num(), nt = omp_get_num_threads();
      size_t chunk = (n / nt) / 64 * 64;
      size_t begin = chunk * t, end = t == nt - 1 ? n : begin + chunk;
      std::memcpy(pb + begin, pa + begin, (end - begin) * sizeof(float));
    }
    dt = now_s() - t0;
    best.copy_gbps = std::max(best.copy_gbps, 2.0 * static_cast<double>(n) * sizeof(float) / dt / 1e9);
  }
  (void)sink;
  return best;
}

}  // namespace sparse24::bench
