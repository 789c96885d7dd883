// CUDA and OpenCL: golden emitted source, NVRTC cubins for every built-in, and OpenCL (PoCL
// in CI) against PyTorch and the reference on every fixture. None of this needs a GPU.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "backend_parity.h"
#include "cache/kernel_cache.h"
#include "codegen/c_emitter.h"
#include "codegen/nvrtc.h"
#include "ir/builtins.h"
#include "ir/compile.h"
#include "runtime/opencl_backend.h"

namespace optjit {
namespace {

using runtime::HostTensor;
using testing::close;
using testing::json_number;
using testing::json_numbers;

// Emitted code is deterministic and pinned. To accept a deliberate change:
//   OPTJIT_UPDATE_GOLDEN=1 build/tests/gpu_backends_test --gtest_filter='*Golden*'
void check_golden(const std::string& name, const std::string& text) {
  const std::string path = std::string(OPTJIT_SOURCE_DIR) + "/tests/golden/" + name;
  if (std::getenv("OPTJIT_UPDATE_GOLDEN")) {
    std::ofstream(path) << text;
    return;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in) << path << " is missing (run with OPTJIT_UPDATE_GOLDEN=1)";
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(text, ss.str()) << "emitted code differs from " << path;
}

struct GoldenCase {
  const char* file;
  const char* pipeline;
  DType dtype;
  codegen::CLanguage language;
};

class Golden : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(Golden, EmittedSourceIsPinned) {
  const auto& g = GetParam();
  auto plan = compile_pipeline(g.pipeline, {g.dtype, g.dtype, g.dtype});
  ASSERT_TRUE(plan) << plan.error().message;
  auto src = codegen::emit_c(*plan, {g.language});
  ASSERT_TRUE(src) << src.error().message;
  auto again = codegen::emit_c(*plan, {g.language});
  EXPECT_EQ(*src, *again);
  check_golden(g.file, *src);
}

INSTANTIATE_TEST_SUITE_P(
    Pipelines, Golden,
    ::testing::Values(GoldenCase{"clip_adamw.cu", "chain(clip_grad_norm(max_norm=1.0), adamw())",
                                 DType::f32, codegen::CLanguage::cuda},
                      GoldenCase{"clip_adamw.cl", "chain(clip_grad_norm(max_norm=1.0), adamw())",
                                 DType::f32, codegen::CLanguage::opencl},
                      GoldenCase{"lamb_bf16.cu", "lamb(weight_decay=0.01)", DType::bf16,
                                 codegen::CLanguage::cuda},
                      GoldenCase{"scaler_sgd_f16.cl",
                                 "chain(grad_scaler(scale=1024), sgd(lr=0.1, momentum=0.9))",
                                 DType::f16, codegen::CLanguage::opencl}),
    [](const auto& param_info) {
      std::string n = param_info.param.file;
      for (auto& c : n)
        if (c == '.') c = '_';
      return n;
    });

TEST(CEmitter, RejectsABlockThatIsNotAPowerOfTwo) {
  auto plan = compile_pipeline("adamw()");
  ASSERT_TRUE(plan);
  auto src = codegen::emit_c(*plan, {codegen::CLanguage::cuda, 100});
  ASSERT_FALSE(src);
  EXPECT_EQ(src.error().message, "block size 100 is not a power of two");
}

// Every built-in transform (boolean options on) compiles to a cubin for sm_80 and sm_90.
TEST(Nvrtc, EveryBuiltinCompilesForSm80AndSm90) {
  ASSERT_TRUE(codegen::have_nvrtc())
      << "this build has no NVRTC; the CUDA toolkit is expected at /usr/local/cuda";
  int compiled = 0;
  for (const auto& d : dsl::builtins()) {
    if (d->kind != dsl::DefKind::transform) continue;
    dsl::Args args;
    for (const auto& h : d->hypers)
      if (h.defaults.empty()) args.emplace(h.name, 1.0);
    if (d->name == "sgd" || d->name == "rmsprop") args.insert_or_assign("momentum", 0.9);
    for (const auto& o : d->options)
      if (o.default_value.index() == 0 && o.name != "nesterov") args.emplace(o.name, true);
    auto b = dsl::bind(d, args);
    ASSERT_TRUE(b) << b.error().message;
    dsl::Pipeline p = {*b};
    if (d->name != "clip_grad_norm")
      p.insert(p.begin(), *dsl::make("clip_grad_norm", {{"max_norm", 1.0}}));
    auto program = dsl::lower(p);
    ASSERT_TRUE(program) << program.error().message;
    auto plan = plan::make_plan(*program);
    ASSERT_TRUE(plan);
    auto src = codegen::emit_c(*plan, {codegen::CLanguage::cuda});
    ASSERT_TRUE(src) << src.error().message;
    for (const char* arch : {"sm_80", "sm_90"}) {
      auto cubin = codegen::compile_cubin(*src, arch);
      ASSERT_TRUE(cubin) << d->name << " " << arch << ": " << cubin.error().message;
      EXPECT_GT(cubin->image.size(), 1000u);
      ASSERT_EQ(cubin->kernels.size(), plan->passes.size()) << d->name;
      for (const auto& k : cubin->kernels) {
        std::printf(
            "[ cubin    ] %-16s %s %-14s %3d registers, %3d B spill stores, %3d B spill loads\n",
            d->name.c_str(), arch, k.name.c_str(), k.registers, k.spill_stores, k.spill_loads);
        EXPECT_GT(k.registers, 0);
        EXPECT_LE(k.spill_stores, 256) << d->name << " spills heavily on " << arch;
      }
      ++compiled;
    }
  }
  EXPECT_EQ(compiled, 32);
}

TEST(Nvrtc, BadArchitectureIsAClearError) {
  auto c = codegen::compile_cubin("extern \"C\" __global__ void k() {}", "sm_8");
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().message, "'sm_8' is not a CUDA architecture (e.g. sm_80, sm_90)");
  auto bad = codegen::compile_cubin("this is not CUDA", "sm_80");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("NVRTC failed for sm_80"), std::string::npos)
      << bad.error().message;
}

