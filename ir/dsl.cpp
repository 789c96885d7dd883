#include "ir/dsl.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <utility>

#include <fmt/ranges.h>

#include "ir/builtins.h"
#include "ir/sign.h"
#include "ir/verify.h"

namespace optjit::dsl {

using ir::Op;
using ir::ValueId;

DType Value::type() const { return ctx_->builder().program().at(id_).type; }
Rank Value::rank() const { return ctx_->builder().program().at(id_).rank; }

namespace {

Ctx* ctx_of(Value a, Value b = {}) {
  OPTJIT_CHECK(a.valid() || b.valid());
  return a.valid() ? a.ctx() : b.ctx();
}

int float_width(DType t) {
  switch (t) {
    case DType::f64:
      return 3;
    case DType::f32:
      return 2;
    case DType::bf16:
    case DType::f16:
      return 1;
    default:
      return 0;
  }
}

// The type two operands meet in: the higher-rank operand's float type wins (a per-step
// scalar joins per-element math in the element's compute type, as PyTorch's Python scalars
// do); at equal rank the wider float; integers and bools become the other operand's type.
DType meet(DType ta, Rank ra, DType tb, Rank rb) {
  if (ta == tb) return ta;
  bool fa = is_float(ta), fb = is_float(tb);
  if (fa && !fb) return ta;
  if (fb && !fa) return tb;
  if (!fa && !fb) return DType::i64;
  if (ra != rb) return ra > rb ? ta : tb;
  return float_width(ta) >= float_width(tb) ? ta : tb;
}
DType meet(Value a, Value b) { return meet(a.type(), a.rank(), b.type(), b.rank()); }

Value emit(Ctx* c, Op op, DType t, Value a, Value b = {}, Value d = {}, uint32_t attr = 0) {
  return c->wrap(c->builder().emit(
      op, t, {a.id(), b.valid() ? b.id() : ir::kNoValue, d.valid() ? d.id() : ir::kNoValue}, attr));
}

Value lit(Ctx* c, double v, DType t) {
  if (!is_float(t)) t = DType::f64;
  return c->wrap(c->builder().constant(round_to(t, v), t));
}

Value unary(Op op, Value a) {
  if (!is_float(a.type()) && op != Op::Neg && op != Op::Abs) a = cast(a, DType::f64);
  return emit(a.ctx(), op, a.type(), a);
}

Value binary(Op op, Value a, Value b) {
  DType t = meet(a, b);
  if ((op == Op::Div || op == Op::Pow) && !is_float(t)) t = DType::f64;
  return emit(ctx_of(a, b), op, t, cast(a, t), cast(b, t));
}

Value compare(Op op, Value a, Value b) {
  DType t = meet(a, b);
  return emit(ctx_of(a, b), op, DType::b1, cast(a, t), cast(b, t));
}

Value boolean(Value a) { return a.type() == DType::b1 ? a : a != 0.0; }

}  // namespace

Value cast(Value a, DType t) {
  if (a.type() == t) return a;
  return emit(a.ctx(), Op::Cast, t, a);
}

Value operator+(Value a, Value b) { return binary(Op::Add, a, b); }
Value operator-(Value a, Value b) { return binary(Op::Sub, a, b); }
Value operator*(Value a, Value b) { return binary(Op::Mul, a, b); }
Value operator/(Value a, Value b) { return binary(Op::Div, a, b); }
Value operator-(Value a) { return unary(Op::Neg, a); }
Value operator+(Value a, double b) { return a + lit(a.ctx(), b, a.type()); }
Value operator-(Value a, double b) { return a - lit(a.ctx(), b, a.type()); }
Value operator*(Value a, double b) { return a * lit(a.ctx(), b, a.type()); }
Value operator/(Value a, double b) { return a / lit(a.ctx(), b, a.type()); }
Value operator+(double a, Value b) { return lit(b.ctx(), a, b.type()) + b; }
Value operator-(double a, Value b) { return lit(b.ctx(), a, b.type()) - b; }
Value operator*(double a, Value b) { return lit(b.ctx(), a, b.type()) * b; }
Value operator/(double a, Value b) { return lit(b.ctx(), a, b.type()) / b; }
Value operator<(Value a, Value b) { return compare(Op::Lt, a, b); }
Value operator<=(Value a, Value b) { return compare(Op::Le, a, b); }
Value operator>(Value a, Value b) { return compare(Op::Gt, a, b); }
Value operator>=(Value a, Value b) { return compare(Op::Ge, a, b); }
Value operator==(Value a, Value b) { return compare(Op::Eq, a, b); }
Value operator!=(Value a, Value b) { return compare(Op::Ne, a, b); }
Value operator<(Value a, double b) { return a < lit(a.ctx(), b, a.type()); }
Value operator>(Value a, double b) { return a > lit(a.ctx(), b, a.type()); }
Value operator==(Value a, double b) { return a == lit(a.ctx(), b, a.type()); }
Value operator!=(Value a, double b) { return a != lit(a.ctx(), b, a.type()); }
Value operator&&(Value a, Value b) {
  return emit(ctx_of(a, b), Op::And, DType::b1, boolean(a), boolean(b));
}
Value operator||(Value a, Value b) {
  return emit(ctx_of(a, b), Op::Or, DType::b1, boolean(a), boolean(b));
}
Value operator!(Value a) { return emit(a.ctx(), Op::Not, DType::b1, boolean(a)); }

Value sqrt(Value a) { return unary(Op::Sqrt, a); }
Value rsqrt(Value a) { return unary(Op::Rsqrt, a); }
Value exp(Value a) { return unary(Op::Exp, a); }
Value log(Value a) { return unary(Op::Log, a); }
Value abs(Value a) { return unary(Op::Abs, a); }
Value sign(Value a) { return unary(Op::Sign, a); }
Value floor(Value a) { return unary(Op::Floor, a); }
Value cos(Value a) { return unary(Op::Cos, a); }
Value is_finite(Value a) {
  if (!is_float(a.type())) return a == a;
  return emit(a.ctx(), Op::IsFinite, DType::b1, a);
}
Value pow(Value a, Value b) { return binary(Op::Pow, a, b); }
Value pow(Value a, double b) { return pow(a, lit(a.ctx(), b, a.type())); }
Value pow(double a, Value b) { return pow(lit(b.ctx(), a, b.type()), b); }
Value fma(Value a, Value b, Value c) {
  DType t = meet(meet(a, b), std::max(a.rank(), b.rank()), c.type(), c.rank());
  if (!is_float(t)) t = DType::f64;
  return emit(ctx_of(a, b), Op::Fma, t, cast(a, t), cast(b, t), cast(c, t));
}
Value min(Value a, Value b) { return binary(Op::Min, a, b); }
Value max(Value a, Value b) { return binary(Op::Max, a, b); }
Value min(Value a, double b) { return min(a, lit(a.ctx(), b, a.type())); }
Value max(Value a, double b) { return max(a, lit(a.ctx(), b, a.type())); }
Value select(Value c, Value a, Value b) {
  DType t = meet(a, b);
  // A per-element choice between per-step values is per-element math: it takes the
  // parameters' compute type, as torch.where(mask, lr, 0.5) is float32 (an f64 element value
  // would run in doubles, and WGSL has none).
  Ctx* ctx = ctx_of(a, b);
  if (c.rank() == Rank::element && a.rank() != Rank::element && b.rank() != Rank::element &&
      is_float(t) && ctx)
    t = ctx->param().type();
  return emit(ctx, Op::Select, t, boolean(c), cast(a, t), cast(b, t));
}
Value select(Value c, Value a, double b) { return select(c, a, lit(a.ctx(), b, a.type())); }
Value clamp(Value x, Value lo, Value hi) { return min(max(x, lo), hi); }

Value mod(Value x, Value y) {
  DType t = meet(x, y);
  if (!is_float(t)) t = DType::f64;  // step counts: floor division, not C's truncating one
  x = cast(x, t);
  y = cast(y, t);
  return x - y * floor(x / y);
}

Value lerp(Value a, Value b, Value w) {
  DType t = meet(a, b);
  a = cast(a, t);
  b = cast(b, t);
  w = cast(w, t);
  Value d = b - a;
  // PyTorch's vectorized CPU kernel (and its CUDA one): one fma, from whichever end w is nearer.
  return select(abs(w) < 0.5, fma(w, d, a), fma(w - 1.0, d, b));
}

static Value reduce(Op op, Value a, ir::Scope scope) {
  Ctx* c = a.ctx();
  if (a.rank() != Rank::element) {
    c->fail(make_error("{} needs a per-element value, got a {} value", ir::info(op).text,
                       to_string(a.rank())));
    return c->constant(0);
  }
  if (!is_float(a.type())) a = cast(a, c->element_type());
  return emit(c, op, op == Op::AnyNonFinite ? DType::b1 : DType::f64, a, {}, {},
              static_cast<uint32_t>(scope));
}
Value sum(Value a, ir::Scope s) { return reduce(Op::Sum, a, s); }
Value sumsq(Value a, ir::Scope s) { return reduce(Op::SumSq, a, s); }
Value max_abs(Value a, ir::Scope s) { return reduce(Op::MaxAbs, a, s); }
Value any_nonfinite(Value a, ir::Scope s) { return reduce(Op::AnyNonFinite, a, s); }

const HyperSpec* Def::find_hyper(std::string_view n) const {
  for (const auto& h : hypers)
    if (h.name == n) return &h;
  return nullptr;
}
const OptionSpec* Def::find_option(std::string_view n) const {
  for (const auto& o : options)
    if (o.name == n) return &o;
  return nullptr;
}

static std::string arg_kind(const Arg& a) {
  switch (a.v.index()) {
    case 0:
      return "a number";
    case 1:
      return "a tuple";
    case 2:
      return "a bool";
    case 3:
      return "a string";
    default:
      return "a schedule";
  }
}

static std::string closest(std::string_view want, const Def& d) {
  std::vector<std::string> names;
  for (const auto& h : d.hypers) names.push_back(h.name);
  for (const auto& o : d.options) names.push_back(o.name);
  // Levenshtein distance; suggest a name at most 2 edits away.
  std::string best;
  size_t best_d = 3;
  for (const auto& n : names) {
    std::vector<size_t> row(n.size() + 1);
    for (size_t j = 0; j <= n.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= want.size(); ++i) {
      size_t prev = row[0];
      row[0] = i;
      for (size_t j = 1; j <= n.size(); ++j) {
        size_t cur = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, prev + (want[i - 1] != n[j - 1])});
        prev = cur;
      }
    }
    if (row[n.size()] < best_d) best_d = row[n.size()], best = n;
  }
  return best.empty() ? "" : fmt::format(" (did you mean '{}'?)", best);
}

