// Byte-level BPE on a tiny vocabulary whose ids are worked out by hand (the real comparison with Hugging Face
// is the `real` test on SmolLM2), loaded from tokenizer.json and from GGUF metadata; the loaders' refusals.
#include "text/bpe.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/io_test_util.h"
#include "sparse24/gguf.h"

namespace sparse24::text {
namespace {

using ids = std::vector<int32_t>;
using json = nlohmann::json;

// Ġ is the byte-level spelling of ' ', Ċ of '\n'.
const std::vector<std::string> kTokens = {"a", "b",   "c", "Ġ", "ab", "abc", "Ġa", "1",
                                          "2", "<s>", "'", "s", "!",  "Ċ",   "ĠĠ", "12"};
const std::vector<std::string> kMerges = {"a b", "ab c", "Ġ a", "Ġ Ġ", "1 2"};

json tiny_json() {
  json vocab = json::object();
  for (size_t i = 0; i < kTokens.size(); ++i) vocab[kTokens[i]] = i;
  return {{"version", "1.0"},
          {"added_tokens", {{{"id", 9}, {"content", "<s>"}, {"special", true}, {"normalized", false}}}},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single", {{{"SpecialToken", {{"id", "<s>"}}}}, {{"Sequence", {{"id", "A"}}}}}},
            {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {9}}}}}}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", kMerges}}}};
}

ByteBpe tiny() { return ByteBpe::from_json(tiny_json().dump(), "tiny.json"); }

TEST(ByteBpe, HandCheckedIds) {
  const ByteBpe t = tiny();
  EXPECT_EQ(t.encode("abc"), (ids{9, 5}));  // a b -> ab (rank 0), ab c -> abc (rank 1)
  // "ab", " abc": in Ġ a b c the pair a b (rank 0) beats Ġ a (rank 2); then ab c; Ġ abc has no merge
  EXPECT_EQ(t.encode("ab abc"), (ids{9, 4, 3, 5}));
  EXPECT_EQ(t.encode("a's"), (ids{9, 0, 10, 11}));    // the contraction 's is a word of its own
  EXPECT_EQ(t.encode("a  b"), (ids{9, 0, 3, 3, 1}));  // "a", " " (the run minus its last), " b"
  EXPECT_EQ(t.encode("a   "), (ids{9, 0, 14, 3}));    // trailing run whole; Ġ Ġ Ġ merges leftmost first
  EXPECT_EQ(t.encode("<s>ab"), (ids{9, 9, 4}));       // the added token found in the text
  EXPECT_EQ(t.encode("a<s>"), (ids{9, 0, 9}));
  EXPECT_EQ(t.encode("\n"), (ids{9, 13}));
  EXPECT_EQ(t.encode("az"), (ids{9, 0}));       // no token for 'z' (and no unknown token): dropped
  EXPECT_EQ(t.encode("a12"), (ids{9, 0, 15}));  // without Digits, "12" is one word and merges
  EXPECT_EQ(t.encode(""), (ids{9}));
  EXPECT_EQ(t.encode("ab abc", 3), (ids{9, 4, 3}));  // truncated to 3 with the special
}

// Llama 3's and Qwen2's Split regexes, as their tokenizer.json files spell them.
const std::string kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const std::string kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const std::string kO200k =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

TEST(ByteBpe, SplitAndDecode) {
  const ByteBpe t = tiny();
  EXPECT_EQ(t.split("ab abc!\n"), (std::vector<std::string>{"ab", "Ġabc", "!", "Ċ"}));
  EXPECT_EQ(t.decode({9, 4, 3, 5, 12}), "<s>ab abc!");
  EXPECT_EQ(t.decode({9, 4, 3, 5}, /*skip_special=*/true), "ab abc");
  EXPECT_EQ(t.decode({0, 13, 1}), "a\nb");
  EXPECT_ERROR(t.decode({99}), "token id 99 is not in the vocabulary of tiny.json");
  EXPECT_EQ(t.token(5), "abc");
  EXPECT_EQ(t.token_id("Ġa"), 6);
  EXPECT_EQ(t.token_id("zz"), -1);
  EXPECT_EQ(t.vocab_size(), 16);
}

