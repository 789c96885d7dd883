// The CUDA emulator itself (tests/cuda_emu/README.md), run only under it (label "emulator"):
// its warp exchanges and barriers give CUDA's results, and what would be undefined or hang on a
// GPU (a deadlock, reading a lane that took no part, a copy outside an allocation, allocating
// past the device, synchronising a captured stream) is a clear error. Each test is its own
// process: a failed launch is sticky for the whole process, as on a GPU.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "api/optimizer.h"
#include "codegen/nvrtc.h"
#include "runtime/cuda_api.h"
#include "runtime/cuda_driver.h"

namespace optjit {
namespace {

using runtime::cuda::Api;
using runtime::cuda::CUdeviceptr;
using runtime::cuda::CUfunction;
using runtime::cuda::CUmodule;
using runtime::cuda::CUstream;

constexpr int kLaunchFailed = 719, kInvalidValue = 1, kOutOfMemory = 2, kCaptureUnsupported = 900;

// The driver with the primary context current, a stream, and a module built from `source`.
struct Emu {
  const Api* api = nullptr;
  runtime::cuda::CUcontext ctx = nullptr;
  CUstream stream = nullptr;
  CUmodule module = nullptr;

  explicit Emu(const std::string& source = "") {
    auto a = runtime::cuda::api();
    if (!a) {
      ADD_FAILURE() << a.error().message;
      return;
    }
    api = *a;
    char name[64] = {};
    EXPECT_EQ(api->cuDeviceGetName(name, sizeof(name), 0), 0);
    EXPECT_EQ(std::string(name), "optjit CUDA emulator") << "run under the emulator (ctest)";
    EXPECT_EQ(api->cuDevicePrimaryCtxRetain(&ctx, 0), 0);
    EXPECT_EQ(api->cuCtxPushCurrent(ctx), 0);
    EXPECT_EQ(api->cuStreamCreate(&stream, 1), 0);
    if (source.empty()) return;
    auto cubin = codegen::compile_cubin(source, "sm_90");
    if (!cubin) {
      ADD_FAILURE() << cubin.error().message;
      return;
    }
    EXPECT_EQ(api->cuModuleLoadData(&module, cubin->image.data()), 0);
  }
  // Whether the driver, and the module if one was asked for, are there.
  bool ok() const { return api && stream && !::testing::Test::HasFailure(); }
  CUfunction function(const char* name) const {
    CUfunction f = nullptr;
    EXPECT_EQ(api->cuModuleGetFunction(&f, module, name), 0) << name;
    return f;
  }
  CUdeviceptr alloc(size_t bytes) const {
    CUdeviceptr p = 0;
    EXPECT_EQ(api->cuMemAlloc(&p, bytes), 0);
    return p;
  }
  int launch(const char* kernel, unsigned grid, unsigned block, std::vector<void*> args) const {
    return api->cuLaunchKernel(function(kernel), grid, 1, 1, block, 1, 1, 0, stream, args.data(),
                               nullptr);
  }
  template <class T>
  std::vector<T> read(CUdeviceptr p, size_t n) const {
    std::vector<T> out(n);
    EXPECT_EQ(api->cuMemcpyDtoHAsync(out.data(), p, n * sizeof(T), stream), 0);
    return out;
  }
};

// A warp's butterfly sum by exchanges, then the block's by shared memory and barriers: every
// thread ends with its block's sum, and each warp's partial is its own lanes'.
constexpr const char* kSums = R"(
extern "C" __global__ void sums(const float* x, float* warp_sum, float* block_sum) {
  __shared__ float partial[32];
  const unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
  float v = x[t];
  for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  if ((threadIdx.x & 31u) == 0u) partial[threadIdx.x >> 5] = v;
  warp_sum[t] = v;
  __syncthreads();
  float s = 0.0f;
  for (unsigned int w = 0; w < blockDim.x / 32u; ++w) s += partial[w];
  block_sum[t] = s;
}
)";

TEST(CudaEmulator, WarpExchangesAndBarriersGiveCudasResults) {
  Emu e(kSums);
  ASSERT_TRUE(e.ok());
  const unsigned blocks = 3, threads = 128, n = blocks * threads;
  std::vector<float> x(n);
  for (unsigned i = 0; i < n; ++i)
    x[i] = static_cast<float>(i % 7) + 0.25f * static_cast<float>(i / 32);
  CUdeviceptr dx = e.alloc(n * 4), dw = e.alloc(n * 4), db = e.alloc(n * 4);
  ASSERT_EQ(e.api->cuMemcpyHtoDAsync(dx, x.data(), n * 4, e.stream), 0);
  ASSERT_EQ(e.launch("sums", blocks, threads, {&dx, &dw, &db}), 0);
  const auto warp = e.read<float>(dw, n), block = e.read<float>(db, n);
  for (unsigned i = 0; i < n; ++i) {
    double w = 0, b = 0;  // small integers and quarters: exact in any order
    for (unsigned j = i / 32 * 32; j < i / 32 * 32 + 32; ++j) w += x[j];
    for (unsigned j = i / threads * threads; j < i / threads * threads + threads; ++j) b += x[j];
    ASSERT_EQ(warp[i], w) << i;
    ASSERT_EQ(block[i], b) << i;
  }
  EXPECT_EQ(e.api->cuStreamSynchronize(e.stream), 0);
}

// Half of each warp waits at a barrier, the other half at an exchange: on a GPU, a hang; here a
// failed launch that names where the threads wait, sticky for every later call.
TEST(CudaEmulator, ADeadlockFailsTheLaunchInsteadOfHanging) {
  Emu e(R"(
extern "C" __global__ void stuck(float* x) {
  float v = x[threadIdx.x];
  if ((threadIdx.x & 1u) == 0u) {
    __syncthreads();
  } else {
    v = __shfl_xor_sync(0xffffffffu, v, 1);
  }
  x[threadIdx.x] = v;
}
)");
  ASSERT_TRUE(e.ok());
  CUdeviceptr dx = e.alloc(64 * 4);
  ASSERT_EQ(e.api->cuMemsetD32Async(dx, 0, 64, e.stream), 0);
  testing::internal::CaptureStderr();
  ASSERT_EQ(e.launch("stuck", 1, 64, {&dx}), 0);  // queued; it fails when it runs
  EXPECT_EQ(e.api->cuStreamSynchronize(e.stream), kLaunchFailed);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("stuck failed: deadlock in block (0, 0, 0): 32 threads wait at "
                     "__syncthreads and 32 at __shfl_xor_sync, and none can go on"),
            std::string::npos)
      << err;
  CUdeviceptr more = 0;
  EXPECT_EQ(e.api->cuMemAlloc(&more, 16), kLaunchFailed);
  EXPECT_EQ(runtime::cuda::fail("cuMemAlloc", kLaunchFailed).message,
            "CUDA: cuMemAlloc failed: unspecified launch failure (error 719)");
}