std::string state_format_names() {
  return "f32, bf16, f16, bf16_sr, " + ir::quant_names() + ", 8bit, 4bit, 4bit_b256, fp8";
}

Expected<StateFormats> parse_state_formats(std::string_view text) {
  auto format = [](std::string_view f) -> std::optional<StateFormat> {
    if (f == "f32") return StateFormat{DType::f32};
    if (f == "bf16") return StateFormat{DType::bf16};
    if (f == "f16") return StateFormat{DType::f16};
    if (f == "bf16_sr") return StateFormat{DType::bf16, true};
    if (f == "8bit") return StateFormat{DType::f32, false, ir::Quant::q8, ir::Quant::q8u};
    if (f == "4bit") return StateFormat{DType::f32, false, ir::Quant::q4, ir::Quant::q4u};
    if (f == "4bit_b256")
      return StateFormat{DType::f32, false, ir::Quant::q4_b256, ir::Quant::q4u_b256};
    if (f == "fp8") f = "f8";  // (torchao's AdamWFp8, as "8bit" and "4bit" name theirs)
    if (auto q = ir::parse_quant(f)) return StateFormat{DType::f32, false, *q};
    return std::nullopt;
  };
  StateFormats out;
  size_t pos = 0;
  do {
    size_t comma = text.find(',', pos);
    std::string_view item = text.substr(pos, comma == std::string_view::npos ? comma : comma - pos);
    pos = comma == std::string_view::npos ? text.size() + 1 : comma + 1;
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    const size_t colon = item.find(':');
    std::string_view name = colon == std::string_view::npos ? "" : item.substr(0, colon);
    std::string_view f = colon == std::string_view::npos ? item : item.substr(colon + 1);
    auto t = format(f);
    if (!t)
      return make_error(
          "state_format: '{}' is not a format ({}); give FORMAT or STATE:FORMAT, "
          "separated by commas",
          item, state_format_names());
    if (colon == std::string_view::npos) {
      if (out.all) return make_error("state_format: two formats for all states ('{}')", item);
      out.all = t;
    } else if (name.empty() || !out.by_name.emplace(std::string(name), *t).second) {
      return make_error("state_format: '{}' names {}", item,
                        name.empty() ? "no state" : "a state given before");
    }
  } while (pos <= text.size());
  return out;
}