TEST(ByteBpe, DigitsOneByOne) {
  json j = tiny_json();
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Digits"}, {"individual_digits", true}},
                          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}}}};
  const ByteBpe t = ByteBpe::from_json(j.dump(), "digits.json");
  EXPECT_EQ(t.encode("a12"), (ids{9, 0, 7, 8}));  // each digit a piece: no 1 2 merge
  // "a " + "1": the space is no longer the prefix of " 1"
  EXPECT_EQ(t.split("a 12  ab"), (std::vector<std::string>{"a", "Ġ", "1", "2", "Ġ", "Ġab"}));
}

Gguf tiny_gguf(const std::string& pre) {
  Gguf g;
  std::vector<int64_t> types(kTokens.size(), 1);
  types[9] = 3;  // CONTROL
  g.metadata = {{"tokenizer.ggml.model", GgufValue::of_string("gpt2")},
                {"tokenizer.ggml.pre", GgufValue::of_string(pre)},
                {"tokenizer.ggml.tokens", GgufValue::of_strings(kTokens)},
                {"tokenizer.ggml.token_type", GgufValue::of_ints(GgufType::kI32, types)},
                {"tokenizer.ggml.merges", GgufValue::of_strings(kMerges)},
                {"tokenizer.ggml.bos_token_id", GgufValue::of_int(GgufType::kU32, 9)},
                {"tokenizer.ggml.eos_token_id", GgufValue::of_int(GgufType::kU32, 12)},
                {"tokenizer.ggml.add_bos_token", GgufValue::of_int(GgufType::kBool, 1)}};
  return g;
}

TEST(ByteBpe, FromGgufMetadata) {
  const ByteBpe gpt2 = ByteBpe::from_gguf(tiny_gguf("gpt-2"), "m.gguf");
  const ByteBpe smollm = ByteBpe::from_gguf(tiny_gguf("smollm"), "m.gguf");
  EXPECT_EQ(gpt2.bos_id(), 9);
  EXPECT_EQ(gpt2.eos_id(), 12);
  for (const char* s : {"abc", "ab abc", "a's", "a  b", "a   ", "<s>ab", "\n"})
    EXPECT_EQ(gpt2.encode(s), tiny().encode(s)) << s;
  EXPECT_EQ(gpt2.encode("a12"), (ids{9, 0, 15}));
  EXPECT_EQ(smollm.encode("a12"), (ids{9, 0, 7, 8}));
  EXPECT_EQ(smollm.decode(smollm.encode("ab<s>\n"), true), "ab\n");

  EXPECT_ERROR(ByteBpe::from_gguf(tiny_gguf("chatglm-bpe"), "m.gguf"),
               "m.gguf: tokenizer.ggml.pre 'chatglm-bpe' is not supported");
  // llama.cpp's Llama 3 and Qwen2 names: their Split regexes (digits by three, by one).
  EXPECT_EQ(ByteBpe::from_gguf(tiny_gguf("llama-bpe"), "m.gguf").split("a12345"),
            (std::vector<std::string>{"a", "123", "45"}));
  EXPECT_EQ(ByteBpe::from_gguf(tiny_gguf("qwen2"), "m.gguf").split("a123"),
            (std::vector<std::string>{"a", "1", "2", "3"}));
  Gguf g = tiny_gguf("smollm");
  g.metadata[0].second = GgufValue::of_string("bert");
  EXPECT_ERROR(ByteBpe::from_gguf(g, "m.gguf"), "tokenizer.ggml.model 'bert' is not supported");
  g.metadata[0].second = GgufValue::of_string("llama");
  EXPECT_ERROR(ByteBpe::from_gguf(g, "m.gguf"), "tokenizer.ggml.scores is missing");
  g = tiny_gguf("smollm");
  g.metadata[4].second = GgufValue::of_strings({"a b", "a z"});
  EXPECT_ERROR(ByteBpe::from_gguf(g, "m.gguf"),
               "tokenizer.ggml.merges[1] 'a z' uses a token not in the vocabulary");
  g = tiny_gguf("smollm");
  g.metadata[4].second = GgufValue::of_strings({"ab"});
  EXPECT_ERROR(ByteBpe::from_gguf(g, "m.gguf"), "is not two tokens separated by one space");
  g = tiny_gguf("smollm");
  g.metadata[3].second = GgufValue::of_ints(GgufType::kI32, {1});
  EXPECT_ERROR(ByteBpe::from_gguf(g, "m.gguf"), "token_type has 1 entries for 16 tokens");
  g = tiny_gguf("smollm");
  g.metadata[5].second = GgufValue::of_int(GgufType::kU32, 99);
  EXPECT_ERROR(ByteBpe::from_gguf(g, "m.gguf"), "tokenizer.ggml.bos_token_id 99 is not a token id");
  g = tiny_gguf("smollm");
  g.metadata[2].second = GgufValue::of_string("a");
  EXPECT_ERROR(ByteBpe::from_gguf(g, "m.gguf"), "m.gguf: metadata 'tokenizer.ggml.tokens' is STRING");
  g.metadata.erase(g.metadata.begin() + 1);
  EXPECT_ERROR(ByteBpe::from_gguf(g, "m.gguf"), "tokenizer.ggml.pre is missing");
}

