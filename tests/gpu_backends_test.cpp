// CUDA and OpenCL: golden emitted source, NVRTC cubins for every built-in, and OpenCL (PoCL
// in CI) against PyTorch and the reference on every fixture. None of this needs a GPU.
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>

#include <gtest/gtest.h>

#include "autotune/gpu_tuner.h"
#include "backend_parity.h"
#include "cache/kernel_cache.h"
#include "codegen/c_emitter.h"
#include "codegen/launch.h"
#include "codegen/nvrtc.h"
#include "executors.h"
#include "ir/builtins.h"
#include "ir/compile.h"
#include "runtime/cuda_api.h"
#include "runtime/device.h"
#include "runtime/opencl_device.h"

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
  int block = 256, items = 1, vec = 1;
  bool device_step = false;
  bool shared_tables = false;
  bool interleave = false;
};

class Golden : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(Golden, EmittedSourceIsPinned) {
  const auto& g = GetParam();
  auto plan = compile_pipeline(g.pipeline, {g.dtype, g.dtype, g.dtype});
  ASSERT_TRUE(plan) << plan.error().message;
  const codegen::CEmitOptions options{g.language,
                                      {.block = g.block,
                                       .items = g.items,
                                       .vec = g.vec,
                                       .shared_tables = g.shared_tables,
                                       .interleave = g.interleave},
                                      g.device_step};
  auto src = codegen::emit_c(*plan, options);
  ASSERT_TRUE(src) << src.error().message;
  auto again = codegen::emit_c(*plan, options);
  EXPECT_EQ(*src, *again);
  check_golden(g.file, *src);
}

INSTANTIATE_TEST_SUITE_P(
    Pipelines, Golden,
    ::testing::Values(
        GoldenCase{"clip_adamw.cu", "chain(clip_grad_norm(max_norm=1.0), adamw())", DType::f32,
                   codegen::CLanguage::cuda},
        GoldenCase{"clip_adamw.cl", "chain(clip_grad_norm(max_norm=1.0), adamw())", DType::f32,
                   codegen::CLanguage::opencl},
        GoldenCase{"lamb_bf16.cu", "lamb(weight_decay=0.01)", DType::bf16,
                   codegen::CLanguage::cuda},
        GoldenCase{"scaler_sgd_f16.cl", "chain(grad_scaler(scale=1024), sgd(lr=0.1, momentum=0.9))",
                   DType::f16, codegen::CLanguage::opencl},
        // Vector loads, several items per thread, tails.
        GoldenCase{"clip_adamw_b128_i2_v4.cu", "chain(clip_grad_norm(max_norm=1.0), adamw())",
                   DType::f32, codegen::CLanguage::cuda, 128, 2, 4},
        GoldenCase{"scaler_sgd_f16_v8.cl",
                   "chain(grad_scaler(scale=1024), sgd(lr=0.1, momentum=0.9))", DType::f16,
                   codegen::CLanguage::opencl, 64, 1, 8},
        GoldenCase{"lamb_bf16_i2_v2.cu", "lamb(weight_decay=0.01)", DType::bf16,
                   codegen::CLanguage::cuda, 256, 2, 2},
        // The device step: an all-tensor reduction with its fold (clip), a
        // per-tensor one (LAMB's trust ratio), a skip_if and scalar state (the
        // scaler), NAdam's mu_product, and a schedule.
        GoldenCase{"clip_adamw_step.cu", "chain(clip_grad_norm(max_norm=1.0), adamw())", DType::f32,
                   codegen::CLanguage::cuda, 256, 1, 1, true},
        GoldenCase{"lamb_bf16_step.cl", "lamb(weight_decay=0.01)", DType::bf16,
                   codegen::CLanguage::opencl, 256, 1, 1, true},
        GoldenCase{"scaler_nadam_cosine_step.cu",
                   "chain(grad_scaler(scale=1024), nadam(lr=cosine_annealing_lr("
                   "base_lr=0.01, T_max=100)))",
                   DType::f16, codegen::CLanguage::cuda, 256, 1, 1, true},
        // Block-quantized state: CUDA's quantization block per warp (4-bit: the codes of a
        // byte from neighbouring lanes), OpenCL's per work-group.
        GoldenCase{"clip_adamw_4bit.cu",
                   R"(chain(clip_grad_norm(max_norm=1.0), adamw(state_format="4bit")))", DType::f32,
                   codegen::CLanguage::cuda},
        // The same with the code tables copied into shared memory (tables=shared).
        GoldenCase{"clip_adamw_4bit_shared.cu",
                   R"(chain(clip_grad_norm(max_norm=1.0), adamw(state_format="4bit")))", DType::f32,
                   codegen::CLanguage::cuda, 256, 1, 1, false, true},
        // Vectors of 4 a lane: 8-bit codes as words, bf16 parameters as 8-byte vectors (the
        // values in f32 vectors), the vector across a tensor's end element by element.
        GoldenCase{"clip_adamw_8bit_bf16_v4.cu",
                   R"(chain(clip_grad_norm(max_norm=1.0), adamw(state_format="8bit")))",
                   DType::bf16, codegen::CLanguage::cuda, 256, 1, 4},
        // A vector's elements side by side (interleave=1): branch-free division and square
        // root, reductions and absmax where they were exact, the elements one by one otherwise.
        GoldenCase{"clip_adamw_8bit_v4_interleave.cu",
                   R"(chain(clip_grad_norm(max_norm=1.0), adamw(state_format="8bit")))", DType::f32,
                   codegen::CLanguage::cuda, 256, 1, 4, false, false, true},
        GoldenCase{"clip_adamw_4bit.cl",
                   R"(chain(clip_grad_norm(max_norm=1.0), adamw(state_format="4bit")))", DType::f32,
                   codegen::CLanguage::opencl},
        // WGSL: f32, and bf16 two to a word with vector tails (pairs stored as one word).
        GoldenCase{"clip_adamw.wgsl", "chain(clip_grad_norm(max_norm=1.0), adamw())", DType::f32,
                   codegen::CLanguage::wgsl},
        GoldenCase{"lamb_bf16_i2_v2.wgsl", "lamb(weight_decay=0.01)", DType::bf16,
                   codegen::CLanguage::wgsl, 256, 2, 2}),
    [](const auto& param_info) {
      std::string n = param_info.param.file;
      for (auto& c : n)
        if (c == '.') c = '_';
      return n;
    });

