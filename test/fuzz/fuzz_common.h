// Shared by the libFuzzer harnesses: a failed invariant aborts (libFuzzer records the input as a crash).
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#define FUZZ_CHECK(cond)                                                                \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                     \
    }                                                                                   \
  } while (0)

// Writes a harness's scratch file plainly (write_file_atomic syncs to disk, which made each run take up to
// a second).
inline void put_file(const std::string& path, const uint8_t* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
}

// Writes a template directory (file name -> bytes, hf_template.h) into dir with the file `target` replaced
// by data[0, size); the shard index only when it is the target (a directory without one otherwise).
inline void put_dir(const std::string& dir, const std::map<std::string, std::vector<uint8_t>>& files,
                    const std::string& target, const uint8_t* data, size_t size) {
  const std::string index = "model.safetensors.index.json";
  std::filesystem::remove(dir + "/" + index);
  for (const auto& [name, bytes] : files) {
    if (name == index && target != name) continue;
    if (name == target)
      put_file(dir + "/" + name, data, size);
    else
      put_file(dir + "/" + name, bytes.data(), bytes.size());
  }
}
