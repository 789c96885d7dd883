// The WebGPU backend (wgpu-native on lavapipe, Mesa's Vulkan on the CPU, in CI) against torch
// and the float64 reference: every PyTorch fixture in float32 and the launch-shape property; the
// float64 fixtures and storage it cannot hold are clear errors; the conversions WGSL lacks
// (f64 uniforms in, f64 partials out) exact; devices, the kernel cache and a missing library.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include <gtest/gtest.h>
#ifdef OPTJIT_HAVE_RAPIDCHECK
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "gpu_property.h"
#include "property_gens.h"
#endif

#include "api/optimizer.h"
#include "backend_parity.h"
#include "cache/kernel_cache.h"
#include "executors.h"
#include "fixtures.h"
#include "quant_model.h"
#include "runtime/devices.h"
#include "sround_check.h"
#include "test_dir.h"
#include "wgpu_app.h"

namespace optjit {
namespace {

TEST(Webgpu, ConditionsCarriedInScratchBuffersStepAsTheReference) {
  testing::check_carried_conditions_step_as_the_reference(
      [](const plan::Plan& plan) { return testing::executor(plan, "webgpu", {}); });
}

// WGSL has neither f64 nor i64, and lets an adapter flush f32 subnormals (NVIDIA's does).
TEST(Webgpu, CastsRoundAsTheReference) {
  testing::check_casts_round_as_the_reference(
      [](const plan::Plan& plan) { return testing::executor(plan, "webgpu", {}); },
      /*f64=*/false, /*i64=*/false, /*may_flush=*/true);
}

TEST(Webgpu, IntegerConversionsSaturateAsTheReference) {
  testing::check_integer_conversions_saturate(
      [](const plan::Plan& plan) { return testing::executor(plan, "webgpu", {}); },
      /*f64=*/false, /*i64=*/false);
}

// lavapipe's own fma is a product and a sum, so the kernels' emulation is what this checks.
TEST(Webgpu, FmaRoundsOnce) {
  testing::check_fma_rounds_once(
      [](const plan::Plan& plan) { return testing::executor(plan, "webgpu", {}); },
      /*f64=*/false);
}

TEST(Webgpu, PassVersionsStepAsTheWholeBody) {
  testing::check_versions_step_as_the_whole_body([](const plan::Plan& plan) {
    runtime::ExecutorOptions options;
    options.launch = codegen::GpuLaunch{.block = 8, .items = 2, .vec = 4, .chunk_elements = 512};
    return testing::executor(plan, "webgpu", options);
  });
}

// f() with environment variable `name` set to `value` (unset: nullptr), then put back as it was.
template <typename F>
auto with_env(const char* name, const char* value, F f) {
  const char* was = std::getenv(name);
  const std::string saved = was ? was : "";
  value ? ::setenv(name, value, 1) : ::unsetenv(name);
  auto result = f();
  was ? ::setenv(name, saved.c_str(), 1) : ::unsetenv(name);
  return result;
}

// A WebGPU device opened with environment variable `name` set to `value`:
// OPTJIT_WEBGPU_MAX_BINDING and OPTJIT_WEBGPU_MAX_BUFFER lower the adapter's limits,
// OPTJIT_WGSL_INEXACT_ULPS moves its quotients and roots.
Expected<std::shared_ptr<runtime::Device>> open_with(const char* name, const char* value) {
  return with_env(name, value, [] { return runtime::open_device({.kind = "webgpu"}); });
}

// OPTJIT_WGPU_BOUNDS_CHECKS is 1 (WebGPU's checks kept), 0 or unset; any other value is an error
// naming it when the kernels are made ("false" or "off" used to turn the checks on).
TEST(Webgpu, BoundsChecksAreOneOrZero) {
  auto plan = compile_pipeline("sgd(lr=0.1)");
  ASSERT_TRUE(plan);
  auto made = [&](const char* value) {
    return with_env("OPTJIT_WGPU_BOUNDS_CHECKS", value,
                    [&] { return testing::executor(*plan, "webgpu"); });
  };
  for (const char* ok : {"1", "0", "", static_cast<const char*>(nullptr)}) {
    auto e = made(ok);
    EXPECT_TRUE(e) << (ok ? ok : "(unset)") << ": " << e.error().message;
  }
  for (const char* bad : {"false", "off", "2"}) {
    auto e = made(bad);
    ASSERT_FALSE(e) << bad;
    EXPECT_NE(e.error().message.find(fmt::format("OPTJIT_WGPU_BOUNDS_CHECKS='{}': 1 keeps "
                                                 "WebGPU's bounds checks in the kernels, 0 (or "
                                                 "unset) leaves them out",
                                                 bad)),
              std::string::npos)
        << e.error().message;
  }
}

// Past the largest buffer the adapter allows (lowered here to 64 KiB by OPTJIT_WEBGPU_MAX_BUFFER,
// as NVIDIA's 4 GiB is for a 268M-parameter bench's copy of 16 bytes a parameter): an allocation
// is an error naming both sizes, and the copy-bandwidth yardstick measures the largest copy that
// fits (it failed at 268M parameters on an H200).
TEST(Webgpu, CopyBandwidthPastTheLargestBuffer) {
  auto dev = open_with("OPTJIT_WEBGPU_MAX_BUFFER", "65536");
  auto bad = open_with("OPTJIT_WEBGPU_MAX_BUFFER", "65536x");
  ASSERT_TRUE(dev) << dev.error().message;
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("OPTJIT_WEBGPU_MAX_BUFFER='65536x' is not a byte count"),
            std::string::npos)
      << bad.error().message;
  EXPECT_EQ((*dev)->description().max_allocation, 65536u);
  auto big = runtime::allocate(**dev, 100000, "a test buffer");
  ASSERT_FALSE(big);
  EXPECT_NE(big.error().message.find("a test buffer: 100000 bytes exceed the largest WebGPU "
                                     "buffer"),
            std::string::npos)
      << big.error().message;
  auto seconds = (*dev)->copy_seconds(1 << 20, 2);
  ASSERT_TRUE(seconds) << seconds.error().message;
  EXPECT_GT(*seconds, 0.0);
}

// A model larger than what the adapter binds to one kernel argument (lavapipe: 128 MiB, which
// GPT-2 small's 497 MB of parameters passes; here lowered to 64 KiB by OPTJIT_WEBGPU_MAX_BINDING):
// each pass launches once per window of its chunks, every buffer bound from where the window's
// chunks start, and the steps are the bits of whole buffers, for global and per-tensor
// reductions, quantized codes and scales (tensors with and without them), 16-bit storage, pass
// versions, groups, and a tensor of 160 KB that spans several windows. Whole buffers of that
// size are refused by the device, so a step that did not window would fail here.
TEST(Webgpu, StepsModelsLargerThanOneBinding) {
  auto small = open_with("OPTJIT_WEBGPU_MAX_BINDING", "65536");
  auto bad = open_with("OPTJIT_WEBGPU_MAX_BINDING", "1000");
  ASSERT_TRUE(small) << small.error().message;
  ASSERT_EQ((*small)->description().max_binding, 65536u);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("OPTJIT_WEBGPU_MAX_BINDING='1000' is not a byte count"),
            std::string::npos)
      << bad.error().message;
  auto whole = testing::shared_device("webgpu");
  ASSERT_TRUE(whole) << whole.error().message;
  ASSERT_GE((*whole)->description().max_binding, uint64_t{1} << 27);

