// 2 MB pages for large buffers, where the kernel gives them on request (transparent huge pages in "madvise"
// mode): a buffer the kernels stream or a loader fills is then faulted in once per 2 MB, not per 4 KB.
#pragma once
#include <sys/mman.h>

#include <cstddef>
#include <cstdint>

namespace sparse24::kernels {

inline constexpr size_t kHugePage = size_t{2} << 20;

// Asks for 2 MB pages over the whole 2 MB pages inside [p, p + bytes). Advice only: failure changes nothing.
inline void advise_huge_pages(void* p, size_t bytes) {
#ifdef MADV_HUGEPAGE
  const auto at = reinterpret_cast<uintptr_t>(p);
  const uintptr_t first = (at + kHugePage - 1) / kHugePage * kHugePage,
                  last = (at + bytes) / kHugePage * kHugePage;
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
#else
  (void)p;
  (void)bytes;
#endif
}

// Room for n elements in an empty vector v, on 2 MB pages when it is large (4 of them or more): a loader's
// weights, filled once.
template <class V>
void reserve_huge(V& v, size_t n) {
  v.reserve(n);
  if (n * sizeof(v[0]) >= 4 * kHugePage) advise_huge_pages(v.data(), n * sizeof(v[0]));
}
// v resized to n (value-initialized) elements, a large empty one on 2 MB pages: a loader's weights, or a
// table the decoder streams at every token (the head: on 4 KB pages Llama 3.2 1B's shape decoded 8% slower
// on an Intel Xeon model 207, its 280 MB int8 table read through 70,000 of them a token).
template <class V>
void resize_huge(V& v, size_t n) {
  if (v.empty()) reserve_huge(v, n);
  v.resize(n);
}

}  // namespace sparse24::kernels
