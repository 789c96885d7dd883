// On a machine with an NVIDIA GPU (label "gpu"; not part of the default suite): the CUDA
// backend against PyTorch and the reference on every fixture. Without a GPU every test fails
// with the driver's message, by design: run it where there is one.
#include <gtest/gtest.h>

#include "backend_parity.h"
#include "runtime/cuda_backend.h"

namespace optjit {
namespace {

TEST(Cuda, HasADevice) {
  auto d = runtime::cuda_devices();
  ASSERT_TRUE(d) << d.error().message;
  for (const auto& i : *d)
    std::printf("[ device   ] %d %s %s, %d SMs, %.1f GiB, driver %d\n", i.ordinal, i.name.c_str(),
                i.arch().c_str(), i.sm_count, i.memory / 1073741824.0, i.driver_version);
}

class CudaParity : public ::testing::TestWithParam<int> {};

// As on OpenCL: the f32 case of each pipeline one element per thread, the f64 case (the next
// index) vectors of 4, two per thread, with tails, on a grid smaller than the chunk count.
TEST_P(CudaParity, MatchesTorchAndTheReference) {
  std::shared_ptr<runtime::CudaBackend> gpu;
  const codegen::GpuLaunch launch =
      GetParam() % 2 == 0
          ? codegen::GpuLaunch{.block = 64, .chunk_elements = 5}
          : codegen::GpuLaunch{.block = 32, .items = 2, .vec = 4, .groups_per_unit = 1,
                               .chunk_elements = 12};
  testing::check_backend_on_fixture(
      GetParam(), [&](const plan::Plan& plan) -> Expected<testing::StepFn> {
        auto b = runtime::CudaBackend::create(plan, {0, launch});
        if (!b) return b.error();
        gpu = std::move(*b);
        return testing::StepFn([gpu](runtime::OptimizerState& s) { return gpu->step(s); });
      });
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaParity, testing::all_fixture_cases(),
                         testing::fixture_case_name);

}  // namespace
}  // namespace optjit
