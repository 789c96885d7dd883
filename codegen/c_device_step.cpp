// The device-step kernels: the plan's host segments, the combining of reduction partials and the
// commit, as CUDA C or OpenCL C, so a whole step runs without the host (see DeviceStepLayout).
//
// They compute what runtime::HostProgram computes, the same way: every value in float64, only
// casts round, reductions combined within a tensor and then across tensors in the fixed lane
// order of codegen::kCombineLanes, one work-group per combine. Values of earlier segments and
// reductions are read from `vals`; a segment's own values are locals, and each is also stored for
// later segments (scalars by the thread of their group, tensor values by the thread of their
// tensor).
#include <map>
#include <set>

#include "codegen/c_lang.h"
#include "codegen/kernel_abi.h"
#include "ir/reductions.h"

namespace optjit::codegen {

namespace {

using detail::Lang;
using detail::literal;
using ir::Op;
using ir::OpKind;
using ir::ValueId;

class StepWriter {
 public:
  StepWriter(const plan::Plan& plan, const Lang& L)
      : plan_(plan), p_(plan.program), L_(L), layout_(device_step_layout(plan)) {
    slot_.assign(p_.insts.size(), 0);
    size_t ns = 0, nt = 0;
    for (size_t i = 0; i < p_.insts.size(); ++i) {
      if (p_.insts[i].rank == Rank::scalar) slot_[i] = static_cast<uint32_t>(ns++);
      if (p_.insts[i].rank == Rank::tensor) slot_[i] = static_cast<uint32_t>(nt++);
    }
    // The last segment that reads each value: a value is stored for later only if one does.
    last_use_.assign(p_.insts.size(), 0);
    for (size_t k = 0; k < plan_.host.size(); ++k) {
      for (ValueId v : plan_.host[k])
        for (int a = 0; a < ir::info(p_.at(v).op).arity; ++a)
          last_use_[index(p_.at(v).args[a])] = k;
      if (k < plan_.passes.size())
        for (ValueId u : plan_.passes[k].uniforms) last_use_[index(u)] = k;
    }
  }

  Expected<std::string> write() {
    std::string s = helpers();
    for (size_t k = 0; k <= plan_.passes.size(); ++k) {
      auto seg = segment(k);
      if (!seg) return seg.error();
      s += "\n" + *seg;
      if (k == plan_.passes.size()) break;
      if (layout_.combines[k]) s += "\n" + combine(k) + "\n" + shard_out(k) + "\n" + shard_in(k);
      if (layout_.folds[k]) s += "\n" + fold(k);
    }
    s += "\n" + commit();
    return s;
  }

 private:
  std::string G(const char* type, const char* name) const {  // a global pointer parameter
    return fmt::format("{}{}* {}", L_.global(), type, name);
  }
  std::string device_fn() const { return L_.device_fn(); }

  // Rounding a double to a narrower float format exactly as ir::round_to does (the host's
  // round_binary): scaling by a power of two is exact, so one rint rounds correctly.
  std::string helpers() const {
    return fmt::format(
        "{0}double optjit_round_binary(double x, int mant, int emin, double max_finite) {{\n"
        "  if (!isfinite(x) || x == 0.0) return x;\n"
        "  int e;\n"
        "  frexp(x, &e);\n"
        "  const int ex = e - 1 > emin ? e - 1 : emin;\n"
        "  const double q = ldexp(1.0, ex - mant);\n"
        "  const double r = rint(x / q) * q;\n"
        "  const double limit = max_finite + ldexp(1.0, ilogb(max_finite) - mant - 1);\n"
        "  if (fabs(r) > max_finite || fabs(x) >= limit)\n"
        "    return copysign(OPTJIT_BITS_F64(0x7ff0000000000000ul), x);\n"
        "  return r;\n"
        "}}\n",
        device_fn());
  }

