#include "autotune/cpu_tuner.h"
#include "runtime/device.h"

#include "autotune/gpu_tuner.h"

#include <unistd.h>

#include <filesystem>
#include <map>

#include <gtest/gtest.h>

#include "test_dir.h"

#include "cache/kernel_cache.h"
#include "codegen/cpu_jit.h"
#include "codegen/nvrtc.h"
#include "ir/compile.h"
#include "runtime/devices.h"
#include "runtime/opencl_device.h"

namespace optjit::autotune {
namespace {

namespace fs = std::filesystem;

TEST(Autotune, CandidatesStartWithTheDefaultInAFixedOrder) {
  auto c = cpu_candidates(4, 1 << 24);
  ASSERT_FALSE(c.empty());
  EXPECT_EQ(to_string(c[0]), "threads=4,chunk=65536,unroll=0");
  EXPECT_EQ(c.size(), 15u);  // 3 thread counts x 5 chunk sizes
  EXPECT_EQ(to_string(cpu_candidates(4, 1 << 24)[7]), to_string(c[7]));
  // A tiny problem: chunk sizes past the element count are the same schedule, tried once.
  EXPECT_EQ(cpu_candidates(2, 1000).size(),
            2u);  // every chunk size covers 1000 elements: threads 2 and 1
  auto parsed = parse_cpu_config("threads=3,chunk=4096,unroll=2");
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->threads, 3);
  EXPECT_EQ(parsed->chunk_elements, 4096);
  EXPECT_EQ(parsed->unroll, 2);
  // What optjit 0.1 stored still reads, as unroll 0.
  auto old = parse_cpu_config("threads=3,chunk=4096");
  ASSERT_TRUE(old);
  EXPECT_EQ(old->unroll, 0);
  EXPECT_FALSE(parse_cpu_config("threads=0,chunk=4096"));
  EXPECT_FALSE(parse_cpu_config("threads=3,chunk=4096,unroll=99"));
  EXPECT_FALSE(parse_cpu_config("threads=3,chunk=4096,unroll=2,extra"));
  EXPECT_FALSE(parse_cpu_config("fast"));
  EXPECT_EQ(size_bucket(1), 0);
  EXPECT_EQ(size_bucket(1 << 20), 20);
  EXPECT_EQ(size_bucket((1 << 20) + 5), 20);
}

class TuneTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::fresh_test_dir("tune"); }
  void TearDown() override { test::remove_test_dir(dir_); }
  fs::path dir_;
};

TEST_F(TuneTest, DecisionsFallBackToTheNearestDeviceOfTheSameBackendOnly) {
  auto c = cache::KernelCache::open({dir_.string()});
  ASSERT_TRUE(c);
  ASSERT_TRUE(
      (*c)->put_decision("p", 20, "cpu|AMD EPYC|generic|2 threads", "threads=2,chunk=65536"));
  ASSERT_TRUE(
      (*c)->put_decision("p", 20, "cpu|Intel Xeon|skylake|8 threads", "threads=8,chunk=16384"));
  ASSERT_TRUE((*c)->put_decision("p", 20, "cuda|sm_90|132 SMs", "block=256"));
  bool exact = true;
  EXPECT_EQ((*c)->get_decision("p", 20, "cpu|AMD EPYC|generic|2 threads", &exact),
            "threads=2,chunk=65536");
  EXPECT_TRUE(exact);
  EXPECT_EQ((*c)->get_decision("p", 20, "cpu|AMD EPYC|generic|4 threads", &exact),
            "threads=2,chunk=65536");
  EXPECT_FALSE(exact);
  EXPECT_EQ((*c)->get_decision("p", 20, "opencl|PoCL|4 units", &exact), std::nullopt);
  EXPECT_EQ((*c)->get_decision("p", 21, "cpu|AMD EPYC|generic|2 threads"), std::nullopt);
  // The first decision stored wins, so processes agree.
  ASSERT_TRUE(
      (*c)->put_decision("p", 20, "cpu|AMD EPYC|generic|2 threads", "threads=1,chunk=4096"));
  EXPECT_EQ((*c)->get_decision("p", 20, "cpu|AMD EPYC|generic|2 threads"), "threads=2,chunk=65536");
}

