#include "ir/pipeline_text.h"

#include <cmath>

#include <gtest/gtest.h>

#include "ir/builtins.h"
#include "ir/compile.h"
#include "ir/text.h"
#include "runtime/reference.h"

namespace optjit {
namespace {

std::string error_of(std::string_view text) {
  auto p = dsl::parse_pipeline(text);
  if (p) {
    auto prog = dsl::lower(*p);
    if (!prog) return prog.error().message;
    return "(no error)";
  }
  return p.error().message;
}

TEST(PipelineText, ParsesChainsSchedulesTuplesAndBools) {
  auto p = dsl::parse_pipeline(
      "chain(clip_grad_norm(max_norm=1.0),\n"
      "      adamw(lr=step_lr(base_lr=1e-3, step_size=30, gamma=0.1), betas=(0.9, 0.999),\n"
      "            weight_decay=0.01, amsgrad=true))");
  ASSERT_TRUE(p) << p.error().message;
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ((*p)[0]->def->name, "clip_grad_norm");
  EXPECT_EQ((*p)[1]->def->name, "adamw");
  auto prog = dsl::lower(*p);
  ASSERT_TRUE(prog) << prog.error().message;
  EXPECT_TRUE(prog->find_hyper("adamw.lr.base_lr"));
  EXPECT_TRUE(prog->find_hyper("adamw.lr.step_size"));
  EXPECT_FALSE(prog->find_hyper("adamw.lr"));  // scheduled: lr is computed, not a slot
  EXPECT_TRUE(prog->find_buffer("max_exp_avg_sq"));
  // Python's spelling, as torch keyword arguments are pasted, means the same.
  for (const char* text : {"adamw(amsgrad=True)", "adamw(amsgrad=False)", "adamw(amsgrad=false)"}) {
    auto q = dsl::parse_pipeline(text);
    ASSERT_TRUE(q) << q.error().message;
    auto lowered = dsl::lower(*q);
    ASSERT_TRUE(lowered) << lowered.error().message;
    EXPECT_EQ(lowered->find_buffer("max_exp_avg_sq").has_value(),
              std::string(text).find("=True") != std::string::npos)
        << text;
  }
  EXPECT_EQ(dsl::parse_pipeline("adamw(amsgrad=TRUE)").error().message,
            "line 1, column 15: expected a number, a tuple, true/false, a string or a call, found "
            "'TRUE'");
}

TEST(PipelineText, NestedChainsFlatten) {
  auto p = dsl::parse_pipeline("chain(chain(clip_grad_value(clip_value=1)), chain(sgd(lr=0.1)))");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->size(), 2u);
}

TEST(PipelineText, ErrorsNameLineColumnAndWhatWasExpected) {
  EXPECT_EQ(error_of("adamw(lr=1e-3"),
            "line 1, column 14: expected ',' or ')', found end of input");
  EXPECT_EQ(error_of("chain(adamw(lr=1e-3),\n      adamx())"),
            "line 2, column 7: unknown transform or schedule 'adamx'");
  EXPECT_EQ(error_of("adamw(lrr=1e-3)"),
            "line 1, column 1: transform 'adamw' has no argument 'lrr' (did you mean 'lr'?)");
  EXPECT_EQ(error_of("adamw(betas=(0.9, 0.99, 0.9))"),
            "line 1, column 1: transform 'adamw': 'betas' takes a tuple of 2 numbers, got 3");
  EXPECT_EQ(
      error_of("adamw(betas=0.9)"),
      "line 1, column 1: transform 'adamw': 'betas' takes a tuple of 2 numbers, got a number");
  EXPECT_EQ(error_of("adamw(amsgrad=1)"),
            "line 1, column 1: transform 'adamw': 'amsgrad' takes true or false, got a number");
  EXPECT_EQ(error_of("adamw(0.001)"),
            "line 1, column 1: 'adamw' takes keyword arguments, e.g. adamw(lr=...)");
  EXPECT_EQ(error_of("adamw(lr=1, lr=2)"), "line 1, column 13: 'lr' is given twice");
  EXPECT_EQ(error_of("clip_grad_norm()"),
            "line 1, column 1: transform 'clip_grad_norm' needs 'max_norm'");
  EXPECT_EQ(error_of("step_lr(base_lr=1, step_size=2)"),
            "line 1, column 1: 'step_lr' is a schedule; pass it as a hyperparameter, e.g. "
            "adamw(lr=step_lr(...))");
  EXPECT_EQ(error_of("adamw(eps=step_lr(base_lr=1, step_size=2))"),
            "line 1, column 1: transform 'adamw': 'eps' cannot be a schedule");
  EXPECT_EQ(
      error_of("adamw(lr=adam())"),
      "line 1, column 1: transform 'adamw': 'lr' takes a schedule, but 'adam' is a transform");
  EXPECT_EQ(error_of("adamw(lr=1e-3) extra"),
            "line 1, column 16: expected end of input, found 'extra'");
  EXPECT_EQ(error_of("adamw(lr=1e-3$)"), "line 1, column 14: unexpected character '$'");
  EXPECT_EQ(error_of(""),
            "line 1, column 1: expected a pipeline such as adamw(lr=1e-3), found end of input");
  EXPECT_EQ(error_of("sgd(lr=0.1, nesterov=true)"),
            "sgd: Nesterov momentum requires a momentum and zero dampening");
  EXPECT_EQ(error_of("clip_grad_norm(max_norm=1, norm_type=0)"),
            "clip_grad_norm: norm_type must be a nonzero number or inf, got 0");
  EXPECT_EQ(error_of("clip_grad_norm(max_norm=1, norm_type=-inf)"),
            "clip_grad_norm: norm_type must be a nonzero number or inf, got -inf");
  EXPECT_EQ(error_of("one_cycle_lr(max_lr=1, total_steps=2)"),
            "line 1, column 1: 'one_cycle_lr' is a schedule; pass it as a hyperparameter, e.g. "
            "adamw(lr=one_cycle_lr(...))");
  EXPECT_EQ(error_of("sgd(lr=one_cycle_lr(max_lr=1, total_steps=2, anneal_strategy=\"cosine\"))"),
            "line 1, column 8: schedule 'one_cycle_lr': 'anneal_strategy' must be one of \"cos\", "
            "\"linear\", got \"cosine\"");
}

TEST(PipelineText, CustomTransformErrors) {
  EXPECT_EQ(error_of("transform adam(lr=1) { param = param }\nadam()"),
            "line 1, column 11: 'adam' is a built-in; choose another name");
  EXPECT_EQ(error_of("transform t(lr=1) {\n  param = param - lr * velocity\n}\nt()"),
            "t: line 2, column 24: unknown name 'velocity'");
  EXPECT_EQ(error_of("transform t(lr=1) {\n  state m\n  m = lr\n}\nt()"),
            "t: line 3, column 3: state 'm' must be set to a per-element value");
  EXPECT_EQ(
      error_of("transform t(lr=1) {\n  undeclared = grad\n}\nt()"),
      "t: line 2, column 3: cannot assign to 'undeclared': declare it with state, scalar or let");
  EXPECT_EQ(error_of("transform t(lr=1) {\n  param = sqrt(grad, grad)\n}\nt()"),
            "t: line 2, column 11: 'sqrt' takes 1 argument(s), got 2");
  EXPECT_EQ(
      error_of("transform t(lr=1) {\n  skip_if grad > 0\n}\nt()"),
      "t: line 2, column 3: skip_if needs a per-step condition (use sum, any_nonfinite, ...)");
  EXPECT_EQ(error_of("transform t(lr=1) {\n  param = param\n"),
            "line 3, column 1: expected '}' closing the transform, found end of input");
  EXPECT_EQ(error_of("transform t(betas=(0.9, 0.99)) {\n  param = param * betas\n}\nt()"),
            "t: line 2, column 19: 'betas' is a tuple: write betas[0]");
}

// Bounds on hyperparameters: the built-ins' (torch's conditions; the full table is checked
// against torch in TorchParity.HyperparameterChecksMatchTorchsConstructors), a custom
// transform's own, and numbers that are not numbers.
TEST(PipelineText, HyperparameterBoundsAreCheckedWhereValuesAreGiven) {
  EXPECT_EQ(error_of("adamw(lr=nan)"),
            "line 1, column 1: transform 'adamw': lr = nan is invalid: the learning rate must be "
            "in [0, inf]");
  EXPECT_EQ(error_of("adamw(lr=1e999)"),
            "line 1, column 10: number '1e999' is too large for a double (write inf for "
            "infinity)");
  EXPECT_EQ(error_of("sgd(lr=step_lr(base_lr=0.1, step_size=0))"),
            "line 1, column 8: schedule 'step_lr': step_size = 0 is invalid: step_size must be a "
            "whole number in [-inf, 0) or (0, inf]");
  EXPECT_EQ(error_of("sgd(lr=0.1, momentum=0.9, nesterov=true)"), "(no error)");
  const std::string decl =
      "transform t(lr=1e-3 in [0, inf], beta=0.9 in [0, 1), k=2 in (0, 5] or [10, 10] whole) {\n"
      "  param = param - lr * beta * k * grad\n}\n";
  EXPECT_EQ(error_of(decl + "t(beta=0.5, k=10)"), "(no error)");
  EXPECT_EQ(error_of(decl + "t(beta=1)"),
            "line 4, column 1: transform 't': beta = 1 is invalid: beta must be in [0, 1)");
  EXPECT_EQ(error_of(decl + "t(k=2.5)"),
            "line 4, column 1: transform 't': k = 2.5 is invalid: k must be a whole number in "
            "(0, 5] or [10, 10]");
  EXPECT_EQ(error_of(decl + "t(k=7)"),
            "line 4, column 1: transform 't': k = 7 is invalid: k must be a whole number in "
            "(0, 5] or [10, 10]");
  EXPECT_EQ(error_of("transform t(a=2 in [0, 1]) {\n  param = param - a * grad\n}\nt(a=0.5)"),
            "line 1, column 17: the default a = 2 is invalid: a must be in [0, 1]");
  EXPECT_EQ(error_of("transform t(a=1 in [1, 0]) {\n  param = param\n}\nt()"),
            "line 1, column 26: expected an interval from low to high, found ')'");
  EXPECT_EQ(error_of("transform t(a=1 in 0, 1) {\n  param = param\n}\nt()"),
            "line 1, column 20: expected '[' or '(' starting an interval, e.g. [0, inf], found "
            "number 0");
  // The bounds travel with the program: in its text, and into set_hyper.
  auto plan = compile_pipeline(decl + "t()");
  ASSERT_TRUE(plan) << plan.error().message;
  const std::string text = ir::print(plan->program);
  EXPECT_NE(text.find("hyper \"t.beta\" = 0.9 in [0, 1) \"beta\"\n"), std::string::npos) << text;
  EXPECT_NE(text.find("hyper \"t.k\" = 2 in (0, 5] or [10, 10] whole \"k\"\n"), std::string::npos)
      << text;
  auto back = ir::parse_ir(text);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(*back, plan->program);
  auto state = runtime::init_state(*plan, {}, {});
  ASSERT_TRUE(state);
  EXPECT_TRUE(runtime::set_hyper(plan->program, *state, "beta", {0.0}));
  Status st = runtime::set_hyper(plan->program, *state, "beta", {std::nan("")});
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().message, "t.beta = nan is invalid: beta must be in [0, 1)");
  st = runtime::set_hyper(plan->program, *state, "k", {3.5});
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().message,
            "t.k = 3.5 is invalid: k must be a whole number in (0, 5] or [10, 10]");
}

