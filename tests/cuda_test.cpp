// On a machine with an NVIDIA GPU (label "gpu"): the CUDA backend against PyTorch and the
// reference on every fixture, host-driven, as a device step and as a replayed CUDA graph. The
// default suite runs it all but NCCL on the CPU under the CUDA emulator (tests/cuda_emu, label
// "emulator"): every kernel and the runtime's streams, graphs and memory, not a GPU's timing.
// Without either, every test fails with the driver's message, by design.
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <regex>

#include <gtest/gtest.h>

#include "api/communicator.h"
#include "api/optimizer.h"
#include "autotune/gpu_tuner.h"
#include "backend_parity.h"
#include "caller_memory.h"
#include "codegen/c_emitter.h"
#include "codegen/c_lang.h"
#include "codegen/nvrtc.h"
#include "executors.h"
#include "quant_model.h"
#include "queued_steps.h"
#include "runtime/cuda_api.h"
#include "runtime/cuda_driver.h"
#include "sround_check.h"

namespace optjit {
namespace {

TEST(Cuda, HasADevice) {
  auto d = runtime::cuda_devices();
  ASSERT_TRUE(d) << d.error().message;
  for (const auto& i : *d)
    std::printf("[ device   ] %d %s %s, %d SMs, %.1f GiB, driver %d\n", i.ordinal, i.name.c_str(),
                i.arch().c_str(), i.sm_count, i.memory / 1073741824.0, i.driver_version);
}

// cuGetErrorString leaves the string null for a code it does not know (and returns an error);
// the message says so instead of formatting a null pointer.
TEST(Cuda, AnUnknownErrorCodeIsNamedAsSuch) {
  ASSERT_TRUE(runtime::cuda::api());
  EXPECT_EQ(runtime::cuda::fail("cuMemAlloc", 987654).message,
            "CUDA: cuMemAlloc failed: unknown error (error 987654)");
  EXPECT_EQ(runtime::cuda::fail("cuMemAlloc", 2).message,
            "CUDA: cuMemAlloc failed: out of memory (error 2)");
}

// A backend pushes its context and pops it: the thread's current context (a framework's, or
// none) is what it was, after creating, stepping and destroying backends.
TEST(Cuda, LeavesTheCallersCurrentContextAsItWas) {
  auto api = runtime::cuda::api();
  ASSERT_TRUE(api) << api.error().message;
  runtime::cuda::CUcontext before = nullptr, after = nullptr;
  ASSERT_EQ((*api)->cuCtxGetCurrent(&before), 0);
  {
    auto plan = compile_pipeline("chain(clip_grad_norm(max_norm=1.0), adamw())");
    ASSERT_TRUE(plan);
    std::vector<runtime::HostTensor> params = {runtime::HostTensor::zeros("w", DType::f32, {1000})};
    auto s = runtime::init_state(*plan, params, {});
    ASSERT_TRUE(s);
    for (bool device_step : {false, true}) {
      runtime::ExecutorOptions options;
      options.step = device_step ? runtime::StepMode::device : runtime::StepMode::host;
      auto b = testing::executor(*plan, "cuda", options);
      ASSERT_TRUE(b) << b.error().message;
      ASSERT_EQ((*api)->cuCtxGetCurrent(&after), 0);
      EXPECT_EQ(after, before) << "after create";
      auto r = (*b)->step(*s);
      ASSERT_TRUE(r) << r.error().message;
      ASSERT_EQ((*api)->cuCtxGetCurrent(&after), 0);
      EXPECT_EQ(after, before) << "after a step";
    }
  }
  ASSERT_EQ((*api)->cuCtxGetCurrent(&after), 0);
  EXPECT_EQ(after, before) << "after the backends are gone";
}

// Tuning on the GPU: candidates pruned by their cubins' occupancy, the rest timed; the winner is
// never slower than the default and computes what the reference does.
TEST(Cuda, TunesOnTheGpuAndTheWinnerComputesTheSameStep) {
  auto plan = compile_pipeline("chain(clip_grad_norm(max_norm=1.0), adamw(weight_decay=0.01))");
  ASSERT_TRUE(plan);
  std::vector<runtime::HostTensor> params = {runtime::HostTensor::zeros("w", DType::f32, {1 << 20}),
                                             runtime::HostTensor::zeros("b", DType::f32, {1001})};
  for (auto& p : params)
    for (int64_t i = 0; i < p.numel(); ++i) p.set(i, 0.01 * std::sin(0.1 * static_cast<double>(i)));
  auto state = runtime::init_state(*plan, params, {});
  ASSERT_TRUE(state);
  for (auto& t : state->tensors)
    for (int64_t i = 0; i < t.numel; ++i)
      runtime::store_element(t.data(plan->program.grad_buffer()), DType::f32, i,
                             0.001 * std::cos(0.3 * static_cast<double>(i)));
  autotune::TuneOptions opts;
  opts.seconds_per_candidate = 0.05;
  opts.max_candidates = 12;
  auto r = autotune::tune_cuda(*plan, *state, 0, nullptr, opts);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->measured[0].config, codegen::GpuLaunch{}.to_string());
  EXPECT_LE(r->tuned_seconds, r->default_seconds);
  std::printf("[ tune     ] %zu measured, %zu pruned, tuned / default = %.3f, winner %s\n",
              r->measured.size(), r->skipped.size(), r->tuned_seconds / r->default_seconds,
              r->winner.c_str());
  auto winner = codegen::GpuLaunch::parse(r->winner);
  ASSERT_TRUE(winner);
  runtime::ExecutorOptions wo;
  wo.launch = *winner;
  auto b = testing::executor(*plan, "cuda", wo);
  ASSERT_TRUE(b) << b.error().message;
  runtime::OptimizerState expected = *state;
  runtime::ReferenceBackend(*plan).step(expected);
  ASSERT_TRUE((*b)->step(*state));
  const uint32_t pb = plan->program.param_buffer();
  for (size_t t = 0; t < params.size(); ++t)
    EXPECT_TRUE(testing::close(
        testing::buffer_values(state->tensors[t].data(pb), DType::f32, state->tensors[t].numel),
        testing::buffer_values(expected.tensors[t].data(pb), DType::f32, expected.tensors[t].numel),
        2e-6, 1e-30));
  auto copy = (*b)->device().copy_seconds(size_t{1} << 28, 5);
  ASSERT_TRUE(copy) << copy.error().message;
  std::printf("[ copy     ] %.1f GB/s device to device\n", 2.0 * (1 << 28) / *copy / 1e9);
}

// Quantized state: the tuner starts from the quantized default, tries shared code tables first,
// then vectors and items (then prefetching; a candidate that spills is pruned, not run), and its
// winner steps the CPU's bits.
TEST(Cuda, TuningQuantizedStateTriesSharedTablesThenVectorsFirst) {
  const char* pipeline =
      R"(chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-2, weight_decay=0.1, state_format="4bit")))";
  auto plan = compile_pipeline(pipeline);
  ASSERT_TRUE(plan) << plan.error().message;
  std::vector<runtime::HostTensor> params = {
      runtime::HostTensor::zeros("w", DType::f32, {1 << 16})};
  for (int64_t i = 0; i < params[0].numel(); ++i)
    params[0].set(i, 0.01 * std::sin(0.1 * static_cast<double>(i)));
  auto state = runtime::init_state(*plan, params, {});
  ASSERT_TRUE(state);
  for (int64_t i = 0; i < state->tensors[0].numel; ++i)
    runtime::store_element(state->tensors[0].data(plan->program.grad_buffer()), DType::f32, i,
                           0.001 * std::cos(0.3 * static_cast<double>(i)));
  autotune::TuneOptions opts;
  opts.seconds_per_candidate = 0.02;
  opts.max_candidates = 3;
  opts.progress = false;
  auto r = autotune::tune_cuda(*plan, *state, 0, nullptr, opts);
  ASSERT_TRUE(r) << r.error().message;
  std::vector<std::string> tried;
  for (const auto& m : r->measured) tried.push_back(m.config);
  for (const auto& k : r->skipped) tried.push_back(k.config);
  ASSERT_GE(tried.size(), 3u);
  // From the quantized default: vectors of 4, two trips staged (the emulator says sm_90),
  // interleaved where the device check has passed.
  auto dev = runtime::open_device({.kind = "cuda"});
  ASSERT_TRUE(dev) << dev.error().message;
  const codegen::GpuLaunch start = autotune::default_launch(*plan, (*dev)->description());
  EXPECT_EQ(start.vec, 4);
  EXPECT_EQ(start.stage, 2);
  EXPECT_EQ(start.ahead, 0);
  EXPECT_EQ(start.interleave, autotune::interleave_checked((*dev)->description().arch));
  EXPECT_EQ(tried[0], start.to_string());
  auto second = codegen::GpuLaunch::parse(tried[1]), third = codegen::GpuLaunch::parse(tried[2]);
  ASSERT_TRUE(second && third) << tried[1] << " " << tried[2];
  codegen::GpuLaunch shared = start;
  shared.shared_tables = true;
  EXPECT_EQ(second->to_string(), shared.to_string());
  EXPECT_FALSE(third->prefetch) << tried[2];
  EXPECT_TRUE(third->vec != start.vec || third->items != start.items) << tried[2];
  // The winner, as an optimizer's launch, against the CPU.
  auto winner = codegen::GpuLaunch::parse(r->winner);
  ASSERT_TRUE(winner) << r->winner;
  auto run = [&](OptimizerOptions o) {
    std::vector<float> w(1 << 16), g(w.size());
    for (size_t i = 0; i < w.size(); ++i)
      w[i] = 0.01f * std::sin(0.1f * static_cast<float>(i)),
      g[i] = 0.001f * std::cos(0.3f * static_cast<float>(i));
    auto opt = Optimizer::create(pipeline, {{"w", w.data(), DType::f32, {1 << 16}}}, o);
    EXPECT_TRUE(opt) << opt.error().message;
    for (int s = 0; opt && s < 3; ++s) EXPECT_TRUE((*opt)->step({g.data()}));
    return w;
  };
  OptimizerOptions o;
  o.backend = Backend::cuda;
  o.gpu_launch = *winner;
  EXPECT_EQ(run(o), run({})) << r->winner;
}

class CudaParity : public ::testing::TestWithParam<int> {};

// As on OpenCL: the f32 case of each pipeline one element per thread, the f64 case (the next
// index) vectors of 4, two per thread, with tails, on a grid smaller than the chunk count.
TEST_P(CudaParity, MatchesTorchAndTheReference) {
  runtime::ExecutorOptions options;
  options.launch = testing::fixture_launch(GetParam(), 64, 32);
  testing::check_backend_on_fixture(GetParam(), testing::executor_steps("cuda", options));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaParity, testing::all_fixture_cases(),
                         testing::fixture_case_name);

class CudaDeviceStep : public ::testing::TestWithParam<int> {};

// The whole step on the GPU: the f32 case of each pipeline replays a captured CUDA graph, the
// f64 case launches the same kernels one by one.
TEST_P(CudaDeviceStep, MatchesTorchAndTheReference) {
  runtime::ExecutorOptions options;
  options.launch = codegen::GpuLaunch{.block = 64, .chunk_elements = 7};
  options.step = GetParam() % 2 == 0 ? runtime::StepMode::graph : runtime::StepMode::device;
  testing::check_backend_on_fixture(GetParam(), testing::executor_steps("cuda", options));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaDeviceStep, testing::all_fixture_cases(),
                         testing::fixture_case_name);

TEST(Cuda, FmaRoundsOnce) {
  testing::check_fma_rounds_once(
      [](const plan::Plan& plan) { return testing::executor(plan, "cuda", {}); });
}

TEST(Cuda, CastsRoundAsTheReference) {
  testing::check_casts_round_as_the_reference(
      [](const plan::Plan& plan) { return testing::executor(plan, "cuda", {}); });
}

TEST(Cuda, IntegerConversionsSaturateAsTheReference) {
  for (auto step : {runtime::StepMode::host, runtime::StepMode::device}) {
    SCOPED_TRACE(to_string(step));
    runtime::ExecutorOptions options;
    options.step = step;
    testing::check_integer_conversions_saturate(
        [options](const plan::Plan& plan) { return testing::executor(plan, "cuda", options); });
  }
}

TEST(Cuda, KernelsAreKeyedByTheirCode) {
  testing::check_kernels_are_keyed_by_their_code("cuda", {});
}

TEST(CudaDeviceStepOrder, CombinesManyChunksAndTensorsInTheHostsOrder) {
  testing::check_device_step_combines_like_the_host<runtime::Executor>(
      [](const plan::Plan& plan, bool device_step) {
        runtime::ExecutorOptions options;
        options.launch = codegen::GpuLaunch{.chunk_elements = 5};
        options.step = device_step ? runtime::StepMode::graph : runtime::StepMode::host;
        return testing::executor(plan, "cuda", options);
      });
}

// The caller's device memory for everything (parameters, gradients, state) and the caller's
// stream: one allocation per tensor (used in place through the pointer table) and one flat
// allocation per role; every step against the reference, guard bytes untouched.
TEST(Cuda, CallerOwnedDeviceMemory) {
  auto dev = runtime::open_device({.kind = "cuda"});  // the caller's stream
  ASSERT_TRUE(dev) << dev.error().message;
  for (bool flat : {false, true}) {
    SCOPED_TRACE(flat ? "flat" : "separate");
    std::vector<runtime::DeviceAllocation> blocks;
    testing::check_caller_owned_memory(testing::device_memory(**dev, Backend::cuda, flat, blocks));
  }
}

// The caller's addresses are what the driver says they are: a host pointer, freed memory, or a
// tensor that runs past its allocation is an error naming it (a kernel given one faults on the
// GPU, which ends the context for the whole process), where device memory that holds it steps.
TEST(Cuda, CallersAddressesTheDriverDoesNotVouchForAreRefused) {
  auto dev = runtime::open_device({.kind = "cuda"});
  ASSERT_TRUE(dev) << dev.error().message;
  auto param = runtime::allocate(**dev, 1024, "param");
  auto grad = runtime::allocate(**dev, 1024, "grad");
  ASSERT_TRUE(param && grad);
  std::vector<float> ones(256, 1.0f);
  ASSERT_TRUE((*dev)->write(param->memory(), ones.data(), 1024));
  ASSERT_TRUE((*dev)->write(grad->memory(), ones.data(), 1024));
  OptimizerOptions o;
  o.backend = Backend::cuda;
  o.queue = (*dev)->queue();
  o.cache.reset();
  auto make = [&](DeviceMemory at, int64_t n) {
    return Optimizer::create("sgd(lr=0.5)", {{"w", nullptr, DType::f32, {n}, 0, at}}, o);
  };
  // Host memory is no device address.
  std::vector<float> host(256, 1.0f);
  auto on_host = make({reinterpret_cast<uint64_t>(host.data()), 0}, 256);
  ASSERT_FALSE(on_host);
  EXPECT_EQ(on_host.error().message,
            fmt::format("parameter 'w': address {:#x} is not memory CUDA allocated (device, "
                        "managed or pinned host memory): a host pointer, freed memory or a wrong "
                        "number",
                        reinterpret_cast<uint64_t>(host.data())));
  // 257 floats from the start of 1024 bytes, or 256 from 4 bytes in.
  for (auto [at, n] : {std::pair<uint64_t, int64_t>{0, 257}, {4, 256}}) {
    auto past = make(param->memory().at(at), n);
    ASSERT_FALSE(past);
    EXPECT_EQ(past.error().message,
              fmt::format("parameter 'w': {} bytes at {:#x} pass the end of its CUDA allocation "
                          "(1024 bytes from {:#x})",
                          n * 4, param->memory().handle + at, param->memory().handle));
  }
  // What fits steps; a gradient in freed memory is refused at the step, nothing stepped.
  auto opt = make(param->memory(), 256);
  ASSERT_TRUE(opt) << opt.error().message;
  ASSERT_TRUE((*opt)->step_device({grad->memory()}));
  auto gone = runtime::allocate(**dev, 1024, "freed");
  ASSERT_TRUE(gone);
  const DeviceMemory freed = gone->memory();
  gone->reset();
  auto r = (*opt)->step_device({freed});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find(
                fmt::format("address {:#x} is not memory CUDA allocated", freed.handle)),
            std::string::npos)
      << r.error().message;
  std::vector<float> got(256);
  ASSERT_TRUE((*dev)->read(got.data(), param->memory(), 1024));
  EXPECT_EQ(got, std::vector<float>(256, 0.5f));  // one step of 1 - 0.5 * 1
  EXPECT_EQ((*opt)->step_count(), 1);
}

