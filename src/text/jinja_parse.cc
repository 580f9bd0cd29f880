// Chat templates: the lexer (the source as text and tags, with jinja2's whitespace rules as transformers
// configures them: trim_blocks, lstrip_blocks) and a recursive-descent parser to the tree of jinja_tree.h.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>

#include "sparse24/error.h"
#include "text/jinja_tree.h"

namespace sparse24::text::jinja {

void fail(int line, const std::string& msg) {
  throw Error("chat template line " + std::to_string(line) + ": " + msg);
}

namespace {

struct Tok {
  enum class T { kName, kString, kInt, kFloat, kOp, kEnd } t = T::kEnd;
  std::string s;
  int64_t i = 0;
  double f = 0;
};

// The tokens of one tag's inside.
std::vector<Tok> lex_tag(const std::string& src, int line) {
  std::vector<Tok> out;
  size_t p = 0;
  while (p < src.size()) {
    const char c = src[p];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      ++p;
      continue;
    }
    Tok t;
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t e = p;
      while (e < src.size() && (std::isalnum(static_cast<unsigned char>(src[e])) || src[e] == '_')) ++e;
      t.t = Tok::T::kName;
      t.s = src.substr(p, e - p);
      p = e;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t e = p;
      while (e < src.size() && std::isdigit(static_cast<unsigned char>(src[e]))) ++e;
      const bool fl =
          e + 1 < src.size() && src[e] == '.' && std::isdigit(static_cast<unsigned char>(src[e + 1]));
      if (fl) {
        ++e;
        while (e < src.size() && std::isdigit(static_cast<unsigned char>(src[e]))) ++e;
      }
      const std::string num = src.substr(p, e - p);
      if (fl) {
        t.t = Tok::T::kFloat;
        t.f = std::strtod(num.c_str(), nullptr);
      } else {
        t.t = Tok::T::kInt;
        const auto r = std::from_chars(num.data(), num.data() + num.size(), t.i);
        if (r.ec != std::errc()) fail(line, "integer " + num + " out of range");
      }
      p = e;
    } else if (c == '\'' || c == '"') {
      t.t = Tok::T::kString;
      size_t e = p + 1;
      for (;; ++e) {
        if (e >= src.size()) fail(line, "unterminated string");
        if (src[e] == c) break;
        if (src[e] == '\\' && e + 1 < src.size()) {
          const char n = src[++e];
          t.s += n == 'n' ? '\n' : n == 't' ? '\t' : n == 'r' ? '\r' : n;
          continue;
        }
        t.s += src[e];
      }
      p = e + 1;
    } else {
      static const char* two[] = {"==", "!=", "<=", ">=", "//", "**"};
      t.t = Tok::T::kOp;
      for (const char* op : two)
        if (src.compare(p, 2, op) == 0) t.s = op;
      if (t.s.empty()) {
        if (std::string("+-*/%~|.,:()[]{}<>=").find(c) == std::string::npos)
          fail(line, std::string("unexpected character '") + c + "'");
        t.s = std::string(1, c);
      }
      p += t.s.size();
    }
    out.push_back(std::move(t));
  }
  out.push_back(Tok{});
  return out;
}

