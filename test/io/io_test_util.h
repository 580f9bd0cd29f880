// Helpers for the io tests: a scratch directory, random tensors, and an assertion that a statement throws a
// one-line sparse24::Error containing a phrase.
#pragma once
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "sparse24/error.h"
#include "sparse24/tensor.h"

namespace sparse24::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with its content at scope exit.
class TempDir {
 public:
  TempDir() {
    std::string base = std::filesystem::temp_directory_path() / "sparse24-io-XXXXXX";
    if (!mkdtemp(base.data())) throw std::runtime_error("mkdtemp failed");
    path_ = base;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  // Names of the entries in the directory, sorted.
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path_))
      out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  std::filesystem::path path_;
};

inline std::vector<uint8_t> random_bytes(std::mt19937_64& g, size_t n) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(g());
  return v;
}

inline int64_t product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// A tensor of random bit patterns (NaNs included): round trips must keep every bit.
inline Tensor random_tensor(std::mt19937_64& g, DType dtype, std::vector<int64_t> shape) {
  Tensor t;
  t.dtype = dtype;
  t.bytes = random_bytes(g, static_cast<size_t>(product(shape)) * dtype_size(dtype));
  t.shape = std::move(shape);
  return t;
}

inline std::vector<uint8_t> to_bytes(const std::string& s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

}  // namespace sparse24::testing

// Expects `stmt` to throw sparse24::Error whose one-line message contains `phrase`.
#define EXPECT_ERROR(stmt, phrase)                                                                  \
  do {                                                                                              \
    try {                                                                                           \
      stmt;                                                                                         \
      ADD_FAILURE() << "no sparse24::Error thrown; expected one containing \"" << (phrase) << "\""; \
    } catch (const ::sparse24::Error& e_) {                                                         \
      const std::string msg_ = e_.what();                                                           \
      EXPECT_NE(msg_.find(phrase), std::string::npos) << "message: " << msg_;                       \
      EXPECT_EQ(msg_.find('\n'), std::string::npos) << "message is not one line: " << msg_;         \
    }                                                                                               \
  } while (0)
