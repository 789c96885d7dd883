// One PyTorch fixture, replayed on a backend next to the reference backend: parameters after
// every step against torch and against the reference, and the final state against the reference.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>

#include "cache/kernel_cache.h"
#include "examples.h"
#include "executors.h"
#include "fixtures.h"
#include "ir/compile.h"
#include "ir/text.h"
#include "runtime/reference.h"
#include "test_dir.h"

namespace optjit::testing {

using StepFn = std::function<Expected<runtime::StepResult>(runtime::OptimizerState&)>;
/// Makes a backend for a plan (the plan outlives it) and returns its step function.
using BackendFactory = std::function<Expected<StepFn>(const plan::Plan&)>;

/// Steps on a fresh executor of `kind` for each plan (the device's fixture matrix).
inline BackendFactory executor_steps(const std::string& kind, runtime::ExecutorOptions options) {
  return [kind, options](const plan::Plan& plan) -> Expected<StepFn> {
    auto e = executor(plan, kind, options);
    if (!e) return e.error();
    std::shared_ptr<runtime::Executor> shared = std::move(*e);
    return StepFn([shared](runtime::OptimizerState& s) { return shared->step(s); });
  };
}

/// The GPU-style fixture matrices' launch shapes: small chunks and work-groups, so tensors span
/// several chunks and the reduction tree has depth; odd cases (a pipeline's f64 one) vectors of
/// 4, two per work-item, with tails, on a grid smaller than the chunk count.
inline codegen::GpuLaunch fixture_launch(int index, int even_block, int odd_block) {
  return index % 2 == 0 ? codegen::GpuLaunch{.block = even_block, .chunk_elements = 5}
                        : codegen::GpuLaunch{.block = odd_block,
                                             .items = 2,
                                             .vec = 4,
                                             .groups_per_unit = 1,
                                             .chunk_elements = 12};
}

inline std::vector<double> buffer_values(const uint8_t* buf, DType t, int64_t n) {
  std::vector<double> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(runtime::load_element(buf, t, i));
  return out;
}

inline runtime::HostTensor fixture_tensor(const std::string& name, DType t,
                                          const std::vector<int64_t>& shape,
                                          const std::vector<double>& v) {
  runtime::HostTensor h = runtime::HostTensor::zeros(name, t, shape);
  for (size_t i = 0; i < v.size(); ++i) h.set(static_cast<int64_t>(i), v[i]);
  return h;
}

/// Gradients whose element i of tensor t is value(t, i), in type dt, set on each of `states`;
/// whether every set_grads succeeded.
inline bool set_grads_from(const plan::Plan& plan, const std::vector<runtime::HostTensor>& params,
                           DType dt, const std::function<double(size_t, int64_t)>& value,
                           std::initializer_list<runtime::OptimizerState*> states) {
  std::vector<runtime::HostTensor> grads;
  for (size_t t = 0; t < params.size(); ++t) {
    grads.push_back(runtime::HostTensor::zeros(params[t].name, dt, params[t].shape));
    for (int64_t i = 0; i < params[t].numel(); ++i) grads.back().set(i, value(t, i));
  }
  std::vector<const runtime::HostTensor*> ptrs;
  for (const auto& g : grads) ptrs.push_back(&g);
  bool ok = true;
  for (runtime::OptimizerState* s : states)
    ok = static_cast<bool>(runtime::set_grads(plan, *s, ptrs)) && ok;
  return ok;
}

/// A fixture case ready to run: its pipeline planned for its dtype, parameters and groups.
struct Fixture {
  const nlohmann::json* c;
  DType dt;
  plan::Plan plan;
  std::vector<runtime::HostTensor> params;
  std::vector<std::string> names;
  std::vector<runtime::GroupSpec> groups;
  /// Step k's gradients, as set_grads takes them (the tensors live in `storage`).
  std::vector<const runtime::HostTensor*> grads(size_t k,
                                                std::vector<runtime::HostTensor>& storage) const {
    storage.clear();
    for (size_t i = 0; i < names.size(); ++i)
      storage.push_back(
          fixture_tensor(names[i], dt, params[i].shape, json_numbers((*c)["grads"][k][names[i]])));
    std::vector<const runtime::HostTensor*> ptrs;
    for (const auto& g : storage) ptrs.push_back(&g);
    return ptrs;
  }
};

inline Expected<Fixture> load_fixture(int index) {
  Fixture f;
  f.c = &torch_fixtures()["cases"][index];
  const auto& c = *f.c;
  f.dt = c["dtype"] == "f64" ? DType::f64 : DType::f32;
  auto plan = compile_pipeline(c["pipeline"].get<std::string>(), {f.dt, f.dt, f.dt});
  if (!plan) return plan.error();
  f.plan = std::move(*plan);
  for (auto it = c["params"].begin(); it != c["params"].end(); ++it) {
    f.names.push_back(it.key());
    f.params.push_back(fixture_tensor(it.key(), f.dt,
                                      it.value()["shape"].get<std::vector<int64_t>>(),
                                      json_numbers(it.value()["data"])));
  }
  for (const auto& g : c["groups"]) {
    runtime::GroupSpec spec;
    spec.patterns = g["patterns"].get<std::vector<std::string>>();
    for (auto it = g["overrides"].begin(); it != g["overrides"].end(); ++it)
      spec.overrides[it.key()] = json_number(it.value());
    f.groups.push_back(spec);
  }
  return f;
}

inline void check_backend_on_fixture(int index, const BackendFactory& factory) {
  const auto& c = torch_fixtures()["cases"][index];
  SCOPED_TRACE(c["name"].get<std::string>() + ": " + c["pipeline"].get<std::string>());
  auto fixture = load_fixture(index);
  ASSERT_TRUE(fixture) << fixture.error().message;
  const DType dt = fixture->dt;
  const plan::Plan* plan = &fixture->plan;
  const auto& params = fixture->params;
  const auto& names = fixture->names;
  const auto& groups = fixture->groups;
  auto state = runtime::init_state(*plan, params, groups);
  auto ref_state = runtime::init_state(*plan, params, groups);
  ASSERT_TRUE(state && ref_state);
  auto step = factory(*plan);
  ASSERT_TRUE(step) << step.error().message;
  runtime::ReferenceBackend ref(*plan);
  const double torch_rtol = dt == DType::f64 ? 1e-10 : 2e-5,
               ref_rtol = dt == DType::f64 ? 1e-12 : 2e-6;
  const uint32_t pb = plan->program.param_buffer();
  for (size_t k = 0; k < c["grads"].size(); ++k) {
    SCOPED_TRACE("step " + std::to_string(k + 1));
    std::vector<runtime::HostTensor> grads;
    auto ptrs = fixture->grads(k, grads);
    ASSERT_TRUE(runtime::set_grads(*plan, *state, ptrs));
    ASSERT_TRUE(runtime::set_grads(*plan, *ref_state, ptrs));
    auto r = (*step)(*state);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->skipped, c["skipped"][k].get<bool>());
    ref.step(*ref_state);
    for (size_t i = 0; i < names.size(); ++i) {
      const auto& ts = state->tensors[i];
      auto got = buffer_values(ts.data(pb), dt, ts.numel);
      EXPECT_TRUE(close(got, json_numbers(c["expected"][k][names[i]]), torch_rtol, 1e-37))
          << names[i] << " vs torch";
      EXPECT_TRUE(
          close(got, buffer_values(ref_state->tensors[i].data(pb), dt, ts.numel), ref_rtol, 1e-37))
          << names[i] << " vs reference";
    }
  }
  EXPECT_EQ(state->step, ref_state->step);
  for (size_t i = 0; i < names.size(); ++i)
    for (size_t b = 0; b < plan->program.buffers.size(); ++b) {
      if (plan->buffers[b].role == ir::BufferRole::grad) continue;
      DType st = plan->buffers[b].storage;
      EXPECT_TRUE(
          close(buffer_values(state->tensors[i].data(b), st, state->tensors[i].numel),
                buffer_values(ref_state->tensors[i].data(b), st, ref_state->tensors[i].numel),
                ref_rtol, 1e-37))
          << names[i] << "." << plan->buffers[b].name;
    }
}

