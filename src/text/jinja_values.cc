// Chat templates: the values a template computes with (jinja_tree.h) and their Python-style text.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>

#include "sparse24/error.h"
#include "text/jinja_tree.h"

namespace sparse24::text::jinja {
namespace {

std::string py_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, d);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

// Python's text of a value: str() of it (kStr: how jinja2 prints a value), repr() of it (kRepr: how lists
// and dicts print their items) or json.dumps() of it (kJson: ensure_ascii=False, separators ", " and ": ",
// as transformers' tojson filter). The three differ only in the leaves.
enum class Style { kStr, kRepr, kJson };

void py_text(const json& j, std::string& out, Style style) {
  const bool js = style == Style::kJson;
  switch (j.type()) {
    case json::value_t::null:
      out += js ? "null" : "None";
      return;
    case json::value_t::boolean:
      out += j.get<bool>() ? (js ? "true" : "True") : (js ? "false" : "False");
      return;
    case json::value_t::number_float:
      out += py_float(j.get<double>());
      return;
    case json::value_t::string: {
      const std::string& s = j.get_ref<const std::string&>();
      if (style == Style::kStr) {
        out += s;
      } else if (js) {
        out += j.dump(-1, ' ', false, json::error_handler_t::replace);
      } else {
        const char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
        out += q;
        for (char c : s) {
          if (c == '\\' || c == q) out += '\\';
          if (c == '\n') {
            out += "\\n";
            continue;
          }
          out += c;
        }
        out += q;
      }
      return;
    }
    case json::value_t::array:
    case json::value_t::object: {
      const bool obj = j.is_object();
      const Style inner = js ? Style::kJson : Style::kRepr;
      out += obj ? '{' : '[';
      bool first = true;
      for (auto it = j.begin(); it != j.end(); ++it) {
        if (!first) out += ", ";
        first = false;
        if (obj) {
          py_text(json(it.key()), out, inner);
          out += ": ";
        }
        py_text(*it, out, inner);
      }
      out += obj ? '}' : ']';
      return;
    }
    default:
      out += j.dump();
  }
}

}  // namespace

bool truthy(const Value& v) {
  if (v.k == Value::K::kNamespace) return true;
  if (v.undefined()) return false;
  const json& j = v.j;
  if (j.is_null()) return false;
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_number_integer()) return j.get<int64_t>() != 0;
  if (j.is_number()) return j.get<double>() != 0.0;
  if (j.is_string()) return !j.get_ref<const std::string&>().empty();
  return !j.empty();
}

void dump_py_json(const json& j, std::string& out) { py_text(j, out, Style::kJson); }

std::string to_text(const Value& v) {
  if (v.undefined()) return "";
  if (v.k == Value::K::kNamespace) return "<Namespace>";
  std::string s;
  py_text(v.j, s, Style::kStr);
  return s;
}

std::vector<std::string> chars(const std::string& s) {  // UTF-8 code points
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    size_t n = 1;
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0xF0)
      n = 4;
    else if (c >= 0xE0)
      n = 3;
    else if (c >= 0xC0)
      n = 2;
    n = std::min(n, s.size() - i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

std::string strip(const std::string& s, const std::string& set, bool left, bool right) {
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && set.find(s[b]) != std::string::npos) ++b;
  if (right)
    while (e > b && set.find(s[e - 1]) != std::string::npos) --e;
  return s.substr(b, e - b);
}
std::string case_map(std::string s, int how) {  // ASCII: 0 lower, 1 upper, 2 capitalize, 3 title
  bool start = true;
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const bool up = how == 1 || ((how == 2 && i == 0) || (how == 3 && start));
    s[i] = static_cast<char>(up ? std::toupper(c) : std::tolower(c));
    start = !std::isalnum(c);
  }
  return s;
}
std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  size_t p = 0;
  while ((p = s.find(from, p)) != std::string::npos) {
    s.replace(p, from.size(), to);
    p += to.size();
    if (s.size() > kMaxOutput) throw Error("chat template: a replace grew past 16 MB");
  }
  return s;
}

}  // namespace sparse24::text::jinja