// A text transform restating torch's SGD with momentum gives the built-in's numbers exactly:
// torch's `buf.mul_(momentum).add_(grad, alpha=1 - dampening)` and `param.add_(buf, alpha=-lr)`
// are fused multiply-adds.
TEST(PipelineText, CustomTransformMatchesTheBuiltinItRestates) {
  const char* custom = R"(
    transform my_sgd(lr=0.1, momentum=0.9, dampening=0.0) {
      state momentum_buffer = 0
      let first = step == 1
      momentum_buffer = first ? grad : fma(grad, 1 - dampening, momentum_buffer * momentum)
      param = fma(momentum_buffer, -lr, param)
    }
    my_sgd(lr=0.05, momentum=0.8, dampening=0.25)
  )";
  for (DType t : {DType::f32, DType::f64}) {
    auto a = compile_pipeline(custom, {t, t, t});
    ASSERT_TRUE(a) << a.error().message;
    auto b = compile_pipeline("sgd(lr=0.05, momentum=0.8, dampening=0.25)", {t, t, t});
    ASSERT_TRUE(b);
    std::vector<runtime::HostTensor> params = {runtime::HostTensor::zeros("w", t, {7})};
    for (int i = 0; i < 7; ++i) params[0].set(i, 0.1 * i - 0.3);
    auto sa = runtime::init_state(*a, params, {});
    auto sb = runtime::init_state(*b, params, {});
    ASSERT_TRUE(sa && sb);
    for (int step = 0; step < 5; ++step) {
      runtime::HostTensor g = runtime::HostTensor::zeros("w", t, {7});
      for (int i = 0; i < 7; ++i) g.set(i, std::sin(1.0 + i * 0.7 + step));
      ASSERT_TRUE(runtime::set_grads(*a, *sa, {&g}));
      ASSERT_TRUE(runtime::set_grads(*b, *sb, {&g}));
      runtime::ReferenceBackend(*a).step(*sa);
      runtime::ReferenceBackend(*b).step(*sb);
    }
    EXPECT_EQ(sa->tensors[0].bytes(a->program.param_buffer(), t),
              sb->tensors[0].bytes(b->program.param_buffer(), t));
    EXPECT_EQ(sa->tensors[0].bytes(*a->program.find_buffer("momentum_buffer"), t),
              sb->tensors[0].bytes(*b->program.find_buffer("momentum_buffer"), t));
  }
}

