// GGUF (the llama.cpp / ggml model file, versions 2 and 3): reader, dequantization to fp32, and a writer.
//
// Layout (little-endian): "GGUF", u32 version, u64 tensor count, u64 metadata count; the metadata key/value
// pairs (key: u64 length + bytes; u32 value type; the value); the tensor infos (name; u32 rank; rank u64
// dimensions, innermost first; u32 ggml type; u64 offset into the data section); padding up to
// general.alignment (default 32); the data section.
//
// The reader validates the whole file before returning anything (see docs/formats.md, "GGUF"): every count
// and string length against the bytes left, value and element types, BOOL values, nested arrays (refused),
// duplicate keys and tensor names, general.alignment (a U32 power of two), rank <= 4, dimensions and their
// product (overflow-safe), the ggml type (known, and the first dimension a whole number of its blocks), each
// tensor's offset (aligned) and byte range (inside the data section, no two tensors overlapping). Problems
// are one sparse24::Error line "<what>: <problem>".
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "sparse24/io.h"
#include "sparse24/tensor.h"

namespace sparse24 {

// Metadata value types, as numbered in the file.
enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
const char* gguf_type_name(GgufType t);  // "U32", "STRING", ...; "?" for a value outside the enum

// One metadata value: a scalar, or an array of scalars of one type (arrays of arrays are refused).
// Integers and bools are held in `ints` (a U64 above INT64_MAX keeps its bits: read it back as uint64_t),
// F32/F64 in `floats`, strings in `strings`; a scalar has exactly one element in its vector.
struct GgufValue {
  GgufType type = GgufType::kU32;  // kArray for an array
  GgufType elem = GgufType::kU32;  // the element type (== type for a scalar)
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;

  bool is_array() const { return type == GgufType::kArray; }
  size_t size() const;  // elements (1 for a scalar)

  static GgufValue of_int(GgufType t, int64_t v);   // any integer type or kBool
  static GgufValue of_float(GgufType t, double v);  // kF32 or kF64
  static GgufValue of_string(std::string s);
  static GgufValue of_ints(GgufType elem, std::vector<int64_t> v);
  static GgufValue of_floats(GgufType elem, std::vector<double> v);
  static GgufValue of_strings(std::vector<std::string> v);
};

// ggml tensor types (the numbers of ggml.h). Every type ggml knows is accepted by the reader (its block
// size decides the byte count); dequantize() supports the ones marked *.
enum class GgmlType : uint32_t {
  kF32 = 0,   // *
  kF16 = 1,   // *
  kQ4_0 = 2,  // *
  kQ4_1 = 3,  // *
  kQ5_0 = 6,  // *
  kQ5_1 = 7,  // *
  kQ8_0 = 8,  // *
  kQ8_1 = 9,
  kQ2_K = 10,  // *
  kQ3_K = 11,  // *
  kQ4_K = 12,  // *
  kQ5_K = 13,  // *
  kQ6_K = 14,  // *
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ4_NL = 20,  // *
  kIQ4_XS = 23,  // *
  kBF16 = 30,    // *
};
// Block layout of a ggml type: `block` elements take `block_bytes` bytes. nullptr for a number ggml does
// not define.
struct GgmlTypeInfo {
  uint32_t id;
  const char* name;  // "Q4_1"
  int64_t block;
  int64_t block_bytes;
  bool dequantizable;  // dequantize() supports it
};
const GgmlTypeInfo* ggml_type_info(uint32_t id);
std::string ggml_type_name(uint32_t id);  // the name, or "type 123" for an unknown number
std::string dequantizable_type_names();   // "F32, F16, Q4_0, ...": the types dequantize() supports

struct GgufTensor {
  std::string name;
  std::vector<int64_t> shape;  // row-major, outermost first (the file's dimensions reversed): [rows, cols]
  uint32_t type = 0;           // a GgmlType number (validated: ggml_type_info(type) != nullptr)
  uint64_t offset = 0;         // in the data section
  std::span<const uint8_t> bytes;  // the tensor's bytes, inside the buffer given to parse_gguf

  int64_t numel() const;
};

struct Gguf {
  uint32_t version = 3;
  uint64_t alignment = 32;                                  // general.alignment, or 32
  uint64_t data_offset = 0;                                 // where the data section starts in the file
  std::vector<std::pair<std::string, GgufValue>> metadata;  // in file order; keys unique
  std::vector<GgufTensor> tensors;                          // in file order; names unique

  const GgufValue* find(const std::string& key) const;  // nullptr when absent
  const GgufTensor* find_tensor(const std::string& name) const;
  // Typed reads of scalar metadata; Error "metadata 'key' is missing" / "... is STRING, expected an integer".
  int64_t get_int(const std::string& key) const;   // any integer type; U64 above INT64_MAX is an Error
  double get_float(const std::string& key) const;  // F32, F64 (and integers)
  bool get_bool(const std::string& key) const;
  const std::string& get_string(const std::string& key) const;
  // Arrays: Error when absent or of another element type.
  const std::vector<std::string>& get_strings(const std::string& key) const;
  const std::vector<int64_t>& get_ints(const std::string& key) const;  // integer or BOOL elements
};

// True when `path` is a regular file that starts with the GGUF magic.
bool is_gguf_file(const std::string& path);

// Validates everything (see the top of this file); the tensors' byte spans point into `data`, which must
// outlive the result.
Gguf parse_gguf(const uint8_t* data, size_t size, const std::string& what);

// A mapped GGUF file and its validated view (`gguf` points into `file`: keep them together).
struct MappedGguf {
  MappedFile file;
  Gguf gguf;
  explicit MappedGguf(const std::string& path)
      : file(path), gguf(parse_gguf(file.data(), file.size(), path)) {}
};

// fp32 values of `n` elements of type `type` starting at `src` (n a multiple of the type's block). Error
// "cannot dequantize ggml type IQ2_XXS (supported: F32, F16, ...)" for the rest.
// The arithmetic is the reference's (ggml's dequantize_row_*, which the gguf Python package reproduces):
// the results are bit-identical to gguf.quants.dequantize. Q8_0, Q4_K and Q6_K run AVX2 paths where the CPU
// has AVX2 (the same values); `fast` false runs the plain loops (what the tests compare those with).
void dequantize_row(uint32_t type, const uint8_t* src, float* dst, int64_t n);
void dequantize_row(uint32_t type, const uint8_t* src, float* dst, int64_t n, bool fast);
// The whole tensor as an F32 Tensor of its shape; errors name the tensor.
Tensor dequantize(const GgufTensor& t);
std::vector<float> dequantize_floats(const GgufTensor& t);  // the same values, as floats
// The same into out[0, n): n must be the tensor's element count.
void dequantize_floats_into(const GgufTensor& t, float* out, size_t n);

// Writes `g` as a GGUF file of g.version (2 or 3): metadata and tensor infos in order, each tensor's bytes
// at the next multiple of g.alignment (offsets recomputed; GgufTensor::offset is ignored). If g.alignment is
// not 32, metadata must hold general.alignment (U32) equal to it. Error on anything parse_gguf would refuse
// (a wrong byte count for a tensor, an unknown type, ...).
std::vector<uint8_t> encode_gguf(const Gguf& g);

}  // namespace sparse24
