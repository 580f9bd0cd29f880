// sparse24 inspect FILE [--json] [--pattern 2:4]: a dense .npy, a compressed .safetensors file, a GGUF
// file (its metadata and tensors), or a checkpoint (a Hugging Face directory or one .safetensors file in any
// layout: its tensors, which are 2:4, and their bytes).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "sparse24/gguf.h"
#include "sparse24/hf_dir.h"
#include "sparse24/io.h"
#include "sparse24/report.h"

namespace sparse24::cli {
namespace {

bool is_npy(const std::vector<uint8_t>& bytes) {
  static const uint8_t magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  return bytes.size() >= 6 && std::equal(magic, magic + 6, bytes.begin());
}

nlohmann::json to_json(const SparsityReport& r) {
  nlohmann::json j;
  j["format"] = r.format;
  j["shape"] = r.shape;
  j["dtype"] = dtype_name(r.dtype);
  j["pattern"] = pattern_string(r.pattern);
  j["matrix"] = {r.rows, r.cols};
  j["valid"] = r.valid;
  j["groups"] = r.groups;
  j["bad_groups"] = r.bad_groups;
  if (!r.valid) j["first_bad"] = {{"row", r.first_bad_row}, {"group", r.first_bad_group}};
  j["sparsity"] = r.sparsity;
  j["kept_magnitude"] = r.kept_magnitude;
  j["compression_ratio"] = r.compression_ratio;
  if (r.format == "sparse24") j["bytes_per_weight"] = r.bytes_per_weight;
  if (r.scale_group > 0) j["scale_group"] = r.scale_group;
  return j;
}

// A metadata value for people: scalars as they are, strings quoted and cut, arrays as their type, length
// and first elements.
nlohmann::json gguf_value_json(const GgufValue& v, size_t max_items) {
  auto item = [&](size_t i) -> nlohmann::json {
    if (v.elem == GgufType::kString) return v.strings[i];
    if (v.elem == GgufType::kF32 || v.elem == GgufType::kF64) return v.floats[i];
    if (v.elem == GgufType::kBool) return v.ints[i] != 0;
    if (v.elem == GgufType::kU64) return static_cast<uint64_t>(v.ints[i]);
    return v.ints[i];
  };
  if (!v.is_array()) return item(0);
  nlohmann::json head = nlohmann::json::array();
  for (size_t i = 0; i < v.size() && i < max_items; ++i) head.push_back(item(i));
  return {{"type", std::string("ARRAY of ") + gguf_type_name(v.elem)}, {"length", v.size()}, {"head", head}};
}

void inspect_gguf(const std::string& path, bool json) {
  const MappedGguf m(path);
  const Gguf& g = m.gguf;
  int64_t params = 0;
  uint64_t bytes = 0;
  std::map<std::string, std::pair<int64_t, int64_t>> by_type;  // tensors, parameters
  for (const GgufTensor& t : g.tensors) {
    params += t.numel();
    bytes += t.bytes.size();
    auto& [n, p] = by_type[ggml_type_name(t.type)];
    ++n;
    p += t.numel();
  }
  const GgufValue* arch = g.find("general.architecture");
  const std::string architecture =
      arch && arch->type == GgufType::kString ? arch->strings[0] : std::string("(none)");
  const double bpw = params > 0 ? 8.0 * static_cast<double>(bytes) / static_cast<double>(params) : 0.0;
  if (json) {
    nlohmann::json j;
    j["format"] = "gguf";
    j["version"] = g.version;
    j["alignment"] = g.alignment;
    j["architecture"] = architecture;
    j["metadata"] = nlohmann::json::object();
    for (const auto& [k, v] : g.metadata) j["metadata"][k] = gguf_value_json(v, 8);
    j["tensors"] = nlohmann::json::array();
    for (const GgufTensor& t : g.tensors)
      j["tensors"].push_back({{"name", t.name},
                              {"shape", t.shape},
                              {"type", ggml_type_name(t.type)},
                              {"bytes", t.bytes.size()},
                              {"offset", g.data_offset + t.offset}});
    j["parameters"] = params;
    j["tensor_bytes"] = bytes;
    j["bits_per_weight"] = bpw;
    j["bytes_per_weight"] = bpw / 8;
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return;
  }
  std::printf("file              %s (GGUF v%u, alignment %llu)\n", path.c_str(), g.version,
              static_cast<unsigned long long>(g.alignment));
  std::printf("architecture      %s\n", architecture.c_str());
  std::printf("metadata          %zu keys\n", g.metadata.size());
  for (const auto& [k, v] : g.metadata) {
    std::string text = gguf_value_json(v, 4).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (text.size() > 100) text = text.substr(0, 97) + "...";
    std::printf("  %-40s %s\n", k.c_str(), text.c_str());
  }
  std::printf("tensors           %zu\n", g.tensors.size());
  for (const GgufTensor& t : g.tensors)
    std::printf("  %-40s %-16s %-6s %12zu bytes\n", t.name.c_str(), shape_string(t.shape).c_str(),
                ggml_type_name(t.type).c_str(), t.bytes.size());
  for (const auto& [type, np] : by_type)
    std::printf("type %-12s %lld tensors, %lld parameters\n", type.c_str(), static_cast<long long>(np.first),
                static_cast<long long>(np.second));
  std::printf("total             %lld parameters in %llu bytes: %.4f bits (%.4f bytes) per weight\n",
              static_cast<long long>(params), static_cast<unsigned long long>(bytes), bpw, bpw / 8);
}

// The first bytes only: a checkpoint shard is not read whole to tell.
bool starts_like_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<uint8_t> head(6);
  f.read(reinterpret_cast<char*>(head.data()), 6);
  return f.gcount() == 6 && is_npy(head);
}

// A compressed matrix file (compressed.h's one-matrix format) rather than a checkpoint: its __metadata__'s
// "format" is "sparse24" (transformers' checkpoints say "pt").
bool is_compressed_file(const std::string& path) {
  const MappedSafeTensors f(path);
  const auto it = f.view.metadata.find("format");
  return it != f.view.metadata.end() && it->second == "sparse24";
}

void inspect_checkpoint_at(const std::string& path, bool json) {
  const CheckpointInfo info = inspect_checkpoint(path);
  std::map<std::string, int64_t> sparse_types, dense_types;  // dtype -> tensors
  // int8 values with a scale per 64 positions: "I8/64".
  const auto type_of = [](const CheckpointInfo::Tensor& t) {
    return t.scale_group > 0 ? t.dtype + "/" + std::to_string(t.scale_group) : t.dtype;
  };
  for (const CheckpointInfo::Tensor& t : info.tensors) ++(t.sparse ? sparse_types : dense_types)[type_of(t)];
  const auto per_weight = [](uint64_t bytes, int64_t params) {
    return params > 0 ? static_cast<double>(bytes) / static_cast<double>(params) : 0.0;
  };
  const int64_t sparse_count = static_cast<int64_t>(
      std::count_if(info.tensors.begin(), info.tensors.end(), [](const auto& t) { return t.sparse; }));
  if (json) {
    nlohmann::json j;
    j["format"] = "checkpoint";
    j["model_type"] = info.model_type;
    j["shards"] = info.shards;
    j["sparsity_config"] = info.sparsity_config ? nlohmann::json(info.sparsity_config->format) : nullptr;
    j["tensors"] = nlohmann::json::array();
    for (const CheckpointInfo::Tensor& t : info.tensors)
      j["tensors"].push_back({{"name", t.name},
                              {"shape", t.shape},
                              {"dtype", t.dtype},
                              {"sparse", t.sparse},
                              {"scale_group", t.scale_group},
                              {"bytes", t.bytes}});
    j["sparse_tensors"] = sparse_count;
    j["parameters"] = info.parameters;
    j["sparse_parameters"] = info.sparse_parameters;
    j["bytes"] = info.bytes;
    j["sparse_bytes_per_weight"] = per_weight(info.sparse_bytes, info.sparse_parameters);
    j["bytes_per_weight"] = per_weight(info.bytes, info.parameters);
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return;
  }
  std::printf("checkpoint        %s (%zu shard%s%s%s)\n", path.c_str(), info.shards,
              info.shards == 1 ? "" : "s", info.model_type.empty() ? "" : ", model_type ",
              info.model_type.c_str());
  if (info.sparsity_config)
    std::printf("sparsity config   %s, %s, %zu targets\n", info.sparsity_config->format.c_str(),
                info.sparsity_config->sparsity_structure.c_str(), info.sparsity_config->targets.size());
  const auto types = [](const std::map<std::string, int64_t>& m) {
    std::string s;
    for (const auto& [type, n] : m) s += (s.empty() ? "" : ", ") + type + " " + std::to_string(n);
    return s.empty() ? std::string("none") : s;
  };
  std::printf("tensors           %zu: %lld 2:4 (%s), %zu dense (%s)\n", info.tensors.size(),
              static_cast<long long>(sparse_count), types(sparse_types).c_str(),
              info.tensors.size() - static_cast<size_t>(sparse_count), types(dense_types).c_str());
  for (const CheckpointInfo::Tensor& t : info.tensors)
    std::printf("  %-52s %-5s %-5s %-18s %12llu bytes\n", t.name.c_str(), t.sparse ? "2:4" : "dense",
                type_of(t).c_str(), shape_string(t.shape).c_str(), static_cast<unsigned long long>(t.bytes));
  std::printf("parameters        %lld, %lld of them in 2:4 weights (%.1f%%)\n",
              static_cast<long long>(info.parameters), static_cast<long long>(info.sparse_parameters),
              info.parameters > 0
                  ? 100.0 * static_cast<double>(info.sparse_parameters) / static_cast<double>(info.parameters)
                  : 0.0);
  std::printf("stored            %llu bytes: %.4f bytes per weight, the 2:4 weights %.4f\n",
              static_cast<unsigned long long>(info.bytes), per_weight(info.bytes, info.parameters),
              per_weight(info.sparse_bytes, info.sparse_parameters));
}

}  // namespace