TEST(PipelineText, CustomTransformWithReductionsScalarStateAndSkip) {
  auto p = compile_pipeline(R"(
    # normalized gradient descent with a running count of large steps
    transform normalized(lr=0.01, threshold=10) {
      scalar big_steps = 0
      let n = norm(grad)
      skip_if any_nonfinite(grad)
      big_steps = big_steps + (n > threshold ? 1 : 0)
      param = param - lr * grad / (n + 1e-12)
    }
    normalized(lr=0.5)
  )");
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_EQ(p->passes.size(), 2u);
  ASSERT_TRUE(p->program.find_state("big_steps"));
  std::vector<runtime::HostTensor> params = {runtime::HostTensor::zeros("w", DType::f32, {2})};
  auto s = runtime::init_state(*p, params, {});
  ASSERT_TRUE(s);
  runtime::HostTensor g = runtime::HostTensor::zeros("w", DType::f32, {2});
  g.set(0, 30);
  g.set(1, 40);  // norm 50
  ASSERT_TRUE(runtime::set_grads(*p, *s, {&g}));
  EXPECT_FALSE(runtime::ReferenceBackend(*p).step(*s).skipped);
  EXPECT_FLOAT_EQ(static_cast<float>(runtime::load_element(s->tensors[0].data(0), DType::f32, 0)),
                  -0.3f);
  EXPECT_FLOAT_EQ(static_cast<float>(runtime::load_element(s->tensors[0].data(0), DType::f32, 1)),
                  -0.4f);
  EXPECT_EQ(s->groups[0].states[0], 1.0);
}

