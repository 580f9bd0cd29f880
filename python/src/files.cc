// load/save: .npy, the compressed 2:4 file, and whole safetensors checkpoints (checkpoint.h's three
// layouts), with the library's readers (every count and offset validated) and atomic writers.
#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <map>
#include <string>

#include "common.h"
#include "sparse24/checkpoint.h"
#include "sparse24/compressed.h"
#include "sparse24/error.h"
#include "sparse24/io.h"

namespace sparse24::py {
namespace {

bool is_npy(const MappedFile& f) {
  static const uint8_t kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  return f.size() >= 6 && std::equal(kMagic, kMagic + 6, f.data());
}

// A .npy file -> ndarray; a compressed 2:4 file -> Compressed; any other safetensors file -> a dict of
// name -> ndarray or Compressed (sparse24 and sparse-24-bitmask layers decoded, int8 matrices with scales
// dequantized).
nb::object load(const std::string& path) {
  MappedFile f(path);
  if (is_npy(f)) {
    Tensor t;
    {
      nb::gil_scoped_release unlocked;
      t = parse_npy(f.data(), f.size(), path);
    }
    return to_numpy(std::move(t));
  }
  Checkpoint ck;
  {
    nb::gil_scoped_release unlocked;
    const SafeTensorsView view = parse_safetensors_view(f.data(), f.size(), path);
    const auto format = view.metadata.find("format");
    if (format == view.metadata.end() || format->second != "sparse24") {
      ck = read_checkpoint(view, path);
    } else {
      CheckpointTensor one;
      one.sparse = parse_compressed(f.data(), f.size(), path);
      ck.tensors.push_back(std::move(one));
    }
  }
  if (ck.tensors.size() == 1 && ck.tensors[0].name.empty()) return nb::cast(std::move(*ck.tensors[0].sparse));
  nb::dict out;
  for (CheckpointTensor& t : ck.tensors) {
    if (t.sparse)
      out[t.name.c_str()] = nb::cast(std::move(*t.sparse));
    else  // (a scaled int8 matrix: its values, dequantized)
      out[t.name.c_str()] = st_to_numpy(t.scale_group > 0 ? dequantized(t) : std::move(t.dense));
  }
  return out;
}

void save_npy(const std::string& path, const AnyArray& a) {
  const Tensor t = tensor_from_array(a, "save");
  nb::gil_scoped_release unlocked;
  write_npy(path, t);
}

void save_compressed_file(const std::string& path, const Compressed& c) {
  nb::gil_scoped_release unlocked;
  save_compressed(path, c);
}

// A dict of name -> ndarray (float32/float16/int8) or Compressed as a checkpoint in layout `format`.
void save_checkpoint(const std::string& path, const nb::dict& tensors, const std::string& format) {
  const CheckpointFormat to = parse_checkpoint_format(format);
  Checkpoint ck;
  for (auto [key, value] : tensors) {
    if (!nb::isinstance<nb::str>(key)) throw Error("save: checkpoint keys must be strings");
    CheckpointTensor t;
    t.name = nb::cast<std::string>(key);
    if (nb::isinstance<Compressed>(value)) {
      t.sparse = nb::cast<const Compressed&>(value);
    } else {
      AnyArray a;
      if (!nb::try_cast(value, a))
        throw Error("save: tensor '" + t.name + "' is neither an array nor Compressed");
      t.dense = to_st(tensor_from_array(a, t.name.c_str()));
    }
    ck.tensors.push_back(std::move(t));
  }
  nb::gil_scoped_release unlocked;
  SafeTensors st = encode_checkpoint(ck, to);
  write_safetensors(path, st);
}

// A plain safetensors file: name -> float32/float16/int8/uint8 array, and string metadata (the exporter's).
void save_safetensors(const std::string& path, const nb::dict& tensors,
                      const std::map<std::string, std::string>& meta) {
  SafeTensors st;
  st.metadata = meta;
  for (auto [key, value] : tensors) {
    const std::string name = nb::cast<std::string>(key);
    AnyArray a;
    if (!nb::try_cast(value, a)) throw Error("save: tensor '" + name + "' is not an array");
    if (a.dtype() == nb::dtype<uint8_t>()) {
      require_c_contiguous(a, name.c_str());
      StTensor t{"U8", array_shape(a), {}};
      const auto* p = static_cast<const uint8_t*>(a.data());
      t.bytes.assign(p, p + a.size());
      st.add(name, std::move(t));
    } else {
      st.add(name, to_st(tensor_from_array(a, name.c_str())));
    }
  }
  nb::gil_scoped_release unlocked;
  write_safetensors(path, st);
}

}  // namespace

void register_files(nb::module_& m) {
  m.def("_load", &load, nb::arg("path"));
  m.def("_save_npy", &save_npy, nb::arg("path"), nb::arg("array"));
  m.def("_save_compressed", &save_compressed_file, nb::arg("path"), nb::arg("c"));
  m.def("_save_safetensors", &save_safetensors, nb::arg("path"), nb::arg("tensors"), nb::arg("metadata"));
  m.def("_write_text",
        [](const std::string& path, const std::string& text) { write_file_atomic(path, text); });
  m.def("_save_checkpoint", &save_checkpoint, nb::arg("path"), nb::arg("tensors"), nb::arg("format"));
}

}  // namespace sparse24::py
