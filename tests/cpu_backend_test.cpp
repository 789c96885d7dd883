// The CPU backend against the float64 reference and PyTorch, and the code it generates.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <regex>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "api/optimizer.h"
#include "backend_parity.h"
#include "codegen/cpu_jit.h"
#include "executors.h"
#include "ir/compile.h"
#include "ir/text.h"
#include "runtime/chunks.h"
#include "runtime/reference.h"

namespace optjit {
namespace {

using runtime::HostTensor;
using testing::close;
using testing::json_number;
using testing::json_numbers;

// The fixed combining order (codegen::kCombineLanes) written out as a device runs it: all 256
// lanes, empty ones holding the identity, the whole tree. runtime::combine_range skips the empty
// lanes; it must give the same bits, and the device kernels are checked against it (OpenCL here,
// CUDA on a GPU).
double combine_all_lanes(ir::Op op, const std::vector<double>& x) {
  constexpr size_t W = codegen::kCombineLanes;
  const size_t n = x.size(), run = (n + W - 1) / W;
  std::vector<double> lane(W, runtime::reduce_identity(op));
  for (size_t j = 0; j < W; ++j)
    for (size_t i = j * run; i < std::min(n, (j + 1) * run); ++i)
      lane[j] = runtime::combine_two(op, lane[j], x[i]);
  for (size_t s = 1; s < W; s *= 2)
    for (size_t j = 0; j < W; j += 2 * s) lane[j] = runtime::combine_two(op, lane[j], lane[j + s]);
  return lane[0];
}

TEST(CombineOrder, SkippingEmptyLanesGivesTheWholeTreesBits) {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> normal;
  for (size_t n : {1, 2, 3, 255, 256, 257, 511, 1000, 4099, 15259}) {
    std::vector<double> x(n), sq(n), flags(n);
    for (size_t i = 0; i < n; ++i) {
      x[i] = normal(rng) * std::exp(4 * normal(rng));  // magnitudes that make order matter
      sq[i] = std::fabs(x[i]);
      flags[i] = i % 97 == 3 ? 1.0 : 0.0;
    }
    if (n > 10) sq[n / 3] = NAN;  // MaxAbs propagates NaN
    for (auto [op, v] : {std::pair{ir::Op::Sum, &x}, std::pair{ir::Op::MaxAbs, &sq},
                         std::pair{ir::Op::AnyNonFinite, &flags}}) {
      const double want = combine_all_lanes(op, *v), got = runtime::combine(op, *v);
      EXPECT_TRUE(std::memcmp(&want, &got, sizeof want) == 0 ||
                  (std::isnan(want) && std::isnan(got)))
          << "n=" << n << " op=" << ir::info(op).text << ": " << got << " vs " << want;
    }
    // The order is not the sequential one (so the test above is not vacuous) yet is as close
    // to the exact sum as a float64 sum of these values should be.
    if (n == 15259) {
      double seq = 0;
      long double exact = 0;
      for (double v : x) seq += v, exact += v;
      const double tree = runtime::combine(ir::Op::Sum, x);
      EXPECT_NE(tree, seq);
      EXPECT_LT(std::fabs(tree - static_cast<double>(exact)),
                1e-9 * std::fabs(static_cast<double>(exact)) + 1e-6);
    }
  }
  EXPECT_EQ(runtime::combine(ir::Op::Sum, {}), 0.0);
}

// Codegen: the inner loop of AdamW is AVX2 vector code (pinned to haswell, whatever the host).
TEST(CpuCodegen, AdamWVectorizesForAvx2) {
  auto plan = compile_pipeline("adamw()");
  ASSERT_TRUE(plan);
  auto ir = codegen::emit_cpu_ir(*plan, true, codegen::CpuTarget::named("haswell").value());
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
  auto ir = codegen::emit_cpu_ir(*plan, true, codegen::CpuTarget::named("haswell").value());
  ASSERT_TRUE(ir) << ir.error().message;
  auto has = [&](const char* re) { return std::regex_search(*ir, std::regex(re)); };
  EXPECT_TRUE(has(R"(fadd reassoc <\d+ x double>)"))
      << "the norm's sum of squares is not vectorized";
  EXPECT_TRUE(has(R"(fpext <\d+ x half>)")) << "f16 gradients are not converted in vectors";
  EXPECT_TRUE(has(R"(shl (nuw )?<\d+ x i32>)")) << "bf16 loads are not widened in vectors";
}

// f16 parameters and state: AdamW's divisions and square roots run as wide as f32's, 8 lanes
// with AVX2 (and on AVX-512 CPUs LLVM tunes for 256-bit vectors), 16 with AVX-512 elsewhere.
// LLVM's cost model alone chose 4 lanes (f16 conversions priced high), and the step ran at 0.44
// of the memory roofline (`optjit bench 'chain(clip_grad_norm(max_norm=1.0), adamw())' --dtype
// f16`; 1.0 now).
TEST(CpuCodegen, F16StepsComputeAtTheVectorWidthOfF32) {
  auto plan = compile_pipeline("chain(clip_grad_norm(max_norm=1.0), adamw())",
                               {DType::f16, DType::f16, DType::f16});
  ASSERT_TRUE(plan);
  for (auto [cpu, lanes] : {std::pair{"haswell", 8}, {"skylake-avx512", 8}, {"knl", 16}}) {
    SCOPED_TRACE(cpu);
    auto ir = codegen::emit_cpu_ir(*plan, true, codegen::CpuTarget::named(cpu).value());
    ASSERT_TRUE(ir) << ir.error().message;
    auto has = [&](const std::string& re) { return std::regex_search(*ir, std::regex(re)); };
    EXPECT_TRUE(has(fmt::format(R"(@llvm\.sqrt\.v{0}f32\(<{0} x float>)", lanes)));
    EXPECT_TRUE(has(fmt::format(R"(fdiv <{0} x float>)", lanes)));
    EXPECT_TRUE(has(fmt::format(R"(fptrunc <{0} x float> .* to <{0} x half>)", lanes)));
    EXPECT_FALSE(has(R"(@llvm\.sqrt\.v4f32)")) << "some pass computes 4 lanes at a time";
  }
}

// An element's pow, exp, log and cos run 8 lanes at a time through glibc's vector math library
// (libmvec, AVX2 variants) rather than as a scalar libm call per element (MADGRAD's cube root:
// 44.5 -> 31 ms/step at 16M parameters), and the kernels that call it step as the reference
// does, within f32's rounding.
TEST(CpuCodegen, ElementTranscendentalsCallGlibcsVectorMath) {
  const char* text = R"(
transform t(lr=0.01) {
  state a = 0.5
  a = a + lr * (abs(grad) ** (1 / 3) + exp(-grad * grad) + log(1 + grad * grad) + cos(grad))
  param = param - lr * a
}
t()
)";
  auto plan = compile_pipeline(text);
  ASSERT_TRUE(plan) << plan.error().message;
  auto ir = codegen::emit_cpu_ir(*plan, true, codegen::CpuTarget::named("haswell").value());
  ASSERT_TRUE(ir) << ir.error().message;
  for (const char* fn : {"_ZGVdN8vv_powf", "_ZGVdN8v_expf", "_ZGVdN8v_logf", "_ZGVdN8v_cosf"})
    EXPECT_NE(ir->find(std::string("call <8 x float> @") + fn), std::string::npos) << fn;
  const int64_t n = 10007;
  std::vector<float> w0(n), g(n);
  for (int64_t i = 0; i < n; ++i)
    w0[i] = std::sin(0.01f * i), g[i] = 3.0f * std::cos(0.37f * i) * (i % 5 == 0 ? 1e-3f : 1);
  std::vector<float> cpu = w0, ref = w0;
  OptimizerOptions oc, orf;
  orf.backend = Backend::reference;
  auto a = Optimizer::create(text, {{"w", cpu.data(), DType::f32, {n}}}, oc);
  auto b = Optimizer::create(text, {{"w", ref.data(), DType::f32, {n}}}, orf);
  ASSERT_TRUE(a && b);
  for (int k = 0; k < 3; ++k) {
    ASSERT_TRUE((*a)->step({g.data()}));
    ASSERT_TRUE((*b)->step({g.data()}));
  }
  for (int64_t i = 0; i < n; ++i)
    ASSERT_NEAR(cpu[i], ref[i], 4e-7 * std::max(1.0f, std::abs(ref[i]))) << i;
}

// A quantized pass's block loop prefetches, at each block, every line the block 512 elements on
// will read or write: the parameters' and gradients' f32 lines and each state's code lines
// (bitsandbytes' 8-bit blocks of 256, torchao's 4-bit blocks of 128, two to a byte).
TEST(CpuCodegen, QuantizedBlocksPrefetchTheLinesOfABlockAhead) {
  for (auto [format, lines] : {std::pair{"8bit", 16 + 16 + 4 + 4}, {"4bit", 8 + 8 + 1 + 1}}) {
    SCOPED_TRACE(format);
    auto plan = compile_pipeline(fmt::format(
        R"(chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-3, state_format="{}")))", format));
    ASSERT_TRUE(plan) << plan.error().message;
    auto ir = codegen::emit_cpu_ir(*plan, false, codegen::CpuTarget::named("haswell").value());
    ASSERT_TRUE(ir) << ir.error().message;
    const std::regex read(R"(call void @llvm\.prefetch\.p0\(ptr %\d+, i32 0, i32 3, i32 1\))");
    EXPECT_EQ(
        std::distance(std::sregex_iterator(ir->begin(), ir->end(), read), std::sregex_iterator()),
        lines);
    EXPECT_NE(ir->find("%ahead = add i64 %b0, 512"), std::string::npos);
  }
  // Passes without quantized state leave prefetching to the hardware.
  auto plain = compile_pipeline("chain(clip_grad_norm(max_norm=1.0), adamw())");
  ASSERT_TRUE(plain);
  auto ir = codegen::emit_cpu_ir(*plain, false, codegen::CpuTarget::named("haswell").value());
  ASSERT_TRUE(ir);
  EXPECT_EQ(ir->find("llvm.prefetch"), std::string::npos);
}

// A feature taken away (OPTJIT_CPU_FEATURES) takes the features that imply it, in the emitter's
// choices as in LLVM's: without AVX-512F (or without FMA, which AVX-512F implies) no AVX-512 BW
// or VBMI permutes. The emitter read its feature string alone, emitted VBMI permutes for such a
// target, and LLVM stopped the process ("Do not know how to split the result of this operator").
TEST(CpuCodegen, TakingAFeatureAwayTakesTheFeaturesThatImplyIt) {
  auto plan = compile_pipeline(
      R"(chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-3, state_format="8bit")))");
  ASSERT_TRUE(plan) << plan.error().message;
  for (const char* away : {"-avx512f", "-fma"}) {
    SCOPED_TRACE(away);
    auto target = codegen::CpuTarget::named("sapphirerapids").value();
    target.features += std::string(",") + away;
    auto asm_text = codegen::emit_cpu_asm(*plan, target);
    ASSERT_TRUE(asm_text) << asm_text.error().message;
    EXPECT_EQ(asm_text->find("zmm"), std::string::npos);
    EXPECT_NE(asm_text->find("vpgatherdd"), std::string::npos) << "AVX2's gathers";
  }
}

// With AVX-512 VBMI, 8-bit codes dequantize by gathers (8 lanes on Ice Lake-SP, which prefers
// 256-bit vectors) where LLVM calls the CPU's gathers fast (Intel's AVX-512 cores: 15% faster
// in cache on a Xeon), else by byte permutes (AMD's Zen 4: 1.4x faster than gathers).
TEST(CpuCodegen, CodesDequantizeByGathersWhereGathersAreFast) {
  auto plan = compile_pipeline(
      R"(chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-3, state_format="8bit")))");
  ASSERT_TRUE(plan) << plan.error().message;
  for (bool fast : {true, false}) {
    SCOPED_TRACE(fast);
    auto target = codegen::CpuTarget::named("icelake-server").value();
    if (!fast) target.features += ",-fast-gather";
    auto ir = codegen::emit_cpu_ir(*plan, true, target);
    ASSERT_TRUE(ir) << ir.error().message;
    EXPECT_EQ(std::regex_search(*ir, std::regex(R"(@llvm\.masked\.gather\.v(8|16)f32)")), fast);
    EXPECT_NE(ir->find("x86.avx512.vpermi2var.qi.512"), std::string::npos)
        << "the quantizer's byte buckets either way";
  }
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

TEST(CpuCodegen, KernelsAreKeyedByTheirCode) {
  testing::check_kernels_are_keyed_by_their_code("cpu", {});
}

// The flags of /proc/cpuinfo: what the kernel found the CPU to have, an oracle apart from LLVM's
// own detection.
std::set<std::string> cpuinfo_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("flags", 0) == 0) {
      std::istringstream words(line.substr(line.find(':') + 1));
      return {std::istream_iterator<std::string>(words), std::istream_iterator<std::string>()};
    }
  return {};
}

