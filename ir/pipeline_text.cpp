// Algorithm: a recursive-descent parser over lex() tokens. Transform declarations become
// Defs whose `apply` walks the statement list with a Ctx, so a text transform lowers exactly
// like a C++ one. The pipeline expression is a tree of calls resolved against the built-ins
// and the declared transforms; chain(...) flattens.
#include "ir/pipeline_text.h"

#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "ir/builtins.h"
#include "ir/lexer.h"

namespace optjit::dsl {

namespace {

// Documented limits (README, "Pipelines"): the parser and the evaluator recurse, so nesting is
// bounded instead of the stack; and so is the text.
constexpr int kMaxNesting = 200;     // calls, parentheses and unary operators inside each other
constexpr int kMaxExprDepth = 1000;  // an expression tree's depth (a flat sum of N terms: N)
constexpr size_t kMaxTextBytes = 1 << 20;

struct Expr;
using ExprPtr = std::shared_ptr<const Expr>;
struct Expr {
  enum Kind { number, name, index, call, unary, binary, ternary } kind;
  Token at;
  double num = 0;
  std::string text;  // name, function or operator
  std::vector<ExprPtr> args;
  int depth = 1;  // of the tree below and including this node
};

struct Stmt {
  enum Kind { state, scalar, let, assign, skip } kind;
  Token at;
  std::string name;
  ExprPtr value;
};

struct Function {
  size_t arity;
  std::string doc;
  std::function<Value(Ctx&, std::vector<Value>&)> fn;
};

// x rounded to storage type t and back, a value of x's type (a float; the element type for
// others): a cast to bf16 or f16 rounds where it is, on every backend.
Value rounded_to(Ctx& c, Value x, DType t) {
  if (!is_float(x.type())) x = cast(x, c.element_type());
  return cast(cast(x, t), x.type());
}

const std::map<std::string, Function, std::less<>>& functions() {
  using V = std::vector<Value>;
  using ir::Scope;
  static const std::map<std::string, Function, std::less<>> f = {
      {"sqrt", {1, "square root", [](Ctx&, V& a) { return sqrt(a[0]); }}},
      {"rsqrt", {1, "1 / sqrt(x)", [](Ctx&, V& a) { return rsqrt(a[0]); }}},
      {"exp", {1, "e^x", [](Ctx&, V& a) { return exp(a[0]); }}},
      {"log", {1, "natural log", [](Ctx&, V& a) { return log(a[0]); }}},
      {"abs", {1, "|x|", [](Ctx&, V& a) { return abs(a[0]); }}},
      {"sign", {1, "-1, 0 or 1", [](Ctx&, V& a) { return sign(a[0]); }}},
      {"floor", {1, "round down", [](Ctx&, V& a) { return floor(a[0]); }}},
      {"cos", {1, "cosine", [](Ctx&, V& a) { return cos(a[0]); }}},
      {"isfinite", {1, "not Inf or NaN", [](Ctx&, V& a) { return is_finite(a[0]); }}},
      {"bf16",
       {1, "rounded to bf16 (to nearest even), as a value",
        [](Ctx& c, V& a) { return rounded_to(c, a[0], DType::bf16); }}},
      {"f16",
       {1, "rounded to f16 (to nearest even), as a value",
        [](Ctx& c, V& a) { return rounded_to(c, a[0], DType::f16); }}},
      {"like_grad",
       {1, "rounded to the gradients' type, as torch's in-place ops on them round",
        [](Ctx& c, V& a) { return rounded_to(c, a[0], c.dtypes().grad); }}},
      {"pow", {2, "x^y", [](Ctx&, V& a) { return pow(a[0], a[1]); }}},
      {"min", {2, "smaller (NaN-propagating)", [](Ctx&, V& a) { return min(a[0], a[1]); }}},
      {"max", {2, "larger (NaN-propagating)", [](Ctx&, V& a) { return max(a[0], a[1]); }}},
      {"clamp", {3, "clamp(x, lo, hi)", [](Ctx&, V& a) { return clamp(a[0], a[1], a[2]); }}},
      {"fma",
       {3, "fma(x, y, z): x * y + z rounded once, as torch's add(.., alpha=) and addcmul",
        [](Ctx&, V& a) { return fma(a[0], a[1], a[2]); }}},
      {"mod",
       {2, "x mod y, as Python's % (sign of y)", [](Ctx&, V& a) { return mod(a[0], a[1]); }}},
      {"lerp",
       {3, "lerp(a, b, w) as torch.lerp", [](Ctx&, V& a) { return lerp(a[0], a[1], a[2]); }}},
      {"select", {3, "select(cond, a, b)", [](Ctx&, V& a) { return select(a[0], a[1], a[2]); }}},
      {"sum", {1, "sum over all tensors", [](Ctx&, V& a) { return sum(a[0]); }}},
      {"sumsq", {1, "sum of squares over all tensors", [](Ctx&, V& a) { return sumsq(a[0]); }}},
      {"norm", {1, "L2 norm over all tensors", [](Ctx&, V& a) { return sqrt(sumsq(a[0])); }}},
      {"max_abs", {1, "largest |x| over all tensors", [](Ctx&, V& a) { return max_abs(a[0]); }}},
      {"any_nonfinite",
       {1, "any Inf/NaN over all tensors", [](Ctx&, V& a) { return any_nonfinite(a[0]); }}},
      {"tensor_sum",
       {1, "sum over this tensor", [](Ctx&, V& a) { return sum(a[0], Scope::tensor); }}},
      {"tensor_sumsq",
       {1, "sum of squares over this tensor",
        [](Ctx&, V& a) { return sumsq(a[0], Scope::tensor); }}},
      {"tensor_norm",
       {1, "L2 norm of this tensor", [](Ctx&, V& a) { return sqrt(sumsq(a[0], Scope::tensor)); }}},
      {"tensor_max_abs",
       {1, "largest |x| in this tensor", [](Ctx&, V& a) { return max_abs(a[0], Scope::tensor); }}},
  };
  return f;
}

// Evaluates a custom transform's statements with a Ctx.
class BodyEval {
 public:
  BodyEval(Ctx& c, const Def& def) : c_(c), def_(def) {}