// A vector width the caller did not choose gives way on memory not aligned for it: with a tuned
// decision of vec=4 in the kernel cache, parameters and gradients 4 bytes past 16-byte alignment
// (views into flat buffers, as a framework's) step with vec=1, bit for bit as an aligned run,
// and a warning says so; the same vec=4 chosen by the caller is refused, the error naming the
// tensor, the buffer and what to do.
TEST(Cuda, UnalignedMemoryGivesUpATunedVectorWidthNotAChosenOne) {
  auto dev = runtime::open_device({.kind = "cuda"});
  ASSERT_TRUE(dev) << dev.error().message;
  const char* pipeline = "chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-2, weight_decay=0.1))";
  constexpr int64_t n = 4099;
  auto plan = compile_pipeline(pipeline);
  ASSERT_TRUE(plan) << plan.error().message;
  const std::string dir = ::testing::TempDir() + "/optjit-vec-fallback-" +
                          std::to_string(static_cast<long>(::getpid()));
  {
    auto cache = cache::KernelCache::open({dir});
    ASSERT_TRUE(cache) << cache.error().message;
    ASSERT_TRUE((*cache)->put_decision(autotune::program_id(*plan), autotune::size_bucket(n),
                                       (*dev)->description().performance,
                                       codegen::GpuLaunch{.vec = 4}.to_string()));
  }
  std::vector<float> w(n), g(n);
  for (int64_t i = 0; i < n; ++i)
    w[i] = 0.5f * std::sin(0.3f * static_cast<float>(i)),
    g[i] = 0.01f * std::cos(0.7f * static_cast<float>(i));
  // Parameters and gradients `skew` bytes into their allocations (the gradients of steps 2 and
  // 3 `later` bytes, in another allocation), 3 steps, host-driven or as a CUDA graph; the
  // parameters.
  auto run = [&](size_t skew, std::optional<codegen::GpuLaunch> launch,
                 std::vector<std::string>* warnings, bool graph = false,
                 size_t later = 0) -> Expected<std::vector<float>> {
    std::vector<runtime::DeviceAllocation> blocks;
    auto put = [&](const std::vector<float>& from, size_t at) -> Expected<DeviceMemory> {
      auto a = runtime::allocate(**dev, n * 4 + 16, "test memory");
      if (!a) return a.error();
      blocks.push_back(std::move(*a));
      const DeviceMemory d = blocks.back().memory().at(at);
      OPTJIT_TRY((*dev)->write(d, from.data(), n * 4));
      return d;
    };
    auto pw = put(w, skew), pg = put(g, skew), pg_later = put(g, later);
    if (!pw || !pg || !pg_later) return make_error("test memory");
    OptimizerOptions o;
    o.backend = Backend::cuda;
    o.queue = (*dev)->queue();
    o.cache = cache::CacheOptions{dir};
    o.gpu_launch = launch;
    o.cuda_graph = graph;
    auto opt = Optimizer::create(pipeline, {{"w", nullptr, DType::f32, {n}, -1, *pw}}, o);
    if (!opt) return opt.error();
    for (int s = 0; s < 3; ++s) OPTJIT_TRY((*opt)->step_device({s == 0 ? *pg : *pg_later}));
    if (warnings) *warnings = (*opt)->warnings();
    std::vector<float> out(n);
    OPTJIT_TRY((*dev)->read(out.data(), *pw, n * 4));
    return out;
  };
  std::vector<std::string> warnings;
  auto aligned = run(0, codegen::GpuLaunch{}, nullptr);
  ASSERT_TRUE(aligned) << aligned.error().message;
  auto tuned = run(4, std::nullopt, &warnings);
  ASSERT_TRUE(tuned) << tuned.error().message;
  EXPECT_EQ(*tuned, *aligned);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_TRUE(std::regex_match(
      warnings[0], std::regex("tensor 'w': its (param|grad) at 0x[0-9a-f]+ is not aligned to 16 "
                              "bytes, which vec=4 \\(tuned or the device's default\\) needs: "
                              "the step runs with vec=1 instead")))
      << warnings[0];
  // Aligned, the tuned vec=4 is kept (no warning), with the same bits.
  auto tuned_aligned = run(0, std::nullopt, &warnings);
  ASSERT_TRUE(tuned_aligned) << tuned_aligned.error().message;
  EXPECT_EQ(*tuned_aligned, *aligned);
  EXPECT_TRUE(warnings.empty());
  // As a graph; and a graph captured with vec=4, then gradients at 4 bytes past alignment: the
  // kernels with vec=1 and a new graph of them from the second step.
  for (size_t skew : {4, 0}) {
    SCOPED_TRACE(skew);
    auto graphed = run(skew, std::nullopt, &warnings, true, 4);
    ASSERT_TRUE(graphed) << graphed.error().message;
    EXPECT_EQ(*graphed, *aligned);
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_NE(warnings[0].find("the step runs with vec=1 instead"), std::string::npos);
  }
  // A tuned launch with the vector-only options of quantized state (recompute, interleave)
  // gives them up with its vector width: vec=1 with either is no launch at all.
  {
    pipeline =
        "chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-2, weight_decay=0.1, "
        "state_format=\"8bit\"))";
    auto plan8 = compile_pipeline(pipeline);
    ASSERT_TRUE(plan8) << plan8.error().message;
    {
      auto cache = cache::KernelCache::open({dir});
      ASSERT_TRUE(cache) << cache.error().message;
      ASSERT_TRUE((*cache)->put_decision(
          autotune::program_id(*plan8), autotune::size_bucket(n), (*dev)->description().performance,
          codegen::GpuLaunch{.vec = 4, .recompute = true, .interleave = true}.to_string()));
    }
    auto aligned8 = run(0, codegen::GpuLaunch{}, nullptr);
    ASSERT_TRUE(aligned8) << aligned8.error().message;
    auto vector_only = run(4, std::nullopt, &warnings);
    ASSERT_TRUE(vector_only) << vector_only.error().message;
    EXPECT_EQ(*vector_only, *aligned8);
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_NE(warnings[0].find("the step runs with vec=1 instead"), std::string::npos);
    // Staged trips copy 16 bytes at a time: memory 8 bytes past alignment is enough for vec=2
    // but not for stage=2, which a tuned launch gives up (with its vectors) and a chosen one
    // names.
    {
      auto cache = cache::KernelCache::open({dir});
      ASSERT_TRUE(cache) << cache.error().message;
      ASSERT_TRUE((*cache)->put_decision(autotune::program_id(*plan8), autotune::size_bucket(n),
                                         (*dev)->description().performance,
                                         codegen::GpuLaunch{.vec = 2, .stage = 2}.to_string(),
                                         /*replace=*/true));
    }
    auto staged = run(8, std::nullopt, &warnings);
    ASSERT_TRUE(staged) << staged.error().message;
    EXPECT_EQ(*staged, *aligned8);
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_TRUE(std::regex_match(
        warnings[0],
        std::regex("tensor 'w': its (param|grad) at 0x[0-9a-f]+ is not aligned to 16 bytes, "
                   "which stage=2 \\(tuned or the device's default\\) needs: the step runs "
                   "with vec=1 instead")))
        << warnings[0];
    auto staged_aligned = run(0, std::nullopt, &warnings);
    ASSERT_TRUE(staged_aligned) << staged_aligned.error().message;
    EXPECT_EQ(*staged_aligned, *aligned8);
    EXPECT_TRUE(warnings.empty());
    auto chosen_staged = run(8, codegen::GpuLaunch{.vec = 2, .stage = 2}, nullptr);
    ASSERT_FALSE(chosen_staged);
    EXPECT_TRUE(std::regex_match(
        chosen_staged.error().message,
        std::regex("tensor 'w': its (param|grad) at 0x[0-9a-f]+ is not aligned to 16 bytes, "
                   "which stage=2 needs; bind aligned memory or use a launch with vec=1")))
        << chosen_staged.error().message;
    pipeline = "chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-2, weight_decay=0.1))";
  }
  auto chosen = run(4, codegen::GpuLaunch{.vec = 4}, nullptr);
  ASSERT_FALSE(chosen);
  EXPECT_TRUE(std::regex_match(
      chosen.error().message,
      std::regex("tensor 'w': its (param|grad) at 0x[0-9a-f]+ is not aligned to 16 bytes, which "
                 "vec=4 needs; bind aligned memory or use a launch with vec=1")))
      << chosen.error().message;
  std::filesystem::remove_all(dir);
}