TEST(CEmitter, RejectsLaunchShapesNoKernelCanUse) {
  auto plan = compile_pipeline("adamw()");
  ASSERT_TRUE(plan);
  auto error = [&](int block, int items, int vec) {
    auto src = codegen::emit_c(
        *plan, {codegen::CLanguage::cuda, {.block = block, .items = items, .vec = vec}});
    return src ? std::string("no error") : src.error().message;
  };
  EXPECT_EQ(error(100, 1, 1), "block size 100 is not a power of two between 1 and 1024");
  EXPECT_EQ(error(2048, 1, 1), "block size 2048 is not a power of two between 1 and 1024");
  EXPECT_EQ(error(256, 0, 1), "items per thread 0 is not in 1..8");
  EXPECT_EQ(error(256, 1, 3), "vector width 3 is not 1, 2, 4 or 8");
  EXPECT_EQ(error(256, 8, 8), "no error");
}

TEST(GpuLaunch, ParsesWhatUsersWriteAndWhatTheCacheStores) {
  auto l = codegen::GpuLaunch::from_text("vec=4,items=2");
  ASSERT_TRUE(l) << l.error().message;
  EXPECT_EQ(l->vec, 4);
  EXPECT_EQ(l->items, 2);
  EXPECT_EQ(l->block, 256);
  EXPECT_EQ(l->to_string(), "block=256,items=2,vec=4,grid=8,chunk=65536");
  EXPECT_EQ(codegen::GpuLaunch::parse(l->to_string()), *l);
  EXPECT_EQ(l->code_variant(), "block=256,items=2,vec=4");
  EXPECT_FALSE(codegen::GpuLaunch::parse("block=256,items=2,vec=4"));
  EXPECT_FALSE(codegen::GpuLaunch::parse("block=256,items=2,vec=3,grid=8,chunk=65536"));
  auto msg = [](const char* s) {
    auto r = codegen::GpuLaunch::from_text(s);
    return r ? std::string("no error") : r.error().message;
  };
  EXPECT_EQ(msg("warp=32"),
            "unknown launch parameter 'warp' (block, items, vec, grid, chunk, tables, prefetch, "
            "recompute, interleave, ahead, stage, resident)");
  EXPECT_EQ(msg("vec"),
            "launch parameter 'vec' is not name=value (block, items, vec, grid, chunk, tables, "
            "prefetch, recompute, interleave, ahead, stage, resident)");
  // Recomputing, L2 prefetching trips ahead and resident threads per SM (the launch bound):
  // code variants of their own, stored after tables= and prefetch= in this order; decisions
  // stored without them still parse, as none of them (512 resident threads).
  struct Stored {
    const char *text, *head, *options;
  };
  for (const Stored& c : {
           Stored{"vec=4,recompute=1", "block=256,items=1,vec=4", ",recompute=1"},
           Stored{"ahead=2", "block=256,items=1,vec=1", ",ahead=2"},
           Stored{"ahead=8,recompute=1,vec=2", "block=256,items=1,vec=2", ",recompute=1,ahead=8"},
           Stored{"interleave=1,vec=4", "block=256,items=1,vec=4", ",interleave=1"},
           Stored{"ahead=2,interleave=1,recompute=1,vec=4", "block=256,items=1,vec=4",
                  ",recompute=1,interleave=1,ahead=2"},
           Stored{"resident=768", "block=256,items=1,vec=1", ",resident=768"},
           Stored{"resident=1024,prefetch=1,tables=shared", "block=256,items=1,vec=1",
                  ",tables=shared,prefetch=1,resident=1024"},
           Stored{"tables=shared,prefetch=1,ahead=1,resident=768", "block=256,items=1,vec=1",
                  ",tables=shared,prefetch=1,ahead=1,resident=768"},
           Stored{"resident=768,stage=2,ahead=1,interleave=1,vec=4", "block=256,items=1,vec=4",
                  ",interleave=1,ahead=1,stage=2,resident=768"},
       }) {
    SCOPED_TRACE(c.text);
    auto r = codegen::GpuLaunch::from_text(c.text);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->to_string(), std::string(c.head) + ",grid=8,chunk=65536" + c.options);
    EXPECT_EQ(codegen::GpuLaunch::parse(r->to_string()), *r);
    EXPECT_EQ(r->code_variant(), std::string(c.head) + c.options);
  }
  EXPECT_TRUE(codegen::GpuLaunch::from_text("vec=4,recompute=1")->recompute);
  EXPECT_EQ(codegen::GpuLaunch::from_text("ahead=3")->ahead, 3);
  EXPECT_EQ(codegen::GpuLaunch::from_text("recompute=0,ahead=0")->to_string(),
            codegen::GpuLaunch{}.to_string());
  EXPECT_EQ(codegen::GpuLaunch::from_text("resident=512")->to_string(),
            codegen::GpuLaunch{}.to_string());
  // Stored decisions out of order, with a default written out, or out of range: refused.
  for (const char* bad :
       {",ahead=0", ",ahead=9", ",ahead=1,recompute=1", ",recompute=0", ",resident=768,prefetch=1",
        ",resident=100", ",resident=768x", ",interleave=1,recompute=1", ",interleave=0", ",stage=0",
        ",stage=1,ahead=1", ",resident=768,stage=1"})
    EXPECT_FALSE(codegen::GpuLaunch::parse(l->to_string() + bad)) << bad;
  for (const auto& [text, error] : std::vector<std::pair<const char*, const char*>>{
           {"recompute=2", "launch parameter recompute: '2' is not 0 or 1"},
           {"recompute=1", "recompute=1 needs vec=2, 4 or 8 (CUDA's quantized path in vectors)"},
           {"vec=4,recompute=1,prefetch=1",
            "recompute=1 and prefetch=1 exclude each other: prefetching takes one element a "
            "lane, recomputing works in vectors"},
           {"interleave=2", "launch parameter interleave: '2' is not 0 or 1"},
           {"interleave=1", "interleave=1 needs vec=2, 4 or 8 (CUDA's quantized path in vectors)"},
           {"vec=4,interleave=1,prefetch=1",
            "interleave=1 and prefetch=1 exclude each other: prefetching takes one element a "
            "lane, interleaving works in vectors"},
           {"vec=4,stage=1,prefetch=1",
            "stage=1 and prefetch=1 exclude each other: prefetching takes one element a lane, "
            "staging works in vectors"},
           {"ahead=9", "trips ahead 9 is not in 0..8"},
           {"ahead=-1", "trips ahead -1 is not in 0..8"},
           {"ahead=1,ahead=2", "launch parameter ahead is given twice"},
           {"resident=100", "resident threads 100 per SM is not a multiple of 32 in 32..2048"},
           {"resident=4096", "resident threads 4096 per SM is not a multiple of 32 in 32..2048"},
           {"prefetch=2", "launch parameter prefetch: '2' is not 0 or 1"},
           {"prefetch=1,prefetch=0", "launch parameter prefetch is given twice"},
       })
    EXPECT_EQ(msg(text), error) << text;
  // Prefetching: a code variant of its own, stored after tables=; decisions stored without it
  // still parse, as no prefetching.
  for (const char* text : {"prefetch=1,block=128", "tables=shared,prefetch=1,block=128"}) {
    SCOPED_TRACE(text);
    auto p = codegen::GpuLaunch::from_text(text);
    ASSERT_TRUE(p) << p.error().message;
    EXPECT_TRUE(p->prefetch);
    const std::string tables = p->shared_tables ? ",tables=shared" : "";
    EXPECT_EQ(p->to_string(),
              "block=128,items=1,vec=1,grid=8,chunk=65536" + tables + ",prefetch=1");
    EXPECT_EQ(codegen::GpuLaunch::parse(p->to_string()), *p);
    EXPECT_EQ(p->code_variant(), "block=128,items=1,vec=1" + tables + ",prefetch=1");
  }
  EXPECT_FALSE(codegen::GpuLaunch::parse(l->to_string() + ",prefetch=1,tables=shared"));
  EXPECT_FALSE(codegen::GpuLaunch::parse(l->to_string() + ",prefetch=0"));
  EXPECT_EQ(codegen::GpuLaunch::from_text("prefetch=0")->to_string(),
            codegen::GpuLaunch{}.to_string());
  EXPECT_EQ(msg("tables=local"), "launch parameter tables: 'local' is not global or shared");
  EXPECT_EQ(msg("tables=shared,tables=global"), "launch parameter tables is given twice");
  // Shared code tables: a code variant of their own, stored after the rest; decisions stored
  // without tables= still parse, as global tables.
  auto t = codegen::GpuLaunch::from_text("tables=shared,block=128");
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_TRUE(t->shared_tables);
  EXPECT_EQ(t->to_string(), "block=128,items=1,vec=1,grid=8,chunk=65536,tables=shared");
  EXPECT_EQ(codegen::GpuLaunch::parse(t->to_string()), *t);
  EXPECT_EQ(t->code_variant(), "block=128,items=1,vec=1,tables=shared");
  EXPECT_FALSE(codegen::GpuLaunch::from_text("tables=shared,tables=global"));
  EXPECT_FALSE(codegen::GpuLaunch::parse(l->to_string() + ",tables=global"));
  EXPECT_FALSE(codegen::GpuLaunch::parse(l->to_string() + ",tables=sharedx"));
  auto global = codegen::GpuLaunch::from_text("tables=global");
  ASSERT_TRUE(global) << global.error().message;
  EXPECT_FALSE(global->shared_tables);
  EXPECT_EQ(global->to_string(), codegen::GpuLaunch{}.to_string());
  EXPECT_EQ(msg("vec=four"), "launch parameter vec: 'four' is not an integer");
  EXPECT_EQ(msg("vec=8,chunk=100"), "chunk size 100 is not a multiple of the vector width 8");
  EXPECT_EQ(msg("grid=0"), "grid cap 0 blocks per unit is below 1");
  // Values too large for their field are named as given, not wrapped (2^40 read as 0 once).
  EXPECT_EQ(msg("items=1099511627776"),
            "launch parameter items=1099511627776 is out of range (1..8)");
  EXPECT_EQ(msg("block=99999999999999999999"),
            "launch parameter block=99999999999999999999 is out of range (a power of two between "
            "1 and 1024)");
  EXPECT_EQ(msg("chunk=1099511627777"),
            "launch parameter chunk=1099511627777 is out of range (1..2^40 elements)");
  EXPECT_EQ(msg("vec=-4294967292"),
            "launch parameter vec=-4294967292 is out of range (1, 2, 4 or 8)");
  EXPECT_EQ(msg("block=128,block=256"), "launch parameter block is given twice");
  EXPECT_EQ(msg(""), "no error");
  // The grid: at most groups_per_unit per unit, at most one per chunk, at least one.
  codegen::GpuLaunch g;
  g.groups_per_unit = 4;
  EXPECT_EQ(g.grid(1000, 132), 528);
  EXPECT_EQ(g.grid(10, 132), 10);
  EXPECT_EQ(g.grid(0, 132), 1);
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
      // nesterov needs momentum; low16 needs bf16 parameters (quant_test compiles it).
      if (o.default_value.index() == 0 && o.name != "nesterov" && o.name != "low16")
        args.emplace(o.name, true);
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
        // The default shape must not spill (it did on sm_80 before the launch bounds asked for
        // a minimum of resident blocks: ptxas then capped clip+AdamW at 48 registers).
        EXPECT_EQ(k.spill_stores + k.spill_loads, 0) << d->name << " spills on " << arch;
      }
      ++compiled;
    }
    // The device step (the scalar program and combines as kernels too), for sm_90.
    auto step_src = codegen::emit_c(*plan, {codegen::CLanguage::cuda, {}, true});
    ASSERT_TRUE(step_src) << step_src.error().message;
    auto cubin = codegen::compile_cubin(*step_src, "sm_90");
    ASSERT_TRUE(cubin) << d->name << " device step: " << cubin.error().message;
    const auto layout = codegen::device_step_layout(*plan);
    size_t expected = 2 * plan->passes.size() + 2;    // passes, segments, commit
    for (size_t k = 0; k < plan->passes.size(); ++k)  // combine, shard_out, shard_in; fold
      expected += 3 * layout.combines[k] + layout.folds[k];
    EXPECT_EQ(cubin->kernels.size(), expected) << d->name;
    for (const auto& k : cubin->kernels)
      EXPECT_EQ(k.spill_stores + k.spill_loads, 0) << d->name << " " << k.name << " spills";
  }
  EXPECT_EQ(compiled, 36);  // 18 transforms, two architectures
}