// OPTJIT_CPU_FEATURES may take away anything and add only what the CPU has: a '+' of an
// instruction set it lacks compiled kernels that stopped the process with SIGILL (an f16 state
// with +avx512fp16 on a Zen 4), and a misspelt name had LLVM print a warning for every module
// and go on. Both are errors before any code is made, from every door to the host's code.
TEST(CpuCodegen, FeatureChangesAreCheckedBeforeAnyCodeIsMade) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "the instruction sets below are x86's";
#endif
  const auto flags = cpuinfo_flags();
  ASSERT_TRUE(flags.count("sse2")) << "no flags read from /proc/cpuinfo";
  // LLVM's name and the kernel's of instruction sets some x86 CPUs have and others lack (AMD
  // has no AMX or AVX512-FP16, Intel no SSE4a or XOP).
  std::string lacked;
  for (auto [llvm_name, flag] : {std::pair{"avx512fp16", "avx512_fp16"},
                                 {"amx-tile", "amx_tile"},
                                 {"sse4a", "sse4a"},
                                 {"xop", "xop"}})
    if (!flags.count(flag)) {
      lacked = llvm_name;
      break;
    }
  ASSERT_FALSE(lacked.empty()) << "this CPU has every candidate";
  auto plan = compile_pipeline("adamw(lr=1e-3, state_format=\"f16\")");
  ASSERT_TRUE(plan);
  struct Case {
    std::string env, error;  // error empty: accepted
  };
  const std::string known = "is not '+' or '-' and an instruction set LLVM ";
  const std::vector<Case> cases = {
      {"-avx512bw,-avx512vbmi", ""},
      {"+sse2", ""},            // every x86-64 has it
      {"+prefer-256-bit", ""},  // a tuning, which any CPU runs
      {"+" + lacked, "this CPU (" + codegen::CpuTarget::host().cpu + ") has no '" + lacked +
                         "', and code using it would stop the process with an illegal instruction"},
      {"-avx512bw,+" + lacked, "has no '" + lacked + "'"},
      {"garbage", "'garbage' " + known},
      {"+avx512bww", "'+avx512bww' " + known},
      {"avx2", "'avx2' " + known},
      {"-avx512bw,", "'' " + known},
      {"+", "'+' " + known},
  };
  for (const auto& c : cases) {
    ASSERT_EQ(::setenv("OPTJIT_CPU_FEATURES", c.env.c_str(), 1), 0);
    auto checked = codegen::check_cpu_feature_changes();
    auto kernels = codegen::CpuKernels::compile(*plan);
    std::vector<float> w(64, 1.0f), g(64, 0.5f);
    auto opt = Optimizer::create("adamw(lr=1e-3, state_format=\"f16\")",
                                 {{"w", w.data(), DType::f32, {64}}},
                                 OptimizerOptions{.cache = std::nullopt});
    ::unsetenv("OPTJIT_CPU_FEATURES");
    if (c.error.empty()) {
      EXPECT_TRUE(checked) << c.env << ": " << checked.error().message;
      EXPECT_TRUE(kernels) << c.env << ": " << kernels.error().message;
      ASSERT_TRUE(opt) << c.env << ": " << opt.error().message;
      ASSERT_TRUE((*opt)->step({g.data()}));
      EXPECT_FLOAT_EQ(w[0], 1.0f - 1e-3f * (1.0f + 0.01f));  // Adam's first step: lr * sign
      continue;
    }
    const std::string head = "OPTJIT_CPU_FEATURES='" + c.env + "': ";
    ASSERT_FALSE(checked) << c.env;
    EXPECT_EQ(checked.error().message.rfind(head, 0), 0u) << checked.error().message;
    EXPECT_NE(checked.error().message.find(c.error), std::string::npos) << checked.error().message;
    ASSERT_FALSE(kernels) << c.env;
    EXPECT_EQ(kernels.error().message, checked.error().message);
    ASSERT_FALSE(opt) << c.env;
    EXPECT_NE(opt.error().message.find(checked.error().message), std::string::npos)
        << opt.error().message;
  }
  // A CPU to show the code of (`optjit emit --cpu`) is one LLVM knows.
  auto bogus = codegen::CpuTarget::named("bogus");
  ASSERT_FALSE(bogus);
  EXPECT_EQ(bogus.error().message.rfind("'bogus' is not a CPU LLVM ", 0), 0u)
      << bogus.error().message;
  EXPECT_TRUE(codegen::CpuTarget::named("znver3"));
}

