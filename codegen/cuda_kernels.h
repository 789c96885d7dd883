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
///
/// With $OPTJIT_CUDA_SOURCE set, the kernels are compiled from that file instead: a copy of
/// what `optjit emit --backend cuda` writes for the same pipeline and launch, edited by hand, so
/// that an idea for the emitter can be timed (`optjit bench --backend cuda`) and checked before
/// it is built. Its first line (the plan's passes, bytes per parameter and launch) must be the
/// emitted source's, and it must have every kernel the emitted source has (`optjit emit` with the
/// same --step). The cache keys the cubin by the source, so neither is mistaken for the
/// other.
Expected<CubinResult> plan_cubin(const plan::Plan& plan, const std::string& arch,
                                 const GpuLaunch& launch, cache::KernelCache* cache,
                                 bool device_step = false);

/// The file at `path` in place of `emitted` (for $OPTJIT_CUDA_SOURCE), or why not.
Expected<std::string> edited_source(const std::string& path, const std::string& emitted);

}  // namespace optjit::codegen