// `resident` is the launch bound's resident threads per SM, so it caps a kernel's registers at
// 65536 / resident: the 8-bit AdamW update pass takes 126-128 by default and at most 80 with
// resident=768 (where it spills, which the tuner's pruning sees).
TEST(Nvrtc, ResidentThreadsCapRegisters) {
  ASSERT_TRUE(codegen::have_nvrtc());
  auto plan = compile_pipeline(
      R"(chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-3, state_format="8bit")))");
  ASSERT_TRUE(plan) << plan.error().message;
  for (int resident : {512, 768, 1024}) {
    SCOPED_TRACE(resident);
    const codegen::CEmitOptions o{codegen::CLanguage::cuda, {.resident = resident}};
    auto src = codegen::emit_c(*plan, o);
    ASSERT_TRUE(src) << src.error().message;
    EXPECT_NE(src->find(fmt::format("__launch_bounds__(256, {})", resident / 256)),
              std::string::npos);
    auto cubin = codegen::compile_cubin(*src, "sm_90");
    ASSERT_TRUE(cubin) << cubin.error().message;
    int most = 0;
    for (const auto& k : cubin->kernels) most = std::max(most, k.registers);
    EXPECT_LE(most, 65536 / resident);
    // (OpenCL and WGSL have no launch bounds.)
    for (auto language : {codegen::CLanguage::opencl, codegen::CLanguage::wgsl}) {
      auto other = codegen::emit_c(*plan, {language, {.resident = resident}});
      EXPECT_EQ(
          other ? std::string("no error") : other.error().message,
          resident == 512
              ? "no error"
              : fmt::format("the {} backend has no launch bounds: resident={} "
                            "(threads per SM) is CUDA's",
                            language == codegen::CLanguage::opencl ? "opencl" : "wgsl", resident));
    }
    if (resident == 512) {
      EXPECT_GT(most, 80);  // (so the caps below bite)
    }
  }
}