TEST_F(TuneTest, TunesOnRealBuffersRestoresThemAndStoresTheDecision) {
  auto plan = compile_pipeline("chain(clip_grad_norm(max_norm=1.0), adamw())");
  ASSERT_TRUE(plan);
  std::vector<runtime::HostTensor> params = {runtime::HostTensor::zeros("w", DType::f32, {200000})};
  for (int64_t i = 0; i < 200000; ++i) params[0].set(i, 0.001 * static_cast<double>(i % 97));
  auto state = runtime::init_state(*plan, params, {});
  ASSERT_TRUE(state);
  const runtime::OptimizerState before = *state;
  auto c = cache::KernelCache::open({dir_.string()});
  ASSERT_TRUE(c);
  TuneOptions opts;
  opts.seconds_per_candidate = 0.02;
  opts.progress = false;
  auto r = tune_cpu(*plan, *state, c->get(), opts);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_FALSE(r->from_cache);
  EXPECT_GE(r->measured.size(), 2u);
  EXPECT_EQ(
      r->measured[0].config,
      to_string(cpu_candidates(
          runtime::open_device({.kind = "cpu"}).value()->description().compute_units, 200000)[0]));
  EXPECT_LE(r->tuned_seconds, r->default_seconds);  // never slower than the default it measured
  EXPECT_EQ(state->tensors[0].bytes(0, DType::f32), before.tensors[0].bytes(0, DType::f32));
  EXPECT_EQ(state->step, before.step);
  EXPECT_EQ((*c)->measurement_count(), static_cast<int64_t>(r->measured.size()));
  auto again = tune_cpu(*plan, *state, c->get(), opts);
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->from_cache);
  EXPECT_EQ(again->winner, r->winner);
  // Stage 2 tried every unroll count with the best threads and chunk size.
  int unrolls = 0;
  for (const auto& m : r->measured) unrolls += m.config.find(",unroll=4") != std::string::npos;
  EXPECT_EQ(unrolls, 1);
  EXPECT_EQ(to_string(cpu_config_for(*plan, *state, c->get())), r->winner);
}

// The unroll knob reaches the code: the vectorizer interleaves that many <8 x float> iterations.
TEST(Autotune, CpuUnrollIsTheVectorizersInterleaveCount) {
  auto plan = compile_pipeline("adamw()");
  ASSERT_TRUE(plan);
  auto loads = [&](int unroll) {
    auto ir =
        codegen::emit_cpu_ir(*plan, true, codegen::CpuTarget::named("haswell").value(), unroll);
    EXPECT_TRUE(ir) << ir.error().message;
    size_t n = 0;
    for (size_t at = 0; (at = ir->find("load <8 x float>", at)) != std::string::npos; ++at) ++n;
    return n;
  };
  const size_t one = loads(1);
  EXPECT_EQ(one, 4u);  // param, grad, exp_avg, exp_avg_sq
  EXPECT_EQ(loads(2), 2 * one);
  EXPECT_EQ(loads(4), 4 * one);
  auto bad = codegen::emit_cpu_ir(*plan, true, codegen::CpuTarget::named("haswell").value(), 17);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "unroll (interleave count) 17 is not in 0..16");
}

// The shared search loop, on made-up candidates with known costs: the default first, stages
// from the best so far, pruned and failing candidates reported, and a winner only when it is
// clearly faster (a 1% gain is noise and the earlier candidate stays).
TEST(Autotune, SearchKeepsTheDefaultUnlessSomethingIsClearlyFaster) {
  const std::map<std::string, double> cost = {
      {"a", 2e-3}, {"b", 1.98e-3}, {"c", 1e-3}, {"c2", 0.99e-3}, {"c3", 0.4e-3}};
  SearchSpace space;
  space.default_config = "a";
  space.stages.push_back([](const std::string&) {
    return std::vector<std::string>{"b", "broken", "pruned", "c", "a"};
  });
  std::vector<std::string> second_stage_from;
  space.stages.push_back([&](const std::string& best) {
    second_stage_from.push_back(best);
    return std::vector<std::string>{best + "2"};
  });
  space.prune = [](const std::string& c) -> std::optional<std::string> {
    if (c == "pruned") return "occupancy 10%";
    return std::nullopt;
  };
  int restores = 0;
  // A fake clock that only the steps advance: the test is exact on a loaded machine.
  double clock = 0;
  MakeStep make = [&](const std::string& config) -> Expected<StepFn> {
    if (config == "broken") return make_error("CL_OUT_OF_RESOURCES");
    const double t = cost.at(config);
    return StepFn([t, &clock] {
      clock += t;
      return Status::Ok();
    });
  };
  TuneOptions opts;
  opts.seconds_per_candidate = 0.03;
  opts.progress = false;
  opts.clock = [&clock] { return clock; };
  auto r = tune(
      {"p", "cpu|test", 1000}, space, make, [&] { ++restores; }, nullptr, opts);
  ASSERT_TRUE(r) << r.error().message;
  std::vector<std::string> order;
  for (const auto& m : r->measured) order.push_back(m.config);
  EXPECT_EQ(order, (std::vector<std::string>{"a", "b", "c", "c2"}));
  EXPECT_EQ(second_stage_from, std::vector<std::string>{"c"});
  EXPECT_EQ(r->winner, "c");  // c2 is 1% faster: noise
  ASSERT_EQ(r->skipped.size(), 2u);
  EXPECT_EQ(r->skipped[0].config, "broken");
  EXPECT_EQ(r->skipped[0].reason, "CL_OUT_OF_RESOURCES");
  EXPECT_EQ(r->skipped[1].config, "pruned");
  EXPECT_EQ(r->skipped[1].reason, "occupancy 10%");
  EXPECT_EQ(restores, 5);  // after every candidate that was built, the broken one too
  EXPECT_DOUBLE_EQ(r->tuned_seconds / r->default_seconds, 0.5);
  EXPECT_NEAR(r->measured[0].noise, 0, 1e-12);
  EXPECT_EQ(r->measured[0].repetitions, 15);  // 0.03 s of 2 ms steps
  // A budget of one candidate measures the default only; a failing default is an error.
  opts.max_candidates = 1;
  auto only = tune(
      {"p", "cpu|test", 1000}, space, make, [] {}, nullptr, opts);
  ASSERT_TRUE(only);
  EXPECT_EQ(only->measured.size(), 1u);
  EXPECT_EQ(only->winner, "a");
  space.default_config = "broken";
  auto failed = tune(
      {"p", "cpu|test", 1000}, space, make, [] {}, nullptr, opts);
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().message, "the default configuration broken failed: CL_OUT_OF_RESOURCES");
}

