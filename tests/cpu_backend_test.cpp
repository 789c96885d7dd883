// The CPU backend against the float64 reference and PyTorch, and the code it generates.
#include <cmath>
#include <cstring>
#include <random>
#include <regex>

#include <gtest/gtest.h>

#include "codegen/cpu_jit.h"
#include "fixtures.h"
#include "ir/compile.h"
#include "runtime/cpu_backend.h"

namespace optjit {
namespace {

using runtime::HostTensor;
using testing::close;
using testing::json_number;
using testing::json_numbers;

std::vector<double> values(const uint8_t* buf, DType t, int64_t n) {
  std::vector<double> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(runtime::load_element(buf, t, i));
  return out;
}

HostTensor tensor(const std::string& name, DType t, const std::vector<int64_t>& shape,
                  const std::vector<double>& v) {
  HostTensor h = HostTensor::zeros(name, t, shape);
  for (size_t i = 0; i < v.size(); ++i) h.set(static_cast<int64_t>(i), v[i]);
  return h;
}

// Codegen: the inner loop of AdamW is AVX2 vector code (pinned to haswell, whatever the host).
TEST(CpuCodegen, AdamWVectorizesForAvx2) {
  auto plan = compile_pipeline("adamw()");
  ASSERT_TRUE(plan);
  auto ir = codegen::emit_cpu_ir(*plan, true, codegen::CpuTarget::named("haswell"));
  ASSERT_TRUE(ir) << ir.error().message;
  EXPECT_NE(ir->find("load <8 x float>"), std::string::npos) << *ir;
  EXPECT_NE(ir->find("@llvm.sqrt.v8f32(<8 x float>"), std::string::npos);
  EXPECT_NE(ir->find("fdiv <8 x float>"), std::string::npos);
  EXPECT_NE(ir->find("store <8 x float>"), std::string::npos);
  // No approximations: no reciprocal or rsqrt estimates, no fast-math on element math.
  EXPECT_EQ(ir->find("rsqrt"), std::string::npos);
  EXPECT_EQ(ir->find("fast "), std::string::npos);
}

TEST(CpuCodegen, ReductionsVectorizeAndHalfTypesConvertInVectors) {
  auto plan = compile_pipeline("chain(clip_grad_norm(max_norm=1.0), adamw())",
                               {DType::bf16, DType::f16, DType::bf16});
  ASSERT_TRUE(plan);
  auto ir = codegen::emit_cpu_ir(*plan, true, codegen::CpuTarget::named("haswell"));
  ASSERT_TRUE(ir) << ir.error().message;
  auto has = [&](const char* re) { return std::regex_search(*ir, std::regex(re)); };
  EXPECT_TRUE(has(R"(fadd reassoc <\d+ x double>)"))
      << "the norm's sum of squares is not vectorized";
  EXPECT_TRUE(has(R"(fpext <\d+ x half>)")) << "f16 gradients are not converted in vectors";
  EXPECT_TRUE(has(R"(shl (nuw )?<\d+ x i32>)")) << "bf16 loads are not widened in vectors";
}

TEST(CpuCodegen, UnoptimizedIrIsOneFunctionPerPass) {
  auto plan = compile_pipeline("chain(clip_grad_norm(max_norm=1.0), lamb())");
  ASSERT_TRUE(plan);
  auto ir = codegen::emit_cpu_ir(*plan, false);
  ASSERT_TRUE(ir);
  for (int k = 0; k < 3; ++k)
    EXPECT_NE(ir->find("define void @optjit_pass_" + std::to_string(k)), std::string::npos);
  EXPECT_EQ(ir->find("define void @optjit_pass_3"), std::string::npos);
}

// Every PyTorch fixture, on the CPU backend, with small chunks so tensors span several.
class CpuParity : public ::testing::TestWithParam<int> {};

TEST_P(CpuParity, MatchesTorchAndTheReference) {
  const auto& c = testing::torch_fixtures()["cases"][GetParam()];
  SCOPED_TRACE(c["name"].get<std::string>() + ": " + c["pipeline"].get<std::string>());
  const DType dt = c["dtype"] == "f64" ? DType::f64 : DType::f32;
  auto plan = compile_pipeline(c["pipeline"].get<std::string>(), {dt, dt, dt});
  ASSERT_TRUE(plan) << plan.error().message;
  std::vector<HostTensor> params;
  std::vector<std::string> names;
  for (auto it = c["params"].begin(); it != c["params"].end(); ++it) {
    names.push_back(it.key());
    params.push_back(tensor(it.key(), dt, it.value()["shape"].get<std::vector<int64_t>>(),
                            json_numbers(it.value()["data"])));
  }
  std::vector<runtime::GroupSpec> groups;
  for (const auto& g : c["groups"]) {
    runtime::GroupSpec spec;
    spec.patterns = g["patterns"].get<std::vector<std::string>>();
    for (auto it = g["overrides"].begin(); it != g["overrides"].end(); ++it)
      spec.overrides[it.key()] = json_number(it.value());
    groups.push_back(spec);
  }
  auto cpu_state = runtime::init_state(*plan, params, groups);
  auto ref_state = runtime::init_state(*plan, params, groups);
  ASSERT_TRUE(cpu_state && ref_state);
  auto cpu = runtime::CpuBackend::create(*plan, {2, 5});
  ASSERT_TRUE(cpu) << cpu.error().message;
  runtime::ReferenceBackend ref(*plan);
  const double torch_rtol = dt == DType::f64 ? 1e-10 : 2e-5;
  const double ref_rtol = dt == DType::f64 ? 1e-12 : 2e-6;
  const uint32_t pb = plan->program.param_buffer();
  for (size_t step = 0; step < c["grads"].size(); ++step) {
    SCOPED_TRACE("step " + std::to_string(step + 1));
    std::vector<HostTensor> grads;
    std::vector<const HostTensor*> ptrs;
    for (size_t i = 0; i < names.size(); ++i)
      grads.push_back(
          tensor(names[i], dt, params[i].shape, json_numbers(c["grads"][step][names[i]])));
    for (const auto& g : grads) ptrs.push_back(&g);
    ASSERT_TRUE(runtime::set_grads(*plan, *cpu_state, ptrs));
    ASSERT_TRUE(runtime::set_grads(*plan, *ref_state, ptrs));
    EXPECT_EQ((*cpu)->step(*cpu_state).skipped, c["skipped"][step].get<bool>());
    ref.step(*ref_state);
    for (size_t i = 0; i < names.size(); ++i) {
      const auto& ts = cpu_state->tensors[i];
      auto got = values(ts.data(pb), dt, ts.numel);
      EXPECT_TRUE(close(got, json_numbers(c["expected"][step][names[i]]), torch_rtol, 1e-37))
          << names[i] << " vs torch";
      EXPECT_TRUE(close(got, values(ref_state->tensors[i].data(pb), dt, ts.numel), ref_rtol, 1e-37))
          << names[i] << " vs reference";
    }
  }
  EXPECT_EQ(cpu_state->step, ref_state->step);
  for (size_t i = 0; i < names.size(); ++i)
    for (size_t b = 0; b < plan->program.buffers.size(); ++b)
      EXPECT_TRUE(close(values(cpu_state->tensors[i].data(b), plan->buffers[b].storage,
                               cpu_state->tensors[i].numel),
                        values(ref_state->tensors[i].data(b), plan->buffers[b].storage,
                               ref_state->tensors[i].numel),
                        ref_rtol, 1e-37))
          << names[i] << "." << plan->buffers[b].name;
}

std::string case_name(const ::testing::TestParamInfo<int>& info) {
  const auto& c = testing::torch_fixtures()["cases"][info.param];
  return c["name"].get<std::string>() + "_" + c["dtype"].get<std::string>();
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, CpuParity,
    ::testing::Range(0, static_cast<int>(testing::torch_fixtures()["cases"].size())), case_name);

// Storing to f16/bf16 rounds to nearest even exactly as the reference does: a pipeline that
// copies an f32 value into a half-precision parameter must give identical bits.
TEST(CpuBackend, HalfStoresRoundToNearestEvenLikeTheReference) {
  for (DType t : {DType::f16, DType::bf16}) {
    auto plan =
        compile_pipeline("transform copy() {\n  param = grad\n}\ncopy()", {t, DType::f32, t});
    ASSERT_TRUE(plan);
    std::mt19937 rng(3);
    const int64_t n = 100003;
    HostTensor g = HostTensor::zeros("w", DType::f32, {n});
    for (int64_t i = 0; i < n; ++i) {
      uint32_t bits = rng();
      float f;
      std::memcpy(&f, &bits, 4);
      if (i % 7 == 0)
        f = static_cast<float>(1.0 +
                               std::ldexp(1.0, t == DType::f16 ? -11 : -8) * (i % 3));  // ties
      g.set(i, std::isnan(f) ? 1.0 : f);
    }
    std::vector<HostTensor> params = {HostTensor::zeros("w", t, {n})};
    auto a = runtime::init_state(*plan, params, {});
    auto b = runtime::init_state(*plan, params, {});
    ASSERT_TRUE(runtime::set_grads(*plan, *a, {&g}) && runtime::set_grads(*plan, *b, {&g}));
    auto cpu = runtime::CpuBackend::create(*plan);
    ASSERT_TRUE(cpu);
    (*cpu)->step(*a);
    runtime::ReferenceBackend(*plan).step(*b);
    EXPECT_EQ(a->tensors[0].bytes(0, t), b->tensors[0].bytes(0, t)) << to_string(t);
  }
}

// Results do not depend on the number of threads: chunk partials combine in a fixed order.
TEST(CpuBackend, BitwiseIdenticalForAnyThreadCount) {
  auto plan = compile_pipeline("chain(clip_grad_norm(max_norm=0.5), lamb(weight_decay=0.01))");
  ASSERT_TRUE(plan);
  std::mt19937 rng(5);
  std::normal_distribution<double> nd;
  std::vector<HostTensor> params, grads;
  for (int64_t n : {1000003, 17, 0, 4096, 300000}) {
    params.push_back(HostTensor::zeros("p" + std::to_string(n), DType::f32, {n}));
    grads.push_back(HostTensor::zeros("p" + std::to_string(n), DType::f32, {n}));
    for (int64_t i = 0; i < n; ++i) params.back().set(i, nd(rng)), grads.back().set(i, nd(rng));
  }
  std::vector<const HostTensor*> gp;
  for (auto& g : grads) gp.push_back(&g);
  std::vector<std::vector<uint8_t>> first;
  for (int threads : {1, 2, 3, 8}) {
    auto s = runtime::init_state(*plan, params, {});
    ASSERT_TRUE(s);
    auto cpu = runtime::CpuBackend::create(*plan, {threads, 1 << 14});
    ASSERT_TRUE(cpu);
    for (int step = 0; step < 3; ++step) {
      ASSERT_TRUE(runtime::set_grads(*plan, *s, gp));
      (*cpu)->step(*s);
    }
    std::vector<std::vector<uint8_t>> now;
    for (const auto& t : s->tensors)
      now.push_back(t.bytes(plan->program.param_buffer(), DType::f32));
    if (first.empty()) first = now;
    EXPECT_EQ(now, first) << threads << " threads";
  }
}

TEST(CpuBackend, RejectsABadChunkSize) {
  auto plan = compile_pipeline("sgd(lr=0.1)");
  ASSERT_TRUE(plan);
  auto cpu = runtime::CpuBackend::create(*plan, {1, 0});
  ASSERT_FALSE(cpu);
  EXPECT_EQ(cpu.error().message, "chunk size must be at least 1 element");
}

}  // namespace
}  // namespace optjit
