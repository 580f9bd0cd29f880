// Byte-level BPE (GPT-2 style, as SmolLM2, Llama 3, Qwen2/3 and GGUF files with tokenizer.ggml.model "gpt2"
// use it), and SentencePiece-style BPE (Llama 2, Mistral v0.1, TinyLlama; GGUF "llama": characters, U+2581
// for spaces, byte fallback, docs/formats.md), producing the same ids as Hugging Face `tokenizers` (and, from
// GGUF metadata, as llama.cpp) for what it supports (docs/formats.md, "Byte-level BPE"):
//   normalizer      null or NFC
//   pre_tokenizer   ByteLevel (use_regex: the GPT-2 regex; add_prefix_space), or a Sequence of
//                   Digits (individual_digits: true) then ByteLevel, or of Split (Llama 3's, Qwen2's or
//                   GPT-4o's regex, Isolated) then ByteLevel (use_regex false)
//   model           BPE without dropout, unk token, subword prefix/suffix or byte fallback (ignore_merges ok)
//   post_processor  null, ByteLevel, or TemplateProcessing (its single-sequence template)
//   decoder         ByteLevel (or null)
//   added_tokens    split out of the raw text before everything else (leftmost, longest first); lstrip,
//                   rstrip and single_word are refused
// From GGUF metadata: tokenizer.ggml.model "gpt2" with tokens, merges, token_type (CONTROL and USER_DEFINED
// tokens are the added tokens), tokenizer.ggml.pre "smollm" / "starcoder" / "refact" (digits one by one, then
// the GPT-2 regex, as llama.cpp does), "gpt-2" (the regex alone), "llama-bpe" / "llama3" / "llama-v3" (Llama
// 3's Split regex, ignore_merges), "qwen2" / "deepseek-r1-qwen" (Qwen2's; no NFC, as llama.cpp does not
// normalize) or "gpt-4o" (GPT-4o's, as HF matches it), add_bos_token / add_eos_token (absent:
// false; add_space_prefix is ignored, as llama.cpp ignores it for gpt2 vocabularies). Anything else is
// refused when loading, with one sparse24::Error line naming the file and the setting.
//
// Input text is UTF-8; invalid bytes pass through as bytes (byte-level BPE has a token for every byte).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sparse24 {
struct Gguf;
}

namespace sparse24::text {

class ByteBpe {
 public:
  // DIR/tokenizer.json; bos_id/eos_id from DIR/tokenizer_config.json (bos_token, eos_token) when present.
  static ByteBpe from_dir(const std::string& dir);
  // A tokenizer.json text (`what` names it in errors).
  static ByteBpe from_json(std::string_view json, const std::string& what);
  // The tokenizer.ggml.* metadata of a parsed GGUF file.
  static ByteBpe from_gguf(const Gguf& gguf, const std::string& what);
  // A decoder model's tokenizer: the GGUF file at `path` (from_gguf), else the directory (from_dir).
  static ByteBpe from_model(const std::string& path);

  // Token ids with the post-processor's special tokens (BOS/EOS) added. max_length > 0 truncates the text's
  // tokens so that the total, specials included, is at most max_length (Error if the specials alone exceed
  // it), as HF's enable_truncation does. add_special false: the text's tokens only (as HF's
  // add_special_tokens=False, which apply_chat_template uses: a chat template writes its own).
  std::vector<int32_t> encode(std::string_view utf8, int64_t max_length = 0, bool add_special = true) const;
  // The pieces the BPE model sees: added tokens and pre-tokenized words, in their byte-level spelling
  // ("Ġthe"), as HF's pre_tokenize_str shows them.
  std::vector<std::string> split(std::string_view utf8) const;
  // Text of the ids (byte-level decoding; invalid UTF-8 becomes U+FFFD). skip_special drops added tokens
  // marked special (GGUF: CONTROL). Error on an id outside the vocabulary.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;

  // The tokenizer as a Hugging Face tokenizer.json text (model BPE with the vocabulary and the merges in rank
  // order, the added tokens, the pre-tokenizer, the post-processor's specials, the ByteLevel decoder), which
  // from_json and Hugging Face `tokenizers` read back to the same ids; and the tokenizer_config.json that
  // names its BOS and EOS tokens. Error when two ids share one token (a JSON vocabulary cannot hold both).
  std::string to_json() const;
  std::string config_json() const;

  int64_t vocab_size() const;                      // 1 + the largest id
  const std::string& token(int32_t id) const;      // Error if no token has this id
  int32_t token_id(std::string_view token) const;  // -1 when absent
  int32_t bos_id() const;                          // -1 when the model has none
  int32_t eos_id() const;                          // -1 when the model has none
  // True for the ids that end a generated reply: EOS; from a directory also generation_config.json's and
  // config.json's eos_token_id (an id or a list, as transformers' generate); from GGUF metadata also
  // tokenizer.ggml.eot_token_id and eom_token_id (as llama.cpp's end-of-generation tokens).
  bool ends_reply(int32_t id) const;

  struct Impl;

 private:
  explicit ByteBpe(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace sparse24::text
