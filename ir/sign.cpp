// Algorithm: one forward walk; each instruction's range from its operands' ranges (interval
// arithmetic), and a factor v = k * base carried through the ops that scale a value, so that a
// product of two values with one base (a square) is known to have the sign of their k's.
#include "ir/sign.h"

#include <algorithm>
#include <cmath>

namespace optjit::ir {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr Range kAll{};
constexpr Range kNonnegative{0, kInf};
constexpr Range kBool{0, 1};

bool crosses_zero(const Range& r) { return r.lo < 0 && r.hi > 0; }
Range sign_only(const Range& r) { return {r.lo < 0 ? -kInf : 0, r.hi > 0 ? kInf : 0}; }
Range clean(Range r) {  // inf - inf and the like: no bound
  if (std::isnan(r.lo)) r.lo = -kInf;
  if (std::isnan(r.hi)) r.hi = kInf;
  return r;
}
Range hull(const Range& a, const Range& b) { return {std::min(a.lo, b.lo), std::max(a.hi, b.hi)}; }
// Both hold (a bound an ulp off on one side leaves the other).
Range meet(const Range& a, const Range& b) {
  const Range m{std::max(a.lo, b.lo), std::min(a.hi, b.hi)};
  return m.lo <= m.hi ? m : a;
}
Range negate(const Range& a) { return {-a.hi, -a.lo}; }
Range add(const Range& a, const Range& b) { return clean({a.lo + b.lo, a.hi + b.hi}); }
double times0(double x, double y) { return x == 0 || y == 0 ? 0 : x * y; }  // 0 * inf = 0
Range mul(const Range& a, const Range& b) {
  const double c[] = {times0(a.lo, b.lo), times0(a.lo, b.hi), times0(a.hi, b.lo),
                      times0(a.hi, b.hi)};
  return {*std::min_element(std::begin(c), std::end(c)),
          *std::max_element(std::begin(c), std::end(c))};
}
Range reciprocal(const Range& b) {
  if (b.lo > 0 || b.hi < 0) return {1 / b.hi, 1 / b.lo};
  if (b.lo >= 0) return {1 / b.hi, kInf};  // [0, hi]: 1/0 is inf
  if (b.hi <= 0) return {-kInf, 1 / b.lo};
  return kAll;
}
Range div(const Range& a, const Range& b) { return mul(a, reciprocal(b)); }
Range pow_range(const Range& a, const Range& b) {  // a >= 0: monotone in each, so the corners
  const double c[] = {std::pow(a.lo, b.lo), std::pow(a.lo, b.hi), std::pow(a.hi, b.lo),
                      std::pow(a.hi, b.hi)};
  return clean({*std::min_element(std::begin(c), std::end(c)),
                *std::max_element(std::begin(c), std::end(c))});
}

ValueFacts only(Range r) { return {r, {1, 1}, kNoValue}; }
ValueFacts negated(ValueFacts f) {
  f.range = negate(f.range);
  f.k = negate(f.k);
  return f;
}
// The same base, k known only by its sign (sign(k * x) = (sign(k) / |x|) * x, and the like).
ValueFacts same_sign(const ValueFacts& a, Range r) { return {r, sign_only(a.k), a.base}; }

ValueFacts plus(const ValueFacts& a, const ValueFacts& b) {
  const Range r = add(a.range, b.range);
  if (a.base == b.base) return {r, add(a.k, b.k), a.base};  // ka * x + kb * x = (ka + kb) * x
  return only(r);
}

ValueFacts product(const ValueFacts& a, const ValueFacts& b, bool divide) {
  auto op = [&](const Range& x, const Range& y) { return divide ? div(x, y) : mul(x, y); };
  const Range r = op(a.range, b.range);
  if (a.base == b.base)  // ka * x * kb * x = ka * kb * x^2; ka * x / (kb * x) = ka / kb
    return only(meet(r, divide ? op(a.k, b.k) : mul(op(a.k, b.k), kNonnegative)));
  if (!crosses_zero(b.range)) return {r, op(a.k, b.range), a.base};
  if (!crosses_zero(a.range))  // a * kb * x; a / (kb * x) = (a / (kb * x^2)) * x
    return {r, divide ? sign_only(op(a.range, b.k)) : op(a.range, b.k), b.base};
  return only(r);
}

Range hyper_range(const HyperDecl& h) {
  if (h.allowed.empty()) return kAll;
  Range r{kInf, -kInf};
  for (const Interval& i : h.allowed) r = hull(r, {i.lo, i.hi});
  return r;
}

// Whether an exponent is an even whole number, so that a^b >= 0 for any a.
bool even_whole(const Program& p, ValueId b) {
  const Inst& e = p.at(b);
  if (e.op == Op::Cast) return even_whole(p, e.args[0]);
  return e.op == Op::Const && std::fmod(e.imm, 2.0) == 0.0;
}

ValueFacts facts(const Program& p, const std::vector<ValueFacts>& f, const Inst& in,
                 const std::vector<bool>& nonnegative_loads) {
  auto arg = [&](int k) -> const ValueFacts& { return f[index(in.args[k])]; };
  auto r = [&](int k) -> const Range& { return arg(k).range; };
  switch (in.op) {
    case Op::Const:
      return only(std::isnan(in.imm) ? kAll : Range{in.imm, in.imm});
    case Op::Hyper:
      return only(hyper_range(p.hypers[in.attr]));
    case Op::Step:
      return only({1, kInf});
    case Op::Numel:
    case Op::First:
    case Op::SumSq:
    case Op::MaxAbs:
      return only(kNonnegative);
    case Op::Lo16:
      return only({0, 65535});
    case Op::Load:
      return only(in.attr < nonnegative_loads.size() && nonnegative_loads[in.attr] ? kNonnegative
                                                                                   : kAll);
    case Op::Neg:
      return negated(arg(0));
    case Op::Abs: {
      const Range a = r(0);
      if (a.lo >= 0) return only(a);
      if (a.hi <= 0) return only(negate(a));
      return only({0, std::max(-a.lo, a.hi)});
    }
    case Op::Sqrt:
      return only({std::sqrt(std::max(r(0).lo, 0.0)), std::sqrt(std::max(r(0).hi, 0.0))});
    case Op::Rsqrt:
      return only({1 / std::sqrt(std::max(r(0).hi, 0.0)), 1 / std::sqrt(std::max(r(0).lo, 0.0))});
    case Op::Exp:
      return only({std::exp(r(0).lo), std::exp(r(0).hi)});
    case Op::Log:
      if (r(0).hi <= 0) return only(kAll);
      return only({r(0).lo > 0 ? std::log(r(0).lo) : -kInf, std::log(r(0).hi)});
    case Op::Floor:
      return only({std::floor(r(0).lo), std::floor(r(0).hi)});
    case Op::Cos:
      return only({-1, 1});
    case Op::Sign:
      return same_sign(arg(0), {r(0).lo < 0   ? -1.0
                                : r(0).lo > 0 ? 1.0
                                              : 0.0,
                                r(0).hi > 0   ? 1.0
                                : r(0).hi < 0 ? -1.0
                                              : 0.0});
    // The bf16 truncation, a join of its high half, a stochastic rounding: a's sign, and about
    // a's magnitude (a rounding may pass a's bound by a step).
    case Op::Hi16:
    case Op::Join16:
    case Op::SRound:
      return same_sign(arg(0), sign_only(r(0)));
    case Op::Cast:
      return p.at(in.args[0]).type == DType::b1 ? only(kBool) : arg(0);
    case Op::Sum:
      return only(sign_only(r(0)));
    case Op::Add:
      return plus(arg(0), arg(1));
    case Op::Sub:
      return plus(arg(0), negated(arg(1)));
    case Op::Mul:
      return product(arg(0), arg(1), false);
    case Op::Div:
      return product(arg(0), arg(1), true);
    case Op::Fma:
      return plus(product(arg(0), arg(1), false), arg(2));
    case Op::Pow:
      if (r(0).lo >= 0) return only(pow_range(r(0), r(1)));
      return only(even_whole(p, in.args[1]) ? kNonnegative : kAll);
    case Op::Min:
      return only({std::min(r(0).lo, r(1).lo), std::min(r(0).hi, r(1).hi)});
    case Op::Max:
      return only({std::max(r(0).lo, r(1).lo), std::max(r(0).hi, r(1).hi)});
    case Op::Select: {
      const Range h = hull(r(1), r(2));
      if (arg(1).base == arg(2).base) return {h, hull(arg(1).k, arg(2).k), arg(1).base};
      return only(h);
    }
    default:
      break;
  }
  if (has_result(in.op) && in.type == DType::b1) return only(kBool);
  return only(kAll);  // scalar states, uniforms
}

}  // namespace

