// Autotuning the GPU-style backends (CUDA, OpenCL): block (work-group) size, items per thread,
// vector width, grid cap and chunk size, searched in stages; CUDA candidates are pruned by
// occupancy and spills read from their cubins, which needs no GPU.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autotune/tuner.h"
#include "codegen/launch.h"
#include "ir/plan.h"
#include "runtime/state.h"

namespace optjit::runtime {
class Device;
struct DeviceDescription;
}  // namespace optjit::runtime

namespace optjit::autotune {

/// Per-SM limits of an NVIDIA architecture, as in NVIDIA's occupancy calculator.
struct SmLimits {
  int max_threads = 2048, max_blocks = 32, registers = 65536, shared_bytes = 228 * 1024;
  int reserved_shared_per_block = 1024;  // the runtime's own shared memory per block (sm_80+)
};
SmLimits sm_limits(const std::string& arch);

struct Occupancy {
  int blocks_per_sm = 0;
  double fraction = 0;  // resident warps / the SM's maximum
  std::string limiter;  // "threads", "blocks", "registers" or "shared memory"
};
/// Blocks of `block` threads that fit on one SM when each thread needs `registers` registers
/// (allocated per warp in units of 256) and each block `shared_bytes` of static shared memory.
Occupancy occupancy(const std::string& arch, int block, int registers, int shared_bytes);

/// Why a CUDA configuration is not worth running on `arch`: a pass spills registers, or a pass
/// keeps less than a quarter of the SM's warps resident. Compiles (or loads from the cache) the
/// configuration's cubin; a compile error is a reason too.
std::optional<std::string> cuda_prune(const plan::Plan& plan, const std::string& arch,
                                      const codegen::GpuLaunch& launch, cache::KernelCache* cache);

/// The stages: (1) items per thread x vector width at the default block size, (2) block sizes,
/// (3) grid caps, (4) chunk sizes; each stage starts from the best configuration so far.
/// `max_block` bounds the block sizes (the device's limit); CPU devices try small blocks.
std::vector<Stage> gpu_stages(int max_block, bool gpu = true);

/// Tuning targets: this plan on OpenCL device `device` / CUDA device `device`.
/// `elements`: parameter elements in all tensors (OptimizerState::elements()).
Expected<TuneTarget> opencl_target(const plan::Plan& plan, int64_t elements, int device);
Expected<TuneTarget> cuda_target(const plan::Plan& plan, int64_t elements, int device);

/// Tunes on `state` (restored after every candidate). Candidates are timed with gradients
/// resident on the device and nothing copied back, so what is compared is the kernels.
Expected<TuneResult> tune_opencl(const plan::Plan& plan, runtime::OptimizerState& state, int device,
                                 cache::KernelCache* cache, TuneOptions options = {});
Expected<TuneResult> tune_cuda(const plan::Plan& plan, runtime::OptimizerState& state, int device,
                               cache::KernelCache* cache, TuneOptions options = {});

/// The same on an open device, with `restore_external` putting back memory the state only
/// points to (a caller's host parameters).
Expected<TuneResult> tune_gpu(const plan::Plan& plan, runtime::OptimizerState& state,
                              std::shared_ptr<runtime::Device> device, cache::KernelCache* cache,
                              TuneOptions options = {},
                              const std::function<void()>& restore_external = {});
/// The launch parameters to use: the cache's decision for `target`, else `fallback`.
codegen::GpuLaunch gpu_launch_for(const Expected<TuneTarget>& target, cache::KernelCache* cache,
                                  std::string* from = nullptr,
                                  const codegen::GpuLaunch& fallback = {});
/// Whether interleave=1's branch-free division and square root have been checked on a GPU of
/// architecture `arch` ("sm_90"): Cuda.BranchFreeDivisionAndSquareRootRoundAsTheOperators, which
/// rests on MUFU's approximations being what ptxas's own fast paths assume. Neither the tuner
/// nor a default chooses interleave=1 elsewhere (a launch given by name still runs it).
bool interleave_checked(const std::string& arch);

/// The launch before any tuning for `plan` on a device described by `d`: its default, but on
/// CUDA with quantized state vectors of 4, interleaved where checked, with two trips staged in
/// shared memory from sm_80 (before it, the L2 prefetch two trips ahead). On an H200
/// (bench/results/h200-2026-11-27) that is 1.45x the plain default for 8-bit state, 1.22x for
/// fp8 and 2.17x for 4-bit.
codegen::GpuLaunch default_launch(const plan::Plan& plan, const runtime::DeviceDescription& d);

/// GpuLaunch::device_default for OpenCL device `device` (-1: the first GPU, else the first).
codegen::GpuLaunch opencl_default_launch(int device);

}  // namespace optjit::autotune