// Llama 3's Split pre-tokenizer, its alternatives one by one (each worked out from the regex by hand;
// compare_split_tokenizers.py holds it to HF `tokenizers` and llama.cpp on 34,171 texts); Qwen2's takes
// digits one at a time and normalizes to NFC; GPT-4o's (as its converted tokenizers write it: Removed,
// inverted) splits words where the case turns up and joins contractions to them.
TEST(ByteBpe, SplitPatterns) {
  auto with = [](const std::string& pattern, bool nfc, const char* behavior = "Isolated",
                 bool invert = false) {
    json j = tiny_json();
    j["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", behavior}, {"invert", invert}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
    if (nfc) j["normalizer"] = {{"type", "NFC"}};
    return ByteBpe::from_json(j.dump(), "split.json");
  };
  const ByteBpe llama3 = with(kLlama3, false), qwen2 = with(kQwen2, true);
  using words = std::vector<std::string>;
  EXPECT_EQ(llama3.split("Hello  world!!\n\n  x 12345 'S"),
            (words{"Hello", "Ġ", "Ġworld", "!!ĊĊ", "Ġ", "Ġx", "Ġ", "123", "45", "Ġ'", "S"}));
  EXPECT_EQ(llama3.split("x'Sam it'LL 'x"), (words{"x", "'S", "am", "Ġit", "'LL", "Ġ'", "x"}));
  EXPECT_EQ(llama3.split("a\r\n  \n b\t"), (words{"a", "čĊĠĠĊ",
                                                  "Ġ"
                                                  "b",
                                                  "ĉ"}));
  EXPECT_EQ(llama3.split("\"quoted\" ?!\n"), (words{"\"quoted", "\"", "Ġ?!Ċ"}));
  EXPECT_EQ(qwen2.split("a123 'S"), (words{"a", "1", "2", "3", "Ġ'", "S"}));
  // NFC: e + U+0301 becomes U+00E9 (bytes C3 A9, spelled ÃÂ©), one letter of "cafÃ©".
  EXPECT_EQ(qwen2.split("cafe\xcc\x81"), (words{"caf\xc3\x83\xc2\xa9"}));
  EXPECT_EQ(llama3.split("cafe\xcc\x81").size(), 2u);  // without NFC the combining mark is not a letter
  EXPECT_NE(llama3.split("cafe\xcc\x81"), qwen2.split("cafe\xcc\x81"));
  const ByteBpe o200k = with(kO200k, false, "Removed", true);
  EXPECT_EQ(o200k.split("HelloWorld iPhone ABCdef"), (words{"Hello", "World", "Ġi", "Phone", "ĠABCdef"}));
  EXPECT_EQ(o200k.split("DON'T go 'til x/\n"), (words{"DON'T", "Ġgo", "Ġ'", "til", "Ġx", "/Ċ"}));
  EXPECT_EQ(o200k.split(" 123456"), (words{"Ġ", "123", "456"}));
  // A combining mark is in both case sets: "e" + U+0301 stays one word (not so in Llama 3's regex).
  EXPECT_EQ(o200k.split("cafe\xcc\x81s").size(), 1u);
  EXPECT_ERROR(with(kO200k, false, "Removed", false), "behavior Isolated (or Removed with invert true)");
}

