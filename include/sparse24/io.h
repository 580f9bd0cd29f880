// File formats: whole-file reads, atomic writes, NumPy .npy, safetensors, and the compressed 2:4 file.
//
// Readers are the attack surface: every count, length and offset read from a file is validated before it is
// used or allocated for, and every problem is reported as one sparse24::Error line of the form
// "<what>: <problem>" where <what> names the file (or whatever the caller passed for messages).
// Writers never leave a half-written file behind (see write_file_atomic).
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sparse24/compressed.h"
#include "sparse24/dtype.h"
#include "sparse24/tensor.h"

namespace sparse24 {

// ---- Whole files -----------------------------------------------------------------------------------------

// The whole content of a regular file. Error "cannot open 'x': No such file or directory", "'x' is not a
// regular file", "cannot read 'x': ...".
std::vector<uint8_t> read_file(const std::string& path);

// Writes `bytes` to a temporary file in the same directory (path + ".tmp.<pid>.<n>"), fsyncs it and renames
// it over `path`, so a reader sees either the old file or the complete new one. On any failure the temporary
// file is removed and an Error names the path and the reason (strerror). If `path` is a symlink, the link
// itself is replaced.
void write_file_atomic(const std::string& path, std::string_view bytes);
void write_file_atomic(const std::string& path, const std::vector<uint8_t>& bytes);
// The same with the contents in pieces, written one after the other (a file never assembled in memory).
void write_file_atomic(const std::string& path, const std::vector<std::string_view>& pieces);

// A regular file mapped read-only into memory (mmap, MAP_PRIVATE), unmapped on destruction. Readers parse
// straight from the mapping instead of copying the file first. An empty file maps to data() == nullptr,
// size() == 0. Errors are those of read_file ("cannot open 'x': ...", "'x' is not a regular file").
// A mapping reflects the file as it is on disk: if another process truncates the file while it is mapped,
// touching the lost pages raises SIGBUS. Files are replaced by rename (write_file_atomic), which never does
// that to an open mapping.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }
  // Drops the pages wholly inside `part` (bytes of this mapping) from memory: read again, they come from
  // the file again. What a loader does with a tensor it has converted (a big model's file is not kept
  // resident beside what was made of it).
  void release(std::span<const uint8_t> part) const;

 private:
  void reset() noexcept;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// ---- NumPy .npy ------------------------------------------------------------------------------------------
// Dtypes: '<f4' float32, '<f2' float16, '|i1' int8 (also '<i1', 'i1'). bfloat16 has no .npy dtype.
// Reading accepts format versions 1.0, 2.0 and 3.0, C order only, at most 64 dimensions; writing produces
// version 1.0 (whose 16-bit header length always suffices for these dtypes and ranks).

Tensor parse_npy(const uint8_t* data, size_t size, const std::string& what);
Tensor read_npy(const std::string& path);
// Throws Error for a bfloat16 tensor, more than 64 dimensions, or a byte count not matching the shape.
std::vector<uint8_t> encode_npy(const Tensor& t);
void write_npy(const std::string& path, const Tensor& t);  // atomic

// ---- safetensors -----------------------------------------------------------------------------------------
// Layout: u64 little-endian header length N, N bytes of JSON header, then the data buffer. The header maps
// tensor names to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the data buffer) and
// may hold "__metadata__", a string -> string map.

// Known safetensors dtype names: BOOL U8 I8 I16 U16 F16 BF16 I32 U32 F32 F64 I64 U64 F8_E4M3 F8_E5M2.
// Returns the element size in bytes; throws Error on an unknown name.
size_t st_dtype_size(const std::string& dtype);
// "F32", "F16", "BF16", "I8".
const char* st_dtype_name(DType t);
// Inverse of st_dtype_name; throws Error for a safetensors dtype Tensor cannot hold (e.g. "U8", "F64").
DType dtype_from_st(const std::string& dtype);

// One tensor record as stored: any safetensors dtype, raw little-endian bytes.
struct StTensor {
  std::string dtype;  // safetensors name, e.g. "F32", "U8"
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // numel * st_dtype_size(dtype) bytes, C order
};

// From a Tensor (F32/F16/BF16/I8).
StTensor to_st(const Tensor& t);
// To a Tensor; throws Error (naming `what`) if the dtype is not one of F32/F16/BF16/I8.
Tensor from_st(const StTensor& t, const std::string& what);

struct SafeTensors {
  std::map<std::string, std::string> metadata;  // "__metadata__"
  // In data-buffer order when parsed; written in this order. Names are unique and never "__metadata__".
  std::vector<std::pair<std::string, StTensor>> tensors;
  // The data buffer starts at a multiple of this many bytes of the file (the header padded with spaces): 8
  // as the reference writer pads, 64 for tensors read in place by vector loads (a power of two, 8 or more).
  size_t align = 8;