Expected<std::shared_ptr<const Bound>> bind(std::shared_ptr<const Def> def, Args args) {
  const std::string kind = def->kind == DefKind::schedule ? "schedule" : "transform";
  for (const auto& [name, arg] : args) {
    if (name == kStateFormat && def->kind == DefKind::transform && !def->find_option(name) &&
        !def->find_hyper(name)) {
      if (arg.v.index() != 3)
        return make_error("transform '{}': '{}' takes a string, got {}", def->name, name,
                          arg_kind(arg));
      auto f = parse_state_formats(std::get<3>(arg.v));
      if (!f) return make_error("transform '{}': {}", def->name, f.error().message);
      continue;
    }
    if (const HyperSpec* h = def->find_hyper(name)) {
      bool ok = false;
      if (h->arity == 1) {
        ok = arg.v.index() == 0 || (arg.v.index() == 4 && h->schedulable);
        if (arg.v.index() == 4 && !h->schedulable)
          return make_error("{} '{}': '{}' cannot be a schedule", kind, def->name, name);
      } else if (arg.v.index() == 1) {
        if (h->arity == 0 && std::get<1>(arg.v).empty())
          return make_error("{} '{}': '{}' needs at least one number", kind, def->name, name);
        if (h->arity != 0 && std::get<1>(arg.v).size() != h->arity)
          return make_error("{} '{}': '{}' takes a tuple of {} numbers, got {}", kind, def->name,
                            name, h->arity, std::get<1>(arg.v).size());
        ok = true;
      }
      if (!ok)
        return make_error("{} '{}': '{}' takes {}, got {}", kind, def->name, name,
                          h->arity == 1   ? "a number"
                          : h->arity == 0 ? "a tuple of numbers"
                                          : fmt::format("a tuple of {} numbers", h->arity),
                          arg_kind(arg));
      if (arg.v.index() == 4 && std::get<4>(arg.v)->def->kind != DefKind::schedule)
        return make_error("{} '{}': '{}' takes a schedule, but '{}' is a transform", kind,
                          def->name, name, std::get<4>(arg.v)->def->name);
    } else if (const OptionSpec* o = def->find_option(name)) {
      bool want_bool = o->default_value.index() == 0;
      if (want_bool && arg.v.index() != 2)
        return make_error("{} '{}': '{}' takes true or false, got {}", kind, def->name, name,
                          arg_kind(arg));
      if (!want_bool) {
        if (arg.v.index() != 3)
          return make_error("{} '{}': '{}' takes a string, got {}", kind, def->name, name,
                            arg_kind(arg));
        const auto& s = std::get<3>(arg.v);
        if (!o->choices.empty() &&
            std::find(o->choices.begin(), o->choices.end(), s) == o->choices.end())
          return make_error("{} '{}': '{}' must be one of {}, got \"{}\"", kind, def->name, name,
                            fmt::format("\"{}\"", fmt::join(o->choices, "\", \"")), s);
      }
    } else {
      return make_error("{} '{}' has no argument '{}'{}", kind, def->name, name,
                        closest(name, *def));
    }
  }
  for (const auto& h : def->hypers)
    if (h.defaults.empty() && !args.count(h.name))
      return make_error("{} '{}' needs '{}'", kind, def->name, h.name);
  // Every value given, and every default, as the constructor the transform follows checks it.
  for (const auto& h : def->hypers) {
    if (h.bounds.empty()) continue;
    std::vector<double> values = h.defaults;
    if (auto arg = args.find(h.name); arg != args.end()) {
      if (arg->second.v.index() == 0) values = {std::get<0>(arg->second.v)};
      if (arg->second.v.index() == 1) values = std::get<1>(arg->second.v);
      if (arg->second.v.index() == 4) values.clear();  // a schedule: checked in its own bind
    }
    for (size_t k = 0; k < values.size(); ++k) {
      const HyperBounds* b = h.bounds_of(k);
      std::string shown = h.arity == 1 ? h.name : fmt::format("{}[{}]", h.name, k);
      std::string why = ir::check_hyper({shown, 0, b->allowed, b->whole, b->rule}, values[k]);
      if (!why.empty()) return make_error("{} '{}': {}", kind, def->name, why);
    }
  }
  return std::make_shared<const Bound>(Bound{std::move(def), std::move(args)});
}

