// The CUDA backend: the emitter's CUDA C, compiled by NVRTC for the device's sm_XX, loaded and
// launched through the driver API (dlopen'd). State lives in device memory; a step uploads the
// gradients and the uniforms (learning rate, bias corrections, as device values), launches one
// kernel per pass, and for the CLI path copies what it wrote back to the host. A pass with a
// reduction returns to the host for its partials, so a whole step is not yet capturable in a
// CUDA graph; that needs the host's scalar program on the device.
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
  codegen::GpuLaunch launch;    // block size, items per thread, vector width, grid cap, chunks
  bool copy_back = true;        // copy written buffers to the host after every step
  bool resident_grads = false;  // gradients are uploaded once (benchmarks: they live on the GPU)
};

class CudaBackend {
 public:
  /// Fails with a clear message when there is no driver or no such device.
  static Expected<std::unique_ptr<CudaBackend>> create(const plan::Plan& plan,
                                                       CudaOptions options = {},
                                                       cache::KernelCache* cache = nullptr);
  ~CudaBackend();
  Expected<StepResult> step(OptimizerState& s);
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
