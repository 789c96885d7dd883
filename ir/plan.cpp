// Algorithm:
// 1. Level: level(v) = 0 for leaves, max over operands otherwise, and level(arg) + 1 for a
//    reduction (its result exists once the pass computing its operand has finished). An
//    element value of level k is computed in pass k; host values of level k before pass k.
// 2. Stores: a buffer store goes to pass max(level(value), guard) where guard is the level of
//    the latest skip_if, so nothing is written before the step is known to go ahead. If a
//    later pass still needs the buffer's old value, the store moves to that pass (repeat to a
//    fixpoint). The pass count is one past the last store or reduction.
// 3. Carries: an element value needed in a pass after its own level is read back from a
//    buffer that already holds it exactly (forward: e.g. LAMB's f32 exp_avg), or recomputed
//    there from its operands. Recomputing can cost more bytes than a round trip through
//    memory; each such value is tried as a scratch buffer (written where first computed,
//    read later) and kept when it lowers the total bytes moved.
// 4. Reduction placement: a reduction may run in any pass from its operand's level up to the
//    pass before its first consumer. Each is tried later (replanning 1-3), and a later pass is
//    kept when the pass count stays and fewer bytes move (e.g. LAMB's ||p|| moves to the pass
//    that already reads p for the update instead of adding a read of p to the clipping pass).
// 5. Versions: a pass whose body selects between moving a buffer and not on a per-tensor
//    boolean (a uniform; e.g. `sync ? mixed : slow`, whose false side stores the value just
//    loaded) gets one body per value of each such guard, with the select folded, a store of the
//    buffer's own loaded value dropped and dead loads removed; the kernels pick a version per
//    tensor. Guards are kept when a version moves fewer bytes, the most saving first.
#include "ir/plan.h"

#include <fmt/ranges.h>
#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "ir/simplify.h"
#include "ir/text.h"
#include "ir/verify.h"

namespace optjit::plan {

using ir::Inst;
using ir::Op;
using ir::OpKind;
using ir::Program;
using ir::ValueId;
using optjit::DType;
using optjit::Rank;

double Plan::bytes_per_param() const {
  double n = 0;
  for (const auto& p : passes) n += p.bytes_read + p.bytes_written;
  return n;
}

namespace {

void add_versions(Pass& pass, const std::vector<ir::BufferDecl>& buffers);

// Whether storage of type `storage` holds every value of type `value` exactly (a state's new
// value read back by a later pass; a loaded value stored back unchanged).
bool holds_exactly(DType storage, DType value) {
  return storage == value || storage == DType::f64 ||
         (storage == DType::f32 && (value == DType::bf16 || value == DType::f16));
}

struct Demand {
  std::vector<char> computed;             // program value computed in the body
  std::map<ValueId, uint32_t> read_from;  // value read from a buffer (forward / scratch)
  std::set<uint32_t> loads;               // buffers read
  std::set<uint32_t> stores;              // buffers written
  std::set<ValueId> uniforms;
  std::vector<ValueId> reductions;
  std::optional<uint32_t> conflict;  // a buffer whose old value is needed after its store
  double bytes = 0;
};

class Planner {
 public:
  Planner(const Program& p, std::map<uint32_t, int> reduce_at)
      : p_(p), n_(p_.insts.size()), level_(n_, 0), reduce_at_(std::move(reduce_at)) {}

  /// Planning in two steps. First the levels, which give a lower bound on the pass count
  /// (placing stores only moves them later), so a caller can give up on a plan early.
  int passes_at_least() {
    compute_levels();
    return pass_count();
  }
  /// Then the stores and the scratch buffers.
  void finish() {
    place_stores();
    choose_scratch();
  }
  int passes() const { return pass_count(); }
  double total() const { return total_; }  // bytes per parameter, set by choose_scratch()
  const std::map<uint32_t, int>& reduce_at() const { return reduce_at_; }
  /// The earliest pass a reduction can run in, and every reduction in program order.
  int operand_level(uint32_t i) const { return level_[index(p_.insts[i].args[0])]; }
  std::vector<uint32_t> reductions() const {
    std::vector<uint32_t> r;
    for (uint32_t i = 0; i < n_; ++i)
      if (ir::info(p_.insts[i].op).kind == OpKind::reduce) r.push_back(i);
    return r;
  }
  Plan build() const;