// The number of memory mappings this process has (/proc/self/maps), of which Linux allows
// vm.max_map_count (65530 by default).
size_t mappings() {
  std::ifstream maps("/proc/self/maps");
  return static_cast<size_t>(
      std::count(std::istreambuf_iterator<char>(maps), std::istreambuf_iterator<char>(), '\n'));
}

// Each optimizer had an LLJIT of its own, whose object LLVM 15's JITLink left mapped when it
// went (two mappings per optimizer made): a process that made optimizers again and again
// (optjit.torch makes one per set of parameters with gradients) ran out of mappings, where
// every mmap fails. A program's code is loaded once and shared now.
TEST(CpuCodegen, OptimizersMadeAgainAndAgainMapNoNewMemory) {
  std::vector<float> w(1000, 1.0f), g(1000, 0.5f);
  const std::vector<std::string> pipelines = {
      "adamw(lr=1e-3)", "chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-3))", "sgd(lr=0.1)",
      "chain(clip_grad_norm(max_norm=2.0, norm_type=1.0), sgd(lr=0.1))", "lion(lr=1e-4)"};
  auto make_and_step = [&](const std::string& pipeline) {
    OptimizerOptions options;
    options.backend = Backend::cpu;
    auto o = Optimizer::create(pipeline, {{"w", w.data(), DType::f32, {1000}}}, options);
    ASSERT_TRUE(o) << o.error().message;
    ASSERT_TRUE((*o)->step({g.data()}));
  };
  for (const auto& p : pipelines) make_and_step(p);  // (each program loaded once)
  const size_t before = mappings();
  for (int round = 0; round < 100; ++round)
    for (const auto& p : pipelines) make_and_step(p);
  EXPECT_LT(mappings(), before + 20) << "500 optimizers made: " << before << " mappings before";
}