// Lane 0 alone exchanges with lane 1, which exits without taking part: undefined on a GPU, an
// error here.
TEST(CudaEmulator, ReadingALaneThatTookNoPartIsAnError) {
  Emu e(R"(
extern "C" __global__ void lonely(float* x) {
  if (threadIdx.x == 0u) x[0] = __shfl_xor_sync(0xffffffffu, x[0], 1);
}
)");
  ASSERT_TRUE(e.ok());
  CUdeviceptr dx = e.alloc(4);
  testing::internal::CaptureStderr();
  ASSERT_EQ(e.launch("lonely", 1, 32, {&dx}), 0);
  EXPECT_EQ(e.api->cuStreamSynchronize(e.stream), kLaunchFailed);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("__shfl_xor_sync read a lane that did not take part"), std::string::npos)
      << err;
}

// A kernel that writes past the end of its allocation stops the process, naming the kernel (the
// page after every allocation faults), instead of corrupting the heap for later.
TEST(CudaEmulatorDeathTest, AKernelWritingPastAnAllocationStopsTheProcessNamingIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Emu e(R"(
extern "C" __global__ void overrun(float* x) { x[threadIdx.x + 64u] = 1.0f; }
)");
        CUdeviceptr dx = e.alloc(64 * 4);
        e.launch("overrun", 1, 32, {&dx});
        e.api->cuStreamSynchronize(e.stream);
      },
      "kernel overrun touched 0x[0-9a-f]+, outside every allocation");
}

