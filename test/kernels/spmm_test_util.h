// Helpers shared by the multiply tests (spmm_test.cc, spmm_dispatch_test.cc): the ISAs this CPU runs,
// random 2:4 matrices and packs, the edge sizes the suites sample.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/seed.h"
#include "sparse24/compressed.h"
#include "sparse24/error.h"
#include "sparse24/spmm.h"

namespace sparse24::testing {

// The ISAs this CPU runs, the reference first.
inline std::vector<Isa> isas_here() {
  std::vector<Isa> out;
  for (Isa i : {Isa::kRef, Isa::kAvx2, Isa::kAvx512})
    if (isa_supported(i)) out.push_back(i);
  return out;
}

// A random 2:4 matrix with some all-zero rows and groups.
inline Compressed random_24(std::mt19937_64& g, int64_t m, int64_t k, double zero_row = 0.1,
                            double zero_group = 0.1) {
  std::vector<float> w = random_floats(g, static_cast<size_t>(m * k));
  std::uniform_real_distribution<double> u(0, 1);
  for (int64_t r = 0; r < m; ++r) {
    const bool zr = u(g) < zero_row;
    for (int64_t c = 0; c < k; c += 4) {
      const bool zg = zr || u(g) < zero_group;
      for (int64_t j = c; j < c + 4 && j < k; ++j)
        if (zg) w[static_cast<size_t>(r * k + j)] = 0.f;
    }
  }
  return compress(Tensor::from_float(w, {m, k}), true);
}

// A random_24 matrix packed for `isa`, its weights fp32 (wt 0), bf16 (1) or int8 (2, scale groups of 64).
inline PackedMatrix random_pack(std::mt19937_64& g, Isa isa, int wt, PackLayouts layouts, int64_t m,
                                int64_t k) {
  const Compressed c = wt == 2 ? quantize_int8(random_24(g, m, k), 64) : random_24(g, m, k);
  PackOptions o;
  o.isa_set = true;
  o.isa = isa;
  o.bf16_weights = wt == 1;
  o.layouts = layouts;
  return pack(c, o);
}

// Sizes across the tiles' and panels' edges.
// Whether the named kernel variant reads the compute-bound (large-N) layout.
inline bool variant_is_large_n(const std::string& name) {
  for (const KernelVariantInfo& v : kernel_variants())
    if (v.name == name) return v.large_n;
  throw Error("no kernel variant '" + name + "'");
}

inline constexpr int64_t kEdges[] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11,  12,  13,
                                     14, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129};

}  // namespace sparse24::testing