/// The device step's combine and fold kernels are work-groups of codegen::kCombineLanes: here a
/// tensor has 1,000 chunks (runs of 4 per lane) and there are 600 tensors (runs of 3 in the
/// fold), with per-tensor (LAMB) and all-tensor (clip) reductions. Same chunks and order as the
/// host-driven step, so every bit must agree. In float64, so that a norm's last bit reaches the
/// parameters. `make(plan, device_step)` builds the backend with chunks of 5 elements.
template <typename Backend>
void check_device_step_combines_like_the_host(
    const std::function<Expected<std::unique_ptr<Backend>>(const plan::Plan&, bool)>& make) {
  const DType f64 = DType::f64;
  auto plan = compile_pipeline("chain(clip_grad_norm(max_norm=0.5), lamb(weight_decay=0.01))",
                               {f64, f64, f64});
  ASSERT_TRUE(plan) << plan.error().message;
  std::vector<runtime::HostTensor> params;
  params.push_back(runtime::HostTensor::zeros("big", f64, {5000}));
  for (int t = 1; t < 600; ++t)
    params.push_back(runtime::HostTensor::zeros(fmt::format("w{}", t), f64, {t % 13 + 1}));
  for (size_t t = 0; t < params.size(); ++t)
    for (int64_t i = 0; i < params[t].numel(); ++i) params[t].set(i, std::sin(0.37 * i + t) * 0.5);
  auto run = [&](bool device_step) {
    auto b = make(*plan, device_step);
    EXPECT_TRUE(b) << b.error().message;
    auto s = runtime::init_state(*plan, params, {});
    EXPECT_TRUE(s);
    for (int k = 0; k < 2; ++k) {
      EXPECT_TRUE(set_grads_from(*plan, params, f64,
                                 [k](size_t t, int64_t i) {
                                   return std::cos(1.3 * i + 0.7 * k + t) *
                                          std::exp(std::sin(3.1 * t));
                                 },
                                 {&*s}));
      auto r = (*b)->step(*s);
      EXPECT_TRUE(r) << r.error().message;
    }
    return std::move(*s);
  };
  const runtime::OptimizerState host = run(false), device = run(true);
  const uint32_t param = plan->program.param_buffer();
  size_t differ = 0;
  for (size_t t = 0; t < params.size(); ++t)
    differ += host.tensors[t].bytes(param, f64) != device.tensors[t].bytes(param, f64);
  EXPECT_EQ(differ, 0u) << "tensors whose parameters differ between the host and device steps";
}

/// A device-resident step (the step count, scalar states and hyperparameters on the device)
/// follows the host: a learning rate set between steps takes effect, and a checkpoint restored
/// on the host (then `state_changed()`) is where the next step starts. Clip + NAdam in two
/// groups: an all-tensor reduction, a scalar state (mu_product) and per-group hyperparameters.
template <typename Backend>
void check_device_step_follows_the_host(
    const std::function<Expected<std::unique_ptr<Backend>>(const plan::Plan&)>& make) {
  auto plan = compile_pipeline("chain(clip_grad_norm(max_norm=0.5), nadam(lr=0.01))");
  ASSERT_TRUE(plan) << plan.error().message;
  std::vector<runtime::HostTensor> params;
  for (int64_t n : {300, 7, 1000}) {
    params.push_back(
        runtime::HostTensor::zeros(fmt::format("w{}", params.size()), DType::f32, {n}));
    for (int64_t i = 0; i < n; ++i) params.back().set(i, std::sin(0.1 * i + n));
  }
  runtime::GroupSpec second;
  second.patterns = {"w1"};
  second.overrides["lr"] = 0.05;
  auto dev = runtime::init_state(*plan, params, {second});
  auto ref = runtime::init_state(*plan, params, {second});
  ASSERT_TRUE(dev && ref);
  auto backend = make(*plan);
  ASSERT_TRUE(backend) << backend.error().message;
  runtime::ReferenceBackend reference(*plan);
  auto step_both = [&](int k) {
    ASSERT_TRUE(set_grads_from(*plan, params, DType::f32,
                               [k](size_t, int64_t i) { return std::cos(0.7 * i + k) * (k + 1); },
                               {&*dev, &*ref}));
    auto r = (*backend)->step(*dev);
    ASSERT_TRUE(r) << r.error().message;
    reference.step(*ref);
    ASSERT_EQ(dev->step, ref->step);
    for (size_t g = 0; g < ref->groups.size(); ++g)
      EXPECT_TRUE(close(dev->groups[g].states, ref->groups[g].states, 1e-12, 0)) << "group " << g;
    for (size_t t = 0; t < params.size(); ++t)
      for (size_t b = 0; b < plan->buffers.size(); ++b) {
        if (plan->buffers[b].role == ir::BufferRole::grad) continue;
        const DType st = plan->buffers[b].storage;
        EXPECT_TRUE(close(buffer_values(dev->tensors[t].data(b), st, dev->tensors[t].numel),
                          buffer_values(ref->tensors[t].data(b), st, ref->tensors[t].numel), 2e-6,
                          1e-30))
            << "step " << dev->step << ", tensor " << t << ", " << plan->buffers[b].name;
      }
  };
  step_both(0);
  const runtime::TensorFile checkpoint = runtime::export_state(*plan, *ref);
  step_both(1);
  ASSERT_TRUE(runtime::set_hyper(plan->program, *dev, "lr", {0.002}, 1u));
  ASSERT_TRUE(runtime::set_hyper(plan->program, *ref, "lr", {0.002}, 1u));
  step_both(2);
  EXPECT_EQ(dev->step, 3);
  // Back to the checkpoint after step 1: parameters, state buffers, mu_product and the count.
  for (auto* s : {&*dev, &*ref}) {
    ASSERT_TRUE(runtime::import_state(*plan, *s, checkpoint));
    for (size_t t = 0; t < params.size(); ++t) {
      const runtime::HostTensor* saved = checkpoint.find(params[t].name);
      ASSERT_TRUE(saved);
      for (int64_t i = 0; i < params[t].numel(); ++i)
        runtime::store_element(s->tensors[t].data(plan->program.param_buffer()), DType::f32, i,
                               saved->get(i));
    }
  }
  (*backend)->state_changed();
  EXPECT_EQ(dev->step, 1);
  step_both(1);
  EXPECT_EQ(dev->step, 2);
}