// The ids that end a reply: EOS; generation_config.json's and config.json's eos_token_id (an id or a list);
// GGUF's eot / eom ids.
TEST(ByteBpe, EndOfReplyIds) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("sparse24_bpe_stops_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << tiny_json().dump();
  EXPECT_FALSE(ByteBpe::from_dir(dir.string()).ends_reply(9));
  std::ofstream(dir / "tokenizer_config.json") << R"({"eos_token": "<s>"})";
  std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": [3, 5]})";
  std::ofstream(dir / "config.json") << R"({"eos_token_id": 7})";
  const ByteBpe t = ByteBpe::from_dir(dir.string());
  EXPECT_EQ(t.eos_id(), 9);
  for (int32_t id = 0; id < t.vocab_size(); ++id)
    EXPECT_EQ(t.ends_reply(id), id == 9 || id == 3 || id == 5 || id == 7) << id;
  EXPECT_FALSE(t.ends_reply(-1));
  std::ofstream(dir / "config.json") << R"({"eos_token_id": 99})";
  EXPECT_ERROR(ByteBpe::from_dir(dir.string()), "config.json: eos_token_id must be an id in [0, 16)");
  std::filesystem::remove_all(dir);
  Gguf g = tiny_gguf("smollm");
  g.metadata.emplace_back("tokenizer.ggml.eot_token_id", GgufValue::of_int(GgufType::kU32, 4));
  const ByteBpe f = ByteBpe::from_gguf(g, "m.gguf");
  EXPECT_TRUE(f.ends_reply(4));
  EXPECT_TRUE(f.ends_reply(f.eos_id()));
  EXPECT_FALSE(f.ends_reply(5));
}

// The tokens followed by the 256 byte tokens <0x00> .. <0xFF> (a SentencePiece-style vocabulary), and a
// tokenizer.json vocab of them (token -> its index).
std::vector<std::string> with_byte_tokens(std::vector<std::string> tokens) {
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);
    tokens.push_back(hex);
  }
  return tokens;
}
json vocab_of(const std::vector<std::string>& tokens) {
  json vocab = json::object();
  for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
  return vocab;
}
// A SentencePiece-style tokenizer.json without its normalizer, pre-tokenizer and decoder: BPE with byte
// fallback, <s> (id 1) special.
json spm_json(const json& vocab, const json& merges) {
  return {{"added_tokens", {{{"id", 1}, {"content", "<s>"}, {"special", true}}}},
          {"model",
           {{"type", "BPE"},
            {"byte_fallback", true},
            {"unk_token", "<unk>"},
            {"vocab", vocab},
            {"merges", merges}}}};
}

