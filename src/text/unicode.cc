#include "unicode.h"

#include <utf8proc.h>

#include <algorithm>
#include <iterator>

#include "code_ranges.h"

namespace sparse24::text {

namespace {

#include "hf_unicode_tables.inc"

// HF's is_control: unicode_categories' is_other() (Cc, Cf, Co of its old tables), minus \t \n \r.
bool is_control(char32_t c) {
  if (c < 0x80) return (c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7F;
  return in_ranges(kHfControl, c);
}

// Rust's char::to_lowercase for c >= 0x80 other than U+0130: utf8proc's mapping unless HF's differs.
char32_t lower_char(char32_t c) {
  const CodeRange* it = std::lower_bound(std::begin(kHfLowercase), std::end(kHfLowercase), c,
                                         [](const CodeRange& r, char32_t x) { return r.first < x; });
  if (it != std::end(kHfLowercase) && it->first == c) return it->last;
  return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
}

bool nfd_kept(char32_t c) { return std::binary_search(std::begin(kHfNfdKept), std::end(kHfNfdKept), c); }

bool is_nonspacing_mark(char32_t c) { return c >= 0x80 && in_ranges(kHfNonspacingMark, c); }

// BERT's "Chinese character" ranges, exactly as HF lists them (note 0x2B820-0x2B91F is not among them).
bool is_cjk(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

int combining_class(char32_t c) {
  return c < 0x300 ? 0 : utf8proc_get_property(static_cast<utf8proc_int32_t>(c))->combining_class;
}

}  // namespace

void decode_utf8(std::string_view s, std::u32string& out) {
  out.clear();
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  size_t i = 0;
  while (i < s.size()) {
    if (p[i] < 0x80) {
      out.push_back(p[i++]);
      continue;
    }
    utf8proc_int32_t c;
    const utf8proc_ssize_t n = utf8proc_iterate(p + i, static_cast<utf8proc_ssize_t>(s.size() - i), &c);
    if (n <= 0) {
      out.push_back(0xFFFD);
      ++i;
    } else {
      out.push_back(static_cast<char32_t>(c));
      i += static_cast<size_t>(n);
    }
  }
}

bool is_valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  for (size_t i = 0; i < s.size();) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    utf8proc_int32_t c;
    const utf8proc_ssize_t n = utf8proc_iterate(p + i, static_cast<utf8proc_ssize_t>(s.size() - i), &c);
    if (n <= 0) return false;
    i += static_cast<size_t>(n);
  }
  return true;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

size_t next_char(std::string_view s, size_t i, char32_t& c) {
  const auto b = static_cast<unsigned char>(s[i]);
  size_t n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  if (n > s.size() - i) n = s.size() - i;  // never past the end, even on bad input
  c = n == 1 ? b : b & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return n;
}

size_t count_chars(std::string_view s) {
  size_t n = 0;
  for (char ch : s) n += (static_cast<unsigned char>(ch) & 0xC0) != 0x80;
  return n;
}

bool is_rust_whitespace(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D);
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_bert_punctuation(char32_t c) {
  if (c < 0x80)
    return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
  return in_ranges(kHfPunctuation, c);
}

void clean_text(std::u32string& s) {
  size_t o = 0;
  for (char32_t c : s) {
    if (c == 0 || c == 0xFFFD || is_control(c)) continue;
    s[o++] = is_rust_whitespace(c) ? U' ' : c;
  }
  s.resize(o);
}

void space_cjk(std::u32string& s, std::u32string& tmp) {
  tmp.clear();
  for (char32_t c : s) {
    if (is_cjk(c)) {
      tmp.push_back(' ');
      tmp.push_back(c);
      tmp.push_back(' ');
    } else {
      tmp.push_back(c);
    }
  }
  s.swap(tmp);
}

void nfd_drop_mn(std::u32string& s, std::u32string& tmp) {
  tmp.clear();
  size_t run = 0;  // start of the current run of characters with a nonzero combining class
  for (char32_t c : s) {
    utf8proc_int32_t buf[8];
    utf8proc_ssize_t n = 1;
    buf[0] = static_cast<utf8proc_int32_t>(c);
    if (c >= 0xC0 && !nfd_kept(c)) {
      int boundclass = 0;
      n = utf8proc_decompose_char(buf[0], buf, 8, UTF8PROC_DECOMPOSE, &boundclass);
      if (n < 1 || n > 8) {
        n = 1;
        buf[0] = static_cast<utf8proc_int32_t>(c);
      }
    }
    for (utf8proc_ssize_t k = 0; k < n; ++k) {
      const auto d = static_cast<char32_t>(buf[k]);
      const int cc = combining_class(d);
      if (cc == 0) {
        run = tmp.size() + 1;
        tmp.push_back(d);
        continue;
      }
      // Canonical ordering: a stable insertion by combining class within the run.
      size_t pos = tmp.size();
      while (pos > run && combining_class(tmp[pos - 1]) > cc) --pos;
      tmp.insert(tmp.begin() + static_cast<std::ptrdiff_t>(pos), d);
    }
  }
  s.clear();
  for (char32_t c : tmp)
    if (!is_nonspacing_mark(c)) s.push_back(c);
}

void lowercase(std::u32string& s, std::u32string& tmp) {
  tmp.clear();
  for (char32_t c : s) {
    if (c < 0x80) {
      tmp.push_back(c >= 'A' && c <= 'Z' ? c + 32 : c);
    } else if (c == 0x130) {  // the one character whose lowercase is two: i + combining dot above
      tmp.push_back('i');
      tmp.push_back(0x307);
    } else {
      tmp.push_back(lower_char(c));
    }
  }
  s.swap(tmp);
}

size_t whitespace_suffix_start(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    char32_t c;
    next_char(s, start, c);
    if (!is_rust_whitespace(c)) break;
    end = start;
  }
  return end;
}

size_t whitespace_prefix_length(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    char32_t c;
    const size_t n = next_char(s, i, c);
    if (!is_rust_whitespace(c)) break;
    i += n;
  }
  return i;
}

}  // namespace sparse24::text
