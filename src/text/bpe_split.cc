// The pre-tokenizer regexes of byte-level BPE (bpe_split.h).
#include "bpe_split.h"

#include <utf8proc.h>

#include <algorithm>

#include "code_ranges.h"

namespace sparse24::text::bpe_detail {
namespace {

// HF's classes, measured (hf_bpe_classes.inc): Oniguruma's Unicode tables in the regex and Rust's in Digits
// are newer than utf8proc's (Unicode 16 letters such as U+1C89 would otherwise be "other").
#include "hf_bpe_classes.inc"

// (?i:...) folds case: ASCII, and U+017F (long s) folds to s.
char32_t fold(char32_t c) { return c >= U'A' && c <= U'Z' ? c + 32 : c == 0x17F ? U's' : c; }
bool newline(char32_t c) { return c == U'\r' || c == U'\n'; }

// (?i:'s|'t|'re|'ve|'m|'ll|'d) at character k of [k, b): its length, 0 when it does not match.
size_t contraction(const std::vector<Char>& ch, size_t k, size_t b) {
  if (k + 1 >= b || ch[k].cp != U'\'') return 0;
  const char32_t n1 = fold(ch[k + 1].cp);
  if (n1 == U's' || n1 == U't' || n1 == U'm' || n1 == U'd') return 2;
  if (k + 2 >= b) return 0;
  const char32_t n2 = fold(ch[k + 2].cp);
  return (n1 == U'r' && n2 == U'e') || (n1 == U'v' && n2 == U'e') || (n1 == U'l' && n2 == U'l') ? 3 : 0;
}

// The patterns' last alternatives at a whitespace character i: \s*[\r\n]+ (up to the run's last CR or
// LF, if it has one), else \s+(?!\S) | \s+ (the run, leaving its last character to the next match when a
// non-space follows and the run is longer than one). The match's end.
size_t space_run(const std::vector<Char>& ch, size_t i, size_t b) {
  size_t k = i, last_newline = b;
  for (; k < b && ch[k].cls == Cls::kSpace; ++k)
    if (newline(ch[k].cp)) last_newline = k;
  if (last_newline < b) return last_newline + 1;
  return k < b && k - i >= 2 ? k - 1 : k;
}

Cls classify(char32_t c) {
  if (in_ranges(kHfSpace, c)) return Cls::kSpace;
  if (in_ranges(kHfLetter, c)) return Cls::kLetter;
  if (in_ranges(kHfNumber, c)) return Cls::kNumber;
  return Cls::kOther;
}

}  // namespace

// The characters of `s`; an invalid byte is one character of class Other (HF never sees one: Python strings
// are valid Unicode).
void chars_of(std::string_view s, std::vector<Char>& out) {
  out.clear();
  size_t i = 0;
  while (i < s.size()) {
    utf8proc_int32_t cp = -1;
    const utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                                static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
    if (n <= 0 || cp < 0) {
      out.push_back({0xFFFFFFFF, Cls::kOther, false, false, false, static_cast<uint32_t>(i),
                     static_cast<uint32_t>(i + 1)});
      ++i;
    } else {
      const auto c = static_cast<char32_t>(cp);
      out.push_back({c, classify(c), in_ranges(kHfDigit, c), in_ranges(kHfUpper, c), in_ranges(kHfLower, c),
                     static_cast<uint32_t>(i), static_cast<uint32_t>(i + static_cast<size_t>(n))});
      i += static_cast<size_t>(n);
    }
  }
}

// The GPT-2 regex over characters [a, b) of `ch`: appends each match as a character range.
void gpt2_split(const std::vector<Char>& ch, size_t a, size_t b,
                std::vector<std::pair<size_t, size_t>>& out) {
  size_t i = a;
  while (i < b) {
    const char32_t c = ch[i].cp;
    // 's|'t|'re|'ve|'m|'ll|'d
    if (c == U'\'' && i + 1 < b) {
      const char32_t n1 = ch[i + 1].cp;
      if (n1 == U's' || n1 == U't' || n1 == U'm' || n1 == U'd') {
        out.emplace_back(i, i + 2);
        i += 2;
        continue;
      }
      if (i + 2 < b) {
        const char32_t n2 = ch[i + 2].cp;
        if ((n1 == U'r' && n2 == U'e') || (n1 == U'v' && n2 == U'e') || (n1 == U'l' && n2 == U'l')) {
          out.emplace_back(i, i + 3);
          i += 3;
          continue;
        }
      }
    }
    //  ?\p{L}+ |  ?\p{N}+ |  ?[^\s\p{L}\p{N}]+ : an optional space, then a run of one class
    size_t start = i;
    if (c == U' ' && i + 1 < b && ch[i + 1].cls != Cls::kSpace) start = i + 1;
    if (ch[start].cls != Cls::kSpace) {
      const Cls cls = ch[start].cls;
      size_t k = start;
      while (k < b && ch[k].cls == cls) ++k;
      out.emplace_back(i, k);
      i = k;
      continue;
    }
    // \s+(?!\S) | \s+ : a whitespace run, leaving its last character to the next match when a
    // non-space follows (and the run is longer than one)
    size_t k = i;
    while (k < b && ch[k].cls == Cls::kSpace) ++k;
    if (k < b && k - i >= 2) --k;
    out.emplace_back(i, k);
    i = k;
  }
}

// That regex over characters [a, b) of `ch` (max_digits: 3 for Llama 3, 1 for Qwen2), matches appended as
// character ranges; the alternatives in the regex's order, each with the backtracking it would do.
void pattern_split(const std::vector<Char>& ch, size_t a, size_t b, size_t max_digits,
                   std::vector<std::pair<size_t, size_t>>& out) {
  size_t i = a;
  while (i < b) {
    const char32_t c = ch[i].cp;
    // (?i:'s|'t|'re|'ve|'m|'ll|'d)
    if (const size_t n = contraction(ch, i, b)) {
      out.emplace_back(i, i + n);
      i += n;
      continue;
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+ : one character that is none of those may lead a letter run
    size_t start = i;
    if (ch[i].cls != Cls::kLetter && ch[i].cls != Cls::kNumber && !newline(c) && i + 1 < b &&
        ch[i + 1].cls == Cls::kLetter)
      start = i + 1;
    if (ch[start].cls == Cls::kLetter) {
      size_t k = start;
      while (k < b && ch[k].cls == Cls::kLetter) ++k;
      out.emplace_back(i, k);
      i = k;
      continue;
    }
    // \p{N}{1,max_digits}
    if (ch[i].cls == Cls::kNumber) {
      size_t k = i;
      while (k < b && k - i < max_digits && ch[k].cls == Cls::kNumber) ++k;
      out.emplace_back(i, k);
      i = k;
      continue;
    }
    //  ?[^\s\p{L}\p{N}]+[\r\n]*
    start = c == U' ' && i + 1 < b && ch[i + 1].cls == Cls::kOther ? i + 1 : i;
    if (ch[start].cls == Cls::kOther) {
      size_t k = start;
      while (k < b && ch[k].cls == Cls::kOther) ++k;
      while (k < b && newline(ch[k].cp)) ++k;
      out.emplace_back(i, k);
      i = k;
      continue;
    }
    const size_t k = space_run(ch, i, b);
    out.emplace_back(i, k);
    i = k;
  }
}

void o200k_split(const std::vector<Char>& ch, size_t a, size_t b,
                 std::vector<std::pair<size_t, size_t>>& out) {
  constexpr size_t kNone = static_cast<size_t>(-1);
  size_t i = a;
  while (i < b) {
    // [^\r\n\p{L}\p{N}]? : the word alternatives try with this character first, then without.
    const bool lead = ch[i].cls != Cls::kLetter && ch[i].cls != Cls::kNumber && !newline(ch[i].cp);
    const size_t starts[2] = {lead && i + 1 < b ? i + 1 : kNone, i};
    size_t end = kNone;
    // Upper* Lower+ 's? : the longest Upper* run that a Lower character follows (Upper* gives characters
    // back until one does; Lm, Lo and M are in both sets), then Lower+ and a contraction.
    for (size_t s : starts) {
      if (s == kNone) continue;
      size_t u = s;
      while (u < b && ch[u].upper) ++u;
      size_t k = std::min(u, b - 1);  // the Lower character: the last of [s, k] that is one
      while (k > s && !ch[k].lower) --k;
      if (!ch[k].lower) continue;
      size_t e = k;
      while (e < b && ch[e].lower) ++e;
      end = e + contraction(ch, e, b);
      break;
    }
    // Upper+ Lower* 's?
    for (size_t s : starts) {
      if (end != kNone) break;
      if (s == kNone || !ch[s].upper) continue;
      size_t e = s;
      while (e < b && ch[e].upper) ++e;
      while (e < b && ch[e].lower) ++e;
      end = e + contraction(ch, e, b);
    }
    if (end == kNone && ch[i].cls == Cls::kNumber) {  // \p{N}{1,3}
      end = i;
      while (end < b && end - i < 3 && ch[end].cls == Cls::kNumber) ++end;
    }
    if (end == kNone) {  //  ?[^\s\p{L}\p{N}]+[\r\n/]*
      const size_t s = ch[i].cp == U' ' && i + 1 < b && ch[i + 1].cls == Cls::kOther ? i + 1 : i;
      if (ch[s].cls == Cls::kOther) {
        end = s;
        while (end < b && ch[end].cls == Cls::kOther) ++end;
        while (end < b && (newline(ch[end].cp) || ch[end].cp == U'/')) ++end;
      }
    }
    // Whitespace (a character in none of the classes, which the tables do not have, alone).
    if (end == kNone) end = ch[i].cls == Cls::kSpace ? space_run(ch, i, b) : i + 1;
    out.emplace_back(i, end);
    i = end;
  }
}

}  // namespace sparse24::text::bpe_detail
