// The benchmark harness behind `sparse24 bench` and sparse24_gbench: the shapes, one problem per shape (a
// random 2:4 weight matrix and activations), the candidates (sparse24 and every dense baseline, each a
// callable that computes Y = W X from its own copies of the weights), the check of every candidate against
// the reference, and interleaved best-of-rounds timing.
//
// GFLOP/s are dense-equivalent for every method: 2*M*N*K / time (house style; the nonzero work of the 2:4
// multiply is half that, M*N*K, reported beside it for sparse24).
#pragma once
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "machine.h"
#include "sparse24/compressed.h"

namespace sparse24::bench {

struct Shape {
  int64_t m = 0, k = 0, n = 0;
  bool cold = false;  // weights rotated through copies that exceed the last-level cache
};
// "4096x4096x8 cold"
std::string shape_label(const Shape& s);
// Issue 3's shapes: BERT-base (M,K) in {(768,768),(3072,768),(768,3072)} x N in {128,512}; (4096,4096),
// (11008,4096) x N in {1,8,64,512}; and for N <= 8 the same again with cold weights.
std::vector<Shape> full_shapes();
// A few rows covering every code path (hot GEMM, hot GEMV, cold small-N) for a smoke test.
std::vector<Shape> quick_shapes();
// The rows `tokens` ask for (all of `predefined` when there are none). A token is "MxK" or "MxKxN",
// optionally followed by ":cold" or ":hot": it selects the predefined rows it matches, and an MxKxN token
// that matches none becomes a row of its own (cold, hot, or both without a suffix; e.g. a decoder's
// 576x1536x1). Throws Error on a bad token or when nothing is selected.
std::vector<Shape> select_shapes(const std::vector<Shape>& predefined,
                                 const std::vector<std::string>& tokens);

// 64-byte aligned floats.
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t n);
  float* data() const { return p_.get(); }
  size_t size() const { return n_; }
  float& operator[](size_t i) const { return p_.get()[i]; }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, Free> p_;
  size_t n_ = 0;
};

// One shape's operands: W is 2:4 (magnitude-pruned from uniform(-1,1)), X uniform(-1,1).
struct Problem {
  Shape shape;
  Buffer w;       // [M, K] row-major, the pruned dense weights every dense library multiplies
  Compressed wc;  // the same weights, compressed
  Compressed wq;  // N <= 16: the same weights as int8 with fp32 scales (quantize_int8, groups of 64); the
                  // bf16 and int8 candidates run on the rows that have it
  Buffer x;       // [K, N] row-major
  Buffer xt;      // [N, K] row-major (the "Linear" layout: one token per row)
};
Problem make_problem(const Shape& s, uint64_t seed);

// The weights a sparse24 candidate multiplies: fp32, bf16 (the fp32 Compressed packed with
// PackOptions::bf16_weights: the memory-bound layout in bf16) or int8 (Problem::wq). Dense methods: kF32.
enum class Weights { kF32, kBf16, kI8 };
const char* weights_name(Weights w);  // "fp32", "bf16", "int8"

// The activations a sparse24 candidate's kernels read: fp32, rounded to bf16 or to int8 (PackOptions).
enum class XAct { kF32, kBf16, kI8 };
const char* xact_name(XAct a);  // "fp32", "bf16", "int8"

struct Candidate {
  Candidate(std::string name_, std::string lib_, bool sparse_, bool y_transposed_, int copies_,
            double weight_bytes_, Buffer y_)
      : name(std::move(name_)),
        lib(std::move(lib_)),
        sparse(sparse_),
        y_transposed(y_transposed_),
        copies(copies_),
        weight_bytes(weight_bytes_),
        y(std::move(y_)) {}
  std::string name;  // e.g. "onednn_matmul_packed"
  std::string lib;   // "sparse24", "oneDNN", "OpenBLAS"
  bool sparse = false;
  bool variant = false;       // one kernel variant of sparse24 forced by name (--variants): not the row's
                              // sparse24 number, not a dense baseline
  bool y_transposed = false;  // writes Y^T [N, M] instead of Y [M, N]
  Weights weights = Weights::kF32;  // checked against the reference of these weights
  XAct x_act = XAct::kF32;          // X rounded to bf16 or int8 (PackOptions): that reference on it
  int copies = 1;                   // weight copies run() rotates through (1 when hot)
  double weight_bytes = 0;          // bytes of one weight copy in its format: dense fp32, or compressed 2:4
  double layout_bytes = 0;          // bytes of one copy as the method stores it (packed layouts), if known
  std::string calls;                // sparse24 through dispatch: the kernel calls it makes (spmm_plan)
  Buffer y;
  std::function<void(int copy)> run;
  std::shared_ptr<void> state;  // owns the copies and library objects run() uses
};

// Copies of the weights a candidate needs so that `cold_bytes` of them are in rotation (at least 2);
// 1 when cold_bytes is 0 (hot).
int copies_for(double bytes_per_copy, double cold_bytes);

