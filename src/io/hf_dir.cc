// Hugging Face checkpoint directories (hf_dir.h).
#include "sparse24/hf_dir.h"

#include <unistd.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>

#include "io_util.h"
#include "sparse24/bitmask24.h"
#include "sparse24/error.h"
#include "sparse24/io.h"

namespace sparse24 {
namespace {

namespace fs = std::filesystem;
using io_detail::fail;
using io_detail::printable;

constexpr const char* kWeights = "model.safetensors";
constexpr const char* kIndex = "model.safetensors.index.json";

std::string read_text(const std::string& path) {
  const std::vector<uint8_t> b = read_file(path);
  return std::string(b.begin(), b.end());
}

// A shard name from the index: a plain file name in the directory (no separators, not "." or "..").
bool plain_file_name(const std::string& s) {
  return !s.empty() && s.size() < 256 && s != "." && s != ".." && s.find('/') == std::string::npos &&
         s.find('\\') == std::string::npos && s.find('\0') == std::string::npos;
}

std::vector<std::string> shard_names(const std::string& dir) {
  const std::string index = dir + "/" + kIndex;
  if (fs::exists(index)) {
    const nlohmann::json j = nlohmann::json::parse(read_text(index), nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      fail(index, "not a shard index (a JSON object with a \"weight_map\" object)");
    std::set<std::string> names;
    for (const auto& [tensor, file] : j["weight_map"].items()) {
      if (!file.is_string() || !plain_file_name(file.get<std::string>()))
        fail(index,
             "tensor '" + printable(tensor) + "' maps to a shard that is not a file name in the directory");
      names.insert(file.get<std::string>());
    }
    if (names.empty()) fail(index, "the weight_map is empty");
    return {names.begin(), names.end()};
  }
  if (fs::exists(dir + "/" + kWeights)) return {kWeights};
  if (fs::exists(dir + "/pytorch_model.bin"))
    fail(dir,
         "holds only pytorch_model.bin (a pickle, which sparse24 never loads): convert it once with "
         "transformers (model.save_pretrained(dir, safe_serialization=True)) to model.safetensors");
  fail(dir, "no model.safetensors or model.safetensors.index.json");
}

}  // namespace

MappedHfDir map_hf_dir(const std::string& dir) {
  MappedHfDir d;
  d.dir = dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail(dir, "not a directory");
  const std::string config = dir + "/config.json";
  if (!fs::exists(config)) fail(dir, "no config.json");
  d.config_json = read_text(config);
  const nlohmann::json cj = nlohmann::json::parse(d.config_json, nullptr, false);
  if (cj.is_discarded() || !cj.is_object()) fail(config, "not a JSON object");
  const auto sc = parse_sparsity_config(d.config_json, config);

  std::set<std::string> seen;
  for (const std::string& name : shard_names(dir)) {
    const std::string path = dir + "/" + name;
    d.shards.push_back(path);
    d.files.push_back(std::make_unique<MappedSafeTensors>(path));
    const MappedSafeTensors& st = *d.files.back();
    if (!find_bitmask24_layers(st.view, path).empty() && sc &&
        (sc->format != kBitmask24Format || sc->sparsity_structure != "2:4"))
      fail(config, "sparsity_config says format '" + printable(sc->format) + "', structure '" +
                       printable(sc->sparsity_structure) + "', but " + name +
                       " holds sparse-24-bitmask layers");
    CheckpointView part = read_checkpoint_view(st.view, path);
    for (CheckpointTensorView& t : part.tensors) {
      if (!seen.insert(t.name).second)
        fail(path, "tensor '" + printable(t.name) + "' is in more than one shard");
      d.tensors.push_back({std::move(t), &st.file});
    }
    d.metadata.insert(part.metadata.begin(), part.metadata.end());
  }
  return d;
}

HfDir read_hf_dir(const std::string& dir) {
  MappedHfDir m = map_hf_dir(dir);
  HfDir d;
  d.dir = std::move(m.dir);
  d.config_json = std::move(m.config_json);
  d.shards = std::move(m.shards);
  d.weights.metadata = std::move(m.metadata);
  for (MappedHfDir::Tensor& x : m.tensors) d.weights.tensors.push_back(std::move(x.t).copy());
  return d;
}

std::optional<std::string> config_for_layout(const std::optional<std::string>& config_json,
                                             const Checkpoint& weights, CheckpointFormat to,
                                             const std::string& what) {
  std::vector<std::string> sparse_prefixes;
  for (const CheckpointTensor& t : weights.tensors)
    if (to == CheckpointFormat::kBitmask24 && bitmask24_keeps_sparse(t))
      sparse_prefixes.push_back(bitmask24_prefix(t.name));
  if (!sparse_prefixes.empty()) {
    SparsityConfig sc;
    sc.targets = sparse_prefixes;
    sc.global_sparsity = zero_fraction(weights);
    return with_sparsity_config(config_json.value_or(""), sc, what);
  }
  if (config_json && parse_sparsity_config(*config_json, what))
    return with_sparsity_config(*config_json, std::nullopt, what);
  return config_json;
}

void write_hf_dir(const HfDir& src, const Checkpoint& weights, CheckpointFormat to,
                  const std::string& out_dir, const std::map<std::string, std::string>& files) {
  std::error_code ec;
  if (fs::exists(out_dir, ec)) fail(out_dir, "already exists (give a new directory)");
  const fs::path out = fs::path(out_dir);
  const fs::path tmp = out.parent_path() / (out.filename().string() + ".tmp." + std::to_string(::getpid()));
  fs::remove_all(tmp, ec);
  try {
    fs::create_directories(tmp);
    std::set<std::string> skip = {"config.json", kWeights, kIndex};
    for (const std::string& s : src.shards) skip.insert(fs::path(s).filename().string());
    for (const auto& [name, text] : files) skip.insert(name);
    if (!src.dir.empty())
      for (const fs::directory_entry& e : fs::directory_iterator(src.dir)) {
        const std::string name = e.path().filename().string();
        if (skip.count(name) || name == "plan.json") continue;
        if (e.is_directory())
          fs::copy(e.path(), tmp / name, fs::copy_options::recursive);
        else if (e.is_regular_file())
          fs::copy_file(e.path(), tmp / name);
      }
    for (const auto& [name, text] : files) write_file_atomic((tmp / name).string(), text);
    write_safetensors((tmp / kWeights).string(), encode_checkpoint(weights, to));
    const auto config = config_for_layout(src.config_json, weights, to, src.dir + "/config.json");
    write_file_atomic((tmp / "config.json").string(), *config);
    fs::rename(tmp, out);
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(tmp, ec);
    fail(out_dir, std::string("cannot write: ") + e.what());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

}  // namespace sparse24
