// Process setup for training: Debian's OpenBLAS (libtorch's BLAS) misdetects this CPU family and runs SSE3
// code unless OPENBLAS_CORETYPE is in the environment when the library loads, which is before main() runs.
#pragma once

namespace sparse24::train {

// If OPENBLAS_CORETYPE is unset and the CPU has AVX-512F (SKYLAKEX) or AVX2 (HASWELL), sets it and
// re-executes /proc/self/exe with the same argv (so the dynamic loader starts OpenBLAS with the right
// kernels). Returns normally when nothing needs doing or exec fails (training then just runs slower).
void reexec_with_openblas_coretype(char** argv);

// glibc returns freed blocks above 128 KB to the kernel (munmap / heap trim), so every training step's
// multi-megabyte activations come back as fresh pages and page faults took more time than the arithmetic.
// Raises the mmap threshold to its maximum (32 MB) and the trim threshold to 1 GB so those blocks are reused.
void keep_freed_memory();

// Cores this process may run on (sched_getaffinity), at least 1.
int usable_cores();

}  // namespace sparse24::train