// OPTJIT_PERF_MAP=1: each JIT'd pass is a line of /tmp/perf-<pid>.map, where `perf report`
// looks for names of JIT code: its address (the function the executor calls), its size and
// "optjit_pass_<k> <program hash>". Unset, nothing is written.
TEST(CpuCodegen, ThePerfMapNamesEveryPassWhereAsked) {
  auto plan = compile_pipeline("chain(clip_grad_norm(max_norm=1.0), adamw())");
  ASSERT_TRUE(plan);
  ASSERT_EQ(plan->passes.size(), 2u);
  const std::string path = "/tmp/perf-" + std::to_string(::getpid()) + ".map";
  std::remove(path.c_str());
  auto quiet = codegen::CpuKernels::compile(*plan);
  ASSERT_TRUE(quiet) << quiet.error().message;
  EXPECT_FALSE(std::ifstream(path).good()) << "written without OPTJIT_PERF_MAP";
  ::setenv("OPTJIT_PERF_MAP", "1", 1);
  auto k = codegen::CpuKernels::compile(*plan);
  ::unsetenv("OPTJIT_PERF_MAP");
  ASSERT_TRUE(k) << k.error().message;
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << path;
  const std::string hash = fmt::format("{:016x}", ir::structural_hash(plan->program));
  std::string line;
  for (size_t p = 0; p < 2; ++p) {
    ASSERT_TRUE(std::getline(in, line)) << "pass " << p;
    std::istringstream fields(line);
    std::string start, size, name, program;
    fields >> start >> size >> name >> program;
    EXPECT_EQ(std::stoull(start, nullptr, 16), reinterpret_cast<uintptr_t>((*k)->pass(p))) << line;
    EXPECT_GT(std::stoull(size, nullptr, 16), 16u) << line;
    EXPECT_LT(std::stoull(size, nullptr, 16), 1u << 20) << line;
    EXPECT_EQ(name, "optjit_pass_" + std::to_string(p)) << line;
    EXPECT_EQ(program, hash) << line;
  }
  EXPECT_FALSE(std::getline(in, line)) << "an extra line: " << line;
  std::remove(path.c_str());
}

