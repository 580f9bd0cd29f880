// Hugging Face checkpoint directories (hf_dir.h).
#include "sparse24/hf_dir.h"

#include <unistd.h>

#include <cstdio>
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

void check_sparsity_config(const std::optional<SparsityConfig>& sc, const SafeTensorsView& st,
                           const std::string& config_what, const std::string& st_what) {
  if (sc && (sc->format != kBitmask24Format || sc->sparsity_structure != "2:4") &&
      !find_bitmask24_layers(st, st_what).empty())
    fail(config_what, "sparsity_config says format '" + printable(sc->format) + "', structure '" +
                          printable(sc->sparsity_structure) + "', but " + st_what +
                          " holds sparse-24-bitmask layers");
}

HfDirReader::HfDirReader(std::string dir) : dir_(std::move(dir)) {
  std::error_code ec;
  if (!fs::is_directory(dir_, ec)) fail(dir_, "not a directory");
  config_path_ = dir_ + "/config.json";
  if (!fs::exists(config_path_)) fail(dir_, "no config.json");
  config_json_ = read_text(config_path_);
  const nlohmann::json cj = nlohmann::json::parse(config_json_, nullptr, false);
  if (cj.is_discarded() || !cj.is_object()) fail(config_path_, "not a JSON object");
  sparsity_ = parse_sparsity_config(config_json_, config_path_);
  for (const std::string& name : shard_names(dir_)) shards_.push_back(dir_ + "/" + name);
}

HfDirReader::Shard HfDirReader::shard(size_t i, bool defer_sparse24) {
  const std::string& path = shards_.at(i);
  Shard s;
  s.file = std::make_unique<MappedSafeTensors>(path);
  const MappedSafeTensors& st = *s.file;
  check_sparsity_config(sparsity_, st.view, config_path_, fs::path(path).filename().string());
  s.part = read_checkpoint_view(st.view, path, defer_sparse24);
  // The decoded 2:4 weights were copied out of the file: the pages of the tensors they came from are
  // dropped (a pruned 8B checkpoint's 7.5 GB would otherwise stay resident beside the model built from them).
  std::set<const uint8_t*> kept;
  for (const CheckpointTensorView& t : s.part.tensors) {
    if (!t.is_sparse()) kept.insert(t.dense.bytes.data());
    for (std::span<const uint8_t> b : t.stored) kept.insert(b.data());
  }
  for (const auto& [tensor, v] : st.view.tensors)
    if (!kept.count(v.bytes.data())) st.file.release(v.bytes);
  for (const CheckpointTensorView& t : s.part.tensors)
    if (!seen_.insert(t.name).second)
      fail(path, "tensor '" + printable(t.name) + "' is in more than one shard");
  return s;
}

