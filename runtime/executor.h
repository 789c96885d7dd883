// The step algorithm, once, for every device (runtime/device.h): the chunk and tensor tables,
// where each buffer lives (the caller's memory used in place, or the executor's own arena on
// the device with copies to and from the host), the passes, the combining of reduction
// partials, and the scalar program between passes, either on the host (StepMode::host) or as
// kernels on the device (StepMode::device), optionally captured once and replayed
// (StepMode::graph). Internal: the public API is optjit::Optimizer.
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include "codegen/launch.h"
#include "runtime/device.h"
#include "runtime/reference.h"

namespace optjit::runtime {

/// Where the scalar program between passes runs: on the host, which reads each reduction's
/// partials back; on the device as kernels, so a step has no round trip until its end; or as
/// that sequence recorded once per tensor set and replayed.
enum class StepMode { host, device, graph };
std::string_view to_string(StepMode m);

struct ExecutorOptions {
  /// Block, items, vector width and grid cap (GPU devices), and the chunk size (every device).
  codegen::GpuLaunch launch;
  int cpu_threads = 0;  // the CPU's threads (0: all)
  int cpu_unroll = 0;   // the CPU's vector interleave (0: LLVM's choice)
  StepMode step = StepMode::host;
  /// After a step on a device whose memory is not the host's, which buffers that live in host
  /// memory get what the step wrote: all of them (parameters and state), only the parameters
  /// (the state stays on the device until sync_to_host), or none (benchmarks).
  enum class CopyBack { written, params, none } copy_back = CopyBack::written;
  /// Host parameters are uploaded before every step, not just the first: the host's copy is the
  /// truth (a caller may change it between steps).
  bool host_params = false;
  /// Host gradients are uploaded once, not every step (benchmarks and tuning).
  bool resident_grads = false;
  /// The device step returns once it is queued, without waiting for the device, where that
  /// loses nothing: every buffer is in device memory and no skip_if can skip the step (so the
  /// host knows the step count). Scalar states the step commits (NAdam's mu_product) stay on
  /// the device until settle() reads them back. For the caller's own queue, which orders what
  /// the caller queues next after the step.
  bool queued_steps = false;
  /// With queued_steps, a pipeline that can skip a step (grad_scaler) is queued too: the step
  /// returns with StepResult::queued, and its step count and whether it was skipped are read
  /// back by settle().
  bool defer_skips = false;
  /// The launch's vector width is the tuner's or the device's default, not the caller's
  /// choice: where a binding is not aligned for it (a view at an odd offset of a framework's
  /// flat buffer), the executor loads the same kernels with vec=1 and goes on, rather than
  /// refusing the step (which it does for a vector width the caller chose).
  bool vec_fallback = false;

  /// The CPU's launch as executor options (the chunk size goes into `launch`).
  static ExecutorOptions of(const codegen::CpuLaunch& c) {
    ExecutorOptions o;
    o.launch.chunk_elements = c.chunk_elements;
    o.cpu_threads = c.threads;
    o.cpu_unroll = c.unroll;
    return o;
  }
};

/// A sharded device step (api/communicator.h): each pass's reductions are completed over every
/// process on the device, between combining and folding: optjit_shard_out_k writes this
/// process's per-tensor values into their pieces' slots of one buffer, `allreduce` sums it over
/// the processes on the device's queue, optjit_shard_in_k folds each tensor's pieces; folds then
/// run over every global tensor, as the host's sharded step does (the same bits). By process,
/// the fold runs first, over this process's tensors.
struct DeviceShard {
  std::vector<int64_t> owner;      // per slot (piece): the local tensor that is it, or -1
  std::vector<int64_t> first;      // per global tensor: its first slot; then the slot count
  std::vector<int64_t> tensor_of;  // per local tensor: its global tensor
  /// ShardOrder::by_process: the process count (else 0) and this process's rank. Then owner and
  /// first cover only the pieces of split tensors, and all-tensor reductions have one slot per
  /// process: each process folds its own tensors first (fold_k over its tensors), and
  /// shard_in_k folds the processes in rank order.
  int64_t processes = 0, rank = 0;
  std::function<Status(Device&, DeviceMemory data, size_t count)> allreduce;
};

class Executor {
 public:
  /// Compiles (or loads from the cache) the plan's kernels for `device`. `plan` must outlive
  /// the executor.
  static Expected<std::unique_ptr<Executor>> create(const plan::Plan& plan,
                                                    std::shared_ptr<Device> device,
                                                    ExecutorOptions options,
                                                    cache::KernelCache* cache = nullptr);
  ~Executor();