// Queued steps on the caller's stream (tests/queued_steps.h, as on OpenCL), the stream held shut
// by a host function that blocks until the test opens it.
struct CudaGate {
  runtime::Device& dev;
  std::promise<void> opened;
  std::shared_future<void> until = opened.get_future().share();
  testing::QueueGate gate() {
    return {[this] {
              auto api = runtime::cuda::api();
              ASSERT_TRUE(api) << api.error().message;
              const runtime::cuda::Api& a = **api;
              ASSERT_TRUE(a.cuLaunchHostFunc) << "this driver has no cuLaunchHostFunc";
              runtime::cuda::CUdevice d = 0;
              runtime::cuda::CUcontext ctx = nullptr;
              ASSERT_EQ(a.cuDeviceGet(&d, 0), 0);
              ASSERT_EQ(a.cuDevicePrimaryCtxRetain(&ctx, d), 0);  // the device's (optjit's too)
              runtime::cuda::ContextScope scope(a, ctx);
              auto block = [](void* f) { static_cast<std::shared_future<void>*>(f)->wait(); };
              ASSERT_EQ(a.cuLaunchHostFunc(static_cast<runtime::cuda::CUstream>(dev.queue()), block,
                                           &until),
                        0);
            },
            [this] { opened.set_value(); }};
  }
};