  void run(const std::vector<Stmt>& body) {
    for (const Stmt& s : body) {
      if (failed_) return;
      stmt(s);
    }
  }

 private:
  void fail(const Token& at, std::string msg) {
    if (failed_) return;
    failed_ = true;
    c_.fail(TokenStream::error_at(at, msg));
  }

  // A number or a hyperparameter's name: the state is made holding it. Anything else is an
  // expression whose value at the first step the state takes (std::nullopt).
  std::optional<StateInit> init_of(const Stmt& s) {
    if (!s.value) return StateInit(0.0);
    const Expr& e = *s.value;
    if (e.kind == Expr::number) return StateInit(e.num);
    if (e.kind == Expr::unary && e.text == "-" && e.args[0]->kind == Expr::number)
      return StateInit(-e.args[0]->num);
    if (e.kind == Expr::name && def_.find_hyper(e.text) && !locals_.count(e.text) &&
        !declared_.count(e.text))
      return StateInit::from_hyper(e.text);
    return std::nullopt;
  }

  void stmt(const Stmt& s) {
    switch (s.kind) {
      case Stmt::state:
      case Stmt::scalar: {
        if (declared_.count(s.name) || locals_.count(s.name))
          return fail(s.at, fmt::format("'{}' is already declared", s.name));
        const bool scalar = s.kind == Stmt::scalar;
        if (auto init = init_of(s)) {
          declared_[s.name] = scalar;
          scalar ? c_.scalar_state(s.name, *init) : c_.state(s.name, *init);
          return;
        }
        // From the first step's value of an expression (the parameter, the gradient, ...),
        // which sees only what is declared before it.
        Value first = expr(*s.value);
        if (failed_) return;
        if (scalar && first.rank() != Rank::scalar)
          return fail(s.value->at,
                      fmt::format("scalar state '{}' must start from a per-step value (a "
                                  "per-element one has a value per element)",
                                  s.name));
        declared_[s.name] = scalar;
        scalar ? c_.scalar_state_from(s.name, first) : c_.state_from(s.name, first);
        return;
      }
      case Stmt::let: {
        Value v = expr(*s.value);
        if (!failed_) locals_[s.name] = v;
        return;
      }
      case Stmt::skip: {
        Value v = expr(*s.value);
        if (failed_) return;
        if (v.rank() != Rank::scalar)
          return fail(s.at, "skip_if needs a per-step condition (use sum, any_nonfinite, ...)");
        c_.skip_step_if(v);
        return;
      }
      case Stmt::assign: {
        Value v = expr(*s.value);
        if (failed_) return;
        if (s.name == "param" || s.name == "grad") {
          if (v.rank() != Rank::element)
            return fail(s.at, fmt::format("{} must be set to a per-element value", s.name));
          s.name == "param" ? c_.set_param(v) : c_.set_grad(v);
        } else if (auto it = declared_.find(s.name); it != declared_.end()) {
          if (it->second) {
            if (v.rank() != Rank::scalar)
              return fail(s.at,
                          fmt::format("scalar state '{}' must be set to a per-step value", s.name));
            c_.set_scalar_state(s.name, v);
          } else {
            if (v.rank() != Rank::element)
              return fail(s.at,
                          fmt::format("state '{}' must be set to a per-element value", s.name));
            c_.set_state(s.name, v);
          }
        } else if (locals_.count(s.name)) {
          locals_[s.name] = v;
        } else {
          return fail(
              s.at,
              fmt::format("cannot assign to '{}': declare it with state, scalar or let", s.name));
        }
        return;
      }
    }
  }

