// Chat templates: the renderer (jinja.h), evaluating the tree of jinja_tree.h over JSON values (plus
// "undefined" and namespaces) with jinja2's default semantics: an undefined value prints as nothing and is
// false; a for loop's body has its own scope (what namespace() exists for).
#include "jinja.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "sparse24/error.h"
#include "sparse24/gguf.h"
#include "sparse24/io.h"
#include "text/jinja_tree.h"

namespace sparse24::text {
namespace {

using namespace jinja;  // NOLINT: the renderer is jinja's

class Renderer {
 public:
  explicit Renderer(const json& ctx) {
    scopes_.emplace_back();
    for (auto it = ctx.begin(); it != ctx.end(); ++it) scopes_[0][it.key()] = Value::of(it.value());
  }
  std::string out;

  enum class Flow { kNormal, kBreak, kContinue };

  Flow run(const std::vector<Node>& nodes) {
    for (const Node& n : nodes) {
      switch (n.k) {
        case Node::K::kText:
          write(n.text, n.line);
          break;
        case Node::K::kOut:
          write(to_text(eval(*n.exprs[0], n.line)), n.line);
          break;
        case Node::K::kIf: {
          size_t b = 0;
          while (b < n.exprs.size() && !truthy(eval(*n.exprs[b], n.line))) ++b;
          if (b < n.bodies.size()) {
            const Flow f = run(n.bodies[b]);
            if (f != Flow::kNormal) return f;
          }
          break;
        }
        case Node::K::kFor:
          for_loop(n);
          break;
        case Node::K::kSet: {
          Value v = eval(*n.exprs[0], n.line);
          if (n.targets.size() == 1) {
            scopes_.back()[n.targets[0]] = std::move(v);
          } else {
            const Value ns = lookup(n.targets[0]);
            if (ns.k != Value::K::kNamespace) fail(n.line, "'" + n.targets[0] + "' is not a namespace");
            if (v.undefined()) {
              ns.ns->erase(n.targets[1]);
            } else if (v.k == Value::K::kNamespace) {
              fail(n.line, "a namespace inside a namespace is not supported");
            } else {
              (*ns.ns)[n.targets[1]] = v.j;
            }
          }
          break;
        }
        case Node::K::kBreak:
          return Flow::kBreak;
        case Node::K::kContinue:
          return Flow::kContinue;
      }
    }
    return Flow::kNormal;
  }

 private:
  void write(const std::string& s, int line) {
    if (out.size() + s.size() > kMaxOutput) fail(line, "the output passes 16 MB");
    out += s;
  }

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      const auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    return {};
  }

  void count(int line) {
    if (++iterations_ > kMaxIterations) fail(line, "more than 1,000,000 loop iterations");
  }