  std::string val_slot(ValueId v) const {
    const ir::Inst& in = p_.at(v);
    if (in.rank == Rank::scalar)
      return fmt::format("vals[g * {} + {}]", layout_.scalar_slots, slot_[index(v)]);
    return fmt::format("vals[G * {} + t * {} + {}]", layout_.scalar_slots, layout_.tensor_slots,
                       slot_[index(v)]);
  }
  // Double x as an i64 value (ir::round_to): truncated, saturated at 2^53, Inf and NaN 0, no -0.
  static std::string i64_of(const std::string& x) {
    return fmt::format("(isfinite({0}) ? fmin(fmax(trunc({0}), -{1}), {1}) + 0.0 : 0.0)", x,
                       literal(kI64Limit, DType::f64));
  }

  // A value as an operand: a literal, a local of this segment, or from vals.
  std::string ref(ValueId v) const {
    const ir::Inst& in = p_.at(v);
    if (in.op == Op::Const) return literal(in.imm, DType::f64);
    if (local_.count(index(v))) return fmt::format("h{}", index(v));
    return val_slot(v);
  }

  Expected<std::string> expr(const ir::Inst& in) const {
    auto a = [&](int k) { return ref(in.args[k]); };
    auto flag = [](const std::string& cond) { return fmt::format("(({}) ? 1.0 : 0.0)", cond); };
    switch (in.op) {
      case Op::Hyper:
        return fmt::format("hypers[g * {} + {}]", layout_.hypers, in.attr);
      case Op::Step:
        return std::string("(ctl[0] + 1.0)");
      case Op::Numel:
        return std::string("numel");
      case Op::First:
        return std::string("first");
      case Op::HoldsCodes:  // bit attr of `codes` (exact: an integer below 2^52)
        return flag(fmt::format("fmod(floor(codes / {:.1f}), 2.0) != 0.0",
                                std::ldexp(1.0, static_cast<int>(in.attr))));
      case Op::SLoad: {
        const std::string s = fmt::format("ctl[{} + g * {} + {}]", DeviceStepLayout::kCtlHeader,
                                          layout_.states, in.attr);
        // (As the host's: an i64 saturated, a b1 0 or 1.)
        return in.type == DType::i64 ? i64_of(s) : in.type == DType::b1 ? flag(s + " != 0.0") : s;
      }
      case Op::Not:
        return flag(a(0) + " == 0.0");
      case Op::And:
        return flag(fmt::format("{} != 0.0 && {} != 0.0", a(0), a(1)));
      case Op::Or:
        return flag(fmt::format("{} != 0.0 || {} != 0.0", a(0), a(1)));
      case Op::IsFinite:
        return flag(fmt::format("isfinite({})", a(0)));
      case Op::Lt:
      case Op::Le:
      case Op::Gt:
      case Op::Ge:
      case Op::Eq:
      case Op::Ne:
        return flag(fmt::format("{} {} {}", a(0), detail::comparison(in.op), a(1)));
      case Op::Select:
        return fmt::format("({} != 0.0 ? {} : {})", a(0), a(1), a(2));
      case Op::Cast:
        switch (in.type) {
          case DType::f64:
            return a(0);
          case DType::f32:
            return fmt::format("(double)(float){}", a(0));
          case DType::f16:
            return fmt::format("optjit_round_binary({}, 10, -14, 65504.0)", a(0));
          case DType::bf16:
            return fmt::format("optjit_round_binary({}, 7, -126, {})", a(0),
                               literal(3.3895313892515355e38, DType::f64));
          case DType::i64:
            return i64_of(a(0));
          case DType::b1:
          case DType::u8:  // never a value type
          case DType::u16:
            return flag(a(0) + " != 0.0");
        }
        break;
      default: {
        // The math every emitter shares (c_lang.h), in double; an i64 result saturates, as the
        // host's (add, sub and mul may pass 2^53; neg, abs, min and max stay within it).
        std::vector<std::string> args;
        for (int k = 0; k < ir::info(in.op).arity; ++k) args.push_back(a(k));
        if (std::string e = detail::float_math(L_, in.op, DType::f64, args); !e.empty())
          return in.type == DType::i64 ? i64_of(e) : e;
        break;
      }
    }
    return make_error("the device step cannot evaluate '{}' on the {} device", ir::info(in.op).text,
                      L_.name());
  }