  Value name(const Expr& e) {
    const std::string& n = e.text;
    if (auto it = locals_.find(n); it != locals_.end()) return it->second;
    if (auto it = declared_.find(n); it != declared_.end())
      return it->second ? c_.scalar_state(n) : c_.state(n);
    if (n == "grad") return c_.grad();
    if (n == "param") return c_.param();
    if (n == "step") return c_.step();
    if (n == "numel") return c_.numel();
    if (const HyperSpec* h = def_.find_hyper(n)) {
      if (h->arity != 1) {
        fail(e.at, fmt::format("'{}' is a tuple: write {}[0]", n, n));
        return c_.constant(0);
      }
      return c_.hyper(n);
    }
    if (def_.find_option(n)) return c_.constant(c_.flag(n) ? 1.0 : 0.0) != 0.0;
    fail(e.at, fmt::format("unknown name '{}'", n));
    return c_.constant(0);
  }

  Value expr(const Expr& e) {
    if (failed_) return c_.constant(0);
    switch (e.kind) {
      case Expr::number:
        return c_.constant(e.num);
      case Expr::name:
        return name(e);
      case Expr::index: {
        const HyperSpec* h = def_.find_hyper(e.text);
        // The index as written (1e40, 1.5, -1 included), converted only once it is in range.
        const bool whole = e.num >= 0 && e.num < 1024 && e.num == std::floor(e.num);
        const size_t k = whole ? static_cast<size_t>(e.num) : 0;
        if (!h || h->arity == 1 || !whole || k >= c_.hyper_size(e.text)) {
          fail(e.at,
               fmt::format("'{}[{}]' is not an element of a tuple hyperparameter", e.text, e.num));
          return c_.constant(0);
        }
        return c_.hyper(e.text, k);
      }
      case Expr::call: {
        auto& fs = functions();
        auto it = fs.find(e.text);
        if (it == fs.end()) {
          fail(e.at, fmt::format("unknown function '{}'", e.text));
          return c_.constant(0);
        }
        if (e.args.size() != it->second.arity) {
          fail(e.at, fmt::format("'{}' takes {} argument(s), got {}", e.text, it->second.arity,
                                 e.args.size()));
          return c_.constant(0);
        }
        std::vector<Value> a;
        for (const auto& x : e.args) a.push_back(expr(*x));
        if (failed_) return c_.constant(0);
        if (it->first.find("sum") != std::string::npos ||
            it->first.find("norm") != std::string::npos ||
            it->first.find("max_abs") != std::string::npos || it->first == "any_nonfinite")
          if (a[0].rank() != Rank::element) {
            fail(e.at, fmt::format("'{}' reduces a per-element value", e.text));
            return c_.constant(0);
          }
        return it->second.fn(c_, a);
      }
      case Expr::unary: {
        Value a = expr(*e.args[0]);
        return e.text == "-" ? -a : !a;
      }
      case Expr::binary: {
        Value a = expr(*e.args[0]), b = expr(*e.args[1]);
        if (failed_) return c_.constant(0);
        const std::string& o = e.text;
        if (o == "+") return a + b;
        if (o == "-") return a - b;
        if (o == "*") return a * b;
        if (o == "/") return a / b;
        if (o == "**") return pow(a, b);
        if (o == "<") return a < b;
        if (o == "<=") return a <= b;
        if (o == ">") return a > b;
        if (o == ">=") return a >= b;
        if (o == "==") return a == b;
        if (o == "!=") return a != b;
        if (o == "&&") return a && b;
        return a || b;
      }
      case Expr::ternary: {
        Value c = expr(*e.args[0]), a = expr(*e.args[1]), b = expr(*e.args[2]);
        if (failed_) return c_.constant(0);
        return select(c, a, b);
      }
    }
    return c_.constant(0);
  }

