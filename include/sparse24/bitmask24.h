// compressed-tensors' 'sparse-24-bitmask' layout (the format of 2:4 checkpoints made with llm-compressor and
// loaded by vLLM), read and written tensor by tensor, and its config.json entry.
//
// For a 2-D weight "<prefix>.weight" of shape [rows, cols] (cols a multiple of 4):
//   <prefix>.compressed  [rows, cols/2] in the weight dtype: exactly 2 values per group of 4, in position
//   order
//                        (a group with fewer than 2 nonzeros still stores 2 values, zeros included);
//   <prefix>.bitmask     U8 [rows, ceil(cols/8)]: bit j of byte b is column 8b+j (little bit order), 1 =
//   kept;
//                        exactly 2 bits set per group of 4, bits past cols zero;
//   <prefix>.shape       I64 [2, 1] = [[rows], [cols]] (torch.tensor(shape).reshape(-1, 1) in the reference
//                        library; I32 and [2] are accepted when reading).
// A group's two kept positions are exactly what the compressed 2:4 format's metadata code names, and the
// values are stored in the same order, so conversion either way is a lossless, bit-exact re-encoding.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sparse24/compressed.h"
#include "sparse24/io.h"

namespace sparse24 {

inline constexpr const char* kBitmask24Format = "sparse-24-bitmask";

// "<prefix>.weight" -> "<prefix>"; a name without ".weight" is its own prefix (as in the reference library).
std::string bitmask24_prefix(const std::string& weight_name);

struct Bitmask24Tensors {
  StTensor compressed, bitmask, shape;
};

// True when `c` can be written in this layout: a rank-2 shape whose column count is a multiple of 4, and no
// scales (int8 values with scales are written only in the sparse24 layout).
bool bitmask24_representable(const Compressed& c);
// Validates `c` and re-encodes it; throws Error when it is not representable.
Bitmask24Tensors to_bitmask24(const Compressed& c);
// Validates the three tensors of one layer (names in messages use `prefix`) and re-encodes them as a
// Compressed of shape [rows, cols]. Every problem is an Error "<what>: ..." naming the tensor, and for a
// group without exactly 2 bits set, its row, group and columns.
Compressed from_bitmask24(const StTensorView& compressed, const StTensorView& bitmask,
                          const StTensorView& shape, const std::string& prefix, const std::string& what);
// The prefixes of every "<prefix>.bitmask" tensor, in file order. Unstructured 'sparse-bitmask' layers (which
// also have "<prefix>.row_offsets") are an Error: that format is not 2:4.
std::vector<std::string> find_bitmask24_layers(const SafeTensorsView& st, const std::string& what);
// Reads layer `prefix`; an Error names any of the three tensors that is missing.
Compressed read_bitmask24_layer(const SafeTensorsView& st, const std::string& prefix,
                                const std::string& what);

// ---- config.json: quantization_config.sparsity_config -----------------------------------------------------

struct SparsityConfig {
  std::string format = kBitmask24Format;
  std::string sparsity_structure = "2:4";
  std::vector<std::string> targets;  // module names (layer prefixes) or classes; "re:" prefixes a regex
  std::vector<std::string> ignore;
  double global_sparsity = 0.0;
};

// The sparsity_config of a config.json text, or nullopt when it has none. Error "<what>: ..." when the text
// is not a JSON object or sparsity_config is malformed.
std::optional<SparsityConfig> parse_sparsity_config(std::string_view config_json, const std::string& what);
// `config_json` (may be empty, meaning {}) with quantization_config.sparsity_config replaced by `sc`
// (quantization_config is created as {"quant_method": "compressed-tensors"} when absent), or removed when
// `sc` is nullopt (and quantization_config too if nothing but quant_method is left). Pretty-printed, 2
// spaces.
std::string with_sparsity_config(std::string_view config_json, const std::optional<SparsityConfig>& sc,
                                 const std::string& what);

}  // namespace sparse24
