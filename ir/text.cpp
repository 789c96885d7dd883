#include "ir/text.h"

#include <map>

#include <xxhash.h>

#include "ir/lexer.h"
#include "ir/verify.h"

namespace optjit::ir {

namespace {

std::string quoted(std::string_view s) { return fmt::format("\"{}\"", s); }

std::string init_text(const Program& p, const Init& init, bool values) {
  // A pass body shares its program's buffers but not its hyperparameters: name the index.
  if (init.hyper && *init.hyper >= p.hypers.size())
    return fmt::format("init hyper #{}", *init.hyper);
  if (init.hyper) return fmt::format("init hyper {}", quoted(p.hypers[*init.hyper].name));
  return values ? fmt::format("init {}", init.value) : "init ?";
}

}  // namespace

std::string print(const Program& p, PrintOptions o) {
  std::string out = "optjit-ir 1\n";
  for (const auto& h : p.hypers) {
    if (!o.values) {
      out += fmt::format("hyper {}\n", quoted(h.name));
      continue;
    }
    out += fmt::format("hyper {} = {}", quoted(h.name), h.value);
    if (!h.allowed.empty()) out += " in " + to_string(h.allowed);
    if (h.whole) out += " whole";
    if (h.step_limit) out += " step_limit";
    if (!h.rule.empty()) out += " " + quoted(h.rule);
    out += "\n";
  }
  for (const auto& b : p.buffers) {
    out += fmt::format("buffer {} {} {}", quoted(b.name), to_string(b.storage), to_string(b.role));
    if (b.role == BufferRole::state && !b.per_block) out += " " + init_text(p, b.init, o.values);
    if (b.quant != Quant::none) out += fmt::format(" quant {}", to_string(b.quant));
    if (b.per_block) out += " per_block";
    out += "\n";
  }
  for (const auto& s : p.states)
    out += fmt::format("state {} {} {}\n", quoted(s.name), to_string(s.type),
                       init_text(p, s.init, o.values));
  for (size_t n = 0; n < p.insts.size(); ++n) {
    const Inst& in = p.insts[n];
    const OpInfo& oi = info(in.op);
    std::string line =
        has_result(in.op) ? fmt::format("%{} = {}", n, oi.text) : std::string(oi.text);
    switch (in.op) {
      case Op::Const:
        line += fmt::format(" {}", in.imm);
        break;
      case Op::Uniform:
        line += fmt::format(" {}", in.attr);
        break;
      case Op::Hyper:
        line += " " + quoted(p.hypers[in.attr].name);
        break;
      case Op::Load:
      case Op::Store:
      case Op::HoldsCodes:
      case Op::SRound:  // its random stream: the buffer it stores to
        line += " " + quoted(p.buffers[in.attr].name);
        break;
      case Op::SLoad:
      case Op::SStore:
        line += " " + quoted(p.states[in.attr].name);
        break;
      default:
        if (oi.kind == OpKind::reduce)
          line += static_cast<Scope>(in.attr) == Scope::all ? " all" : " tensor";
        break;
    }
    for (int k = 0; k < oi.arity; ++k)
      line += fmt::format(
          "{} %{}",
          k == 0 && in.op != Op::Store && in.op != Op::SStore && in.op != Op::SRound ? "" : ",",
          index(in.args[k]));
    if (has_result(in.op)) {
      line += fmt::format(" : {}", to_string(in.type));
      if (o.ranks) line += fmt::format("  # {}", to_string(in.rank));
    }
    out += line + "\n";
  }
  return out;
}

uint64_t structural_hash(const Program& p) {
  std::string s = print(p, {.values = false, .ranks = false});
  return XXH3_64bits(s.data(), s.size());
}

namespace {

class IrParser {
 public:
  explicit IrParser(std::vector<Token> toks) : ts_(std::move(toks)) {}

  Expected<Program> run() {
    if (!ts_.at_ident("optjit")) return ts_.expected("'optjit-ir 1' header");
    ts_.next();
    OPTJIT_TRY(ts_.expect_punct("-"));
    if (!ts_.at_ident("ir")) return ts_.expected("'ir'");
    ts_.next();
    if (ts_.peek().kind != Tok::number || ts_.peek().number != 1)
      return ts_.expected("IR version 1");
    ts_.next();
    while (ts_.peek().kind != Tok::end) OPTJIT_TRY(statement());
    Program p = std::move(b_).finish();
    OPTJIT_TRY(verify(p));
    return p;
  }