 private:
  const Inst& at(ValueId v) const { return p_.at(v); }
  int level(ValueId v) const { return level_[index(v)]; }
  bool element(ValueId v) const { return at(v).rank == Rank::element; }

  void compute_levels() {
    for (size_t i = 0; i < n_; ++i) {
      const Inst& in = p_.insts[i];
      int l = 0;
      for (int k = 0; k < ir::info(in.op).arity; ++k) l = std::max(l, level_[index(in.args[k])]);
      if (ir::info(in.op).kind == OpKind::reduce) {
        if (auto it = reduce_at_.find(static_cast<uint32_t>(i)); it != reduce_at_.end())
          l = std::max(l, it->second);
        l += 1;
      }
      level_[i] = l;
      if (in.op == Op::SkipIf) guard_ = std::max(guard_, l);
      if (in.op == Op::Store) store_of_[in.attr] = static_cast<ValueId>(i);
    }
    for (const auto& [buf, st] : store_of_) {
      ValueId v = at(st).args[0];
      store_pass_[buf] = std::max(level(v), guard_);
      if (forwardable(buf, v)) forward_.emplace(v, buf);  // the first store of a value wins
    }
  }

  int pass_count() const {
    int passes = 0;
    for (const auto& [buf, k] : store_pass_) passes = std::max(passes, k + 1);
    for (size_t i = 0; i < n_; ++i)
      if (ir::info(p_.insts[i].op).kind == OpKind::reduce)
        passes = std::max(passes, level_[i]);  // computed in pass level - 1
    return passes;
  }

  void place_stores() {
    for (bool changed = true; changed;) {
      changed = false;
      for (int k = 0; k < pass_count(); ++k) {
        Demand d = analyze(k, scratch_);
        if (d.conflict) {
          store_pass_[*d.conflict] = k;
          changed = true;
          break;
        }
      }
    }
  }

  // Values a pass must produce: stores placed there, reductions whose operand is of this
  // level, and scratch values first computed here.
  Demand analyze(int k, const std::map<ValueId, uint32_t>& scratch) const {
    Demand d;
    d.computed.assign(n_, 0);
    std::vector<char> seen(n_, 0);
    // Depth first from v, operands in order (the first conflicting load found is the one
    // reported), with a stack of its own: a chain of dependent values is as deep as the
    // program is long (thousands), too deep to recurse on a small thread stack.
    std::vector<ValueId> stack;
    auto visit = [&](ValueId root) {
      stack.push_back(root);
      while (!stack.empty()) {
        const ValueId v = stack.back();
        stack.pop_back();
        if (!element(v)) {
          d.uniforms.insert(v);
          continue;
        }
        if (seen[index(v)]) continue;
        seen[index(v)] = 1;
        const Inst& in = at(v);
        if (auto s = scratch.find(v); s != scratch.end() && level(v) < k) {
          d.read_from[v] = s->second;
          d.loads.insert(s->second);
          continue;
        }
        if (in.op == Op::Load) {
          auto sp = store_pass_.find(in.attr);
          if (sp != store_pass_.end() && sp->second < k && !d.conflict) d.conflict = in.attr;
          d.computed[index(v)] = 1;
          d.loads.insert(in.attr);
          continue;
        }
        if (auto f = forward_.find(v);
            f != forward_.end() && level(v) < k && store_pass_.at(f->second) < k) {
          d.read_from[v] = f->second;
          d.loads.insert(f->second);
          continue;
        }
        d.computed[index(v)] = 1;
        for (int a = ir::info(in.op).arity - 1; a >= 0; --a) stack.push_back(in.args[a]);
      }
    };
    for (size_t i = 0; i < n_; ++i) {
      const Inst& in = p_.insts[i];
      if (in.op == Op::Store && store_pass_.at(in.attr) == k) {
        visit(in.args[0]);
        d.stores.insert(in.attr);
      } else if (ir::info(in.op).kind == OpKind::reduce && level_[i] - 1 == k) {
        visit(in.args[0]);
        d.reductions.push_back(static_cast<ValueId>(i));
      }
    }
    for (const auto& [v, buf] : scratch)
      if (level(v) == k) {
        visit(v);
        d.stores.insert(buf);
      }
    // A quantized buffer's scales (the buffer after it) move with it.
    for (auto* set : {&d.loads, &d.stores})
      for (uint32_t b : std::vector<uint32_t>(set->begin(), set->end()))
        if (b < p_.buffers.size() && p_.buffers[b].quant != ir::Quant::none) set->insert(b + 1);
    for (uint32_t b : d.loads) d.bytes += buffer_bytes(b);
    for (uint32_t b : d.stores) d.bytes += buffer_bytes(b);
    return d;
  }

