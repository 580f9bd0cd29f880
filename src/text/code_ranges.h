// Inclusive code point ranges, the form of the Unicode tables measured from Hugging Face tokenizers
// (hf_unicode_tables.inc for WordPiece, hf_bpe_classes.inc for byte-level BPE), and the lookup in them.
#pragma once
#include <algorithm>
#include <cstddef>

namespace sparse24::text {

struct CodeRange {
  char32_t first, last;
};

// True when c lies in one of the table's ranges (sorted, disjoint).
template <size_t N>
bool in_ranges(const CodeRange (&table)[N], char32_t c) {
  const CodeRange* it =
      std::upper_bound(table, table + N, c, [](char32_t x, const CodeRange& r) { return x < r.first; });
  return it != table && c <= (it - 1)->last;
}

}  // namespace sparse24::text