  const std::string lookahead = testing::example_transforms("lookahead.opt");
  struct Case {
    std::string pipeline;
    DType dtype;
  };
  const Case cases[] = {
      {"chain(clip_grad_norm(max_norm=0.5), adamw(lr=1e-2, weight_decay=0.1))", DType::f32},
      {"lamb(lr=1e-2, weight_decay=0.01)", DType::f32},
      {R"(chain(clip_grad_norm(max_norm=0.5), adamw(lr=1e-2, state_format="8bit")))", DType::f32},
      {R"(adamw(lr=1e-2, state_format="4bit"))", DType::f32},
      {"chain(clip_grad_norm(max_norm=0.5), adamw(lr=1e-2))", DType::bf16},
      {lookahead + "chain(sgd(lr=0.1, momentum=0.9), lookahead(k=3, alpha=0.5))", DType::f32},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.pipeline.substr(c.pipeline.size() > 80 ? c.pipeline.size() - 80 : 0));
    auto plan = compile_pipeline(c.pipeline, {c.dtype, c.dtype, DType::f32});
    ASSERT_TRUE(plan) << plan.error().message;
    std::vector<runtime::HostTensor> params;
    for (int64_t n : {40000, 7, 0, 5000, 3000, 12000}) {
      params.push_back(runtime::HostTensor::zeros(fmt::format("w{}", params.size()), c.dtype, {n}));
      for (int64_t i = 0; i < n; ++i) params.back().set(i, std::sin(0.1 * i + n));
    }
    runtime::GroupSpec second;
    second.patterns = {"w1", "w3"};
    second.overrides = {{"lr", 0.03}};
    runtime::ExecutorOptions options;
    options.launch = codegen::GpuLaunch{.block = 64, .items = 2, .vec = 2, .chunk_elements = 1024};
    auto run = [&](const std::shared_ptr<runtime::Device>& d) {
      auto s = runtime::init_state(*plan, params, {second});
      EXPECT_TRUE(s) << s.error().message;
      auto b = runtime::Executor::create(*plan, d, options);
      EXPECT_TRUE(b) << b.error().message;
      if (!s || !b) return runtime::OptimizerState{};
      for (int k = 0; k < 4; ++k) {
        EXPECT_TRUE(testing::set_grads_from(
            *plan, params, c.dtype,
            [k](size_t t, int64_t i) { return std::cos(0.7 * i + k + t) * (k + 1) * 0.1; }, {&*s}));
        auto r = (*b)->step(*s);
        EXPECT_TRUE(r) << r.error().message;
        if (!r) break;
      }
      return std::move(*s);
    };
    testing::expect_same_state(*plan, params, run(*small), run(*whole));
  }

  // A chunk bigger than a binding is a clear error naming the tensor and the way out.
  auto plan = compile_pipeline("adamw()");
  ASSERT_TRUE(plan);
  std::vector<runtime::HostTensor> big = {runtime::HostTensor::zeros("big", DType::f32, {70000})};
  auto s = runtime::init_state(*plan, big, {});
  ASSERT_TRUE(s);
  runtime::ExecutorOptions options;
  options.launch = codegen::GpuLaunch{.block = 64, .items = 1, .vec = 1, .chunk_elements = 65536};
  auto b = runtime::Executor::create(*plan, *small, options);
  ASSERT_TRUE(b) << b.error().message;
  ASSERT_TRUE(testing::set_grads_from(*plan, big, DType::f32,
                                      [](size_t, int64_t i) { return 0.001 * i; }, {&*s}));
  auto r = (*b)->step(*s);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("tensor 'big': 4 chunks of 65536 elements from element 0 span "
                                   "more than the 65536 bytes"),
            std::string::npos)
      << r.error().message;
}

class WebgpuParity : public ::testing::TestWithParam<int> {};

// Small chunks and work-groups, so tensors span several chunks and the reduction tree has
// depth; odd cases run vectors of 4, two per invocation, with tails, on a small grid. Float64
// fixtures are refused with the reason (WGSL has no f64).
TEST_P(WebgpuParity, MatchesTorchAndTheReference) {
  const auto& c = testing::torch_fixtures()["cases"][GetParam()];
  runtime::ExecutorOptions options;
  options.launch = testing::fixture_launch(GetParam(), 8, 8);
  if (c["dtype"] == "f64") {
    auto plan =
        compile_pipeline(c["pipeline"].get<std::string>(), {DType::f64, DType::f64, DType::f64});
    ASSERT_TRUE(plan) << plan.error().message;
    auto b = testing::executor(*plan, "webgpu", options);
    ASSERT_FALSE(b);
    EXPECT_NE(b.error().message.find("WGSL has no f64"), std::string::npos) << b.error().message;
    return;
  }
  testing::check_backend_on_fixture(GetParam(), testing::executor_steps("webgpu", options));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, WebgpuParity, testing::all_fixture_cases(),
                         testing::fixture_case_name);

// The 8-bit tables' cells' edges quantize as on the CPU (quant_model.h's lut_cell_edges).
TEST(WebgpuQuant, TableCellEdgesQuantizeAsOnTheCpu) {
  testing::quant::check_lut_cell_edges({.backend = Backend::webgpu});
}

// The table quantizer multiplies by 1 / absmax (bitsandbytes' order), so that reciprocal must be
// the CPU's to the bit: one ulp moves a value on a tie of the table's cells to the next code.
// Every block's absmax of 8-bit AdamW's model over 4 steps, and values of every exponent, as
// parameters of a transform that keeps 1 / param.
TEST(WebgpuQuant, ReciprocalsOfScalesAreTheCpus) {
  namespace tq = testing::quant;
  std::vector<float> w;
  {
    tq::Model m;
    auto opt =
        Optimizer::create(R"(adamw(lr=1e-2, weight_decay=0.1, state_format="8bit"))", m.params());
    ASSERT_TRUE(opt) << opt.error().message;
    for (int step = 0; step < 4; ++step) {
      m.grads(step);
      ASSERT_TRUE((*opt)->step(m.grad_ptrs()));
      auto file = (*opt)->export_state();
      ASSERT_TRUE(file) << file.error().message;
      for (const auto& t : file->tensors)
        if (t.name.ends_with(".absmax"))
          for (int64_t i = 0; i < t.numel(); ++i)
            if (t.get(i) != 0.0) w.push_back(static_cast<float>(t.get(i)));  // not a zero block's
    }
  }
  uint32_t x = 12345;
  for (int i = 0; i < 4000; ++i) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    w.push_back(std::ldexp(1.0f + static_cast<float>(x >> 9) * 0x1p-23f, i % 200 - 100));
  }
  ASSERT_GT(w.size(), 4100u);
  const auto n = static_cast<int64_t>(w.size());
  const char* pipeline = "transform recip() {\n  state r = 0\n  r = 1 / param\n}\nrecip()";
  std::vector<std::vector<uint8_t>> r;
  for (Backend b : {Backend::cpu, Backend::webgpu}) {
    std::vector<float> p = w, g(w.size(), 0.0f);
    OptimizerOptions o;
    o.backend = b;
    auto opt = Optimizer::create(pipeline, {{"w", p.data(), DType::f32, {n}}}, o);
    ASSERT_TRUE(opt) << opt.error().message;
    ASSERT_TRUE((*opt)->step({g.data()}));
    auto file = (*opt)->export_state();
    ASSERT_TRUE(file) << file.error().message;
    for (const auto& t : file->tensors)
      if (t.name == "w.r") r.push_back(t.data);
  }
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(tq::bit_difference(r[1], r[0]), "") << "the bytes of 1 / x for " << n << " values";
}