// A state may start from what its first step sees (the parameter, for Prodigy's p0 or a decay
// toward the starting point; a per-step value for a scalar): it was "a state starts from a
// number or a hyperparameter's name".
TEST(PipelineText, StatesStartFromTheirFirstStepsValues) {
  auto p = compile_pipeline(R"(
    transform toward_start(lr=0.1, alpha=0.5) {
      state start = param
      scalar first_norm = norm(grad)
      param = param - lr * (grad + alpha * (param - start))
    }
    toward_start()
  )",
                            {DType::f64, DType::f64, DType::f64});
  ASSERT_TRUE(p) << p.error().message;
  runtime::HostTensor w = runtime::HostTensor::zeros("w", DType::f64, {2});
  w.set(0, 1.0);
  w.set(1, -2.0);
  std::vector<runtime::HostTensor> params = {w};
  auto s = runtime::init_state(*p, params, {});
  ASSERT_TRUE(s);
  double x[2] = {1.0, -2.0};
  const double grads[3][2] = {{3, 4}, {1, 1}, {-2, 0.5}};
  for (const auto& gv : grads) {
    runtime::HostTensor g = runtime::HostTensor::zeros("w", DType::f64, {2});
    g.set(0, gv[0]);
    g.set(1, gv[1]);
    ASSERT_TRUE(runtime::set_grads(*p, *s, {&g}));
    runtime::ReferenceBackend(*p).step(*s);
    x[0] -= 0.1 * (gv[0] + 0.5 * (x[0] - 1.0));
    x[1] -= 0.1 * (gv[1] + 0.5 * (x[1] + 2.0));
  }
  const auto at = [&](const char* buffer, int i) {
    return runtime::load_element(s->tensors[0].data(*p->program.find_buffer(buffer)), DType::f64,
                                 i);
  };
  EXPECT_EQ(at("param", 0), x[0]);
  EXPECT_EQ(at("param", 1), x[1]);
  EXPECT_EQ(at("start", 0), 1.0);
  EXPECT_EQ(at("start", 1), -2.0);
  EXPECT_EQ(s->groups[0].states[0], 5.0);  // the first gradient's norm, kept
  EXPECT_EQ(error_of("transform t(lr=1) {\n  scalar x = grad\n  param = param\n}\nt()"),
            "t: line 2, column 14: scalar state 'x' must start from a per-step value (a "
            "per-element one has a value per element)");
  EXPECT_EQ(error_of("transform t(lr=1) {\n  state m = velocity\n  param = param\n}\nt()"),
            "t: line 2, column 13: unknown name 'velocity'");
}