  bool stored(ValueId v, size_t k) const { return last_use_[index(v)] > k; }

  Expected<std::string> segment(size_t k) {
    const std::string I = L_.i64();
    const bool last = k == plan_.passes.size();
    std::string s = fmt::format(
        "{} optjit_segment_{}(const {}, {}, const {}, {}, {}, const {} T, const {} G) {{\n",
        L_.kernel(), k, G("double", "hypers"), G("double", "ctl"), G("double", "tinfo"),
        G("double", "vals"), G("double", "uniforms"), I, I);
    s += fmt::format("  const {} i = {};\n", I, L_.global_id());
    // The group role: its scalars (stored for later segments), skip_if and scalar stores.
    local_.clear();
    s += "  if (i < G) {\n    const " + I + " g = i;\n";
    if (k == 0 && layout_.states > 0)
      s += fmt::format(
          "    for (int j = 0; j < {0}; ++j) ctl[{1} + G * {0} + g * {0} + j] = ctl[{1} + g * {0} "
          "+ "
          "j];\n",
          layout_.states, DeviceStepLayout::kCtlHeader);
    for (ValueId v : plan_.host[k]) {
      const ir::Inst& in = p_.at(v);
      if (in.op == Op::SkipIf) {
        s += fmt::format("    if ({} != 0.0) ctl[1] = 1.0;\n", ref(in.args[0]));
        continue;
      }
      if (in.op == Op::SStore) {
        s += fmt::format("    ctl[{} + G * {} + g * {} + {}] = {};\n", DeviceStepLayout::kCtlHeader,
                         layout_.states, layout_.states, in.attr, ref(in.args[0]));
        continue;
      }
      // Constants are written where they are used (ref), so they need no local.
      if (in.rank != Rank::scalar || in.op == Op::Const) continue;
      auto e = expr(in);
      if (!e) return e.error();
      s += fmt::format("    const double h{} = {};\n", index(v), *e);
      local_.insert(index(v));
      if (stored(v, k)) s += fmt::format("    {} = h{};\n", val_slot(v), index(v));
    }
    s += "  }\n";
    // The tensor role: its group's scalars again (as locals), its tensor values, its uniforms.
    local_.clear();
    s += fmt::format(
        "  if (i < T) {{\n    const {0} t = i;\n    const {0} g = ({0})tinfo[4 * t];\n"
        "    const double numel = tinfo[4 * t + 1];\n    const double first = tinfo[4 * t + 2];\n"
        "    const double codes = tinfo[4 * t + 3];\n",
        I);
    for (ValueId v : plan_.host[k]) {
      const ir::Inst& in = p_.at(v);
      if (ir::info(in.op).kind == OpKind::effect || in.op == Op::Const) continue;
      auto e = expr(in);
      if (!e) return e.error();
      s += fmt::format("    const double h{} = {};\n", index(v), *e);
      local_.insert(index(v));
      if (in.rank == Rank::tensor && stored(v, k))
        s += fmt::format("    {} = h{};\n", val_slot(v), index(v));
    }
    if (!last) {
      const auto& u = plan_.passes[k].uniforms;
      for (size_t j = 0; j < u.size(); ++j)
        s += fmt::format("    uniforms[t * {} + {}] = {};\n", std::max<size_t>(u.size(), 1), j,
                         ref(u[j]));
    }
    s += "  }\n}\n";
    return s;
  }

  static std::string combine_two(Op op, const std::string& acc, const std::string& p) {
    return fmt::format(fmt::runtime(ir::reduction(op).combine_c), acc, p);
  }

