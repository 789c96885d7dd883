// Executors on each kind of device for tests, over one device per kind for the whole test
// process (PoCL's context, and CUDA's, are made once, not per case).
#pragma once

#include <map>
#include <memory>

#include "runtime/device.h"
#include "runtime/executor.h"

namespace optjit::testing {

inline Expected<std::shared_ptr<runtime::Device>> shared_device(const std::string& kind) {
  // Never destroyed: at exit the drivers' own teardown may already have run (the map would
  // release its devices after it; webgpu_test crashed at exit on NVIDIA's Vulkan driver).
  static auto& devices = *new std::map<std::string, std::shared_ptr<runtime::Device>>;
  auto& d = devices[kind];
  if (!d) {
    auto opened = runtime::open_device({.kind = kind});
    if (!opened) return opened.error();
    d = *opened;
  }
  return d;
}

inline Expected<std::unique_ptr<runtime::Executor>> executor(const plan::Plan& plan,
                                                             const std::string& kind,
                                                             runtime::ExecutorOptions options = {},
                                                             cache::KernelCache* cache = nullptr) {
  auto d = shared_device(kind);
  if (!d) return d.error();
  return runtime::Executor::create(plan, *d, options, cache);
}

inline Expected<std::unique_ptr<runtime::Executor>> cpu_executor(
    const plan::Plan& plan, codegen::CpuLaunch launch = {}, cache::KernelCache* cache = nullptr) {
  return executor(plan, "cpu", runtime::ExecutorOptions::of(launch), cache);
}

/// The launch OpenCL takes by default on the test device (PoCL: one work-item per group).
inline codegen::GpuLaunch opencl_default_launch() {
  auto d = shared_device("opencl");
  return codegen::GpuLaunch::device_default(d && (*d)->description().gpu);
}

/// OpenCL options with the device's default launch and the given step mode.
inline runtime::ExecutorOptions opencl_options(runtime::StepMode step = runtime::StepMode::host) {
  runtime::ExecutorOptions o;
  o.launch = opencl_default_launch();
  o.step = step;
  return o;
}

}  // namespace optjit::testing
