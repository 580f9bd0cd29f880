// Byte-level BPE's pre-tokenizer regexes (bpe.cc), matched by hand over Hugging Face's own character
// classes (hf_bpe_classes.inc, measured by test/text/gen_hf_bpe_classes.py): GPT-2's, and the Split
// patterns of Llama 3, Qwen2 and GPT-4o (o200k: Phi-4-mini's).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace sparse24::text::bpe_detail {

// Character classes of the regexes: \p{L}, \p{N}, \s, the rest.
enum class Cls : uint8_t { kLetter, kNumber, kSpace, kOther };

struct Char {
  char32_t cp;  // 0xFFFFFFFF for an invalid byte
  Cls cls;
  bool digit;           // numeric for the Digits pre-tokenizer
  bool upper, lower;    // in GPT-4o's [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and [\p{Ll}\p{Lm}\p{Lo}\p{M}]
  uint32_t begin, end;  // bytes in the piece
};

// The characters of `s`; an invalid byte is one character of class Other (HF never sees one: Python strings
// are valid Unicode).
void chars_of(std::string_view s, std::vector<Char>& out);

// The GPT-2 regex 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ over
// characters [a, b) of `ch`: appends each match as a character range.
void gpt2_split(const std::vector<Char>& ch, size_t a, size_t b, std::vector<std::pair<size_t, size_t>>& out);

// The Split pre-tokenizers matched here: their regexes exactly as tokenizer.json spells them. Llama 3's (and
// llama.cpp's "llama-bpe"); Qwen2's differs only in taking digits one at a time.
constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// That regex over characters [a, b) of `ch` (max_digits: 3 for Llama 3, 1 for Qwen2), matches appended as
// character ranges; the alternatives in the regex's order, each with the backtracking it would do.
void pattern_split(const std::vector<Char>& ch, size_t a, size_t b, size_t max_digits,
                   std::vector<std::pair<size_t, size_t>>& out);

// GPT-4o's (tiktoken's o200k_base; Phi-4-mini's and gpt-oss's tokenizer.json): words split where lower
// case turns to upper case, contractions joined to their word, "/" and newlines after punctuation.
constexpr const char* kO200kPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// That regex over characters [a, b) of `ch`, as pattern_split.
void o200k_split(const std::vector<Char>& ch, size_t a, size_t b,
                 std::vector<std::pair<size_t, size_t>>& out);

}  // namespace sparse24::text::bpe_detail