  /// One optimizer step on `s`. Each buffer of each tensor is used where it is: the caller's
  /// device memory (TensorState::device) or, on the CPU, host memory, in place; anything else
  /// in the executor's own arena on the device, uploaded the first time (then the gradients
  /// every step, and the parameters with host_params) and copied back as copy_back says.
  Expected<StepResult> step(OptimizerState& s);
  /// A host step in pieces, for a step over several executors whose reductions combine
  /// (parameters of several dtypes): prepare(), then for each pass the host's segment and
  /// run_pass(), which returns the per-tensor partials of the pass's reductions, then finish().
  /// step() is these with one executor.
  Status prepare(OptimizerState& s);
  Expected<std::vector<std::vector<double>>> run_pass(size_t k, HostProgram& host,
                                                      OptimizerState& s);
  Status finish(OptimizerState& s);

  /// After `s` changed on the host other than through step() (a restored checkpoint): the next
  /// step uploads everything again.
  void state_changed();
  /// Steps from now on are sharded (the device step only; the host step's reductions are
  /// completed by its caller between run_pass and finish).
  void set_shard(std::shared_ptr<const DeviceShard> shard);
  /// Copies the state the device holds for host-bound buffers back to `s` (before a checkpoint
  /// when copy_back leaves the state on the device); settles first.
  Status sync_to_host(OptimizerState& s);
  /// After queued steps (ExecutorOptions::queued_steps): reads the step count and scalar states
  /// back from the device into `s` (waiting for the queue), before the host reads or changes
  /// them. Nothing to do otherwise.
  Status settle(OptimizerState& s);
  /// Whether the host's step count waits for settle() (queued steps that could be skipped).
  bool count_stale() const;
  /// Whether the last device step was skipped, as last read back (settle() first).
  bool last_skipped() const;
  /// Each step, before it runs, copies one f64 from `source` (device memory the caller keeps
  /// current on its queue, e.g. a GradScaler's scale) into hyperparameter slot `h` of every
  /// group: the device step reads it from there, with no host round trip. Empty: none.
  void set_hyper_sources(std::vector<std::pair<uint32_t, DeviceMemory>> sources);
  const std::vector<std::pair<uint32_t, DeviceMemory>>& hyper_sources() const;
  /// The device step's "last step skipped" flag (one f64 in device memory); null before the
  /// first device step or on the host step.
  DeviceMemory skip_flag() const;
  /// Scalar state k of group `group` as the last device step committed it (one f64 in the
  /// control block, written on the queue); null before the first device step or on the host
  /// step.
  DeviceMemory scalar_state_memory(uint32_t group, uint32_t k) const;

  /// StepResult::moved_bytes of the step in progress or last finished (prepare() resets it):
  /// the passes run on the host step so far.
  double moved_bytes() const;
  /// Elements each version of each pass has stepped on the host step since the executor was
  /// made ([pass][version]; a pass without versions has one): which versions a benchmark's
  /// steps ran.
  const std::vector<std::vector<double>>& version_elements() const;
  /// StepResult::copied_bytes of the step in progress or last finished (prepare() resets it).
  uint64_t copied_bytes() const;
  Device& device() const { return *device_; }
  const std::shared_ptr<Device>& shared_device() const { return device_; }
  /// The options it was made with, but for a vector width vec_fallback has set to 1.
  const ExecutorOptions& options() const;
  /// Empty, or (vec_fallback) which binding made the kernels run with vec=1.
  const std::string& vector_fallback() const;
  double compile_seconds() const;
  bool kernels_from_cache() const;

 private:
  struct Impl;
  Executor() = default;
  std::shared_ptr<Device> device_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace optjit::runtime