// Block-quantized state (bitsandbytes' 8-bit, torchao's fp8 and 4-bit) on WebGPU: codes read as
// bytes of the arena's words and written a word per invocation. Without global reductions the
// parameters, codes and scales are the CPU's bits after every step, whatever the launch shape
// (a partial last block included).
TEST(WebgpuQuant, StepsTheSameBitsAsTheCpu) {
  namespace tq = testing::quant;
  for (const char* pipeline : {R"(adamw(lr=1e-2, weight_decay=0.1, state_format="8bit"))",
                               R"(adamw(lr=1e-2, weight_decay=0.1, state_format="f8"))",
                               R"(adamw(lr=1e-2, weight_decay=0.1, state_format="4bit"))",
                               R"(sgd(lr=1e-2, momentum=0.9, state_format="q8"))",
                               R"(adam(lr=1e-2, state_format="exp_avg:q8,exp_avg_sq:bf16"))"}) {
    for (auto [block, items, vec] : {std::tuple{256, 1, 1}, {64, 2, 4}, {128, 1, 2}}) {
      tq::Model want, got;
      OptimizerOptions o;
      o.backend = Backend::webgpu;
      o.gpu_launch = codegen::GpuLaunch{block, items, vec};
      auto cpu = Optimizer::create(pipeline, want.params());
      auto gpu = Optimizer::create(pipeline, got.params(), o);
      ASSERT_TRUE(cpu) << cpu.error().message;
      ASSERT_TRUE(gpu) << pipeline << ": " << gpu.error().message;
      for (int step = 0; step < 4; ++step) {
        want.grads(step);
        got.grads(step);
        ASSERT_TRUE((*cpu)->step(want.grad_ptrs()));
        auto st = (*gpu)->step(got.grad_ptrs());
        ASSERT_TRUE(st) << pipeline << ": " << st.error().message;
        EXPECT_EQ(tq::bit_difference(got.a, want.a), "")
            << pipeline << " block " << block << " step " << step << ": a";
        EXPECT_EQ(tq::bit_difference(got.b, want.b), "")
            << pipeline << " block " << block << " step " << step << ": b";
        EXPECT_EQ(tq::bit_difference(got.c, want.c), "")
            << pipeline << " block " << block << " step " << step << ": c";
        auto x = (*cpu)->export_state();  // codes and scales too, where they first part
        auto y = (*gpu)->export_state();
        ASSERT_TRUE(x && y);
        ASSERT_EQ(x->tensors.size(), y->tensors.size());
        for (size_t i = 0; i < x->tensors.size(); ++i)
          EXPECT_EQ(tq::bit_difference(y->tensors[i].data, x->tensors[i].data), "")
              << pipeline << " block " << block << " step " << step << ": " << x->tensors[i].name
              << " (bytes)";
      }
      auto x = (*cpu)->export_state();
      auto y = (*gpu)->export_state();
      ASSERT_TRUE(x && y);
      ASSERT_EQ(x->tensors.size(), y->tensors.size());
      size_t codes = 0;
      for (size_t i = 0; i < x->tensors.size(); ++i) {
        EXPECT_EQ(y->tensors[i].name, x->tensors[i].name);
        EXPECT_EQ(y->tensors[i].dtype, x->tensors[i].dtype);
        EXPECT_EQ(tq::bit_difference(y->tensors[i].data, x->tensors[i].data), "")
            << pipeline << " block " << block << ": " << x->tensors[i].name << " (bytes)";
        codes += x->tensors[i].dtype == DType::u8;
      }
      EXPECT_GT(codes, 0u) << pipeline << ": no quantized state to compare";
    }
  }
}

// With global reductions (a clip's norm, LAMB's trust ratios) WebGPU sums in f32 per work-group
// (WGSL has no f64) where the CPU sums in f64, so the bits part; both follow the float64
// reference to the quantization's resolution (tests/quant_test.cpp's CpuFollowsTheReference).
TEST(WebgpuQuant, FollowsTheReferenceAsTheCpuDoes) {
  namespace tq = testing::quant;
  for (const char* pipeline : tq::kPipelines) {
    OptimizerOptions ref, gpu;
    ref.backend = Backend::reference;
    gpu.backend = Backend::webgpu;
    gpu.gpu_launch = codegen::GpuLaunch{64, 2, 4};
    const tq::Model want = tq::run(pipeline, ref, 8);
    const tq::Model cpu = tq::run(pipeline, {}, 8);
    const tq::Model got = tq::run(pipeline, gpu, 8);
    auto far = [&](const std::vector<float>& x, const std::vector<float>& y, double& worst) {
      size_t n = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        const double d = std::fabs(double(x[i]) - y[i]);
        worst = std::max(worst, d);
        n += d > 1e-5;
      }
      return n;
    };
    double worst = 0, cpu_worst = 0;
    const size_t n = far(got.a, want.a, worst) + far(got.b, want.b, worst);
    const size_t cpu_n = far(cpu.a, want.a, cpu_worst) + far(cpu.b, want.b, cpu_worst);
    EXPECT_LE(worst, 8 * 1e-2) << pipeline;  // no element moves more than its 8 steps of lr
    EXPECT_LE(n, (want.a.size() + want.b.size()) / 100) << pipeline << " (cpu: " << cpu_n << ")";
    double small = 0;
    EXPECT_EQ(far(got.c, want.c, small), 0u) << pipeline;  // f32 state: f32 noise only
    EXPECT_LE(small, 1e-5) << pipeline;
  }
}

// Every code of every format through the WGSL kernels, bit for bit (quant_test checks the CPU's
// and OpenCL's the same way).
TEST(WebgpuQuant, DequantizesEveryCodeToItsMapValue) {
  testing::quant::check_every_code({.backend = Backend::webgpu});
}

#ifdef OPTJIT_HAVE_RAPIDCHECK
// Before rapidcheck reads its configuration (on first use, after static initialization).
const int kCases = ::setenv("RC_PARAMS", "max_success=15", /*overwrite=*/0);

RC_GTEST_PROP(WebgpuProperty, EveryLaunchShapeMatchesTheReference, ()) {
  (void)kCases;
  const bool custom = *rc::gen::arbitrary<bool>();
  std::string text = custom ? *gen_custom_pipeline() : *gen_builtin_pipeline();
  const DType t = *rc::gen::elementOf(std::vector<DType>{DType::f32, DType::bf16, DType::f16});
  RC_TAG(custom ? "custom" : "builtins", to_string(t));
  auto plan = compile_pipeline(text, {t, t, t});
  RC_ASSERT(plan.ok());
  const codegen::GpuLaunch launch = gen_gpu_launch();
  RC_LOG() << text << ", " << launch.to_string() << "\n";
  runtime::ExecutorOptions options;
  options.launch = launch;
  auto gpu = testing::executor(*plan, "webgpu", options);
  if (!gpu.ok()) {
    RC_LOG() << gpu.error().message << "\n";
    // Custom transforms that mix f32 elements with f64 scalars compute in f64 per element,
    // which WGSL cannot: refused with the reason, never run in f32.
    bool f64_elements = false;
    for (const auto& pass : plan->passes)
      for (const auto& in : pass.body.insts)
        f64_elements = f64_elements || (in.type == DType::f64 && in.op != ir::Op::Uniform &&
                                        ir::info(in.op).kind != ir::OpKind::reduce);
    RC_ASSERT(f64_elements);
    RC_ASSERT(gpu.error().message.find("WGSL has no f64") != std::string::npos);
    RC_DISCARD("f64 element math");
  }
  check_backend_matches_reference(*plan, t, random_params(t, 40), [&](runtime::OptimizerState& s) {
    auto r = (*gpu)->step(s);
    RC_ASSERT(r.ok());
    return r->skipped;
  });
}
#endif

