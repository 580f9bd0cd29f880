#include "openblas.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "machine.h"

namespace sparse24::bench {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// The OpenMP variant first (it shares the OpenMP runtime with oneDNN and sparse24), then whatever
// libopenblas.so.0 the system's alternatives point at.
constexpr const char* kCandidates[] = {
    "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0",
    "libopenblas.so.0",
    "libopenblas.so",
};

// Set by reexec_with_wanted_openblas_coretype(): the environment's OPENBLAS_CORETYPE before it ("" = unset).
constexpr const char* kBeforeReexec = "SPARSE24_OPENBLAS_CORETYPE_BEFORE_REEXEC";

}  // namespace

const OpenBlas& OpenBlas::get() {
  static const OpenBlas* instance = [] {
    auto* o = new OpenBlas();
    o->load();
    return o;
  }();
  return *instance;
}

bool OpenBlas::core_as_expected() const {
  return expected_core_.empty() || lower(corename_) == lower(expected_core_);
}

void OpenBlas::set_threads(int n) const {
  if (set_threads_) set_threads_(n);
}

std::string wanted_openblas_coretype() {
  if (const char* forced = std::getenv("SPARSE24_OPENBLAS_CORETYPE"); forced && *forced) return forced;
  if (cpu_has_avx512f()) return "SKYLAKEX";
  if (cpu_has_avx2_fma()) return "HASWELL";
  return "";
}

void reexec_with_wanted_openblas_coretype(char** argv) {
  const std::string want = wanted_openblas_coretype();
  const char* now = std::getenv("OPENBLAS_CORETYPE");
  if (want.empty() || (now && want == now) || std::getenv(kBeforeReexec)) return;
  if (setenv(kBeforeReexec, now ? now : "", 1) != 0 || setenv("OPENBLAS_CORETYPE", want.c_str(), 1) != 0)
    return;
  execv("/proc/self/exe", argv);  // on failure: carry on; the report warns about the core
}

void OpenBlas::load() {
  // The environment of this machine may already name a core (e.g. OPENBLAS_CORETYPE=Haswell, which runs
  // AVX2 kernels at about half the AVX-512 speed here): the benchmark replaces it with the fastest core this
  // CPU runs, unless SPARSE24_OPENBLAS_CORETYPE asks for a specific one.
  const std::string want = wanted_openblas_coretype();
  // The name openblas_get_corename() reports for the core we ask for (a user's own choice: no expectation).
  if (want == "SKYLAKEX")
    expected_core_ = "SkylakeX";
  else if (want == "HASWELL")
    expected_core_ = "Haswell";
  if (const char* reexec = std::getenv(kBeforeReexec))
    coretype_before_ = reexec;  // the value before reexec_with_wanted_openblas_coretype()
  else if (const char* before = std::getenv("OPENBLAS_CORETYPE"))
    coretype_before_ = before;
  if (!want.empty()) setenv("OPENBLAS_CORETYPE", want.c_str(), /*overwrite=*/1);
  if (const char* env = std::getenv("OPENBLAS_CORETYPE")) coretype_env_ = env;

  void* handle = nullptr;
  for (const char* name : kCandidates) {
    if (void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD)) {
      preloaded_ = true;
      handle = h;
      path_ = name;
      break;
    }
  }
  if (!handle) {
    std::string errors;
    for (const char* name : kCandidates) {
      handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (handle) {
        path_ = name;
        break;
      }
      const char* e = dlerror();
      errors += std::string(errors.empty() ? "" : "; ") + (e ? e : name);
    }
    if (!handle) {
      error_ = "cannot load OpenBLAS: " + errors;
      return;
    }
  }
  auto sgemm = reinterpret_cast<SgemmFn>(dlsym(handle, "cblas_sgemm"));
  auto sgemv = reinterpret_cast<SgemvFn>(dlsym(handle, "cblas_sgemv"));
  auto set_threads = reinterpret_cast<void (*)(int)>(dlsym(handle, "openblas_set_num_threads"));
  auto corename = reinterpret_cast<char* (*)()>(dlsym(handle, "openblas_get_corename"));
  auto config = reinterpret_cast<char* (*)()>(dlsym(handle, "openblas_get_config"));
  if (!sgemm || !sgemv || !set_threads) {
    error_ = path_ + " lacks cblas_sgemm, cblas_sgemv or openblas_set_num_threads";
    return;
  }
  if (corename) corename_ = corename();
  if (config) config_ = config();
  set_threads_ = set_threads;
  sgemv_ = sgemv;
  sgemm_ = sgemm;  // last: ok() keys on it
}

}  // namespace sparse24::bench