TEST(Occupancy, FollowsTheOccupancyCalculator) {
  auto o = occupancy("sm_90", 256, 32, 2048);
  EXPECT_EQ(o.blocks_per_sm, 8);
  EXPECT_DOUBLE_EQ(o.fraction, 1.0);
  o = occupancy("sm_90", 256, 112, 0);  // 3584 registers per warp: 2 blocks of 8 warps
  EXPECT_EQ(o.blocks_per_sm, 2);
  EXPECT_DOUBLE_EQ(o.fraction, 0.25);
  EXPECT_EQ(o.limiter, "registers");
  o = occupancy("sm_86", 1024, 32, 0);  // 1536 threads per SM: one block of 1024
  EXPECT_EQ(o.blocks_per_sm, 1);
  EXPECT_NEAR(o.fraction, 2.0 / 3, 1e-12);
  EXPECT_EQ(o.limiter, "threads");
  o = occupancy("sm_80", 128, 32, 48 * 1024);  // 164 KiB / (48 + 1) KiB
  EXPECT_EQ(o.blocks_per_sm, 3);
  EXPECT_EQ(o.limiter, "shared memory");
  o = occupancy("sm_89", 32, 16, 0);  // 24 blocks of one warp, of 48
  EXPECT_EQ(o.blocks_per_sm, 24);
  EXPECT_DOUBLE_EQ(o.fraction, 0.5);
  EXPECT_EQ(o.limiter, "blocks");
}

// Pruning reads real cubins (NVRTC, no GPU): the default shape of clip+AdamW keeps the SM busy;
// 1024 threads with 8 vectors of 8 each cannot fit in registers and is pruned for its spills.
TEST(Occupancy, CudaCandidatesArePrunedFromTheirCubins) {
  ASSERT_TRUE(codegen::have_nvrtc());
  auto plan = compile_pipeline("chain(clip_grad_norm(max_norm=1.0), adamw())");
  ASSERT_TRUE(plan);
  EXPECT_EQ(cuda_prune(*plan, "sm_90", {}, nullptr), std::nullopt);
  auto why = cuda_prune(*plan, "sm_90", {.block = 1024, .items = 8, .vec = 8}, nullptr);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("spills registers"), std::string::npos) << *why;
  auto bad = cuda_prune(*plan, "sm_9", {}, nullptr);
  ASSERT_TRUE(bad);
  EXPECT_EQ(*bad, "'sm_9' is not a CUDA architecture (e.g. sm_80, sm_90)");
}

