// The API a training framework calls, and the one front door to everything below the plan: it
// picks the device, resolves the launch (the kernel cache's tuning decision or the device's
// default), gets kernels through the cache and steps. Parameters, gradients and optimizer state
// can each live in the caller's memory (host memory, or memory on the optimizer's device: a CUDA
// address, an OpenCL buffer) or in the optimizer's own.
//
//   std::vector<optjit::Param> params = {{"w", w.data(), optjit::DType::f32, {256, 784}}, ...};
//   auto opt = optjit::Optimizer::create("chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-3))",
//                                        params);
//   for (...) { backward(); opt.value()->step({dw.data(), db.data()}); }
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "api/communicator.h"
#include "autotune/tuner.h"
#include "cache/kernel_cache.h"
#include "codegen/launch.h"
#include "ir/dsl.h"
#include "ir/plan.h"
#include "runtime/device_memory.h"
#include "runtime/state.h"

namespace optjit {

namespace runtime {
class Device;
}

/// Memory on the optimizer's device, as the caller owns it: on CUDA a device address (the
/// caller's stream is OptimizerOptions::queue), on OpenCL a cl_mem and a byte offset, on WebGPU
/// a WGPUBuffer (usage Storage | CopySrc | CopyDst) and a byte offset (a multiple of 4).
using DeviceMemory = runtime::DeviceMemory;
inline DeviceMemory cuda_memory(uint64_t address) { return {address, 0}; }
inline DeviceMemory opencl_memory(void* cl_mem, uint64_t byte_offset = 0) {
  return {reinterpret_cast<uint64_t>(cl_mem), byte_offset};
}
inline DeviceMemory webgpu_memory(void* wgpu_buffer, uint64_t byte_offset = 0) {
  return {reinterpret_cast<uint64_t>(wgpu_buffer), byte_offset};
}

/// A parameter tensor in the caller's memory (dense, row-major), updated in place: host memory
/// (`data`) or memory on the optimizer's device (`device`).
struct Param {
  std::string name;
  void* data = nullptr;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  /// Parameter group: 0 is the default group, k is OptimizerOptions::groups[k-1]. -1: by the
  /// groups' name patterns (else the default group).
  int group = -1;
  /// Instead of `data`: the parameter in the device's memory, used in place (no copies).
  DeviceMemory device;
  /// Whether its block-quantized states (state_format "8bit", "4bit", "fp8", ...) are stored
  /// quantized. Unset: where the format quantizes a tensor of its size (bitsandbytes' rule, at
  /// least 4096 elements; torchao's, also whole blocks). false: in f32 (bitsandbytes'
  /// per-parameter optim_bits=32). true: quantized below the format's minimum too
  /// (bitsandbytes' min_8bit_size); a format that quantizes whole blocks only refuses a tensor
  /// that is not made of them.
  std::optional<bool> quantize;
};

/// Where the steps run: a kind of device by name ("cpu", "opencl", "cuda", or any other kind a
/// device registers: runtime/device.h), "reference" (the float64 interpreter), or "auto" (the
/// CLI's --backend auto: a CUDA GPU, then an OpenCL GPU, then the CPU). On a GPU, host
/// parameters are copied to the device before each step and back after it; the state stays on
/// the device (save() fetches it).
class Backend {
 public:
  explicit Backend(std::string name) : name_(std::move(name)) {}
  static const Backend reference, cpu, opencl, cuda, webgpu, automatic;
  const std::string& name() const { return name_; }
  bool operator==(const Backend&) const = default;