// Every PyTorch fixture, on the CPU backend, with small chunks so tensors span several.
class CpuParity : public ::testing::TestWithParam<int> {};

TEST_P(CpuParity, MatchesTorchAndTheReference) {
  std::shared_ptr<runtime::Executor> cpu;
  testing::check_backend_on_fixture(
      GetParam(), [&](const plan::Plan& plan) -> Expected<testing::StepFn> {
        auto b = testing::cpu_executor(plan, {2, 5});
        if (!b) return b.error();
        cpu = std::move(*b);
        return testing::StepFn([cpu](runtime::OptimizerState& s) -> Expected<runtime::StepResult> {
          return cpu->step(s);
        });
      });
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CpuParity, testing::all_fixture_cases(),
                         testing::fixture_case_name);

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
    auto cpu = testing::cpu_executor(*plan);
    ASSERT_TRUE(cpu) << cpu.error().message;
    ASSERT_TRUE((*cpu)->step(*a));
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
    auto cpu = testing::cpu_executor(*plan, {threads, 1 << 14});
    ASSERT_TRUE(cpu) << cpu.error().message;
    for (int step = 0; step < 3; ++step) {
      ASSERT_TRUE(runtime::set_grads(*plan, *s, gp));
      ASSERT_TRUE((*cpu)->step(*s));
    }
    std::vector<std::vector<uint8_t>> now;
    for (const auto& t : s->tensors)
      now.push_back(t.bytes(plan->program.param_buffer(), DType::f32));
    if (first.empty()) first = now;
    EXPECT_EQ(now, first) << threads << " threads";
  }
}

