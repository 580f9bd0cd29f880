// Matrix transpose for the torch layout (SparseLinear): x [T, K] -> [K, T] into the kernel, Y [M, T] -> [T,
// M] out of it. An AVX2 8x8 block transpose when the CPU has AVX2 (chosen at run time: this file is compiled
// without ISA flags, the AVX2 function carries its own target attribute), else a blocked scalar loop.
#pragma once
#include <cstdint>

namespace sparse24::py {

// d[c * ldd + r] = s[r * lds + c] for r < rows, c < cols; OpenMP over `threads` threads.
void transpose(const float* s, int64_t rows, int64_t cols, int64_t lds, float* d, int64_t ldd, int threads);

}  // namespace sparse24::py
