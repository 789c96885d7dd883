#include "autotune/cpu_tuner.h"

#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "cache/kernel_cache.h"
#include "ir/compile.h"

namespace optjit::autotune {
namespace {

namespace fs = std::filesystem;

TEST(Autotune, CandidatesStartWithTheDefaultInAFixedOrder) {
  auto c = cpu_candidates(4, 1 << 24);
  ASSERT_FALSE(c.empty());
  EXPECT_EQ(to_string(c[0]), "threads=4,chunk=65536");
  EXPECT_EQ(c.size(), 15u);  // 3 thread counts x 5 chunk sizes
  EXPECT_EQ(to_string(cpu_candidates(4, 1 << 24)[7]), to_string(c[7]));
  // A tiny problem: chunk sizes past the element count are the same schedule, tried once.
  EXPECT_EQ(cpu_candidates(2, 1000).size(),
            2u);  // every chunk size covers 1000 elements: threads 2 and 1
  auto parsed = parse_cpu_config("threads=3,chunk=4096");
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->threads, 3);
  EXPECT_EQ(parsed->chunk_elements, 4096);
  EXPECT_FALSE(parse_cpu_config("threads=0,chunk=4096"));
  EXPECT_FALSE(parse_cpu_config("fast"));
  EXPECT_EQ(size_bucket(1), 0);
  EXPECT_EQ(size_bucket(1 << 20), 20);
  EXPECT_EQ(size_bucket((1 << 20) + 5), 20);
}

class TuneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("optjit_tune_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
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
      to_string(cpu_candidates(runtime::CpuBackend::create(*plan).value()->threads(), 200000)[0]));
  EXPECT_LE(r->tuned_seconds, r->default_seconds);  // never slower than the default it measured
  EXPECT_EQ(state->tensors[0].bytes(0, DType::f32), before.tensors[0].bytes(0, DType::f32));
  EXPECT_EQ(state->step, before.step);
  EXPECT_EQ((*c)->measurement_count(), static_cast<int64_t>(r->measured.size()));
  auto again = tune_cpu(*plan, *state, c->get(), opts);
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->from_cache);
  EXPECT_EQ(to_string(again->winner), to_string(r->winner));
  EXPECT_EQ(to_string(cpu_config_for(*plan, *state, c->get())), to_string(r->winner));
}

}  // namespace
}  // namespace optjit::autotune