  Ctx& c_;
  const Def& def_;
  std::map<std::string, bool, std::less<>> declared_;  // name -> is scalar
  std::map<std::string, Value, std::less<>> locals_;
  bool failed_ = false;
};

struct CallNode;
using CallPtr = std::shared_ptr<const CallNode>;
using ArgNode = std::variant<double, std::vector<double>, bool, std::string, CallPtr>;
struct CallNode {
  Token at;
  std::string name;
  std::vector<ArgNode> positional;
  std::vector<std::pair<Token, ArgNode>> keyword;
};

class Parser {
 public:
  explicit Parser(std::vector<Token> t) : ts_(std::move(t)) {}

  Expected<Pipeline> run() {
    while (ts_.at_ident("transform")) OPTJIT_TRY(transform_decl());
    if (ts_.peek().kind == Tok::end) return ts_.expected("a pipeline such as adamw(lr=1e-3)");
    auto top = call();
    if (!top) return top.error();
    if (ts_.peek().kind != Tok::end) return ts_.expected("end of input");
    Pipeline out;
    OPTJIT_TRY(resolve_chain(**top, out));
    return out;
  }

 private:
  // ---- declarations -------------------------------------------------------------------
  Status transform_decl() {
    ts_.next();
    Token at = ts_.peek();
    auto name = ts_.expect_ident("a transform name");
    if (!name) return name.error();
    if (find_builtin(*name))
      return TokenStream::error_at(at,
                                   fmt::format("'{}' is a built-in; choose another name", *name));
    if (custom_.count(*name))
      return TokenStream::error_at(at, fmt::format("transform '{}' is declared twice", *name));
    auto def = std::make_shared<Def>();
    def->name = *name;
    def->doc = "declared in the pipeline text";
    OPTJIT_TRY(ts_.expect_punct("("));
    while (!ts_.at_punct(")")) {
      Token pat = ts_.peek();
      auto pname = ts_.expect_ident("a hyperparameter name");
      if (!pname) return pname.error();
      if (def->find_hyper(*pname) || def->find_option(*pname) || reserved(*pname))
        return TokenStream::error_at(
            pat, fmt::format("'{}' cannot be a hyperparameter name here", *pname));
      if (ts_.accept_punct("=")) {
        Token vat = ts_.peek();
        auto v = literal();
        if (!v) return v.error();
        if (auto* d = std::get_if<double>(&*v))
          def->hypers.push_back({*pname, {*d}, "", true});
        else if (auto* t = std::get_if<std::vector<double>>(&*v))
          def->hypers.push_back({*pname, *t, "", false, t->size()});
        else if (auto* b = std::get_if<bool>(&*v))
          def->options.push_back({*pname, *b, "", {}});
        else
          return TokenStream::error_at(vat, "a default must be a number, a tuple or true/false");
      } else {
        def->hypers.push_back({*pname, {}, "", true});
      }
      // Bounds: `lr=1e-3 in [0, inf]`, `beta=0.9 in [0, 1)`, `k=2 in (0, inf] whole`.
      if (ts_.at_ident("in") || ts_.at_ident("whole")) {
        if (def->hypers.empty() || def->hypers.back().name != *pname)
          return TokenStream::error_at(ts_.peek(), "only a number or tuple can have bounds");
        Token bat = ts_.peek();
        auto bounds = hyper_bounds(*pname);
        if (!bounds) return bounds.error();
        def->hypers.back().bounds = {*bounds};
        for (double d : def->hypers.back().defaults)
          if (auto why = ir::check_hyper(
                  {"the default " + *pname, 0, bounds->allowed, bounds->whole, bounds->rule}, d);
              !why.empty())
            return TokenStream::error_at(bat, why);
      }
      if (!ts_.accept_punct(",")) break;
    }
    OPTJIT_TRY(ts_.expect_punct(")"));
    OPTJIT_TRY(ts_.expect_punct("{"));
    auto body = std::make_shared<std::vector<Stmt>>();
    while (!ts_.accept_punct("}")) {
      if (ts_.peek().kind == Tok::end) return ts_.expected("'}' closing the transform");
      auto s = statement();
      if (!s) return s.error();
      body->push_back(std::move(*s));
      ts_.accept_punct(";");
    }
    const Def* raw = def.get();
    def->apply = [body, raw](Ctx& c) { BodyEval(c, *raw).run(*body); };
    custom_[*name] = def;
    return Status::Ok();
  }