// mod(x, y) is Python's %: the sign of y, floor division (C's fmod and % truncate), for
// element values and for step counts (every k-th step), where a state written only on those
// steps is a pass version that leaves it alone on the others.
TEST(PipelineText, ModIsPythonsRemainder) {
  auto p = compile_pipeline(R"(
    transform every(k=3 in [1, inf] whole) {
      state w = param
      scalar synced = 0
      let sync = mod(step - 1, k) == 0
      w = sync ? mod(param, -1.5) : w
      synced = synced + (sync ? 1 : 0)
      param = mod(param, 1.5) + mod(step, k)
    }
    every(k=3)
  )",
                            {DType::f64, DType::f64, DType::f64});
  ASSERT_TRUE(p) << p.error().message;
  bool versions = false;
  for (const auto& pass : p->passes) versions = versions || !pass.versions.empty();
  EXPECT_TRUE(versions);
  const std::vector<double> start = {-2.5, -0.5, 0.0, 1.25, 7.0, -4.5};
  runtime::HostTensor t = runtime::HostTensor::zeros("x", DType::f64, {6});
  for (int i = 0; i < 6; ++i) t.set(i, start[static_cast<size_t>(i)]);
  std::vector<runtime::HostTensor> params = {t};
  auto s = runtime::init_state(*p, params, {});
  ASSERT_TRUE(s);
  auto python_mod = [](double x, double y) {  // what Python's x % y gives
    double r = std::fmod(x, y);
    return r != 0 && ((r < 0) != (y < 0)) ? r + y : r;
  };
  std::vector<double> x = start, w(6);
  for (int step = 1; step <= 4; ++step) {
    runtime::HostTensor g = runtime::HostTensor::zeros("x", DType::f64, {6});
    ASSERT_TRUE(runtime::set_grads(*p, *s, {&g}));
    runtime::ReferenceBackend(*p).step(*s);
    for (size_t i = 0; i < 6; ++i) {
      if ((step - 1) % 3 == 0) w[i] = python_mod(x[i], -1.5);
      x[i] = python_mod(x[i], 1.5) + step % 3;
    }
  }
  const auto at = [&](const char* buffer, int i) {
    return runtime::load_element(s->tensors[0].data(*p->program.find_buffer(buffer)), DType::f64,
                                 i);
  };
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(at("param", i), x[static_cast<size_t>(i)]) << i;
    EXPECT_EQ(at("w", i), w[static_cast<size_t>(i)]) << i;
  }
  EXPECT_EQ(s->groups[0].states[0], 2.0);  // steps 1 and 4
}

// A per-element choice between per-step values (`grad > 0.5 ? lr : 0.5`) is per-element math
// in the parameters' compute type, as torch.where(mask, lr, 0.5) is float32: it was float64,
// which ran in doubles on the CPU and could not run on WebGPU at all ("WGSL has no f64").
TEST(PipelineText, ElementChoicesBetweenStepValuesTakeTheParametersType) {
  const std::string text = R"(
    transform t(lr=0.01) {
      param = param - (grad > 0.5 ? lr : 0.5) * grad
    }
    t()
  )";
  for (DType dt : {DType::f32, DType::bf16, DType::f64}) {
    auto p = compile_pipeline(text, {dt, dt, dt});
    ASSERT_TRUE(p) << p.error().message;
    int selects = 0;
    for (const auto& in : p->program.insts)
      if (in.op == ir::Op::Select && in.rank == Rank::element) {
        ++selects;
        EXPECT_EQ(in.type, dt == DType::f64 ? DType::f64 : DType::f32) << to_string(dt);
      }
    EXPECT_EQ(selects, 1) << to_string(dt);
  }
}