TEST(OpenCL, FindsDevicesAndRejectsAMissingOne) {
  auto devices = runtime::opencl_devices();
  ASSERT_TRUE(devices) << devices.error().message;
  ASSERT_FALSE(devices->empty());
  EXPECT_FALSE((*devices)[0].name.empty());
  auto plan = compile_pipeline("adamw()");
  ASSERT_TRUE(plan);
  auto b = runtime::OpenclBackend::create(*plan, {99});
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error().message, fmt::format("no OpenCL device 99 (there are {})", devices->size()));
}

// A second backend for the same pipeline loads the program binary from the kernel cache, and
// computes the same bytes.
TEST(OpenCL, ProgramBinariesComeFromTheKernelCache) {
  auto dir =
      std::filesystem::temp_directory_path() / ("optjit_oclcache_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto cache = cache::KernelCache::open({dir.string()});
  ASSERT_TRUE(cache);
  auto plan = compile_pipeline("chain(clip_grad_norm(max_norm=1.0), adamw())");
  ASSERT_TRUE(plan);
  std::vector<runtime::HostTensor> params = {
      testing::fixture_tensor("w", DType::f32, {1000}, std::vector<double>(1000, 0.5))};
  runtime::HostTensor g =
      testing::fixture_tensor("w", DType::f32, {1000}, std::vector<double>(1000, 0.25));
  std::vector<std::vector<uint8_t>> results;
  for (int round = 0; round < 2; ++round) {
    auto b = runtime::OpenclBackend::create(*plan, {}, cache->get());
    ASSERT_TRUE(b) << b.error().message;
    EXPECT_EQ((*b)->from_cache(), round == 1);
    auto s = runtime::init_state(*plan, params, {});
    ASSERT_TRUE(s && runtime::set_grads(*plan, *s, {&g}));
    ASSERT_TRUE((*b)->step(*s));
    results.push_back(s->tensors[0].bytes(plan->program.param_buffer(), DType::f32));
  }
  EXPECT_EQ(results[0], results[1]);
  std::filesystem::remove_all(dir);
}

class OpenclParity : public ::testing::TestWithParam<int> {};

// Small chunks and work-groups, so tensors span several chunks and the tree has depth.
TEST_P(OpenclParity, MatchesTorchAndTheReference) {
  std::shared_ptr<runtime::OpenclBackend> ocl;
  testing::check_backend_on_fixture(
      GetParam(), [&](const plan::Plan& plan) -> Expected<testing::StepFn> {
        auto b = runtime::OpenclBackend::create(plan, {-1, 8, 5});
        if (!b) return b.error();
        ocl = std::move(*b);
        return testing::StepFn([ocl](runtime::OptimizerState& s) { return ocl->step(s); });
      });
}

INSTANTIATE_TEST_SUITE_P(Fixtures, OpenclParity, testing::all_fixture_cases(),
                         testing::fixture_case_name);

}  // namespace
}  // namespace optjit
