// Exporting a (pruned) model and loading it back.
//
// DIR/model.safetensors: per pruned layer "<layer>.weight.values" (F32, [rows, K/2]) and
// "<layer>.weight.metadata" (U8, [rows, K/8]) in the compressed 2:4 format of compressed.h (conv weights as
// the [out*kh*kw, in] matrix of pattern.h), every other parameter and floating-point buffer dense under its
// own name ("fc2.weight", "bn1.running_mean"). __metadata__: {"format": "sparse24-model", "config":
// "model.json"}.
// DIR/model.json: the architecture (net.h's spec_to_json) plus "weights": "model.safetensors" and
// "pruned": {"<layer>.weight": {"shape": [...], "pattern": "2:4", "dtype": "float32"}}.
#pragma once
#include <string>

#include "train/masks.h"
#include "train/net.h"

namespace sparse24::train {

// Writes DIR/model.safetensors and DIR/model.json (atomically; DIR must exist). Pruned weights must be 2:4.
void export_model(Net& net, const MaskSet& masks, const std::string& dir);
// Builds the network from DIR/model.json and loads DIR/model.safetensors, decompressing the pruned weights.
// Every name, shape and dtype is checked; Error naming the problem.
Net load_exported(const std::string& dir);

}  // namespace sparse24::train