  double buffer_bytes(uint32_t b) const {
    return b < p_.buffers.size() ? ir::element_bytes(p_.buffers, b)
                                 : static_cast<double>(size_bytes(scratch_types_.at(b)));
  }

  // Whether a later pass may read value v back from buffer b, which stores it, instead of
  // computing it: only where b holds v exactly. A quantized buffer holds codes; a narrower
  // float (bf16 state, or f32 state of a value computed in f64) holds v rounded, and the pass
  // that stored it used v itself, so reading it back would make the numbers depend on the plan
  // (LAMB's update norm from v, its update from v rounded). Such a value is recomputed (its
  // store moving to the last pass that needs it, as bitsandbytes' two-kernel 8-bit LAMB does)
  // or carried in f32 scratch, whichever moves fewer bytes.
  bool forwardable(uint32_t b, ValueId v) const {
    const ir::BufferDecl& buf = p_.buffers[b];
    return buf.quant == ir::Quant::none && holds_exactly(buf.storage, at(v).type);
  }

  void choose_scratch() {
    // The demand of every pass for the scratch set so far: a trial changes only the passes
    // that reach its value (the one that computes it first, and later ones that recompute or
    // read it), so only those are analysed again. Pass counts do not depend on scratch.
    const int passes = pass_count();
    std::vector<Demand> cur;
    double best = 0;
    for (int k = 0; k < passes; ++k) {
      cur.push_back(analyze(k, scratch_));
      best += cur.back().bytes;
    }
    // Candidates: element values recomputed in a pass after their level, other than loads.
    std::set<ValueId> candidates;
    for (int k = 0; k < passes; ++k)
      for (size_t i = 0; i < n_; ++i) {
        auto v = static_cast<ValueId>(i);
        if (cur[k].computed[i] && level(v) < k && at(v).op != Op::Load && element(v))
          candidates.insert(v);
      }
    for (ValueId v : candidates) {
      auto trial = scratch_;
      auto buf = static_cast<uint32_t>(p_.buffers.size() + scratch_types_.size());
      trial[v] = buf;
      scratch_types_[buf] = at(v).type;
      std::vector<std::pair<int, Demand>> changed;
      double t = best;
      for (int k = level(v); k < passes; ++k) {
        if (k > level(v) && !cur[k].computed[index(v)] && !cur[k].read_from.count(v)) continue;
        Demand d = analyze(k, trial);
        t = t - cur[k].bytes + d.bytes;
        changed.emplace_back(k, std::move(d));
      }
      if (t < best) {
        best = t;
        scratch_ = std::move(trial);
        for (auto& [k, d] : changed) cur[k] = std::move(d);
      } else {
        scratch_types_.erase(buf);
      }
    }
    total_ = best;
  }

  Pass make_pass(int k, const Plan& plan) const;