struct BuildOptions {
  int threads = 1;
  double cold_bytes = 0;  // 0 = hot; else bytes of weight copies in rotation per method
  bool with_dense = true;
  bool with_sparse = true;
  bool variants = false;       // also every kernel variant of the list that runs this row (spmm_variant)
  std::string* log = nullptr;  // notes (library versions, skipped libraries, oneDNN impls) appended here
};
// sparse24 and every dense method that applies to the shape (a library that cannot be loaded is skipped
// with a note). Sets the thread count of every library first.
std::vector<Candidate> make_candidates(const Problem& p, const BuildOptions& o);

// The reference output on a subset of columns (all of them for small problems), and |W||X| as the scale
// for the tolerance.
struct Reference {
  std::vector<int64_t> cols;
  std::vector<float> y;       // [M, cols.size()]
  std::vector<float> scale;   // [M, cols.size()]: sum_k |w| |x|
  std::vector<float> y_bf16;  // [M, cols.size()] with the weights rounded to bf16 (when Problem::wq is set)
  std::vector<float> y_i8;    // [M, cols.size()] with the int8 weights (when Problem::wq is set)
  // y_bf16 and y_i8 on X rounded to bf16, y_i8 on X rounded to int8 (when Problem::wq is set and those
  // activations' kernels run).
  std::vector<float> y_bf16_xbf16, y_i8_xbf16, y_i8_xi8;
};
Reference make_reference(const Problem& p);

struct CheckResult {
  bool ok = false;
  double max_err = 0;  // worst |y - ref| / (scale + 1e-30) over the checked outputs
  std::string what;    // the first bad output, when not ok
};
// Fills the candidate's Y with NaN, runs it on `copy` and compares with the reference (relative to
// |W||X|: tolerance 1e-4, far above fp32 reordering error, far below any indexing mistake).
CheckResult check_candidate(Candidate& c, const Problem& p, const Reference& ref, int copy);

// Seconds per call: hot runs copy 0 repeatedly for at least min_time; cold runs passes over every copy
// (each call on a different copy) for at least min_time. disturbed: the scheduler gave the CPU to
// something else meanwhile (see sched_disturbed).
struct Timing {
  double seconds = 0;
  bool disturbed = false;
};
Timing time_candidate(Candidate& c, bool cold, double min_time);

struct MethodResult {
  std::string name, lib;
  bool sparse = false;
  bool variant = false;
  Weights weights = Weights::kF32;
  XAct x_act = XAct::kF32;
  bool ok = false;
  std::string error;
  double max_err = 0;
  double seconds = 0;                   // best over rounds (over undisturbed measurements if there is one)
  int measurements = 0, disturbed = 0;  // how many were taken, and how many of them disturbed
  bool all_disturbed = false;           // no undisturbed measurement: the number is unreliable
  std::string calls;                    // Candidate::calls
  double gflops = 0;                    // dense-equivalent: 2MNK / seconds
  double weight_gbps = 0;               // weight_bytes / seconds
  int copies = 1;
  double weight_bytes = 0;
  double layout_bytes = 0;
};

struct Row {
  Shape shape;
  int threads = 1;
  std::string isa;  // sparse24's active ISA
  std::vector<MethodResult> methods;
  std::string best_dense_lib;  // the fastest dense method's name ("" if none ran correctly)
  double best_dense_gflops = 0;
  bool sparse_ok = false;
  double sparse_gflops = 0;          // dense-equivalent
  double sparse_nonzero_gflops = 0;  // M*N*K / time
  double speedup = 0;                // sparse_gflops / best_dense_gflops (0 if not both)
  double bf16_gflops = 0;            // sparse24 with bf16 weights (N <= 16), dense-equivalent
  double bf16_speedup = 0;           // bf16_gflops / best_dense_gflops
  double int8_gflops = 0;            // sparse24 with int8 weights (N <= 16), dense-equivalent
  double int8_speedup = 0;           // int8_gflops / best_dense_gflops
  // The same with bf16 activations (PackOptions::bf16_activations; CPUs with AVX512_BF16), and int8 weights
  // with int8 activations (PackOptions::int8_activations; AVX512_VNNI and AVX512_VBMI).
  double bf16_xbf16_speedup = 0, int8_xbf16_speedup = 0, int8_xi8_speedup = 0;
  long gate_waits = 0, gate_timeouts = 0;
  bool disturbed = false;  // some method had only disturbed measurements
  int rounds = 0;
  double wall_s = 0;
  const MethodResult* find(const std::string& name) const;
};

struct RunOptions {
  int threads = 1;
  int rounds = 5;          // interleaved rounds; each candidate's best counts
  double min_time = 0.05;  // seconds per measurement
  double cold_bytes = 600e6;
  bool gate = true;
  bool variants = false;  // BuildOptions::variants
  int retries = 2;        // extra attempts when a measurement was disturbed (preempted)
  uint64_t seed = 24;
};

// Runs one shape: problem, candidates, checks, then `rounds` rounds over the candidates (round-robin, the
// starting candidate rotating), each measurement behind the quiet gate. Wrong candidates are not timed.
Row run_row(const Shape& s, const RunOptions& o, QuietGate& gate, std::string* log);

}  // namespace sparse24::bench
