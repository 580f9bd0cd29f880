#include "model_dir.h"

#include "sparse24/error.h"
#include "sparse24/io.h"
#include "sparse24/tensor.h"

namespace sparse24::model_dir {

Config read_config(const std::string& dir) {
  Config c;
  c.path = dir + "/model.json";
  c.raw = read_file(c.path);
  c.json = nlohmann::json::parse(c.raw.begin(), c.raw.end(), nullptr, /*allow_exceptions=*/false);
  auto bad = [&](const std::string& problem) { return Error(c.path + ": " + problem); };
  if (c.json.is_discarded() || !c.json.is_object()) throw bad("not a JSON object");
  const auto format = c.json.find("format");
  if (format == c.json.end() || *format != kFormat) throw bad(std::string("format is not ") + kFormat);
  const auto weights = c.json.find("weights");
  std::string name = "model.safetensors";
  if (weights != c.json.end()) {
    if (!weights->is_string()) throw bad("weights must be a file name in the same directory");
    name = weights->get<std::string>();
  }
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
    throw bad("weights must be a file name in the same directory");
  c.weights_path = dir + "/" + name;
  const auto pruned = c.json.find("pruned");
  c.pruned = pruned == c.json.end() ? nlohmann::json::object() : *pruned;
  if (!c.pruned.is_object()) throw bad("pruned must be an object");
  return c;
}

nlohmann::json pruned_entry(const std::vector<int64_t>& shape) {
  return {{"shape", shape}, {"pattern", "2:4"}, {"dtype", "float32"}};
}

bool Config::is_pruned(const std::string& name, const std::vector<int64_t>& shape) const {
  const auto it = pruned.find(name);
  if (it == pruned.end()) return false;
  const nlohmann::json& e = *it;
  if (!e.is_object() || e.value("pattern", nlohmann::json()) != "2:4" ||
      e.value("dtype", nlohmann::json()) != "float32" ||
      e.value("shape", nlohmann::json()) != nlohmann::json(shape))
    throw Error(path + ": pruned entry for '" + name + "' does not match the architecture " +
                shape_string(shape));
  return true;
}

}  // namespace sparse24::model_dir