// recompute=1 (two sweeps a trip) and ahead=N (the lines N trips ahead into L2) compile for
// every quantized format with no spills; where they cannot apply they are errors that say why.
// (Their results: Fixtures/CudaQuantizedLaunch.StepsTheCpusBits, under the emulator and on a GPU.)
TEST(Nvrtc, RecomputeAndAheadCompileOrSayWhyNot) {
  ASSERT_TRUE(codegen::have_nvrtc());
  for (const char* format : {"8bit", "f8", "4bit"}) {
    SCOPED_TRACE(format);
    auto plan = compile_pipeline(fmt::format(
        R"(chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-3, state_format="{}")))", format));
    ASSERT_TRUE(plan) << plan.error().message;
    const codegen::CEmitOptions o{codegen::CLanguage::cuda,
                                  {.vec = 4, .recompute = true, .ahead = 2}};
    auto src = codegen::emit_c(*plan, o);
    ASSERT_TRUE(src) << src.error().message;
    // The update pass loads param, grad and both moments: 8 + 8 lines of f32 a 256-element
    // block, 2 + 2 of 8-bit codes (4-bit: 4 + 4 and 1 + 1 a 128-element block), 2 trips of 8
    // warps (2048 or 1024 elements) ahead.
    const bool four = std::string(format) == "4bit";
    EXPECT_NE(src->find(fmt::format("if (lane < {} && x < len)", four ? 10 : 20)),
              std::string::npos);
    EXPECT_NE(src->find(fmt::format("x = e0 + {} +", four ? 2048 : 4096)), std::string::npos);
    // A trip past its chunk's end asks for the lines at the same place of the chunk the
    // work-group takes next, inside that chunk (from its row: the codes at off2, or off2 / 2
    // for 4-bit).
    EXPECT_NE(src->find(fmt::format("x = e0 + {} - len +", four ? 2048 : 4096)), std::string::npos);
    EXPECT_NE(src->find(fmt::format("if (lane < {} && x < len2)", four ? 10 : 20)),
              std::string::npos);
    EXPECT_NE(src->find(four ? "nq2 = (const unsigned char*)nb[2] + (off2 >> 1);"
                             : "nq2 = (const unsigned char*)nb[2] + off2;"),
              std::string::npos);
    auto cubin = codegen::compile_cubin(*src, "sm_90");
    ASSERT_TRUE(cubin) << cubin.error().message;
    for (const auto& k : cubin->kernels)
      EXPECT_EQ(k.spill_stores + k.spill_loads, 0) << k.name << " spills";
    for (auto language : {codegen::CLanguage::opencl, codegen::CLanguage::wgsl}) {
      const char* name = language == codegen::CLanguage::opencl ? "opencl" : "wgsl";
      auto recompute = codegen::emit_c(*plan, {language, {.vec = 4, .recompute = true}});
      EXPECT_EQ(recompute ? std::string("no error") : recompute.error().message,
                fmt::format("the {} backend quantizes a block per work-group through local "
                            "memory: recompute=1 is CUDA's (its warps' quantized path)",
                            name));
      auto ahead = codegen::emit_c(*plan, {language, {.ahead = 1}});
      EXPECT_EQ(ahead ? std::string("no error") : ahead.error().message,
                fmt::format("the {} backend has no L2 prefetch: ahead=1 is CUDA's", name));
    }
  }
  // 4-bit blocks of 128 give a lane 4 elements: vectors of 8 do not fit, so neither does
  // recomputing or interleaving in them; nor blocks of fewer threads than a warp (the
  // work-group quantizes a block at a time).
  auto plan = compile_pipeline(R"(adamw(lr=1e-3, state_format="4bit"))");
  ASSERT_TRUE(plan) << plan.error().message;
  for (const char* option : {"recompute", "interleave"}) {
    const bool recompute = std::string(option) == "recompute";
    auto wide = codegen::emit_c(
        *plan,
        {codegen::CLanguage::cuda, {.vec = 8, .recompute = recompute, .interleave = !recompute}});
    EXPECT_EQ(wide ? std::string("no error") : wide.error().message,
              fmt::format("{}=1: vec=8 does not divide the 4 elements a lane of 128-element "
                          "quantization blocks, so the quantized path does not run in vectors",
                          option));
    auto small = codegen::emit_c(
        *plan, {codegen::CLanguage::cuda,
                {.block = 16, .vec = 4, .recompute = recompute, .interleave = !recompute}});
    EXPECT_EQ(small ? std::string("no error") : small.error().message,
              fmt::format("{}=1: blocks of 16 threads are not whole warps, so no warp "
                          "quantizes blocks of its own",
                          option));
  }
}