struct Piece {
  enum class K { kText, kExpr, kStmt } k;
  std::string text;
  int line;
};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// The source as text and tags, with the whitespace rules applied: `-` strips whitespace on its side;
// trim_blocks drops the first newline after a block or comment tag, lstrip_blocks the spaces and tabs
// before one on its line (a `+` turns either off for its tag).
std::vector<Piece> split_source(const std::string& s) {
  std::vector<Piece> out;
  size_t p = 0;
  int line = 1;
  bool strip_next = false, trim_next = false;
  while (p <= s.size()) {
    size_t open = s.find('{', p);
    while (open != std::string::npos && open + 1 < s.size() && s[open + 1] != '{' && s[open + 1] != '%' &&
           s[open + 1] != '#')
      open = s.find('{', open + 1);
    if (open != std::string::npos && open + 1 >= s.size()) open = std::string::npos;
    std::string text = s.substr(p, open == std::string::npos ? std::string::npos : open - p);
    if (strip_next) {
      size_t k = 0;
      while (k < text.size() && is_space(text[k])) ++k;
      text.erase(0, k);
    } else if (trim_next && !text.empty() && text[0] == '\n') {
      text.erase(0, 1);
    }
    strip_next = trim_next = false;
    if (open == std::string::npos) {
      if (!text.empty()) out.push_back({Piece::K::kText, text, line});
      break;
    }
    const char kind = s[open + 1];
    const char close = kind == '{' ? '}' : kind;
    size_t body = open + 2;
    const bool minus = body < s.size() && s[body] == '-', plus = body < s.size() && s[body] == '+';
    if (minus || plus) ++body;
    if (minus) {
      while (!text.empty() && is_space(text.back())) text.pop_back();
    } else if (kind != '{' && !plus &&
               open > p) {  // lstrip_blocks: only spaces and tabs since the line began
      const size_t nl = s.rfind('\n', open - 1);
      const bool has_nl = nl != std::string::npos && nl >= p;
      const size_t from = has_nl ? nl + 1 : p;
      if ((has_nl || p == 0) && s.find_first_not_of(" \t", from) >= open)
        text.erase(text.size() - std::min(open - from, text.size()));
    }
    for (char c : text) line += c == '\n';
    if (!text.empty()) out.push_back({Piece::K::kText, text, line});
    // The tag's end, outside string literals (comments: the first "#}").
    size_t e = body;
    char quote = 0;
    for (;; ++e) {
      if (e + 1 >= s.size()) fail(line, std::string("unclosed '{") + kind + "'");
      if (kind != '#' && quote) {
        if (s[e] == '\\') {
          ++e;
          continue;
        }
        if (s[e] == quote) quote = 0;
        continue;
      }
      if (kind != '#' && (s[e] == '\'' || s[e] == '"')) {
        quote = s[e];
        continue;
      }
      if (s[e] == close && s[e + 1] == '}') break;
    }
    size_t inner_end = e;
    const bool rminus = inner_end > body && s[inner_end - 1] == '-';
    const bool rplus = inner_end > body && s[inner_end - 1] == '+';
    if (rminus || rplus) --inner_end;
    const std::string inner = s.substr(body, inner_end - body);
    if (kind == '{') out.push_back({Piece::K::kExpr, inner, line});
    if (kind == '%') out.push_back({Piece::K::kStmt, inner, line});
    for (char c : inner) line += c == '\n';
    strip_next = rminus;
    trim_next = kind != '{' && !rplus;
    p = e + 2;
  }
  return out;
}

// A node whose operands are in place: its depth, bounded.
P finish(P e, int line) {
  for (const P& x : e->a)
    if (x) e->depth = std::max(e->depth, x->depth + 1);
  if (e->depth > kMaxDepth) fail(line, "expression nested too deeply");
  return e;
}

P make(Expr::K k) {
  P e = std::make_unique<Expr>();
  e->k = k;
  return e;
}

class ExprParser {
 public:
  ExprParser(std::vector<Tok> toks, int line) : t_(std::move(toks)), line_(line) {}
  const Tok& peek() const { return t_[i_]; }
  bool at_end() const { return peek().t == Tok::T::kEnd; }
  bool is_op(const char* s) const { return peek().t == Tok::T::kOp && peek().s == s; }
  bool is_name(const char* s) const { return peek().t == Tok::T::kName && peek().s == s; }
  bool next_is_name(const char* s) const {
    return i_ + 1 < t_.size() && t_[i_ + 1].t == Tok::T::kName && t_[i_ + 1].s == s;
  }
  Tok take() { return at_end() ? t_[i_] : t_[i_++]; }
  void expect_op(const char* s) {
    if (!is_op(s)) fail(line_, std::string("expected '") + s + "', found '" + describe() + "'");
    ++i_;
  }
  std::string expect_name() {
    if (peek().t != Tok::T::kName) fail(line_, "expected a name, found '" + describe() + "'");
    return t_[i_++].s;
  }
  std::string describe() const { return at_end() ? "end of tag" : peek().s.empty() ? "value" : peek().s; }
  void expect_end() {
    if (!at_end()) fail(line_, "unexpected '" + describe() + "'");
  }