// The same from the C++ DSL (Ctx::state_from, Ctx::scalar_state_from), and its error.
TEST(PipelineText, CppStatesStartFromTheirFirstStepsValues) {
  auto def = std::make_shared<dsl::Def>();
  def->name = "toward_start";
  def->hypers = {{"lr", {0.1}, "learning rate"}};
  def->apply = [](dsl::Ctx& c) {
    dsl::Value start = c.state_from("start", c.param());
    dsl::Value g0 = c.scalar_state_from("g0", sqrt(sumsq(c.grad())));
    c.set_param(c.param() - c.hyper("lr") * (c.grad() / g0 + 0.5 * (c.param() - start)));
  };
  auto bound = dsl::bind(def, {});
  ASSERT_TRUE(bound) << bound.error().message;
  auto prog = dsl::lower({*bound}, {DType::f64, DType::f64, DType::f64});
  ASSERT_TRUE(prog) << prog.error().message;
  auto p = plan::make_plan(*prog);
  ASSERT_TRUE(p) << p.error().message;
  runtime::HostTensor w = runtime::HostTensor::zeros("w", DType::f64, {1});
  w.set(0, 2.0);
  std::vector<runtime::HostTensor> params = {w};
  auto s = runtime::init_state(*p, params, {});
  ASSERT_TRUE(s);
  double x = 2.0;
  for (double gv : {4.0, 1.0, -2.0}) {
    runtime::HostTensor g = runtime::HostTensor::zeros("w", DType::f64, {1});
    g.set(0, gv);
    ASSERT_TRUE(runtime::set_grads(*p, *s, {&g}));
    runtime::ReferenceBackend(*p).step(*s);
    x -= 0.1 * (gv / 4.0 + 0.5 * (x - 2.0));  // g0: the first gradient's norm, 4
  }
  EXPECT_EQ(runtime::load_element(s->tensors[0].data(0), DType::f64, 0), x);
  auto bad = std::make_shared<dsl::Def>(*def);
  bad->apply = [](dsl::Ctx& c) { c.scalar_state_from("g0", c.grad()); };
  auto b2 = dsl::bind(bad, {});
  ASSERT_TRUE(b2);
  auto e = dsl::lower({*b2});
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().message,
            "toward_start: scalar state 'g0' must start from a per-step value (a per-element one "
            "has a value per element)");
}

// bf16(x) and f16(x) round x there, to nearest even (the reference's casts, and every
// backend's: cast_test's parity checks); like_grad(x) rounds to the gradients' type, as torch's
// in-place ops on bf16 gradients round, and is x itself for f32 gradients (no cast at all).
TEST(PipelineText, RoundingFunctionsRoundWhereTheyAre) {
  const char* text = R"(
    transform r() {
      state b = 0
      state h = 0
      b = bf16(param)
      h = f16(param)
      param = like_grad(grad * 3)
    }
    r()
  )";
  auto casts = [](const plan::Plan& p, DType to) {
    int n = 0;
    for (const auto& pass : p.passes)
      for (const auto& in : pass.body.insts) n += in.op == ir::Op::Cast && in.type == to;
    return n;
  };
  auto f32 = compile_pipeline(text);
  ASSERT_TRUE(f32) << f32.error().message;
  EXPECT_EQ(casts(*f32, DType::bf16), 1);  // bf16(param); like_grad of f32 gradients: none
  EXPECT_EQ(casts(*f32, DType::f16), 1);
  auto bf = compile_pipeline(text, {DType::bf16, DType::bf16, DType::f32});
  ASSERT_TRUE(bf) << bf.error().message;
  EXPECT_EQ(casts(*bf, DType::bf16), 2);  // and like_grad's
  // Values at bf16's and f16's halfway points round to even; 1/3 to the nearest of each.
  const std::vector<double> start = {1.0 + 0x1p-8, 1.0 + 3 * 0x1p-8, 1.0 + 0x1p-11,
                                     1.0 + 3 * 0x1p-11, 1.0 / 3};
  runtime::HostTensor t = runtime::HostTensor::zeros("x", DType::f32, {5});
  runtime::HostTensor g = runtime::HostTensor::zeros("x", DType::f32, {5});
  for (int i = 0; i < 5; ++i) {
    t.set(i, start[static_cast<size_t>(i)]);
    g.set(i, start[static_cast<size_t>(i)]);
  }
  auto s = runtime::init_state(*f32, {t}, {});
  ASSERT_TRUE(s);
  ASSERT_TRUE(runtime::set_grads(*f32, *s, {&g}));
  runtime::ReferenceBackend(*f32).step(*s);
  const auto at = [&](const char* buffer, int i) {
    return runtime::load_element(s->tensors[0].data(*f32->program.find_buffer(buffer)), DType::f32,
                                 i);
  };
  const double want_b[] = {1.0, 1.0 + 0x1p-6, 1.0, 1.0, 0x1.56p-2};
  const double want_h[] = {1.0 + 0x1p-8, 1.0 + 3 * 0x1p-8, 1.0, 1.0 + 0x1p-9, 0x1.554p-2};
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(at("b", i), want_b[i]) << i;
    EXPECT_EQ(at("h", i), want_h[i]) << i;
    EXPECT_EQ(at("param", i), static_cast<double>(static_cast<float>(3 * start[i]))) << i;
  }
}

