// sparse24 tokenize MODEL (--text S... | --input FILE) [--max-length L] [-o OUT.jsonl] [--words]
// MODEL: a directory with tokenizer.json (WordPiece or byte-level BPE) or vocab.txt, or a GGUF file (its
// tokenizer.ggml.* metadata).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "commands.h"
#include "sparse24/error.h"
#include "sparse24/gguf.h"
#include "sparse24/io.h"
#include "text/bpe.h"
#include "text/wordpiece.h"

namespace sparse24::cli {
namespace {

struct Tokenizer {
  std::function<std::vector<int32_t>(std::string_view, int64_t)> encode;
  std::function<std::vector<std::string>(std::string_view)> split;
};

// The model type of DIR/tokenizer.json ("" when there is none or it cannot be read: WordPiece reports why).
std::string model_type(const std::string& dir) {
  const std::string tj = dir + "/tokenizer.json";
  if (!std::filesystem::is_regular_file(tj)) return "";
  const std::vector<uint8_t> bytes = read_file(tj);
  const nlohmann::json j = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, false);
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object() || !j["model"].contains("type") ||
      !j["model"]["type"].is_string())
    return "";
  return j["model"]["type"].get<std::string>();
}

Tokenizer load_tokenizer(const std::string& model) {
  const bool file = std::filesystem::is_regular_file(model);
  if (file && !is_gguf_file(model))
    throw Error("tokenize: '" + model + "' is neither a directory nor a GGUF file");
  if (file || model_type(model) == "BPE") {
    auto bpe = std::make_shared<text::ByteBpe>(text::ByteBpe::from_model(model));
    return {[bpe](std::string_view s, int64_t n) { return bpe->encode(s, n); },
            [bpe](std::string_view s) { return bpe->split(s); }};
  }
  auto wp = std::make_shared<text::WordPiece>(text::WordPiece::from_dir(model));
  return {[wp](std::string_view s, int64_t n) { return wp->encode(s, n).ids; },
          [wp](std::string_view s) { return wp->split(s); }};
}

}  // namespace

void register_tokenize(CLI::App& app) {
  struct Opts {
    std::string dir, input, out;
    std::vector<std::string> texts;
    int64_t max_length = 0;
    bool words = false, timing = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand("tokenize",
                                     "Token ids of each text (or each line of a file) with the model's "
                                     "tokenizer (WordPiece or byte-level BPE)");
  cmd->add_option("model", o->dir,
                  "directory with tokenizer.json (or vocab.txt + tokenizer_config.json), or a GGUF file")
      ->required();
  auto* text = add_texts_option(cmd, "--text", o->texts, "texts to tokenize (one output line each)");
  auto* input = cmd->add_option("--input", o->input, "UTF-8 file: one text per line ('\\n' ends a line)");
  text->excludes(input);
  cmd->add_option("--max-length", o->max_length, "truncate to L tokens including the special ones (0 = none)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("-o,--output", o->out, "write the JSON lines here (atomically) instead of stdout");
  cmd->add_flag("--words", o->words, "print the normalized, pre-tokenized words instead of ids");
  cmd->add_flag("--timing", o->timing, "print the tokenization time to stderr");
  cmd->callback([o] {
    if (o->texts.empty() && o->input.empty()) throw Error("tokenize: give --text or --input");
    const Tokenizer tok = load_tokenizer(o->dir);
    std::vector<std::string> lines = o->texts;
    if (!o->input.empty()) {
      const std::vector<uint8_t> bytes = read_file(o->input);
      std::string_view all(reinterpret_cast<const char*>(bytes.data()), bytes.size());
      while (!all.empty()) {
        const size_t eol = all.find('\n');
        lines.emplace_back(all.substr(0, eol));
        all = eol == std::string_view::npos ? std::string_view() : all.substr(eol + 1);
      }
    }
    std::string out;
    const auto t0 = std::chrono::steady_clock::now();
    for (const std::string& line : lines) {
      if (o->words) {
        out += nlohmann::json(tok.split(line)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      } else {
        const std::vector<int32_t> ids = tok.encode(line, o->max_length);
        out += '[';
        for (size_t i = 0; i < ids.size(); ++i) {
          if (i) out += ',';
          out += std::to_string(ids[i]);
        }
        out += ']';
      }
      out += '\n';
    }
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (o->timing) std::fprintf(stderr, "tokenize: %zu lines in %.1f ms\n", lines.size(), ms);
    if (o->out.empty())
      std::fwrite(out.data(), 1, out.size(), stdout);
    else
      write_file_atomic(o->out, out);
  });
}

}  // namespace sparse24::cli