  // `in [lo, hi] or (lo, hi) ... [whole]`: where a custom hyperparameter may lie.
  Expected<HyperBounds> hyper_bounds(const std::string& name) {
    HyperBounds b;
    b.rule = name;
    auto allowed = ts_.intervals();
    if (!allowed) return allowed.error();
    b.allowed = std::move(*allowed);
    if (ts_.at_ident("whole")) ts_.next(), b.whole = true;
    return b;
  }

  static bool reserved(std::string_view n) {
    return n == "grad" || n == "param" || n == "step" || n == "numel" || n == "state" ||
           n == "scalar" || n == "let" || n == "skip_if" || n == "true" || n == "false" ||
           functions().count(n);
  }

  Expected<Stmt> statement() {
    Stmt s;
    s.at = ts_.peek();
    if (ts_.at_ident("state") || ts_.at_ident("scalar") || ts_.at_ident("let")) {
      std::string kw = ts_.next().text;
      s.kind = kw == "state" ? Stmt::state : kw == "scalar" ? Stmt::scalar : Stmt::let;
      Token nat = ts_.peek();
      auto n = ts_.expect_ident("a name");
      if (!n) return n.error();
      if (reserved(*n)) return TokenStream::error_at(nat, fmt::format("'{}' is reserved", *n));
      s.name = *n;
      if (ts_.accept_punct("=")) {
        auto e = expr();
        if (!e) return e.error();
        s.value = *e;
      } else if (s.kind == Stmt::let) {
        return ts_.expected("'='");
      }
      return s;
    }
    if (ts_.at_ident("skip_if")) {
      ts_.next();
      s.kind = Stmt::skip;
      auto e = expr();
      if (!e) return e.error();
      s.value = *e;
      return s;
    }
    auto n = ts_.expect_ident("a statement (state, scalar, let, skip_if or NAME = ...)");
    if (!n) return n.error();
    s.kind = Stmt::assign;
    s.name = *n;
    OPTJIT_TRY(ts_.expect_punct("="));
    auto e = expr();
    if (!e) return e.error();
    s.value = *e;
    return s;
  }