// interleave=1 (a vector's elements side by side, branch-free f32 division and square root):
// the helpers and the side-by-side statements are there, with the one-by-one path after them,
// and each format compiles with no spills; OpenCL and WGSL refuse it.
TEST(Nvrtc, InterleavedElementsCompileOrSayWhyNot) {
  ASSERT_TRUE(codegen::have_nvrtc());
  for (const char* format : {"8bit", "f8", "4bit"}) {
    SCOPED_TRACE(format);
    auto plan = compile_pipeline(fmt::format(
        R"(chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-3, state_format="{}")))", format));
    ASSERT_TRUE(plan) << plan.error().message;
    auto src = codegen::emit_c(*plan, {codegen::CLanguage::cuda, {.vec = 4, .interleave = true}});
    ASSERT_TRUE(src) << src.error().message;
    EXPECT_NE(src->find("__device__ __forceinline__ float optjit_fdiv(float a, float b, bool& ok)"),
              std::string::npos);
    EXPECT_NE(src->find("= optjit_fsqrt(v"), std::string::npos);
    EXPECT_NE(src->find("_3 = optjit_fdiv(v"), std::string::npos);
    EXPECT_NE(src->find("if (!done) {"), std::string::npos);
    auto cubin = codegen::compile_cubin(*src, "sm_90");
    ASSERT_TRUE(cubin) << cubin.error().message;
    for (const auto& k : cubin->kernels)
      EXPECT_EQ(k.spill_stores + k.spill_loads, 0) << k.name << " spills";
    for (auto language : {codegen::CLanguage::opencl, codegen::CLanguage::wgsl}) {
      auto other = codegen::emit_c(*plan, {language, {.vec = 4, .interleave = true}});
      EXPECT_EQ(other ? std::string("no error") : other.error().message,
                fmt::format("the {} backend quantizes a block per work-group through local "
                            "memory: interleave=1 is CUDA's (its warps' quantized path in "
                            "vectors)",
                            language == codegen::CLanguage::opencl ? "opencl" : "wgsl"));
    }
  }
  // (Lanes that are not vectors: Nvrtc.RecomputeAndAheadCompileOrSayWhyNot.) Without
  // quantized state the option changes nothing.
  auto plain = compile_pipeline("adamw(lr=1e-3)");
  ASSERT_TRUE(plain) << plain.error().message;
  EXPECT_EQ(
      codegen::emit_c(*plain, {codegen::CLanguage::cuda, {.vec = 4, .interleave = true}}).value(),
      codegen::emit_c(*plain, {codegen::CLanguage::cuda, {.vec = 4}}).value());
}

