// FNV-1a over bytes, for the models' fingerprints (plans are matched on them).
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace sparse24::engine {

inline constexpr uint64_t kFnvBasis = 1469598103934665603ull;

inline uint64_t fnv1a(uint64_t h, const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// FNV-1a over 8-byte words (then the tail bytewise): a different hash from fnv1a's, eight times fewer steps
// for multi-gigabyte weights.
inline uint64_t fnv1a_words(uint64_t h, const uint8_t* p, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ull;
  }
  return fnv1a(h, p + i, n - i);
}

inline std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace sparse24::engine