// Uniforms reach the kernels as f64 bit patterns that WGSL converts itself. The scalar program
// rounds a built-in's hyperparameters to the parameters' f32 on the host, so what arrives are
// f32 values: SGD's p - lr * 1 from p = 0 must give exactly -f32(lr), across the f32 range
// (largest, smallest normal, subnormals where the adapter keeps them) and for values that
// round on the host (a tie, a carry into the next binade, overflow, underflow).
TEST(Webgpu, UniformsArriveExactly) {
  const double values[] = {0.1,
                           1.0 + std::ldexp(1.0, -24),      // a tie: to even (down)
                           1.0 + 3 * std::ldexp(1.0, -24),  // a tie: to even (up)
                           1.0 + std::ldexp(1.0, -24) + std::ldexp(1.0, -50),  // just above
                           2.0 - std::ldexp(1.0, -25),  // rounds up into the next binade
                           3.4028234663852886e38,       // FLT_MAX
                           1e39,                        // overflows
                           1.1754943508222875e-38,      // FLT_MIN
                           1e-30,
                           1e-50,  // far below f32: zero
                           2.5e-7,
                           12345.678};
  for (double lr : values) {
    SCOPED_TRACE(fmt::format("lr = {:a}", lr));
    std::vector<float> p(3, 0.0f);
    const std::vector<float> g(3, 1.0f);
    OptimizerOptions o;
    o.backend = Backend::webgpu;
    o.cache.reset();
    auto opt = Optimizer::create(
        "sgd(lr=0.5)", {{.name = "w", .data = p.data(), .dtype = DType::f32, .shape = {3}}}, o);
    ASSERT_TRUE(opt) << opt.error().message;
    ASSERT_TRUE((*opt)->set_hyper("lr", lr));
    auto r = (*opt)->step({g.data()});
    ASSERT_TRUE(r) << r.error().message;
    const float want = 0.0f - static_cast<float>(lr) * 1.0f;
    for (float x : p) EXPECT_EQ(x, want);
  }
}

// Partials leave the kernels as f64 bit patterns WGSL builds itself: a gradient whose squares
// sum to values across the f32 range (and one infinite) gives the CPU's clip coefficient.
TEST(Webgpu, ReductionPartialsReachTheHostExactly) {
  for (float g0 : {3.0f, 1e-20f, 1e19f, 1e30f, std::numeric_limits<float>::infinity()}) {
    SCOPED_TRACE(g0);
    std::vector<float> results[2];
    for (int k = 0; k < 2; ++k) {
      std::vector<float> p = {1.0f, 2.0f, 3.0f, 4.0f};
      const std::vector<float> g = {g0, 0.0f, -g0, 0.5f * g0};
      OptimizerOptions o;
      o.backend = k == 0 ? Backend::webgpu : Backend::cpu;
      o.cache.reset();
      auto opt = Optimizer::create(
          "chain(clip_grad_norm(max_norm=1.0, norm_type=inf), clip_grad_norm(max_norm=1.0), "
          "sgd(lr=0.5))",
          {{.name = "w", .data = p.data(), .dtype = DType::f32, .shape = {4}}}, o);
      ASSERT_TRUE(opt) << opt.error().message;
      auto r = (*opt)->step({g.data()});
      ASSERT_TRUE(r) << r.error().message;
      results[k] = p;
    }
    for (size_t i = 0; i < 4; ++i) {
      if (std::isnan(results[1][i]))
        EXPECT_TRUE(std::isnan(results[0][i])) << i;
      else
        EXPECT_EQ(results[0][i], results[1][i]) << i;
    }
  }
}

// bf16 and f16 are stored as their bits, two to a word, and rounded in the shader: p - g from
// random bit patterns (every exponent, subnormals, infinities, NaNs, and ties) equals the CPU
// backend's, bit for bit, over an odd count so vectors have tails and words are shared between
// invocations.
TEST(Webgpu, SixteenBitStorageRoundsAsTheCpuBitForBit) {
  for (DType dt : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(to_string(dt));
    const size_t n = 4099;
    std::vector<uint16_t> p0(n), g(n);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    auto next = [&] {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      return static_cast<uint16_t>(x >> 20);
    };
    for (size_t i = 0; i < n; ++i) p0[i] = next(), g[i] = next();
    // Exact ties of the final rounding: 1 + 2^-8 and 1 + 3 * 2^-8 in bf16, 1 + 2^-11 and
    // 1 + 3 * 2^-11 in f16 (p = 1, g the negated increment).
    const bool bf = dt == DType::bf16;
    p0[0] = bf ? 0x3f80 : 0x3c00, g[0] = bf ? 0xbb80 : 0x9000;
    p0[1] = bf ? 0x3f80 : 0x3c00, g[1] = bf ? 0xbc40 : 0x9600;
    std::vector<uint16_t> got[2];
    for (int k = 0; k < 2; ++k) {
      got[k] = p0;
      OptimizerOptions o;
      o.backend = k == 0 ? Backend::webgpu : Backend::cpu;
      o.gpu_launch = codegen::GpuLaunch{.block = 8, .items = 2, .vec = 4, .chunk_elements = 36};
      o.cache.reset();
      auto opt = Optimizer::create(
          "sgd(lr=1.0)", {{.name = "w", .data = got[k].data(), .dtype = dt, .shape = {int64_t(n)}}},
          o);
      ASSERT_TRUE(opt) << opt.error().message;
      ASSERT_TRUE((*opt)->step({g.data()}));
    }
    auto value = [&](const std::vector<uint16_t>& v, size_t i) {
      return runtime::load_element(reinterpret_cast<const uint8_t*>(v.data()), dt,
                                   static_cast<int64_t>(i));
    };
    // WGSL lets an adapter flush f32 subnormals, in and out (NVIDIA's Vulkan driver does, and
    // bf16's subnormals are f32's): there p - g with them flushed is the right answer too.
    auto ftz = [](float v) {
      return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v;
    };
    size_t differ = 0, flushed = 0;
    for (size_t i = 0; i < n; ++i) {
      if (std::isnan(value(got[0], i)) ? std::isnan(value(got[1], i)) : got[0][i] == got[1][i])
        continue;
      uint16_t want = 0;
      runtime::store_element(
          reinterpret_cast<uint8_t*>(&want), dt, 0,
          ftz(ftz(float(value(p0, i))) -
              ftz(float(runtime::load_element(reinterpret_cast<const uint8_t*>(g.data()), dt,
                                              static_cast<int64_t>(i))))));
      if (bf && value(got[0], i) == runtime::load_element(reinterpret_cast<uint8_t*>(&want), dt, 0))
        ++flushed;
      else
        ++differ;
    }
    EXPECT_EQ(differ, 0u);
    if (flushed)
      std::printf("%zu results as an adapter that flushes subnormals gives them\n", flushed);
    EXPECT_EQ(got[0][0], bf ? 0x3f80 : 0x3c00);  // the tie to even, down
    EXPECT_EQ(got[0][1], bf ? 0x3f82 : 0x3c02);  // and up
  }
}

