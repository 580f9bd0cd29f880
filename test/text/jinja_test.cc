// Chat templates (src/text/jinja.h): the subset's constructs against outputs worked out by hand from jinja2's
// rules (python/tests/test_chat.py compares with jinja2 itself and with transformers on the real model), and
// one-line Errors for what is outside the subset or hostile.
#include "text/jinja.h"

#include <gtest/gtest.h>

#include <string>

#include "sparse24/error.h"

namespace sparse24::text {
namespace {

using json = nlohmann::ordered_json;

std::string render(const std::string& t, json ctx = json::object()) { return render_jinja(t, ctx); }

TEST(Jinja, ExpressionsAndFilters) {
  EXPECT_EQ(render("{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2.0 }}"),
            "7 3 -4 2 3.5 2.0");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none ~ true }} {{ [1, 'x'] }} {{ {'b': 1, 'a': [none]} }}"),
            "a1NoneTrue [1, 'x'] {'b': 1, 'a': [None]}");
  EXPECT_EQ(render("{{ {'b': 1, 'a': 'x\"'}|tojson }}"), "{\"b\": 1, \"a\": \"x\\\"\"}");
  EXPECT_EQ(render("{{ '  x '|trim }}|{{ 'ab'|upper }}|{{ [3, 4]|length }}|{{ 'héllo'|length }}"),
            "x|AB|2|5");
  EXPECT_EQ(render("{{ 'abcdef'[1:4] }} {{ 'abcdef'[::-2] }} {{ [1, 2, 3][-1] }} {{ [1, 2, 3][5] }}."),
            "bcd fdb 3 .");
  EXPECT_EQ(render("{{ x is defined }} {{ x is not defined }} {{ 3 is odd }} {{ none is none }}"),
            "False True True True");
  EXPECT_EQ(render("{{ 'y' if 1 in [1, 2] else 'n' }} {{ 'q' not in 'abc' }} [{{ 'z' if false }}]"),
            "y True []");
  EXPECT_EQ(render("{{ ' a  b '.split() }} {{ 'a,,b'.split(',') }} {{ range(4, 0, -2)|join('-') }}"),
            "['a', 'b'] ['a', '', 'b'] 4-2");
  EXPECT_EQ(render("{{ d.get('k') }} {{ d.get('z', 0) }} {{ d.k }} {{ d['k'] }}", {{"d", {{"k", "v"}}}}),
            "v 0 v v");
}

TEST(Jinja, StatementsScopesAndWhitespace) {
  const json ctx = {{"ms", json::array({"a", "b", "c"})}};
  EXPECT_EQ(
      render("{% for m in ms %}{{ loop.index }}{{ m }}{% if not loop.last %},{% endif %}{% endfor %}", ctx),
      "1a,2b,3c");
  // A set inside a loop stays in it; a namespace carries out.
  EXPECT_EQ(render("{% set n = 0 %}{% set ns = namespace(n=0) %}{% for m in ms %}{% set n = n + 1 %}"
                   "{% set ns.n = ns.n + 1 %}{% endfor %}{{ n }} {{ ns.n }}",
                   ctx),
            "0 3");
  EXPECT_EQ(
      render("{% for m in ms %}{% if m == 'b' %}{% continue %}{% endif %}{% if m == 'c' %}{% break %}"
             "{% endif %}{{ m }}{% else %}empty{% endfor %}|{% for m in [] %}x{% else %}empty{% endfor %}",
             ctx),
      "a|empty");
  EXPECT_EQ(render("{% for m in ms if m != 'a' %}{{ loop.index }}{{ m }}{% endfor %}", ctx), "1b2c");
  // trim_blocks and lstrip_blocks (as transformers sets them), `-` and `+`.
  EXPECT_EQ(render("{% if true %}\n  x\n  {% endif %}\ny"), "  x\ny");
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif %}\n"), "ab");
  EXPECT_EQ(render("  {%+ if true %}x{% endif +%}\ny"), "  x\ny");
  EXPECT_EQ(render("{# c #}\nz {{- ' w' }}"), "z w");
}