Ctx::Ctx(DTypes d) : dtypes_(d), element_type_(compute_type(d.param)) {
  uint32_t p = b_.add_buffer({"param", ir::BufferRole::param, d.param, {}});
  uint32_t g = b_.add_buffer({"grad", ir::BufferRole::grad, d.grad, {}});
  param_ = wrap(b_.emit(Op::Load, element_type_, {}, p));
  grad_ = wrap(b_.emit(Op::Load, element_type_, {}, g));
}

void Ctx::fail(Error e) {
  if (!error_) {
    if (!frames_.empty()) e.message = fmt::format("{}: {}", frame().prefix, e.message);
    error_ = std::move(e);
  }
}

void Ctx::set_grad(Value v) {
  if (v.rank() != Rank::element) return fail(make_error("grad must be set to a per-element value"));
  grad_ = cast(v, element_type_);
}

void Ctx::set_param(Value v) {
  if (v.rank() != Rank::element)
    return fail(make_error("param must be set to a per-element value"));
  param_ = cast(v, element_type_);
}

// low16 is Transformer Engine's variant: the f32 master is the bf16 parameter (its high half)
// and its 16 low bits kept as state, so it is exact at 2 bytes per parameter; the parameter is
// then the master's truncation, not its rounding.
void Ctx::use_master_weights(bool low16) {
  if (!master_key_.empty()) return fail(make_error("master_weights is given twice"));
  if (low16 && dtypes_.param != DType::bf16)
    return fail(
        make_error("master_weights(low16=true) keeps the low half of an f32 master "
                   "beside bf16 parameters; these parameters are {}",
                   to_string(dtypes_.param)));
  if (frame().bound->args.count(kStateFormat))
    return fail(make_error("master_weights{}; it takes no state_format",
                           low16 ? "(low16=true) keeps 16 bits" : " keeps its master in f32"));
  if (b_.program().at(param_.id()).op != Op::Load)
    return fail(
        make_error("master_weights must come before every transform that updates the "
                   "parameters"));
  forced_storage_ = low16 ? DType::u16 : DType::f32;
  master_low16_ = low16;
  if (low16) {
    Value lo = state("master_lo", 0.0);
    param_ = wrap(b_.emit(Op::Join16, DType::f32, {param_.id(), lo.id()}));
    master_key_ = state_key("master_lo");
    return;
  }
  Value m = state("master", std::numeric_limits<double>::quiet_NaN());
  param_ = cast(select(m != m, param_, m), element_type_);  // NaN: no master yet
  master_key_ = state_key("master");
}