 private:
  std::string name_;
};
inline const Backend Backend::reference{"reference"}, Backend::cpu{"cpu"},
    Backend::opencl{"opencl"}, Backend::cuda{"cuda"}, Backend::webgpu{"webgpu"},
    Backend::automatic{"auto"};
inline std::string_view to_string(const Backend& b) { return b.name(); }

struct OptimizerOptions {
  Backend backend = Backend::cpu;
  /// Threads, chunk size and unroll. Left at the defaults, the kernel cache's tuning decision
  /// for this pipeline on this CPU at this size is used when there is one (`optjit tune`).
  codegen::CpuLaunch cpu;
  /// cuda/opencl: the launch shape. Unset: the kernel cache's tuning decision for this
  /// pipeline on this device at this size (`optjit tune --backend ...`), else the default for
  /// this pipeline on this device (autotune::default_launch).
  std::optional<codegen::GpuLaunch> gpu_launch;
  /// cuda/opencl: with gpu_launch unset, the chunk size to use in the launch so chosen (0: its
  /// own), so that a caller can set the chunk alone (`optjit run --chunk`).
  int64_t gpu_chunk_elements = 0;
  /// cuda/opencl/webgpu: which device (an OpenCL or WebGPU index from `optjit devices`, a CUDA
  /// ordinal; the CPU is 0); -1: the first GPU, else the first device; below -1, an error. With a
  /// caller's WGPUDevice (`queue`): the adapter it is on, for the fingerprints (wgpu-native cannot
  /// tell); -1: unnamed.
  int device = -1;
  /// cuda: the caller's CUstream; opencl: the caller's cl_command_queue; webgpu: the caller's
  /// WGPUDevice, from the wgpu-native library optjit loads (the application's, wgpu-py's).
  /// Steps are queued there (a framework's current stream; the WebGPU device's queue), and
  /// memory the caller made there is used in place. Null: the optimizer's own (so CUDA's
  /// legacy default stream, torch's default, is named CU_STREAM_LEGACY, 0x1; its steps' CUDA
  /// graphs are captured on a stream of the device's own and replayed there). A device step
  /// (cuda/opencl) over memory that is all on the device, of a pipeline that cannot skip a step
  /// (no grad_scaler), then returns once it is queued, as any operation on that queue does:
  /// no host round trip. Scalar states it commits (NAdam's mu_product) are read back from the
  /// device when asked for (scalar_state(), a checkpoint), which waits for the queue.
  void* queue = nullptr;
  /// With the caller's queue: a pipeline that can skip a step (grad_scaler) is queued without
  /// waiting too, as torch's fused optimizers under a GradScaler are. step() then returns
  /// StepResult::queued; whether it skipped, and the step count, are read back when asked for
  /// (last_step_skipped(), step_count()). The skip flag also stays on the device (skip_flag()).
  bool defer_skips = false;
  /// cuda/opencl: the scalar program between passes runs on the device too, so a step has no
  /// host round trip until its end. Unset: on where the device has it.
  std::optional<bool> device_step;
  /// cuda: the device step captured once in a CUDA graph and replayed (implies device_step).
  bool cuda_graph = false;
  /// The kernel cache (compiled kernels and tuning decisions), so a warm or shipped cache means
  /// no compiling and no tuning. By default the user's cache ($OPTJIT_CACHE_DIR, else
  /// $XDG_CACHE_HOME/optjit, else ~/.cache/optjit) over the OPTJIT_CACHE_SHIPPED layers; unset:
  /// no cache. A cache that cannot be opened is a warning, unless it is strict.
  std::optional<cache::CacheOptions> cache = cache::CacheOptions{};
  /// The gradients' dtype: default, each parameter's own. Parameters of several dtypes (fp32
  /// norms beside bf16 weights) are one optimizer: one program per dtype, one step.
  std::optional<DType> grad_dtype;
  std::vector<runtime::GroupSpec> groups;  // parameter groups with their own hyperparameters
  /// Benchmarks and tuning: gradients given as host memory are uploaded once, not every step.
  bool resident_grads = false;
  /// bf16 parameters: stored with stochastic rounding (unbiased, so updates smaller than half
  /// a bf16 step accumulate instead of vanishing), keyed by (state_seed, step, element) with
  /// the element counted over all parameters, and so the same on every backend, sharded or
  /// not, and after a resume. Other dtypes: no effect.
  bool stochastic_param_rounding = false;
  /// A sharded step (api/communicator.h): these parameters are this process's pieces of the
  /// model's tensors, and every reduction of the step (clip norms, found-inf flags, per-tensor
  /// norms) is completed over every process with one all-reduce per pass. The scalar program
  /// between passes then runs on the host.
  std::optional<ShardOptions> shard;
};

class Optimizer {
 public:
  static Expected<std::unique_ptr<Optimizer>> create(std::string_view pipeline_text,
                                                     std::vector<Param> params,
                                                     OptimizerOptions options = {});
  static Expected<std::unique_ptr<Optimizer>> create(const dsl::Pipeline& pipeline,
                                                     std::vector<Param> params,
                                                     OptimizerOptions options = {});
  /// A plan built elsewhere (research tools, benchmarks); its parameters must all be of the
  /// plan's parameter dtype.
  static Expected<std::unique_ptr<Optimizer>> create(plan::Plan plan, std::vector<Param> params,
                                                     OptimizerOptions options = {});
  ~Optimizer();

