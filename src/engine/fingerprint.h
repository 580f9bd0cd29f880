// FNV-1a over bytes, for the models' fingerprints (plans are matched on them).
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

namespace sparse24::engine {

inline constexpr uint64_t kFnvBasis = 1469598103934665603ull;

inline uint64_t fnv1a(uint64_t h, const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

inline std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace sparse24::engine