/// Every buffer of every tensor but the gradients, and every group's scalar states, of `got`
/// are `want`'s, bit for bit.
inline void expect_same_state(const plan::Plan& plan,
                              const std::vector<runtime::HostTensor>& params,
                              const runtime::OptimizerState& got,
                              const runtime::OptimizerState& want) {
  ASSERT_EQ(got.tensors.size(), params.size());
  ASSERT_EQ(want.tensors.size(), params.size());
  for (size_t t = 0; t < params.size(); ++t)
    for (size_t b = 0; b < plan.buffers.size(); ++b) {
      if (plan.buffers[b].role == ir::BufferRole::grad) continue;
      const size_t n = runtime::buffer_bytes(plan, b, want.tensors[t]);
      EXPECT_EQ(got.tensors[t].bytes(b, n), want.tensors[t].bytes(b, n))
          << params[t].name << " " << plan.buffers[b].name;
    }
  for (size_t g = 0; g < want.groups.size(); ++g)
    EXPECT_EQ(got.groups[g].states, want.groups[g].states) << "group " << g;
}

/// Pass versions (plan::Pass::versions) are the whole pass body with some of its selects
/// decided, stores of unchanged values dropped and loads no one needs removed: stepping with
/// them must give every bit stepping with the whole body gives. SGD with momentum under
/// Lookahead, in two groups whose conditions differ within one launch (no momentum and a sync
/// every 2nd step in one, momentum and a sync every 3rd in the other), 7 steps so that every
/// version runs, with f32 and with 8-bit slow weights (the 5000-element tensor's quantized).
inline void check_versions_step_as_the_whole_body(
    const std::function<Expected<std::unique_ptr<runtime::Executor>>(const plan::Plan&)>& make) {
  const std::string lookahead = example_transforms("lookahead.opt");
  for (const char* format : {"f32", "8bit"}) {
    SCOPED_TRACE(format);
    auto plan = compile_pipeline(
        lookahead + fmt::format("chain(sgd(lr=0.1, momentum=0.9), lookahead(k=3, alpha=0.5, "
                                "state_format=\"{}\"))",
                                format));
    ASSERT_TRUE(plan) << plan.error().message;
    ASSERT_FALSE(plan->passes[0].versions.empty()) << "no versions to check";
    plan::Plan whole = *plan;
    for (auto& p : whole.passes) p.versions.clear(), p.guards.clear();
    std::vector<runtime::HostTensor> params;
    for (int64_t n : {300, 7, 1000, 5000}) {
      params.push_back(
          runtime::HostTensor::zeros(fmt::format("w{}", params.size()), DType::f32, {n}));
      for (int64_t i = 0; i < n; ++i) params.back().set(i, std::sin(0.1 * i + n));
    }
    runtime::GroupSpec second;
    second.patterns = {"w1", "w3"};
    second.overrides = {{"momentum", 0.0}, {"k", 2.0}};
    auto run = [&](const plan::Plan& p) {
      auto s = runtime::init_state(p, params, {second});
      EXPECT_TRUE(s) << s.error().message;
      auto b = make(p);
      EXPECT_TRUE(b) << b.error().message;
      if (!s || !b) return runtime::OptimizerState{};
      for (int k = 0; k < 7; ++k) {
        EXPECT_TRUE(set_grads_from(
            p, params, DType::f32,
            [k](size_t, int64_t i) { return std::cos(0.7 * i + k) * (k + 1); }, {&*s}));
        auto r = (*b)->step(*s);
        EXPECT_TRUE(r) << r.error().message;
      }
      return std::move(*s);
    };
    expect_same_state(*plan, params, run(*plan), run(whole));
  }
}