  // The fixed lane order (codegen::kCombineLanes; runtime::combine_range is the host's copy)
  // over `n` items, item i at `item(i)`, by one work-group of any size: work-item `j0` takes
  // lanes j0, j0 + size, ...; lanes past the last run hold the identity, which combines
  // exactly, so they are skipped as the host skips them. Leaves the result in lane[0].
  std::string lane_combine(Op op, const std::string& n, const std::string& item) const {
    const std::string I = L_.i64();
    const int64_t W = kCombineLanes;
    std::string s;
    s += fmt::format("    {{\n      const {0} run = {1} > 0 ? ({1} + {2} - 1) / {2} : 1;\n", I, n,
                     W);
    s += fmt::format("      const {0} used = ({1} + run - 1) / run;\n", I, n);
    s += fmt::format("      for ({} j = j0; j < (used > 0 ? used : 1); j += size) {{\n", I);
    s += fmt::format("        const {0} i1 = j * run + run < {1} ? j * run + run : {1};\n", I, n);
    s += "        double acc = 0.0;\n";
    s += fmt::format("        for ({} i = j * run; i < i1; ++i) acc = {};\n", I,
                     combine_two(op, "acc", item));
    s += "        lane[j] = acc;\n      }\n";
    s += fmt::format("      {};\n", L_.barrier());
    s += fmt::format("      for ({} s = 1; s < used; s *= 2) {{\n", I);
    s += fmt::format("        for ({} j = j0 * 2 * s; j + s < used; j += size * 2 * s)\n", I);
    s += fmt::format("          lane[j] = {};\n", combine_two(op, "lane[j]", "lane[j + s]"));
    s += fmt::format("        {};\n      }}\n    }}\n", L_.barrier());
    return s;
  }

  // One work-group per tensor: its chunks' partials in the fixed lane order.
  std::string combine(size_t k) const {
    const std::string I = L_.i64();
    const auto& reds = plan_.passes[k].reductions;
    const size_t R = reds.size();
    std::string s =
        fmt::format("{} optjit_combine_{}(const {}, const {}, {}, {}, const {} T, const {} G) {{\n",
                    L_.kernel(), k, G("double", "partials"), G(I.c_str(), "first"),
                    G("double", "vals"), G("double", "fold_rows"), I, I);
    s += fmt::format("  {}double lane[{}];\n", L_.local(), kCombineLanes);
    s += fmt::format("  const {0} t = {1}, j0 = {2}, size = {3};\n  if (t >= T) return;\n", I,
                     L_.group_id(), L_.local_id(), L_.local_size());
    s += fmt::format("  const {} c0 = first[t], n = first[t + 1] - c0;\n", I);
    size_t q = 0;
    for (size_t r = 0; r < R; ++r) {
      const ir::Inst& in = p_.at(reds[r]);
      s += lane_combine(in.op, "n", fmt::format("partials[(c0 + i) * {} + {}]", R, r));
      if (static_cast<ir::Scope>(in.attr) == ir::Scope::tensor)
        s += fmt::format("  if (j0 == 0) {} = lane[0];\n", val_slot(reds[r]));
      else
        s += fmt::format("  if (j0 == 0) fold_rows[{} * T + t] = lane[0];\n", q++);
      s += fmt::format("  {};\n", L_.barrier());  // lane[] is reused by the next reduction
    }
    return s + "}\n";
  }

  // One work-group: the tensors' values of each all-tensor reduction in the fixed lane order,
  // into every group.
  std::string fold(size_t k) const {
    const std::string I = L_.i64();
    std::string s =
        fmt::format("{} optjit_fold_{}(const {}, {}, const {} T, const {} G) {{\n", L_.kernel(), k,
                    G("double", "fold_rows"), G("double", "vals"), I, I);
    s += fmt::format("  {}double lane[{}];\n", L_.local(), kCombineLanes);
    s += fmt::format("  const {} j0 = {}, size = {};\n", I, L_.local_id(), L_.local_size());
    size_t q = 0;
    for (ValueId r : plan_.passes[k].reductions) {
      const ir::Inst& in = p_.at(r);
      if (static_cast<ir::Scope>(in.attr) != ir::Scope::all) continue;
      s += lane_combine(in.op, "T", fmt::format("fold_rows[{} * T + i]", q++));
      s += fmt::format("  for ({} g = j0; g < G; g += size) {} = lane[0];\n", I, val_slot(r));
      s += fmt::format("  {};\n", L_.barrier());
    }
    return s + "}\n";
  }

