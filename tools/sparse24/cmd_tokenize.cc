// sparse24 tokenize MODEL_DIR (--text S... | --input FILE) [--max-length L] [-o OUT.jsonl] [--words]
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "sparse24/error.h"
#include "sparse24/io.h"
#include "text/wordpiece.h"

namespace sparse24::cli {

void register_tokenize(CLI::App& app) {
  struct Opts {
    std::string dir, input, out;
    std::vector<std::string> texts;
    int64_t max_length = 0;
    bool words = false, timing = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize", "Token ids of each text (or each line of a file) with the model's WordPiece tokenizer");
  cmd->add_option("model_dir", o->dir, "directory with tokenizer.json (or vocab.txt + tokenizer_config.json)")
      ->required();
  auto* text = cmd->add_option("--text", o->texts, "texts to tokenize (one output line each)");
  auto* input = cmd->add_option("--input", o->input, "UTF-8 file: one text per line ('\\n' ends a line)");
  text->excludes(input);
  cmd->add_option("--max-length", o->max_length, "truncate to L tokens including the special ones (0 = none)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("-o,--output", o->out, "write the JSON lines here (atomically) instead of stdout");
  cmd->add_flag("--words", o->words, "print the normalized, pre-tokenized words instead of ids");
  cmd->add_flag("--timing", o->timing, "print the tokenization time to stderr");
  cmd->callback([o] {
    if (o->texts.empty() && o->input.empty()) throw Error("tokenize: give --text or --input");
    const text::WordPiece wp = text::WordPiece::from_dir(o->dir);
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
        out += nlohmann::json(wp.split(line)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      } else {
        const std::vector<int32_t> ids = wp.encode(line, o->max_length).ids;
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