  P expression_no_cond() { return or_expr(); }
  P expression() {  // a if c else b
    Guard g(this);
    P e = or_expr();
    if (is_name("if")) {
      ++i_;
      P c = make(Expr::K::kCond);
      P cond = or_expr();
      P other;
      if (is_name("else")) {
        ++i_;
        other = expression();
      } else {
        other = make(Expr::K::kName);  // a name nothing defines: undefined, as jinja2 gives
        other->name = "\x01undefined";
      }
      c->a.push_back(std::move(cond));
      c->a.push_back(std::move(e));
      c->a.push_back(std::move(other));
      return finish(std::move(c), line_);
    }
    return e;
  }

 private:
  struct Guard {
    ExprParser* p;
    explicit Guard(ExprParser* q) : p(q) {
      if (++p->depth_ > kMaxDepth) fail(p->line_, "expression nested too deeply");
    }
    ~Guard() { --p->depth_; }
  };

  P bin(const std::string& op, P l, P r) {
    P e = make(Expr::K::kBin);
    e->name = op;
    e->a.push_back(std::move(l));
    e->a.push_back(std::move(r));
    return finish(std::move(e), line_);
  }
  P or_expr() {
    P e = and_expr();
    while (is_name("or")) {
      ++i_;
      e = bin("or", std::move(e), and_expr());
    }
    return e;
  }
  P and_expr() {
    P e = not_expr();
    while (is_name("and")) {
      ++i_;
      e = bin("and", std::move(e), not_expr());
    }
    return e;
  }
  P not_expr() {
    if (is_name("not")) {
      ++i_;
      Guard g(this);
      P e = make(Expr::K::kNot);
      e->a.push_back(not_expr());
      return finish(std::move(e), line_);
    }
    return compare();
  }
  P compare() {
    P e = math1();
    for (;;) {
      static const char* ops[] = {"==", "!=", "<", "<=", ">", ">="};
      std::string op;
      for (const char* o : ops)
        if (is_op(o)) op = o;
      if (!op.empty()) {
        ++i_;
        e = bin(op, std::move(e), math1());
      } else if (is_name("in")) {
        ++i_;
        e = bin("in", std::move(e), math1());
      } else if (is_name("not") && next_is_name("in")) {
        i_ += 2;
        e = bin("not in", std::move(e), math1());
      } else {
        return e;
      }
    }
  }
  P math1() {
    P e = concat();
    while (is_op("+") || is_op("-")) {
      const std::string op = take().s;  // before the operand is parsed (argument order is unspecified)
      e = bin(op, std::move(e), concat());
    }
    return e;
  }
  P concat() {
    P e = math2();
    while (is_op("~")) {
      ++i_;
      e = bin("~", std::move(e), math2());
    }
    return e;
  }
  P math2() {
    P e = unary();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string op = take().s;
      e = bin(op, std::move(e), unary());
    }
    return e;
  }
  P unary() {
    if (is_op("-")) {
      ++i_;
      Guard g(this);
      P e = make(Expr::K::kNeg);
      e->a.push_back(unary());
      return finish(std::move(e), line_);
    }
    if (is_op("+")) {
      ++i_;
      return unary();
    }
    return filters(postfix(primary()));
  }
  void call_args(Expr& e) {  // after '('
    while (!is_op(")")) {
      if (peek().t == Tok::T::kName && i_ + 1 < t_.size() && t_[i_ + 1].t == Tok::T::kOp &&
          t_[i_ + 1].s == "=") {
        e.kw.push_back(take().s);
        ++i_;
        e.a.push_back(expression());
      } else {
        if (!e.kw.empty()) fail(line_, "a positional argument after a keyword argument");
        e.a.push_back(expression());
      }
      if (!is_op(",")) break;
      ++i_;
    }
    expect_op(")");
  }
  P filters(P e) {
    for (;;) {
      if (is_op("|")) {
        ++i_;
        P f = make(Expr::K::kFilter);
        f->name = expect_name();
        f->a.push_back(std::move(e));
        if (is_op("(")) {
          ++i_;
          call_args(*f);
        }
        e = finish(std::move(f), line_);
      } else if (is_name("is")) {
        ++i_;
        P t = make(Expr::K::kTest);
        if (is_name("not")) {
          ++i_;
          t->negate = true;
        }
        t->name = expect_name();
        t->a.push_back(std::move(e));
        e = finish(std::move(t), line_);
      } else {
        return e;
      }
    }
  }
  P postfix(P e) {
    for (;;) {
      if (is_op(".")) {
        ++i_;
        P a = make(Expr::K::kAttr);
        a->name = expect_name();
        a->a.push_back(std::move(e));
        e = finish(std::move(a), line_);
      } else if (is_op("[")) {
        ++i_;
        P parts[3];
        bool slice = false;
        int at = 0;
        for (;;) {
          if (is_op(":")) {
            slice = true;
            if (++at > 2) fail(line_, "a slice has at most three parts");
            ++i_;
            continue;
          }
          if (is_op("]")) break;
          if (parts[at]) fail(line_, "expected ']'");
          parts[at] = expression();
        }
        ++i_;
        if (slice) {
          P s = make(Expr::K::kSlice);
          s->a.push_back(std::move(e));
          for (P& part : parts) s->a.push_back(std::move(part));  // null parts: omitted
          e = finish(std::move(s), line_);
        } else {
          if (!parts[0]) fail(line_, "empty subscript");
          P s = make(Expr::K::kItem);
          s->a.push_back(std::move(e));
          s->a.push_back(std::move(parts[0]));
          e = finish(std::move(s), line_);
        }
      } else if (is_op("(")) {
        ++i_;
        P c = make(Expr::K::kCall);
        c->a.push_back(std::move(e));
        call_args(*c);
        e = finish(std::move(c), line_);
      } else {
        return e;
      }
    }
  }
  P primary() {
    Guard g(this);
    const Tok t = take();
    P e = make(Expr::K::kLit);
    switch (t.t) {
      case Tok::T::kString:
        e->lit = t.s;
        while (peek().t == Tok::T::kString) e->lit = e->lit.get<std::string>() + take().s;  // 'a' 'b'
        return e;
      case Tok::T::kInt:
        e->lit = t.i;
        return e;
      case Tok::T::kFloat:
        e->lit = t.f;
        return e;
      case Tok::T::kName:
        if (t.s == "true" || t.s == "True")
          e->lit = true;
        else if (t.s == "false" || t.s == "False")
          e->lit = false;
        else if (t.s == "none" || t.s == "None")
          e->lit = nullptr;
        else {
          e->k = Expr::K::kName;
          e->name = t.s;
        }
        return e;
      case Tok::T::kOp:
        if (t.s == "(") {
          P inner = expression();
          if (is_op(",")) fail(line_, "tuples are not supported");
          expect_op(")");
          return inner;
        }
        if (t.s == "[") {
          e->k = Expr::K::kList;
          while (!is_op("]")) {
            e->a.push_back(expression());
            if (!is_op(",")) break;
            ++i_;
          }
          expect_op("]");
          return finish(std::move(e), line_);
        }
        if (t.s == "{") {
          e->k = Expr::K::kDict;
          while (!is_op("}")) {
            e->a.push_back(expression());
            expect_op(":");
            e->a.push_back(expression());
            if (!is_op(",")) break;
            ++i_;
          }
          expect_op("}");
          return finish(std::move(e), line_);
        }
        fail(line_, "unexpected '" + t.s + "'");
      case Tok::T::kEnd:
        break;
    }
    fail(line_, "expected a value, found the end of the tag");
  }

  std::vector<Tok> t_;
  size_t i_ = 0;
  int line_;
  int depth_ = 0;
};

