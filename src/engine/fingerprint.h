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

// FNV-1a over 8-byte words in four interleaved lanes (word i into lane i % 4, joined by FNV steps), then
// the last words and the tail bytes: a different hash from fnv1a's, whose four multiply chains run side by
// side (a gigabyte of weights in about 0.1 s instead of one chain's latency per word). FnvWords takes the
// bytes a piece at a time (every piece but the last a multiple of 32 bytes), for a mapped tensor hashed
// without being resident whole.
class FnvWords {
 public:
  explicit FnvWords(uint64_t h) : lane_{h, h ^ 1, h ^ 2, h ^ 3} {}
  void add(const uint8_t* p, size_t n) {  // n: a multiple of 32
    for (size_t i = 0; i + 32 <= n; i += 32)
      for (int k = 0; k < 4; ++k) {
        uint64_t w;
        std::memcpy(&w, p + i + 8 * k, 8);
        lane_[k] = (lane_[k] ^ w) * kPrime;
      }
  }
  uint64_t finish(const uint8_t* p, size_t n) {  // the last piece, any length
    const size_t whole = n / 32 * 32;
    add(p, whole);
    uint64_t h = lane_[0];
    for (int k = 1; k < 4; ++k) h = (h ^ lane_[k]) * kPrime;
    size_t i = whole;
    for (; i + 8 <= n; i += 8) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      h = (h ^ w) * kPrime;
    }
    return fnv1a(h, p + i, n - i);
  }

 private:
  static constexpr uint64_t kPrime = 1099511628211ull;
  uint64_t lane_[4];
};

inline uint64_t fnv1a_words(uint64_t h, const uint8_t* p, size_t n) { return FnvWords(h).finish(p, n); }

// The loaders' fingerprint step per tensor, as it is taken: its name, then its stored bytes.
inline uint64_t fnv1a_tensor(uint64_t h, const std::string& name, const uint8_t* p, size_t n) {
  h = fnv1a(h, reinterpret_cast<const uint8_t*>(name.data()), name.size());
  return fnv1a_words(h, p, n);
}

inline std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace sparse24::engine
