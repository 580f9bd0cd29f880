// Chat templates: the subset of Jinja2 that Hugging Face chat templates are written in, rendered as
// transformers' apply_chat_template renders them (jinja2 with trim_blocks and lstrip_blocks, loop controls,
// raise_exception, a tojson like json.dumps). The subset:
//   {{ expr }}, {% if / elif / else / endif %}, {% for x in expr %} (also `for a, b in`, `else`, a trailing
//   `if` filter, loop.index / index0 / first / last / length / revindex / revindex0), {% set x = expr %} and
//   {% set ns.attr = expr %}, {% break %} / {% continue %}, {% generation %} (rendered as its body),
//   {# comments #}, the `-` whitespace markers and `+` that turns trim/lstrip off;
//   literals (strings, integers, floats, true/false/none in either case, lists, dicts), names, `.attr`,
//   `[key]`, slices `[a:b:c]`, `a if c else b`, and / or / not, == != < <= > >= in / not in, + - * / // % ~,
//   `is [not]` tests (defined undefined none string number integer float boolean true false mapping
//   sequence iterable even odd), filters (trim length count tojson upper lower capitalize title string int
//   float first last join default/d items list reverse replace safe abs), the functions raise_exception,
//   namespace, range and strftime_now (transformers' global: the local time in a strftime format), and the
//   methods strip lstrip rstrip startswith endswith split upper lower replace
//   title capitalize (strings) and items keys values get (dicts).
// Anything else (macros, includes, other filters) is a one-line Error naming it and the template line; so is
// a template that loops or writes without bound (more than 1,000,000 loop iterations or 16 MB of output) or
// nests deeper than 200 levels.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "text/bpe.h"

namespace sparse24::text {

// Renders `source` with the keys of `context` (a JSON object; objects keep their keys' order, as Python's
// dicts do, which tojson and items() show) as its variables.
std::string render_jinja(const std::string& source, const nlohmann::ordered_json& context);

// The chat template a decoder model carries: a GGUF file's tokenizer.chat_template, or a directory's
// chat_template.jinja, else its tokenizer_config.json's chat_template (a string, or a list of {name,
// template} whose "default" is taken). Error when the model has none.
std::string chat_template_of(const std::string& model_path);

// messages: a JSON array of {"role", "content"} objects. The context apply_chat_template gives: messages,
// add_generation_prompt, bos_token, eos_token.
std::string apply_chat_template(const std::string& source, const nlohmann::ordered_json& messages,
                                bool add_generation_prompt, const std::string& bos_token,
                                const std::string& eos_token);

// A decoder model's chat prompt: `source` (chat_template_of) applied to messages with the tokenizer's BOS
// and EOS token strings (chat_text), and that tokenized without added specials (chat_prompt), as
// transformers' apply_chat_template gives them with tokenize=False / True.
std::string chat_text(const std::string& source, const ByteBpe& bpe, const nlohmann::ordered_json& messages,
                      bool add_generation_prompt = true);
std::vector<int32_t> chat_prompt(const std::string& source, const ByteBpe& bpe,
                                 const nlohmann::ordered_json& messages, bool add_generation_prompt = true);

}  // namespace sparse24::text