// WGSL's `/` need only be good to 2.5 ulp and its sqrt to inverseSqrt's error, and a product may
// be fused into the sum it feeds; optjit's WGSL rounds all three as IEEE (and the CPU backend)
// does. Division, square root and a product feeding a sum over operands of every exponent in
// range, hard cases (significands of all ones, equal operands), and NaN, Inf and zeros: the
// CPU backend's bits. On lavapipe, which divides exactly, ctest also runs this with
// OPTJIT_WGSL_INEXACT_ULPS (webgpu_test.inexact_adapter), so the correction itself is checked.
TEST(Webgpu, DivisionRootAndProductsRoundAsTheCpu) {
  const size_t n = 200003;
  std::vector<float> x(n), y(n);
  uint64_t r = 0x2545f4914f6cdd1dull;
  auto next = [&] {
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    return r;
  };
  auto make = [&](int exp_range) {
    const uint64_t b = next();
    const uint32_t e = 127 - exp_range + static_cast<uint32_t>((b >> 40) % (2 * exp_range + 1));
    return std::bit_cast<float>(static_cast<uint32_t>(b & 0x807fffffu) | (e << 23));
  };
  for (size_t i = 0; i < n; ++i) x[i] = make(60), y[i] = make(60);
  const float specials[] = {0.0f, -0.0f,         INFINITY,       -INFINITY, NAN,
                            1.0f, 0x1.fffffep0f, 0x1.fffffep-1f, 0x1p-100f, 0x1p100f};
  for (size_t i = 0; i < 100; ++i) x[i] = specials[i % 10], y[i] = specials[i / 10];
  for (size_t i = 100; i < 200; ++i) y[i] = x[i];
  for (size_t i = 200; i < 300; ++i)
    y[i] = std::bit_cast<float>(std::bit_cast<uint32_t>(y[i]) | 0x7fffffu);
  for (const char* body :
       {"param = param / grad", "param = sqrt(abs(param))", "param = param * grad + grad",
        "param = grad / sqrt(abs(param) + 1e-8)"}) {
    SCOPED_TRACE(body);
    std::vector<float> p[2] = {x, x};
    for (int k = 0; k < 2; ++k) {
      OptimizerOptions o;
      o.backend = k == 0 ? Backend::webgpu : Backend::cpu;
      o.cache.reset();
      auto opt = Optimizer::create(
          fmt::format("transform t() {{ {} }}\nt()", body),
          {{.name = "w", .data = p[k].data(), .dtype = DType::f32, .shape = {int64_t(n)}}}, o);
      ASSERT_TRUE(opt) << opt.error().message;
      ASSERT_TRUE((*opt)->step({y.data()}));
    }
    size_t differ = 0;
    for (size_t i = 0; i < n; ++i) {
      const bool same = std::isnan(p[0][i])
                            ? std::isnan(p[1][i])
                            : std::bit_cast<uint32_t>(p[0][i]) == std::bit_cast<uint32_t>(p[1][i]);
      if (!same && differ++ < 3)
        ADD_FAILURE() << i << ": " << x[i] << ", " << y[i] << ": webgpu " << p[0][i] << ", cpu "
                      << p[1][i];
    }
    EXPECT_EQ(differ, 0u);
  }
}

// How kernels divide is probed when a device is opened, cheapest first: lavapipe's own division
// and square root round correctly (LLVM's fdiv and sqrt are IEEE's), so its kernels use them as
// they are (1.7x faster there); made 1 ulp off (OPTJIT_WGSL_INEXACT_ULPS, as on NVIDIA's Vulkan
// driver) they are corrected, from Dekker's residual since lavapipe's fma is not fused
// (DivisionRootAndProductsRoundAsTheCpu, run that way by webgpu_test.inexact_adapter).
TEST(Webgpu, AProbeSaysWhetherTheAdapterRoundsDivisionAndRoots) {
  auto dev = open_with("OPTJIT_WGSL_INEXACT_ULPS", nullptr);
  ASSERT_TRUE(dev) << dev.error().message;
  const runtime::DeviceDescription& d = (*dev)->description();
  std::printf("%s: division and square root: %s\n", d.name.c_str(), d.division.c_str());
  if (d.name.find("llvmpipe") != std::string::npos) {
    EXPECT_EQ(d.division, "hardware");
  }
  // Made inexact, lavapipe's are corrected, and from Dekker's residual: its fma is not fused.
  for (const char* ulps : {"1", "-1"}) {
    auto off = open_with("OPTJIT_WGSL_INEXACT_ULPS", ulps);
    ASSERT_TRUE(off) << off.error().message;
    EXPECT_NE((*off)->description().division, "hardware") << ulps;
    if (d.name.find("llvmpipe") != std::string::npos) {
      EXPECT_EQ((*off)->description().division, "dekker") << ulps;
    }
  }
}

// Stochastic rounding in WGSL (SplitMix64 on pairs of u32, the key from its f64 bits) draws the
// CPU backend's bits (tests/sround_check.h), on small work-groups with vectors and tails.
TEST(Webgpu, StochasticRoundingDrawsTheCpusBits) {
  OptimizerOptions o;
  o.backend = Backend::webgpu;
  o.gpu_launch = codegen::GpuLaunch{.block = 8, .items = 2, .vec = 4, .chunk_elements = 40};
  testing::check_stochastic_rounding_draws_the_cpus_bits(o);
}

TEST(Webgpu, RefusesWhatWgslCannotHoldWithTheReason) {
  OptimizerOptions o;
  o.backend = Backend::webgpu;
  o.cache.reset();
  std::vector<double> d64(8, 0.0);
  auto opt = Optimizer::create(
      "adamw(lr=1e-3)", {{.name = "w", .data = d64.data(), .dtype = DType::f64, .shape = {8}}}, o);
  ASSERT_FALSE(opt);
  EXPECT_NE(opt.error().message.find("stores f32, bf16 and f16 (buffer 'param' is f64"),
            std::string::npos)
      << opt.error().message;
  std::vector<float> f(8, 0.0f);
  o.device_step = true;
  auto d = Optimizer::create(
      "adamw(lr=1e-3)", {{.name = "w", .data = f.data(), .dtype = DType::f32, .shape = {8}}}, o);
  ASSERT_FALSE(d);
  EXPECT_NE(d.error().message.find("webgpu"), std::string::npos) << d.error().message;
}

TEST(Webgpu, ListsAdaptersAndRefusesAMissingOne) {
  auto list = runtime::list_devices();
  bool found = false;
  for (const auto& d : list.devices)
    if (d.backend == "webgpu") {
      found = true;
      EXPECT_NE(d.exact.find("webgpu|"), std::string::npos);
      EXPECT_EQ(d.exact_id().size(), 16u);
    }
  EXPECT_TRUE(found) << "no webgpu adapter listed";
  auto b = runtime::open_device({.kind = "webgpu", .index = 99});
  ASSERT_FALSE(b);
  EXPECT_NE(b.error().message.find("no WebGPU adapter 99"), std::string::npos) << b.error().message;
}

// Listing adapters, opening a device and making, stepping and dropping an optimizer on it
// leaves nothing of wgpu-native's behind: after a first round (which may fill caches), each
// further round ends with as many adapters, devices, buffers, bind groups, pipelines, ... alive
// as the round before. (Enumerated adapters were never released: two more each round here.)
TEST(Webgpu, OptimizersMadeAndDroppedLeaveNoObjectsBehind) {
  auto round = [](std::map<std::string, size_t>& during) {
    ASSERT_FALSE(runtime::list_devices().devices.empty());
    std::vector<float> p(5000, 0.5f), g(5000, 0.25f);
    OptimizerOptions o;
    o.backend = Backend::webgpu;
    auto opt = Optimizer::create(
        "chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-2, state_format=\"8bit\"))",
        {{.name = "w", .data = p.data(), .dtype = DType::f32, .shape = {5000}}}, o);
    ASSERT_TRUE(opt) << opt.error().message;
    for (int s = 0; s < 2; ++s) ASSERT_TRUE((*opt)->step({g.data()}));
    auto live = runtime::webgpu_live_objects();
    ASSERT_TRUE(live) << live.error().message;
    during = *live;
  };
  std::map<std::string, size_t> during;
  round(during);
  // The counts are real: the optimizer's device, its queue, buffers and pipelines.
  for (const char* kind : {"adapters", "devices", "queues", "buffers", "compute pipelines"})
    EXPECT_GT(during.at(kind), 0u) << kind;
  auto before = runtime::webgpu_live_objects();
  ASSERT_TRUE(before) << before.error().message;
  for (int r = 0; r < 3; ++r) round(during);
  auto after = runtime::webgpu_live_objects();
  ASSERT_TRUE(after) << after.error().message;
  for (const auto& [kind, n] : *before) EXPECT_EQ(after->at(kind), n) << kind << " after 3 rounds";
}

