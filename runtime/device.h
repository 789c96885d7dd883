// A device the executor runs a plan on: memory, the plan's compiled kernels, launches. The CPU,
// OpenCL and CUDA are devices; the step algorithm (tables, passes, combining, the device step,
// graphs) is written once, in runtime/executor.h, over this interface. A new backend implements
// a Device and a Module and nothing else below the plan. Internal.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>

#include "codegen/launch.h"
#include "ir/error.h"
#include "ir/plan.h"
#include "runtime/device_memory.h"
#include "runtime/devices.h"

namespace optjit::cache {
class KernelCache;
}

namespace optjit::runtime {

/// How kernels find a tensor's buffers: through addresses in the tensor table (the CPU, CUDA),
/// or as element offsets into one memory object per buffer, passed as kernel arguments (OpenCL,
/// which has no pointers in buffers; WGSL is the same).
enum class Addressing { pointers, arenas };

/// A kernel of a plan's module.
struct KernelId {
  enum Kind : uint8_t { pass, segment, combine, shard_out, shard_in, fold, commit } kind = pass;
  uint32_t k = 0;            // the pass (or segment) index
  std::string name() const;  // "optjit_pass_0", ..., "optjit_commit"
};

/// Every kernel of a plan's module: a pass kernel per pass, and with the device step its
/// segments, combines, folds and commit.
std::vector<KernelId> module_kernels(const plan::Plan& plan, bool device_step);

/// A kernel argument: device memory (an address, or an arena for arena devices) or an integer.
struct KernelArg {
  DeviceMemory memory;
  int64_t integer = 0;
  bool is_memory = false;
  /// A memory argument's extent from its offset: 0 for the rest of the memory object. Only
  /// devices with a binding limit (DeviceDescription::max_binding) are given one.
  uint64_t bytes = 0;
  static KernelArg mem(DeviceMemory m, uint64_t bytes = 0) { return {m, 0, true, bytes}; }
  static KernelArg i64(int64_t v) { return {{}, v, false, 0}; }
};

/// What a module is compiled for: the launch shape and whether the device-step kernels are in.
struct ModuleSpec {
  codegen::GpuLaunch launch;
  bool device_step = false;
  int cpu_threads = 0;  // the CPU's threads for a pass (0: all)
  int cpu_unroll = 0;   // the CPU's vector interleave (0: LLVM's choice)
};

/// A plan's kernels, compiled (or loaded from the kernel cache) for one device.
class Module {
 public:
  virtual ~Module() = default;
  /// Launches `kernel` as `groups` work-groups of `group_size` (for a pass: over the chunk
  /// table; the CPU spreads the chunks over its threads instead) with `args`, in order, on the
  /// device's queue. Pass arguments (the emitter's ABI, codegen/c_emitter.h):
  ///   [arenas (arena devices only)], uniforms (arena devices only), rows, chunks, nchunks,
  ///   partials, [ctl]
  virtual Status launch(KernelId kernel, size_t groups, size_t group_size,
                        std::span<const KernelArg> args) = 0;
  virtual double compile_seconds() const = 0;
  virtual bool from_cache() const = 0;
};

/// A recorded sequence of launches that replays with one call (CUDA graphs).
class Graph {
 public:
  virtual ~Graph() = default;
  virtual Status replay() = 0;
};

struct DeviceDescription {
  std::string kind;  // "cpu", "opencl", "cuda"
  int index = 0;     // the backend's own device index
  std::string name;
  std::string arch;         // cuda: "sm_90"
  std::string performance;  // the fingerprint tuning decisions are keyed by (runtime/devices.h)
  bool gpu = false;
  int compute_units = 0;  // SMs, compute units, threads
  size_t max_group = 0;   // the largest work-group
  Addressing addressing = Addressing::pointers;
  bool host_memory = false;  // its memory is the host's (the CPU): host pointers are device memory
  bool device_step = false;  // runs the device step's kernels
  bool graphs = false;       // captures launches as graphs
  /// Vector loads need a tensor's address aligned to the whole vector (CUDA's aligned structs),
  /// not just to one element (the CPU, OpenCL's vloadn).
  bool vector_aligned = false;
  /// The launch before any tuning (the tuner's starting point).
  codegen::GpuLaunch default_launch;
  /// Arena devices whose kernels see at most this many bytes of a memory argument (WebGPU's
  /// maxStorageBufferBindingSize: 128 MiB on lavapipe and in browsers by default), 0 for no
  /// limit. The executor then launches a pass over windows of its chunks, each argument bound
  /// from an offset that is a multiple of `binding_alignment` bytes.
  uint64_t max_binding = 0;
  uint64_t binding_alignment = 256;
  /// The largest single allocation (WebGPU's maxBufferSize), 0 for no limit of the device's own.
  uint64_t max_allocation = 0;
  /// How the kernels divide and take square roots of f32, all correctly rounded: "hardware"
  /// (the device's own: the C backends are compiled so that they round correctly), or, on a
  /// WebGPU adapter whose own do not (NVIDIA's Vulkan driver), "fma" or "dekker", the residual
  /// the WGSL kernels correct them from (codegen::F32Division; probed when the device opens).
  std::string division = "hardware";
};

class Device {
 public:
  virtual ~Device() = default;
  virtual const DeviceDescription& description() const = 0;

