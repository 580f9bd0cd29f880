// Density maps of weight matrices as PNG images: one cell per weight of the [rows, K] matrix (pattern.h's
// matrix_view), positive weights red, negative blue, exact zeros black. Brightness grows with |w| relative to
// the layer's largest |w| and starts at a visible floor, so every nonzero is distinguishable from a pruned
// weight.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace sparse24::train {

// Writes the map of a row-major [rows, cols] matrix. Each weight becomes a `scale` x `scale` block
// (scale 0 = choose one so the shorter side is at least ~256 pixels, at most 8). Atomic (write_file_atomic).
void write_density_png(const std::string& path, const float* w, int64_t rows, int64_t cols, int scale = 0);

// Encodes 8-bit RGB pixels (height * width * 3 bytes) as a PNG file's bytes.
std::vector<uint8_t> encode_png_rgb(const std::vector<uint8_t>& rgb, int64_t width, int64_t height);

}  // namespace sparse24::train