TEST(PipelineText, DescribesFunctions) {
  std::string d = dsl::describe_text_functions();
  EXPECT_NE(d.find("tensor_norm"), std::string::npos);
  EXPECT_NE(d.find("like_grad"), std::string::npos);
  EXPECT_NE(d.find("lerp"), std::string::npos);
}

}  // namespace
}  // namespace optjit

namespace optjit {
namespace {

std::string repeat(std::string_view s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

std::string body(const std::string& expr) {
  return "transform t(lr=1) {\n  param = param - lr * " + expr + "\n}\nt()";
}

// Inputs that once overflowed the stack (SIGSEGV) are one-line errors at documented limits:
// 200 levels of nesting (calls, parentheses, unary operators, ?:), expression trees 1,000
// deep (a flat sum of 50,000 terms), 1 MiB of text. Just inside the limits still parses.
// Found by the long libFuzzer run: a tuple index beyond size_t was converted before it was
// checked (undefined behaviour; UBSan stopped there).
TEST(PipelineText, TupleIndicesAreCheckedAsWritten) {
  auto body = [](const std::string& index) {
    return "transform t(betas=(0.9, 0.99)) {\n  param = param - betas[" + index +
           "] * grad\n}\nt()";
  };
  EXPECT_EQ(error_of(body("444444444444444444444444444444444444444440")),
            "t: line 2, column 19: 'betas[4.444444444444445e+41]' is not an element of a tuple "
            "hyperparameter");
  EXPECT_EQ(error_of(body("2")),
            "t: line 2, column 19: 'betas[2]' is not an element of a tuple hyperparameter");
  EXPECT_EQ(error_of(body("1")), "(no error)");
}

TEST(PipelineText, DeepAndHugeInputsAreErrorsNotCrashes) {
  struct Case {
    std::string text, message;
  };
  const std::vector<Case> cases = {
      {repeat("chain(", 30000) + "sgd()" + repeat(")", 30000),
       "line 1, column 1201: nested deeper than 200 levels (optjit's limit)"},
      {body(repeat("(", 10000) + "grad" + repeat(")", 10000)),
       "line 2, column 224: nested deeper than 200 levels (optjit's limit)"},
      {body(repeat("-", 20000) + "grad"),
       "line 2, column 223: nested deeper than 200 levels (optjit's limit)"},
      {body(repeat("grad > 0 ? grad : ", 5000) + "grad"),
       "line 2, column 3617: nested deeper than 200 levels (optjit's limit)"},
      {body("(" + repeat("grad + ", 49999) + "grad)"),
       "line 2, column 7023: expression nested deeper than 1000 levels (optjit's limit; a sum "
       "of that many terms counts as that deep)"},
      {std::string(2 << 20, ' ') + "sgd()",
       "pipeline text of 2097157 bytes is longer than optjit's limit of 1048576 bytes"},
  };
  for (const auto& c : cases) {
    auto p = dsl::parse_pipeline(c.text);
    ASSERT_FALSE(p) << c.message;
    EXPECT_EQ(p.error().message, c.message);
  }
  EXPECT_TRUE(dsl::parse_pipeline(repeat("chain(", 150) + "sgd()" + repeat(")", 150)));
  EXPECT_TRUE(dsl::parse_pipeline(body("(" + repeat("grad + ", 900) + "grad)")));
}

}  // namespace
}  // namespace optjit