// interleave=1's branch-free f32 division and square root (Lang::branch_free_helpers) give the
// bits of / and sqrtf wherever they say so (ok), and say so throughout their ranges: every x
// of the square root's range, and divisions of random pairs of either range and of pairs whose
// quotient lies within k * 2^-48 (|k| <= 2000) of a rounding boundary, Markstein's hard cases;
// outside the ranges (zeros, subnormals, huge, Inf, NaN) they say not. On a GPU this is the
// check of ptxas's MUFU approximations; under the emulator (correctly rounded approximations)
// of the sequences, on fewer values.
TEST(Cuda, BranchFreeDivisionAndSquareRootRoundAsTheOperators) {
  auto api_or = runtime::cuda::api();
  ASSERT_TRUE(api_or) << api_or.error().message;
  const runtime::cuda::Api* api = *api_or;
  runtime::cuda::CUcontext ctx = nullptr;
  ASSERT_EQ(api->cuDevicePrimaryCtxRetain(&ctx, 0), 0);
  ASSERT_EQ(api->cuCtxPushCurrent(ctx), 0);
  char name[64] = {};
  ASSERT_EQ(api->cuDeviceGetName(name, sizeof(name), 0), 0);
  const bool emulated = std::string(name) == "optjit CUDA emulator";
  const std::string source =
      codegen::detail::Lang::of(codegen::CLanguage::cuda).branch_free_helpers() + R"(
// Per warp: mismatches and fast results, summed over the warp's lanes.
__device__ void optjit_tally(unsigned int bad, unsigned int fast, unsigned int* out) {
  for (int m = 16; m > 0; m >>= 1) {
    bad += __shfl_xor_sync(0xffffffffu, bad, m);
    fast += __shfl_xor_sync(0xffffffffu, fast, m);
  }
  const unsigned int w = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  if ((threadIdx.x & 31u) == 0u) out[2 * w] = bad, out[2 * w + 1] = fast;
}
// by != 0: optjit_fdiv_by, whose dividend is a checked root's (or in the division's range).
extern "C" __global__ void divisions(const float* a, const float* b, unsigned int n,
                                     unsigned int by, unsigned int* out) {
  unsigned int bad = 0, fast = 0;
  for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    bool ok = true;
    const float q = by ? optjit_fdiv_by(a[i], b[i], ok) : optjit_fdiv(a[i], b[i], ok);
    if (ok) fast += 1u, bad += __float_as_uint(q) != __float_as_uint(a[i] / b[i]) ? 1u : 0u;
  }
  optjit_tally(bad, fast, out);
}
extern "C" __global__ void roots(unsigned int first, unsigned int step, unsigned int n,
                                 unsigned int* out) {
  unsigned int bad = 0, fast = 0;
  for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const float x = __uint_as_float(first + i * step);
    bool ok = true;
    const float s = optjit_fsqrt(x, ok);
    // A fast root is the operator's, and lies in the division's range (optjit_fdiv_by).
    if (ok) fast += 1u, bad += __float_as_uint(s) != __float_as_uint(sqrtf(x)) || !optjit_fdiv_range(s) ? 1u : 0u;
  }
  optjit_tally(bad, fast, out);
}
)";
  auto cubin = codegen::compile_cubin(source, "sm_90");
  ASSERT_TRUE(cubin) << cubin.error().message;
  runtime::cuda::CUmodule module = nullptr;
  ASSERT_EQ(api->cuModuleLoadData(&module, cubin->image.data()), 0);
  runtime::cuda::CUstream stream = nullptr;
  ASSERT_EQ(api->cuStreamCreate(&stream, 1), 0);
  const unsigned int blocks = emulated ? 2 : 1024, threads = 256, warps = blocks * threads / 32;
  runtime::cuda::CUdeviceptr out = 0;
  ASSERT_EQ(api->cuMemAlloc(&out, warps * 8), 0);
  // Runs kernel `k` with `args` (then the tallies' pointer): total mismatches and fast results.
  auto run = [&](const char* k, std::vector<void*> args) -> std::pair<uint64_t, uint64_t> {
    runtime::cuda::CUfunction f = nullptr;
    EXPECT_EQ(api->cuModuleGetFunction(&f, module, k), 0);
    args.push_back(&out);
    EXPECT_EQ(api->cuLaunchKernel(f, blocks, 1, 1, threads, 1, 1, 0, stream, args.data(), nullptr),
              0);
    std::vector<unsigned int> t(2 * warps);
    EXPECT_EQ(api->cuMemcpyDtoHAsync(t.data(), out, t.size() * 4, stream), 0);
    EXPECT_EQ(api->cuStreamSynchronize(stream), 0);
    std::pair<uint64_t, uint64_t> sum{0, 0};
    for (unsigned int w = 0; w < warps; ++w) sum.first += t[2 * w], sum.second += t[2 * w + 1];
    return sum;
  };
  // Every x of the square root's range [2^-101, 2^122) (under the emulator every 99,991st).
  const unsigned int first = 0x0d000000u, last = 0x7c7fffffu, step = emulated ? 99991u : 1u;
  unsigned int n = (last - first) / step + 1;
  auto [bad, fast] =
      run("roots", {const_cast<unsigned int*>(&first), const_cast<unsigned int*>(&step), &n});
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(fast, n);
  // Below and above the range: zero, the largest x below it, 2^122, FLT_MAX, Inf, NaN,
  // negatives.
  for (const unsigned int x : {0u, 0x0cffffffu, 0x7c800000u, 0x7f7fffffu, 0x7f800000u, 0x7fc00000u,
                               0x80000000u, 0xbf800000u}) {
    unsigned int one = 1, unit = 1, x0 = x;
    EXPECT_EQ(run("roots", {&x0, &unit, &one}).second, 0u) << std::hex << x;
  }
  // Divisions: pairs inside the range (random; within k * 2^-48 of a midpoint), then outside.
  std::mt19937_64 g(12);
  std::vector<float> a, b;
  auto in_range = [&](float lo, float hi) {
    // A float with random mantissa and sign, magnitude in [lo, hi).
    const int e = static_cast<int>(g() % static_cast<uint64_t>(std::ilogb(hi) - std::ilogb(lo)));
    const float m = std::bit_cast<float>(0x3f800000u | static_cast<uint32_t>(g() & 0x7fffffu));
    return (g() & 1 ? -1.0f : 1.0f) * std::ldexp(m, std::ilogb(lo) + e);
  };
  const size_t random = emulated ? 4096 : 1u << 25;
  for (size_t i = 0; i < random; ++i)
    a.push_back(in_range(0x1p-60f, 0x1p60f)), b.push_back(in_range(0x1p-60f, 0x1p60f));
  const size_t hard = emulated ? 4096 : 1u << 22;
  while (b.size() < random + hard) {
    // B * M = j * 2^25 + k with M odd (a midpoint between floats of 25-bit magnitude): then
    // (j * 2^25) / B = M - k / B.
    const uint64_t M = (g() & 0xffffffu) | 0x1000001u;
    uint64_t inv = 1;
    for (int it = 0; it < 6; ++it) inv = (inv * (2 - M * inv)) & 0x1ffffffu;
    const int64_t k = static_cast<int64_t>(g() % 4001) - 2000;
    const uint64_t B = (static_cast<uint64_t>(k) * inv) & 0x1ffffffu;
    if (k == 0 || B < (1u << 23) || B >= (1u << 24)) continue;
    const uint64_t j = (B * M - static_cast<uint64_t>(k)) >> 25;
    if (j == 0 || j >= (1u << 24)) continue;
    // Scaled by 2^s, s in [-56, 33]: a and b stay in [2^-60, 2^60].
    const int s = static_cast<int>(g() % 90) - 56;
    a.push_back(std::ldexp(static_cast<float>(j), s));
    b.push_back(std::ldexp(static_cast<float>(B), s - 25));
  }
  // Zeros divided (signed zeros: the fast path), then pairs outside the range.
  const std::vector<std::pair<float, float>> zeros = {{0.0f, 3.0f}, {-0.0f, 3.0f}, {0.0f, -0.5f}};
  for (const auto& [x, y] : zeros) a.push_back(x), b.push_back(y);
  const size_t inside = a.size();
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  for (const auto& [x, y] : std::vector<std::pair<float, float>>{{1.0f, 0.0f},
                                                                 {1.0f, 0x1p-61f},
                                                                 {1.0f, 0x1p61f},
                                                                 {0x1p-61f, 1.0f},
                                                                 {0x1p61f, 1.0f},
                                                                 {1.0f, inf},
                                                                 {inf, 1.0f},
                                                                 {nan, 1.0f},
                                                                 {1.0f, nan},
                                                                 {1e-40f, 1.0f},
                                                                 {1.0f, 1e-40f},
                                                                 {0.0f, 0.0f}})
    a.push_back(x), b.push_back(y);
  runtime::cuda::CUdeviceptr da = 0, db = 0;
  ASSERT_EQ(api->cuMemAlloc(&da, a.size() * 4), 0);
  ASSERT_EQ(api->cuMemAlloc(&db, b.size() * 4), 0);
  ASSERT_EQ(api->cuMemcpyHtoDAsync(da, a.data(), a.size() * 4, stream), 0);
  ASSERT_EQ(api->cuMemcpyHtoDAsync(db, b.data(), b.size() * 4, stream), 0);
  unsigned int all = static_cast<unsigned int>(a.size()), in = static_cast<unsigned int>(inside);
  unsigned int plain = 0, by = 1;
  auto [dbad, dfast] = run("divisions", {&da, &db, &in, &plain});
  EXPECT_EQ(dbad, 0u);
  EXPECT_EQ(dfast, inside);
  auto [obad, ofast] = run("divisions", {&da, &db, &all, &plain});
  EXPECT_EQ(obad, 0u);
  EXPECT_EQ(ofast, inside) << "pairs outside the range said to be exact";
  // optjit_fdiv_by on the same pairs but the zero dividends (which it is never given: it
  // divides checked roots and constants); and for divisors outside the range it says not.
  unsigned int nonzero = static_cast<unsigned int>(inside - zeros.size());
  auto [bbad, bfast] = run("divisions", {&da, &db, &nonzero, &by});
  EXPECT_EQ(bbad, 0u);
  EXPECT_EQ(bfast, nonzero);
  std::vector<float> by_a, by_b;
  for (const float y : {0.0f, -0.0f, 0x1p-61f, 0x1p61f, inf, -inf, nan, 1e-40f})
    by_a.push_back(1.5f), by_b.push_back(y);
  unsigned int nby = static_cast<unsigned int>(by_a.size());
  ASSERT_EQ(api->cuMemcpyHtoDAsync(da, by_a.data(), by_a.size() * 4, stream), 0);
  ASSERT_EQ(api->cuMemcpyHtoDAsync(db, by_b.data(), by_b.size() * 4, stream), 0);
  EXPECT_EQ(run("divisions", {&da, &db, &nby, &by}).second, 0u) << "divisors outside the range";
  EXPECT_EQ(api->cuMemFree(da), 0);
  EXPECT_EQ(api->cuMemFree(db), 0);
  EXPECT_EQ(api->cuMemFree(out), 0);
  EXPECT_EQ(api->cuModuleUnload(module), 0);
  EXPECT_EQ(api->cuStreamDestroy(stream), 0);
  runtime::cuda::CUcontext popped = nullptr;
  EXPECT_EQ(api->cuCtxPopCurrent(&popped), 0);
}