MappedHfDir map_hf_dir(const std::string& dir, bool defer_sparse24) {
  HfDirReader r(dir);
  MappedHfDir d;
  d.dir = dir;
  d.config_json = r.config_json();
  d.shards = r.shards();
  for (size_t i = 0; i < d.shards.size(); ++i) {
    HfDirReader::Shard s = r.shard(i, defer_sparse24);
    d.files.push_back(std::move(s.file));
    const std::shared_ptr<const MappedFile> file(d.files.back(), &d.files.back()->file);
    for (CheckpointTensorView& t : s.part.tensors) d.tensors.push_back({std::move(t), file});
    d.metadata.insert(s.part.metadata.begin(), s.part.metadata.end());
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

namespace {

std::optional<std::string> config_with(const std::optional<std::string>& config_json,
                                       const std::vector<std::string>& sparse_prefixes, double zero_fraction,
                                       const std::string& what) {
  if (!sparse_prefixes.empty()) {
    SparsityConfig sc;
    sc.targets = sparse_prefixes;
    sc.global_sparsity = zero_fraction;
    return with_sparsity_config(config_json.value_or(""), sc, what);
  }
  if (config_json && parse_sparsity_config(*config_json, what))
    return with_sparsity_config(*config_json, std::nullopt, what);
  return config_json;
}

// A part's file until finish() names it (not a name a model directory's own files take).
std::string part_name(size_t i) { return ".sparse24-part-" + std::to_string(i); }

std::vector<std::string> sparse_prefixes_of(const Checkpoint& weights, CheckpointFormat to) {
  std::vector<std::string> p;
  for (const CheckpointTensor& t : weights.tensors)
    if (to == CheckpointFormat::kBitmask24 && bitmask24_keeps_sparse(t))
      p.push_back(bitmask24_prefix(t.name));
  return p;
}

}  // namespace

std::optional<std::string> config_for_layout(const std::optional<std::string>& config_json,
                                             const Checkpoint& weights, CheckpointFormat to,
                                             const std::string& what) {
  const std::vector<std::string> p = sparse_prefixes_of(weights, to);
  return config_with(config_json, p, p.empty() ? 0.0 : zero_fraction(weights), what);
}

void write_hf_dir(const HfDir& src, const Checkpoint& weights, CheckpointFormat to,
                  const std::string& out_dir, const std::map<std::string, std::string>& files) {
  HfDirWriter w(src.dir, src.shards, src.config_json, to, out_dir, files);
  w.add(weights);
  w.finish();
}

HfDirWriter::HfDirWriter(std::string src_dir, std::vector<std::string> src_shards,
                         std::optional<std::string> config_json, CheckpointFormat to, std::string out_dir,
                         std::map<std::string, std::string> files)
    : src_dir_(std::move(src_dir)),
      out_(std::move(out_dir)),
      src_shards_(std::move(src_shards)),
      config_(std::move(config_json)),
      to_(to),
      files_(std::move(files)) {
  std::error_code ec;
  if (fs::exists(out_, ec)) fail(out_, "already exists (give a new directory)");
  const fs::path out = fs::path(out_);
  tmp_ = (out.parent_path() / (out.filename().string() + ".tmp." + std::to_string(::getpid()))).string();
  fs::remove_all(tmp_, ec);
  fs::create_directories(tmp_, ec);
  if (ec) fail(out_, "cannot write: " + ec.message());
}

HfDirWriter::~HfDirWriter() {
  std::error_code ec;
  if (!done_) fs::remove_all(tmp_, ec);
}

void HfDirWriter::add(const Checkpoint& part) {
  const SafeTensors st = encode_checkpoint(part, to_);
  write_safetensors(tmp_ + "/" + part_name(names_.size()), st);
  names_.emplace_back();
  for (const auto& [name, t] : st.tensors) {
    names_.back().push_back(name);
    bytes_ += t.bytes.size();
  }
  const std::vector<std::string> p = sparse_prefixes_of(part, to_);
  sparse_prefixes_.insert(sparse_prefixes_.end(), p.begin(), p.end());
  if (to_ == CheckpointFormat::kBitmask24) {  // the sparsity config's global_sparsity
    const auto [zeros, total] = zero_count(part);
    zeros_ += zeros;
    total_ += total;
  }
}

void HfDirWriter::finish() {
  try {
    std::set<std::string> skip = {"config.json", kWeights, kIndex};
    for (const std::string& s : src_shards_) skip.insert(fs::path(s).filename().string());
    for (const auto& [name, text] : files_) skip.insert(name);
    const fs::path tmp(tmp_);
    if (!src_dir_.empty())
      for (const fs::directory_entry& e : fs::directory_iterator(src_dir_)) {
        const std::string name = e.path().filename().string();
        if (skip.count(name) || name == "plan.json") continue;
        if (e.is_directory())
          fs::copy(e.path(), tmp / name, fs::copy_options::recursive);
        else if (e.is_regular_file())
          fs::copy_file(e.path(), tmp / name);
      }
    for (const auto& [name, text] : files_) write_file_atomic((tmp / name).string(), text);
    const size_t n = names_.size();
    if (n == 0) fail(out_, "no weights were written");
    if (n == 1) {
      fs::rename(tmp / part_name(0), tmp / kWeights);
    } else {
      nlohmann::json map = nlohmann::json::object();
      for (size_t i = 0; i < n; ++i) {
        char file[64];
        std::snprintf(file, sizeof file, "model-%05zu-of-%05zu.safetensors", i + 1, n);
        fs::rename(tmp / part_name(i), tmp / file);
        for (const std::string& t : names_[i]) map[t] = file;
      }
      const nlohmann::json index = {{"metadata", {{"total_size", bytes_}}}, {"weight_map", map}};
      write_file_atomic((tmp / kIndex).string(), index.dump(2) + "\n");
    }
    const auto config =
        config_with(config_, sparse_prefixes_, total_ > 0 ? zeros_ / total_ : 0.0, src_dir_ + "/config.json");
    write_file_atomic((tmp / "config.json").string(), config.value_or("{}"));
    fs::rename(tmp, out_);
    done_ = true;
  } catch (const fs::filesystem_error& e) {
    fail(out_, std::string("cannot write: ") + e.what());
  }
}

ConvertReport convert_checkpoint_file(const std::string& in, const std::string& out, const ConvertOptions& o,
                                      const std::string& config_in, const std::string& config_out) {
  ConvertReport r;
  std::optional<std::string> config_text;  // read and checked before anything is written
  if (!config_in.empty()) config_text = read_text(config_in);
  Checkpoint ck;
  {
    MappedSafeTensors file(in);
    if (config_text)
      check_sparsity_config(parse_sparsity_config(*config_text, config_in), file.view, config_in, in);
    ck = read_checkpoint(file.view, in);
  }
  r.tensors = ck.tensors.size();
  r.sparse_in = ck.sparse_count();
  r.sparsify = convert_weights(ck, o);
  const std::optional<std::string> config_out_text =
      config_for_layout(config_text, ck, o.to, config_in.empty() ? std::string("config.json") : config_in);
  std::error_code ec;
  const bool same_config =
      !config_in.empty() && fs::exists(config_out, ec) && fs::equivalent(config_in, config_out, ec);
  if (same_config && config_out_text != config_text)
    throw Error(
        "the output config '" + config_out + "' is the input's config.json, which the " +
        checkpoint_format_name(o.to) +
        " checkpoint needs changed; give another config output (--config-out) or write the output elsewhere");
  write_safetensors(out, encode_checkpoint(ck, o.to));
  if (config_out_text && !same_config) {
    write_file_atomic(config_out, *config_out_text);
    r.config_written = config_out;
  }
  r.sparse_out = stored_sparse(ck, o.to);
  return r;
}

ConvertReport convert_hf_dir(const std::string& in_dir, const std::string& out_dir, const ConvertOptions& o) {
  HfDirReader in(in_dir);
  ConvertReport r;
  r.shards = in.shards().size();
  HfDirWriter w(in.dir(), in.shards(), in.config_json(), o.to, out_dir);
  for (size_t i = 0; i < in.shards().size(); ++i) {  // a shard at a time
    HfDirReader::Shard s = in.shard(i);
    Checkpoint part;
    for (CheckpointTensorView& t : s.part.tensors) {
      r.sparse_in += t.sparse.has_value();
      part.tensors.push_back(std::move(t).copy());
    }
    s.file.reset();
    r.tensors += part.tensors.size();
    if (part.tensors.empty()) continue;
    r.sparsify.append(convert_weights(part, o));
    r.sparse_out += stored_sparse(part, o.to);
    w.add(part);
  }
  w.finish();
  return r;
}

CheckpointInfo inspect_checkpoint(const std::string& path) {
  CheckpointInfo info;
  const auto add = [&](const CheckpointTensorView& t) {
    CheckpointInfo::Tensor x;
    x.name = t.name;
    x.sparse = t.sparse.has_value();
    if (t.sparse) {
      const Compressed& c = *t.sparse;
      x.shape = c.shape;
      x.dtype = st_dtype_name(c.dtype);
      x.bytes = c.values.size() + c.metadata.size() + c.scales.size() * sizeof(float);
      x.scale_group = c.scale_group;
    } else {
      x.shape = t.dense.shape;
      x.dtype = t.dense.dtype;
      x.bytes = t.dense.bytes.size() + t.scales.size();
      x.scale_group = t.scale_group;
    }
    int64_t n = 1;
    for (int64_t d : x.shape) n *= d;
    info.parameters += n;
    info.bytes += x.bytes;
    if (x.sparse) {
      info.sparse_parameters += n;
      info.sparse_bytes += x.bytes;
    }
    info.tensors.push_back(std::move(x));
  };
  std::error_code ec;
  if (fs::is_directory(path, ec)) {  // a shard at a time: never more than one shard's 2:4 weights decoded
    HfDirReader r(path);
    const nlohmann::json cj = nlohmann::json::parse(r.config_json());
    if (cj.contains("model_type") && cj["model_type"].is_string()) info.model_type = cj["model_type"];
    info.sparsity_config = r.sparsity_config();
    info.shards = r.shards().size();
    for (size_t i = 0; i < info.shards; ++i)
      for (const CheckpointTensorView& t : r.shard(i).part.tensors) add(t);
    return info;
  }
  const MappedSafeTensors file(path);
  info.shards = 1;
  for (const CheckpointTensorView& t : read_checkpoint_view(file.view, path).tensors) add(t);
  return info;
}

}  // namespace sparse24
