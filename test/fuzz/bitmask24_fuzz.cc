// libFuzzer harness: the checkpoint reader (sparse-24-bitmask and sparse24 layers inside a safetensors file)
// and the config.json sparsity_config parser. Accepted layers re-encode in both layouts and read back equal.
// Read with sparse24 layers left to decode (read_checkpoint_view's defer_sparse24, what the decoder loader
// asks for): refused exactly when the eager read is (at once, or by a layer's decode), else the same tensors,
// each decoded layer the eager read's; scaled int8 matrices alike, dequantized without error. A layer in
// the kernels' layout is refused by the decoder loader's in-place check exactly when its decode refuses it.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "fuzz_common.h"
#include "kernels/lanes_stored.h"
#include "sparse24/bitmask24.h"
#include "sparse24/checkpoint.h"
#include "sparse24/error.h"
#include "sparse24/io.h"
#include "sparse24/pattern.h"

namespace {

bool same(const sparse24::Compressed& a, const sparse24::Compressed& b) {
  return a.dtype == b.dtype && a.shape == b.shape && a.values == b.values && a.metadata == b.metadata &&
         a.scale_group == b.scale_group && a.scales == b.scales;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sparse24;
  // The same bytes as a config.json.
  try {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    if (auto sc = parse_sparsity_config(text, "fuzz config"))
      (void)with_sparsity_config(text, sc, "fuzz config");
  } catch (const Error&) {
  }

  SafeTensorsView view;
  try {
    view = parse_safetensors_view(data, size, "fuzz");
  } catch (const Error&) {
    return 0;
  }
  try {  // the layers in the kernels' layout: the in-place check agrees with the decode
    for (const CheckpointTensorView& t : read_checkpoint_view(view, "fuzz", true).tensors) {
      if (t.lanes_kb == 0) continue;
      bool decoded = true, checked = true;
      try {
        (void)t.decode();
      } catch (const Error&) {
        decoded = false;
      }
      const MatrixView m = matrix_view(t.lanes_shape);
      try {
        kernels::check_lanes(kernels::lanes_over(t.lanes, m.rows, m.cols, t.lanes_kb,
                                                 kernels::lanes_value_type(t.lanes_dtype), nullptr),
                             m.rows, m.cols);
      } catch (const Error&) {
        checked = false;
      }
      FUZZ_CHECK(decoded == checked);
    }
  } catch (const Error&) {
  }
  std::vector<CheckpointTensorView> deferred;
  bool deferred_ok = true;
  try {
    deferred = read_checkpoint_view(view, "fuzz", true).tensors;
    for (CheckpointTensorView& t : deferred)
      if (t.decode) t.sparse = t.decode();
  } catch (const Error&) {
    deferred_ok = false;
  }
  Checkpoint ck;
  try {
    ck = read_checkpoint(view, "fuzz");
  } catch (const Error&) {
    FUZZ_CHECK(!deferred_ok);
    return 0;
  }
  FUZZ_CHECK(deferred_ok && deferred.size() == ck.tensors.size());
  for (size_t i = 0; i < deferred.size(); ++i) {
    FUZZ_CHECK(deferred[i].name == ck.tensors[i].name &&
               deferred[i].is_sparse() == ck.tensors[i].sparse.has_value());
    if (ck.tensors[i].sparse) FUZZ_CHECK(same(*deferred[i].sparse, *ck.tensors[i].sparse));
    FUZZ_CHECK(deferred[i].lanes_kb == ck.tensors[i].lanes_kb);
    FUZZ_CHECK(deferred[i].scale_group == ck.tensors[i].scale_group &&
               deferred[i].scales.size() == ck.tensors[i].scales.size() * sizeof(float));
  }
  for (const CheckpointTensor& t : ck.tensors) {
    if (t.scale_group > 0) (void)dequantized(t);  // (throws: a crash of the harness)
    if (!t.sparse) continue;
    validate(*t.sparse);
    if (bitmask24_representable(*t.sparse)) {
      const Bitmask24Tensors b = to_bitmask24(*t.sparse);
      auto view = [](const StTensor& s) { return StTensorView{s.dtype, s.shape, s.bytes}; };
      const Compressed back = from_bitmask24(view(b.compressed), view(b.bitmask), view(b.shape), "l", "fuzz");
      FUZZ_CHECK(same(back, *t.sparse));
    }
  }
  for (CheckpointFormat f : {CheckpointFormat::kSparse24, CheckpointFormat::kBitmask24}) {
    std::vector<uint8_t> again;
    try {
      again = encode_safetensors(encode_checkpoint(ck, f));
    } catch (const Error&) {
      continue;  // names that collide once re-encoded, invalid UTF-8, ...
    }
    const Checkpoint back = read_checkpoint(parse_safetensors_view(again.data(), again.size(), "re"), "re");
    if (f == CheckpointFormat::kSparse24) {
      FUZZ_CHECK(back.tensors.size() == ck.tensors.size());
      for (const CheckpointTensor& t : ck.tensors) {
        const CheckpointTensor* u = back.find(t.name);
        FUZZ_CHECK(u != nullptr);
        FUZZ_CHECK(u->sparse.has_value() == t.sparse.has_value());
        if (t.sparse) FUZZ_CHECK(same(*u->sparse, *t.sparse));
        FUZZ_CHECK(u->scale_group == t.scale_group && u->scales == t.scales && u->lanes_kb == t.lanes_kb);
      }
    }
  }
  return 0;
}