// The PCI vendor in an adapter's fingerprint ("webgpu|backend|vendor|name|10de:2335|...").
std::string pci_vendor(const std::string& exact) {
  size_t at = 0;
  for (int field = 0; field < 4 && at != std::string::npos; ++field) at = exact.find('|', at + 1);
  return at == std::string::npos ? "" : exact.substr(at + 1, exact.find(':', at) - at - 1);
}

// Every adapter optjit lists steps (lavapipe lists a Vulkan and an OpenGL one here), with the
// CPU backend's results; or, where another adapter of the same vendor steps (the same GPU
// through Vulkan), may refuse a device with a clear error: NVIDIA's OpenGL adapter on a
// machine without a display ("Parent device is lost", an H200, 2026-11-26).
TEST(Webgpu, EveryListedAdapterSteps) {
  size_t adapters = 0;
  std::vector<std::string> stepped, refused;
  for (const auto& d : runtime::list_devices().devices) {
    if (d.backend != "webgpu") continue;
    ++adapters;
    SCOPED_TRACE(d.name);
    if (auto dev = runtime::open_device({.kind = "webgpu", .index = d.index}); !dev) {
      EXPECT_NE(dev.error().message.find("requesting a device on '"), std::string::npos)
          << dev.error().message;
      refused.push_back(pci_vendor(d.exact));
      std::printf("adapter %d (%s) refused: %s\n", d.index, d.name.c_str(),
                  dev.error().message.c_str());
      continue;
    }
    stepped.push_back(pci_vendor(d.exact));
    std::vector<float> p[2];
    for (int k = 0; k < 2; ++k) {
      p[k].assign(1000, 0.5f);
      std::vector<float> g(1000);
      for (size_t i = 0; i < g.size(); ++i) g[i] = std::sin(0.1f * i);
      OptimizerOptions o;
      o.backend = k == 0 ? Backend::webgpu : Backend::cpu;
      if (k == 0) o.device = d.index;
      o.cache.reset();
      auto opt = Optimizer::create(
          "chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-2))",
          {{.name = "w", .data = p[k].data(), .dtype = DType::f32, .shape = {1000}}}, o);
      ASSERT_TRUE(opt) << opt.error().message;
      for (int s = 0; s < 3; ++s) ASSERT_TRUE((*opt)->step({g.data()}));
    }
    for (size_t i = 0; i < p[0].size(); ++i) ASSERT_NEAR(p[0][i], p[1][i], 1e-6) << i;
  }
  EXPECT_GT(adapters, 0u);
  for (const auto& vendor : refused)
    EXPECT_NE(std::find(stepped.begin(), stepped.end(), vendor), stepped.end())
        << "an adapter of vendor " << vendor << " refused a device, and none of its steps";
}

// The two tensors (300 and 77 elements) the caller's-memory tests step: their parameters and
// gradient, and the parameters after three clip + AdamW steps on the CPU backend (the oracle).
constexpr const char* kCallerPipeline = "chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-2))";
struct CallerTensors {
  std::vector<float> p0, g, want;
};
CallerTensors caller_tensors() {
  CallerTensors t{std::vector<float>(377), std::vector<float>(377), {}};
  for (size_t i = 0; i < 377; ++i) t.p0[i] = std::sin(0.1f * i), t.g[i] = std::cos(0.3f * i);
  t.want = t.p0;
  auto cpu = Optimizer::create(
      kCallerPipeline,
      {{.name = "a", .data = t.want.data(), .dtype = DType::f32, .shape = {300}},
       {.name = "b", .data = t.want.data() + 300, .dtype = DType::f32, .shape = {77}}});
  EXPECT_TRUE(cpu);
  for (int s = 0; cpu && s < 3; ++s) EXPECT_TRUE((*cpu)->step({t.g.data(), t.g.data() + 300}));
  return t;
}

// The caller's own WebGPU buffers (made on the optimizer's device, shared through its queue):
// used in place when one buffer holds every tensor's (an arena: nothing copied after the first
// step's state upload), copied in and out otherwise, and the step says how many bytes it
// copied; the same parameters either way, and as the CPU backend's.
TEST(Webgpu, CallersBuffersAreUsedInPlaceWhenTheyAreArenasAndTheStepSaysWhatItCopied) {
  auto dev = runtime::open_device({.kind = "webgpu"});
  ASSERT_TRUE(dev) << dev.error().message;
  runtime::Device& d = **dev;
  const int64_t n[2] = {300, 77};
  const CallerTensors tensors = caller_tensors();
  const std::vector<float>&cpu_p = tensors.p0, &g = tensors.g, &want = tensors.want;
  const char* pipeline = kCallerPipeline;
  for (bool flat : {true, false}) {
    SCOPED_TRACE(flat ? "one buffer per role" : "a buffer per tensor");
    std::vector<runtime::DeviceAllocation> mem;
    DeviceMemory p[2], gr[2];
    for (int role = 0; role < 2; ++role) {
      DeviceMemory* at = role == 0 ? p : gr;
      const float* src = role == 0 ? cpu_p.data() : g.data();
      if (flat) {
        auto a = runtime::allocate(d, 377 * 4, "a test arena");
        ASSERT_TRUE(a);
        ASSERT_TRUE(d.write(a->memory(), src, 377 * 4));
        at[0] = a->memory(), at[1] = a->memory().at(300 * 4);
        mem.push_back(std::move(*a));
      } else {
        for (int t = 0; t < 2; ++t) {
          auto a = runtime::allocate(d, static_cast<size_t>(n[t]) * 4, "a test tensor");
          ASSERT_TRUE(a);
          ASSERT_TRUE(d.write(a->memory(), src + (t ? 300 : 0), static_cast<size_t>(n[t]) * 4));
          at[t] = a->memory();
          mem.push_back(std::move(*a));
        }
      }
    }
    OptimizerOptions o;
    o.backend = Backend::webgpu;
    o.queue = d.queue();
    o.cache.reset();
    auto opt =
        Optimizer::create(pipeline,
                          {{.name = "a", .dtype = DType::f32, .shape = {300}, .device = p[0]},
                           {.name = "b", .dtype = DType::f32, .shape = {77}, .device = p[1]}},
                          o);
    ASSERT_TRUE(opt) << opt.error().message;
    for (int s = 0; s < 3; ++s) {
      auto r = (*opt)->step_device({gr[0], gr[1]});
      ASSERT_TRUE(r) << r.error().message;
      if (s > 0) {
        if (flat)
          EXPECT_EQ(r->copied_bytes, 0u);
        else  // the gradients in, the parameters in and out
          EXPECT_EQ(r->copied_bytes, 3u * 377 * 4);
      }
    }
    std::vector<float> got(377);
    ASSERT_TRUE(d.read(got.data(), p[0], 300 * 4));
    ASSERT_TRUE(d.read(got.data() + 300, p[1], 77 * 4));
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 2e-6) << i;
  }
}

