// Errors: every failure the library reports is a sparse24::Error whose what() is one line naming the
// problem (the CLI prints it as "sparse24: error: <what>" and exits non-zero).
#pragma once
#include <stdexcept>
#include <string>

namespace sparse24 {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace sparse24