TEST(Autotune, GpuStagesStartFromTheBestSoFarInAFixedOrder) {
  auto stages = gpu_stages(256);
  ASSERT_EQ(stages.size(), 4u);
  const std::string base = codegen::GpuLaunch{}.to_string();
  auto shapes = stages[0](base);
  ASSERT_EQ(shapes.size(), 12u);  // vec 1, 4, 2, 8 x items 1, 2, 4
  EXPECT_EQ(shapes[0], base);
  EXPECT_EQ(shapes[4], "block=256,items=2,vec=4,grid=8,chunk=65536");
  auto blocks = stages[1]("block=256,items=2,vec=4,grid=8,chunk=65536");
  EXPECT_EQ(blocks, (std::vector<std::string>{"block=128,items=2,vec=4,grid=8,chunk=65536",
                                              "block=256,items=2,vec=4,grid=8,chunk=65536",
                                              "block=64,items=2,vec=4,grid=8,chunk=65536"}));
  EXPECT_EQ(stages[2](base).size(), 5u);
  EXPECT_EQ(stages[3](base).back(), "block=256,items=1,vec=1,grid=8,chunk=1048576");
}

// OpenCL on PoCL: real buffers, a stored decision that run and bench then use, and a second
// tuning that measures nothing.
TEST_F(TuneTest, TunesOpenclOnTheDeviceAndStoresTheDecision) {
  auto plan = compile_pipeline("adamw(weight_decay=0.01)");
  ASSERT_TRUE(plan);
  std::vector<runtime::HostTensor> params = {runtime::HostTensor::zeros("w", DType::f32, {100000}),
                                             runtime::HostTensor::zeros("b", DType::f32, {37})};
  for (int64_t i = 0; i < 100000; ++i) params[0].set(i, 0.001 * static_cast<double>(i % 89));
  auto state = runtime::init_state(*plan, params, {});
  ASSERT_TRUE(state);
  const runtime::OptimizerState before = *state;
  auto c = cache::KernelCache::open({dir_.string()});
  ASSERT_TRUE(c);
  TuneOptions opts;
  opts.seconds_per_candidate = 0.01;
  opts.max_candidates = 6;
  opts.budget_seconds = 600;  // cold PoCL builds on a loaded machine: the count must decide
  opts.progress = false;
  auto r = tune_opencl(*plan, *state, -1, c->get(), opts);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_FALSE(r->from_cache);
  EXPECT_EQ(r->measured.size(), 6u);
  EXPECT_EQ(r->measured[0].config, opencl_default_launch(-1).to_string());
  EXPECT_EQ(opencl_default_launch(-1).block, 1);  // PoCL is a CPU device
  EXPECT_LE(r->tuned_seconds, r->default_seconds);
  EXPECT_TRUE(codegen::GpuLaunch::parse(r->winner));
  EXPECT_EQ(state->tensors[0].bytes(0, DType::f32), before.tensors[0].bytes(0, DType::f32));
  // A decision this version cannot read (another version's, say) is ignored: the search runs.
  {
    std::vector<runtime::HostTensor> odd = {runtime::HostTensor::zeros("w", DType::f32, {3000})};
    auto s3 = runtime::init_state(*plan, odd, {});
    ASSERT_TRUE(s3);
    auto t3 = opencl_target(*plan, s3->elements(), -1);
    ASSERT_TRUE(t3);
    ASSERT_TRUE((*c)->put_decision(t3->program, size_bucket(t3->elements), t3->performance,
                                   "workgroup=huge"));
    TuneOptions one = opts;
    one.max_candidates = 1;
    auto fresh = tune_opencl(*plan, *s3, -1, c->get(), one);
    ASSERT_TRUE(fresh) << fresh.error().message;
    EXPECT_FALSE(fresh->from_cache);
    EXPECT_EQ(fresh->winner, opencl_default_launch(-1).to_string());
    // ... and replaced by the new one.
    std::string from;
    EXPECT_EQ(gpu_launch_for(t3, c->get(), &from), opencl_default_launch(-1));
    EXPECT_EQ(from, opencl_default_launch(-1).to_string());
  }
  auto again = tune_opencl(*plan, *state, -1, c->get(), opts);
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->from_cache);
  EXPECT_EQ(again->winner, r->winner);
  std::string from;
  EXPECT_EQ(
      gpu_launch_for(opencl_target(*plan, state->elements(), -1), c->get(), &from).to_string(),
      r->winner);
  EXPECT_EQ(from, r->winner);
  // Another size bucket has no decision: the defaults.
  std::vector<runtime::HostTensor> big = {runtime::HostTensor::zeros("w", DType::f32, {1 << 20})};
  auto other = runtime::init_state(*plan, big, {});
  ASSERT_TRUE(other);
  EXPECT_EQ(gpu_launch_for(opencl_target(*plan, other->elements(), -1), c->get(), nullptr,
                           opencl_default_launch(-1)),
            opencl_default_launch(-1));
}

}  // namespace
}  // namespace optjit::autotune