  // Sharded steps (api/communicator.h): where reduction r of pass k starts in the all-reduce
  // buffer (plan::ShardSlots), with A and S the kernel's arguments.
  std::string slots_at(size_t k, size_t r) const {
    const plan::ShardSlots c = plan::shard_slots_before(plan_, k, r);
    return fmt::format("({} * A + {} * S)", c.all, c.per);
  }

  // Between combine_k and the all-reduce, slot by slot, one writer per slot over all processes
  // (every other process writes 0), so the sum is exact: a piece's slot gets its value where the
  // piece is this process's (owner[slot], a local tensor); by tensor an all-tensor reduction's
  // value per piece comes from combine_k's rows, by process this process's own slot gets its
  // tensors' fold (fold_k ran first, over them). One work-group.
  std::string shard_out(size_t k) const {
    const std::string I = L_.i64();
    const auto& reds = plan_.passes[k].reductions;
    std::string s = fmt::format(
        "{} optjit_shard_out_{}(const {}, const {}, {}, const {}, const {} T, const {} G, "
        "const {} S, const {} P, const {} rank) {{\n",
        L_.kernel(), k, G("double", "vals"), G("double", "fold_rows"), G("double", "sbuf"),
        G(I.c_str(), "owner"), I, I, I, I, I);
    s += fmt::format("  const {} j0 = {}, size = {}, A = P > 0 ? P : S;\n", I, L_.local_id(),
                     L_.local_size());
    s += fmt::format(
        "  for ({0} slot = j0; slot < S; slot += size) {{\n"
        "    const {0} t = owner[slot];\n",
        I);
    size_t q = 0;
    for (size_t r = 0; r < reds.size(); ++r) {
      if (static_cast<ir::Scope>(p_.at(reds[r]).attr) == ir::Scope::tensor)
        s += fmt::format("    sbuf[{} + slot] = t < 0 ? 0.0 : {};\n", slots_at(k, r),
                         val_slot(reds[r]));
      else
        s += fmt::format("    if (P == 0) sbuf[{} + slot] = t < 0 ? 0.0 : fold_rows[{} * T + t];\n",
                         slots_at(k, r), q++);
    }
    s += fmt::format(
        "  }}\n  for ({0} slot = j0; P > 0 && slot < P; slot += size) {{\n"
        "    const {0} g = 0;\n",
        I);
    for (size_t r = 0; r < reds.size(); ++r)
      if (static_cast<ir::Scope>(p_.at(reds[r]).attr) == ir::Scope::all)
        s += fmt::format("    sbuf[{} + slot] = slot == rank ? {} : 0.0;\n", slots_at(k, r),
                         val_slot(reds[r]));
    return s + "  }\n}\n";
  }