  void for_loop(const Node& n) {
    const Value it = eval(*n.exprs[0], n.line);
    std::vector<json> items;
    if (!it.undefined()) {
      if (it.k == Value::K::kNamespace) fail(n.line, "cannot iterate over a namespace");
      if (it.j.is_array()) {
        items.assign(it.j.begin(), it.j.end());
      } else if (it.j.is_object()) {
        for (auto k = it.j.begin(); k != it.j.end(); ++k) items.push_back(k.key());
      } else if (it.j.is_string()) {
        for (const std::string& c : chars(it.j.get_ref<const std::string&>())) items.push_back(c);
      } else {
        fail(n.line, "cannot iterate over " + std::string(it.j.type_name()));
      }
    }
    // The `if` filter runs before the loop variable `loop` exists, over each item.
    auto bind = [&](std::map<std::string, Value>& scope, const json& item) {
      if (n.targets.size() == 1) {
        scope[n.targets[0]] = Value::of(item);
        return;
      }
      if (!item.is_array() || item.size() != n.targets.size())
        fail(n.line, "cannot unpack into " + std::to_string(n.targets.size()) + " names");
      for (size_t t = 0; t < n.targets.size(); ++t) scope[n.targets[t]] = Value::of(item[t]);
    };
    if (n.exprs.size() > 1) {
      std::vector<json> kept;
      for (const json& item : items) {
        count(n.line);
        scopes_.emplace_back();
        bind(scopes_.back(), item);
        const bool keep = truthy(eval(*n.exprs[1], n.line));
        scopes_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    const int64_t len = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < len; ++i) {
      count(n.line);
      scopes_.emplace_back();
      bind(scopes_.back(), items[i]);
      scopes_.back()["loop"] = Value::of({{"index", i + 1},
                                          {"index0", i},
                                          {"revindex", len - i},
                                          {"revindex0", len - i - 1},
                                          {"first", i == 0},
                                          {"last", i == len - 1},
                                          {"length", len}});
      const Flow f = run(n.bodies[0]);
      scopes_.pop_back();
      if (f == Flow::kBreak) break;
    }
    if (len == 0 && n.bodies.size() > 1) run(n.bodies[1]);
  }

  static const json& need(const Value& v, int line, const char* what) {
    if (v.undefined()) fail(line, std::string(what) + " of an undefined value");
    if (v.k == Value::K::kNamespace) fail(line, std::string(what) + " of a namespace");
    return v.j;
  }
  static bool is_num(const json& j) { return j.is_number() && !j.is_boolean(); }
  static double num(const json& j, int line) {
    if (j.is_boolean()) return j.get<bool>() ? 1 : 0;
    if (!j.is_number()) fail(line, std::string("expected a number, found ") + j.type_name());
    return j.get<double>();
  }
  static bool is_int(const json& j) { return j.is_number_integer() || j.is_boolean(); }
  static int64_t integer(const json& j, int line) {
    if (j.is_boolean()) return j.get<bool>() ? 1 : 0;
    if (!j.is_number_integer()) fail(line, std::string("expected an integer, found ") + j.type_name());
    return j.get<int64_t>();
  }
  static const std::string& str(const json& j, int line) {
    if (!j.is_string()) fail(line, std::string("expected a string, found ") + j.type_name());
    return j.get_ref<const std::string&>();
  }

  static bool equal(const Value& a, const Value& b) {
    if (a.undefined() || b.undefined()) return a.undefined() && b.undefined();
    if (a.k == Value::K::kNamespace || b.k == Value::K::kNamespace) return a.ns == b.ns;
    if (is_num(a.j) && is_num(b.j)) return a.j.get<double>() == b.j.get<double>();
    return a.j == b.j;
  }

  static bool contains(const Value& hay, const Value& needle, int line) {
    const json& h = need(hay, line, "'in'");
    if (h.is_string())
      return h.get_ref<const std::string&>().find(str(need(needle, line, "'in'"), line)) != std::string::npos;
    if (h.is_array()) {
      for (const json& x : h)
        if (equal(Value::of(x), needle)) return true;
      return false;
    }
    if (h.is_object())
      return !needle.undefined() && needle.j.is_string() && h.contains(needle.j.get<std::string>());
    fail(line, std::string("'in' on ") + h.type_name());
  }

  Value binary(const std::string& op, const Expr& e, int line) {
    if (op == "and") {
      Value l = eval(*e.a[0], line);
      return truthy(l) ? eval(*e.a[1], line) : l;
    }
    if (op == "or") {
      Value l = eval(*e.a[0], line);
      return truthy(l) ? l : eval(*e.a[1], line);
    }
    const Value l = eval(*e.a[0], line), r = eval(*e.a[1], line);
    if (op == "==") return Value::of(equal(l, r));
    if (op == "!=") return Value::of(!equal(l, r));
    if (op == "in") return Value::of(contains(r, l, line));
    if (op == "not in") return Value::of(!contains(r, l, line));
    if (op == "~") return Value::of(to_text(l) + to_text(r));
    const json& a = need(l, line, ("'" + op + "'").c_str());
    const json& b = need(r, line, ("'" + op + "'").c_str());
    if (op == "<" || op == "<=" || op == ">" || op == ">=") {
      int c;
      if (a.is_string() && b.is_string())
        c = a.get_ref<const std::string&>().compare(b.get_ref<const std::string&>());
      else {
        const double x = num(a, line), y = num(b, line);
        c = x < y ? -1 : x > y ? 1 : 0;
      }
      return Value::of(op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0);
    }
    if (op == "+") {
      if (a.is_string() && b.is_string()) return Value::of(a.get<std::string>() + b.get<std::string>());
      if (a.is_array() && b.is_array()) {
        json r2 = a;
        for (const json& x : b) r2.push_back(x);
        return Value::of(std::move(r2));
      }
    }
    if (op == "*" && a.is_string() && is_int(b)) {
      std::string s;
      const int64_t n = integer(b, line);
      if (n > 0 && a.get_ref<const std::string&>().size() * static_cast<size_t>(n) > kMaxOutput)
        fail(line, "a string repeated past 16 MB");
      for (int64_t k = 0; k < n; ++k) s += a.get_ref<const std::string&>();
      return Value::of(s);
    }
    if (!is_num(a) && !a.is_boolean()) fail(line, "'" + op + "' on " + a.type_name());
    if (!is_num(b) && !b.is_boolean()) fail(line, "'" + op + "' on " + b.type_name());
    if (is_int(a) && is_int(b) && op != "/") {
      const int64_t x = integer(a, line), y = integer(b, line);
      if ((op == "//" || op == "%") && y == 0) fail(line, "division by zero");
      // Python's integers are unbounded; past 64 bits this subset stops instead of wrapping.
      int64_t z = 0;
      if ((op == "+" && __builtin_add_overflow(x, y, &z)) ||
          (op == "-" && __builtin_sub_overflow(x, y, &z)) ||
          (op == "*" && __builtin_mul_overflow(x, y, &z)) ||
          ((op == "//" || op == "%") && y == -1 && x == INT64_MIN))
        fail(line, "integer overflow in '" + op + "' (64-bit integers)");
      if (op == "+" || op == "-" || op == "*") return Value::of(z);
      const bool round_down = x % y != 0 && (x < 0) != (y < 0);  // Python's floor division and modulo
      return op == "//" ? Value::of(x / y - (round_down ? 1 : 0)) : Value::of(x % y + (round_down ? y : 0));
    }
    const double x = num(a, line), y = num(b, line);
    if ((op == "/" || op == "//" || op == "%") && y == 0) fail(line, "division by zero");
    if (op == "+") return Value::of(x + y);
    if (op == "-") return Value::of(x - y);
    if (op == "*") return Value::of(x * y);
    if (op == "/") return Value::of(x / y);
    if (op == "//") return Value::of(std::floor(x / y));
    return Value::of(x - std::floor(x / y) * y);
  }

  // Arguments of a call or filter: positional after the subject, then keywords.
  struct Args {
    std::vector<Value> pos;
    std::map<std::string, Value> kw;
    const Value* get(size_t i, const char* name) const {
      if (i < pos.size()) return &pos[i];
      const auto it = kw.find(name);
      return it == kw.end() ? nullptr : &it->second;
    }
  };
  Args args(const Expr& e, size_t from, int line) {
    Args a;
    const size_t positional = e.a.size() - e.kw.size();
    for (size_t i = from; i < positional; ++i) a.pos.push_back(eval(*e.a[i], line));
    for (size_t i = 0; i < e.kw.size(); ++i) a.kw[e.kw[i]] = eval(*e.a[positional + i], line);
    return a;
  }

  Value method(const Value& self, const std::string& m, const Args& a, int line) {
    const json& s = need(self, line, ("method '" + m + "'").c_str());
    auto arg_str = [&](size_t i, const char* name) -> std::string {
      const Value* v = a.get(i, name);
      if (!v) fail(line, "'" + m + "' needs its argument '" + std::string(name) + "'");
      return str(need(*v, line, "an argument"), line);
    };
    if (s.is_string()) {
      const std::string& x = s.get_ref<const std::string&>();
      const std::string ws = " \t\n\r\v\f";
      auto set = [&]() {
        const Value* v = a.get(0, "chars");
        return v && !(v->undefined() || v->j.is_null()) ? str(v->j, line) : ws;
      };
      if (m == "strip") return Value::of(strip(x, set(), true, true));
      if (m == "lstrip") return Value::of(strip(x, set(), true, false));
      if (m == "rstrip") return Value::of(strip(x, set(), false, true));
      if (m == "startswith") return Value::of(x.rfind(arg_str(0, "prefix"), 0) == 0);
      if (m == "endswith") {
        const std::string suf = arg_str(0, "suffix");
        return Value::of(x.size() >= suf.size() && x.compare(x.size() - suf.size(), suf.size(), suf) == 0);
      }
      if (m == "upper") return Value::of(case_map(x, 1));
      if (m == "lower") return Value::of(case_map(x, 0));
      if (m == "capitalize") return Value::of(case_map(x, 2));
      if (m == "title") return Value::of(case_map(x, 3));
      if (m == "replace") return Value::of(replace_all(x, arg_str(0, "old"), arg_str(1, "new")));
      if (m == "split") {
        json parts = json::array();
        const Value* sep = a.get(0, "sep");
        if (!sep || sep->undefined() || sep->j.is_null()) {
          size_t i = 0;
          while (i < x.size()) {
            while (i < x.size() && ws.find(x[i]) != std::string::npos) ++i;
            size_t e2 = i;
            while (e2 < x.size() && ws.find(x[e2]) == std::string::npos) ++e2;
            if (e2 > i) parts.push_back(x.substr(i, e2 - i));
            i = e2;
          }
        } else {
          const std::string d = str(sep->j, line);
          if (d.empty()) fail(line, "split with an empty separator");
          size_t i = 0, f;
          while ((f = x.find(d, i)) != std::string::npos) {
            parts.push_back(x.substr(i, f - i));
            i = f + d.size();
          }
          parts.push_back(x.substr(i));
        }
        return Value::of(std::move(parts));
      }
    }
    if (s.is_object()) {
      if (m == "items") {
        json r = json::array();
        for (auto it = s.begin(); it != s.end(); ++it) r.push_back(json::array({it.key(), it.value()}));
        return Value::of(std::move(r));
      }
      if (m == "keys") {
        json r = json::array();
        for (auto it = s.begin(); it != s.end(); ++it) r.push_back(it.key());
        return Value::of(std::move(r));
      }
      if (m == "values") {
        json r = json::array();
        for (auto it = s.begin(); it != s.end(); ++it) r.push_back(it.value());
        return Value::of(std::move(r));
      }
      if (m == "get") {
        const std::string k = arg_str(0, "key");
        if (s.contains(k)) return Value::of(s[k]);
        const Value* d = a.get(1, "default");
        return d ? *d : Value::of(nullptr);
      }
    }
    fail(line, "method '" + m + "' of " + s.type_name() + " is not supported");
  }

  static bool is_global_function(const std::string& name) {
    return name == "raise_exception" || name == "namespace" || name == "range" || name == "strftime_now";
  }

  Value call(const Expr& e, int line) {
    const Expr& callee = *e.a[0];
    const Args a = args(e, 1, line);
    if (callee.k == Expr::K::kAttr) return method(eval(*callee.a[0], line), callee.name, a, line);
    if (callee.k != Expr::K::kName) fail(line, "only functions and methods can be called");
    if (callee.name == "raise_exception") {
      const Value* v = a.get(0, "message");
      throw Error("chat template raised: " + (v ? to_text(*v) : std::string("(no message)")));
    }
    if (callee.name == "strftime_now") {  // transformers' global: datetime.now().strftime(format)
      const Value* f = a.get(0, "format_string");
      if (!f || f->k != Value::K::kJson || !f->j.is_string())
        fail(line, "strftime_now takes a format string");
      const std::string format = f->j.get<std::string>();
      if (format.size() > 256) fail(line, "strftime_now: a format of more than 256 characters");
      const std::time_t now = std::time(nullptr);
      std::tm local{};
      localtime_r(&now, &local);
      char buf[1024];
      const size_t n = format.empty() ? 0 : std::strftime(buf, sizeof buf, format.c_str(), &local);
      return Value::of(std::string(buf, n));
    }
    if (callee.name == "namespace") {
      Value ns;
      ns.k = Value::K::kNamespace;
      ns.ns = std::make_shared<json>(json::object());
      if (!a.pos.empty()) fail(line, "namespace() takes keyword arguments");
      for (const auto& [k, v] : a.kw) {
        if (v.k == Value::K::kNamespace) fail(line, "a namespace inside a namespace is not supported");
        if (!v.undefined()) (*ns.ns)[k] = v.j;
      }
      return ns;
    }
    if (callee.name == "range") {
      std::vector<int64_t> n;
      for (const Value& v : a.pos) n.push_back(integer(need(v, line, "range"), line));
      if (n.empty() || n.size() > 3) fail(line, "range takes 1 to 3 integers");
      const int64_t start = n.size() > 1 ? n[0] : 0, stop = n.size() > 1 ? n[1] : n[0],
                    step = n.size() > 2 ? n[2] : 1;
      if (step == 0) fail(line, "range with step 0");
      json r = json::array();
      for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
        count(line);
        r.push_back(i);
        if (__builtin_add_overflow(i, step, &i)) break;  // past 64 bits: past any stop
      }
      return Value::of(std::move(r));
    }
    fail(line, "function '" + callee.name + "' is not supported");
  }