Value Ctx::constant(double v) { return wrap(b_.constant(v)); }
Value Ctx::step() { return cast(wrap(b_.emit(Op::Step, DType::i64)), DType::f64); }
Value Ctx::numel() { return cast(wrap(b_.emit(Op::Numel, DType::i64)), DType::f64); }
Value Ctx::holds_codes(std::string_view name) {
  auto it = states_.find(state_key(name));
  if (it == states_.end() || it->second.scalar) {
    fail(make_error("holds_codes: '{}' is not a declared per-element state", name));
    return constant(0.0) != 0.0;
  }
  return wrap(b_.emit(Op::HoldsCodes, DType::b1, {}, it->second.index));
}

Value Ctx::hyper(std::string_view name, size_t k) {
  const Frame& f = frame();
  const HyperSpec* h = f.bound->def->find_hyper(name);
  if (!h || k >= hyper_size(name)) {
    fail(make_error("'{}' has no hyperparameter '{}'", f.bound->def->name, name));
    return constant(0);
  }
  std::string full = fmt::format("{}.{}", f.prefix, name);
  if (h->arity != 1) full += fmt::format(".{}", k);
  if (auto it = hyper_cache_.find(full); it != hyper_cache_.end()) return it->second;
  double value = h->defaults.empty() ? 0 : h->defaults[k];
  Value out;
  auto arg = f.bound->args.find(name);
  if (arg != f.bound->args.end() && arg->second.v.index() == 4) {
    const auto& sched = std::get<4>(arg->second.v);
    frames_.push_back({sched.get(), full});
    out = sched->def->value(*this);
    frames_.pop_back();
  } else {
    if (arg != f.bound->args.end())
      value =
          arg->second.v.index() == 0 ? std::get<0>(arg->second.v) : std::get<1>(arg->second.v)[k];
    uint32_t index = b_.add_hyper(full, value);
    if (const HyperBounds* bounds = h->bounds_of(k))
      b_.set_hyper_bounds(index, bounds->allowed, bounds->whole, bounds->rule, bounds->step_limit);
    out = wrap(b_.emit(Op::Hyper, DType::f64, {}, index));
  }
  hyper_cache_.emplace(full, out);
  return out;
}

size_t Ctx::hyper_size(std::string_view name) {
  const Frame& f = frame();
  const HyperSpec* h = f.bound->def->find_hyper(name);
  if (!h) return 0;
  if (h->arity != 0) return h->arity;
  auto arg = f.bound->args.find(name);
  if (arg == f.bound->args.end()) return h->defaults.size();
  return std::get<1>(arg->second.v).size();
}

double Ctx::initial(std::string_view name, size_t k) {
  const Frame& f = frame();
  const HyperSpec* h = f.bound->def->find_hyper(name);
  if (!h || k >= hyper_size(name)) {
    fail(make_error("'{}' has no hyperparameter '{}'", f.bound->def->name, name));
    return 0;
  }
  auto arg = f.bound->args.find(name);
  if (arg == f.bound->args.end()) return h->defaults.empty() ? 0 : h->defaults[k];
  if (arg->second.v.index() == 4) {
    fail(make_error("'{}' decides the program's structure, so it cannot be a schedule", name));
    return 0;
  }
  return arg->second.v.index() == 0 ? std::get<0>(arg->second.v) : std::get<1>(arg->second.v)[k];
}

