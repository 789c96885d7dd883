// The OpenCL backend: kernels from the C-family emitter, built through the ICD loader, run on
// any OpenCL device (PoCL gives one on every CPU). Each plan buffer lives in one device arena;
// the tensor table holds each tensor's element offset into the arenas.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "codegen/launch.h"
#include "runtime/reference.h"

namespace optjit::cache {
class KernelCache;
}

namespace optjit::runtime {

struct OpenclDeviceInfo {
  int index = 0;  // position in opencl_devices()
  std::string platform, platform_version, name, vendor, driver_version, version, uuid;
  bool gpu = false;
  uint32_t compute_units = 0;
  uint64_t global_memory = 0;
  size_t max_work_group = 0;
  bool fp64 = false;
};

/// Every device of every OpenCL platform; an error when the ICD loader finds no platform.
Expected<std::vector<OpenclDeviceInfo>> opencl_devices();

struct OpenclOptions {
  int device = -1;  // index into opencl_devices(); -1: the first GPU, else the first device
  /// Work-group size, items per work-item, vector width, grid cap and chunk size; unset: the
  /// device's default (GpuLaunch::device_default).
  std::optional<codegen::GpuLaunch> launch;
  bool copy_back = true;  // copy written buffers to the host after every step
  /// The parameters are copied to the device before every step, not just the first: the host's
  /// copy is the truth (the Optimizer API, whose caller may change its parameters between steps).
  bool host_params = false;
  bool resident_grads = false;  // gradients are uploaded once (benchmarks and tuning)
  /// The whole step on the device (codegen::CEmitOptions::device_step): the scalar program and
  /// the reduction combines run as kernels, the step count, hyperparameters and scalar states
  /// live in device memory, and a step is one queue of launches with one wait at its end.
  bool device_step = false;
};

class OpenclBackend {
 public:
  /// With a cache, the program binary of a previous process is loaded instead of built.
  static Expected<std::unique_ptr<OpenclBackend>> create(const plan::Plan& plan,
                                                         OpenclOptions options = {},
                                                         cache::KernelCache* cache = nullptr);
  bool from_cache() const { return from_cache_; }
  ~OpenclBackend();
  /// One step: uploads gradients (and, the first time, parameters and state), runs the passes,
  /// and copies what the step wrote back to `s`.
  Expected<StepResult> step(OptimizerState& s);
  /// After the first step the device holds the state (buffers, and with device_step the step
  /// count and scalar states). Call this after changing `s` on the host other than through
  /// step() (e.g. import_state from a checkpoint): the next step uploads all of it again.
  void state_changed();
  /// The device's copy bandwidth, the yardstick for a step's: the median seconds that
  /// clEnqueueCopyBuffer takes to copy `bytes` between two buffers (2 x bytes moved).
  Expected<double> copy_seconds(size_t bytes, int repetitions);
  const OpenclDeviceInfo& device() const { return info_; }
  double compile_seconds() const { return compile_seconds_; }

 private:
  struct Impl;
  explicit OpenclBackend(const plan::Plan& plan);
  const plan::Plan& plan_;
  OpenclDeviceInfo info_;
  double compile_seconds_ = 0;
  bool from_cache_ = false;
  std::unique_ptr<Impl> impl_;
};

}  // namespace optjit::runtime
