#include "autotune/gpu_tuner.h"

#include <algorithm>
#include <cstdio>
#include <memory>

#include "codegen/c_emitter.h"
#include "codegen/cuda_kernels.h"
#include "runtime/cuda_driver.h"
#include "runtime/device.h"
#include "runtime/devices.h"
#include "runtime/executor.h"
#include "runtime/opencl_device.h"

namespace optjit::autotune {

namespace {

bool valid_launch(const std::string& config) {
  return codegen::GpuLaunch::parse(config).has_value();
}

// A stage that varies one thing of the best configuration so far.
Stage vary(std::function<std::vector<codegen::GpuLaunch>(codegen::GpuLaunch)> f) {
  return [f](const std::string& best) {
    std::vector<std::string> out;
    for (const auto& g : f(codegen::GpuLaunch::parse(best).value()))
      if (g.validate()) out.push_back(g.to_string());
    return out;
  };
}

// A stage that tries each of `values` for one field of the best configuration so far.
template <class T>
Stage each(T codegen::GpuLaunch::*field, std::vector<T> values) {
  return vary([field, values](codegen::GpuLaunch g) {
    std::vector<codegen::GpuLaunch> out;
    for (const T& v : values) {
      g.*field = v;
      out.push_back(g);
    }
    return out;
  });
}

}  // namespace

namespace {
// The number of an architecture ("sm_90": 90), 0 where `arch` names none.
int sm_number(const std::string& arch) {
  int n = 0;
  return std::sscanf(arch.c_str(), "sm_%d", &n) == 1 ? n : 0;
}
}  // namespace

SmLimits sm_limits(const std::string& arch) {
  int n = sm_number(arch);
  if (n == 0) n = 90;
  SmLimits l;
  if (n < 75) return {2048, 32, 65536, 96 * 1024, 0};
  if (n == 75) return {1024, 16, 65536, 64 * 1024, 0};
  if (n == 80 || n == 87) return {2048, 32, 65536, 164 * 1024, 1024};
  if (n == 86) return {1536, 16, 65536, 100 * 1024, 1024};
  if (n == 89) return {1536, 24, 65536, 100 * 1024, 1024};
  if (n >= 120) return {1536, 32, 65536, 100 * 1024, 1024};
  return l;  // sm_90, sm_100, sm_103, sm_110
}

Occupancy occupancy(const std::string& arch, int block, int registers, int shared_bytes) {
  const SmLimits l = sm_limits(arch);
  const int warps = (block + 31) / 32, max_warps = l.max_threads / 32;
  Occupancy o{max_warps / warps, 0, "threads"};
  auto limit = [&](int blocks, const char* why) {
    if (blocks < o.blocks_per_sm) o.blocks_per_sm = blocks, o.limiter = why;
  };
  limit(l.max_blocks, "blocks");
  if (registers > 0) {
    const int per_warp = (registers * 32 + 255) / 256 * 256;
    limit(l.registers / (per_warp * warps), "registers");
  }
  if (shared_bytes + l.reserved_shared_per_block > 0)
    limit(l.shared_bytes / (shared_bytes + l.reserved_shared_per_block), "shared memory");
  o.fraction = static_cast<double>(o.blocks_per_sm * warps) / max_warps;
  return o;
}

std::optional<std::string> cuda_prune(const plan::Plan& plan, const std::string& arch,
                                      const codegen::GpuLaunch& launch, cache::KernelCache* cache) {
  auto built = codegen::plan_cubin(plan, arch, launch, cache);
  if (!built) return built.error().message;
  for (const auto& k : built->cubin.kernels) {
    if (k.spill_stores + k.spill_loads > 0)
      return fmt::format("{} spills registers ({} B stores, {} B loads)", k.name, k.spill_stores,
                         k.spill_loads);
    Occupancy o = occupancy(arch, launch.block, k.registers, k.shared_bytes);
    if (o.fraction < 0.25)
      return fmt::format("{}: occupancy {:.0f}% on {}, limited by {} ({} registers, {} B shared)",
                         k.name, 100 * o.fraction, arch, o.limiter, k.registers, k.shared_bytes);
  }
  return std::nullopt;
}

std::vector<Stage> gpu_stages(int max_block, bool gpu) {
  std::vector<Stage> stages;
  stages.push_back(vary([](codegen::GpuLaunch g) {
    std::vector<codegen::GpuLaunch> out;
    for (int vec : {1, 4, 2, 8})
      for (int items : {1, 2, 4}) {
        // vec=1 without the options that need vectors.
        codegen::GpuLaunch c = vec == 1 ? g.scalar() : g;
        c.vec = vec;
        c.items = items;
        out.push_back(c);
      }
    return out;
  }));
  std::vector<int> blocks;
  for (int block :
       gpu ? std::vector<int>{128, 256, 512, 1024, 64} : std::vector<int>{1, 4, 16, 64, 256})
    if (block <= max_block) blocks.push_back(block);
  stages.push_back(each(&codegen::GpuLaunch::block, blocks));
  stages.push_back(each(&codegen::GpuLaunch::groups_per_unit, {2, 4, 8, 16, 32}));
  stages.push_back(each(&codegen::GpuLaunch::chunk_elements,
                        {int64_t{1} << 16, int64_t{1} << 14, int64_t{1} << 18, int64_t{1} << 20}));
  return stages;
}

namespace {

Expected<runtime::OpenclDeviceInfo> opencl_device(int device) {
  auto devices = runtime::opencl_devices();
  if (!devices) return devices.error();
  int pick = device;
  if (pick < 0) {
    pick = 0;
    for (const auto& d : *devices)
      if (d.gpu) {
        pick = d.index;
        break;
      }
  }
  if (pick >= static_cast<int>(devices->size()))
    return make_error("no OpenCL device {} (there are {})", pick, devices->size());
  return (*devices)[pick];
}

}  // namespace

bool interleave_checked(const std::string& arch) {
  // Passed on an H100 and an H200 (bench/results/h200-2026-11-27/SUMMARY.md).
  return arch == "sm_90";
}

codegen::GpuLaunch default_launch(const plan::Plan& plan, const runtime::DeviceDescription& d) {
  codegen::GpuLaunch g = d.default_launch;
  if (d.kind != "cuda" || codegen::constant_tables(plan).empty()) return g;
  g.vec = 4;
  g.interleave = interleave_checked(d.arch);
  // Two trips staged by cp.async where there is cp.async (sm_80 on); before it, the L2
  // prefetch two trips ahead.
  if (sm_number(d.arch) >= 80)
    g.stage = 2;
  else
    g.ahead = 2;
  return g;
}

codegen::GpuLaunch opencl_default_launch(int device) {
  auto d = opencl_device(device);
  return codegen::GpuLaunch::device_default(!d || d->gpu);
}

Expected<TuneTarget> opencl_target(const plan::Plan& plan, int64_t elements, int device) {
  auto d = opencl_device(device);
  if (!d) return d.error();
  return TuneTarget{program_id(plan), runtime::opencl_performance(*d), elements};
}

Expected<TuneTarget> cuda_target(const plan::Plan& plan, int64_t elements, int device) {
  auto devices = runtime::cuda_devices();
  if (!devices) return devices.error();
  if (device < 0 || device >= static_cast<int>(devices->size()))
    return make_error("no CUDA device {} (there are {})", device, devices->size());
  return TuneTarget{program_id(plan), runtime::cuda_performance((*devices)[device]), elements};
}

namespace {

// Tunes on a GPU-style device: each candidate is a fresh executor (the previous one's device
// memory freed first) with gradients resident and nothing copied back, so the kernels are what
// is timed.
Expected<TuneResult> tune_device(const plan::Plan& plan, runtime::OptimizerState& state,
                                 std::shared_ptr<runtime::Device> device, const TuneTarget& target,
                                 const SearchSpace& space, cache::KernelCache* cache,
                                 const TuneOptions& options,
                                 const std::function<void()>& restore_external) {
  const runtime::OptimizerState snapshot = state;
  std::unique_ptr<runtime::Executor> executor;
  MakeStep make = [&](const std::string& config) -> Expected<StepFn> {
    executor.reset();
    runtime::ExecutorOptions o;
    o.launch = codegen::GpuLaunch::parse(config).value();
    o.copy_back = runtime::ExecutorOptions::CopyBack::none;
    o.resident_grads = true;
    auto e = runtime::Executor::create(plan, device, o, cache);
    if (!e) return e.error();
    executor = std::move(*e);
    return StepFn([&]() -> Status {
      auto r = executor->step(state);
      return r ? Status::Ok() : Status(r.error());
    });
  };
  auto restore = [&] {
    state = snapshot;
    if (executor) executor->state_changed();
    if (restore_external) restore_external();
  };
  return tune(target, space, make, restore, cache, options);
}

SearchSpace device_space(const runtime::DeviceDescription& d) {
  const int max_block = static_cast<int>(std::min<size_t>(1024, d.max_group));
  return {d.default_launch.to_string(), gpu_stages(max_block, d.gpu), {}, valid_launch};
}

SearchSpace cuda_space(const plan::Plan& plan, const runtime::DeviceDescription& d,
                       cache::KernelCache* cache) {
  SearchSpace space{default_launch(plan, d).to_string(), gpu_stages(1024), {}, valid_launch};
  // Quantized state (from default_launch): its code tables read from global memory or from
  // shared copies first, then vectors and items, then each warp's next trip prefetched or not
  // (prefetching takes one element a lane at a time, so it is tried on the best vector shape,
  // not before vectors are), then two sweeps a trip or one, then (where checked) interleaved
  // elements or not, then 0, 1, 2 or 4 trips staged in shared memory, then L2 prefetches 0, 1
  // or 2 trips ahead. These stages come before block, grid and chunk: they change its kernels
  // the most, and the candidate cap (24 by default) would end the search before them. A
  // candidate whose staged trips and shared tables exceed a block's shared memory is refused
  // by the emitter, so pruned.
  if (!codegen::constant_tables(plan).empty()) {
    auto both = [](bool codegen::GpuLaunch::*field) { return each(field, {false, true}); };
    space.stages.insert(space.stages.begin(), both(&codegen::GpuLaunch::shared_tables));
    space.stages.insert(space.stages.begin() + 2, both(&codegen::GpuLaunch::prefetch));
    // Two sweeps a trip (valid on vectors only: vary drops it elsewhere), then interleaved
    // elements and staged trips (likewise), then the lines of trips ahead fetched into L2.
    space.stages.insert(space.stages.begin() + 3, both(&codegen::GpuLaunch::recompute));
    int next = 4;
    if (interleave_checked(d.arch))
      space.stages.insert(space.stages.begin() + next++, both(&codegen::GpuLaunch::interleave));
    space.stages.insert(space.stages.begin() + next++,
                        each(&codegen::GpuLaunch::stage, {0, 1, 2, 4}));
    space.stages.insert(space.stages.begin() + next, each(&codegen::GpuLaunch::ahead, {0, 1, 2}));
  }
  space.prune = [&plan, arch = d.arch, cache](const std::string& config) {
    return cuda_prune(plan, arch, codegen::GpuLaunch::parse(config).value(), cache);
  };
  return space;
}

}  // namespace

Expected<TuneResult> tune_gpu(const plan::Plan& plan, runtime::OptimizerState& state,
                              std::shared_ptr<runtime::Device> device, cache::KernelCache* cache,
                              TuneOptions options, const std::function<void()>& restore_external) {
  const runtime::DeviceDescription& d = device->description();
  const TuneTarget target{program_id(plan), d.performance, state.elements()};
  if (d.kind == "cuda")
    return tune_device(plan, state, device, target, cuda_space(plan, d, cache), cache, options,
                       restore_external);
  if (d.kind == "cpu")
    return make_error("tune_gpu: the {} device is not a GPU-style device", d.kind);
  // OpenCL, WebGPU and any other kind: blocks up to what the device allows.
  return tune_device(plan, state, device, target, device_space(d), cache, options,
                     restore_external);
}

Expected<TuneResult> tune_opencl(const plan::Plan& plan, runtime::OptimizerState& state, int device,
                                 cache::KernelCache* cache, TuneOptions options) {
  auto d = runtime::open_device({.kind = "opencl", .index = device});
  if (!d) return d.error();
  return tune_gpu(plan, state, *d, cache, options);
}

Expected<TuneResult> tune_cuda(const plan::Plan& plan, runtime::OptimizerState& state, int device,
                               cache::KernelCache* cache, TuneOptions options) {
  auto d = runtime::open_device({.kind = "cuda", .index = device});
  if (!d) return d.error();
  return tune_gpu(plan, state, *d, cache, options);
}

codegen::GpuLaunch gpu_launch_for(const Expected<TuneTarget>& target, cache::KernelCache* cache,
                                  std::string* from, const codegen::GpuLaunch& fallback) {
  if (target)
    if (auto d = stored_decision(*target, cache))
      if (auto g = codegen::GpuLaunch::parse(*d)) {
        if (from) *from = *d;
        return *g;
      }
  return fallback;
}

}  // namespace optjit::autotune