// The application's own WebGPU device (made on its own instance, as wgpu-py or a C application
// makes one) and its buffers: the step runs on that device's queue with the buffers in place
// (nothing copied after the first step), the parameters those of the CPU backend; a second
// optimizer given the device shares it. Buffers optjit cannot use are clear errors before
// any work, a buffer the application destroyed is an error from the step (through error
// scopes: the application's uncaptured-error callback hears nothing of optjit's), and the
// device outlives the optimizers.
// The caller's buffers may be larger than a binding while the tensors in them are not: only
// the bytes the step uses are bound (the whole 80 KiB buffer was bound, and refused, under a
// 64 KiB limit), and the step is the CPU's.
TEST(Webgpu, BindsOnlyWhatTheStepUsesOfTheCallersLargeBuffers) {
  ::setenv("OPTJIT_WEBGPU_MAX_BINDING", "65536", 1);
  testing::WgpuApp app(true);
  ASSERT_TRUE(app.device) << app.why;
  const CallerTensors t = caller_tensors();
  const WGPUBufferUsage usage =
      WGPUBufferUsage_Storage | WGPUBufferUsage_CopySrc | WGPUBufferUsage_CopyDst;
  std::vector<float> p(20480, 0.0f), g(20480, 0.0f);  // 80 KiB each, the tensors at 40 KiB
  std::copy(t.p0.begin(), t.p0.end(), p.begin() + 10240);
  std::copy(t.g.begin(), t.g.end(), g.begin() + 10240);
  WGPUBuffer params = app.buffer(p.size() * 4, usage, p.data()),
             grads = app.buffer(g.size() * 4, usage, g.data());
  ASSERT_TRUE(params && grads);
  OptimizerOptions o;
  o.backend = Backend::webgpu;
  o.queue = app.device;
  o.cache.reset();
  auto opt = Optimizer::create(
      kCallerPipeline,
      {{.name = "a", .dtype = DType::f32, .shape = {300}, .device = webgpu_memory(params, 40960)},
       {.name = "b", .dtype = DType::f32, .shape = {77}, .device = webgpu_memory(params, 42160)}},
      o);
  ::unsetenv("OPTJIT_WEBGPU_MAX_BINDING");
  ASSERT_TRUE(opt) << opt.error().message;
  for (int s = 0; s < 3; ++s) {
    auto r = (*opt)->step_device({webgpu_memory(grads, 40960), webgpu_memory(grads, 42160)});
    ASSERT_TRUE(r) << r.error().message;
    if (s > 0) {  // in place (the first step sets up the state)
      EXPECT_EQ(r->copied_bytes, 0u);
    }
  }
  auto dev = runtime::open_device({.kind = "webgpu", .queue = app.device});
  ASSERT_TRUE(dev) << dev.error().message;
  std::vector<float> got(377);
  ASSERT_TRUE((*dev)->read(got.data(), webgpu_memory(params, 40960), 377 * 4));
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], t.want[i], 2e-6) << i;
  opt->reset();
  app.release(params);
  app.release(grads);
}

TEST(Webgpu, StepsOnTheCallersOwnDeviceAndBuffers) {
  testing::WgpuApp app(true);
  ASSERT_TRUE(app.device) << app.why;
  const int64_t n = 377;
  const CallerTensors t = caller_tensors();
  const std::vector<float>&p0 = t.p0, &g = t.g, &want = t.want;
  const char* pipeline = kCallerPipeline;
  const WGPUBufferUsage usage =
      WGPUBufferUsage_Storage | WGPUBufferUsage_CopySrc | WGPUBufferUsage_CopyDst;
  WGPUBuffer params = app.buffer(n * 4, usage, p0.data()),
             grads = app.buffer(n * 4, usage, g.data());
  ASSERT_TRUE(params && grads);
  const DeviceMemory pa = webgpu_memory(params), pb = webgpu_memory(params, 300 * 4);
  const DeviceMemory ga = webgpu_memory(grads), gb = webgpu_memory(grads, 300 * 4);
  OptimizerOptions o;
  o.backend = Backend::webgpu;
  o.queue = app.device;
  o.cache.reset();
  auto make = [&](DeviceMemory a, DeviceMemory b) {
    return Optimizer::create(pipeline,
                             {{.name = "a", .dtype = DType::f32, .shape = {300}, .device = a},
                              {.name = "b", .dtype = DType::f32, .shape = {77}, .device = b}},
                             o);
  };
  {
    auto opt = make(pa, pb);
    ASSERT_TRUE(opt) << opt.error().message;
    for (int s = 0; s < 3; ++s) {
      auto r = (*opt)->step_device({ga, gb});
      ASSERT_TRUE(r) << r.error().message;
      if (s > 0) {
        EXPECT_EQ(r->copied_bytes, 0u);
      }
    }
    // The device optjit holds for it is the application's: reading through it reads its buffer.
    auto dev = runtime::open_device({.kind = "webgpu", .queue = app.device});
    ASSERT_TRUE(dev) << dev.error().message;
    EXPECT_EQ((*dev)->queue(), static_cast<void*>(app.device));
    std::vector<float> got(n);
    ASSERT_TRUE((*dev)->read(got.data(), pa, n * 4));
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], want[i], 2e-6) << i;

    // Memory optjit cannot use: named, before anything runs.
    WGPUBuffer small = app.buffer(64, usage);
    WGPUBuffer unbindable = app.buffer(n * 4, WGPUBufferUsage_CopySrc | WGPUBufferUsage_CopyDst);
    auto r = (*opt)->step_device({webgpu_memory(small), gb});
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().message,
              "the gradient of 'a': 1200 bytes at offset 0 pass the end of its WebGPU buffer of 64 "
              "bytes");
    r = (*opt)->step_device({webgpu_memory(reinterpret_cast<WGPUBuffer>(uintptr_t{8})), gb});
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().message,
              "the gradient of 'a': buffer 0x8 is not the address of a WGPUBuffer");
    r = (*opt)->step_device({webgpu_memory(unbindable), gb});
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().message,
              "the gradient of 'a': the WebGPU buffer lacks usage Storage | CopySrc | CopyDst "
              "(optjit binds it to kernels and copies to and from it)");
    WGPUBuffer wide = app.buffer(n * 4 + 8, usage);
    auto unaligned = make(webgpu_memory(wide, 2), webgpu_memory(wide, 1204));
    ASSERT_FALSE(unaligned);
    EXPECT_EQ(unaligned.error().message,
              "parameter 'a': offset 2 in its WebGPU buffer is not a multiple of 4 bytes");
    // A buffer the application destroyed: the step fails, saying so.
    WGPUBuffer gone = app.buffer(n * 4, usage, g.data());
    app.destroy(gone);
    r = (*opt)->step_device({webgpu_memory(gone), webgpu_memory(gone, 300 * 4)});
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().message.find("WebGPU: "), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find("has been destroyed"), std::string::npos) << r.error().message;
    EXPECT_EQ(r.error().message.find('\n'), std::string::npos) << r.error().message;
    EXPECT_EQ(app.uncaptured, "");
    auto overlapping = make(pa, webgpu_memory(params, 1196));
    ASSERT_FALSE(overlapping);
    EXPECT_EQ(overlapping.error().message, "parameters 'a' and 'b' overlap in device memory");
    for (WGPUBuffer b : {small, unbindable, gone, wide}) app.release(b);
  }
  {
    // A device with WebGPU's default limits (what a plain request gives): clip + AdamW fits.
    testing::WgpuApp plain(false);
    ASSERT_TRUE(plain.device) << plain.why;
    OptimizerOptions po = o;
    po.queue = plain.device;
    WGPUBuffer pp = plain.buffer(n * 4, usage, p0.data());
    WGPUBuffer pg = plain.buffer(n * 4, usage, g.data());
    auto opt = Optimizer::create(
        pipeline,
        {{.name = "a", .dtype = DType::f32, .shape = {300}, .device = webgpu_memory(pp)},
         {.name = "b", .dtype = DType::f32, .shape = {77}, .device = webgpu_memory(pp, 1200)}},
        po);
    ASSERT_TRUE(opt) << opt.error().message;
    for (int s = 0; s < 3; ++s)
      ASSERT_TRUE((*opt)->step_device({webgpu_memory(pg), webgpu_memory(pg, 1200)}));
    auto dev = runtime::open_device({.kind = "webgpu", .queue = plain.device});
    ASSERT_TRUE(dev);
    std::vector<float> got(n);
    ASSERT_TRUE((*dev)->read(got.data(), webgpu_memory(pp), n * 4));
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], want[i], 2e-6) << i;
    plain.release(pp);
    plain.release(pg);
  }
  // The optimizers are gone; the device is still the application's to use.
  WGPUBuffer after = app.buffer(64, usage);
  EXPECT_TRUE(after);
  if (after) app.release(after);
  app.release(params);
  app.release(grads);
}