// stage=N: each warp's ring of N trips in shared memory, filled by cp.async on sm_80 and later
// (plain copies before: the same source compiles for sm_75); real NVRTC and ptxas for three
// formats, with no spills and the ring's bytes as the kernel's shared memory. Too many bytes,
// other languages and vec=1 are refused by name.
TEST(Nvrtc, StagedTripsCompileOrSayWhyNot) {
  ASSERT_TRUE(codegen::have_nvrtc());
  // Bytes a warp's trip stages: f32 parameters and gradients (1 KiB each for a 256-block),
  // the two moments' codes, their scales padded to 16 bytes.
  for (const auto& [format, trip] :
       {std::pair{"8bit", 2 * 1024 + 2 * 256 + 16}, std::pair{"f8", 2 * 1024 + 2 * 256 + 16},
        std::pair{"4bit", 2 * 512 + 2 * 64 + 16}}) {
    SCOPED_TRACE(format);
    auto plan = compile_pipeline(fmt::format(
        R"(chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-3, state_format="{}")))", format));
    ASSERT_TRUE(plan) << plan.error().message;
    const codegen::GpuLaunch launch{.vec = 4, .interleave = true, .ahead = 2, .stage = 2};
    auto src = codegen::emit_c(*plan, {codegen::CLanguage::cuda, launch});
    ASSERT_TRUE(src) << src.error().message;
    EXPECT_NE(src->find(fmt::format("__align__(16) __shared__ unsigned char optjit_stage[{}];",
                                    2 * 8 * trip)),
              std::string::npos);
    EXPECT_NE(src->find("optjit_cp_wait<1>();"), std::string::npos);
    EXPECT_NE(src->find("cp.async.cg.shared.global"), std::string::npos);
    for (const char* arch : {"sm_90", "sm_80", "sm_75"}) {
      SCOPED_TRACE(arch);
      auto cubin = codegen::compile_cubin(*src, arch);
      ASSERT_TRUE(cubin) << cubin.error().message;
      bool staged = false;
      for (const auto& k : cubin->kernels) {
        EXPECT_EQ(k.spill_stores + k.spill_loads, 0) << k.name << " spills";
        staged = staged || k.shared_bytes >= 2 * 8 * trip;
      }
      EXPECT_TRUE(staged) << "no kernel holds the ring in shared memory";
    }
    auto opencl = codegen::emit_c(*plan, {codegen::CLanguage::opencl, {.vec = 4, .stage = 1}});
    EXPECT_EQ(opencl ? std::string("no error") : opencl.error().message,
              "the opencl backend has no asynchronous copies into shared memory: stage=1 is "
              "CUDA's");
  }
  auto plan = compile_pipeline(
      R"(chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-3, state_format="8bit")))");
  ASSERT_TRUE(plan) << plan.error().message;
  auto big = codegen::emit_c(*plan, {codegen::CLanguage::cuda, {.items = 2, .vec = 4, .stage = 3}});
  EXPECT_EQ(big ? std::string("no error") : big.error().message,
            "stage=3: 3 trips of 5136 bytes for each of a block's 8 warps take 123264 bytes of "
            "shared memory, which with the kernel's other 0 bytes (code tables, reductions) is "
            "more than the 48 KiB a block declares; stage fewer trips, or take fewer items or "
            "threads");
  // A ring that fits by itself, but not beside the code tables' shared copies (ptxas said "uses
  // too much shared data" on an H200 before the emitter counted them).
  auto tables = codegen::emit_c(
      *plan, {codegen::CLanguage::cuda, {.vec = 4, .shared_tables = true, .stage = 2}});
  ASSERT_FALSE(tables);
  EXPECT_TRUE(std::regex_match(
      tables.error().message,
      std::regex("stage=2: 2 trips of 2576 bytes for each of a block's 8 warps take 41216 "
                 "bytes of shared memory, which with the kernel's other [0-9]+ bytes \\(code "
                 "tables, reductions\\) is more than the 48 KiB .*")))
      << tables.error().message;
  EXPECT_TRUE(codegen::emit_c(
      *plan, {codegen::CLanguage::cuda, {.vec = 4, .shared_tables = true, .stage = 1}}));
  // What the emitter accepts, ptxas takes: LAMB's two staged passes beside shared tables
  // (Fixtures/CudaQuantizedLaunch's mode 18).
  auto lamb = compile_pipeline(R"(lamb(lr=1e-2, state_format="8bit"))");
  ASSERT_TRUE(lamb) << lamb.error().message;
  auto lamb_src = codegen::emit_c(*lamb, {codegen::CLanguage::cuda,
                                          {.block = 64,
                                           .items = 2,
                                           .vec = 2,
                                           .chunk_elements = 4096,
                                           .shared_tables = true,
                                           .recompute = true,
                                           .stage = 2}});
  ASSERT_TRUE(lamb_src) << lamb_src.error().message;
  auto lamb_cubin = codegen::compile_cubin(*lamb_src, "sm_90");
  EXPECT_TRUE(lamb_cubin) << lamb_cubin.error().message;
  EXPECT_EQ(codegen::GpuLaunch::from_text("stage=2").error().message,
            "stage=2 needs vec=2, 4 or 8 (CUDA's quantized path in vectors)");
  EXPECT_EQ(codegen::GpuLaunch::from_text("vec=4,stage=5").error().message,
            "trips staged 5 is not in 0..4");
  // The cache's form keeps it, and a plan without quantized state is unchanged by it.
  EXPECT_EQ(
      codegen::GpuLaunch::parse("block=256,items=1,vec=4,grid=8,chunk=65536,stage=2").value().stage,
      2);
  auto plain = compile_pipeline("adamw(lr=1e-3)");
  ASSERT_TRUE(plain) << plain.error().message;
  EXPECT_EQ(codegen::emit_c(*plain, {codegen::CLanguage::cuda, {.vec = 4, .stage = 2}}).value(),
            codegen::emit_c(*plain, {codegen::CLanguage::cuda, {.vec = 4}}).value());
}