 private:
  Status statement() {
    const Token& t = ts_.peek();
    if (t.kind == Tok::ident && t.text == "hyper" && !in_body_) return hyper_decl();
    if (t.kind == Tok::ident && t.text == "buffer" && !in_body_) return buffer_decl();
    if (t.kind == Tok::ident && t.text == "state" && !in_body_) return state_decl();
    in_body_ = true;
    if (t.kind == Tok::value_ref) {
      Token name = ts_.next();
      OPTJIT_TRY(ts_.expect_punct("="));
      auto v = inst(true);
      if (!v) return v.error();
      if (!values_.emplace(name.text, *v).second)
        return TokenStream::error_at(name, fmt::format("{} is defined twice", name.text));
      return Status::Ok();
    }
    auto v = inst(false);
    if (!v) return v.error();
    return Status::Ok();
  }

  Expected<std::string> string() {
    if (ts_.peek().kind != Tok::string) return ts_.expected("a quoted name");
    return ts_.next().text;
  }

  Expected<DType> dtype() {
    auto t = ts_.peek();
    if (t.kind == Tok::ident)
      if (auto d = parse_dtype(t.text)) return ts_.next(), *d;
    return ts_.expected("a type (f64, f32, f16, bf16, i64, b1)");
  }

  Expected<Init> init() {
    if (!ts_.at_ident("init")) return ts_.expected("'init'");
    ts_.next();
    Init i;
    if (ts_.at_ident("hyper")) {
      ts_.next();
      Token at = ts_.peek();
      auto n = string();
      if (!n) return n.error();
      auto h = b_.program().find_hyper(*n);
      if (!h) return TokenStream::error_at(at, fmt::format("unknown hyperparameter \"{}\"", *n));
      i.hyper = *h;
      return i;
    }
    auto v = ts_.number();
    if (!v) return v.error();
    i.value = *v;
    return i;
  }

  Status hyper_decl() {
    ts_.next();
    auto n = string();
    if (!n) return n.error();
    double v = 0;
    if (ts_.accept_punct("=")) {
      auto x = ts_.number();
      if (!x) return x.error();
      v = *x;
    }
    // Bounds: `in [0, inf] or (1, 2)`, then `whole`, then `step_limit`, then the rule's name
    // in quotes.
    auto allowed = ts_.intervals();
    if (!allowed) return allowed.error();
    bool whole = ts_.at_ident("whole") && (ts_.next(), true);
    bool step_limit = ts_.at_ident("step_limit") && (ts_.next(), true);
    std::string rule;
    if (ts_.peek().kind == Tok::string) rule = ts_.next().text;
    uint32_t index = b_.add_hyper(*n, v);
    b_.set_hyper_bounds(index, std::move(*allowed), whole, std::move(rule), step_limit);
    return Status::Ok();
  }

  Status buffer_decl() {
    ts_.next();
    auto n = string();
    if (!n) return n.error();
    auto t = dtype();
    if (!t) return t.error();
    BufferDecl d{*n, BufferRole::state, *t, {}};
    const Token role_at = ts_.peek();
    auto role = ts_.expect_ident("a role (param, grad, state)");
    if (!role) return role.error();
    if (*role == "param")
      d.role = BufferRole::param;
    else if (*role == "grad")
      d.role = BufferRole::grad;
    else if (*role == "scratch")
      d.role = BufferRole::scratch;
    else if (*role == "state") {
      if (ts_.peek().kind == Tok::ident && ts_.peek().text == "per_block") {
        ts_.next();
        d.per_block = true;
      } else {
        auto i = init();
        if (!i) return i.error();
        d.init = *i;
        if (ts_.peek().kind == Tok::ident && ts_.peek().text == "quant") {
          ts_.next();
          const Token format_at = ts_.peek();
          auto q = ts_.expect_ident(fmt::format("a quantized format ({})", quant_names()));
          if (!q) return q.error();
          auto f = parse_quant(*q);
          if (!f)
            return TokenStream::error_at(
                format_at, fmt::format("unknown quantized format '{}' ({})", *q, quant_names()));
          d.quant = *f;
        }
      }
    } else
      return TokenStream::error_at(
          role_at, fmt::format("unknown buffer role '{}' (param, grad, state, scratch)", *role));
    b_.add_buffer(std::move(d));
    return Status::Ok();
  }