/// A condition carried from one pass to the next in a scratch buffer of booleans (the planner
/// stores `grad > 0.5` in a byte rather than reading the 4-byte gradient again after the norm):
/// the backend's steps follow the reference's. (The CPU loaded the byte as the condition
/// itself, and LLVM refused the pass: "Invalid operands for select instruction".)
inline void check_carried_conditions_step_as_the_reference(
    const std::function<Expected<std::unique_ptr<runtime::Executor>>(const plan::Plan&)>& make) {
  auto plan = compile_pipeline(R"(
transform t(lr=0.01) {
  state m = 0.25
  m = 0.9 * m + (grad > 0.5 ? m : 2 * m) * norm(grad) * 0.001
  param = param - lr * m
}
t()
)");
  ASSERT_TRUE(plan) << plan.error().message;
  ASSERT_EQ(plan->carries.size(), 1u);
  ASSERT_EQ(plan->carries[0].how, plan::Carry::scratch);
  ASSERT_EQ(plan->buffers[plan->carries[0].buffer].storage, DType::b1);
  std::vector<runtime::HostTensor> params;
  for (int64_t n : {1000, 3, 77}) {
    params.push_back(
        runtime::HostTensor::zeros(fmt::format("w{}", params.size()), DType::f32, {n}));
    for (int64_t i = 0; i < n; ++i) params.back().set(i, std::sin(0.3 * i + n));
  }
  auto s = runtime::init_state(*plan, params, {});
  auto ref = runtime::init_state(*plan, params, {});
  ASSERT_TRUE(s && ref);
  auto b = make(*plan);
  ASSERT_TRUE(b) << b.error().message;
  runtime::ReferenceBackend reference(*plan);
  for (int k = 0; k < 3; ++k) {
    ASSERT_TRUE(set_grads_from(*plan, params, DType::f32,
                               [k](size_t, int64_t i) { return std::cos(0.7 * i + k); },
                               {&*s, &*ref}));
    auto r = (*b)->step(*s);
    ASSERT_TRUE(r) << r.error().message;
    reference.step(*ref);
  }
  for (size_t t = 0; t < params.size(); ++t)
    for (const char* name : {"param", "m"}) {
      const uint32_t buf = *plan->program.find_buffer(name);
      const int64_t n = s->tensors[t].numel;
      const auto got = buffer_values(s->tensors[t].data(buf), DType::f32, n);
      const auto want = buffer_values(ref->tensors[t].data(buf), DType::f32, n);
      for (int64_t i = 0; i < n; ++i)
        EXPECT_NEAR(got[i], want[i], 1e-6 * std::abs(want[i]) + 1e-7)
            << params[t].name << " " << name << "[" << i << "]";
    }
}

/// A cast to bf16 or f16 inside a pass rounds there, as the reference's casts do (backends keep
/// such values in f32 registers, and a cast was a no-op: cast(cast(p, bf16), f32) came back
/// unrounded); Inf and NaN cast to i64 are 0. A transform of the C++ DSL (the text form has no
/// cast) keeps the casts of its parameter in three states, and the parameter itself in a bf16
/// and an f16 state, for f32 parameters and, where the backend has f64 (`f64`), f64 ones, whose
/// values round once, cast or stored, as the reference's: 1 + 2^-8 + 2^-30 is bf16 1 + 2^-7, but
/// its nearest f32, 1 + 2^-8, is a halfway point that rounds to 1.
/// The parameters go in unchanged, so every bit must be the reference's. Without `i64` (WGSL
/// has none) the i64 state is left out. `make(plan)` builds the backend. Where it may flush f32
/// subnormals (`may_flush`: WGSL allows it, NVIDIA's Vulkan driver does), an element of an f32
/// subnormal parameter may instead be what the reference gives for it flushed to zero.
inline void check_casts_round_as_the_reference(
    const std::function<Expected<std::unique_ptr<runtime::Executor>>(const plan::Plan&)>& make,
    bool f64 = true, bool i64 = true, bool may_flush = false) {
  auto def = std::make_shared<dsl::Def>();
  def->name = "casts";
  def->doc = "its parameter cast to bf16, f16 and i64";
  def->apply = [i64](dsl::Ctx& c) {
    const DType t = c.element_type();
    dsl::Value p = c.param() + 0.0 * c.grad();
    for (const char* name : {"bf16", "f16", "i64", "stored_bf16", "stored_f16"})
      c.state(name);                // declared: zeros at first
    c.set_state("stored_bf16", p);  // stored in bf16 and f16 (state_format below)
    c.set_state("stored_f16", p);
    c.set_state("bf16", dsl::cast(dsl::cast(p, DType::bf16), t));
    c.set_state("f16", dsl::cast(dsl::cast(p, DType::f16), t));
    if (i64) {
      // Inf above 2, NaN for 0, else p itself, truncated.
      dsl::Value odd =
          dsl::select(p > 2.0, p / (p - p), dsl::select(p == 0.0, (p - p) / (p - p), p));
      c.set_state("i64", dsl::cast(dsl::cast(odd, DType::i64), t));
    }
  };
  auto bound = dsl::bind(def, {{"state_format", "stored_bf16:bf16,stored_f16:f16"}});
  ASSERT_TRUE(bound) << bound.error().message;
  std::vector<double> values = {1.0,
                                -1.0,
                                0.0,
                                1.0 + 0x1p-8,
                                1.0 + 3 * 0x1p-8,
                                -(1.0 + 0x1p-8),  // bf16 halfway: to even
                                1.0 + 0x1p-11,
                                1.0 + 3 * 0x1p-11,  // f16 halfway
                                65504.0,
                                65519.0,
                                65520.0,
                                70000.0,
                                1e-5,
                                3e-8,
                                6e-8,
                                1e-9,  // f16 range's ends
                                3.3895313892515355e38,
                                3.39e38,
                                1e-39,
                                2.5,
                                3.7,
                                -2.5,
                                2.75,
                                100.3,
                                0.1,
                                1.0 / 3};
  for (int i = 0; i < 40; ++i) values.push_back(std::ldexp(std::sin(1.3 * i + 0.4), i % 9 - 4));
  std::vector<DType> dtypes = {DType::f32};
  if (f64) dtypes.push_back(DType::f64);
  for (DType dt : dtypes) {
    SCOPED_TRACE(std::string(to_string(dt)));
    auto program = dsl::lower(dsl::Pipeline{*bound}, {dt, dt, dt});
    ASSERT_TRUE(program) << program.error().message;
    auto plan = plan::make_plan(*program);
    ASSERT_TRUE(plan) << plan.error().message;
    std::vector<double> v = values;
    if (dt == DType::f64)  // past a halfway point by less than an f32 ulp
      for (double x : {1.0 + 0x1p-8 + 0x1p-30, 1.0 + 0x1p-11 + 0x1p-40, -(1.0 + 0x1p-8 + 0x1p-35),
                       1.0 + 3 * 0x1p-8 - 0x1p-33})
        v.push_back(x);
    std::vector<runtime::HostTensor> params = {
        runtime::HostTensor::zeros("w", dt, {static_cast<int64_t>(v.size())})};
    for (size_t i = 0; i < v.size(); ++i) params[0].set(static_cast<int64_t>(i), v[i]);
    // The same parameters with f32 subnormals flushed, as an adapter that flushes sees them.
    std::vector<runtime::HostTensor> flushed = params;
    for (size_t i = 0; i < v.size(); ++i)
      if (dt == DType::f32 && std::fpclassify(static_cast<float>(v[i])) == FP_SUBNORMAL)
        flushed[0].set(static_cast<int64_t>(i), std::copysign(0.0, v[i]));
    auto s = runtime::init_state(*plan, params, {});
    auto ref = runtime::init_state(*plan, params, {});
    auto ftz = runtime::init_state(*plan, flushed, {});
    ASSERT_TRUE(s && ref && ftz);
    ASSERT_TRUE(set_grads_from(*plan, params, dt, [](size_t, int64_t) { return 0.0; },
                               {&*s, &*ref, &*ftz}));
    auto b = make(*plan);
    ASSERT_TRUE(b) << b.error().message;
    auto r = (*b)->step(*s);
    ASSERT_TRUE(r) << r.error().message;
    runtime::ReferenceBackend(*plan).step(*ref);
    runtime::ReferenceBackend(*plan).step(*ftz);
    size_t flushes = 0;
    for (const char* name : {"param", "bf16", "f16", "i64", "stored_bf16", "stored_f16"}) {
      const auto buf = plan->program.find_buffer(name);
      if (!buf) continue;
      const auto n = static_cast<int64_t>(v.size());
      const DType st = plan->buffers[*buf].storage;
      const auto got = buffer_values(s->tensors[0].data(*buf), st, n);
      const auto want = buffer_values(ref->tensors[0].data(*buf), st, n);
      const auto want_flushed = buffer_values(ftz->tensors[0].data(*buf), st, n);
      for (int64_t i = 0; i < n; ++i) {  // bit for bit (no NaN is stored here)
        const bool flush = may_flush && got[i] != want[i] && got[i] == want_flushed[i] &&
                           std::signbit(got[i]) == std::signbit(want_flushed[i]);
        flushes += flush;
        if (!flush) {
          EXPECT_EQ(got[i], want[i]) << name << " of " << v[i];
        }
      }
    }
    // Every buffer's bytes (the loop above has all but the gradient's) where none was flushed.
    if (flushes == 0) expect_same_state(*plan, params, *s, *ref);
    if (flushes)
      std::printf("%zu values as an adapter that flushes subnormals gives them\n", flushes);
    // Not vacuous: the reference rounded (to even at the halfway points).
    const uint32_t bf = *plan->program.find_buffer("bf16");
    EXPECT_EQ(buffer_values(ref->tensors[0].data(bf), dt, 5)[3], 1.0);
    EXPECT_EQ(buffer_values(ref->tensors[0].data(bf), dt, 5)[4], 1.0 + 0x1p-6);
  }
}