  /// Device memory the caller releases with release(). Failure (out of device memory) says
  /// what it was for.
  virtual Expected<DeviceMemory> allocate(size_t bytes, const char* what) = 0;
  virtual void release(DeviceMemory memory) = 0;
  /// Host to device, ordered on the device's queue; `src` may be reused when it returns.
  virtual Status write(DeviceMemory dst, const void* src, size_t bytes) = 0;
  /// The same, but `src` must stay as it is until finish() returns (small per-step tables).
  virtual Status write_async(DeviceMemory dst, const void* src, size_t bytes) = 0;
  /// Host to device, ordered on the queue without waiting for it, `src` read before it returns:
  /// a few bytes (a step's changed hyperparameters), so a step the caller's queue orders needs
  /// no host round trip. `bytes` and the offset are multiples of 4. By default write().
  virtual Status write_queued(DeviceMemory dst, const void* src, size_t bytes) {
    return write(dst, src, bytes);
  }
  /// Device to host; returns when `dst` holds the data.
  virtual Status read(void* dst, DeviceMemory src, size_t bytes) = 0;
  virtual Status copy(DeviceMemory dst, DeviceMemory src, size_t bytes) = 0;
  /// Waits for everything queued.
  virtual Status finish() = 0;

  virtual Expected<std::unique_ptr<Module>> load(const plan::Plan& plan, const ModuleSpec& spec,
                                                 cache::KernelCache* cache) = 0;
  /// Records what `enqueue` launches as a graph (where description().graphs).
  virtual Expected<std::unique_ptr<Graph>> capture(const std::function<Status()>& enqueue);
  /// The queue the device runs on (a CUstream, a cl_command_queue; for WebGPU the WGPUDevice),
  /// so another optimizer (or the caller) can share it and its memory; null on the CPU.
  virtual void* queue() const { return nullptr; }
  /// Whether `bytes` at `memory` (the caller's) can be what optjit uses it for, where the device
  /// can tell (a WebGPU buffer's size and usage); the caller names the memory in the error.
  virtual Status check_memory(DeviceMemory memory, size_t bytes) const {
    (void)memory, (void)bytes;
    return Status::Ok();
  }
  /// The value a tensor table holds for `memory` on a pointer device: its address.
  uint64_t address(DeviceMemory memory) const { return memory.handle + memory.offset; }

  /// The device's copy bandwidth, the yardstick for a step's: the median seconds one
  /// device-to-device copy of `bytes` takes (2 x bytes moved).
  Expected<double> copy_seconds(size_t bytes, int repetitions);
};

/// Memory a device allocated, released when this goes (or with reset()).
class DeviceAllocation {
 public:
  DeviceAllocation() = default;
  DeviceAllocation(Device* device, DeviceMemory memory, size_t bytes)
      : device_(device), memory_(memory), bytes_(bytes) {}
  DeviceAllocation(DeviceAllocation&& o) noexcept { *this = std::move(o); }
  DeviceAllocation& operator=(DeviceAllocation&& o) noexcept {
    if (this != &o) {
      reset();
      device_ = o.device_, memory_ = o.memory_, bytes_ = o.bytes_;
      o.device_ = nullptr, o.memory_ = {}, o.bytes_ = 0;
    }
    return *this;
  }
  ~DeviceAllocation() { reset(); }
  void reset() {
    if (device_ && memory_) device_->release(memory_);
    device_ = nullptr, memory_ = {}, bytes_ = 0;
  }
  DeviceMemory memory() const { return memory_; }
  size_t bytes() const { return bytes_; }
  explicit operator bool() const { return static_cast<bool>(memory_); }

