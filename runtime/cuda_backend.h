// The CUDA backend: the emitter's CUDA C, compiled by NVRTC for the device's sm_XX, loaded and
// launched through the driver API (dlopen'd). State lives in device memory; a step uploads the
// gradients and the uniforms (learning rate, bias corrections, as device values), launches one
// kernel per pass, and for the CLI path copies what it wrote back to the host. A pass with a
// reduction returns to the host for its partials; with CudaOptions::device_step the host's
// scalar program and the partials' combining run on the device too, so a step has no round
// trip and can be captured in a CUDA graph (CudaOptions::graph).
#pragma once

#include <memory>

#include "codegen/launch.h"
#include "runtime/cuda_driver.h"
#include "runtime/reference.h"

namespace optjit::cache {
class KernelCache;
}

namespace optjit::runtime {

struct CudaOptions {
  int device = 0;
  codegen::GpuLaunch launch;  // block size, items per thread, vector width, grid cap, chunks
  bool copy_back = true;      // copy written buffers to the host after every step
  /// The parameters are copied to the device before every step, not just the first: the host's
  /// copy is the truth (the Optimizer API, whose caller may change its parameters between steps).
  bool host_params = false;
  bool resident_grads = false;  // gradients are uploaded once (benchmarks: they live on the GPU)
  /// The whole step on the device (codegen::CEmitOptions::device_step): the scalar program and
  /// the reduction combines run as kernels; the step count, hyperparameters and scalar states
  /// live in device memory; a step is a fixed sequence of launches with one wait at its end.
  bool device_step = false;
  /// Captures that sequence once per tensor set in a CUDA graph and replays it each step
  /// (one cuGraphLaunch instead of a launch per kernel). Implies device_step.
  bool graph = false;
};

class CudaBackend {
 public:
  /// Fails with a clear message when there is no driver or no such device.
  static Expected<std::unique_ptr<CudaBackend>> create(const plan::Plan& plan,
                                                       CudaOptions options = {},
                                                       cache::KernelCache* cache = nullptr);
  ~CudaBackend();
  Expected<StepResult> step(OptimizerState& s);
  /// After the first step the device holds the state (buffers, and with device_step the step
  /// count and scalar states). Call this after changing `s` on the host other than through
  /// step() (e.g. import_state from a checkpoint): the next step uploads all of it again.
  void state_changed();
  /// The device's copy bandwidth, the yardstick for a step's: the median seconds that
  /// cuMemcpyDtoD takes to copy `bytes` between two device buffers (2 x bytes moved).
  Expected<double> copy_seconds(size_t bytes, int repetitions);
  const CudaDeviceInfo& device() const { return info_; }
  double compile_seconds() const { return compile_seconds_; }

 private:
  struct Impl;
  explicit CudaBackend(const plan::Plan& plan);
  const plan::Plan& plan_;
  CudaDeviceInfo info_;
  double compile_seconds_ = 0;
  std::unique_ptr<Impl> impl_;
};

}  // namespace optjit::runtime