void Ctx::constrain(std::string_view name, HyperBounds bounds, size_t k) {
  const Frame& f = frame();
  const HyperSpec* h = f.bound->def->find_hyper(name);
  if (!h || k >= hyper_size(name))
    return fail(make_error("'{}' has no hyperparameter '{}'", f.bound->def->name, name));
  auto arg = f.bound->args.find(name);
  if (arg != f.bound->args.end() && arg->second.v.index() == 4) return;  // a schedule's own
  std::string full = fmt::format("{}.{}", f.prefix, name);
  if (h->arity != 1) full += fmt::format(".{}", k);
  (void)hyper(name, k);  // declared, so that set_hyper finds the bounds
  auto index = b_.program().find_hyper(full);
  if (!index) return;
  ir::HyperDecl decl = b_.program().hypers[*index];
  decl.allowed = std::move(bounds.allowed);
  decl.whole = bounds.whole;
  decl.rule = std::move(bounds.rule);
  if (std::string why = ir::check_hyper(decl, decl.value); !why.empty()) return fail(Error{why});
  b_.set_hyper_bounds(*index, std::move(decl.allowed), decl.whole, std::move(decl.rule),
                      decl.step_limit);
}

bool Ctx::flag(std::string_view name) const {
  const Bound& b = *frame().bound;
  const OptionSpec* o = b.def->find_option(name);
  OPTJIT_CHECK(o && o->default_value.index() == 0);
  auto arg = b.args.find(name);
  return arg == b.args.end() ? std::get<0>(o->default_value) : std::get<2>(arg->second.v);
}

std::string Ctx::option(std::string_view name) const {
  const Bound& b = *frame().bound;
  const OptionSpec* o = b.def->find_option(name);
  OPTJIT_CHECK(o && o->default_value.index() == 1);
  auto arg = b.args.find(name);
  return arg == b.args.end() ? std::get<1>(o->default_value) : std::get<3>(arg->second.v);
}

std::optional<uint32_t> Ctx::resolve_init_hyper(const StateInit& init) {
  const Frame& f = frame();
  const HyperSpec* h = f.bound->def->find_hyper(init.hyper);
  if (!h || h->arity != 1) {
    fail(make_error("state is initialised from '{}', which is not a hyperparameter of one number",
                    init.hyper));
    return std::nullopt;
  }
  auto arg = f.bound->args.find(init.hyper);
  if (arg != f.bound->args.end() && arg->second.v.index() == 4) return std::nullopt;  // scheduled
  hyper(init.hyper);                                                                  // declares it
  return *b_.program().find_hyper(fmt::format("{}.{}", f.prefix, init.hyper));
}

// A state that starts from a scheduled hyperparameter takes the schedule's value at step 1,
// as torch's lazy state initialisation does in the first step().
Value Ctx::lazy_init(Value loaded, const StateInit& init) {
  return select(step() == 1.0, cast(hyper(init.hyper), loaded.type()), loaded);
}

// The format of this transform's per-element state `name`: its state_format, else the
// parameters' storage (DTypes::state). Each name given is recorded, to check that it was declared.
StateFormat Ctx::state_format(std::string_view name) {
  if (forced_storage_) return {*std::exchange(forced_storage_, std::nullopt)};
  const Bound& b = *frame().bound;
  auto arg = b.args.find(kStateFormat);
  if (arg == b.args.end() || b.def->find_option(kStateFormat) || b.def->find_hyper(kStateFormat))
    return {dtypes_.state};
  auto f = parse_state_formats(std::get<3>(arg->second.v));
  OPTJIT_CHECK(static_cast<bool>(f));  // checked by bind()
  std::optional<StateFormat> chosen = f->all;
  if (auto it = f->by_name.find(name); it != f->by_name.end()) {
    formatted_.insert(state_key(name));
    chosen = it->second;
  }
  if (!chosen) return {dtypes_.state};
  if (chosen->stochastic) stochastic_.insert(state_key(name));
  if (chosen->second_moment != ir::Quant::none &&
      (name == "exp_avg_sq" || name == "max_exp_avg_sq"))
    chosen->quant = chosen->second_moment;
  return *chosen;
}