// $OPTJIT_CUDA_SOURCE: the kernels compile from a hand-edited copy of the emitted source
// (an experiment timed before the emitter writes it), which the kernel cache keys apart from
// the emitted one; a file emitted for other kernels, or none, is a clear error.
TEST(Cuda, KernelsCompileFromAnEditedSourceWhenAsked) {
  const char* pipeline = "chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-2, weight_decay=0.1))";
  auto plan = compile_pipeline(pipeline);
  ASSERT_TRUE(plan) << plan.error().message;
  auto emitted = codegen::emit_c(*plan, {codegen::CLanguage::cuda, codegen::GpuLaunch{}});
  ASSERT_TRUE(emitted) << emitted.error().message;
  const size_t eol = emitted->find('\n') + 1;
  const std::string path = ::testing::TempDir() + "/optjit-edited-" +
                           std::to_string(static_cast<long>(::getpid())) + ".cu";
  auto run = [&](const std::string* source, bool device = false) -> Expected<std::vector<float>> {
    if (source) {
      std::ofstream(path, std::ios::binary) << *source;
      ::setenv("OPTJIT_CUDA_SOURCE", path.c_str(), 1);
    }
    std::vector<float> w(3000), g(w.size());
    for (size_t i = 0; i < w.size(); ++i)
      w[i] = std::sin(0.1f * static_cast<float>(i)), g[i] = std::cos(0.3f * static_cast<float>(i));
    OptimizerOptions o;
    o.backend = Backend::cuda;
    o.device_step = device;
    auto opt = Optimizer::create(pipeline, {{"w", w.data(), DType::f32, {3000}}}, o);
    ::unsetenv("OPTJIT_CUDA_SOURCE");
    if (!opt) return opt.error();
    for (int s = 0; s < 2; ++s) OPTJIT_TRY((*opt)->step({g.data()}));
    return w;
  };
  auto want = run(nullptr);
  ASSERT_TRUE(want) << want.error().message;
  // The same source with a comment: the same bits.
  const std::string same = *emitted + "// edited by hand\n";
  auto got = run(&same);
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_EQ(*got, *want);
  // An edit that changes the arithmetic (no square root: AdamW divides by eps) is what runs.
  const std::string edited =
      emitted->substr(0, eol) + "#define sqrtf(x) 0.0f\n" + emitted->substr(eol);
  auto changed = run(&edited);
  ASSERT_TRUE(changed) << changed.error().message;
  EXPECT_NE(*changed, *want);
  // A source emitted for another launch, and no file.
  auto other = codegen::emit_c(*plan, {codegen::CLanguage::cuda, codegen::GpuLaunch{.vec = 4}});
  ASSERT_TRUE(other) << other.error().message;
  auto refused = run(&*other);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message,
            fmt::format("OPTJIT_CUDA_SOURCE: '{}' was not written by optjit emit for these "
                        "kernels: its first line is '{}', theirs '{}'",
                        path, other->substr(0, other->find('\n')), emitted->substr(0, eol - 1)));
  // The host step's source where the device step's kernels are wanted.
  auto device = run(&same, true);
  ASSERT_FALSE(device);
  EXPECT_TRUE(std::regex_match(
      device.error().message,
      std::regex("OPTJIT_CUDA_SOURCE: '.*' has no kernel optjit_[a-z_0-9]+(, optjit_[a-z_0-9]+)* "
                 "\\(emitted with another --step\\?\\)")))
      << device.error().message;
  std::filesystem::remove(path);
  ::setenv("OPTJIT_CUDA_SOURCE", path.c_str(), 1);
  auto missing = run(nullptr);
  ::unsetenv("OPTJIT_CUDA_SOURCE");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().message,
            fmt::format("OPTJIT_CUDA_SOURCE: {}: cannot open (No such file or directory)", path));
  // A FIFO is not waited on (it was, forever, for a writer).
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  ::setenv("OPTJIT_CUDA_SOURCE", path.c_str(), 1);
  auto fifo = run(nullptr);
  ::unsetenv("OPTJIT_CUDA_SOURCE");
  std::filesystem::remove(path);
  ASSERT_FALSE(fifo);
  EXPECT_EQ(
      fifo.error().message,
      fmt::format("OPTJIT_CUDA_SOURCE: {}: is a FIFO; optjit reads only regular files", path));
}