/// Conversions to integers that C leaves undefined out of range are defined, and the same on
/// every backend (ir::round_to): a store to a u16 buffer and join16's low half truncate and
/// saturate at 0 and 65535, NaN 0; a cast to i64 truncates and saturates at -2^53 and 2^53
/// (kI64Limit), Inf and NaN 0, and so do i64 add, sub and mul (a kernel's int64 arithmetic
/// wrapped past 2^63, or was undefined in C, where the reference's doubles went on; its int64
/// values past 2^53 parted from theirs), and the load of an i64 scalar state that starts at a
/// hyperparameter's value (a b1 one's is 0 or 1). Written as IR (the text form has no u16 and no
/// join16), on parameters from NaN, the infinities and +-1e30 to the u16 range's edges:
/// element-rank i64 casts in a pass, and scalar-rank ones of hyperparameters (the host's or the
/// device step's scalar program). The reference's values are checked against the rule first, then
/// the backend's bit for bit. Found by tests/fuzz's ir_text target: the reference's join16 was
/// undefined behaviour for NaN, LLVM's fptoui gave poison, C's casts were undefined.
/// Stochastic rounding's key and first element are whole numbers below 2^53 (truncated), else
/// 0 (ir::sr_key): a key of 1e30 or Inf was a conversion past 2^64, undefined in C and LLVM.
/// `f64`: also f64 parameters; `i64`: the backend has i64 (WGSL has none).
inline void check_integer_conversions_saturate(
    const std::function<Expected<std::unique_ptr<runtime::Executor>>(const plan::Plan&)>& make,
    bool f64 = true, bool i64 = true) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // (5e15, -5e15, 8e15: their sums pass 2^53; 9.4e7's square does not reach 2^53, 9.5e7's
  // does; +-2^53 at the edge, 2^52 whose sum reaches it.)
  const std::vector<double> v = {0.0,     -0.0,   3.7,   1234.9, 65535.0, 65535.9,  65536.0, 7e4,
                                 -3.0,    -0.5,   1e30,  -1e30,  inf,     -inf,     nan,     9.3e18,
                                 -9.3e18, 9.2e18, 1e-30, -1e-30, 4.2e9,   -65535.0, 5e15,    -5e15,
                                 8e15,    9.4e7,  9.5e7, -9.5e7, 0x1p53,  -0x1p53,  0x1p52};
  // The scalar casts' operands, one hyperparameter each.
  const std::vector<double> h = {1e30, -1e30, -0.5, 9.3e18, 2.5, -9.2e18, 5e15, 9.5e7, 0x1p52, 0};
  // Stochastic rounding's keys (ir::sr_key: whole numbers below 2^53, truncated, else 0), a
  // hyperparameter each: the first two are the controls the others must equal.
  const std::vector<double> keys = {0,    2,   2.5, 0x1p52 + 1, 0x1p53, 0x1p53 + 2,
                                    1e30, inf, -1,  -inf,       nan};
  auto same_key_as = [&](size_t k) -> std::optional<size_t> {
    if (keys[k] == 2.5) return 1;
    if (k > 0 && (!(keys[k] >= 0) || keys[k] >= 0x1p53)) return 0;
    return std::nullopt;
  };
  std::vector<DType> dtypes = {DType::f32};
  if (f64) dtypes.push_back(DType::f64);
  for (DType dt : dtypes) {
    SCOPED_TRACE(std::string(to_string(dt)));
    const std::string T(to_string(dt));
    std::string text = "optjit-ir 1\n";
    for (size_t k = 0; k < h.size(); ++k) text += fmt::format("hyper \"h{}\" = {}\n", k, h[k]);
    for (size_t k = 0; k < keys.size(); ++k)
      text += fmt::format("hyper \"k{}\" = {}\n", k, keys[k]);
    text += fmt::format(
        "buffer \"param\" {0} param\nbuffer \"grad\" {0} grad\nbuffer \"u16\" u16 state init "
        "0\nbuffer \"joined\" f32 state init 0\n",
        T);
    for (size_t k = 0; k < keys.size(); ++k)
      text += fmt::format("buffer \"sr{}\" f32 state init 0\n", k);
    const std::vector<std::string> element_ops = {"isum", "idif", "isq", "inegsq"};
    // Each hyperparameter's scalar-rank i64 values (below) and the buffers that store them.
    const std::vector<std::pair<std::string, std::string>> scalar_ops = {
        {"hi", "s"}, {"hs", "ssum"}, {"hq", "ssq"}, {"hl", "sload"}, {"hf", "sflag"}};
    if (i64) {
      text += fmt::format("buffer \"i64\" {} state init 0\n", T);
      for (const auto& name : element_ops)
        text += fmt::format("buffer \"{}\" {} state init 0\n", name, T);
      for (size_t k = 0; k < h.size(); ++k) {
        for (const auto& [value, buffer] : scalar_ops)
          text += fmt::format("buffer \"{}{}\" {} state init 0\n", buffer, k, T);
        text += fmt::format(
            "state \"count{0}\" i64 init hyper \"h{0}\"\nstate \"flag{0}\" b1 init hyper "
            "\"h{0}\"\n",
            k);
      }
    }
    text += fmt::format("%p = load \"param\" : {0}\n%g = load \"grad\" : {0}\n", T);
    if (dt != DType::f32) text += "%pf = cast %p : f32\n";  // join16 is on f32 patterns
    text += fmt::format(
        "%c = const 1.5 : f32\n%j = join16 %c, {} : f32\nstore \"u16\", %p\nstore \"joined\", "
        "%j\n",
        dt == DType::f32 ? "%p" : "%pf");
    // Stochastic rounding of the parameter (in f32) under each key, in one stream (the first
    // buffer's: the stream is part of what the bits depend on).
    text += "%first = first : i64\n%firstf = cast %first : f64\n";
    for (size_t k = 0; k < keys.size(); ++k)
      text += fmt::format(
          "%k{0} = hyper \"k{0}\" : f64\n%sr{0} = sround \"sr0\", {1}, %k{0}, %firstf : "
          "f32\nstore \"sr{0}\", %sr{0}\n",
          k, dt == DType::f32 ? "%p" : "%pf");
    if (i64) {
      text += fmt::format("%pi = cast %p : i64\n%pb = cast %pi : {}\nstore \"i64\", %pb\n", T);
      // Element-rank arithmetic: p + p, -p - p, p * p, p * -p.
      text +=
          "%pn = neg %pi : i64\n%isum = add %pi, %pi : i64\n%idif = sub %pn, %pi : i64\n"
          "%isq = mul %pi, %pi : i64\n%inegsq = mul %pi, %pn : i64\n";
      for (const auto& name : element_ops)
        text += fmt::format("%{0}b = cast %{0} : {1}\nstore \"{0}\", %{0}b\n", name, T);
      text += fmt::format("%zero = const 0 : {}\n%g0 = mul %g, %zero : {}\n", T, T);
      // Scalar-rank: each hyperparameter's cast, its sum and square, and the i64 state that
      // starts at it, each added to a zero element to store it.
      for (size_t k = 0; k < h.size(); ++k) {
        text += fmt::format(
            "%h{0} = hyper \"h{0}\" : f64\n%hi{0} = cast %h{0} : i64\n%hs{0} = add %hi{0}, "
            "%hi{0} : i64\n%hq{0} = mul %hi{0}, %hi{0} : i64\n%hl{0} = sload \"count{0}\" : "
            "i64\n%hf{0} = sload \"flag{0}\" : b1\n",
            k);
        for (const auto& [value, buffer] : scalar_ops)
          text += fmt::format(
              "%{0}b{2} = cast %{0}{2} : {3}\n%{0}e{2} = add %g0, %{0}b{2} : {3}\nstore "
              "\"{1}{2}\", %{0}e{2}\n",
              value, buffer, k, T);
      }
    }
    auto program = ir::parse_ir(text);
    ASSERT_TRUE(program) << program.error().message << "\n" << text;
    auto plan = plan::make_plan(*program);
    ASSERT_TRUE(plan) << plan.error().message;
    std::vector<runtime::HostTensor> params = {
        fixture_tensor("w", dt, {static_cast<int64_t>(v.size())}, v)};
    auto s = runtime::init_state(*plan, params, {});
    auto ref = runtime::init_state(*plan, params, {});
    ASSERT_TRUE(s && ref);
    ASSERT_TRUE(
        set_grads_from(*plan, params, dt, [](size_t, int64_t) { return 0.0; }, {&*s, &*ref}));
    auto b = make(*plan);
    ASSERT_TRUE(b) << b.error().message;
    auto r = (*b)->step(*s);
    ASSERT_TRUE(r) << r.error().message;
    runtime::ReferenceBackend(*plan).step(*ref);
    const auto n = static_cast<int64_t>(v.size());
    auto values = [&](const runtime::OptimizerState& st, const char* name) {
      const uint32_t buf = *plan->program.find_buffer(name);
      return buffer_values(st.tensors[0].data(buf), plan->buffers[buf].storage, n);
    };
    // The reference against the rule.
    auto u16 = [](double x) { return x != x ? 0.0 : std::clamp(std::trunc(x), 0.0, 65535.0); };
    auto i64_of = [](double x) {
      return std::isfinite(x) ? std::clamp(std::trunc(x), -0x1p53, 0x1p53) + 0.0 : 0.0;
    };
    for (int64_t i = 0; i < n; ++i) {
      const double p = params[0].get(i);  // the parameter as stored (f32: rounded)
      const double pf = static_cast<float>(p);
      EXPECT_EQ(values(*ref, "u16")[i], u16(p)) << p;
      const uint32_t joined =
          (std::bit_cast<uint32_t>(1.5f) & 0xffff0000u) | static_cast<uint32_t>(u16(pf));
      EXPECT_EQ(values(*ref, "joined")[i], std::bit_cast<float>(joined)) << p;
      if (i64) {
        const double pi = i64_of(p);
        EXPECT_EQ(values(*ref, "i64")[i], round_to(dt, pi)) << p;
        // (i64_of of the result in long double: exact within 2^53, and past it wherever the
        // exact result is, which i64_of makes 2^53 either way.)
        auto exact = [&](long double x) { return round_to(dt, i64_of(static_cast<double>(x))); };
        EXPECT_EQ(values(*ref, "isum")[i], exact(2.0L * pi)) << p;
        EXPECT_EQ(values(*ref, "idif")[i], exact(-2.0L * pi)) << p;
        EXPECT_EQ(values(*ref, "isq")[i], exact(static_cast<long double>(pi) * pi)) << p;
        EXPECT_EQ(values(*ref, "inegsq")[i], exact(-static_cast<long double>(pi) * pi)) << p;
        for (size_t k = 0; k < h.size(); ++k) {
          const double hi = i64_of(h[k]);
          auto at = [&](const char* name) {
            return values(*ref, fmt::format("{}{}", name, k).c_str())[i];
          };
          EXPECT_EQ(at("s"), round_to(dt, hi)) << h[k];
          EXPECT_EQ(at("ssum"), exact(2.0L * hi)) << h[k];
          EXPECT_EQ(at("ssq"), exact(static_cast<long double>(hi) * hi)) << h[k];
          EXPECT_EQ(at("sload"), round_to(dt, hi)) << h[k];
          EXPECT_EQ(at("sflag"), h[k] != 0 ? 1.0 : 0.0) << h[k];
        }
      }
    }
    // Out-of-range keys draw key 0's bits, 2.5 draws 2's (and the controls differ).
    auto sr = [&](const runtime::OptimizerState& st, size_t k) {
      return values(st, fmt::format("sr{}", k).c_str());
    };
    EXPECT_NE(sr(*ref, 0), sr(*ref, 1));
    for (size_t k = 0; k < keys.size(); ++k)
      if (auto like = same_key_as(k)) {
        const auto drawn = sr(*ref, k), expected = sr(*ref, *like);
        for (int64_t i = 0; i < n; ++i)
          EXPECT_TRUE(std::bit_cast<uint64_t>(drawn[i]) == std::bit_cast<uint64_t>(expected[i]) ||
                      (drawn[i] != drawn[i] && expected[i] != expected[i]))
              << "key " << keys[k] << " of " << v[i];
      }
    // The backend against the reference, bit for bit (NaN converts to 0; sround keeps NaN).
    for (size_t k = 0; k < keys.size(); ++k) {
      const auto got = sr(*s, k), want = sr(*ref, k);
      for (int64_t i = 0; i < n; ++i)
        EXPECT_TRUE(std::bit_cast<uint64_t>(got[i]) == std::bit_cast<uint64_t>(want[i]) ||
                    (got[i] != got[i] && want[i] != want[i]))
            << "sround of " << v[i] << " with key " << keys[k] << ": " << got[i] << " for "
            << want[i];
    }
    std::vector<std::string> names = {"u16", "joined"};
    if (i64) {
      names.push_back("i64");
      names.insert(names.end(), element_ops.begin(), element_ops.end());
      for (size_t k = 0; k < h.size(); ++k)
        for (const auto& [value, buffer] : scalar_ops) names.push_back(buffer + std::to_string(k));
    }
    for (const auto& name : names) {
      const auto got = values(*s, name.c_str()), want = values(*ref, name.c_str());
      for (int64_t i = 0; i < n; ++i)
        EXPECT_EQ(std::bit_cast<uint64_t>(got[i]), std::bit_cast<uint64_t>(want[i]))
            << name << " of " << v[i] << ": " << got[i] << " for " << want[i];
    }
  }
}