// The launch before tuning: with quantized state on CUDA, vectors of 4, two trips staged from
// sm_80 (before it, L2 prefetches 2 trips ahead: cp.async would be plain copies), interleaved
// only where the device check of the branch-free division has passed (sm_90); otherwise, and
// on other devices, the device's default.
TEST(GpuTuner, QuantizedStateHasADefaultOfItsOwnOnCuda) {
  auto quantized = compile_pipeline(
      R"(chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-3, state_format="8bit")))");
  auto plain = compile_pipeline("chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-3))");
  ASSERT_TRUE(quantized && plain);
  runtime::DeviceDescription d;
  d.kind = "cuda";
  d.default_launch = codegen::GpuLaunch{};
  auto on = [&](const char* arch, const plan::Plan& p) {
    d.arch = arch;
    return autotune::default_launch(p, d).to_string();
  };
  EXPECT_EQ(on("sm_90", *quantized),
            "block=256,items=1,vec=4,grid=8,chunk=65536,interleave=1,stage=2");
  EXPECT_EQ(on("sm_80", *quantized), "block=256,items=1,vec=4,grid=8,chunk=65536,stage=2");
  EXPECT_EQ(on("sm_75", *quantized), "block=256,items=1,vec=4,grid=8,chunk=65536,ahead=2");
  EXPECT_EQ(on("sm_90", *plain), codegen::GpuLaunch{}.to_string());
  d.kind = "opencl";
  d.default_launch = codegen::GpuLaunch::device_default(false);
  EXPECT_EQ(on("", *quantized), codegen::GpuLaunch::device_default(false).to_string());
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

// cuGetErrorString leaves the string null for a code it does not know; the message says so
// instead of formatting a null pointer.
TEST(CudaDriver, AnUnknownErrorCodeIsNamedAsSuch) {
  (void)runtime::cuda::api();  // loaded or not, fail() must cope
  EXPECT_EQ(runtime::cuda::fail("cuMemAlloc", 987654).message,
            "CUDA: cuMemAlloc failed: unknown error (error 987654)");
}

TEST(OpenCL, FindsDevicesAndRejectsAMissingOne) {
  auto devices = runtime::opencl_devices();
  ASSERT_TRUE(devices) << devices.error().message;
  ASSERT_FALSE(devices->empty());
  EXPECT_FALSE((*devices)[0].name.empty());
  auto plan = compile_pipeline("adamw()");
  ASSERT_TRUE(plan);
  auto b = runtime::open_device({.kind = "opencl", .index = 99});
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
    auto b = testing::executor(*plan, "opencl", testing::opencl_options(), cache->get());
    ASSERT_TRUE(b) << b.error().message;
    EXPECT_EQ((*b)->kernels_from_cache(), round == 1);
    auto s = runtime::init_state(*plan, params, {});
    ASSERT_TRUE(s && runtime::set_grads(*plan, *s, {&g}));
    ASSERT_TRUE((*b)->step(*s));
    results.push_back(s->tensors[0].bytes(plan->program.param_buffer(), DType::f32));
  }
  EXPECT_EQ(results[0], results[1]);
  std::filesystem::remove_all(dir);
}

TEST(OpenCL, KernelsAreKeyedByTheirCode) {
  testing::check_kernels_are_keyed_by_their_code("opencl", testing::opencl_options());
}

// Every launch shape computes the same steps: bit for bit when no pass reduces (nothing's
// order can differ), within rounding of the float64 reference otherwise. f16, bf16, f32 and f64
// storage; tensor sizes that leave tails of every length, and an empty tensor.
struct LaunchCase {
  const char* name;
  const char* pipeline;
  DType dt;
};

class OpenclLaunch : public ::testing::TestWithParam<LaunchCase> {};

