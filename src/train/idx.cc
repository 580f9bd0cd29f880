#include "train/idx.h"

#include <zlib.h>

#include <algorithm>
#include <limits>

#include "sparse24/error.h"
#include "sparse24/io.h"

namespace sparse24::train {
namespace {

// Larger than any IDX file we read (Fashion-MNIST train images inflate to 47 MB).
constexpr size_t kMaxInflated = size_t{1} << 30;

[[noreturn]] void fail(const std::string& what, const std::string& problem) {
  throw Error(what + ": " + problem);
}

uint32_t be32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | uint32_t{p[3]};
}

}  // namespace

std::vector<uint8_t> gunzip(const uint8_t* data, size_t size, size_t max_out, const std::string& what) {
  z_stream zs{};
  if (inflateInit2(&zs, 15 + 16) != Z_OK) fail(what, "cannot initialise zlib");
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  zs.next_in = const_cast<uint8_t*>(data);
  size_t consumed = 0;
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    if (zs.avail_in == 0) {
      const size_t chunk = std::min<size_t>(size - consumed, std::numeric_limits<uInt>::max());
      if (chunk == 0) break;
      zs.next_in = const_cast<uint8_t*>(data + consumed);
      zs.avail_in = static_cast<uInt>(chunk);
      consumed += chunk;
    }
    zs.next_out = buf;
    zs.avail_out = sizeof(buf);
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      const std::string msg = zs.msg ? zs.msg : "error " + std::to_string(rc);
      inflateEnd(&zs);
      fail(what, "corrupt gzip data (" + msg + ")");
    }
    const size_t produced = sizeof(buf) - zs.avail_out;
    if (out.size() + produced > max_out) {
      inflateEnd(&zs);
      fail(what, "gzip data inflates to more than " + std::to_string(max_out) + " bytes");
    }
    out.insert(out.end(), buf, buf + produced);
  }
  inflateEnd(&zs);
  if (rc != Z_STREAM_END) fail(what, "truncated gzip data");
  return out;
}

std::vector<uint8_t> gzip(const uint8_t* data, size_t size) {
  z_stream zs{};
  if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw Error("gzip: cannot initialise zlib");
  std::vector<uint8_t> out(deflateBound(&zs, static_cast<uLong>(size)) + 32);
  zs.next_in = const_cast<uint8_t*>(data);
  zs.avail_in = static_cast<uInt>(size);
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  deflateEnd(&zs);
  if (rc != Z_STREAM_END) throw Error("gzip: deflate failed");
  out.resize(zs.total_out);
  return out;
}

Idx parse_idx(const uint8_t* data, size_t size, int rank, const std::string& what) {
  if (size < 4) fail(what, "too short for an IDX header (" + std::to_string(size) + " bytes)");
  if (data[0] != 0 || data[1] != 0)
    fail(what, "bad IDX magic (first two bytes must be zero): not an IDX file");
  if (data[2] != 0x08)
    fail(what, "IDX element type " + std::to_string(data[2]) + " is not 8 (unsigned byte)");
  if (data[3] != rank)
    fail(what, "IDX rank " + std::to_string(data[3]) + ", expected " + std::to_string(rank));
  const size_t header = 4 + 4 * static_cast<size_t>(rank);
  if (size < header) fail(what, "truncated IDX header (" + std::to_string(size) + " bytes)");
  Idx idx;
  uint64_t numel = 1;
  for (int i = 0; i < rank; ++i) {
    const uint32_t d = be32(data + 4 + 4 * i);
    if (d > (uint32_t{1} << 31) - 1) fail(what, "IDX dimension " + std::to_string(i) + " is too large");
    if (d != 0 && numel > (uint64_t{1} << 40) / d) fail(what, "IDX element count overflows");
    numel *= d;
    idx.dims.push_back(d);
  }
  if (size - header != numel)
    fail(what, "IDX data is " + std::to_string(size - header) + " bytes, dimensions " +
                   shape_string(idx.dims) + " need " + std::to_string(numel));
  idx.data.assign(data + header, data + size);
  return idx;
}

Idx read_idx(const std::string& path, int rank) {
  const std::vector<uint8_t> raw = read_file(path);
  if (raw.size() >= 2 && raw[0] == 0x1f && raw[1] == 0x8b) {
    const std::vector<uint8_t> inflated = gunzip(raw.data(), raw.size(), kMaxInflated, path);
    return parse_idx(inflated.data(), inflated.size(), rank, path);
  }
  return parse_idx(raw.data(), raw.size(), rank, path);
}

std::vector<uint8_t> encode_idx(const std::vector<int64_t>& dims, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (int64_t d : dims)
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(static_cast<uint64_t>(d) >> s));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

IdxDataset read_idx_dataset(const std::string& images_path, const std::string& labels_path, int classes) {
  Idx images = read_idx(images_path, 3);
  Idx labels = read_idx(labels_path, 1);
  if (images.dims[0] != labels.dims[0])
    throw Error(images_path + ": " + std::to_string(images.dims[0]) + " images but " + labels_path + " has " +
                std::to_string(labels.dims[0]) + " labels");
  if (images.dims[1] == 0 || images.dims[2] == 0) fail(images_path, "images have zero size");
  for (size_t i = 0; i < labels.data.size(); ++i)
    if (labels.data[i] >= classes)
      fail(labels_path, "label " + std::to_string(labels.data[i]) + " at index " + std::to_string(i) +
                            " is not below " + std::to_string(classes));
  IdxDataset ds;
  ds.n = images.dims[0];
  ds.rows = images.dims[1];
  ds.cols = images.dims[2];
  ds.images = std::move(images.data);
  ds.labels = std::move(labels.data);
  return ds;
}

}  // namespace sparse24::train