/// fma(a, b, c) rounds once, as std::fma does, bit for bit, in f32 and (where the backend has
/// it, `f64`) f64: a DSL transform stores fma(param, grad, addend) in a state, with `addend`
/// a state written here before the step. The cases: c = -(a * b rounded), whose fused result
/// is the product's rounding error and whose unfused one is 0; c of a's and b's size with
/// random significands; exponents from 2^-30 to 2^30 (products and their errors stay normal in
/// f32, where WGSL's emulation is exact); and zeros, infinities, NaN, an overflowing product
/// and one below the normal range (which WGSL's emulation leaves to the unfused sum: c
/// dominates it here).
inline void check_fma_rounds_once(
    const std::function<Expected<std::unique_ptr<runtime::Executor>>(const plan::Plan&)>& make,
    bool f64 = true) {
  auto def = std::make_shared<dsl::Def>();
  def->name = "fused";
  def->doc = "fma(param, grad, addend)";
  def->apply = [](dsl::Ctx& c) {
    dsl::Value addend = c.state("addend");
    c.state("fused");
    c.set_state("addend", addend);
    c.set_state("fused", dsl::fma(c.param(), c.grad(), addend));
  };
  auto bound = dsl::bind(def, {});
  ASSERT_TRUE(bound) << bound.error().message;
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<DType> dtypes = {DType::f32};
  if (f64) dtypes.push_back(DType::f64);
  for (DType dt : dtypes) {
    SCOPED_TRACE(std::string(to_string(dt)));
    auto program = dsl::lower(dsl::Pipeline{*bound}, {dt, dt, dt});
    ASSERT_TRUE(program) << program.error().message;
    const bool wide = dt == DType::f64;
    std::vector<std::array<double, 3>> cases = {
        {0.0, 5.0, -0.0},       {-0.0, 5.0, 0.0},        {0.0, 5.0, 1.5},
        {3.0, -0.0, -2.0},      {inf, 2.0, 1.0},         {inf, 0.0, 1.0},
        {2.0, 3.0, -inf},       {nan, 1.0, 1.0},         {1.0, 1.0, nan},
        {0x1p100, 0x1p30, 1.0}, {0x1p-70, 0x1p-70, 1.0}, {1.0 + 0x1p-12, 1.0 + 0x1p-12, -1.0}};
    // Where the sum of the product's error and c + p's must round to odd (WGSL's emulation):
    // (1 + u)^2 + 4 is 5 + 2u + u^2 (u = 2^-23), above the halfway point 5 + 2u that rounding
    // 2u + u^2 to nearest would leave. Scaled by powers of two, and with other c.
    const double u = wide ? 0x1p-52 : 0x1p-23;
    for (double c : {4.0, -8.0 * (1 + 4 * u), -8.0 * (1 + 6 * u), 4.0 * (1 + 8 * u)}) {
      cases.push_back({1 + u, 1 + u, c});
      cases.push_back({-(1 + u) * 0x1p5, (1 + u) * 0x1p-9, -c * 0x1p-4});
    }
    uint64_t r = 0x9e3779b97f4a7c15ull;
    auto next = [&] {
      r ^= r << 13, r ^= r >> 7, r ^= r << 17;
      return r;
    };
    // A random significand of the type's width, the exponent in [-range, range].
    auto random = [&](int range) {
      const uint64_t b = next();
      const double m = wide ? 1.0 + static_cast<double>(b & 0xfffffffffffffull) * 0x1p-52
                            : 1.0 + static_cast<double>(b & 0x7fffffu) * 0x1p-23;
      const int e = static_cast<int>((next() >> 32) % (2 * range + 1)) - range;
      return std::ldexp((next() >> 63) ? -m : m, e);
    };
    for (int i = 0; i < 400; ++i) {
      const double a = random(30), b = random(30);
      const double p = wide ? a * b : static_cast<float>(a * b);
      cases.push_back({a, b, -p});
      cases.push_back({a, b, std::ldexp(random(2), std::ilogb(p))});
    }
    auto plan = plan::make_plan(*program);
    ASSERT_TRUE(plan) << plan.error().message;
    const auto n = static_cast<int64_t>(cases.size());
    std::vector<runtime::HostTensor> params = {runtime::HostTensor::zeros("w", dt, {n})};
    for (int64_t i = 0; i < n; ++i) params[0].set(i, cases[i][0]);
    auto s = runtime::init_state(*plan, params, {});
    ASSERT_TRUE(s);
    ASSERT_TRUE(
        set_grads_from(*plan, params, dt, [&](size_t, int64_t i) { return cases[i][1]; }, {&*s}));
    const uint32_t addend = *plan->program.find_buffer("addend");
    const uint32_t fused = *plan->program.find_buffer("fused");
    for (int64_t i = 0; i < n; ++i) {
      if (dt == DType::f32) {
        const float c = static_cast<float>(cases[i][2]);
        std::memcpy(s->tensors[0].data(addend) + 4 * i, &c, 4);
      } else {
        std::memcpy(s->tensors[0].data(addend) + 8 * i, &cases[i][2], 8);
      }
    }
    auto b = make(*plan);
    ASSERT_TRUE(b) << b.error().message;
    auto step = (*b)->step(*s);
    ASSERT_TRUE(step) << step.error().message;
    const auto got = buffer_values(s->tensors[0].data(fused), dt, n);
    int differs_from_unfused = 0;
    for (int64_t i = 0; i < n; ++i) {
      const auto& [a, bb, c] = cases[i];
      double want, unfused;
      if (dt == DType::f32) {
        const float fa = static_cast<float>(a), fb = static_cast<float>(bb),
                    fc = static_cast<float>(c);
        want = std::fma(fa, fb, fc);
        unfused = fa * fb + fc;
      } else {
        want = std::fma(a, bb, c);
        unfused = a * bb + c;
      }
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got[i])) << "fma(" << a << ", " << bb << ", " << c << ")";
        continue;
      }
      differs_from_unfused += want != unfused;
      EXPECT_EQ(std::bit_cast<uint64_t>(got[i]), std::bit_cast<uint64_t>(want))
          << "fma(" << a << ", " << bb << ", " << c << ") = " << want << ", got " << got[i];
    }
    // Not vacuous: most cancellations and some sums round otherwise unfused.
    EXPECT_GT(differs_from_unfused, 400);
  }
}