  // ---- expressions (precedence climbing) ----------------------------------------------
  static ExprPtr node(Expr::Kind k, Token at, std::string text, std::vector<ExprPtr> args = {}) {
    auto e = std::make_shared<Expr>();
    e->kind = k;
    e->at = std::move(at);
    e->text = std::move(text);
    e->args = std::move(args);
    for (const auto& a : e->args) e->depth = std::max(e->depth, a->depth + 1);
    return e;
  }
  // The tree under `e` is within the depth the evaluator is written for.
  static Expected<ExprPtr> bounded(ExprPtr e) {
    if (e->depth > kMaxExprDepth)
      return TokenStream::error_at(
          e->at, fmt::format("expression nested deeper than {} levels (optjit's limit; a sum of "
                             "that many terms counts as that deep)",
                             kMaxExprDepth));
    return e;
  }
  // Counts nesting for the scope of a recursive rule; an error past kMaxNesting.
  struct Nest {
    explicit Nest(int& d) : depth(++d), d_(d) {}
    ~Nest() { --d_; }
    int depth;
    int& d_;
  };
  Status nest_ok(const Nest& n, const Token& at) const {
    if (n.depth <= kMaxNesting) return Status::Ok();
    return TokenStream::error_at(
        at, fmt::format("nested deeper than {} levels (optjit's limit)", kMaxNesting));
  }

  Expected<ExprPtr> expr() {
    Nest nest(depth_);
    OPTJIT_TRY(nest_ok(nest, ts_.peek()));
    auto c = binary(0);
    if (!c) return c;
    if (!ts_.at_punct("?")) return c;
    Token at = ts_.next();
    auto a = expr();
    if (!a) return a;
    OPTJIT_TRY(ts_.expect_punct(":"));
    auto b = expr();
    if (!b) return b;
    return node(Expr::ternary, at, "?", {*c, *a, *b});
  }

  static int precedence(const Token& t) {
    if (t.kind != Tok::punct) return -1;
    static const std::map<std::string, int, std::less<>> p = {
        {"||", 0}, {"&&", 1}, {"==", 2}, {"!=", 2}, {"<", 3}, {"<=", 3},
        {">", 3},  {">=", 3}, {"+", 4},  {"-", 4},  {"*", 5}, {"/", 5}};
    auto it = p.find(t.text);
    return it == p.end() ? -1 : it->second;
  }

  Expected<ExprPtr> binary(int min_prec) {
    auto lhs = unary();
    if (!lhs) return lhs;
    while (true) {
      int prec = precedence(ts_.peek());
      if (prec < min_prec) return lhs;
      Token op = ts_.next();
      auto rhs = binary(prec + 1);
      if (!rhs) return rhs;
      lhs = bounded(node(Expr::binary, op, op.text, {*lhs, *rhs}));
      if (!lhs) return lhs;
    }
  }

  Expected<ExprPtr> unary() {
    if (ts_.at_punct("-") || ts_.at_punct("!")) {
      Nest nest(depth_);
      OPTJIT_TRY(nest_ok(nest, ts_.peek()));
      Token op = ts_.next();
      auto a = unary();
      if (!a) return a;
      return node(Expr::unary, op, op.text, {*a});
    }
    auto base = primary();
    if (!base) return base;
    if (ts_.at_punct("**")) {  // right-associative, binds tighter than unary minus on its left
      Nest nest(depth_);
      OPTJIT_TRY(nest_ok(nest, ts_.peek()));
      Token op = ts_.next();
      auto exp = unary();
      if (!exp) return exp;
      return node(Expr::binary, op, "**", {*base, *exp});
    }
    return base;
  }