  // nullptr when absent.
  const StTensor* find(const std::string& name) const;
  // Throws Error "no tensor 'name'" when absent.
  const StTensor& at(const std::string& name) const;
  // Appends; throws Error on a duplicate or reserved name.
  void add(const std::string& name, StTensor t);
};

// Validates the whole file before returning anything: sizes, header length (<= 100 MB and inside the file),
// JSON well-formed and an object without duplicate keys, known dtypes, shapes of non-negative integers whose
// product does not overflow, offsets inside the data buffer, byte lengths matching shapes, no two tensors
// overlapping, __metadata__ a string -> string map. Gaps between tensors are allowed (and skipped).
SafeTensors parse_safetensors(const uint8_t* data, size_t size, const std::string& what);
// Memory-maps the file and parses it (the tensors' bytes are copied out of the mapping once, after
// validation).
SafeTensors read_safetensors(const std::string& path);

// The same parse without copying tensor bytes: every `bytes` span points into the buffer given to
// parse_safetensors_view, which must outlive the view. Validation is identical (parse_safetensors is this
// plus a copy).
struct StTensorView {
  std::string dtype;
  std::vector<int64_t> shape;
  std::span<const uint8_t> bytes;
  StTensor copy() const { return StTensor{dtype, shape, {bytes.begin(), bytes.end()}}; }
};
struct SafeTensorsView {
  std::map<std::string, std::string> metadata;
  std::vector<std::pair<std::string, StTensorView>> tensors;  // in data-buffer order
  const StTensorView* find(const std::string& name) const;    // nullptr when absent
};
SafeTensorsView parse_safetensors_view(const uint8_t* data, size_t size, const std::string& what);

// A mapped safetensors file and its validated view: `view` points into `file`, so keep them together.
struct MappedSafeTensors {
  MappedFile file;
  SafeTensorsView view;
  explicit MappedSafeTensors(const std::string& path)
      : file(path), view(parse_safetensors_view(file.data(), file.size(), path)) {}
};
// Header: "__metadata__" first (when non-empty), then tensors in order, padded with spaces to a multiple of
// 8 bytes; data tightly packed in the same order. Throws Error on an invalid record (unknown dtype, byte
// count not matching the shape, duplicate name).
std::vector<uint8_t> encode_safetensors(const SafeTensors& st);
void write_safetensors(const std::string& path, const SafeTensors& st);  // atomic

// A compressed matrix of the dense `shape` stored as two tensors of a safetensors file: "<name>.values"
// ([rows, values_per_row], of `dtype`; without one, of any weight dtype) and "<name>.metadata" (U8,
// [rows, meta_bytes_per_row]), and with scale_group > 0 (scaled int8 values) "<name>.scales" (F32,
// [rows, scales_per_row]). All are checked, then every metadata code and scale (validate). Throws Error
// naming the tensor that is missing or does not match ("tensor 'fc.weight.values' is F16 [2, 6], expected
// F32 [2, 8] ..."), or the matrix whose code is invalid; callers add the file's name.
Compressed compressed_from_st(const SafeTensorsView& st, const std::string& name,
                              const std::vector<int64_t>& shape, std::optional<DType> dtype = std::nullopt,
                              int64_t scale_group = 0);
// The same tensors checked as compressed_from_st checks them, but not read: the Compressed they make
// without its arrays (dtype, shape, rows, cols and scale group) and the bytes of its values, metadata and
// scales where they are (a loader copying them straight into weights of its own, then validate_rows).
struct StoredCompressed {
  Compressed header;
  std::span<const uint8_t> values, metadata, scales;
};
StoredCompressed stored_compressed(const SafeTensorsView& st, const std::string& name,
                                   const std::vector<int64_t>& shape,
                                   std::optional<DType> dtype = std::nullopt, int64_t scale_group = 0);

// ---- The compressed 2:4 file -----------------------------------------------------------------------------
// A safetensors file with tensors "values" (weight dtype, shape [rows, values_per_row]) and "metadata" (U8,
// shape [rows, meta_bytes_per_row]), and __metadata__ {"format": "sparse24", "pattern": "2:4",
// "shape": "[64, 128]" (the original dense shape), "dtype": "float32"}. Loading checks all of it for
// consistency and then every metadata code (sparse24::validate).

std::vector<uint8_t> encode_compressed(const Compressed& c);  // validates c first
Compressed parse_compressed(const uint8_t* data, size_t size, const std::string& what);
void save_compressed(const std::string& path, const Compressed& c);  // atomic
Compressed load_compressed(const std::string& path);

}  // namespace sparse24
