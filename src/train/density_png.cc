#include "train/density_png.h"

#include <png.h>

#include <algorithm>
#include <cmath>

#include "sparse24/error.h"
#include "sparse24/io.h"

namespace sparse24::train {
namespace {

void append_bytes(png_structp png, png_bytep data, png_size_t n) {
  auto* out = static_cast<std::vector<uint8_t>*>(png_get_io_ptr(png));
  out->insert(out->end(), data, data + n);
}

void flush_nothing(png_structp) {}

}  // namespace

std::vector<uint8_t> encode_png_rgb(const std::vector<uint8_t>& rgb, int64_t width, int64_t height) {
  if (width <= 0 || height <= 0 || width > (1 << 20) || height > (1 << 20) ||
      rgb.size() != static_cast<size_t>(width * height * 3))
    throw Error("png: bad image size " + std::to_string(width) + "x" + std::to_string(height));
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (!png || !info) {
    png_destroy_write_struct(&png, &info);
    throw Error("png: out of memory");
  }
  std::vector<uint8_t> out;
  std::vector<png_bytep> rows(static_cast<size_t>(height));
  for (int64_t y = 0; y < height; ++y)
    rows[static_cast<size_t>(y)] = const_cast<png_bytep>(rgb.data() + y * width * 3);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    throw Error("png: encoding failed");
  }
  png_set_write_fn(png, &out, append_bytes, flush_nothing);
  png_set_IHDR(png, info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height), 8,
               PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  png_write_image(png, rows.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

void write_density_png(const std::string& path, const float* w, int64_t rows, int64_t cols, int scale) {
  if (rows <= 0 || cols <= 0) throw Error(path + ": empty matrix");
  if (scale <= 0) scale = static_cast<int>(std::clamp<int64_t>(256 / std::min(rows, cols), 1, 8));
  const int64_t width = cols * scale, height = rows * scale;
  float max_abs = 0;
  for (int64_t i = 0; i < rows * cols; ++i) max_abs = std::max(max_abs, std::fabs(w[i]));
  std::vector<uint8_t> rgb(static_cast<size_t>(width * height * 3), 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float v = w[r * cols + c];
      if (v == 0.f || max_abs == 0.f) continue;  // black
      // sqrt spreads the many small weights; the floor of 60 keeps tiny nonzeros visibly not black.
      const auto level = static_cast<uint8_t>(60 + std::lround(195 * std::sqrt(std::fabs(v) / max_abs)));
      const int channel = v > 0 ? 0 : 2;
      for (int dy = 0; dy < scale; ++dy)
        for (int dx = 0; dx < scale; ++dx)
          rgb[static_cast<size_t>(((r * scale + dy) * width + c * scale + dx) * 3 + channel)] = level;
    }
  }
  write_file_atomic(path, encode_png_rgb(rgb, width, height));
}

}  // namespace sparse24::train