void register_inspect(CLI::App& app) {
  struct Opts {
    std::string file, pattern = "2:4";
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd =
      app.add_subcommand("inspect",
                         "Report a matrix's shape, pattern validity, sparsity and compression, or what a "
                         "checkpoint or GGUF file holds");
  cmd->add_option("file", o->file,
                  "dense .npy, compressed .safetensors, .gguf, or a checkpoint: a model directory or one "
                  ".safetensors file of it (any layout)")
      ->required();
  cmd->add_flag("--json", o->json, "print one JSON object");
  cmd->add_option("--pattern", o->pattern, "pattern to check a dense matrix against")->capture_default_str();
  cmd->callback([o] {
    if (is_gguf_file(o->file)) return inspect_gguf(o->file, o->json);
    if (std::filesystem::is_directory(o->file)) return inspect_checkpoint_at(o->file, o->json);
    if (!starts_like_npy(o->file) && !is_compressed_file(o->file))
      return inspect_checkpoint_at(o->file, o->json);
    const std::vector<uint8_t> bytes = read_file(o->file);
    const SparsityReport r =
        is_npy(bytes)
            ? inspect_dense(parse_npy(bytes.data(), bytes.size(), o->file), parse_pattern(o->pattern))
            : inspect_compressed(parse_compressed(bytes.data(), bytes.size(), o->file));
    if (o->json) {
      std::printf("%s\n", to_json(r).dump().c_str());
      return;
    }
    std::printf("file              %s (%s)\n", o->file.c_str(), r.format.c_str());
    std::printf("shape             %s %s, as matrix [%lld, %lld]\n", shape_string(r.shape).c_str(),
                dtype_name(r.dtype), static_cast<long long>(r.rows), static_cast<long long>(r.cols));
    std::printf("pattern %-9s %s", pattern_string(r.pattern).c_str(), r.valid ? "valid" : "NOT valid");
    if (!r.valid)
      std::printf(": %lld of %lld groups too dense, first at row %lld group %lld",
                  static_cast<long long>(r.bad_groups), static_cast<long long>(r.groups),
                  static_cast<long long>(r.first_bad_row), static_cast<long long>(r.first_bad_group));
    std::printf("\nsparsity          %.4f\n", r.sparsity);
    std::printf("kept magnitude    %.4f (of sum |w|, by a magnitude prune to %s)\n", r.kept_magnitude,
                pattern_string(r.pattern).c_str());
    std::printf("compression       %.5f of dense bytes (2:4 values + 4-bit metadata%s)\n",
                r.compression_ratio, r.scale_group > 0 ? " + fp32 scales" : "");
    if (r.format == "sparse24") {
      std::printf("bytes per weight  %.4f", r.bytes_per_weight);
      if (r.scale_group > 0)
        std::printf(" (int8, one fp32 scale per %lld positions of a row)",
                    static_cast<long long>(r.scale_group));
      std::printf("\n");
    }
  });
}

}  // namespace sparse24::cli