std::vector<ValueFacts> value_facts(const Program& p, const std::vector<bool>& nonnegative_loads) {
  std::vector<ValueFacts> f(p.insts.size());
  for (size_t n = 0; n < p.insts.size(); ++n) {
    const Inst& in = p.insts[n];
    if (!has_result(in.op)) continue;
    ValueFacts v = facts(p, f, in, nonnegative_loads);
    // A factor is kept only where it says more than the range: for a value of either sign,
    // with a k of one sign. Else the value is its own base.
    if (v.base == kNoValue || crosses_zero(v.k) || !crosses_zero(v.range))
      v.k = {1, 1}, v.base = ValueId(static_cast<uint32_t>(n));
    f[n] = v;
  }
  return f;
}

Status check_nonnegative_states(const Program& p) {
  std::vector<bool> unsigned_buffer(p.buffers.size());
  bool any = false;
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    unsigned_buffer[b] = unsigned_map(p.buffers[b].quant);
    any |= unsigned_buffer[b];
  }
  if (!any) return Status::Ok();
  const auto refuse = [](const BufferDecl& d, const std::string& why) {
    return make_error(
        "state '{}' {}, and {} holds only values >= 0 (a second moment's format): store it in "
        "a signed format (q8, q4, f8); where a custom transform's state cannot be negative, "
        "bound the hyperparameters it is made of (beta=0.9 in [0, 1))",
        d.name, why, to_string(d.quant));
  };
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    if (!unsigned_buffer[b]) continue;
    const BufferDecl& d = p.buffers[b];
    if (d.init.hyper ? hyper_range(p.hypers[*d.init.hyper]).lo < 0 : d.init.value < 0)
      return refuse(d, d.init.hyper ? fmt::format("may start negative (from '{}')",
                                                  p.hypers[*d.init.hyper].name)
                                    : fmt::format("starts negative ({})", d.init.value));
  }
  const std::vector<ValueFacts> f = value_facts(p, unsigned_buffer);
  for (const Inst& in : p.insts)
    if (in.op == Op::Store && unsigned_buffer[in.attr] && f[index(in.args[0])].range.lo < 0)
      return refuse(p.buffers[in.attr],
                    fmt::format("may become negative (its new value, %{})", index(in.args[0])));
  return Status::Ok();
}

}  // namespace optjit::ir