  /// One step. grads[i] is params[i]'s gradient, same shape, in the gradient dtype; it is only
  /// read. Host memory, or (step_device) memory on the optimizer's device, used in place; it
  /// may be different memory every step. The result says whether a skip_if (e.g. grad_scaler
  /// on Inf/NaN) skipped the step.
  Expected<runtime::StepResult> step(const std::vector<const void*>& grads);
  Expected<runtime::StepResult> step_device(const std::vector<DeviceMemory>& grads);

  /// Points parameter `param` at other memory from the next step on (a framework that
  /// reallocated it): host memory, or memory on the optimizer's device. Its values are read
  /// from there; the old memory is not touched again.
  Status rebind_param(size_t param, void* host);
  Status rebind_param(size_t param, DeviceMemory device);
  /// Several parameters at once (a framework that reloaded or swapped them), all or nothing:
  /// checked as they will be, so parameters may trade memory (one at a time, the first would
  /// overlap the second's old memory), and in O(n log n) for n parameters.
  struct Rebinding {
    size_t param = 0;
    void* host = nullptr;  // host memory, or
    DeviceMemory device;   // memory on the optimizer's device
  };
  Status rebind_params(std::span<const Rebinding> changes);

  /// Makes state buffer `buffer` ("exp_avg", as optjit list names it) of parameter `param` the
  /// caller's memory: host memory, or memory on the optimizer's device. Its current value is
  /// copied there first (a state not made yet is written there at its initial value), unless
  /// `adopt`: then the caller's memory already holds the state (a framework's restored
  /// checkpoint). From then on the optimizer reads and writes it in place. The optimizer makes
  /// its own memory only for the state nobody binds, at the first step (or checkpoint, or
  /// tuning) that needs it, so binding every state right after create() allocates none.
  Status bind_state(size_t param, std::string_view buffer, void* host, bool adopt = false);
  Status bind_state(size_t param, std::string_view buffer, DeviceMemory device, bool adopt = false);

  /// Tunes the launch on these very tensors, with `grads` as the gradients, on the device the
  /// optimizer runs on. Parameters, state and the step count are as before afterwards; the
  /// winner is used from now on and stored in the kernel cache (a stored decision is used as
  /// it is).
  Expected<autotune::TuneResult> tune(const std::vector<const void*>& grads,
                                      autotune::TuneOptions options = {});
  /// The same with gradients in device memory (parameters and state may be the caller's
  /// device memory too: each is saved in a device copy and restored).
  Expected<autotune::TuneResult> tune(const std::vector<DeviceMemory>& grads,
                                      autotune::TuneOptions options = {});

  /// Hyperparameters by full name ("adamw.lr") or unambiguous short name ("lr", "betas");
  /// without a group, every group. Takes effect at the next step; nothing recompiles.
  Status set_hyper(std::string_view name, double value, std::optional<uint32_t> group = {});
  Status set_hyper(std::string_view name, const std::vector<double>& values,
                   std::optional<uint32_t> group = {});
  Expected<double> hyper(std::string_view name, uint32_t group = 0) const;
  /// Hyperparameter `name` (one element, every group) read at each step from device memory
  /// that holds one f64 (a framework's device tensor, kept current on the caller's queue: a
  /// GradScaler's scale), copied on the queue before the step: no host round trip on the device
  /// step (the host step reads it). A null `value` goes back to the host's value.
  Status set_hyper_source(std::string_view name, DeviceMemory value);
  /// Whether the last step was skipped (a skip_if fired); waits for a queued one.
  Expected<bool> last_step_skipped();
  /// Device memory holding one f64, 1 when the last device step was skipped, else 0: written
  /// on the queue by every device step (for a framework that counts steps on the device).
  Expected<DeviceMemory> skip_flag() const;
  /// Device memory holding scalar state `name` of `group` (one f64) as the last device step
  /// committed it, written on the queue by every device step: a framework copies it into its
  /// own device tensors on the queue (NAdam's mu_product) instead of waiting for
  /// scalar_state(). A set_scalar_state() reaches it with the next step.
  Expected<DeviceMemory> scalar_state_memory(std::string_view name, uint32_t group = 0) const;