  // After the all-reduce, as the host's ShardLayout::complete: each tensor's value over its
  // pieces in offset order (the first piece as it is, so a whole tensor keeps its bits), the
  // identity for a tensor no process holds; per-tensor reductions into each local tensor's value
  // (by process, a tensor with no slots, one held whole, keeps its own); all-tensor ones by
  // tensor into one row per global tensor for fold_k (launched over the Tg global tensors), by
  // process the processes' values in rank order into every group. One work-group.
  std::string shard_in(size_t k) const {
    const std::string I = L_.i64();
    const auto& reds = plan_.passes[k].reductions;
    std::string s = fmt::format(
        "{} optjit_shard_in_{}(const {}, {}, {}, const {}, const {}, const {} T, const {} G, "
        "const {} S, const {} Tg, const {} P) {{\n",
        L_.kernel(), k, G("double", "sbuf"), G("double", "vals"), G("double", "fold_rows"),
        G(I.c_str(), "first"), G(I.c_str(), "tensor_of"), I, I, I, I, I);
    s += fmt::format("  const {} j0 = {}, size = {}, A = P > 0 ? P : S;\n", I, L_.local_id(),
                     L_.local_size());
    size_t q = 0;
    for (size_t r = 0; r < reds.size(); ++r) {
      const ir::Inst& in = p_.at(reds[r]);
      const std::string at = slots_at(k, r);
      if (static_cast<ir::Scope>(in.attr) == ir::Scope::tensor) {
        s += fmt::format(
            "  for ({0} t = j0; t < T; t += size) {{\n"
            "    const {0} tg = tensor_of[t];\n"
            "    const {0} a = first[tg], b = first[tg + 1];\n"
            "    if (P > 0 && a == b) continue;\n"
            "    double v = a == b ? {1} : sbuf[{2} + a];\n"
            "    for ({0} p = a + 1; p < b; ++p) v = {3};\n"
            "    {4} = v;\n  }}\n",
            I, literal(ir::reduction(in.op).identity, DType::f64), at,
            combine_two(in.op, "v", fmt::format("sbuf[{} + p]", at)), val_slot(reds[r]));
        continue;
      }
      s += fmt::format(
          "  if (P > 0) {{\n"
          "    if (j0 == 0) {{\n"
          "      double v = sbuf[{1}];\n"
          "      for ({0} p = 1; p < P; ++p) v = {2};\n"
          "      for ({0} g = 0; g < G; ++g) {3} = v;\n"
          "    }}\n"
          "  }} else {{\n"
          "    for ({0} tg = j0; tg < Tg; tg += size) {{\n"
          "      const {0} a = first[tg], b = first[tg + 1];\n"
          "      double v = a == b ? {4} : sbuf[{1} + a];\n"
          "      for ({0} p = a + 1; p < b; ++p) v = {5};\n"
          "      fold_rows[{6} * Tg + tg] = v;\n"
          "    }}\n"
          "  }}\n",
          I, at, combine_two(in.op, "v", fmt::format("sbuf[{} + p]", at)), val_slot(reds[r]),
          literal(ir::reduction(in.op).identity, DType::f64),
          combine_two(in.op, "v", fmt::format("sbuf[{} + p]", at)), q++);
    }
    return s + "}\n";
  }

  std::string commit() const {
    const std::string I = L_.i64();
    const size_t H = DeviceStepLayout::kCtlHeader, S = layout_.states;
    std::string s =
        fmt::format("{} optjit_commit({}, const {} G) {{\n", L_.kernel(), G("double", "ctl"), I);
    s += fmt::format("  if ({} != 0) return;\n", L_.global_id());
    s += "  const double skipped = ctl[1];\n  if (skipped == 0.0) {\n";
    if (S > 0)
      s += fmt::format(
          "    for ({0} j = 0; j < G * {1}; ++j) ctl[{2} + j] = ctl[{2} + G * {1} + j];\n", I, S,
          H);
    s += "    ctl[0] = ctl[0] + 1.0;\n  }\n  ctl[2] = skipped;\n  ctl[1] = 0.0;\n}\n";
    return s;
  }

  const plan::Plan& plan_;
  const ir::Program& p_;
  const Lang& L_;
  DeviceStepLayout layout_;
  std::vector<uint32_t> slot_;
  std::vector<size_t> last_use_;  // per value: the last host segment that reads it
  std::set<uint32_t> local_;
};

}  // namespace

DeviceStepLayout device_step_layout(const plan::Plan& plan) {
  DeviceStepLayout l;
  const ir::Program& p = plan.program;
  l.hypers = p.hypers.size();
  l.states = p.states.size();
  for (const auto& in : p.insts) {
    l.scalar_slots += in.rank == Rank::scalar;
    l.tensor_slots += in.rank == Rank::tensor;
  }
  for (const auto& pass : plan.passes) {
    size_t all = 0;
    for (ValueId r : pass.reductions) all += static_cast<ir::Scope>(p.at(r).attr) == ir::Scope::all;
    l.combines.push_back(!pass.reductions.empty());
    l.folds.push_back(all > 0);
    l.fold_rows = std::max(l.fold_rows, all);
    l.partials_per_chunk = std::max(l.partials_per_chunk, pass.reductions.size());
  }
  return l;
}

Expected<std::string> detail::emit_device_step(const plan::Plan& plan, const Lang& L) {
  return StepWriter(plan, L).write();
}

}  // namespace optjit::codegen