  Value filter(const Expr& e, int line) {
    const Value v = eval(*e.a[0], line);
    const Args a = args(e, 1, line);
    const std::string& f = e.name;
    if (f == "default" || f == "d") {
      const Value* d = a.get(0, "default_value");
      const Value* b = a.get(1, "boolean");
      const bool use = v.undefined() || (b && truthy(*b) && !truthy(v));
      return use ? (d ? *d : Value::of("")) : v;
    }
    if (f == "safe") return v;
    if (f == "string") return Value::of(to_text(v));
    const json& j = need(v, line, ("filter '" + f + "'").c_str());
    if (f == "length" || f == "count") {
      if (j.is_string()) return Value::of(static_cast<int64_t>(chars(j.get<std::string>()).size()));
      if (j.is_array() || j.is_object()) return Value::of(static_cast<int64_t>(j.size()));
      fail(line, std::string("length of ") + j.type_name());
    }
    if (f == "trim") return Value::of(strip(str(j, line), " \t\n\r\v\f", true, true));
    if (f == "upper") return Value::of(case_map(str(j, line), 1));
    if (f == "lower") return Value::of(case_map(str(j, line), 0));
    if (f == "capitalize") return Value::of(case_map(str(j, line), 2));
    if (f == "title") return Value::of(case_map(str(j, line), 3));
    if (f == "replace") {
      const Value* from = a.get(0, "old");
      const Value* to = a.get(1, "new");
      if (!from || !to) fail(line, "replace needs two strings");
      return Value::of(replace_all(str(j, line), str(need(*from, line, "replace"), line),
                                   str(need(*to, line, "replace"), line)));
    }
    if (f == "tojson") {
      const Value* indent = a.get(0, "indent");
      if (indent && !indent->undefined() && !indent->j.is_null())
        fail(line, "tojson with an indent is not supported");
      std::string s;
      dump_py_json(j, s);
      return Value::of(s);
    }
    if (f == "int") {
      if (j.is_string()) {
        int64_t x = 0;
        const std::string& s = j.get_ref<const std::string&>();
        const auto r = std::from_chars(s.data(), s.data() + s.size(), x);
        return Value::of(r.ec == std::errc() && r.ptr == s.data() + s.size() ? x : 0);
      }
      const double d = num(j, line);
      if (!(d > -9.2e18 && d < 9.2e18)) fail(line, "int of a number outside 64-bit integers");
      return Value::of(static_cast<int64_t>(d));
    }
    if (f == "float")
      return Value::of(j.is_string() ? std::strtod(j.get<std::string>().c_str(), nullptr) : num(j, line));
    if (f == "abs") {
      if (!is_int(j)) return Value::of(std::fabs(num(j, line)));
      const int64_t n = integer(j, line);
      if (n == INT64_MIN) fail(line, "integer overflow in 'abs' (64-bit integers)");
      return Value::of(std::llabs(n));
    }
    if (f == "first" || f == "last") {
      if (j.is_array()) return j.empty() ? Value{} : Value::of(f == "first" ? j.front() : j.back());
      if (j.is_string()) {
        const std::vector<std::string> c = chars(j.get<std::string>());
        return c.empty() ? Value{} : Value::of(f == "first" ? c.front() : c.back());
      }
      fail(line, "filter '" + f + "' of " + j.type_name());
    }
    if (f == "items") return method(v, "items", {}, line);
    if (f == "list") {
      if (j.is_array()) return v;
      json r = json::array();
      if (j.is_string())
        for (const std::string& c : chars(j.get<std::string>())) r.push_back(c);
      else if (j.is_object())
        for (auto it = j.begin(); it != j.end(); ++it) r.push_back(it.key());
      else
        fail(line, std::string("list of ") + j.type_name());
      return Value::of(std::move(r));
    }
    if (f == "reverse") {
      if (j.is_array()) {
        json r = json::array();
        for (auto it = j.rbegin(); it != j.rend(); ++it) r.push_back(*it);
        return Value::of(std::move(r));
      }
      if (j.is_string()) {
        std::vector<std::string> c = chars(j.get<std::string>());
        std::string s;
        for (auto it = c.rbegin(); it != c.rend(); ++it) s += *it;
        return Value::of(s);
      }
      fail(line, std::string("reverse of ") + j.type_name());
    }
    if (f == "join") {
      const Value* sep = a.get(0, "d");
      const std::string d = sep ? to_text(*sep) : "";
      if (!j.is_array()) fail(line, std::string("join of ") + j.type_name());
      std::string s;
      for (size_t i = 0; i < j.size(); ++i) {
        if (i) s += d;
        s += to_text(Value::of(j[i]));
        if (s.size() > kMaxOutput) fail(line, "a join grew past 16 MB");
      }
      return Value::of(s);
    }
    fail(line, "filter '" + f + "' is not supported");
  }

