// The character-level pieces of the WordPiece pipeline (internal to sparse24_text): UTF-8 decoding and
// encoding, and the character classes and transforms of HF's BertNormalizer and BertPreTokenizer. NFD,
// combining classes and case mapping come from utf8proc; the control, punctuation and nonspacing-mark
// classes come from tables measured on HF itself (hf_unicode_tables.inc), because HF's unicode_categories
// crate uses old Unicode tables that differ from utf8proc's current ones on about 600 code points.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace sparse24::text {

// Appends the code points of `s` to `out` (cleared first). Each byte that does not start a valid UTF-8
// sequence (overlong, surrogate, beyond U+10FFFF, truncated) becomes one U+FFFD.
void decode_utf8(std::string_view s, std::u32string& out);
void append_utf8(std::string& out, char32_t c);
// Whether `s` is valid UTF-8 as decode_utf8 reads it (what a JSON string must be).
bool is_valid_utf8(std::string_view s);
// Decodes the character at byte i of valid UTF-8 `s` (as produced by append_utf8) into c; returns its length.
size_t next_char(std::string_view s, size_t i, char32_t& c);
size_t count_chars(std::string_view s);  // characters of valid UTF-8

bool is_rust_whitespace(char32_t c);   // Rust's char::is_whitespace (Unicode White_Space)
bool is_bert_punctuation(char32_t c);  // ASCII punctuation or general category P*

// BertNormalizer's steps, in place (tmp is scratch).
void clean_text(std::u32string& s);                        // drop NUL, U+FFFD, controls; whitespace -> ' '
void space_cjk(std::u32string& s, std::u32string& tmp);    // ' ' around CJK ideographs
void nfd_drop_mn(std::u32string& s, std::u32string& tmp);  // NFD, then drop nonspacing marks (Mn)
void lowercase(std::u32string& s, std::u32string& tmp);    // Rust's char::to_lowercase per character

// For added tokens' lstrip/rstrip (Rust regex \s): where the trailing whitespace of s starts, and the
// length of the leading whitespace of s.
size_t whitespace_suffix_start(std::string_view s);
size_t whitespace_prefix_length(std::string_view s);

}  // namespace sparse24::text