  /// The names of the state buffers (per element, "exp_avg") and of the scalar states (per
  /// parameter group, NAdam's "mu_product"), as torch's state_dict names them.
  std::vector<std::string> state_buffers() const;
  std::vector<std::string> scalar_states() const;
  /// How parameter `param`'s state buffer `name` is stored (its transform's state_format,
  /// else the parameter's dtype): memory bound with bind_state must have this dtype.
  Expected<DType> state_storage(size_t param, std::string_view name) const;
  /// Elements of that buffer: the parameter's, or for a quantized state's scales
  /// ("exp_avg.absmax") one per block of 256 (none for a tensor too small to quantize).
  /// A quantized state of a large enough tensor is stored as u8 codes (state_storage).
  Expected<int64_t> state_elements(size_t param, std::string_view name) const;
  /// A scalar state of a group, and setting it (every group without one); and the step count.
  /// A framework keeps these per parameter and restores them from its own checkpoints.
  Expected<double> scalar_state(std::string_view name, uint32_t group = 0) const;
  Status set_scalar_state(std::string_view name, double value, std::optional<uint32_t> group = {});
  Status set_step_count(int64_t step);
  /// Every state buffer (in the optimizer's memory or memory bound with bind_state) and every
  /// scalar state at its initial value under the current hyperparameters (Rprop's step sizes
  /// and ASGD's eta from each group's lr), and the step count 0: the state a framework's
  /// optimizer makes at its first step, after hyperparameters a scheduler or a param group set.
  Status initialize_state();
  /// Parameter groups: 1 + OptimizerOptions::groups.size().
  size_t groups() const;
  /// Every hyperparameter's full name ("adamw.lr", "adamw.betas.0"), as set_hyper takes it.
  std::vector<std::string> hyperparameters() const;
  /// Whether a step reduces over all tensors together (a clipping norm, a found-inf flag).
  bool reduces_over_all_tensors() const;

  /// State (every state buffer, scalar state and the step count) to and from .safetensors, and
  /// as a TensorFile (parameters under their names, state as `name.<buffer>`, `step`).
  Status save(const std::string& path) const;
  Status load(const std::string& path);
  Expected<runtime::TensorFile> export_state() const;
  /// On a device backend over host memory: the state lives on the device between steps; this
  /// copies it into the memory bound with bind_state (a framework's state tensors), so a
  /// checkpoint taken there is current. A no-op on the CPU and for state used in place.
  Status sync_state();
  Status import_state(const runtime::TensorFile& file);

  /// The plan (of the first dtype's program when parameters have several dtypes).
  const plan::Plan& plan() const;
  /// How many programs the parameters' dtypes need (1 unless they mix dtypes).
  size_t programs() const;
  /// The backend the steps run on (what `automatic` chose), and the device's name.
  Backend backend() const;
  std::string device_name() const;
  /// The device, for callers that allocate device memory to bind (tests, benchmarks); null on
  /// the reference backend.
  std::shared_ptr<runtime::Device> device() const;
  /// The step count (after queued steps that could be skipped, read back: it waits for them).
  int64_t step_count() const;
  size_t group_of(size_t param) const;
  double compile_seconds() const;
  /// Elements each version of each pass of program `program`'s plan has stepped on the host
  /// step so far ([pass][version], plan::Pass::versions; one column for a pass without
  /// versions); empty before the first host step or where the device step chose the versions.
  std::vector<std::vector<double>> version_elements(size_t program = 0) const;
  /// Whether the kernels came from the kernel cache (nothing was compiled).
  bool kernels_from_cache() const;
  /// The launch in use, and whether it is a stored tuning decision. On a GPU, a part whose
  /// memory is not aligned for a tuned or default vec runs its kernels with vec=1 instead
  /// (warnings() says which); gpu_launch() stays the launch chosen.
  const codegen::CpuLaunch& launch() const;
  const codegen::GpuLaunch& gpu_launch() const;
  bool launch_from_tuning() const;
  /// Where the scalar program between passes runs: "host", "device" or "graph".
  std::string_view step_mode() const;
  /// What went wrong without stopping the optimizer (a cache that could not be opened, a
  /// kernel it rejected or could not store, memory not aligned for a tuned or default vector
  /// width, so the step runs with vec=1), so far.
  const std::vector<std::string>& warnings() const;

 private:
  struct Impl;
  Optimizer();
  Status build(std::vector<Param> params, OptimizerOptions options);
  static Expected<std::unique_ptr<Optimizer>> create_parts(std::vector<plan::Plan> plans,
                                                           std::vector<std::vector<size_t>> members,
                                                           std::vector<Param> params,
                                                           OptimizerOptions options);
  std::unique_ptr<Impl> impl_;
};

}  // namespace optjit