// How a pass's chunks are spread over threads: an automatic count uses a thread only where it
// has kMinWorkPerThread of work (a small step runs on the caller's thread alone, instead of
// waking a thread that costs more than it saves); a count asked for is used; never more
// threads than chunks; the ranges cover every chunk once, in order, with about equal work.
TEST(CpuBackend, ChunksAreSpreadOverAsManyThreadsAsTheWorkPays) {
  auto table = [](std::vector<int64_t> numels, int64_t chunk) {
    return runtime::ChunkTable::build(numels, chunk).chunks;
  };
  auto ranges = [](const std::vector<codegen::Chunk>& c, int threads, bool fixed) {
    return runtime::thread_ranges(c.data(), static_cast<int64_t>(c.size()), threads, fixed);
  };
  using V = std::vector<int64_t>;
  const int64_t min_work = runtime::kMinWorkPerThread;
  // 10 tensors of 16 elements (a small model's biases): one thread, whatever the cores; 8 where
  // 8 are asked for, 1 or 2 chunks each.
  EXPECT_EQ(ranges(table(V(10, 16), 1 << 16), 8, false), (V{0, 10}));
  EXPECT_EQ(ranges(table(V(10, 16), 1 << 16), 8, true), (V{0, 1, 2, 4, 5, 6, 7, 9, 10}));
  // Two chunks with just under two threads' work, then with just that (a chunk counts 64
  // elements more than it holds).
  EXPECT_EQ(ranges(table({16000, 2 * min_work - 16000 - 129}, 1 << 16), 2, false), (V{0, 2}));
  EXPECT_EQ(ranges(table({16000, 2 * min_work - 16000 - 128}, 1 << 16), 2, false), (V{0, 1, 2}));
  EXPECT_EQ(ranges(table({2 * min_work}, 1024), 2, false), (V{0, 16, 32}));
  // One chunk: one thread, even where more are asked for.
  EXPECT_EQ(ranges(table({1 << 20}, 1 << 20), 4, true), (V{0, 1}));
  // Large steps: every thread, each with about its share of the work.
  const auto big = table({1000003, 17, 0, 4096, 300000}, 1 << 14);
  for (bool fixed : {false, true}) {
    const V r = ranges(big, 3, fixed);
    ASSERT_EQ(r.size(), 4u) << fixed;
    EXPECT_EQ(r.front(), 0);
    EXPECT_EQ(r.back(), static_cast<int64_t>(big.size()));
    for (size_t t = 0; t + 1 < r.size(); ++t) {
      int64_t work = 0;
      for (int64_t c = r[t]; c < r[t + 1]; ++c) work += big[c].length;
      EXPECT_NEAR(static_cast<double>(work), 1304116 / 3.0, (1 << 14) + 1024) << t;  // a chunk
    }
  }
  // A heavy chunk first: the ranges after it still share the rest, none is empty.
  EXPECT_EQ(ranges(table({1 << 16, 100, 100, 100}, 1 << 16), 4, true), (V{0, 1, 2, 3, 4}));
  // No chunks (every tensor empty has one of length 0; a table of none still gives a range).
  EXPECT_EQ(runtime::thread_ranges(nullptr, 0, 4, false), (V{0, 0}));
}