/// A compiled kernel is reused only for the code it was built from: the kernel cache's key
/// carries a hash of the emitted code (LLVM IR, OpenCL C, WGSL, CUDA C), not only the program
/// and kCodegenVersion, so a changed emitter never loads another's kernels, whether or not the
/// version was bumped (a product ships warm caches). Plan B is plan A with one instruction of
/// its pass changed, as an emitter change changes the code while the program (and so its
/// structural hash) stays A's: on a device of `kind`, A compiles, then comes from the cache;
/// B misses it and steps as the reference steps B, bit for bit (all values exact).
inline void check_kernels_are_keyed_by_their_code(const std::string& kind,
                                                  runtime::ExecutorOptions options) {
  const auto dir = test::fresh_test_dir("code_key_" + kind);
  auto cache = cache::KernelCache::open({dir.string()});
  ASSERT_TRUE(cache) << cache.error().message;
  auto a = compile_pipeline("transform t(lr=0.25) {\n  param = param - lr * (grad + 0.5)\n}\nt()");
  ASSERT_TRUE(a) << a.error().message;
  ASSERT_EQ(a->passes.size(), 1u);
  plan::Plan b = *a;
  int changed = 0;
  for (ir::Inst& in : b.passes[0].body.insts)
    if (in.op == ir::Op::Add) in.op = ir::Op::Sub, ++changed;
  ASSERT_EQ(changed, 1) << plan::describe(b);
  ASSERT_EQ(ir::structural_hash(a->program), ir::structural_hash(b.program));
  const std::vector<runtime::HostTensor> params = {
      fixture_tensor("w", DType::f32, {6}, {1, 2, 3, 4, 5, -6})};
  const runtime::HostTensor g = fixture_tensor("w", DType::f32, {6}, {0.5, -1, 2, 0, 3, 1.5});
  const uint32_t pb = a->program.param_buffer();
  for (int round = 0; round < 3; ++round) {
    const plan::Plan& p = round < 2 ? *a : b;
    auto e = executor(p, kind, options, cache->get());
    ASSERT_TRUE(e) << e.error().message;
    EXPECT_EQ((*e)->kernels_from_cache(), round == 1) << kind << ", round " << round;
    auto s = runtime::init_state(p, params, {});
    auto r = runtime::init_state(p, params, {});
    ASSERT_TRUE(s && r && runtime::set_grads(p, *s, {&g}) && runtime::set_grads(p, *r, {&g}));
    ASSERT_TRUE((*e)->step(*s));
    runtime::ReferenceBackend ref(p);
    ref.step(*r);
    EXPECT_EQ(buffer_values(s->tensors[0].data(pb), DType::f32, 6),
              buffer_values(r->tensors[0].data(pb), DType::f32, 6))
        << kind << ", round " << round;
  }
  (*cache).reset();
  test::remove_test_dir(dir);
}

inline std::string fixture_case_name(const ::testing::TestParamInfo<int>& info) {
  const auto& c = torch_fixtures()["cases"][info.param];
  return c["name"].get<std::string>() + "_" + c["dtype"].get<std::string>();
}

inline auto all_fixture_cases() {
  return ::testing::Range(0, static_cast<int>(torch_fixtures()["cases"].size()));
}

}  // namespace optjit::testing