  Status state_decl() {
    ts_.next();
    auto n = string();
    if (!n) return n.error();
    auto t = dtype();
    if (!t) return t.error();
    auto i = init();
    if (!i) return i.error();
    b_.add_state({*n, *t, *i});
    return Status::Ok();
  }

  Expected<ValueId> operand() {
    const Token t = ts_.peek();
    if (t.kind != Tok::value_ref) return ts_.expected("an operand (%N)");
    ts_.next();
    auto it = values_.find(t.text);
    if (it == values_.end())
      return TokenStream::error_at(t, fmt::format("{} is not defined", t.text));
    return it->second;
  }

  template <typename Find>
  Expected<uint32_t> named(Find find, std::string_view what) {
    Token at = ts_.peek();
    auto n = string();
    if (!n) return n.error();
    if (auto i = find(*n)) return *i;
    return TokenStream::error_at(at, fmt::format("unknown {} \"{}\"", what, *n));
  }

  Expected<ValueId> inst(bool with_result) {
    Token at = ts_.peek();
    if (at.kind != Tok::ident) return ts_.expected("an instruction");
    auto op = parse_op(at.text);
    if (!op) return TokenStream::error_at(at, fmt::format("unknown op '{}'", at.text));
    ts_.next();
    if (has_result(*op) != with_result)
      return TokenStream::error_at(at, with_result ? fmt::format("'{}' has no result", at.text)
                                                   : fmt::format("'{}' needs '%N ='", at.text));
    const OpInfo& oi = info(*op);
    uint32_t attr = 0;
    double imm = 0;
    const Program& p = b_.program();
    if (*op == Op::Const) {
      auto v = ts_.number();
      if (!v) return v.error();
      imm = *v;
    } else if (*op == Op::Hyper) {
      auto i = named([&](auto n) { return p.find_hyper(n); }, "hyperparameter");
      if (!i) return i.error();
      attr = *i;
    } else if (*op == Op::Load || *op == Op::Store || *op == Op::SRound || *op == Op::HoldsCodes) {
      auto i = named([&](auto n) { return p.find_buffer(n); }, "buffer");
      if (!i) return i.error();
      attr = *i;
    } else if (*op == Op::SLoad || *op == Op::SStore) {
      auto i = named([&](auto n) { return p.find_state(n); }, "state");
      if (!i) return i.error();
      attr = *i;
    } else if (oi.kind == OpKind::reduce) {
      if (ts_.at_ident("all"))
        attr = 0;
      else if (ts_.at_ident("tensor"))
        attr = 1;
      else
        return ts_.expected("a reduction scope (all, tensor)");
      ts_.next();
    }
    std::array<ValueId, 3> args{kNoValue, kNoValue, kNoValue};
    for (int k = 0; k < oi.arity; ++k) {
      if (k > 0 || *op == Op::Store || *op == Op::SStore || *op == Op::SRound)
        OPTJIT_TRY(ts_.expect_punct(","));
      auto a = operand();
      if (!a) return a.error();
      args[k] = *a;
    }
    DType type = DType::b1;
    if (with_result) {
      OPTJIT_TRY(ts_.expect_punct(":"));
      auto t = dtype();
      if (!t) return t.error();
      type = *t;
    }
    return b_.emit(*op, type, args, attr, imm);
  }

  TokenStream ts_;
  Builder b_;
  std::map<std::string, ValueId> values_;
  bool in_body_ = false;
};

}  // namespace

Expected<Program> parse_ir(std::string_view text) {
  auto toks = lex(text);
  if (!toks) return toks.error();
  return IrParser(std::move(*toks)).run();
}

}  // namespace optjit::ir