// Gradients in other memory every step (a framework's new gradient tensors): an executor that
// queues its steps (ExecutorOptions::queued_steps) writes only the table entries that changed,
// with Device::write_queued; on the CPU that is a copy, so the bits must be the same as an
// executor that writes the whole table each time.
TEST(CpuBackend, MovingGradientsRewriteOnlyTheirTableEntries) {
  auto plan = compile_pipeline("chain(clip_grad_norm(max_norm=0.5), adamw(weight_decay=0.01))");
  ASSERT_TRUE(plan);
  std::vector<HostTensor> params;
  for (int64_t n : {5000, 17, 0, 300})
    params.push_back(HostTensor::zeros("p" + std::to_string(n), DType::f32, {n}));
  for (auto& p : params)
    for (int64_t i = 0; i < p.numel(); ++i) p.set(i, std::sin(0.1 * i));
  const uint32_t gb = plan->program.grad_buffer();
  std::vector<std::vector<uint8_t>> result[2];
  for (int queued = 0; queued < 2; ++queued) {
    auto s = runtime::init_state(*plan, params, {});
    ASSERT_TRUE(s);
    auto options = runtime::ExecutorOptions::of({2, 1 << 12});
    options.queued_steps = queued == 1;
    auto cpu = testing::executor(*plan, "cpu", options);
    ASSERT_TRUE(cpu) << cpu.error().message;
    std::vector<std::vector<float>> memory;  // every step's gradients, kept alive
    for (int step = 0; step < 4; ++step) {
      for (size_t t = 0; t < params.size(); ++t) {
        // Only some tensors move on a given step: runs of changed entries and unchanged ones.
        if (step > 0 && (t + step) % 2 == 0) continue;
        memory.emplace_back(static_cast<size_t>(params[t].numel()) + 1);
        for (size_t i = 0; i < memory.back().size(); ++i)
          memory.back()[i] = std::cos(0.3f * i + step + t);
        s->tensors[t].external[gb] = reinterpret_cast<uint8_t*>(memory.back().data());
      }
      s->bindings.changed();
      ASSERT_TRUE((*cpu)->step(*s));
    }
    for (const auto& t : s->tensors)
      result[queued].push_back(t.bytes(plan->program.param_buffer(), DType::f32));
  }
  EXPECT_EQ(result[1], result[0]);
}

TEST(CpuBackend, RejectsABadChunkSize) {
  auto plan = compile_pipeline("sgd(lr=0.1)");
  ASSERT_TRUE(plan);
  auto cpu = testing::cpu_executor(*plan, {1, 0});
  ASSERT_FALSE(cpu);
  EXPECT_EQ(cpu.error().message, "chunk size must be at least 1 element");
}

TEST(CpuBackend, PassVersionsStepAsTheWholeBody) {
  testing::check_versions_step_as_the_whole_body([](const plan::Plan& plan) {
    return testing::cpu_executor(plan, {2, 1 << 10});
  });
}

TEST(CpuBackend, ConditionsCarriedInScratchBuffersStepAsTheReference) {
  testing::check_carried_conditions_step_as_the_reference([](const plan::Plan& plan) {
    return testing::cpu_executor(plan, {2, 64});
  });
}

TEST(CpuBackend, FmaRoundsOnce) {
  testing::check_fma_rounds_once([](const plan::Plan& plan) {
    return testing::cpu_executor(plan, {2, 64});
  });
}

TEST(CpuBackend, IntegerConversionsSaturateAsTheReference) {
  testing::check_integer_conversions_saturate([](const plan::Plan& plan) {
    return testing::cpu_executor(plan, {2, 64});
  });
}

TEST(CpuBackend, CastsRoundAsTheReference) {
  testing::check_casts_round_as_the_reference([](const plan::Plan& plan) {
    return testing::cpu_executor(plan, {2, 64});
  });
}

}  // namespace
}  // namespace optjit