// A device too small for the optimizer: creating it, or stepping it, is an error that says what
// could not be allocated, how much, and of how much; the caller's parameters are as they were.
TEST(CudaEmulator, AnOptimizerThatDoesNotFitTheDeviceIsAClearError) {
  ::setenv("OPTJIT_EMU_MEMORY", "1000000", 1);  // 1 MB; AdamW on 1M parameters needs 12
  std::vector<float> w(1 << 20, 0.5f), g(w.size(), 0.25f);
  const std::vector<float> before = w;
  OptimizerOptions o;
  o.backend = Backend::cuda;
  auto opt = Optimizer::create("adamw(lr=0.1)", {{"w", w.data(), DType::f32, {1 << 20}}}, o);
  std::string message = opt ? "" : opt.error().message;
  if (opt) {
    auto r = (*opt)->step({g.data()});
    ASSERT_FALSE(r) << "a step needing 12 MB on a 1 MB device succeeded";
    message = r.error().message;
  }
  EXPECT_EQ(message,
            "CUDA: allocating optimizer state on the device failed: out of memory (error 2): "
            "4.0 MiB asked for, and 'optjit CUDA emulator' has 1.0 MiB in all");
  EXPECT_EQ(w, before);
}

// A kernel given memory that was freed stops the process, saying so (on a GPU the memory may
// already hold another buffer).
TEST(CudaEmulatorDeathTest, AKernelReadingFreedMemoryStopsTheProcessSayingSo) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Emu e(R"(
extern "C" __global__ void stale(float* x) { x[threadIdx.x] += 1.0f; }
)");
        CUdeviceptr dx = e.alloc(32 * 4);
        e.api->cuMemFree(dx);
        e.launch("stale", 1, 32, {&dx});
        e.api->cuStreamSynchronize(e.stream);
      },
      "kernel stale touched 0x[0-9a-f]+, in an allocation of 128 bytes at 0x[0-9a-f]+ that "
      "was freed");
}

// Copies must stay inside one allocation; allocations inside the device's memory.
TEST(CudaEmulator, CopiesOutsideAnAllocationAndAllocationsPastTheDeviceAreRefused) {
  Emu e;
  ASSERT_TRUE(e.ok());
  CUdeviceptr a = e.alloc(1024);
  std::vector<char> host(2048);
  EXPECT_EQ(e.api->cuMemcpyHtoDAsync(a + 512, host.data(), 513, e.stream), kInvalidValue);
  EXPECT_EQ(e.api->cuMemcpyHtoDAsync(a + 512, host.data(), 512, e.stream), 0);
  EXPECT_EQ(e.api->cuMemcpyDtoHAsync(host.data(), a - 4, 8, e.stream), kInvalidValue);
  EXPECT_EQ(e.api->cuMemsetD32Async(a, 0, 257, e.stream), kInvalidValue);
  size_t total = 0;
  ASSERT_EQ(e.api->cuDeviceTotalMem(&total, 0), 0);
  CUdeviceptr big = 0;
  EXPECT_EQ(e.api->cuMemAlloc(&big, total), kOutOfMemory);
  EXPECT_EQ(e.api->cuMemFree(a), 0);
  EXPECT_EQ(e.api->cuMemFree(a), kInvalidValue);
}