// SentencePiece-style BPE (Llama 2's tokenizer.json; GGUF tokenizer.ggml.model "llama"): spaces as U+2581
// with one in front of each text piece, merges over characters, byte fallback for characters without a
// token, and decoding back; the GGUF form (scores, no merges) merges the same way.
TEST(ByteBpe, SentencePieceStyle) {
  const std::string sp = "\xe2\x96\x81";
  std::vector<std::string> tokens = with_byte_tokens({"<unk>", "<s>", "</s>", sp, "a", "b", sp + "a", "ab"});
  const json vocab = vocab_of(tokens);
  const json replace = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", sp}};
  json j = spm_json(vocab, {sp + " a", "a b"});
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers", {{{"type", "Prepend"}, {"prepend", sp}}, replace}}};
  const ByteBpe t = ByteBpe::from_json(j.dump(), "spm.json");
  // "ab a" -> "\u2581ab\u2581a": (\u2581 a) first, then nothing joins \u2581a and b.
  EXPECT_EQ(t.encode("ab a"), (ids{6, 5, 6}));
  EXPECT_EQ(t.encode("b<s>a"), (ids{3, 5, 1, 6}));                  // one U+2581 in front of each piece
  EXPECT_EQ(t.encode("\xc3\xa9"), (ids{3, 8 + 0xC3, 8 + 0xA9}));    // no token for e-acute: its bytes
  EXPECT_EQ(t.decode(t.encode("ab a \xc3\xa9")), "ab a \xc3\xa9");  // the leading U+2581 stripped
  EXPECT_EQ(t.split("a b"), (std::vector<std::string>{sp + "a" + sp + "b"}));
  // The GGUF form: scores rank the merges (\u2581a above ab), the file's BOS added by default.
  Gguf g;
  std::vector<int64_t> types(tokens.size(), 6);
  std::vector<double> scores(tokens.size(), 0.0);
  for (int i = 0; i < 8; ++i) types[i] = i == 0 ? 2 : i < 3 ? 3 : 1;
  scores[6] = -1;
  scores[7] = -2;
  g.metadata = {{"tokenizer.ggml.model", GgufValue::of_string("llama")},
                {"tokenizer.ggml.tokens", GgufValue::of_strings(tokens)},
                {"tokenizer.ggml.scores", GgufValue::of_floats(GgufType::kF32, scores)},
                {"tokenizer.ggml.token_type", GgufValue::of_ints(GgufType::kI32, types)},
                {"tokenizer.ggml.bos_token_id", GgufValue::of_int(GgufType::kU32, 1)}};
  const ByteBpe f = ByteBpe::from_gguf(g, "spm.gguf");
  EXPECT_EQ(f.encode("ab a"), (ids{1, 6, 5, 6}));
  EXPECT_EQ(ByteBpe::from_json(f.to_json(), "written").encode("ab a"), (ids{1, 6, 5, 6}));
  {  // a GGUF token that is not UTF-8 (a fuzzed file's) cannot be written as JSON: an Error, not a crash
    std::vector<std::string> bad = tokens;
    bad[7] = "a\xC3";
    g.metadata[1].second = GgufValue::of_strings(bad);
    EXPECT_ERROR(ByteBpe::from_gguf(g, "spm.gguf").to_json(), "token 7 ('a\\xc3') is not valid UTF-8");
    g.metadata[1].second = GgufValue::of_strings(tokens);
  }
  tokens.pop_back();  // a missing byte token is refused
  g.metadata[1].second = GgufValue::of_strings(tokens);
  scores.pop_back();
  types.pop_back();
  g.metadata[2].second = GgufValue::of_floats(GgufType::kF32, scores);
  g.metadata[3].second = GgufValue::of_ints(GgufType::kI32, types);
  EXPECT_ERROR(ByteBpe::from_gguf(g, "spm.gguf"), "without the byte token <0xFF>");
}