class Parser {
 public:
  explicit Parser(std::vector<Piece> pieces) : p_(std::move(pieces)) {}
  std::vector<Node> parse() {
    std::vector<Node> body;
    const std::string end = block(body, {});
    if (!end.empty()) fail(last_line_, "unexpected '" + end + "'");
    return body;
  }

 private:
  // Parses nodes into `out` until a statement whose keyword is in `stops` (returned, with its parser left
  // positioned in stmt_); "" at the end of the template.
  std::string block(std::vector<Node>& out, const std::vector<std::string>& stops) {
    if (++depth_ > kMaxDepth) fail(last_line_, "blocks nested too deeply");
    while (i_ < p_.size()) {
      const Piece& pc = p_[i_++];
      last_line_ = pc.line;
      if (pc.k == Piece::K::kText) {
        out.push_back({Node::K::kText, pc.line, pc.text, {}, {}, {}});
        continue;
      }
      auto ep = std::make_unique<ExprParser>(lex_tag(pc.text, pc.line), pc.line);
      if (pc.k == Piece::K::kExpr) {
        Node n{Node::K::kOut, pc.line, {}, {}, {}, {}};
        n.exprs.push_back(ep->expression());
        ep->expect_end();
        out.push_back(std::move(n));
        continue;
      }
      const std::string kw = ep->expect_name();
      if (std::find(stops.begin(), stops.end(), kw) != stops.end()) {
        stmt_ = std::move(ep);
        --depth_;
        return kw;
      }
      if (kw == "if") {
        Node n{Node::K::kIf, pc.line, {}, {}, {}, {}};
        n.exprs.push_back(ep->expression());
        ep->expect_end();
        for (;;) {
          n.bodies.emplace_back();
          const std::string end = block(n.bodies.back(), {"elif", "else", "endif"});
          if (end.empty()) fail(pc.line, "'if' without 'endif'");
          if (end == "endif") {
            stmt_->expect_end();
            break;
          }
          if (end == "elif") {
            n.exprs.push_back(stmt_->expression());
            stmt_->expect_end();
            continue;
          }
          stmt_->expect_end();  // else
          n.bodies.emplace_back();
          if (block(n.bodies.back(), {"endif"}).empty()) fail(pc.line, "'if' without 'endif'");
          stmt_->expect_end();
          break;
        }
        out.push_back(std::move(n));
      } else if (kw == "for") {
        Node n{Node::K::kFor, pc.line, {}, {}, {}, {}};
        n.targets.push_back(ep->expect_name());
        while (ep->is_op(",")) {
          ep->take();
          n.targets.push_back(ep->expect_name());
        }
        if (!ep->is_name("in")) fail(pc.line, "expected 'in' in 'for'");
        ep->take();
        n.exprs.push_back(ep->expression_no_cond());
        if (ep->is_name("if")) {
          ep->take();
          n.exprs.push_back(ep->expression_no_cond());
        }
        if (ep->is_name("recursive")) fail(pc.line, "recursive loops are not supported");
        ep->expect_end();
        n.bodies.emplace_back();
        std::string end = block(n.bodies.back(), {"else", "endfor"});
        if (end.empty()) fail(pc.line, "'for' without 'endfor'");
        stmt_->expect_end();
        if (end == "else") {
          n.bodies.emplace_back();
          if (block(n.bodies.back(), {"endfor"}).empty()) fail(pc.line, "'for' without 'endfor'");
          stmt_->expect_end();
        }
        out.push_back(std::move(n));
      } else if (kw == "set") {
        Node n{Node::K::kSet, pc.line, {}, {}, {}, {}};
        n.targets.push_back(ep->expect_name());
        if (ep->is_op(".")) {
          ep->take();
          n.targets.push_back(ep->expect_name());
        }
        if (!ep->is_op("=")) fail(pc.line, "block 'set' (without '=') is not supported");
        ep->take();
        n.exprs.push_back(ep->expression());
        ep->expect_end();
        out.push_back(std::move(n));
      } else if (kw == "break" || kw == "continue") {
        ep->expect_end();
        out.push_back({kw == "break" ? Node::K::kBreak : Node::K::kContinue, pc.line, {}, {}, {}, {}});
      } else if (kw == "generation") {
        ep->expect_end();
        if (block(out, {"endgeneration"}).empty()) fail(pc.line, "'generation' without 'endgeneration'");
        stmt_->expect_end();
      } else {
        fail(pc.line, "'" + kw + "' is not supported");
      }
    }
    --depth_;
    return "";
  }

  std::vector<Piece> p_;
  size_t i_ = 0;
  int depth_ = 0, last_line_ = 1;
  std::unique_ptr<ExprParser> stmt_;
};

}  // namespace

std::vector<Node> parse(const std::string& source) { return Parser(split_source(source)).parse(); }

}  // namespace sparse24::text::jinja
