// OpenBLAS, loaded at run time so that it runs the code for this CPU.
//
// Debian's OpenBLAS 0.3.21 does not recognise newer CPUs and falls back to SSE3 kernels (about 30 GFLOP/s
// instead of 150+) unless OPENBLAS_CORETYPE names a core before the library initialises. A linked
// libopenblas initialises before main(), so the benchmark does not link it: load() sets OPENBLAS_CORETYPE
// (SKYLAKEX on a CPU with avx512f, HASWELL with avx2, replacing any other value in the environment;
// SPARSE24_OPENBLAS_CORETYPE=NAME picks another on purpose), then dlopen()s the OpenMP variant and
// resolves the few symbols it needs. openblas_get_corename() then tells which kernels it picked, and the
// benchmark prints it and warns when it is not the expected one.
#pragma once
#include <string>

namespace sparse24::bench {

// The OPENBLAS_CORETYPE the benchmark wants: SPARSE24_OPENBLAS_CORETYPE if set, else SKYLAKEX on a CPU
// with avx512f, HASWELL with avx2, else "" (no opinion).
std::string wanted_openblas_coretype();

// For an executable that links libopenblas (through libtorch): OpenBLAS has read OPENBLAS_CORETYPE before
// main(), so when it differs from wanted_openblas_coretype() this re-executes the process once with it set
// (remembering the environment's value for the report). Returns only when no re-exec was needed or it
// failed.
void reexec_with_wanted_openblas_coretype(char** argv);

class OpenBlas {
 public:
  // Row-major cblas with 32-bit integers (Debian's libopenblas0-openmp).
  enum Order { kRowMajor = 101 };
  enum Trans { kNoTrans = 111, kTrans = 112 };
  using SgemmFn = void (*)(int order, int transa, int transb, int m, int n, int k, float alpha,
                           const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc);
  using SgemvFn = void (*)(int order, int trans, int m, int n, float alpha, const float* a, int lda,
                           const float* x, int incx, float beta, float* y, int incy);

  // Loads the library once per process (thread-safe); never throws. Check ok().
  static const OpenBlas& get();

  bool ok() const { return sgemm_ != nullptr; }
  const std::string& error() const { return error_; }        // why it is not ok
  const std::string& path() const { return path_; }          // the file that was loaded
  const std::string& corename() const { return corename_; }  // openblas_get_corename()
  const std::string& config() const { return config_; }      // openblas_get_config()
  // The OPENBLAS_CORETYPE in effect when it loaded ("" if none), and the one the environment had before.
  const std::string& coretype_env() const { return coretype_env_; }
  const std::string& coretype_before() const { return coretype_before_; }
  // The core OpenBLAS should report on this CPU ("SkylakeX", "Haswell", or "" if no expectation), and
  // whether it does (case-insensitive).
  const std::string& expected_core() const { return expected_core_; }
  bool core_as_expected() const;
  // True if libopenblas was already in the process before load() (then OPENBLAS_CORETYPE came too late).
  bool was_preloaded() const { return preloaded_; }

  void set_threads(int n) const;
  void sgemm(int transa, int transb, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
             float* c, int ldc) const {
    sgemm_(kRowMajor, transa, transb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
  }
  void sgemv(int m, int n, const float* a, int lda, const float* x, float* y) const {
    sgemv_(kRowMajor, kNoTrans, m, n, 1.0f, a, lda, x, 1, 0.0f, y, 1);
  }

 private:
  OpenBlas() = default;
  void load();

  SgemmFn sgemm_ = nullptr;
  SgemvFn sgemv_ = nullptr;
  void (*set_threads_)(int) = nullptr;
  std::string error_, path_, corename_, config_, coretype_env_, coretype_before_, expected_core_;
  bool preloaded_ = false;
};

}  // namespace sparse24::bench
