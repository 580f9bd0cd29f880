// The exported model directory's model.json (docs/training.md, "Export"): the envelope that its writer and
// both of its readers share, the training library's exporter and reloader (src/train/export.cc) and the
// engine's loader (src/engine/model.cc). The architecture itself ("layers", ...) is each reader's own.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace sparse24::model_dir {

inline constexpr const char* kFormat = "sparse24-model";

struct Config {
  std::string path;          // DIR/model.json (messages name it)
  std::vector<uint8_t> raw;  // its bytes
  nlohmann::json json;       // the parsed object, its format checked
  std::string weights_path;  // DIR/<weights>: "weights" is a file name in DIR (default model.safetensors)
  nlohmann::json pruned;     // an object: weight name -> pruned_entry(shape)
  // Whether weight `name` is stored compressed (2:4 values + metadata); throws Error naming the file when
  // its entry does not describe a 2:4 float32 weight of `shape`.
  bool is_pruned(const std::string& name, const std::vector<int64_t>& shape) const;
};

// Reads DIR/model.json; throws Error for anything that is not a JSON object of this format, a "weights"
// that is not a plain file name, or a "pruned" that is not an object.
Config read_config(const std::string& dir);

// The "pruned" entry the exporter writes for a compressed weight of `shape`.
nlohmann::json pruned_entry(const std::vector<int64_t>& shape);

}  // namespace sparse24::model_dir