// x rounded as bf16_sr stores it: the key is state_seed * 2^32 + step (exact in f64 for seeds
// below 2^20 and steps below 2^32), the stream the buffer's index.
uint32_t Ctx::seed_hyper() {
  const bool declared = b_.program().find_hyper("state_seed").has_value();
  const uint32_t h = b_.add_hyper("state_seed", 0);
  if (!declared)
    b_.set_hyper_bounds(h, {ir::Interval{0, 1048575, false, false}}, true,
                        "the stochastic rounding seed");
  return h;
}

Value Ctx::stochastic_round(Value x, uint32_t buffer) {
  Value seed = wrap(b_.emit(Op::Hyper, DType::f64, {}, seed_hyper()));
  Value key = seed * 4294967296.0 + step();
  Value first = cast(wrap(b_.emit(Op::First, DType::i64)), DType::f64);
  return wrap(b_.emit(Op::SRound, x.type(), {x.id(), key.id(), first.id()}, buffer));
}

// After a transform's apply(): every state its state_format names is one it declared.
void Ctx::check_state_formats() {
  const Bound& b = *frame().bound;
  auto arg = b.args.find(kStateFormat);
  if (arg == b.args.end() || b.def->find_option(kStateFormat) || b.def->find_hyper(kStateFormat))
    return;
  auto f = parse_state_formats(std::get<3>(arg->second.v));
  std::string have;
  for (const auto& [key, slot] : states_)
    if (key.rfind(frame().prefix + "/", 0) == 0 && !slot.scalar)
      have += (have.empty() ? "" : ", ") + key.substr(frame().prefix.size() + 1);
  for (const auto& [name, t] : f->by_name) {
    (void)t;
    if (formatted_.count(state_key(name))) continue;
    auto it = states_.find(state_key(name));
    fail(make_error("state_format: '{}' {} (its per-element states: {})", name,
                    it != states_.end() ? "is a per-group scalar, kept in f64"
                                        : "is not a state of this transform",
                    have.empty() ? "none" : have));
    return;
  }
}

std::string Ctx::state_key(std::string_view name) const {
  return fmt::format("{}/{}", frame().prefix, name);
}

Value Ctx::declare(std::string_view name, StateInit init, bool scalar, std::optional<Value> first) {
  std::string key = state_key(name);
  if (auto it = states_.find(key); it != states_.end()) {
    if (it->second.scalar != scalar)
      fail(make_error("'{}' is a {} state", name, it->second.scalar ? "scalar" : "per-element"));
    else if (first)
      fail(make_error("state '{}' is already declared", name));
    return it->second.current;
  }
  if (first && scalar && first->rank() != Rank::scalar) {
    fail(
        make_error("scalar state '{}' must start from a per-step value (a per-element one "
                   "has a value per element)",
                   name));
    first.reset();
  }
  // State keeps torch's state_dict name (exp_avg, ...) unless another transform has it already.
  std::string full(name);
  const ir::Program& p = b_.program();
  if (p.find_buffer(full) || p.find_state(full) || full == "step")
    full = fmt::format("{}.{}", frame().prefix, name);
  ir::Init i{init.value, std::nullopt};
  if (!init.hyper.empty()) i.hyper = resolve_init_hyper(init);
  uint32_t idx;
  Value v;
  if (scalar) {
    idx = b_.add_state({full, DType::f64, i});
    v = wrap(b_.emit(Op::SLoad, DType::f64, {}, idx));
  } else {
    const StateFormat f = state_format(name);
    ir::BufferDecl d{full, ir::BufferRole::state, f.storage, i};
    d.quant = f.quant;
    idx = b_.add_buffer(d);
    if (f.quant != ir::Quant::none) {
      ir::BufferDecl scales{full + ".absmax", ir::BufferRole::state, DType::f32, {}};
      scales.per_block = true;
      b_.add_buffer(scales);
    }
    v = wrap(b_.emit(Op::Load, element_type_, {}, idx));
  }
  if (!init.hyper.empty() && !i.hyper) v = lazy_init(v, init);
  if (first) v = select(step() == 1.0, cast(*first, v.type()), v);
  states_.emplace(key, StateSlot{idx, v, scalar});
  return v;
}

void Ctx::assign(std::string_view name, Value v, bool scalar) {
  auto it = states_.find(state_key(name));
  const char* kind = scalar ? "scalar" : "per-element";
  if (it == states_.end() || it->second.scalar != scalar)
    return fail(make_error("'{}' is not a declared {} state", name, kind));
  if (v.rank() != (scalar ? Rank::scalar : Rank::element))
    return fail(make_error("{} state '{}' must be set to a {} value", kind, name,
                           scalar ? "per-step" : "per-element"));
  it->second.current = cast(v, scalar ? DType::f64 : element_type_);
}