// The Metaspace form (transformers' non-legacy Llama tokenizer, newer Mistral releases): the same vocabulary
// and merges, a U+2581 put in front as prepend_scheme says (not before a piece that starts with a space), a
// word per U+2581 with split; every form written back and read again gives the same ids. Values checked
// against tokenizers 0.23.
TEST(ByteBpe, SentencePieceMetaspace) {
  const std::string sp = "\xe2\x96\x81";
  const json vocab =
      vocab_of(with_byte_tokens({"<unk>", "<s>", "</s>", sp, "a", "b", sp + "a", "ab", sp + sp}));
  const json decoders = {{{"type", "Replace"}, {"pattern", {{"String", sp}}}, {"content", " "}},
                         {{"type", "ByteFallback"}},
                         {{"type", "Fuse"}}};
  auto make = [&](const std::string& scheme, bool split, bool strip) {
    json d = decoders;
    if (strip) d.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    json j = spm_json(vocab, {sp + " a", "a b", sp + " " + sp});
    j["pre_tokenizer"] = {
        {"type", "Metaspace"}, {"replacement", sp}, {"prepend_scheme", scheme}, {"split", split}};
    j["decoder"] = {{"type", "Sequence"}, {"decoders", d}};
    const ByteBpe t = ByteBpe::from_json(j.dump(), "meta.json");
    const ByteBpe back = ByteBpe::from_json(t.to_json(), "written");
    for (const char* text : {"a b", " a", "  a", "<s>a", "a<s>a", "a<s> a", "ab  a"})
      EXPECT_EQ(back.encode(text), t.encode(text)) << scheme << " " << split << " " << text;
    return t;
  };
  const ByteBpe first = make("first", false, true);
  EXPECT_EQ(first.encode("a b"), (ids{6, 3, 5}));
  EXPECT_EQ(first.encode(" a"), (ids{6}));  // no U+2581 before a leading space
  EXPECT_EQ(first.encode("  a"), (ids{3, 6}));
  EXPECT_EQ(first.encode("a  "), (ids{6, 8}));  // one word: the U+2581 pair merges
  EXPECT_EQ(first.encode("<s>a"), (ids{1, 4}));
  EXPECT_EQ(first.encode("a<s>a"), (ids{6, 1, 4}));  // only at the text's start
  EXPECT_EQ(first.decode(first.encode("ab a")), "ab a");
  const ByteBpe always = make("always", false, true);
  EXPECT_EQ(always.encode("a<s>a"), (ids{6, 1, 6}));
  EXPECT_EQ(always.encode("a<s> a"), (ids{6, 1, 6}));
  const ByteBpe never = make("never", false, false);
  EXPECT_EQ(never.encode("a b"), (ids{4, 3, 5}));
  EXPECT_EQ(never.encode("ab a"), (ids{7, 6}));
  EXPECT_EQ(never.decode(never.encode(" a")), " a");  // no Strip in its decoder
  const ByteBpe split = make("always", true, true);
  EXPECT_EQ(split.encode("a  "), (ids{6, 3, 3}));  // a word per U+2581: the pair cannot merge
  EXPECT_EQ(split.split("ab a"), (std::vector<std::string>{sp + "ab", sp + "a"}));
  // Gemma's form: the Replace normalizer alone and a Split on " " after it (no space left to split on).
  json gemma = json::parse(never.to_json());
  gemma["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", sp}};
  gemma["pre_tokenizer"] = {{"type", "Split"},
                            {"pattern", {{"String", " "}}},
                            {"behavior", "MergedWithPrevious"},
                            {"invert", false}};
  const ByteBpe gem = ByteBpe::from_json(gemma.dump(), "gemma.json");
  for (const char* text : {"a b", "ab a", "a  ", " a", "<s> a"})
    EXPECT_EQ(gem.encode(text), never.encode(text)) << text;
  EXPECT_EQ(gem.decode(gem.encode(" a b")), " a b");
  gemma["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", sp}};
  EXPECT_ERROR(ByteBpe::from_json(gemma.dump(), "gemma.json"), "must be none or a Split on \" \"");
  // Before tokenizers 0.19: add_prefix_space instead of prepend_scheme, and no split (it always split).
  json old = json::parse(first.to_json());
  old["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", sp}, {"add_prefix_space", true}};
  EXPECT_EQ(ByteBpe::from_json(old.dump(), "old.json").encode("a  "), (ids{6, 3, 3}));
  old["pre_tokenizer"]["prepend_scheme"] = "sometimes";
  EXPECT_ERROR(ByteBpe::from_json(old.dump(), "old.json"), "prepend_scheme 'sometimes' is not supported");
  old["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}};
  EXPECT_ERROR(ByteBpe::from_json(old.dump(), "old.json"), "replacement must be");
  old["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", sp}};
  old["normalizer"] = {{"type", "NFC"}};
  EXPECT_ERROR(ByteBpe::from_json(old.dump(), "old.json"), "there must be no normalizer");
}

