#include "train/cpu_env.h"

#include <malloc.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

namespace sparse24::train {

void reexec_with_openblas_coretype(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  __builtin_cpu_init();
  const char* core = nullptr;
  if (__builtin_cpu_supports("avx512f"))
    core = "SKYLAKEX";
  else if (__builtin_cpu_supports("avx2"))
    core = "HASWELL";
  if (core == nullptr) return;
  if (setenv("OPENBLAS_CORETYPE", core, 1) != 0) return;
  execv("/proc/self/exe", argv);
  // exec failed: carry on with whatever OpenBLAS picked.
}

void keep_freed_memory() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
}

}  // namespace sparse24::train