  Value test(const Expr& e, int line) {
    const Value v = eval(*e.a[0], line);
    const std::string& t = e.name;
    const json* j = v.k == Value::K::kJson ? &v.j : nullptr;
    // The global functions are defined names (templates ask `strftime_now is defined`).
    const bool function = v.undefined() && e.a[0]->k == Expr::K::kName && is_global_function(e.a[0]->name);
    bool r;
    if (t == "defined")
      r = !v.undefined() || function;
    else if (t == "undefined")
      r = v.undefined() && !function;
    else if (t == "none")
      r = j && j->is_null();
    else if (t == "string")
      r = j && j->is_string();
    else if (t == "number")
      r = j && is_num(*j);
    else if (t == "integer")
      r = j && j->is_number_integer();
    else if (t == "float")
      r = j && j->is_number_float();
    else if (t == "boolean")
      r = j && j->is_boolean();
    else if (t == "true")
      r = j && j->is_boolean() && j->get<bool>();
    else if (t == "false")
      r = j && j->is_boolean() && !j->get<bool>();
    else if (t == "mapping")
      r = (j && j->is_object()) || v.k == Value::K::kNamespace;
    else if (t == "sequence")
      r = j && (j->is_array() || j->is_string() || j->is_object());
    else if (t == "iterable")
      r = j && (j->is_array() || j->is_string() || j->is_object());
    else if (t == "even" || t == "odd") {
      if (!j || !j->is_number_integer()) fail(line, "test '" + t + "' of a non-integer");
      r = (j->get<int64_t>() % 2 == 0) == (t == "even");
    } else
      fail(line, "test '" + t + "' is not supported");
    return Value::of(r != e.negate);
  }

