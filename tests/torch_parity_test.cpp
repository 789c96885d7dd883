// Every built-in against PyTorch: the reference backend replays each fixture case step by step.
#include <gtest/gtest.h>

#include "backend_parity.h"
#include "ir/builtins.h"
#include "ir/compile.h"
#include "ir/plan.h"
#include "runtime/reference.h"

namespace optjit {
namespace {

using runtime::HostTensor;
using testing::close;
using testing::json_number;
using testing::json_numbers;

struct Tolerance {
  double rtol, floor;
};
Tolerance tolerance(DType t) {
  return t == DType::f64 ? Tolerance{1e-10, 1e-300} : Tolerance{2e-5, 1e-37};
}

class TorchParity : public ::testing::TestWithParam<int> {};

TEST_P(TorchParity, ReferenceBackendMatchesTorch) {
  const auto& c = testing::torch_fixtures()["cases"][GetParam()];
  const std::string name = c["name"].get<std::string>() + "_" + c["dtype"].get<std::string>();
  SCOPED_TRACE(name + ": " + c["pipeline"].get<std::string>());
  auto fixture = testing::load_fixture(GetParam());
  ASSERT_TRUE(fixture) << fixture.error().message;
  const DType dt = fixture->dt;
  const plan::Plan* plan = &fixture->plan;
  const auto& params = fixture->params;
  const auto& names = fixture->names;
  const auto& groups = fixture->groups;
  auto state = runtime::init_state(*plan, params, groups);
  ASSERT_TRUE(state) << state.error().message;
  runtime::ReferenceBackend ref(*plan);
  const Tolerance tol = tolerance(dt);
  const uint32_t pb = plan->program.param_buffer();
  for (size_t step = 0; step < c["grads"].size(); ++step) {
    SCOPED_TRACE("step " + std::to_string(step + 1));
    std::vector<HostTensor> grads;
    auto ptrs = fixture->grads(step, grads);
    ASSERT_TRUE(runtime::set_grads(*plan, *state, ptrs));
    runtime::StepResult r = ref.step(*state);
    EXPECT_EQ(r.skipped, c["skipped"][step].get<bool>());
    for (size_t i = 0; i < names.size(); ++i) {
      const auto& ts = state->tensors[i];
      EXPECT_TRUE(close(testing::buffer_values(ts.data(pb), dt, ts.numel),
                        json_numbers(c["expected"][step][names[i]]), tol.rtol, tol.floor))
          << "parameter " << names[i];
    }
  }
  // Final state, under torch's state_dict names.
  for (size_t i = 0; i < names.size(); ++i) {
    const auto& ts = state->tensors[i];
    const auto& expected = c["state"][names[i]];
    for (auto it = expected.begin(); it != expected.end(); ++it) {
      const std::string& key = it.key();
      if (key == "step") {
        EXPECT_EQ(static_cast<double>(state->step), json_number(it.value())) << names[i] << ".step";
      } else if (auto b = plan->program.find_buffer(key)) {
        EXPECT_TRUE(close(testing::buffer_values(ts.data(*b), dt, ts.numel),
                          json_numbers(it.value()), tol.rtol, tol.floor))
            << names[i] << "." << key;
      } else if (auto s = plan->program.find_state(key)) {
        // torch keeps ASGD's eta/mu as 0-d tensors of the default dtype (f32 for f32 models).
        double rtol = dt == DType::f64 ? tol.rtol : 1e-6;
        EXPECT_TRUE(
            close({state->groups[ts.group].states[*s]}, {json_number(it.value())}, rtol, tol.floor))
            << names[i] << "." << key;
      } else {
        ADD_FAILURE() << "torch has state '" << key << "' that optjit does not";
      }
    }
  }
}

std::string case_name(const ::testing::TestParamInfo<int>& info) {
  const auto& c = testing::torch_fixtures()["cases"][info.param];
  return c["name"].get<std::string>() + "_" + c["dtype"].get<std::string>();
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, TorchParity,
    ::testing::Range(0, static_cast<int>(testing::torch_fixtures()["cases"].size())), case_name);

// Every built-in but master_weights (optjit's own: no peer computes it; quant_test checks it)
// has a case, so a new built-in cannot go without its peer's numbers.
TEST(TorchFixtures, CoverEveryBuiltinTransformAndSchedule) {
  std::string all;
  for (const auto& c : testing::torch_fixtures()["cases"])
    all += " " + c["pipeline"].get<std::string>();
  int covered = 0;
  for (const auto& d : dsl::builtins()) {
    if (d->name == "master_weights") continue;
    // (a name after ' ', '(' or '=' (a schedule): 'adam(' is not 'adamw(')
    bool found = false;
    for (const char* before : {" ", "(", "="})
      found = found || all.find(before + d->name + "(") != std::string::npos;
    EXPECT_TRUE(found) << d->name << " has no fixture from its peer (tests/torch/make_fixtures.py)";
    covered += found;
  }
  EXPECT_GE(covered, 25);
}

// Hyperparameter checks against the constructors of torch.optim, lion_pytorch, torch_optimizer
// and torch.optim.lr_scheduler (a schedule: its constructor and first steps). Each probe is
// tried twice: binding the built-in (what the text form and the C++ DSL do), and set_hyper on
// a compiled program (what --set, --group and the Python bridge do). optjit rejects exactly
// where torch raises, and NaN wherever a bound exists (torch's SGD lets NaN through `lr < 0`).
TEST(TorchParity, HyperparameterChecksMatchTorchsConstructors) {
  const auto& checks = testing::torch_fixtures()["constructor_checks"];
  ASSERT_GT(checks.size(), 400u);
  auto args_of = [](const nlohmann::json& j, const nlohmann::json& options) {
    dsl::Args args;
    for (const auto& [k, v] : j.items())
      args.emplace(k, v.is_array() ? dsl::Arg(json_numbers(v)) : dsl::Arg(json_number(v)));
    for (const auto& [k, v] : options.items()) args.emplace(k, v.get<bool>());
    return args;
  };
  // The program of `name` with `args` (a schedule as sgd's lr), or why not.
  auto compile = [](const std::string& name, bool schedule,
                    const dsl::Args& args) -> Expected<plan::Plan> {
    auto bound = dsl::make(name, args);
    if (!bound) return bound.error();
    if (schedule) bound = dsl::make("sgd", {{"lr", dsl::Arg(*bound)}});
    if (!bound) return bound.error();
    auto program = dsl::lower({*bound});
    if (!program) return program.error();
    return plan::make_plan(*program);
  };
  size_t through_set_hyper = 0;
  for (const auto& c : checks) {
    const bool schedule = c.contains("schedule");
    const std::string name = c[schedule ? "schedule" : "transform"].get<std::string>();
    const std::string hyper = c["hyper"].get<std::string>();
    const nlohmann::json options = c.value("options", nlohmann::json::object());
    const bool torch_raises = c["raises"].get<bool>();
    SCOPED_TRACE(c.dump());
    // 1. Given as an argument.
    auto given = compile(name, schedule, args_of(c["args"], options));
    EXPECT_EQ(!given, torch_raises) << (given ? "accepted" : given.error().message);
    if (!given) {
      EXPECT_NE(given.error().message.find(hyper), std::string::npos) << given.error().message;
    }
    if (!options.empty()) continue;  // options are structural: no set_hyper
    // 2. Set later, on the program of the other arguments; and NaN, where a bound exists.
    auto base = compile(name, schedule, args_of(c["base"], options));
    EXPECT_TRUE(base) << base.error().message;
    if (!base) continue;
    const ir::Program& p = base->program;
    const std::string full = (schedule ? "sgd.lr." : name + ".") + hyper;
    auto index = runtime::match_hyper(p, full);
    EXPECT_TRUE(index) << index.error().message;
    if (!index) continue;
    std::vector<double> values = {json_number(c["value"])};
    if (c.contains("element")) values = json_numbers(c["args"][hyper]);
    auto state = runtime::init_state(*base, {}, {});
    ASSERT_TRUE(state) << state.error().message;
    Status st = runtime::set_hyper(p, *state, full, values);
    EXPECT_EQ(!st, torch_raises) << (st ? "accepted" : st.error().message);
    const ir::HyperDecl& decl = p.hypers[(*index)[c.value("element", size_t{0})]];
    const bool bounded = !decl.allowed.empty() || decl.whole;
    values[c.value("element", size_t{0})] = std::nan("");
    Status nan = runtime::set_hyper(p, *state, full, values);
    EXPECT_EQ(!nan, bounded) << (nan ? "accepted" : nan.error().message);
    ++through_set_hyper;
  }
  EXPECT_GT(through_set_hyper, 400u);
}

}  // namespace
}  // namespace optjit