TEST(Cuda, QueuedStepsOnTheCallersStreamDoNotWaitForIt) {
  auto dev = runtime::open_device({.kind = "cuda"});  // the caller's stream
  ASSERT_TRUE(dev) << dev.error().message;
  CudaGate gate{**dev};
  testing::check_queued_steps(**dev, Backend::cuda, gate.gate());
}

// A framework's current stream is often the legacy default stream (torch's default stream,
// whose handle is 0): it is passed as CU_STREAM_LEGACY, steps are queued there, and a CUDA graph
// of them, which that stream cannot capture, is captured on a stream of the device's own and
// replayed there.
TEST(Cuda, QueuedStepsAndGraphsOnTheLegacyDefaultStream) {
  auto dev = runtime::open_device({.kind = "cuda", .queue = runtime::cuda::kStreamLegacy});
  ASSERT_TRUE(dev) << dev.error().message;
  for (bool graph : {false, true}) {
    SCOPED_TRACE(graph ? "graph" : "device step");
    CudaGate gate{**dev};
    testing::check_queued_steps(**dev, Backend::cuda, gate.gate(), graph);
  }
}

TEST(Cuda, QueuedStepsThatMaySkipAreCountedOnTheDevice) {
  auto dev = runtime::open_device({.kind = "cuda"});
  ASSERT_TRUE(dev) << dev.error().message;
  CudaGate gate{**dev};
  testing::check_queued_steps_that_may_skip(**dev, Backend::cuda, gate.gate());
}

TEST(Cuda, ScalarStatesInDeviceMemoryFollowQueuedSteps) {
  auto dev = runtime::open_device({.kind = "cuda"});
  ASSERT_TRUE(dev) << dev.error().message;
  CudaGate gate{**dev};
  testing::check_scalar_states_in_device_memory(**dev, Backend::cuda, gate.gate());
}

TEST(CudaGraph, FollowsTheHostsHyperparametersAndRestoredCheckpoints) {
  testing::check_device_step_follows_the_host<runtime::Executor>([](const plan::Plan& plan) {
    runtime::ExecutorOptions options;
    options.step = runtime::StepMode::graph;
    return testing::executor(plan, "cuda", options);
  });
}

// Block-quantized state (8-bit as bitsandbytes, fp8 as torchao) on the GPU: the same codes,
// scales and parameters as the CPU backend, bit for bit, host-driven, as a device step and as
// a graph (quant_test checks the CPU against the reference and OpenCL against the CPU); one
// test per launch ("mode", below), so that one launch can be run by itself
// (--gtest_filter='Fixtures/CudaQuantizedLaunch.*/17').
class CudaQuantizedLaunch : public ::testing::TestWithParam<int> {};

