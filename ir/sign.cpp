// Algorithm: one forward walk; each instruction's range from its operands' ranges (interval
// arithmetic), and a factor v = k * base carried through the ops that scale a value, so that a
// product of two values with one base (a square) is known to have the sign of their k's.
#include "ir/sign.h"

#include <fmt/ranges.h>

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
  while (p.at(b).op == Op::Cast) b = p.at(b).args[0];  // a loop: chains of casts may be long
  const Inst& e = p.at(b);
  return e.op == Op::Const && std::fmod(e.imm, 2.0) == 0.0;
}

ValueFacts facts(const Program& p, const std::vector<ValueFacts>& f, const Inst& in,
                 const std::vector<bool>& nonnegative_loads, const std::vector<Range>& hypers) {
  auto arg = [&](int k) -> const ValueFacts& { return f[index(in.args[k])]; };
  auto r = [&](int k) -> const Range& { return arg(k).range; };
  switch (in.op) {
    case Op::Const:
      return only(std::isnan(in.imm) ? kAll : Range{in.imm, in.imm});
    case Op::Hyper:
      return only(hypers[in.attr]);
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

std::vector<ValueFacts> value_facts(const Program& p, const std::vector<bool>& nonnegative_loads,
                                    const std::vector<Range>* hyper_ranges) {
  std::vector<Range> declared;
  if (!hyper_ranges) {
    for (const HyperDecl& h : p.hypers) declared.push_back(hyper_range(h));
    hyper_ranges = &declared;
  }
  std::vector<ValueFacts> f(p.insts.size());
  for (size_t n = 0; n < p.insts.size(); ++n) {
    const Inst& in = p.insts[n];
    if (!has_result(in.op)) continue;
    ValueFacts v = facts(p, f, in, nonnegative_loads, *hyper_ranges);
    // A factor is kept only where it says more than the range: for a value of either sign,
    // with a k of one sign. Else the value is its own base.
    if (v.base == kNoValue || crosses_zero(v.k) || !crosses_zero(v.range))
      v.k = {1, 1}, v.base = ValueId(static_cast<uint32_t>(n));
    f[n] = v;
  }
  return f;
}

namespace {

std::vector<bool> unsigned_buffers(const Program& p) {
  std::vector<bool> u(p.buffers.size());
  for (size_t b = 0; b < p.buffers.size(); ++b) u[b] = unsigned_map(p.buffers[b].quant);
  return u;
}

// The hyperparameters value v is made of.
std::vector<uint32_t> hypers_of(const Program& p, ValueId v) {
  std::vector<char> seen(p.insts.size(), 0);
  std::vector<ValueId> pending{v};
  std::vector<uint32_t> out;
  while (!pending.empty()) {
    const ValueId x = pending.back();
    pending.pop_back();
    if (seen[index(x)]) continue;
    seen[index(x)] = 1;
    const Inst& in = p.at(x);
    if (in.op == Op::Hyper) out.push_back(in.attr);
    for (int a = 0; a < info(in.op).arity; ++a) pending.push_back(in.args[a]);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// Which hyperparameters make a stored value possibly negative: the fewest of those it is made
// of that, held at their given values, let the proof through (one at a time first, then all
// of them, dropping each that is not needed). Empty where even all of them so held do not
// (the value has the sign of its data).
std::vector<uint32_t> blame(const Program& p, const std::vector<bool>& nonnegative_loads,
                            ValueId stored) {
  std::vector<Range> ranges;
  for (const HyperDecl& h : p.hypers) ranges.push_back(hyper_range(h));
  auto proved_with = [&](const std::vector<uint32_t>& held) {
    std::vector<Range> r = ranges;
    for (uint32_t h : held) r[h] = {p.hypers[h].value, p.hypers[h].value};
    return value_facts(p, nonnegative_loads, &r)[index(stored)].range.lo >= 0;
  };
  std::vector<uint32_t> free;  // the value's hyperparameters whose allowed values are wider
  for (uint32_t h : hypers_of(p, stored))
    if (!(ranges[h] == Range{p.hypers[h].value, p.hypers[h].value})) free.push_back(h);
  for (uint32_t h : free)
    if (proved_with({h})) return {h};
  if (free.empty() || !proved_with(free)) return {};
  std::vector<uint32_t> held = free;
  for (size_t i = held.size(); i-- > 0;) {
    std::vector<uint32_t> fewer = held;
    fewer.erase(fewer.begin() + static_cast<std::ptrdiff_t>(i));
    if (proved_with(fewer)) held = std::move(fewer);
  }
  return held;
}

}  // namespace

std::optional<NegativeState> find_negative_state(const Program& p) {
  const std::vector<bool> unsigned_buffer = unsigned_buffers(p);
  if (std::find(unsigned_buffer.begin(), unsigned_buffer.end(), true) == unsigned_buffer.end())
    return std::nullopt;
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    if (!unsigned_buffer[b]) continue;
    const BufferDecl& d = p.buffers[b];
    if (d.init.hyper ? hyper_range(p.hypers[*d.init.hyper]).lo < 0 : d.init.value < 0) {
      NegativeState n{static_cast<uint32_t>(b), kNoValue, {}};
      if (d.init.hyper) n.hypers.push_back(*d.init.hyper);
      return n;
    }
  }
  const std::vector<ValueFacts> f = value_facts(p, unsigned_buffer);
  for (const Inst& in : p.insts)
    if (in.op == Op::Store && unsigned_buffer[in.attr] && f[index(in.args[0])].range.lo < 0)
      return NegativeState{in.attr, in.args[0], blame(p, unsigned_buffer, in.args[0])};
  return std::nullopt;
}

Error negative_state_error(const Program& p, const NegativeState& n,
                           const std::function<bool(const HyperDecl&)>& boundable) {
  const BufferDecl& d = p.buffers[n.buffer];
  std::vector<std::string> names, where, defaults;
  bool can_bound = !n.hypers.empty();
  for (uint32_t h : n.hypers) {
    const HyperDecl& hd = p.hypers[h];
    names.push_back(fmt::format("'{}'", hd.name));
    where.push_back(hd.allowed.empty() ? fmt::format("'{}' (declared without bounds)", hd.name)
                                       : fmt::format("'{}' in {}", hd.name, to_string(hd.allowed)));
    defaults.push_back(fmt::format("{}", hd.value));
    can_bound &= boundable(hd);
  }
  std::string why;
  if (n.value == kNoValue)
    why = d.init.hyper ? fmt::format("may start negative (from {})", where[0])
                       : fmt::format("starts negative ({})", d.init.value);
  else if (n.hypers.empty())
    why = fmt::format(
        "may become negative (its new value, %{}) whatever the hyperparameters (as a first "
        "moment or a momentum may)",
        index(n.value));
  else
    why = fmt::format(
        "may become negative (its new value, %{}) for some allowed values of {} (at {}, {}, it "
        "cannot)",
        index(n.value), fmt::join(where, " and "),
        names.size() == 1 ? "its given value" : "their given values", fmt::join(defaults, " and "));
  std::string fix = "store it in a signed format (q8, q4, f8)";
  if (can_bound)
    fix += fmt::format(
        ", or narrow what {} may be where {} declared (name=default in [lo, hi], as "
        "beta=0.9 in [0, 1))",
        fmt::join(names, " and "), names.size() == 1 ? "it is" : "they are");
  return Error{
      fmt::format("state '{}' {}, and {} holds only values >= 0 (a second moment's "
                  "format): {}",
                  d.name, why, to_string(d.quant), fix)};
}

Status check_nonnegative_states(const Program& p) {
  if (auto n = find_negative_state(p))
    return negative_state_error(p, *n, [](const HyperDecl&) { return true; });
  return Status::Ok();
}

}  // namespace optjit::ir
