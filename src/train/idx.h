// The IDX file format (MNIST, Fashion-MNIST), plain or gzipped.
//
// Layout: a 4-byte big-endian magic 0x00 0x00 <type> <rank>, then <rank> big-endian uint32 dimensions, then
// the elements in C order. Only type 0x08 (unsigned byte) is read; that is what the image and label files
// hold. Every count is validated before anything is allocated for it, and every problem is one
// sparse24::Error line "<file>: <problem>".
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace sparse24::train {

struct Idx {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;  // product(dims) bytes, C order
};

// Inflates a gzip stream; `max_out` bounds the result (Error if the stream inflates past it).
std::vector<uint8_t> gunzip(const uint8_t* data, size_t size, size_t max_out, const std::string& what);
// Gzips `data` (for tests and tools that write IDX files).
std::vector<uint8_t> gzip(const uint8_t* data, size_t size);

// Parses an IDX byte stream (already inflated). `rank` and, when non-negative, `dim0` are what the caller
// expects (e.g. rank 3 for images, rank 1 for labels).
Idx parse_idx(const uint8_t* data, size_t size, int rank, const std::string& what);
// Reads a file, inflating it when it starts with the gzip magic 1f 8b.
Idx read_idx(const std::string& path, int rank);
// Encodes an unsigned-byte IDX stream (not gzipped).
std::vector<uint8_t> encode_idx(const std::vector<int64_t>& dims, const std::vector<uint8_t>& data);

// A labelled image set: images [n, rows, cols] bytes, labels [n] in 0..classes-1.
struct IdxDataset {
  int64_t n = 0, rows = 0, cols = 0;
  std::vector<uint8_t> images;
  std::vector<uint8_t> labels;
};
// Reads an image file and a label file, checks they agree (same count, labels < classes).
IdxDataset read_idx_dataset(const std::string& images_path, const std::string& labels_path, int classes = 10);

}  // namespace sparse24::train
