// A plan's CUDA kernels for one sm_XX: from the kernel cache, else emitted and compiled by
// NVRTC and stored. Used by `optjit compile` (ahead of time, no GPU) and the CUDA backend.
#pragma once

#include <string>

#include "codegen/launch.h"
#include "codegen/nvrtc.h"
#include "ir/plan.h"

namespace optjit::cache {
class KernelCache;
}

namespace optjit::codegen {

struct CubinResult {
  Cubin cubin;
  bool from_cache = false;
  std::string not_stored;  // compiled, but the cache could not store it: why
};

/// `device_step`: the device-step kernels too (CEmitOptions::device_step).
Expected<CubinResult> plan_cubin(const plan::Plan& plan, const std::string& arch,
                                 const GpuLaunch& launch, cache::KernelCache* cache,
                                 bool device_step = false);

}  // namespace optjit::codegen
