// The bytes of a block of the ggml types the kernels read in place (include/sparse24/gguf.h's
// ggml_type_info has every type's): plain constants, for the ISA files and the plain headers alike.
#pragma once
#include <cstdint>

namespace sparse24::kernels {

constexpr int64_t kQ8Bytes = 34, kQ4KBytes = 144, kQ6Bytes = 210;  // per block of 32, 256, 256 values
constexpr int64_t kQ4_0Bytes = 18;                                 // per block of 32 (IQ4_NL's too)

}  // namespace sparse24::kernels
