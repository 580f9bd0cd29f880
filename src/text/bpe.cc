// Byte-level BPE, the pipeline of Hugging Face `tokenizers` (Tokenizer::encode for one sequence) and of
// llama.cpp's gpt2-type vocabularies:
//   1. added tokens are found in the raw text (leftmost, longest first) and become ids of their own;
//   2. every other piece is pre-tokenized (after NFC, when the normalizer says so): with Digits, each numeric
//      character is a piece of its own; then the GPT-2 regex
//      's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ cuts each piece, or a
//      Split pre-tokenizer's Llama 3 / Qwen2 regex (kLlama3Pattern below) does (both matched by hand over
//      HF's own character classes, measured: hf_bpe_classes.inc);
//   3. each word's bytes become the GPT-2 byte-to-unicode characters, one symbol each, and the adjacent pair
//      of lowest merge rank (leftmost among equals) is merged until no pair has a rank;
//   4. truncation, then the post-processor's special tokens around the sequence.
#include <filesystem>

#include "bpe_impl.h"
#include "sparse24/gguf.h"
#include "sparse24/io.h"

namespace sparse24::text {

using namespace bpe_detail;  // NOLINT: the tokenizer's own helpers (bpe_impl.h)

ByteBpe ByteBpe::from_model(const std::string& path) {
  if (is_gguf_file(path)) return from_gguf(MappedGguf(path).gguf, path);
  return from_dir(path);
}

std::vector<int32_t> ByteBpe::encode(std::string_view s, int64_t max_length, bool add_special) const {
  const Impl& m = *impl_;
  std::vector<int32_t> ids;
  std::vector<Impl::Segment> segs;
  std::vector<std::string> words;
  m.segments(s, segs);
  for (const Impl::Segment& seg : segs) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    words.clear();
    m.words(s.substr(seg.begin, seg.end - seg.begin), seg.begin == 0, words);
    for (const std::string& w : words) m.bpe(w, ids);
  }
  const size_t specials = add_special ? m.prefix.size() + m.suffix.size() : 0;
  if (max_length > 0) {
    if (static_cast<size_t>(max_length) < specials)
      throw Error("max_length " + std::to_string(max_length) + " is below the " + std::to_string(specials) +
                  " special tokens");
    if (ids.size() > static_cast<size_t>(max_length) - specials)
      ids.resize(static_cast<size_t>(max_length) - specials);
  }
  if (!add_special) return ids;
  ids.insert(ids.begin(), m.prefix.begin(), m.prefix.end());
  ids.insert(ids.end(), m.suffix.begin(), m.suffix.end());
  return ids;
}

std::vector<std::string> ByteBpe::split(std::string_view s) const {
  const Impl& m = *impl_;
  const ByteMap& bm = byte_map();
  std::vector<Impl::Segment> segs;
  std::vector<std::string> words, out;
  m.segments(s, segs);
  for (const Impl::Segment& seg : segs) {
    if (seg.id >= 0) {
      out.emplace_back(s.substr(seg.begin, seg.end - seg.begin));
      continue;
    }
    words.clear();
    m.words(s.substr(seg.begin, seg.end - seg.begin), seg.begin == 0, words);
    for (const std::string& w : words) {
      if (m.spm) {  // SentencePiece-style words are spelled as they are
        out.push_back(w);
        continue;
      }
      std::string mapped;
      for (char c : w) mapped += bm.to_utf8[static_cast<uint8_t>(c)];
      out.push_back(std::move(mapped));
    }
  }
  return out;
}

std::string ByteBpe::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  const Impl& m = *impl_;
  const ByteMap& bm = byte_map();
  std::string bytes;
  for (int32_t id : ids) {
    const std::string& t = token(id);
    if (skip_special && m.special[static_cast<size_t>(id)]) continue;
    if (m.spm) {  // <0xXX> is its byte, U+2581 a space (HF's Replace, ByteFallback, Fuse decoders)
      if (const int16_t b = m.byte_of[static_cast<size_t>(id)]; b >= 0) {
        bytes += static_cast<char>(b);
        continue;
      }
      for (size_t i = 0; i < t.size();) {
        const bool space = t.compare(i, 3, "\xE2\x96\x81") == 0;
        bytes += space ? std::string(" ") : t.substr(i, 1);
        i += space ? 3 : 1;
      }
      continue;
    }
    for (size_t i = 0; i < t.size();) {
      char32_t c = 0;
      utf8proc_int32_t cp = -1;
      const utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(t.data() + i),
                                                  static_cast<utf8proc_ssize_t>(t.size() - i), &cp);
      if (n <= 0 || cp < 0) {  // a token that is not valid UTF-8: its bytes as they are
        bytes += t[i++];
        continue;
      }
      c = static_cast<char32_t>(cp);
      auto it = bm.to_byte.find(c);
      if (it != bm.to_byte.end())
        bytes += static_cast<char>(it->second);
      else
        bytes.append(t, i, static_cast<size_t>(n));
      i += static_cast<size_t>(n);
    }
  }
  if (m.spm && m.spm_strip && !bytes.empty() && bytes[0] == ' ') bytes.erase(0, 1);  // HF's Strip(" ", 1, 0)
  // Invalid UTF-8 becomes U+FFFD, one per maximal invalid subpart (as Rust's from_utf8_lossy does).
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    const auto b0 = static_cast<uint8_t>(bytes[i]);
    size_t len = b0 < 0x80                    ? 1
                 : (b0 >= 0xC2 && b0 <= 0xDF) ? 2
                 : (b0 >= 0xE0 && b0 <= 0xEF) ? 3
                 : (b0 >= 0xF0 && b0 <= 0xF4) ? 4
                                              : 0;
    size_t ok = len == 0 ? 0 : 1;  // bytes of the sequence that are valid so far
    while (ok > 0 && ok < len && i + ok < bytes.size()) {
      const auto b = static_cast<uint8_t>(bytes[i + ok]);
      uint8_t lo = 0x80, hi = 0xBF;
      if (ok == 1) {
        if (b0 == 0xE0) lo = 0xA0;
        if (b0 == 0xED) hi = 0x9F;
        if (b0 == 0xF0) lo = 0x90;
        if (b0 == 0xF4) hi = 0x8F;
      }
      if (b < lo || b > hi) break;
      ++ok;
    }
    if (len > 0 && ok == len) {
      out.append(bytes, i, len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      i += std::max<size_t>(ok, 1);
    }
  }
  return out;
}

int64_t ByteBpe::vocab_size() const { return static_cast<int64_t>(impl_->tokens.size()); }

const std::string& ByteBpe::token(int32_t id) const {
  const Impl& m = *impl_;
  if (id < 0 || static_cast<size_t>(id) >= m.tokens.size() || !m.has_token[static_cast<size_t>(id)])
    throw Error("token id " + std::to_string(id) + " is not in the vocabulary of " + m.what);
  return m.tokens[static_cast<size_t>(id)];
}

int32_t ByteBpe::token_id(std::string_view t) const {
  auto it = impl_->vocab.find(t);
  return it == impl_->vocab.end() ? -1 : it->second;
}

bool ByteBpe::ends_reply(int32_t id) const {
  const Impl& m = *impl_;
  return (id >= 0 && id == m.eos) || std::find(m.stops.begin(), m.stops.end(), id) != m.stops.end();
}

int32_t ByteBpe::bos_id() const { return impl_->bos; }
int32_t ByteBpe::eos_id() const { return impl_->eos; }

}  // namespace sparse24::text
