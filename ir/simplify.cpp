// Algorithm: one forward walk that re-emits each instruction into a fresh hash-consing
// Builder (so CSE is free), after (1) folding ops whose operands are all constants and
// (2) trying the rewrite rules in kRules, which only ever return an existing operand.
// Then dead code elimination: a backward walk from the effects marks what is used, and a
// forward walk keeps only that (rewrites orphan operands, so DCE runs after them).
#include "ir/simplify.h"

#include <bit>
#include <cmath>
#include <functional>
#include <vector>

#include "ir/eval.h"

namespace optjit::ir {

namespace {

struct View {
  const Program& p;  // the program being built
  bool is_const(ValueId v, double c) const {
    const Inst& i = p.at(v);
    return i.op == Op::Const && std::bit_cast<uint64_t>(i.imm) == std::bit_cast<uint64_t>(c);
  }
  bool is_const(ValueId v) const { return p.at(v).op == Op::Const; }
};

// A rule sees the instruction (operands already rewritten) and returns the value that can
// replace it, or kNoValue. Every rule is exact in IEEE arithmetic, including NaN and -0.
struct Rule {
  const char* text;
  std::function<ValueId(const View&, const Inst&)> apply;
};

const Rule kRules[] = {
    {"x * 1 -> x",
     [](const View& v, const Inst& i) {
       return i.op == Op::Mul && v.is_const(i.args[1], 1.0) ? i.args[0] : kNoValue;
     }},
    {"1 * x -> x",
     [](const View& v, const Inst& i) {
       return i.op == Op::Mul && v.is_const(i.args[0], 1.0) ? i.args[1] : kNoValue;
     }},
    {"x / 1 -> x",
     [](const View& v, const Inst& i) {
       return i.op == Op::Div && v.is_const(i.args[1], 1.0) ? i.args[0] : kNoValue;
     }},
    {"x - 0 -> x",
     [](const View& v, const Inst& i) {
       return i.op == Op::Sub && v.is_const(i.args[1], 0.0) ? i.args[0] : kNoValue;
     }},
    {"x + -0 -> x",
     [](const View& v, const Inst& i) {
       return i.op == Op::Add && v.is_const(i.args[1], -0.0) ? i.args[0] : kNoValue;
     }},
    {"-(-x) -> x",
     [](const View& v, const Inst& i) {
       return i.op == Op::Neg && v.p.at(i.args[0]).op == Op::Neg ? v.p.at(i.args[0]).args[0]
                                                                 : kNoValue;
     }},
    {"select(true, a, b) -> a",
     [](const View& v, const Inst& i) {
       return i.op == Op::Select && v.is_const(i.args[0], 1.0) ? i.args[1] : kNoValue;
     }},
    {"select(false, a, b) -> b",
     [](const View& v, const Inst& i) {
       return i.op == Op::Select && v.is_const(i.args[0], 0.0) ? i.args[2] : kNoValue;
     }},
    {"select(c, a, a) -> a",
     [](const View&, const Inst& i) {
       return i.op == Op::Select && i.args[1] == i.args[2] ? i.args[1] : kNoValue;
     }},
    {"cast to its own type -> x",
     [](const View& v, const Inst& i) {
       return i.op == Op::Cast && v.p.at(i.args[0]).type == i.type ? i.args[0] : kNoValue;
     }},
};

bool foldable(const Inst& i) {
  if (i.op == Op::SRound) return false;  // depends on the tensor and element it runs on
  OpKind k = info(i.op).kind;
  return k == OpKind::math || k == OpKind::logic || k == OpKind::compare || k == OpKind::select ||
         k == OpKind::cast;
}

}  // namespace

Program dce(const Program& p) {
  std::vector<bool> live(p.insts.size(), false);
  for (size_t n = p.insts.size(); n-- > 0;) {
    const Inst& i = p.insts[n];
    if (!is_pure(i.op)) live[n] = true;
    if (!live[n]) continue;
    for (int k = 0; k < info(i.op).arity; ++k) live[index(i.args[k])] = true;
  }
  Program out{p.hypers, p.buffers, p.states, {}};
  std::vector<ValueId> map(p.insts.size(), kNoValue);
  for (size_t n = 0; n < p.insts.size(); ++n) {
    if (!live[n]) continue;
    Inst i = p.insts[n];
    for (int k = 0; k < info(i.op).arity; ++k) i.args[k] = map[index(i.args[k])];
    map[n] = static_cast<ValueId>(out.insts.size());
    out.insts.push_back(i);
  }
  return out;
}

Program simplify(const Program& p) {
  Builder b(Program{p.hypers, p.buffers, p.states, {}});
  std::vector<ValueId> map(p.insts.size(), kNoValue);
  for (size_t n = 0; n < p.insts.size(); ++n) {
    Inst i = p.insts[n];
    const int arity = info(i.op).arity;
    for (int k = 0; k < arity; ++k) i.args[k] = map[index(i.args[k])];
    View view{b.program()};
    if (foldable(i)) {
      bool all_const = true;
      double x[3] = {0, 0, 0};
      for (int k = 0; k < arity; ++k) {
        all_const &= view.is_const(i.args[k]);
        if (all_const) x[k] = b.program().at(i.args[k]).imm;
      }
      if (all_const) {
        // An f32 (or half) fma rounds once in f32: f64's fma, rounded again, could differ.
        double r = i.op == Op::Fma && i.type != DType::f64
                       ? std::fma(static_cast<float>(x[0]), static_cast<float>(x[1]),
                                  static_cast<float>(x[2]))
                       : eval_op(i.op, i.type, x[0], x[1], x[2]);
        map[n] = b.constant(round_to(i.type, r), i.type);
        continue;
      }
      ValueId replaced = kNoValue;
      for (const Rule& rule : kRules)
        if ((replaced = rule.apply(view, i)) != kNoValue) break;
      if (replaced != kNoValue) {
        map[n] = replaced;
        continue;
      }
    }
    map[n] = b.emit(i.op, i.type, i.args, i.attr, i.imm);
  }
  return dce(std::move(b).finish());
}

}  // namespace optjit::ir