  Value item(const Value& base, const Value& key, int line) {
    if (base.undefined() || key.undefined()) return {};
    if (base.k == Value::K::kNamespace) {
      if (!key.j.is_string()) return {};
      const auto it = base.ns->find(key.j.get<std::string>());
      return it == base.ns->end() ? Value{} : Value::of(*it);
    }
    const json& b = base.j;
    if (b.is_object()) {
      if (!key.j.is_string()) return {};
      const auto it = b.find(key.j.get<std::string>());
      return it == b.end() ? Value{} : Value::of(*it);
    }
    if ((b.is_array() || b.is_string()) && is_int(key.j)) {
      int64_t i = integer(key.j, line);
      if (b.is_string()) {
        const std::vector<std::string> c = chars(b.get<std::string>());
        const int64_t n = static_cast<int64_t>(c.size());
        if (i < 0) i += n;
        return i < 0 || i >= n ? Value{} : Value::of(c[i]);
      }
      const int64_t n = static_cast<int64_t>(b.size());
      if (i < 0) i += n;
      return i < 0 || i >= n ? Value{} : Value::of(b[i]);
    }
    return {};
  }

  Value slice(const Expr& e, int line) {
    const Value base = eval(*e.a[0], line);
    const json& b = need(base, line, "a slice");
    std::vector<std::string> c;
    const bool is_str = b.is_string();
    if (is_str)
      c = chars(b.get<std::string>());
    else if (!b.is_array())
      fail(line, std::string("a slice of ") + b.type_name());
    const int64_t n = is_str ? static_cast<int64_t>(c.size()) : static_cast<int64_t>(b.size());
    auto part = [&](int k, int64_t fallback) {
      if (!e.a[k]) return std::optional<int64_t>{};
      const Value v = eval(*e.a[k], line);
      if (v.undefined() || v.j.is_null()) return std::optional<int64_t>{};
      (void)fallback;
      return std::optional<int64_t>{integer(v.j, line)};
    };
    const std::optional<int64_t> so = part(1, 0), eo = part(2, n), st = part(3, 1);
    const int64_t step = st.value_or(1);
    if (step == 0) fail(line, "slice step 0");
    auto clampi = [&](std::optional<int64_t> x, int64_t dflt, bool is_start) {
      if (!x) return dflt;
      int64_t v = *x;
      if (v < 0) v += n;
      if (step > 0) return std::clamp<int64_t>(v, 0, n);
      (void)is_start;
      return std::clamp<int64_t>(v, -1, n - 1);
    };
    const int64_t start = clampi(so, step > 0 ? 0 : n - 1, true), stop = clampi(eo, step > 0 ? n : -1, false);
    json r = json::array();
    std::string s;
    for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
      if (is_str)
        s += c[i];
      else
        r.push_back(b[i]);
      if (__builtin_add_overflow(i, step, &i)) break;  // past 64 bits: past the end
    }
    return is_str ? Value::of(s) : Value::of(std::move(r));
  }