TEST(ByteBpe, RefusesWhatItDoesNotSupport) {
  auto refused = [](const std::function<void(json&)>& change, const std::string& phrase) {
    json j = tiny_json();
    change(j);
    EXPECT_ERROR(ByteBpe::from_json(j.dump(), "t.json"), phrase);
  };
  refused([](json& j) { j["model"]["type"] = "WordPiece"; },
          "t.json: model type 'WordPiece' is not supported");
  refused([](json& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; }, "pre_tokenizer 'Whitespace'");
  refused([](json& j) { j["pre_tokenizer"]["use_regex"] = false; }, "use_regex false is not supported");
  refused([](json& j) { j["normalizer"] = {{"type", "NFKC"}}; }, "normalizer 'NFKC' is not supported");
  auto split = [](const std::string& pattern, const std::string& behavior, bool use_regex) {
    return json{
        {"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", behavior}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", use_regex}}}}};
  };
  refused([&](json& j) { j["pre_tokenizer"] = split("[a-z]+", "Isolated", false); },
          "pretokenizers[0].pattern '[a-z]+' is not supported (Llama 3's, Qwen2's and GPT-4o's are)");
  refused([&](json& j) { j["pre_tokenizer"] = split(kLlama3, "Removed", false); }, "behavior Isolated");
  refused([&](json& j) { j["pre_tokenizer"] = split(kLlama3, "Isolated", true); },
          "use_regex and add_prefix_space false");
  refused([](json& j) { j["model"]["merges"] = {"a q"}; }, "model.merges[0] 'a q' uses a token not in");
  refused([](json& j) { j["model"]["merges"] = {{"a", "b"}, 7}; }, "model.merges[1] must be");
  refused([](json& j) { j["model"]["byte_fallback"] = true; },
          "with byte_fallback the pre_tokenizer must be");
  refused(
      [](json& j) {
        j["model"]["byte_fallback"] = true;
        j.erase("pre_tokenizer");
      },
      "with byte_fallback the normalizer must be");
  refused([](json& j) { j["model"]["unk_token"] = "<unk>"; }, "unk_token is not supported");
  refused([](json& j) { j["model"]["vocab"]["zz"] = 1000; }, "model.vocab['zz'] must be an id in [0, 18)");
  refused([](json& j) { j["model"]["vocab"]["zz"] = 3; }, "id 3 is used twice");
  refused([](json& j) { j["added_tokens"][0]["lstrip"] = true; }, "added_tokens[0].lstrip is not supported");
  refused([](json& j) { j["added_tokens"][0]["content"] = ""; }, "added token 9 is empty");
  refused(
      [](json& j) {
        j["post_processor"] = {{"type", "BertProcessing"}};
      },
      "post_processor 'BertProcessing'");
  refused([](json& j) { j["decoder"] = {{"type", "WordPiece"}}; }, "decoder 'WordPiece' is not supported");
  EXPECT_ERROR(ByteBpe::from_json("{", "t.json"), "t.json: not valid JSON");
  EXPECT_ERROR(ByteBpe::from_json("[]", "t.json"), "not a JSON object");
}

// Hand-checked against the real vocabulary when models/ is there (Ġworld is one token; <|im_start|> is 1).
TEST(ByteBpe, SmolLM2WhenPresent) {
  const char* data = std::getenv("SPARSE24_TEST_DATA");
  const std::string dir = std::string(data ? data : ".") + "/../../models/SmolLM2-135M-Instruct-hf";
  if (!std::filesystem::exists(dir + "/tokenizer.json")) GTEST_SKIP() << "no " << dir;
  const ByteBpe t = ByteBpe::from_dir(dir);
  EXPECT_EQ(t.encode("Hello world"), (ids{19556, 905}));
  EXPECT_EQ(t.encode("<|im_start|>user\nhi<|im_end|>"), (ids{1, 4093, 198, 6004, 2}));
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_id(), 2);
  EXPECT_EQ(t.decode(t.encode("In the beginning God created the heaven and the earth.")),
            "In the beginning God created the heaven and the earth.");
}

}  // namespace
}  // namespace sparse24::text