TEST(Jinja, ChatTemplateContext) {
  const json messages = json::parse(R"([{"role": "user", "content": "Hi"}])");
  const std::string t =
      "{{ bos_token }}{% for m in messages %}<{{ m['role'] }}>{{ m.content }}{{ eos_token }}{% endfor %}"
      "{% if add_generation_prompt %}<assistant>{% endif %}";
  EXPECT_EQ(apply_chat_template(t, messages, true, "<s>", "</s>"), "<s><user>Hi</s><assistant>");
  EXPECT_EQ(apply_chat_template(t, messages, false, "", ""), "<user>Hi");
  EXPECT_THROW(apply_chat_template(t, json::object(), true, "", ""), Error);
}

TEST(Jinja, OneLineErrors) {
  auto message = [](const std::string& t) {
    try {
      render(t);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message("{{ raise_exception('bad role') }}"), "chat template raised: bad role");
  EXPECT_EQ(message("x\n{% macro f() %}{% endmacro %}"), "chat template line 2: 'macro' is not supported");
  EXPECT_EQ(message("{{ 'a'|wordwrap }}"), "chat template line 1: filter 'wordwrap' is not supported");
  EXPECT_EQ(message("{% if x %}"), "chat template line 1: 'if' without 'endif'");
  EXPECT_EQ(message("{{ 1 +"), "chat template line 1: unclosed '{{'");
  EXPECT_EQ(message("{{ x.y }}"), "chat template line 1: '.y' of an undefined value");
  EXPECT_EQ(message("{{ 1 // 0 }}"), "chat template line 1: division by zero");
  // 64-bit integers stop where Python's would grow (the fuzzer's find: -7 * -7777777777777777777).
  EXPECT_EQ(message("{{ -7 * -7777777777777777777 }}"),
            "chat template line 1: integer overflow in '*' (64-bit integers)");
  EXPECT_EQ(message("{{ 9223372036854775807 + 1 }}"),
            "chat template line 1: integer overflow in '+' (64-bit integers)");
  EXPECT_EQ(message("{{ -(-9223372036854775807 - 1) }}"),
            "chat template line 1: integer overflow in '-' (64-bit integers)");
  EXPECT_EQ(message("{{ (-9223372036854775807 - 1) // -1 }}"),
            "chat template line 1: integer overflow in '//' (64-bit integers)");
  EXPECT_EQ(message("{{ (-9223372036854775807 - 1)|abs }}"),
            "chat template line 1: integer overflow in 'abs' (64-bit integers)");
  EXPECT_EQ(message("{{ '1e300'|float|int }}"),
            "chat template line 1: int of a number outside 64-bit integers");
  // Steps past 64 bits end a range or a slice, as they would pass its end.
  EXPECT_EQ(render("{{ range(9223372036854775806, 9223372036854775807, 5)|list }} "
                   "{{ 'abc'[1::9223372036854775807] }} {{ [1, 2, 3][-2::-9223372036854775807] }}"),
            "[9223372036854775806] b [2]");
  // Floor division and modulo at the edges, as Python computes them.
  EXPECT_EQ(
      render("{{ 9223372036854775807 % -2 }} {{ 9223372036854775807 // -2 }} {{ -7 % -3 }} {{ 7 % -3 }}"),
      "-1 -4611686018427387904 -1 -2");
  EXPECT_NE(
      message("{{ " + std::string(300, '(') + "1" + std::string(300, ')') + " }}").find("nested too deeply"),
      std::string::npos);
  std::string chain = "{{ 1";
  for (int i = 0; i < 5000; ++i) chain += " + 1";
  EXPECT_NE(message(chain + " }}").find("nested too deeply"), std::string::npos);
  EXPECT_NE(message("{% for i in range(1001) %}{% for j in range(1000) %}{% endfor %}{% endfor %}")
                .find("iterations"),
            std::string::npos);
  EXPECT_NE(message("{{ 'x' * 20000000 }}").find("16 MB"), std::string::npos);
}

}  // namespace
}  // namespace sparse24::text