  Expected<ExprPtr> primary() {
    Token t = ts_.peek();
    if (t.kind == Tok::number) {
      ts_.next();
      auto e = node(Expr::number, t, t.text);
      const_cast<Expr&>(*e).num = t.number;
      return e;
    }
    if (ts_.accept_punct("(")) {
      auto e = expr();
      if (!e) return e;
      OPTJIT_TRY(ts_.expect_punct(")"));
      return e;
    }
    if (t.kind == Tok::ident) {
      ts_.next();
      if (t.text == "true" || t.text == "false" || t.text == "inf") {
        auto e = node(Expr::number, t, t.text);
        const_cast<Expr&>(*e).num = t.text == "true"    ? 1
                                    : t.text == "false" ? 0
                                                        : std::numeric_limits<double>::infinity();
        return e;
      }
      if (ts_.accept_punct("(")) {
        std::vector<ExprPtr> args;
        while (!ts_.at_punct(")")) {
          auto a = expr();
          if (!a) return a;
          args.push_back(*a);
          if (!ts_.accept_punct(",")) break;
        }
        OPTJIT_TRY(ts_.expect_punct(")"));
        return node(Expr::call, t, t.text, std::move(args));
      }
      if (ts_.accept_punct("[")) {
        Token it = ts_.peek();
        if (it.kind != Tok::number || it.number < 0 || it.number != std::floor(it.number))
          return ts_.expected("an index (0, 1, ...)");
        ts_.next();
        OPTJIT_TRY(ts_.expect_punct("]"));
        auto e = node(Expr::index, t, t.text);
        const_cast<Expr&>(*e).num = it.number;
        return e;
      }
      return node(Expr::name, t, t.text);
    }
    return ts_.expected("an expression");
  }

  // ---- the pipeline expression ---------------------------------------------------------

  // A literal argument: number, tuple of numbers, true/false (or Python's True/False, as torch
  // keyword arguments are pasted: nesterov=True) or "string".
  Expected<ArgNode> literal() {
    const Token& t = ts_.peek();
    if (t.kind == Tok::string) return ArgNode(ts_.next().text);
    for (const char* word : {"true", "True", "false", "False"})
      if (ts_.at_ident(word)) {
        const bool value = word[0] == 't' || word[0] == 'T';
        ts_.next();
        return ArgNode(value);
      }
    if (ts_.accept_punct("(")) {
      std::vector<double> xs;
      while (!ts_.at_punct(")")) {
        auto x = ts_.number();
        if (!x) return x.error();
        xs.push_back(*x);
        if (!ts_.accept_punct(",")) break;
      }
      OPTJIT_TRY(ts_.expect_punct(")"));
      if (xs.empty()) return ts_.expected("at least one number in the tuple");
      return ArgNode(std::move(xs));
    }
    auto x = ts_.number();
    if (!x) return ts_.expected("a number, a tuple, true/false, a string or a call");
    return ArgNode(*x);
  }

  Expected<ArgNode> argument() {
    if (ts_.peek().kind == Tok::ident && ts_.peek(1).kind == Tok::punct &&
        ts_.peek(1).text == "(") {
      auto c = call();
      if (!c) return c.error();
      return ArgNode(*c);
    }
    return literal();
  }