TEST_P(CudaQuantizedLaunch, StepsTheCpusBits) {
  const int mode = GetParam();
  // Every 997th element 0 (square roots of 0 and divisions of 0 in the step; interleaved
  // elements compute those vectors again one by one).
  auto fill = [](std::vector<float>& v, float k, int step) {
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = i % 997 == 5 ? 0.0f
                          : std::sin(k * static_cast<float>(i) + static_cast<float>(step)) *
                                std::exp(-0.001f * static_cast<float>(i % 3000));
  };
  for (
      const char* pipeline :
      {R"(chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-2, weight_decay=0.1, state_format="8bit")))",
       R"(chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-2, weight_decay=0.1, state_format="f8")))",
       R"(lamb(lr=1e-2, state_format="8bit"))",
       // Three quantized states a block (staged trips carry three code arrays and scales).
       R"(ademamix(lr=1e-2, t_alpha=3, t_beta3=4, state_format="8bit"))",
       // bitsandbytes' 8-bit formula where the state holds codes, its 32-bit one for c (300
       // elements, f32 state): holds_codes, from the device step's tensor table too.
       R"(adamw(lr=1e-2, weight_decay=0.1, state_format="8bit", peer="bitsandbytes_8bit"))",
       // A pass that quantizes and reduces over elements whose value is not 0 for zero inputs:
       // the elements past a tensor's end (a vector's lanes there) must not enter the norms.
       "transform shift(c=0.01) {\n  grad = grad + c\n}\n"
       R"(chain(shift(c=0.01), lamb(lr=1e-2, weight_decay=0.1, state_format="8bit")))",
       R"(chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-2, weight_decay=0.1, state_format="4bit")))",
       // A sum in the pass that quantizes (one pass: the next step uses it), exact in any order
       // (it counts the elements), so the scalar state compares bit for bit: a sweep that only
       // takes absmax (recompute) must not add to it.
       "transform tally() {\n  scalar total = 0\n  state m = 0\n"
       "  param = param - 0.01 * m / (1 + total)\n  m = 0.9 * m + grad\n"
       "  total = sum(m * 0 + 1)\n}\n"
       R"(tally(state_format="8bit"))"}) {
    auto run = [&](OptimizerOptions o) {
      // Whole blocks; a last block of 136 elements (8 for 4-bit's blocks of 128); one of a
      // single element (a 4-bit byte with its even code only); one of 7 (vectors of 4: one
      // whole, one of 3 across the end); and too few to quantize. Each warp steps several
      // blocks of a tensor.
      std::vector<float> a(64 * 100), b(5000), d(4097), e(4359), c(300), ga(a.size()), gb(b.size()),
          gd(d.size()), ge(e.size()), gc(c.size());
      fill(a, 0.01f, 0), fill(b, 0.02f, 0), fill(d, 0.03f, 0), fill(e, 0.04f, 0);
      fill(c, 0.05f, 0);
      // A block of b all zeros, gradients too (testing::quant::zero_block).
      testing::quant::zero_block(b);
      auto opt = Optimizer::create(pipeline,
                                   {{"a", a.data(), DType::f32, {64, 100}},
                                    {"b", b.data(), DType::f32, {5000}},
                                    {"d", d.data(), DType::f32, {4097}},
                                    {"e", e.data(), DType::f32, {4359}},
                                    {"c", c.data(), DType::f32, {300}}},
                                   o);
      EXPECT_TRUE(opt) << opt.error().message;
      for (int s = 0; opt && s < 5; ++s) {
        fill(ga, 0.13f, s), fill(gb, 0.07f, s), fill(gd, 0.11f, s), fill(ge, 0.09f, s);
        fill(gc, 0.3f, s);
        testing::quant::zero_block(gb);
        EXPECT_TRUE((*opt)->step({ga.data(), gb.data(), gd.data(), ge.data(), gc.data()}));
      }
      // The state as saved (codes and scales, as the CPU lays them out; before `a` grows: the
      // optimizer reads the parameters from it), then the parameters.
      std::vector<std::vector<uint8_t>> state;
      if (opt) {
        auto file = (*opt)->export_state();
        EXPECT_TRUE(file) << file.error().message;
        if (file)
          for (const auto& tensor : file->tensors) state.push_back(tensor.data);
      }
      for (const auto* v : {&b, &d, &e, &c}) a.insert(a.end(), v->begin(), v->end());
      return std::make_pair(a, state);
    };
    const auto want = run({});
    {
      OptimizerOptions o;
      o.backend = Backend::cuda;
      o.device_step = mode > 0;
      o.cuda_graph = mode == 2 || mode == 7;
      // Chunks of two 256-blocks on 64-thread work-groups: several chunks per tensor, warps
      // that step blocks of different chunks, a work-group of two warps.
      if (mode == 3) o.gpu_launch = codegen::GpuLaunch{.block = 64, .chunk_elements = 512};
      // The code tables in shared memory.
      if (mode == 4) o.gpu_launch = codegen::GpuLaunch{.shared_tables = true};
      // Several blocks a warp trip: two (a tensor's last trip may have one), and three in
      // chunks of two 256-blocks (a trip with a block past the chunk; 4-bit: a full trip, then
      // one of a single block).
      if (mode == 5) o.gpu_launch = codegen::GpuLaunch{.items = 2};
      if (mode == 6)
        o.gpu_launch = codegen::GpuLaunch{.block = 64, .items = 3, .chunk_elements = 512};
      // The next trip's loads issued before this one computes: one block a trip, as a graph;
      // two, in chunks of 2048 on 64-thread blocks (two trips a warp per chunk, the second with
      // no next; 4-bit: four), with shared tables.
      if (mode == 7) o.gpu_launch = codegen::GpuLaunch{.prefetch = true};
      if (mode == 8)
        o.gpu_launch = codegen::GpuLaunch{.block = 64,
                                          .items = 2,
                                          .chunk_elements = 2048,
                                          .shared_tables = true,
                                          .prefetch = true};
      // Vectors: each lane takes 4 contiguous elements (8-bit codes as a word, 4-bit ones as 2
      // bytes), the vector across a tensor's end element by element; 2 a lane, two blocks a
      // trip on 64-thread blocks, in chunks of 512; 8 a lane with three blocks a trip (4-bit's
      // blocks of 128 are too short for 32 lanes of 8: one element at a time).
      if (mode == 9) o.gpu_launch = codegen::GpuLaunch{.vec = 4};
      if (mode == 10)
        o.gpu_launch = codegen::GpuLaunch{.block = 64, .items = 2, .vec = 2, .chunk_elements = 512};
      if (mode == 11)
        o.gpu_launch = codegen::GpuLaunch{.items = 3, .vec = 8, .shared_tables = true};
      // Two sweeps a trip (the first only for the absmax: it must add nothing to LAMB's
      // norms), in vectors of 4; of 2 with two blocks a trip on 64-thread blocks in chunks of
      // 512 and shared tables, the lines two trips ahead fetched into L2 (the emulator has no
      // cache: this checks that the hint compiles and changes nothing); and one element a lane
      // with the lines of the next trip fetched, as a graph.
      if (mode == 12) o.gpu_launch = codegen::GpuLaunch{.vec = 4, .recompute = true};
      if (mode == 13)
        o.gpu_launch = codegen::GpuLaunch{.block = 64,
                                          .items = 2,
                                          .vec = 2,
                                          .chunk_elements = 512,
                                          .shared_tables = true,
                                          .recompute = true,
                                          .ahead = 2};
      if (mode == 14) {
        o.cuda_graph = true;
        o.gpu_launch = codegen::GpuLaunch{.ahead = 1};
      }
      // A vector's elements side by side with branch-free divisions and square roots (what
      // they cannot round exactly, zeros' square roots among them, computed again one by one;
      // the reductions in the elements' order): vectors of 4; of 2 with two blocks a trip in
      // chunks of 512, two sweeps and shared tables, as a graph.
      if (mode == 15) o.gpu_launch = codegen::GpuLaunch{.vec = 4, .interleave = true};
      if (mode == 16) {
        o.cuda_graph = true;
        o.gpu_launch = codegen::GpuLaunch{.block = 64,
                                          .items = 2,
                                          .vec = 2,
                                          .chunk_elements = 512,
                                          .shared_tables = true,
                                          .recompute = true,
                                          .interleave = true,
                                          .ahead = 1};
      }
      // Trips staged in shared memory by asynchronous copies (the emulator makes a copy only
      // when its group is waited for, and fills its place with 0xff when it is issued): two
      // trips ahead in vectors of 4, interleaved (the default on sm_90, which the emulator
      // says it is: named, so that it stays covered whatever the default becomes, and the
      // kernel cache then has mode 1's kernels); two in vectors of 2 (8-bit codes as 2-byte
      // words, 4-bit ones as bytes) with two blocks a trip on 64-thread blocks in chunks of
      // 4096 (four trips a warp per chunk: the ring wraps; a tensor's last trips are partial,
      // read from global memory), two sweeps and shared tables, as a graph.
      if (mode == 17) o.gpu_launch = codegen::GpuLaunch{.vec = 4, .interleave = true, .stage = 2};
      if (mode == 18) {
        o.cuda_graph = true;
        o.gpu_launch = codegen::GpuLaunch{.block = 64,
                                          .items = 2,
                                          .vec = 2,
                                          .chunk_elements = 4096,
                                          .shared_tables = true,
                                          .recompute = true,
                                          .stage = 2};
      }
      const auto got = run(o);
      EXPECT_EQ(got.first, want.first) << pipeline << " mode " << mode;
      EXPECT_TRUE(got.second == want.second) << pipeline << " mode " << mode << ": the state";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaQuantizedLaunch, ::testing::Range(0, 19));

// The 8-bit tables' cells' edges quantize as on the CPU (quant_model.h's lut_cell_edges), with
// the default launch and the vectors' branch-free quantizer.
TEST(Cuda, TableCellEdgesQuantizeAsOnTheCpu) {
  testing::quant::check_lut_cell_edges({.backend = Backend::cuda});
  testing::quant::check_lut_cell_edges(
      {.backend = Backend::cuda, .gpu_launch = codegen::GpuLaunch{.vec = 4, .interleave = true}});
}

// Every code of every format through the CUDA kernels (the maps, e4m3's too, read from global
// memory or from shared copies; q4u's computed), bit for bit as quant_test checks the CPU and
// OpenCL.
TEST(Cuda, QuantizedStateDequantizesEveryCodeToItsMapValue) {
  testing::quant::check_every_code({.backend = Backend::cuda});
  testing::quant::check_every_code(
      {.backend = Backend::cuda, .gpu_launch = codegen::GpuLaunch{.shared_tables = true}});
  testing::quant::check_every_code(
      {.backend = Backend::cuda, .gpu_launch = codegen::GpuLaunch{.items = 2}});
  testing::quant::check_every_code(
      {.backend = Backend::cuda, .gpu_launch = codegen::GpuLaunch{.prefetch = true}});
  testing::quant::check_every_code(
      {.backend = Backend::cuda, .gpu_launch = codegen::GpuLaunch{.vec = 4}});
  testing::quant::check_every_code(
      {.backend = Backend::cuda,
       .gpu_launch = codegen::GpuLaunch{.vec = 4, .recompute = true, .ahead = 1}});
  testing::quant::check_every_code(
      {.backend = Backend::cuda, .gpu_launch = codegen::GpuLaunch{.vec = 4, .interleave = true}});
}

// Stochastic rounding (bf16_sr state, bf16 parameters) draws the CPU backend's bits
// (tests/sround_check.h): host-driven, as a device step, as a graph, and on small blocks with
// vectors and tails.
TEST(Cuda, StochasticRoundingDrawsTheCpusBits) {
  for (int mode = 0; mode < 4; ++mode) {
    SCOPED_TRACE(mode);
    OptimizerOptions o;
    o.backend = Backend::cuda;
    o.device_step = mode == 1 || mode == 2;
    o.cuda_graph = mode == 2;
    if (mode == 3)
      o.gpu_launch = codegen::GpuLaunch{.block = 64, .items = 2, .vec = 4, .chunk_elements = 40};
    testing::check_stochastic_rounding_draws_the_cpus_bits(o);
  }
  // bf16 parameters rounded in the pass that quantizes 8-bit state, one element at a time and
  // in vectors (each lane's element index is its vector's first plus its place).
  for (int vec : {1, 4}) {
    SCOPED_TRACE(vec);
    testing::check_stochastic_rounding_draws_the_cpus_bits(
        {.backend = Backend::cuda, .gpu_launch = codegen::GpuLaunch{.vec = vec}}, "8bit");
  }
  // Recomputed: the second sweep rounds and stores (the first stores nothing).
  testing::check_stochastic_rounding_draws_the_cpus_bits(
      {.backend = Backend::cuda, .gpu_launch = codegen::GpuLaunch{.vec = 4, .recompute = true}},
      "8bit");
  // Interleaved: each element draws with its own index, side by side.
  testing::check_stochastic_rounding_draws_the_cpus_bits(
      {.backend = Backend::cuda, .gpu_launch = codegen::GpuLaunch{.vec = 4, .interleave = true}},
      "8bit");
}

// A communicator that synchronises with the host (one process: the sum is the data).
class HostOnlyComm final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "host-only"; }
  Status allreduce_sum(std::span<double>) override { return Status::Ok(); }
};