  Value eval(const Expr& e, int line) {
    if (++depth_ > kMaxDepth) fail(line, "evaluation nested too deeply");
    struct Down {
      int& d;
      ~Down() { --d; }
    } down{depth_};
    switch (e.k) {
      case Expr::K::kLit:
        return Value::of(e.lit);
      case Expr::K::kName:
        return lookup(e.name);
      case Expr::K::kAttr: {
        const Value base = eval(*e.a[0], line);
        if (base.undefined()) fail(line, "'." + e.name + "' of an undefined value");
        if (base.k == Value::K::kJson && !base.j.is_object()) return {};  // methods only in calls
        return item(base, Value::of(e.name), line);
      }
      case Expr::K::kItem: {
        const Value base = eval(*e.a[0], line);
        if (base.undefined()) fail(line, "a subscript of an undefined value");
        return item(base, eval(*e.a[1], line), line);
      }
      case Expr::K::kSlice:
        return slice(e, line);
      case Expr::K::kCall:
        return call(e, line);
      case Expr::K::kFilter:
        return filter(e, line);
      case Expr::K::kTest:
        return test(e, line);
      case Expr::K::kNot:
        return Value::of(!truthy(eval(*e.a[0], line)));
      case Expr::K::kNeg: {
        const Value v = eval(*e.a[0], line);
        const json& j = need(v, line, "'-'");
        if (is_int(j)) {
          const int64_t n = integer(j, line);
          if (n == INT64_MIN) fail(line, "integer overflow in '-' (64-bit integers)");
          return Value::of(-n);
        }
        return Value::of(-num(j, line));
      }
      case Expr::K::kBin:
        return binary(e.name, e, line);
      case Expr::K::kList: {
        json r = json::array();
        for (const P& x : e.a) {
          const Value v = eval(*x, line);
          if (v.k == Value::K::kNamespace) fail(line, "a namespace inside a list is not supported");
          r.push_back(v.undefined() ? json(nullptr) : v.j);
        }
        return Value::of(std::move(r));
      }
      case Expr::K::kDict: {
        json r = json::object();
        for (size_t i = 0; i + 1 < e.a.size(); i += 2) {
          const Value k = eval(*e.a[i], line), v = eval(*e.a[i + 1], line);
          if (k.undefined() || !k.j.is_string()) fail(line, "dict keys must be strings");
          if (v.k == Value::K::kNamespace) fail(line, "a namespace inside a dict is not supported");
          r[k.j.get<std::string>()] = v.undefined() ? json(nullptr) : v.j;
        }
        return Value::of(std::move(r));
      }
      case Expr::K::kCond:
        return truthy(eval(*e.a[0], line)) ? eval(*e.a[1], line) : eval(*e.a[2], line);
    }
    return {};
  }

