// The API a training framework calls: an optimizer over parameter tensors that live in the
// framework's own memory, stepped with gradients that also stay where they are.
//
//   std::vector<optjit::Param> params = {{"w", w.data(), optjit::DType::f32, {256, 784}}, ...};
//   auto opt = optjit::Optimizer::create("chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-3))",
//                                        params);
//   for (...) { backward(); opt.value()->step({dw.data(), db.data()}); }
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "autotune/tuner.h"
#include "cache/kernel_cache.h"
#include "ir/dsl.h"
#include "ir/plan.h"
#include "runtime/cpu_backend.h"
#include "runtime/cuda_backend.h"
#include "runtime/opencl_backend.h"
#include "runtime/state.h"

namespace optjit {

/// A parameter tensor in the caller's memory (dense, row-major). The optimizer updates it in place.
struct Param {
  std::string name;
  void* data = nullptr;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  /// Parameter group: 0 is the default group, k is OptimizerOptions::groups[k-1]. -1: by the
  /// groups' name patterns (else the default group).
  int group = -1;
};

/// Where the steps run. `automatic` is the CLI's --backend auto: a CUDA GPU, then an OpenCL
/// GPU, then the CPU. The device backends keep the state in device memory and copy the
/// parameters (and state) back into host memory after every step.
enum class Backend { reference, cpu, opencl, cuda, automatic };
std::string_view to_string(Backend b);

struct OptimizerOptions {
  Backend backend = Backend::cpu;
  /// Threads, chunk size and unroll. Left at the defaults, the kernel cache's tuning decision
  /// for this pipeline on this CPU at this size is used when there is one (`optjit tune`).
  runtime::CpuOptions cpu;
  /// cuda/opencl: the launch shape. Unset: the kernel cache's tuning decision for this
  /// pipeline on this device at this size (`optjit tune --backend ...`), else the device's
  /// default.
  std::optional<codegen::GpuLaunch> gpu_launch;
  /// cuda/opencl: which device (an OpenCL index from `optjit devices`, a CUDA ordinal);
  /// -1: the first GPU, else the first device.
  int device = -1;
  /// cuda/opencl: the scalar program between passes runs on the device too, so a step has no
  /// host round trip until its end (CudaOptions::device_step). Unset: on (verified on every
  /// fixture on OpenCL and on CUDA).
  std::optional<bool> device_step;
  /// cuda: the device step captured once in a CUDA graph and replayed (implies device_step).
  bool cuda_graph = false;
  /// The kernel cache (compiled kernels and tuning decisions), so a warm or shipped cache means
  /// no compiling and no tuning. By default the user's cache ($OPTJIT_CACHE_DIR, else
  /// $XDG_CACHE_HOME/optjit, else ~/.cache/optjit) over the OPTJIT_CACHE_SHIPPED layers; unset:
  /// no cache. A cache that cannot be opened is a warning, unless it is strict.
  std::optional<cache::CacheOptions> cache = cache::CacheOptions{};
  std::optional<DType> grad_dtype;         // default: the parameters' dtype
  std::vector<runtime::GroupSpec> groups;  // parameter groups with their own hyperparameters
};

class Optimizer {
 public:
  static Expected<std::unique_ptr<Optimizer>> create(std::string_view pipeline_text,
                                                     std::vector<Param> params,
                                                     OptimizerOptions options = {});
  static Expected<std::unique_ptr<Optimizer>> create(const dsl::Pipeline& pipeline,
                                                     std::vector<Param> params,
                                                     OptimizerOptions options = {});

  /// One step. grads[i] is params[i]'s gradient, same shape, in the gradient dtype; it is only
  /// read. The result says whether a skip_if (e.g. grad_scaler on Inf/NaN) skipped the step.
  Expected<runtime::StepResult> step(const std::vector<const void*>& grads);

  /// Tunes the CPU launch (threads, chunk size, unroll) on these very tensors, with `grads` as
  /// the gradients. Parameters, state and the step count are as before afterwards; the winner
  /// is used from now on and stored in the kernel cache (a stored decision is used as it is).
  Expected<autotune::TuneResult> tune(const std::vector<const void*>& grads,
                                      autotune::TuneOptions options = {});

  /// Hyperparameters by full name ("adamw.lr") or unambiguous short name ("lr", "betas");
  /// without a group, every group. Takes effect at the next step; nothing recompiles.
  Status set_hyper(std::string_view name, double value, std::optional<uint32_t> group = {});
  Status set_hyper(std::string_view name, const std::vector<double>& values,
                   std::optional<uint32_t> group = {});
  Expected<double> hyper(std::string_view name, uint32_t group = 0) const;

  /// State (every state buffer, scalar state and the step count) to and from .safetensors.
  Status save(const std::string& path) const;
  Status load(const std::string& path);

  const plan::Plan& plan() const { return plan_; }
  /// The backend the steps run on (what `automatic` chose), and the device's name.
  Backend backend() const { return backend_; }
  std::string device_name() const;
  int64_t step_count() const { return state_.step; }
  size_t group_of(size_t param) const { return state_.tensors[param].group; }
  double compile_seconds() const;
  /// Whether the kernels came from the kernel cache (nothing was compiled; cpu and opencl).
  bool kernels_from_cache() const {
    return (cpu_ && cpu_->kernels_from_cache()) || (ocl_ && ocl_->from_cache());
  }
  /// The CPU launch parameters in use, and whether they (or the GPU launch) are a stored tuning
  /// decision.
  const runtime::CpuOptions& launch() const { return launch_; }
  const codegen::GpuLaunch& gpu_launch() const { return gpu_launch_; }
  bool launch_from_tuning() const { return tuned_; }
  /// What went wrong without stopping the optimizer (e.g. a cache that could not be opened).
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  Optimizer() = default;
  static Expected<std::unique_ptr<Optimizer>> build(Expected<plan::Plan> plan,
                                                    std::vector<Param> params,
                                                    OptimizerOptions options);
  Status bind_grads(const char* who, const std::vector<const void*>& grads);
  void unbind_grads();
  plan::Plan plan_;
  std::vector<Param> params_;
  runtime::OptimizerState state_;
  std::unique_ptr<cache::KernelCache> cache_;
  Status create_device_backend(const OptimizerOptions& options);
  Backend backend_ = Backend::cpu;
  std::unique_ptr<runtime::CpuBackend> cpu_;
  std::unique_ptr<runtime::OpenclBackend> ocl_;
  std::unique_ptr<runtime::CudaBackend> cuda_;
  runtime::CpuOptions launch_;
  codegen::GpuLaunch gpu_launch_;
  bool tuned_ = false;
  std::vector<std::string> warnings_;
  uint32_t param_buffer_ = 0, grad_buffer_ = 0;
};

}  // namespace optjit