TEST_P(OpenclLaunch, EveryShapeComputesTheSameSteps) {
  const LaunchCase& c = GetParam();
  // The parity tests below run {8, 1, 1, 8, 5} and {8, 2, 4, 1, 12}: these add odd item counts,
  // 8-wide vectors and tiny blocks.
  // The last runs the first shape as a device step: same chunks, same combining order, so it
  // must agree with the host-driven first run bit for bit, reductions included.
  const codegen::GpuLaunch shapes[] = {
      {.block = 8, .chunk_elements = 5},
      {.block = 16, .items = 3, .vec = 2, .chunk_elements = 6},
      {.block = 4, .items = 4, .vec = 8, .groups_per_unit = 2, .chunk_elements = 64},
      {.block = 8, .chunk_elements = 5},
  };
  const std::vector<int64_t> sizes = {1, 3, 17, 1000, 4099, 0};
  auto plan = compile_pipeline(c.pipeline, {c.dt, c.dt, c.dt});
  ASSERT_TRUE(plan) << plan.error().message;
  bool reduces = false;
  for (const auto& pass : plan->passes) reduces |= !pass.reductions.empty();
  std::vector<HostTensor> params;
  for (size_t t = 0; t < sizes.size(); ++t) {
    params.push_back(HostTensor::zeros(fmt::format("w{}", t), c.dt, {sizes[t]}));
    for (int64_t i = 0; i < sizes[t]; ++i) params.back().set(i, std::sin(0.37 * i + t) * 0.5);
  }
  auto run = [&](auto&& step) {
    auto s = runtime::init_state(*plan, params, {});
    EXPECT_TRUE(s);
    for (int k = 0; k < 3; ++k) {
      std::vector<HostTensor> grads;
      for (size_t t = 0; t < sizes.size(); ++t) {
        grads.push_back(HostTensor::zeros(fmt::format("w{}", t), c.dt, {sizes[t]}));
        for (int64_t i = 0; i < sizes[t]; ++i)
          grads.back().set(i, std::cos(1.3 * i + 0.7 * k + t) * (k + 1) * 0.05);
      }
      std::vector<const HostTensor*> ptrs;
      for (const auto& g : grads) ptrs.push_back(&g);
      EXPECT_TRUE(runtime::set_grads(*plan, *s, ptrs));
      step(*s);
    }
    return std::move(*s);
  };
  runtime::ReferenceBackend ref(*plan);
  const runtime::OptimizerState expected = run([&](runtime::OptimizerState& s) { ref.step(s); });
  const double rtol = c.dt == DType::f64    ? 1e-12
                      : c.dt == DType::f32  ? 2e-6
                      : c.dt == DType::bf16 ? 1e-2
                                            : 2e-3;
  std::optional<runtime::OptimizerState> first;
  for (const auto& shape : shapes) {
    const bool device_step = &shape == &shapes[3];
    SCOPED_TRACE(shape.to_string() + (device_step ? " device step" : ""));
    runtime::ExecutorOptions options;
    options.launch = shape;
    options.step = device_step ? runtime::StepMode::device : runtime::StepMode::host;
    auto b = testing::executor(*plan, "opencl", options);
    ASSERT_TRUE(b) << b.error().message;
    runtime::OptimizerState got = run([&](runtime::OptimizerState& s) {
      auto r = (*b)->step(s);
      ASSERT_TRUE(r) << r.error().message;
    });
    for (size_t t = 0; t < sizes.size(); ++t)
      for (size_t buf = 0; buf < plan->buffers.size(); ++buf) {
        if (plan->buffers[buf].role == ir::BufferRole::grad) continue;
        const DType st = plan->buffers[buf].storage;
        SCOPED_TRACE(
            fmt::format("tensor {} ({} elements), {}", t, sizes[t], plan->buffers[buf].name));
        EXPECT_TRUE(close(testing::buffer_values(got.tensors[t].data(buf), st, sizes[t]),
                          testing::buffer_values(expected.tensors[t].data(buf), st, sizes[t]), rtol,
                          1e-30));
        if (first && (!reduces || device_step)) {
          EXPECT_EQ(got.tensors[t].bytes(buf, st), first->tensors[t].bytes(buf, st));
        }
      }
    EXPECT_EQ(got.step, expected.step);
    if (first) {
      for (size_t g = 0; g < got.groups.size(); ++g)
        EXPECT_EQ(got.groups[g].states, first->groups[g].states) << "group " << g;
    }
    if (!first) first = std::move(got);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Pipelines, OpenclLaunch,
    ::testing::Values(
        LaunchCase{"adamw_bf16", "adamw(weight_decay=0.1)", DType::bf16},
        LaunchCase{"scaler_sgd_f16", "chain(grad_scaler(scale=1024), sgd(lr=0.1, momentum=0.9))",
                   DType::f16},
        LaunchCase{"clip_adamw_f32", "chain(clip_grad_norm(max_norm=0.5), adamw())", DType::f32},
        LaunchCase{"lamb_bf16", "lamb(weight_decay=0.01)", DType::bf16},
        LaunchCase{"clip_inf_lion_f64",
                   "chain(clip_grad_norm(max_norm=0.1, norm_type=inf), lion())", DType::f64}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

TEST(OpenclDeviceStep, CombinesManyChunksAndTensorsInTheHostsOrder) {
  testing::check_device_step_combines_like_the_host<runtime::Executor>(
      [](const plan::Plan& plan, bool device_step) {
        runtime::ExecutorOptions options;
        options.launch = codegen::GpuLaunch{.block = 8, .chunk_elements = 5};
        options.step = device_step ? runtime::StepMode::device : runtime::StepMode::host;
        return testing::executor(plan, "opencl", options);
      });
}

TEST(OpenCL, ConditionsCarriedInScratchBuffersStepAsTheReference) {
  testing::check_carried_conditions_step_as_the_reference([](const plan::Plan& plan) {
    return testing::executor(plan, "opencl", testing::opencl_options());
  });
}

TEST(OpenCL, FmaRoundsOnce) {
  testing::check_fma_rounds_once([](const plan::Plan& plan) {
    return testing::executor(plan, "opencl", testing::opencl_options());
  });
}

TEST(OpenCL, IntegerConversionsSaturateAsTheReference) {
  for (auto step : {runtime::StepMode::host, runtime::StepMode::device}) {
    SCOPED_TRACE(to_string(step));
    testing::check_integer_conversions_saturate([step](const plan::Plan& plan) {
      auto options = testing::opencl_options();
      options.step = step;
      return testing::executor(plan, "opencl", options);
    });
  }
}

TEST(OpenCL, CastsRoundAsTheReference) {
  testing::check_casts_round_as_the_reference([](const plan::Plan& plan) {
    return testing::executor(plan, "opencl", testing::opencl_options());
  });
}

TEST(OpenCL, PassVersionsStepAsTheWholeBody) {
  for (auto step : {runtime::StepMode::host, runtime::StepMode::device}) {
    SCOPED_TRACE(to_string(step));
    testing::check_versions_step_as_the_whole_body([step](const plan::Plan& plan) {
      runtime::ExecutorOptions options;
      options.launch = codegen::GpuLaunch{.block = 8, .items = 2, .vec = 4, .chunk_elements = 512};
      options.step = step;
      return testing::executor(plan, "opencl", options);
    });
  }
}

class OpenclParity : public ::testing::TestWithParam<int> {};

// Small chunks and work-groups, so tensors span several chunks and the tree has depth. The f32
// case of each pipeline runs one element per work-item; the f64 case (the next index) runs
// vectors of 4, two per work-item, with tails, on a grid smaller than the chunk count.
TEST_P(OpenclParity, MatchesTorchAndTheReference) {
  runtime::ExecutorOptions options;
  options.launch = testing::fixture_launch(GetParam(), 8, 8);
  testing::check_backend_on_fixture(GetParam(), testing::executor_steps("opencl", options));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, OpenclParity, testing::all_fixture_cases(),
                         testing::fixture_case_name);

class OpenclDeviceStep : public ::testing::TestWithParam<int> {};

// The whole step on the device: segments, combines, folds and the commit as kernels, and the
// step count and scalar states in device memory. Every fixture (skipped steps, schedules,
// parameter groups, scalar states) against torch and the reference, with small chunks so the
// combines fold several chunks per tensor.
TEST_P(OpenclDeviceStep, MatchesTorchAndTheReference) {
  runtime::ExecutorOptions options;
  options.launch = GetParam() % 2 == 0
                       ? codegen::GpuLaunch{.block = 4, .chunk_elements = 7}
                       : codegen::GpuLaunch{.block = 1, .vec = 2, .chunk_elements = 6};
  options.step = runtime::StepMode::device;
  testing::check_backend_on_fixture(GetParam(), testing::executor_steps("opencl", options));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, OpenclDeviceStep, testing::all_fixture_cases(),
                         testing::fixture_case_name);

TEST(OpenclDeviceStep, FollowsTheHostsHyperparametersAndRestoredCheckpoints) {
  testing::check_device_step_follows_the_host<runtime::Executor>([](const plan::Plan& plan) {
    runtime::ExecutorOptions options;
    options.launch = codegen::GpuLaunch{.block = 2, .chunk_elements = 64};
    options.step = runtime::StepMode::device;
    return testing::executor(plan, "opencl", options);
  });
}

// The host-driven OpenCL step, the same way (its buffers live on the device too).
TEST(OpenCL, FollowsTheHostsHyperparametersAndRestoredCheckpoints) {
  testing::check_device_step_follows_the_host<runtime::Executor>([](const plan::Plan& plan) {
    return testing::executor(plan, "opencl", testing::opencl_options());
  });
}

}  // namespace
}  // namespace optjit
