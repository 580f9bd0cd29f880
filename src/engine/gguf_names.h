// transformers' tensor names and llama.cpp's (a GGUF file's), both ways, and the RoPE row order llama.cpp's
// converter writes Q's and K's rows in: what the GGUF decoder loader (hf_decoder.cc) reads a file through.
#pragma once
#include <cstdint>
#include <string>

namespace sparse24::engine::detail {

// transformers' name of a decoder tensor -> llama.cpp's ("" when it has none). Gemma's four layer norms
// have names of their own (its post_attention_layernorm is attention's output norm).
std::string gguf_name(const std::string& hf, bool gemma);
// transformers' name of a llama.cpp tensor (the transformers name gguf_name maps to it), or "" for one it
// has none for (rope_freqs.weight: the config carries it).
std::string hf_name_of_gguf(const std::string& name, bool gemma);
// llama.cpp's converter reorders Q's and K's rows within each head for its RoPE, which rotates adjacent
// pairs: file row 2i + s of a head is row s * d/2 + i of transformers' rotate_half layout. Undone here: w's
// heads x d rows of `cols` floats into out.
void unpermute_rope_rows(const float* w, int64_t heads, int64_t d, int64_t cols, float* out);

}  // namespace sparse24::engine::detail