// Synchronising a stream that is being captured fails and invalidates the capture, as on a GPU;
// a graph replays the captured work.
TEST(CudaEmulator, CapturesRecordAndReplayWorkAndRefuseSynchronising) {
  Emu e(R"(
extern "C" __global__ void add_one(float* x) { x[threadIdx.x] += 1.0f; }
)");
  ASSERT_TRUE(e.ok());
  CUdeviceptr dx = e.alloc(32 * 4);
  ASSERT_EQ(e.api->cuMemsetD32Async(dx, 0, 32, e.stream), 0);
  ASSERT_EQ(e.api->cuStreamBeginCapture(e.stream, runtime::cuda::kCaptureModeThreadLocal), 0);
  ASSERT_EQ(e.launch("add_one", 1, 32, {&dx}), 0);
  runtime::cuda::CUgraph graph = nullptr;
  ASSERT_EQ(e.api->cuStreamEndCapture(e.stream, &graph), 0);
  EXPECT_EQ(e.read<float>(dx, 32), std::vector<float>(32, 0.0f)) << "captured, not run";
  runtime::cuda::CUgraphExec exec = nullptr;
  ASSERT_EQ(e.api->cuGraphInstantiateWithFlags(&exec, graph, 0), 0);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(e.api->cuGraphLaunch(exec, e.stream), 0);
  EXPECT_EQ(e.read<float>(dx, 32), std::vector<float>(32, 3.0f));

  ASSERT_EQ(e.api->cuStreamBeginCapture(e.stream, runtime::cuda::kCaptureModeThreadLocal), 0);
  EXPECT_EQ(e.api->cuStreamSynchronize(e.stream), kCaptureUnsupported);
  runtime::cuda::CUgraph broken = nullptr;
  EXPECT_NE(e.api->cuStreamEndCapture(e.stream, &broken), 0);
  EXPECT_EQ(broken, nullptr);
  EXPECT_EQ(e.api->cuGraphExecDestroy(exec), 0);
  EXPECT_EQ(e.api->cuGraphDestroy(graph), 0);
}

// The emulator's module cache ($OPTJIT_EMU_CACHE, nvrtc.cpp) gives back a module only for the
// text it was built from: two sources that differ in one constant each run their own, and a
// record whose key holds another text's module (a hash collision, a stale entry) is rebuilt,
// not taken. What other build inputs left behind is removed.
TEST(CudaEmulator, CachedModulesAreTakenOnlyForTheTextTheyWereBuiltFrom) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("optjit-emu-cache-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  ASSERT_EQ(::setenv("OPTJIT_EMU_CACHE", dir.c_str(), 1), 0);
  auto source = [](int value) {
    return "extern \"C\" __global__ void put(float* x) { x[threadIdx.x] = " +
           std::to_string(value) + ".0f; }\n";
  };
  // What `put` writes with the module built from source(value), and the cache's records.
  auto run = [&](int value) {
    Emu e(source(value));
    if (!e.ok()) return -1.0f;
    CUdeviceptr x = e.alloc(4 * 32);
    EXPECT_EQ(e.launch("put", 1, 32, {&x}), 0);
    return e.read<float>(x, 32)[31];
  };
  auto records = [&] {
    std::vector<fs::path> out;
    for (const auto& f : fs::recursive_directory_iterator(dir))
      if (f.path().extension() == ".cpp") out.push_back(f.path());
    std::sort(out.begin(), out.end());
    return out;
  };
  auto read = [](const fs::path& p) {
    std::stringstream s;
    s << std::ifstream(p, std::ios::binary).rdbuf();
    return s.str();
  };
  // What another device.h, compiler or flags built: removed at the first store.
  fs::create_directories(dir / "0123456789abcdef");
  std::ofstream(dir / "0123456789abcdef" / "stale.so") << "stale";
  EXPECT_EQ(run(1), 1.0f);
  EXPECT_FALSE(fs::exists(dir / "0123456789abcdef"));
  EXPECT_EQ(run(2), 2.0f);
  ASSERT_EQ(records().size(), 2u);
  EXPECT_EQ(run(1), 1.0f);  // from the cache
  EXPECT_EQ(run(2), 2.0f);
  ASSERT_EQ(records().size(), 2u);
  // Put 2's module and text under 1's key: 1 must be built afresh.
  fs::path one, two;
  for (const fs::path& r : records()) (read(r).find("= 1.0f") != std::string::npos ? one : two) = r;
  ASSERT_FALSE(one.empty() || two.empty());
  fs::copy_file(two, one, fs::copy_options::overwrite_existing);
  fs::path so_one = one, so_two = two;
  so_one.replace_extension(".so");
  so_two.replace_extension(".so");
  fs::copy_file(so_two, so_one, fs::copy_options::overwrite_existing);
  EXPECT_EQ(run(1), 1.0f);
  EXPECT_NE(read(one).find("= 1.0f"), std::string::npos) << "the record is 1's again";
  ::unsetenv("OPTJIT_EMU_CACHE");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace optjit