Value Ctx::state(std::string_view name, StateInit init) { return declare(name, init, false); }
void Ctx::set_state(std::string_view name, Value v) { assign(name, v, false); }
Value Ctx::scalar_state(std::string_view name, StateInit init) { return declare(name, init, true); }
Value Ctx::state_from(std::string_view name, Value first) {
  return declare(name, {}, false, first);
}
Value Ctx::scalar_state_from(std::string_view name, Value first) {
  return declare(name, {}, true, first);
}
void Ctx::set_scalar_state(std::string_view name, Value v) { assign(name, v, true); }

void Ctx::skip_step_if(Value cond) {
  if (cond.rank() != Rank::scalar)
    return fail(make_error("skip_step_if needs a per-step (scalar) condition"));
  skips_.push_back(boolean(cond).id());
}

Expected<ir::Program> lower(const Pipeline& pipeline, DTypes dtypes) {
  if (!is_float(dtypes.param) || !is_float(dtypes.grad) || !is_float(dtypes.state))
    return make_error("parameters, gradients and state must have a float type");
  if (pipeline.empty()) return make_error("the pipeline has no transforms");
  Ctx c(dtypes);
  ValueId param0 = c.param_.id();
  std::set<std::string, std::less<>> custom_hypers;
  for (const auto& t : pipeline) {
    if (t->def->kind != DefKind::transform)
      return make_error("'{}' is a schedule; use it as a hyperparameter, e.g. lr={}(...)",
                        t->def->name, t->def->name);
    int n = ++c.instance_count_[t->def->name];
    std::string prefix = n == 1 ? t->def->name : fmt::format("{}#{}", t->def->name, n);
    // A custom transform's own hyperparameters, which its user may bound (a built-in's bounds
    // are its peer's): named in a refused state_format's advice.
    if (!find_builtin(t->def->name))
      for (const HyperSpec& h : t->def->hypers) custom_hypers.insert(prefix + "." + h.name);
    c.frames_.push_back({t.get(), prefix});
    t->def->apply(c);
    if (!c.error_) c.check_state_formats();
    c.frames_.pop_back();
    if (c.error_) return *c.error_;
  }
  for (ValueId s : c.skips_) c.b_.emit(Op::SkipIf, DType::b1, {s});
  if (!c.master_key_.empty()) {
    Value& kept = c.states_.at(c.master_key_).current;
    if (c.master_low16_) {  // the master's low half as state, its high half the parameter
      const Value master = cast(c.param_, DType::f32);
      kept = c.wrap(c.b_.emit(Op::Lo16, DType::f32, {master.id()}));
      c.param_ = c.wrap(c.b_.emit(Op::Hi16, DType::f32, {master.id()}));
    } else {
      kept = c.param_;
    }
  }
  for (const auto& [key, slot] : c.states_) {
    const ir::Inst& cur = c.b_.program().at(slot.current.id());
    bool unchanged = cur.op == (slot.scalar ? Op::SLoad : Op::Load) && cur.attr == slot.index;
    if (unchanged) continue;
    Value v = slot.current;
    if (c.stochastic_.count(key)) v = c.stochastic_round(v, slot.index);
    c.b_.emit(slot.scalar ? Op::SStore : Op::Store, DType::b1, {v.id()}, slot.index);
  }
  if (dtypes.param_stochastic) c.seed_hyper();
  if (c.param_.id() != param0) {
    const uint32_t pb = c.b_.program().param_buffer();
    Value v = c.param_;
    if (dtypes.param_stochastic && dtypes.param == DType::bf16) v = c.stochastic_round(v, pb);
    c.b_.emit(Op::Store, DType::b1, {v.id()}, pb);
  }
  ir::Program p = std::move(c.b_).finish();
  // verify() includes check_nonnegative_states; a state_format it refuses is the user's.
  if (Status s = ir::verify(p); !s) {
    if (auto n = ir::find_negative_state(p)) {
      const auto boundable = [&](const ir::HyperDecl& h) {
        std::string_view name = h.name;  // a tuple's element: "t.betas.0"
        const size_t dot = name.find_last_of('.');
        if (dot != std::string_view::npos && dot + 1 < name.size() &&
            name.find_first_not_of("0123456789", dot + 1) == std::string_view::npos)
          name = name.substr(0, dot);
        return custom_hypers.count(name) > 0;
      };
      return Error{"state_format: " + ir::negative_state_error(p, *n, boundable).message};
    }
    return Error{"internal: lowered IR does not verify: " + s.error().message};
  }
  return p;
}

}  // namespace optjit::dsl