  std::vector<std::map<std::string, Value>> scopes_;
  int64_t iterations_ = 0;
  int depth_ = 0;
};

}  // namespace

std::string render_jinja(const std::string& source, const json& context) {
  if (!context.is_object()) throw Error("chat template: the context must be a JSON object");
  const std::vector<Node> tree = parse(source);
  Renderer r(context);
  r.run(tree);
  return std::move(r.out);
}

std::string chat_template_of(const std::string& path) {
  if (is_gguf_file(path)) {
    const MappedGguf g(path);
    const GgufValue* v = g.gguf.find("tokenizer.chat_template");
    if (v == nullptr || v->is_array() || v->type != GgufType::kString)
      throw Error(path + ": no chat template (metadata 'tokenizer.chat_template')");
    return v->strings[0];
  }
  const std::string file = path + "/chat_template.jinja";
  if (std::filesystem::exists(file)) {
    const std::vector<uint8_t> b = read_file(file);
    return std::string(b.begin(), b.end());
  }
  const std::string cfg_path = path + "/tokenizer_config.json";
  if (!std::filesystem::exists(cfg_path))
    throw Error(path + ": no chat template (no chat_template.jinja or tokenizer_config.json)");
  const std::vector<uint8_t> b = read_file(cfg_path);
  const json cfg = json::parse(b.begin(), b.end(), nullptr, false);
  if (cfg.is_discarded() || !cfg.is_object()) throw Error(cfg_path + ": not a JSON object");
  const auto it = cfg.find("chat_template");
  if (it == cfg.end()) throw Error(cfg_path + ": no chat_template");
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array())
    for (const json& t : *it)
      if (t.is_object() && t.value("name", "") == "default" && t.contains("template") &&
          t["template"].is_string())
        return t["template"].get<std::string>();
  throw Error(cfg_path + ": chat_template is neither a string nor a list with a 'default' template");
}

std::string apply_chat_template(const std::string& source, const json& messages, bool add_generation_prompt,
                                const std::string& bos_token, const std::string& eos_token) {
  if (!messages.is_array()) throw Error("chat messages must be a list");
  for (const json& m : messages)
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      throw Error("every chat message must be an object with a string 'role'");
  return render_jinja(source, {{"messages", messages},
                               {"add_generation_prompt", add_generation_prompt},
                               {"bos_token", bos_token},
                               {"eos_token", eos_token}});
}

std::string chat_text(const std::string& source, const ByteBpe& bpe, const json& messages,
                      bool add_generation_prompt) {
  const std::string bos = bpe.bos_id() >= 0 ? bpe.token(bpe.bos_id()) : "";
  const std::string eos = bpe.eos_id() >= 0 ? bpe.token(bpe.eos_id()) : "";
  return apply_chat_template(source, messages, add_generation_prompt, bos, eos);
}

std::vector<int32_t> chat_prompt(const std::string& source, const ByteBpe& bpe, const json& messages,
                                 bool add_generation_prompt) {
  return bpe.encode(chat_text(source, bpe, messages, add_generation_prompt), 0, false);
}

}  // namespace sparse24::text