// $OPTJIT_NCCL_TIMEOUT is read when a communicator is made: a value that is not a number of
// seconds > 0 is refused there, on any machine, naming the variable (it was read with atof at
// the first all-reduce: "abc" aborted the communicator at once, "5min" waited 5 s).
TEST(NcclTimeout, ABadValueIsRefusedWhenTheCommunicatorIsMade) {
  for (const char* bad : {"abc", "5min", "0", "-1", "nan", "inf", " "}) {
    ASSERT_EQ(::setenv("OPTJIT_NCCL_TIMEOUT", bad, 1), 0);
    NcclId id{};
    for (auto made : {nccl_communicator_init(1, 0, id, 0, nullptr),
                      nccl_communicator(reinterpret_cast<void*>(1), nullptr)}) {
      ASSERT_FALSE(made) << bad;
      EXPECT_EQ(made.error().message,
                fmt::format("OPTJIT_NCCL_TIMEOUT='{}' is not a number of seconds greater than 0 "
                            "(how long an all-reduce may make no progress; unset, 300)",
                            bad));
    }
  }
  // A good value, or none, gets past the check (to NCCL and the driver, absent or not).
  for (const char* good : {"", "2.5", "600"}) {
    ASSERT_EQ(::setenv("OPTJIT_NCCL_TIMEOUT", good, 1), 0);
    auto made = nccl_communicator(nullptr, nullptr);
    ASSERT_FALSE(made);
    EXPECT_EQ(made.error().message.find("OPTJIT_NCCL_TIMEOUT"), std::string::npos)
        << made.error().message;
  }
  ::unsetenv("OPTJIT_NCCL_TIMEOUT");
}

// NCCL, one rank on this GPU: a sharded device step all-reduces each pass's partials on the
// optimizer's own stream (the communicator refuses any other), with no host synchronisation,
// so a CUDA graph captures it; whole tensors give the unsharded device step's bits (every slot
// is this rank's, the folds run over the same tensors in the same order).
TEST(Nccl, ShardedDeviceStepOnTheStreamAndInAGraph) {
  auto dev = runtime::open_device({.kind = "cuda"});
  ASSERT_TRUE(dev) << dev.error().message;
  void* stream = (*dev)->queue();
  auto id = nccl_unique_id();
  ASSERT_TRUE(id) << id.error().message;
  auto comm = nccl_communicator_init(1, 0, *id, (*dev)->description().index, stream);
  ASSERT_TRUE(comm) << comm.error().message;
  EXPECT_TRUE((*comm)->capturable());
  std::vector<double> v = {1.5, -2.0, 3.0};
  ASSERT_TRUE((*comm)->allreduce_sum(v));
  EXPECT_EQ(v, (std::vector<double>{1.5, -2.0, 3.0}));
  const std::vector<GlobalTensor> tensors = {{"a", 1000}, {"b", 37}};
  // A graph of a sharded step over a communicator that synchronises with the host: refused.
  {
    std::vector<float> a(1000), b(37);
    OptimizerOptions o;
    o.backend = Backend::cuda;
    o.cuda_graph = true;
    o.shard = ShardOptions{std::make_shared<HostOnlyComm>(), tensors, {}};
    auto refused =
        Optimizer::create("adamw()",
                          {{.name = "a", .data = a.data(), .dtype = DType::f32, .shape = {1000}},
                           {.name = "b", .data = b.data(), .dtype = DType::f32, .shape = {37}}},
                          o);
    ASSERT_FALSE(refused);
    EXPECT_NE(refused.error().message.find("a CUDA graph cannot capture a sharded step over "
                                           "host-only"),
              std::string::npos)
        << refused.error().message;
  }
  for (const char* pipeline :
       {"chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-2, weight_decay=0.1))",
        "lamb(lr=1e-2, weight_decay=0.01)", "chain(grad_scaler(scale=1024), adamw(lr=1e-2))"})
    for (int variant = 0; variant < 4; ++variant) {
      const bool graph = variant % 2 == 1;
      const ShardOrder order = variant < 2 ? ShardOrder::by_tensor : ShardOrder::by_process;
      SCOPED_TRACE(std::string(pipeline) + (graph ? ", graph" : ", device step") +
                   (variant < 2 ? ", by tensor" : ", by process"));
      std::vector<std::vector<float>> p[2];
      std::unique_ptr<Optimizer> opt[2];
      for (int k = 0; k < 2; ++k) {
        p[k] = {std::vector<float>(1000), std::vector<float>(37)};
        for (size_t t = 0; t < 2; ++t)
          for (size_t e = 0; e < p[k][t].size(); ++e) p[k][t][e] = std::sin(0.3f * e + t);
        OptimizerOptions o;
        o.backend = Backend::cuda;
        o.queue = stream;
        o.device_step = true;
        o.cuda_graph = graph;
        if (k == 1) o.shard = ShardOptions{*comm, tensors, {}, order};
        auto made = Optimizer::create(
            pipeline,
            {{.name = "a", .data = p[k][0].data(), .dtype = DType::f32, .shape = {1000}},
             {.name = "b", .data = p[k][1].data(), .dtype = DType::f32, .shape = {37}}},
            o);
        ASSERT_TRUE(made) << made.error().message;
        opt[k] = std::move(*made);
      }
      for (int step = 0; step < 4; ++step) {
        std::vector<float> ga(1000), gb(37);
        for (size_t e = 0; e < ga.size(); ++e) ga[e] = std::cos(0.7f * e + step) * 0.1f;
        for (size_t e = 0; e < gb.size(); ++e) gb[e] = std::cos(1.3f * e - step);
        if (step == 2) gb[5] = INFINITY;  // the scaler skips; the others go NaN alike
        for (int k = 0; k < 2; ++k) {
          auto r = opt[k]->step({ga.data(), gb.data()});
          ASSERT_TRUE(r) << r.error().message;
        }
      }
      for (size_t t = 0; t < 2; ++t)
        for (size_t e = 0; e < p[0][t].size(); ++e) {
          if (std::isnan(p[0][t][e])) {
            EXPECT_TRUE(std::isnan(p[1][t][e]));
            continue;
          }
          ASSERT_EQ(p[0][t][e], p[1][t][e]) << t << " " << e;
        }
    }
}

}  // namespace
}  // namespace optjit