  Expected<CallPtr> call() {
    Nest nest(depth_);
    OPTJIT_TRY(nest_ok(nest, ts_.peek()));
    Token at = ts_.peek();
    auto name = ts_.expect_ident("a transform name, e.g. adamw");
    if (!name) return name.error();
    OPTJIT_TRY(ts_.expect_punct("("));
    auto n = std::make_shared<CallNode>();
    n->at = at;
    n->name = *name;
    while (!ts_.at_punct(")")) {
      if (ts_.peek().kind == Tok::ident && ts_.peek(1).kind == Tok::punct &&
          ts_.peek(1).text == "=") {
        Token kat = ts_.next();
        ts_.next();
        auto v = argument();
        if (!v) return v.error();
        for (const auto& [k, _] : n->keyword)
          if (k.text == kat.text)
            return TokenStream::error_at(kat, fmt::format("'{}' is given twice", kat.text));
        n->keyword.emplace_back(kat, std::move(*v));
      } else {
        if (!n->keyword.empty()) return ts_.expected("a keyword argument (name=value)");
        auto v = argument();
        if (!v) return v.error();
        n->positional.push_back(std::move(*v));
      }
      if (!ts_.accept_punct(",")) break;
    }
    if (!ts_.accept_punct(")")) return ts_.expected("',' or ')'");
    return CallPtr(n);
  }

  std::shared_ptr<const Def> find(const std::string& name) {
    if (auto it = custom_.find(name); it != custom_.end()) return it->second;
    return find_builtin(name);
  }

  Expected<std::shared_ptr<const Bound>> resolve_call(const CallNode& n) {
    auto def = find(n.name);
    if (!def)
      return TokenStream::error_at(n.at, fmt::format("unknown transform or schedule '{}'", n.name));
    if (!n.positional.empty())
      return TokenStream::error_at(
          n.at, fmt::format("'{}' takes keyword arguments, e.g. {}({}=...)", n.name, n.name,
                            def->hypers.empty() ? "x" : def->hypers[0].name));
    Args args;
    for (const auto& [k, v] : n.keyword) {
      if (auto* c = std::get_if<CallPtr>(&v)) {
        auto s = resolve_call(**c);
        if (!s) return s.error();
        args.emplace(k.text, Arg(*s));
      } else {
        args.emplace(k.text, std::visit(
                                 [](const auto& x) -> Arg {
                                   if constexpr (std::is_same_v<std::decay_t<decltype(x)>, CallPtr>)
                                     return Arg(0.0);
                                   else
                                     return Arg(x);
                                 },
                                 v));
      }
    }
    auto b = bind(def, std::move(args));
    if (!b) return TokenStream::error_at(n.at, b.error().message);
    return b;
  }

  Status resolve_chain(const CallNode& n, Pipeline& out) {
    if (n.name == "chain") {
      if (!n.keyword.empty())
        return TokenStream::error_at(n.keyword[0].first, "chain takes transforms, not keywords");
      if (n.positional.empty())
        return TokenStream::error_at(n.at, "chain needs at least one transform");
      for (const auto& a : n.positional) {
        auto* c = std::get_if<CallPtr>(&a);
        if (!c) return TokenStream::error_at(n.at, "chain takes transforms such as adamw(...)");
        OPTJIT_TRY(resolve_chain(**c, out));
      }
      return Status::Ok();
    }
    auto b = resolve_call(n);
    if (!b) return b.error();
    if ((*b)->def->kind == DefKind::schedule)
      return TokenStream::error_at(
          n.at,
          fmt::format("'{}' is a schedule; pass it as a hyperparameter, e.g. adamw(lr={}(...))",
                      n.name, n.name));
    out.push_back(*b);
    return Status::Ok();
  }

  TokenStream ts_;
  std::map<std::string, std::shared_ptr<const Def>> custom_;
  int depth_ = 0;  // nesting of the rule being parsed
};

}  // namespace

Expected<Pipeline> parse_pipeline(std::string_view text) {
  if (text.size() > kMaxTextBytes)
    return make_error("pipeline text of {} bytes is longer than optjit's limit of {} bytes",
                      text.size(), kMaxTextBytes);
  auto toks = lex(text);
  if (!toks) return toks.error();
  return Parser(std::move(*toks)).run();
}

std::string describe_text_functions() {
  std::string out;
  for (const auto& [name, f] : functions()) out += fmt::format("  {:<16} {}\n", name, f.doc);
  return out;
}

}  // namespace optjit::dsl
