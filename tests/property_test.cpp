// Properties over random pipelines (rapidcheck):
// - the IR text round-trips exactly and the structural hash survives it;
// - running the plan pass by pass gives bitwise the results of a naive evaluator that runs
//   the whole program at once (with f64 storage no rounding can hide a planning mistake).
#include <cmath>
#include <map>

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "executors.h"
#include "ir/builtins.h"
#include "ir/compile.h"
#include "ir/eval.h"
#include "ir/pipeline_text.h"
#include "ir/stochastic_round.h"
#include "ir/text.h"
#include "runtime/reference.h"

#include "property_gens.h"

namespace optjit {
namespace {

using ir::Op;
using ir::OpKind;
using runtime::OptimizerState;

// The unplanned program, evaluated instruction by instruction over whole tensors.
struct NaiveResult {
  bool skipped = false;
  OptimizerState state;
};

NaiveResult naive_step(const ir::Program& p, const plan::Plan& plan, OptimizerState s) {
  const size_t T = s.tensors.size(), G = s.groups.size();
  std::vector<std::vector<std::vector<double>>> elem(p.insts.size());  // [value][tensor][element]
  std::vector<std::vector<double>> per_tensor(p.insts.size()), per_group(p.insts.size());
  auto scalar_of = [&](ir::ValueId v, size_t t) {
    const auto& in = p.at(v);
    if (in.rank == Rank::scalar) return per_group[index(v)][s.tensors[t].group];
    return per_tensor[index(v)][t];
  };
  auto element_of = [&](ir::ValueId v, size_t t, int64_t e) {
    return p.at(v).rank == Rank::element ? elem[index(v)][t][static_cast<size_t>(e)]
                                         : scalar_of(v, t);
  };
  std::vector<std::pair<uint32_t, std::vector<std::vector<double>>>> stores;
  std::vector<std::tuple<uint32_t, uint32_t, double>> sstores;
  NaiveResult r;
  for (size_t n = 0; n < p.insts.size(); ++n) {
    const ir::Inst& in = p.insts[n];
    const OpKind kind = ir::info(in.op).kind;
    if (in.op == Op::Store) {
      std::vector<std::vector<double>> data(T);
      for (size_t t = 0; t < T; ++t)
        for (int64_t e = 0; e < s.tensors[t].numel; ++e)
          data[t].push_back(element_of(in.args[0], t, e));
      stores.emplace_back(in.attr, std::move(data));
    } else if (in.op == Op::SStore) {
      for (size_t g = 0; g < G; ++g)
        sstores.emplace_back(g, in.attr, per_group[index(in.args[0])][g]);
    } else if (in.op == Op::SkipIf) {
      for (size_t g = 0; g < G; ++g) r.skipped |= per_group[index(in.args[0])][g] != 0;
    } else if (kind == OpKind::reduce) {
      std::vector<double> partial(T);
      for (size_t t = 0; t < T; ++t) {
        double acc = runtime::reduce_identity(in.op);
        for (int64_t e = 0; e < s.tensors[t].numel; ++e)
          acc = runtime::reduce_step(in.op, acc, element_of(in.args[0], t, e));
        partial[t] = acc;
      }
      if (static_cast<ir::Scope>(in.attr) == ir::Scope::tensor)
        per_tensor[n] = partial;
      else
        per_group[n].assign(G, runtime::combine(in.op, partial));
    } else if (in.rank == Rank::element) {
      elem[n].resize(T);
      for (size_t t = 0; t < T; ++t) {
        for (int64_t e = 0; e < s.tensors[t].numel; ++e) {
          double x;
          if (in.op == Op::Load) {
            x = runtime::load_element(s.tensors[t].data(in.attr), plan.buffers[in.attr].storage, e);
          } else if (in.op == Op::Const) {
            x = in.imm;
          } else if (in.op == Op::SRound) {  // keyed by the element's place (ir/stochastic_round.h)
            x = ir::sround_element(element_of(in.args[0], t, e), element_of(in.args[1], t, e),
                                   element_of(in.args[2], t, e), in.attr, e);
          } else {
            double a[3] = {0, 0, 0};
            for (int k = 0; k < ir::info(in.op).arity; ++k) a[k] = element_of(in.args[k], t, e);
            x = ir::eval_op(in.op, in.type, a[0], a[1], a[2]);
          }
          elem[n][t].push_back(x);
        }
      }
    } else {
      auto eval = [&](size_t g, size_t t) {
        switch (in.op) {
          case Op::Const:
            return in.imm;
          case Op::Hyper:
            return s.groups[g].hypers[in.attr];
          case Op::Step:
            return static_cast<double>(s.step + 1);
          case Op::Numel:
            return static_cast<double>(s.tensors[t].whole);
          case Op::First:
            return static_cast<double>(s.tensors[t].first);
          case Op::HoldsCodes:
            return runtime::holds_codes(plan, in.attr, s.tensors[t]) ? 1.0 : 0.0;
          case Op::SLoad:
            return s.groups[g].states[in.attr];
          default:
            break;
        }
        double a[3] = {0, 0, 0};
        for (int k = 0; k < ir::info(in.op).arity; ++k)
          a[k] = p.at(in.args[k]).rank == Rank::scalar ? per_group[index(in.args[k])][g]
                                                       : per_tensor[index(in.args[k])][t];
        return ir::eval_op(in.op, in.type, a[0], a[1], a[2]);
      };
      if (in.rank == Rank::scalar) {
        per_group[n].resize(G);
        for (size_t g = 0; g < G; ++g) per_group[n][g] = eval(g, 0);
      } else {
        per_tensor[n].resize(T);
        for (size_t t = 0; t < T; ++t) per_tensor[n][t] = eval(s.tensors[t].group, t);
      }
    }
  }
  r.state = s;
  if (r.skipped) return r;
  for (auto& [buf, data] : stores)
    for (size_t t = 0; t < T; ++t)
      for (size_t e = 0; e < data[t].size(); ++e)
        runtime::store_element(r.state.tensors[t].data(buf), plan.buffers[buf].storage,
                               static_cast<int64_t>(e), data[t][e]);
  for (auto [g, st, x] : sstores) r.state.groups[g].states[st] = x;
  ++r.state.step;
  return r;
}

void check_plan_matches_naive(const std::string& text) {
  RC_TAG(text.find("transform") == std::string::npos ? "builtins" : "custom");
  auto pipeline = dsl::parse_pipeline(text);
  RC_ASSERT(pipeline.ok());
  auto program = dsl::lower(*pipeline, {DType::f64, DType::f64, DType::f64});
  RC_ASSERT(program.ok());
  auto plan = plan::make_plan(*program);
  RC_ASSERT(plan.ok());
  auto params = random_params(DType::f64);
  auto state = runtime::init_state(*plan, params, {});
  RC_ASSERT(state.ok());
  runtime::ReferenceBackend ref(*plan);
  for (int step = 0; step < 3; ++step) {
    const RandomGrads grads = random_grads(params, DType::f64);
    RC_ASSERT(runtime::set_grads(*plan, *state, grads.ptrs).ok());
    NaiveResult naive = naive_step(plan->program, *plan, *state);
    bool skipped = ref.step(*state).skipped;
    RC_ASSERT(skipped == naive.skipped);
    RC_ASSERT(state->step == naive.state.step);
    for (size_t t = 0; t < state->tensors.size(); ++t)
      for (size_t b = 0; b < plan->program.buffers.size(); ++b) {
        if (plan->buffers[b].per_block) continue;  // the small tensors here keep f32 state
        const uint8_t* x = state->tensors[t].data(b);
        const uint8_t* y = naive.state.tensors[t].data(b);
        for (int64_t e = 0; e < state->tensors[t].numel; ++e) {
          const DType st = plan->buffers[b].storage;  // f64, or a state_format's, or f32
          double u = runtime::load_element(x, st, e), w = runtime::load_element(y, st, e);
          RC_ASSERT((u == w || (std::isnan(u) && std::isnan(w))));
        }
      }
    for (size_t g = 0; g < state->groups.size(); ++g)
      for (size_t k = 0; k < state->groups[g].states.size(); ++k) {
        double u = state->groups[g].states[k], w = naive.state.groups[g].states[k];
        RC_ASSERT((u == w || (std::isnan(u) && std::isnan(w))));
      }
  }
}

RC_GTEST_PROP(Property, BuiltinChainsPlanLikeTheWholeProgram, ()) {
  // With state formats: a later pass never reads a state back rounded where the whole program
  // has its value (plan.cpp's forwardable).
  check_plan_matches_naive(*gen_builtin_pipeline());
}

RC_GTEST_PROP(Property, CustomTransformsPlanLikeTheWholeProgram, ()) {
  check_plan_matches_naive(*gen_custom_pipeline());
}

// The CPU backend against the reference on random built-in chains, dtypes, tensor sets,
// chunk sizes and thread counts. Tolerance is relative to each tensor's largest value.
RC_GTEST_PROP(Property, CpuBackendMatchesTheReference, ()) {
  std::string text = *gen_builtin_pipeline();
  DType t =
      *rc::gen::elementOf(std::vector<DType>{DType::f32, DType::f64, DType::bf16, DType::f16});
  auto plan = compile_pipeline(text, {t, t, t});
  RC_ASSERT(plan.ok());
  auto cpu = testing::cpu_executor(*plan, {*rc::gen::inRange(1, 4), *rc::gen::inRange(1, 6)});
  RC_ASSERT(cpu.ok());
  check_backend_matches_reference(*plan, t, random_params(t), [&](runtime::OptimizerState& s) {
    auto r = (*cpu)->step(s);
    RC_ASSERT(r.ok());
    return r->skipped;
  });
}

// The sign analysis (ir/sign.h) against the arithmetic: a state v in an unsigned format (q8u)
// set to a random expression in one of the forms below, some always >= 0, some not, some only
// for beta in its bounds (declared in [0, 1) or without bounds). Where the compiler accepts v as
// q8u, the reference steps the same transform with v in f64 (beta anywhere in [0, 1)) and v is
// never stored negative; where it refuses, the message says why, and the reason holds.
RC_GTEST_PROP(Property, StatesAnUnsignedFormatAcceptsAreNeverNegative, ()) {
  const std::string e = "(" + *gen_expr(2) + ")";
  const std::vector<std::string> forms = {"@",
                                          "@ * @",
                                          "beta * v + (1 - beta) * @ * @",
                                          "(beta - 1) * @ * (@ * -0.5)",
                                          "lerp(v, @ * @, 1 - beta)",
                                          "max(v * beta, @)",
                                          "max(v, abs(@)) - v * beta",
                                          "pow(@, 2) + pow(abs(@), 1.5) * v",
                                          "exp(@) - 1",
                                          "clamp(@, 0, 1) + sqrt(v) * @ * (0.5 * @)",
                                          "v * @ / @",
                                          "@ / (@ * @)",
                                          "select(@ > 0, @, 0)",
                                          "sign(@) * @ + 1 / (1 + exp(@))",
                                          "m * @ + v"};
  std::string form = *rc::gen::elementOf(forms);
  for (size_t at; (at = form.find('@')) != std::string::npos;) form.replace(at, 1, e);
  const double beta = *rc::gen::inRange(0, 1000) / 1000.0;
  const std::string b = std::to_string(beta);
  // beta declared in [0, 1) or without bounds, lr without; either may be pinned (declared in
  // [x, x], its value here) below.
  auto body = [&](bool pin_lr, const std::string& beta_bounds) {
    return "transform t(lr=0.01" + std::string(pin_lr ? " in [0.01, 0.01]" : "") + ", beta=" + b +
           beta_bounds +
           ") {\n  state m = 0.25\n"
           "  state v = 0\n  m = 0.9 * m + grad * 0.1\n"
           "  v = select(isfinite(grad), " +  // a per-element value
           form +
           ", v)\n  param = param - lr * m * 0.001\n}\n";
  };
  const std::string beta_bounds = *rc::gen::arbitrary<bool>() ? " in [0, 1)" : "";
  std::string text = body(false, beta_bounds);
  const std::string call = "t(beta=" + b;
  auto quantized = compile_pipeline(text + call + ", state_format=\"v:q8u\")");
  RC_CLASSIFY(quantized.ok(), "accepted");
  if (!quantized.ok()) {
    const std::string& m = quantized.error().message;
    RC_ASSERT(m.find("state 'v' may become negative") != std::string::npos);
    // The message's reason holds: where it names hyperparameters ("at its given value it
    // cannot"), v is accepted with them pinned there (and the steps below check it); where it
    // blames the data, pinning both changes nothing.
    const bool lr = m.find("'t.lr'") != std::string::npos;
    const bool bt = m.find("'t.beta'") != std::string::npos;
    const bool named = m.find("for some allowed values of ") != std::string::npos;
    RC_ASSERT(named == (lr || bt));
    RC_ASSERT(named || m.find("whatever the hyperparameters") != std::string::npos);
    RC_CLASSIFY(named, "refused for a hyperparameter");
    text = body(named ? lr : true, named && !bt ? beta_bounds : " in [" + b + ", " + b + "]");
    auto again = compile_pipeline(text + call + ", state_format=\"v:q8u\")");
    RC_ASSERT(again.ok() == named);
    if (!named) return;
  }
  auto plan = compile_pipeline(text + call + ")", {DType::f64, DType::f64, DType::f64});
  RC_ASSERT(plan.ok());
  const auto params = random_params(DType::f64);
  auto state = runtime::init_state(*plan, params, {});
  RC_ASSERT(state.ok());
  runtime::ReferenceBackend ref(*plan);
  const uint32_t v = *plan->program.find_buffer("v");
  for (int k = 0; k < 3; ++k) {
    const RandomGrads g = random_grads(params, DType::f64);
    RC_ASSERT(runtime::set_grads(*plan, *state, g.ptrs).ok());
    ref.step(*state);
    for (const auto& t : state->tensors)
      for (int64_t i = 0; i < t.numel; ++i) {
        const double x = runtime::load_element(t.data(v), DType::f64, i);
        if (x < 0) RC_LOG() << "v = " << form << " is " << x << " at step " << k + 1 << "\n";
        RC_ASSERT(!(x < 0));
      }
  }
}

// Pass versions (plan::Pass::versions) against the whole pass: random transforms whose state,
// slow copy and parameters change only when conditions hold (on the step, a hyperparameter
// that differs by group, a scalar state, per-tensor and global reductions, joined with &&, ||
// and !), stepped on the CPU with and without their versions: every bit the same.
RC_GTEST_PROP(Property, PassVersionsStepAsTheWholeBody, ()) {
  const std::vector<std::string> atoms = {
      "step > 2", "step == 1", "step - 2 * floor(step / 2) == 0", "lr > 0.005",
      "k > 0.3",  "numel > 4", "tensor_norm(grad) > 1",           "norm(grad) > 2"};
  auto atom = [&] {
    return atoms[static_cast<size_t>(*rc::gen::inRange<int>(0, static_cast<int>(atoms.size())))];
  };
  auto cond = [&]() -> std::string {
    const std::string a = atom();
    switch (*rc::gen::inRange(0, 4)) {
      case 0:
        return a;
      case 1:
        return "!(" + a + ")";
      case 2:
        return "(" + a + ") && (" + atom() + ")";
      default:
        return "(" + a + ") || (" + atom() + ")";
    }
  };
  const std::string c1 = cond(), c2 = cond(), c3 = cond(), e1 = *gen_expr(2);
  const std::string text =
      "transform t(lr=0.01) {\n  state m = 0.25\n  state w = param\n"
      "  scalar k = 1\n  m = " +
      c1 + " ? 0.9 * m + " + e1 + " * 0.001 : m\n  w = " + c2 +
      " ? w + 0.1 * (param - w) : w\n"
      "  param = " +
      c3 +
      " ? param - lr * (m + w) * 0.01 : param\n"
      "  k = k * 0.5 + 0.1\n}\nt()";
  auto plan = compile_pipeline(text);
  RC_ASSERT(plan.ok());
  bool versions = false;
  for (const auto& p : plan->passes) versions = versions || !p.versions.empty();
  RC_CLASSIFY(versions, "with versions");
  plan::Plan whole = *plan;
  for (auto& p : whole.passes) p.versions.clear(), p.guards.clear();
  const auto params = random_params(DType::f32);
  runtime::GroupSpec second;
  second.patterns = {"p1"};
  second.overrides = {{"lr", 0.001}};
  auto a = runtime::init_state(*plan, params, {second});
  auto b = runtime::init_state(whole, params, {second});
  RC_ASSERT(a.ok() && b.ok());
  const codegen::CpuLaunch launch{*rc::gen::inRange(1, 3), *rc::gen::inRange(1, 6)};
  auto with = testing::cpu_executor(*plan, launch);
  auto without = testing::cpu_executor(whole, launch);
  if (!with.ok()) RC_LOG() << "with versions: " << with.error().message << "\n" << text << "\n";
  if (!without.ok()) RC_LOG() << "without: " << without.error().message << "\n";
  RC_ASSERT(with.ok() && without.ok());
  for (int k = 0; k < 4; ++k) {
    const RandomGrads grads = random_grads(params, DType::f32);
    RC_ASSERT(runtime::set_grads(*plan, *a, grads.ptrs).ok() &&
              runtime::set_grads(whole, *b, grads.ptrs).ok());
    RC_ASSERT((*with)->step(*a).ok() && (*without)->step(*b).ok());
  }
  for (size_t t = 0; t < params.size(); ++t)
    for (size_t buf = 0; buf < plan->buffers.size(); ++buf) {
      if (plan->buffers[buf].role == ir::BufferRole::grad) continue;
      const size_t n = runtime::buffer_bytes(*plan, buf, a->tensors[t]);
      RC_ASSERT(a->tensors[t].bytes(buf, n) == b->tensors[t].bytes(buf, n));
    }
  for (size_t g = 0; g < a->groups.size(); ++g)
    RC_ASSERT(a->groups[g].states == b->groups[g].states);
}

RC_GTEST_PROP(Property, IrTextRoundTripsForRandomPipelines, ()) {
  std::string text = *rc::gen::oneOf(gen_builtin_pipeline(), gen_custom_pipeline());
  DType t =
      *rc::gen::elementOf(std::vector<DType>{DType::f32, DType::f16, DType::bf16, DType::f64});
  auto pipeline = dsl::parse_pipeline(text);
  RC_ASSERT(pipeline.ok());
  auto program = dsl::lower(*pipeline, {t, t, t});
  RC_ASSERT(program.ok());
  std::string printed = ir::print(*program);
  auto back = ir::parse_ir(printed);
  RC_ASSERT(back.ok());
  RC_ASSERT(*back == *program);
  RC_ASSERT(ir::print(*back) == printed);
  RC_ASSERT(ir::structural_hash(*back) == ir::structural_hash(*program));
}

}  // namespace
}  // namespace optjit