// `auto` takes a WebGPU GPU after CUDA and OpenCL GPUs, never a WebGPU adapter that is a CPU
// (lavapipe: optjit's own CPU backend is faster there).
TEST(Webgpu, AutoPicksAWebgpuGpuAfterCudaAndOpencl) {
  auto rec = [](const char* backend, bool gpu) {
    return runtime::DeviceRecord{backend, 0, std::string(backend) + " device", gpu, "", ""};
  };
  runtime::DeviceList l;
  l.devices = {rec("cpu", false), rec("webgpu", false)};
  EXPECT_EQ(runtime::pick_auto(l).backend, "cpu");
  l.devices.push_back(rec("webgpu", true));
  std::string why;
  EXPECT_EQ(runtime::pick_auto(l, &why).backend, "webgpu");
  EXPECT_EQ(why, "auto: WebGPU GPU 0 (webgpu device)");
  l.devices.push_back(rec("opencl", true));
  EXPECT_EQ(runtime::pick_auto(l).backend, "opencl");
  l.devices.push_back(rec("cuda", true));
  EXPECT_EQ(runtime::pick_auto(l).backend, "cuda");
}

TEST(Webgpu, KernelsAreKeyedByTheirCode) {
  testing::check_kernels_are_keyed_by_their_code("webgpu", {});
}

// A second optimizer on the same device loads its kernels from the cache (the WGSL under its
// hash; wgpu-native compiles it again, having no pipeline binaries to offer through its API).
TEST(Webgpu, KernelsComeFromTheKernelCache) {
  const auto dir = test::fresh_test_dir("webgpu_cache");
  std::vector<float> p(100, 1.0f), g(100, 0.5f);
  for (int k = 0; k < 2; ++k) {
    OptimizerOptions o;
    o.backend = Backend::webgpu;
    o.cache = cache::CacheOptions{.dir = dir.string()};
    auto opt = Optimizer::create(
        "adamw(lr=1e-3)", {{.name = "w", .data = p.data(), .dtype = DType::f32, .shape = {100}}},
        o);
    ASSERT_TRUE(opt) << opt.error().message;
    EXPECT_EQ((*opt)->kernels_from_cache(), k == 1);
    ASSERT_TRUE((*opt)->step({g.data()}));
  }
  test::remove_test_dir(dir);
}

// tune() on WebGPU: the same tuner as OpenCL's, on the very tensors (as before afterwards);
// the winner is used from then on and steps as the CPU does.
TEST(Webgpu, TunesThroughTheSameTuner) {
  std::vector<float> p(5000), g(5000);
  for (size_t i = 0; i < p.size(); ++i) p[i] = std::sin(0.1 * i), g[i] = std::cos(0.37 * i) * 0.01f;
  std::vector<float> q = p;
  OptimizerOptions o;
  o.backend = Backend::webgpu;
  o.cache.reset();
  const char* pipeline = "chain(clip_grad_norm(max_norm=0.1), adamw(lr=1e-2))";
  auto gpu = Optimizer::create(
      pipeline, {{.name = "w", .data = p.data(), .dtype = DType::f32, .shape = {5000}}}, o);
  auto cpu = Optimizer::create(
      pipeline, {{.name = "w", .data = q.data(), .dtype = DType::f32, .shape = {5000}}});
  ASSERT_TRUE(gpu && cpu);
  autotune::TuneOptions topts;
  topts.seconds_per_candidate = 0.01;
  topts.max_candidates = 4;
  topts.progress = false;
  auto t = (*gpu)->tune({g.data()}, topts);
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_EQ(t->measured.size(), 4u);
  EXPECT_EQ(p, q);
  EXPECT_EQ((*gpu)->step_count(), 0);
  EXPECT_EQ((*gpu)->gpu_launch().to_string(), t->winner);
  EXPECT_TRUE((*gpu)->launch_from_tuning());
  ASSERT_TRUE((*gpu)->step({g.data()}));
  ASSERT_TRUE((*cpu)->step({g.data()}));
  for (size_t i = 0; i < p.size(); ++i) ASSERT_NEAR(p[i], q[i], 2e-6) << i;
}

// optjit bench says how the kernels divide: with lavapipe's own division (JSON), and, where the
// adapter's is inexact (made so here), that it is corrected and how.
TEST(Webgpu, BenchSaysHowTheKernelsDivide) {
  auto run = [](const std::string& env, const std::string& args) {
    const std::string cmd = env + " " + testing::cli_path() +
                            " bench 'chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-3))' "
                            "--backend webgpu --numel 4096 --steps 1 --reps 1 --no-unfused " +
                            args + " 2>&1";
    FILE* f = ::popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    while (f && std::fgets(buf, sizeof buf, f)) out += buf;
    if (f) ::pclose(f);
    return out;
  };
  const std::string json = run("env -u OPTJIT_WGSL_INEXACT_ULPS", "--json");
  auto j = nlohmann::json::parse(json, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << json;
  auto dev = open_with("OPTJIT_WGSL_INEXACT_ULPS", nullptr);  // the adapter bench takes
  ASSERT_TRUE(dev) << dev.error().message;
  EXPECT_EQ(j["f32_division"], (*dev)->description().division);
  if ((*dev)->description().name.find("llvmpipe") != std::string::npos) {
    EXPECT_EQ(j["f32_division"], "hardware");
  }
  const std::string text = run("OPTJIT_WGSL_INEXACT_ULPS=1", "");
  EXPECT_NE(text.find("the adapter's f32 division and sqrt corrected ("), std::string::npos)
      << text;
}

// The library the user names is the one used, and its absence is said plainly.
TEST(Webgpu, AMissingLibraryIsAClearError) {
  std::string cmd = std::string("OPTJIT_WGPU_LIBRARY=/nonexistent/libwgpu_native.so ") +
                    testing::cli_path() + " devices 2>&1";
  FILE* f = ::popen(cmd.c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, f)) out.append(buf, n);
  ::pclose(f);
  EXPECT_NE(out.find("webgpu: no WebGPU library (wgpu-native)"), std::string::npos) << out;
  EXPECT_NE(out.find("/nonexistent/libwgpu_native.so"), std::string::npos) << out;
}

}  // namespace
}  // namespace optjit