  Program p_;
  size_t n_;
  std::vector<int> level_;
  std::map<uint32_t, int> reduce_at_;  // reduction -> pass it runs in, when delayed
  int guard_ = 0;
  std::map<uint32_t, ValueId> store_of_;     // buffer -> its store
  std::map<uint32_t, int> store_pass_;       // buffer -> pass that writes it
  std::map<ValueId, uint32_t> forward_;      // value -> buffer that stores it
  std::map<ValueId, uint32_t> scratch_;      // value -> scratch buffer index
  std::map<uint32_t, DType> scratch_types_;  // scratch buffer -> storage type
  double total_ = 0;
};

Plan Planner::build() const {
  Plan plan;
  plan.buffers = p_.buffers;
  for (const auto& [v, buf] : scratch_) {
    OPTJIT_CHECK(buf == plan.buffers.size());
    plan.buffers.push_back({fmt::format("scratch{}", buf - p_.buffers.size()),
                            ir::BufferRole::scratch,
                            scratch_types_.at(buf),
                            {}});
  }
  const int passes = pass_count();
  plan.host.resize(static_cast<size_t>(passes) + 1);
  for (size_t i = 0; i < n_; ++i) {
    const Inst& in = p_.insts[i];
    auto v = static_cast<ValueId>(i);
    if (in.op == Op::SStore)
      plan.host[passes].push_back(v);
    else if (in.op == Op::SkipIf)
      plan.host[std::min(level_[i], passes)].push_back(v);
    else if (ir::has_result(in.op) && !element(v) && ir::info(in.op).kind != OpKind::reduce)
      plan.host[std::min(level_[i], passes)].push_back(v);
  }
  for (int k = 0; k < passes; ++k) plan.passes.push_back(make_pass(k, plan));
  std::vector<Demand> demands;
  for (int k = 0; k < passes; ++k) demands.push_back(analyze(k, scratch_));
  for (int k = 0; k < passes; ++k) {
    const Demand& d = demands[k];
    for (size_t i = 0; i < n_; ++i) {
      auto v = static_cast<ValueId>(i);
      // A carry is a value computed in an earlier pass and needed again here.
      if (!element(v) || at(v).op == Op::Load || level(v) >= k || !demands[level(v)].computed[i])
        continue;
      if (auto r = d.read_from.find(v); r != d.read_from.end())
        plan.carries.push_back(
            {v, level(v), k, scratch_.count(v) ? Carry::scratch : Carry::forward, r->second});
      else if (d.computed[i])
        plan.carries.push_back({v, level(v), k, Carry::recompute, 0});
    }
  }
  for (const auto& [buf, st] : store_of_) {
    const ValueId v = at(st).args[0];
    const int earliest = std::max(level(v), guard_);
    if (store_pass_.at(buf) > earliest)
      plan.delayed_stores.push_back({buf, v, earliest, store_pass_.at(buf)});
  }
  plan.program = p_;
  return plan;
}

Pass Planner::make_pass(int k, const Plan& plan) const {
  Demand d = analyze(k, scratch_);
  OPTJIT_CHECK(!d.conflict);
  Pass pass;
  ir::Builder b(Program{{}, plan.buffers, {}, {}});
  std::map<ValueId, ValueId> local;
  std::map<ValueId, uint32_t> uniform_slot;
  auto operand = [&](ValueId v) -> ValueId {
    if (auto it = local.find(v); it != local.end()) return it->second;
    OPTJIT_CHECK(!element(v));
    auto slot = static_cast<uint32_t>(pass.uniforms.size());
    pass.uniforms.push_back(v);
    uniform_slot[v] = slot;
    ValueId u = b.emit(Op::Uniform, at(v).type, {}, slot);
    local[v] = u;
    return u;
  };
  // Loads first: a pass reads every buffer before it writes any.
  for (const auto& [v, buf] : d.read_from) local[v] = b.emit(Op::Load, at(v).type, {}, buf);
  for (size_t i = 0; i < n_; ++i)
    if (d.computed[i] && p_.insts[i].op == Op::Load)
      local[static_cast<ValueId>(i)] = b.emit(Op::Load, p_.insts[i].type, {}, p_.insts[i].attr);
  for (size_t i = 0; i < n_; ++i) {
    const Inst& in = p_.insts[i];
    auto v = static_cast<ValueId>(i);
    if (d.computed[i] && in.op != Op::Load) {
      std::array<ValueId, 3> args{ir::kNoValue, ir::kNoValue, ir::kNoValue};
      for (int a = 0; a < ir::info(in.op).arity; ++a) args[a] = operand(in.args[a]);
      local[v] = b.emit(in.op, in.type, args, in.attr, in.imm);
    }
    if (in.op == Op::Store && d.stores.count(in.attr) && store_pass_.at(in.attr) == k)
      b.emit(Op::Store, DType::b1, {operand(in.args[0])}, in.attr);
    if (ir::info(in.op).kind == OpKind::reduce && level_[i] - 1 == k) {
      b.emit(in.op, in.type, {operand(in.args[0])}, in.attr);
      pass.reductions.push_back(v);
    }
  }
  for (const auto& [v, buf] : scratch_)
    if (level(v) == k) b.emit(Op::Store, DType::b1, {operand(v)}, buf);
  pass.body = std::move(b).finish();
  pass.reads.assign(d.loads.begin(), d.loads.end());
  pass.writes.assign(d.stores.begin(), d.stores.end());
  for (uint32_t r : pass.reads) pass.bytes_read += ir::element_bytes(plan.buffers, r);
  for (uint32_t w : pass.writes) pass.bytes_written += ir::element_bytes(plan.buffers, w);
  add_versions(pass, plan.buffers);
  return pass;
}

// `body` with the uniform slots in `fixed` as constants: selects, not/and/or on known values
// folded, stores of a buffer's own loaded value dropped (not for quantized buffers, whose
// store requantizes the block), then everything no store or reduction needs removed.
// Reductions all stay, in order: the kernels' partials are laid out by them.
Program fix_uniforms(const Program& body, const std::map<uint32_t, bool>& fixed) {
  const size_t n = body.insts.size();
  std::vector<Inst> insts = body.insts;
  std::vector<ValueId> alias(n, ir::kNoValue);
  std::vector<int> known(n, -1);  // a b1 value known to be 0 or 1
  std::vector<bool> dropped(n, false);
  auto resolve = [&](ValueId v) {
    while (alias[index(v)] != ir::kNoValue) v = alias[index(v)];
    return v;
  };
  auto make_const = [&](size_t i, bool value) {
    Inst& in = insts[i];
    in.op = Op::Const;
    in.type = DType::b1;
    in.rank = Rank::scalar;
    in.attr = 0;
    in.imm = value ? 1 : 0;
    in.args = {ir::kNoValue, ir::kNoValue, ir::kNoValue};
    known[i] = value;
  };
  for (size_t i = 0; i < n; ++i) {
    Inst& in = insts[i];
    for (int a = 0; a < ir::info(in.op).arity; ++a) in.args[a] = resolve(in.args[a]);
    auto k = [&](int a) { return known[index(in.args[a])]; };
    switch (in.op) {
      case Op::Uniform:
        if (auto it = fixed.find(in.attr); it != fixed.end()) make_const(i, it->second);
        break;
      case Op::Const:
        if (in.type == DType::b1) known[i] = in.imm != 0;
        break;
      case Op::Not:
        if (k(0) >= 0) make_const(i, k(0) == 0);
        break;
      case Op::And:
      case Op::Or: {
        const int absorbing = in.op == Op::And ? 0 : 1;
        if (k(0) == absorbing || k(1) == absorbing)
          make_const(i, absorbing != 0);
        else if (k(0) >= 0)
          alias[i] = in.args[1];
        else if (k(1) >= 0)
          alias[i] = in.args[0];
        break;
      }
      case Op::Select:
        if (k(0) >= 0) alias[i] = in.args[k(0) ? 1 : 2];
        break;
      case Op::Store: {
        const Inst& v = insts[index(in.args[0])];
        const ir::BufferDecl& buf = body.buffers[in.attr];
        // Its own loaded value, holding the stored bits exactly: storing it writes them back.
        dropped[i] = v.op == Op::Load && v.attr == in.attr && buf.quant == ir::Quant::none &&
                     !buf.per_block && holds_exactly(v.type, buf.storage);
        break;
      }
      default:
        break;
    }
  }
  std::vector<bool> live(n, false);
  for (size_t i = n; i-- > 0;) {
    const Inst& in = insts[i];
    if (alias[i] != ir::kNoValue) continue;
    if ((in.op == Op::Store && !dropped[i]) || ir::info(in.op).kind == OpKind::reduce)
      live[i] = true;
    if (!live[i]) continue;
    for (int a = 0; a < ir::info(in.op).arity; ++a) live[index(in.args[a])] = true;
  }
  Program out{body.hypers, body.buffers, body.states, {}};
  std::vector<ValueId> renumber(n, ir::kNoValue);
  for (size_t i = 0; i < n; ++i) {
    if (!live[i]) continue;
    Inst in = insts[i];
    for (int a = 0; a < ir::info(in.op).arity; ++a) in.args[a] = renumber[index(in.args[a])];
    renumber[i] = static_cast<ValueId>(out.insts.size());
    out.insts.push_back(in);
  }
  return out;
}

// The buffers a body loads and stores, and their bytes per parameter element.
template <class P>
void count_bytes(P& pass, const std::vector<ir::BufferDecl>& buffers) {
  std::set<uint32_t> reads, writes;
  for (const Inst& in : pass.body.insts) {
    if (in.op != Op::Load && in.op != Op::Store) continue;
    auto& set = in.op == Op::Load ? reads : writes;
    set.insert(in.attr);
    if (buffers[in.attr].quant != ir::Quant::none) set.insert(in.attr + 1);  // its scales
  }
  pass.reads.assign(reads.begin(), reads.end());
  pass.writes.assign(writes.begin(), writes.end());
  pass.bytes_read = pass.bytes_written = 0;
  for (uint32_t r : pass.reads) pass.bytes_read += ir::element_bytes(buffers, r);
  for (uint32_t w : pass.writes) pass.bytes_written += ir::element_bytes(buffers, w);
}

// Pass k's versions for guards `slots`, in the order of Pass::versions.
std::vector<PassVersion> versions_for(const Pass& pass, const std::vector<uint32_t>& slots,
                                      const std::vector<ir::BufferDecl>& buffers) {
  std::vector<PassVersion> versions;
  for (size_t i = 0; i < (size_t{1} << slots.size()); ++i) {
    PassVersion v;
    std::map<uint32_t, bool> fixed;
    for (size_t g = 0; g < slots.size(); ++g) {
      v.when.push_back(((i >> g) & 1) != 0);
      fixed[slots[g]] = v.when.back();
    }
    v.body = fix_uniforms(pass.body, fixed);
    count_bytes(v, buffers);
    versions.push_back(std::move(v));
  }
  return versions;
}

double fewest_bytes(const std::vector<PassVersion>& versions) {
  double fewest = std::numeric_limits<double>::infinity();
  for (const auto& v : versions) fewest = std::min(fewest, v.bytes_read + v.bytes_written);
  return fewest;
}

// Guards one at a time, each the boolean uniform that lowers the bytes of the cheapest version
// most (Lookahead's sync saves only together with "not the first step", so single guards alone
// are not enough to judge).
void add_versions(Pass& pass, const std::vector<ir::BufferDecl>& buffers) {
  std::vector<uint32_t> candidates;
  for (const Inst& in : pass.body.insts)
    if (in.op == Op::Uniform && in.type == DType::b1) candidates.push_back(in.attr);
  if (candidates.size() > kMaxGuardCandidates) return;
  std::vector<uint32_t> guards;
  double fewest = pass.bytes_read + pass.bytes_written;
  while (guards.size() < kMaxGuards) {
    std::optional<uint32_t> best;
    double best_bytes = fewest;
    for (uint32_t c : candidates) {
      if (std::find(guards.begin(), guards.end(), c) != guards.end()) continue;
      std::vector<uint32_t> trial = guards;
      trial.push_back(c);
      const double b = fewest_bytes(versions_for(pass, trial, buffers));
      if (b < best_bytes) best = c, best_bytes = b;
    }
    if (!best) break;
    guards.push_back(*best);
    fewest = best_bytes;
  }
  if (guards.empty()) return;
  std::sort(guards.begin(), guards.end());
  pass.versions = versions_for(pass, guards, buffers);
  pass.guards = std::move(guards);
}

}  // namespace

Expected<Plan> make_plan(const Program& program) {
  OPTJIT_TRY(ir::verify(program));
  const Program simple = ir::simplify(program);
  if (simple.buffers.size() > kMaxBuffers)
    return make_error(
        "the pipeline has {} buffers (parameter, gradient and one per state); optjit plans at "
        "most {}",
        simple.buffers.size(), kMaxBuffers);
  if (simple.insts.size() > kMaxInstructions)
    return make_error(
        "the pipeline is {} instructions (simplified); optjit plans at most {} (the largest "
        "chains of built-ins are a few hundred)",
        simple.insts.size(), kMaxInstructions);
  Planner best(simple, {});
  if (int p = best.passes_at_least(); p > kMaxPasses)
    return make_error(
        "the pipeline needs at least {} passes over memory (one more per level of global "
        "reductions, such as each clip_grad_norm in a chain); optjit plans at most {}",
        p, kMaxPasses);
  best.finish();
  if (best.passes() > kMaxPasses)
    return make_error("the pipeline needs {} passes over memory; optjit plans at most {}",
                      best.passes(), kMaxPasses);
  for (uint32_t r : best.reductions()) {
    for (int at = best.operand_level(r) + 1; at < best.passes(); ++at) {
      auto delays = best.reduce_at();
      delays[r] = at;
      Planner trial(simple, delays);
      // A delay that adds a pass is never kept: known from the levels alone, before the
      // stores and scratch buffers are planned (which costs passes x program size each).
      if (trial.passes_at_least() > best.passes()) break;  // later passes only add more
      trial.finish();
      if (trial.passes() == best.passes() && trial.total() < best.total()) best = trial;
    }
  }
  Plan plan = best.build();
  for (size_t k = 0; k < plan.passes.size(); ++k)
    if (plan.passes[k].uniforms.size() > kMaxUniforms)
      return make_error(
          "pass {} takes {} values from the host (hyperparameters and what the host computes "
          "from them); optjit compiles at most {} (the largest chains of built-ins take under "
          "a hundred)",
          k, plan.passes[k].uniforms.size(), kMaxUniforms);
  return plan;
}

std::string describe(const Plan& plan, bool with_bodies) {
  std::string out = ir::print(plan.program);
  auto names = [&](const std::vector<uint32_t>& bufs) {
    std::vector<std::string> v;
    for (uint32_t b : bufs)
      v.push_back(fmt::format(
          "{}:{}", plan.buffers[b].name,
          plan.buffers[b].quant != ir::Quant::none
              ? to_string(plan.buffers[b].quant)
              : std::string_view(plan.buffers[b].per_block ? "f32/block"
                                                           : to_string(plan.buffers[b].storage))));
    return v.empty() ? std::string("-") : fmt::format("{}", fmt::join(v, " "));
  };
  out += fmt::format("\nplan: {} pass{}, {} bytes per parameter\n", plan.passes.size(),
                     plan.passes.size() == 1 ? "" : "es", plan.bytes_per_param());
  for (size_t k = 0; k <= plan.passes.size(); ++k) {
    if (!plan.host[k].empty()) {
      std::vector<std::string> ids;
      for (auto v : plan.host[k]) ids.push_back(fmt::format("%{}", index(v)));
      std::string where =
          k < plan.passes.size() ? fmt::format("pass {}", k) : std::string("commit");
      out += with_bodies ? fmt::format("  host before {}: {}\n", where, fmt::join(ids, " "))
                         : fmt::format("  host before {}: {} scalar/tensor value{}\n", where,
                                       ids.size(), ids.size() == 1 ? "" : "s");
    }
    if (k == plan.passes.size()) break;
    const Pass& p = plan.passes[k];
    out += fmt::format("  pass {}: reads {} | writes {} | {} B read + {} B written = {} B/param\n",
                       k, names(p.reads), names(p.writes), p.bytes_read, p.bytes_written,
                       p.bytes_read + p.bytes_written);
    for (const PassVersion& v : p.versions) {
      std::vector<std::string> when;
      for (size_t g = 0; g < p.guards.size(); ++g)
        when.push_back(fmt::format("%{}={}", index(p.uniforms[p.guards[g]]), v.when[g] ? 1 : 0));
      out += fmt::format("    when {}: reads {} | writes {} | {} B/param\n", fmt::join(when, " "),
                         names(v.reads), names(v.writes), v.bytes_read + v.bytes_written);
    }
    if (!p.reductions.empty()) {
      std::vector<std::string> ids;
      for (auto v : p.reductions) ids.push_back(fmt::format("%{}", index(v)));
      out += fmt::format("    reduces: {}\n", fmt::join(ids, " "));
    }
    if (with_bodies) {
      std::string body = ir::print(p.body);
      size_t start = body.find("\n%");  // skip the header and declarations
      if (start == std::string::npos) start = body.find("\nstore");
      std::string lines = start == std::string::npos ? "" : body.substr(start + 1);
      std::string indented;
      for (size_t pos = 0; pos < lines.size();) {
        size_t nl = lines.find('\n', pos);
        indented += "      " + lines.substr(pos, nl - pos) + "\n";
        pos = nl == std::string::npos ? lines.size() : nl + 1;
      }
      out += indented;
    }
  }
  for (const auto& d : plan.delayed_stores) {
    const ir::BufferDecl& b = plan.buffers[d.buffer];
    const ValueId v = d.value;
    // Where the later pass computes the new value again (instead of reading it back), say why.
    const bool recomputed = std::any_of(plan.carries.begin(), plan.carries.end(), [&](auto& c) {
      return c.value == v && c.to_pass == d.pass && c.how == Carry::recompute;
    });
    std::string why;
    if (recomputed && b.quant != ir::Quant::none)
      why = fmt::format(
          " ({} codes would give its new value back quantized: pass {} computes "
          "it again)",
          to_string(b.quant), d.pass);
    else if (recomputed && !holds_exactly(b.storage, plan.program.at(v).type))
      why = fmt::format(" ({} would give its new {} value back rounded: pass {} computes it again)",
                        to_string(b.storage), to_string(plan.program.at(v).type), d.pass);
    out += fmt::format("  store {}: in pass {}, not {}: pass {} reads its old value{}\n", b.name,
                       d.pass, d.earliest, d.pass, why);
  }
  for (const auto& c : plan.carries) {
    const char* how = c.how == Carry::recompute ? "recomputed"
                      : c.how == Carry::forward ? "read back from"
                                                : "stored in";
    out += fmt::format("  carry %{}: pass {} -> {}: {}{}\n", index(c.value), c.from_pass, c.to_pass,
                       how, c.how == Carry::recompute ? "" : " " + plan.buffers[c.buffer].name);
  }
  return out;
}

ShardSlots shard_slots_before(const std::vector<bool>& all_tensor, size_t r) {
  ShardSlots c;
  for (size_t i = 0; i < r; ++i) ++(all_tensor[i] ? c.all : c.per);
  return c;
}

ShardSlots shard_slots_before(const Plan& plan, size_t k, size_t r) {
  std::vector<bool> all_tensor;
  for (ir::ValueId v : plan.passes[k].reductions)
    all_tensor.push_back(static_cast<ir::Scope>(plan.program.at(v).attr) == ir::Scope::all);
  return shard_slots_before(all_tensor, r);
}

}  // namespace optjit::plan