 private:
  Device* device_ = nullptr;
  DeviceMemory memory_;
  size_t bytes_ = 0;
};

/// Allocates `bytes` (at least 8) on `device`.
Expected<DeviceAllocation> allocate(Device& device, size_t bytes, const char* what);

/// A kind of device, as its own source file registers it at load (see DeviceKindRegistration),
/// so that adding a backend below the API is its device file, a language entry and a compiler:
/// `optjit devices`, --backend, `auto` and the Optimizer find it here.
struct DeviceKind {
  std::string name;        // "cuda": what --backend and Backend name it
  std::string auto_label;  // "CUDA device": how `auto` says it picked one
  int list_order = 100;    // place in `optjit devices`
  int auto_rank = -1;  // `auto` takes a GPU of the lowest rank; -1: never (the CPU is the fallback)
  bool device_step = false, graphs = false;  // what its devices can do (DeviceDescription)
  std::function<Expected<std::shared_ptr<Device>>(int index, void* queue)> open;
  /// This machine's devices of this kind, or why there are none.
  std::function<Expected<std::vector<DeviceRecord>>()> list;
};
/// Adds a kind; used through a static DeviceKindRegistration in the device's source file.
void register_device_kind(DeviceKind kind);
/// Every registered kind, in list order.
std::vector<DeviceKind> device_kinds();
const DeviceKind* find_device_kind(const std::string& name);
/// "cpu, opencl or cuda": the registered kinds (those with `pred`), for messages.
std::string device_kind_names(const std::function<bool(const DeviceKind&)>& pred = {});

struct DeviceKindRegistration {
  explicit DeviceKindRegistration(DeviceKind kind) { register_device_kind(std::move(kind)); }
};

/// Which device to open: a backend and its device index (-1: its first GPU, else its first
/// device), and optionally the caller's own queue (a CUstream, a cl_command_queue) to run on.
struct DeviceSpec {
  std::string kind = "cpu";  // "cpu", "opencl", "cuda"
  int index = -1;
  void* queue = nullptr;  // the caller's; not owned. Null: the device's own.
};

/// The device to open among a kind's devices (gpu[i]: device i is a GPU) for `index` (-1: the
/// first GPU, else the first device), or an error naming it ("no OpenCL device 9 (there are 1)";
/// `what` is "OpenCL device").
Expected<int> choose_device(int index, const std::vector<bool>& gpu, const char* what);

/// A driver object's handle handed over as a number (Python's `queue=`, a buffer handle of
/// Engine.on_device, a C caller's cast): an address, so never below Linux's lowest mappable
/// one (64 KiB) nor misaligned, or an error: "{role} 0x1 is not the address of a {what}"
/// ("queue", "cl_command_queue"). Only that can be known without using it: a plausible
/// address that holds no such object is the caller's to answer for, as with any pointer.
Status check_handle(const void* handle, const char* role, const char* what);

/// Opens a device, or says why there is none ("no CUDA driver on this machine ...").
Expected<std::shared_ptr<Device>> open_device(const DeviceSpec& spec);

/// The wgpu-native library the webgpu backend loads (its path), or why there is none: a
/// caller's WGPUDevice and buffers must come from the same one.
Expected<std::string> webgpu_library();

/// wgpu-native's count of the objects optjit's WebGPU instance holds, by kind ("adapters",
/// "devices", "buffers", "bind groups", "compute pipelines", ...): made and not yet freed, for
/// leak checks. An error where the library does not count them (not wgpu-native).
Expected<std::map<std::string, size_t>> webgpu_live_objects();

}  // namespace optjit::runtime
