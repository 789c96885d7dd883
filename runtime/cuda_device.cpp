// CUDA as a device: the driver API (dlopen'd, runtime/cuda_driver.h), the process's retained
// primary context pushed and popped around every call, and a stream: the device's own, or the
// caller's (a framework's current stream). Kernels are NVRTC cubins for the device's sm_XX,
// from the kernel cache where it has them. Launches are recorded as CUDA graphs on request.
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>

#include "codegen/c_emitter.h"
#include "codegen/cuda_kernels.h"
#include "codegen/nvrtc.h"
#include "runtime/cuda_api.h"
#include "runtime/cuda_driver.h"
#include "runtime/device.h"
#include "runtime/devices.h"

namespace optjit::runtime {

std::string cuda_exact(const CudaDeviceInfo& i) {
  return fmt::format("cuda|{}|{}|driver {}|nvrtc {}|uuid {}|codegen {}", i.arch(), i.name,
                     i.driver_version, codegen::nvrtc_version(), i.uuid, kCodegenVersion);
}

std::string cuda_performance(const CudaDeviceInfo& i) {
  return fmt::format("cuda|{}|{} SMs", i.arch(), i.sm_count);
}

namespace {

class CudaDevice;

class CudaModule final : public Module {
 public:
  CudaModule(CudaDevice& dev, cuda::CUmodule module, double seconds, bool cached)
      : dev_(dev), module_(module), seconds_(seconds), cached_(cached) {}
  ~CudaModule() override;
  Status resolve(const plan::Plan& plan, bool device_step);
  Status launch(KernelId kernel, size_t groups, size_t group_size,
                std::span<const KernelArg> args) override;
  double compile_seconds() const override { return seconds_; }
  bool from_cache() const override { return cached_; }

 private:
  CudaDevice& dev_;
  cuda::CUmodule module_;
  std::map<std::string, cuda::CUfunction> functions_;
  double seconds_;
  bool cached_;
};

class CudaGraph final : public Graph {
 public:
  CudaGraph(CudaDevice& dev, cuda::CUgraph graph, cuda::CUgraphExec exec)
      : dev_(dev), graph_(graph), exec_(exec) {}
  ~CudaGraph() override;
  Status replay() override;

 private:
  CudaDevice& dev_;
  cuda::CUgraph graph_;
  cuda::CUgraphExec exec_;
};

class CudaDevice final : public Device {
 public:
  static Expected<std::shared_ptr<CudaDevice>> open(int ordinal, void* stream) {
    if (stream && stream != cuda::kStreamLegacy && stream != cuda::kStreamPerThread)
      OPTJIT_TRY(check_handle(stream, "queue", "CUstream (or 0x1, 0x2: the default streams)"));
    auto devices = cuda_devices();
    if (!devices) return devices.error();
    if (ordinal < 0) ordinal = 0;
    if (ordinal >= static_cast<int>(devices->size()))
      return make_error("no CUDA device {} (there are {})", ordinal, devices->size());
    auto d = std::shared_ptr<CudaDevice>(new CudaDevice());
    d->api_ = *cuda::api();
    d->info_ = (*devices)[ordinal];
    const cuda::Api& A = *d->api_;
    cuda::CUresult r;
    if ((r = A.cuDeviceGet(&d->dev_, ordinal)) != 0) return cuda::fail("cuDeviceGet", r);
    auto ctx = cuda::primary_context(d->dev_);
    if (!ctx) return ctx.error();
    d->ctx_ = *ctx;
    cuda::ContextScope scope(A, d->ctx_);
    if (!scope.ok()) return make_error("CUDA: could not make device {}'s context current", ordinal);
    if (stream) {
      d->stream_ = static_cast<cuda::CUstream>(stream);
    } else {
      if ((r = A.cuStreamCreate(&d->stream_, 1 /* non-blocking */)) != 0)
        return cuda::fail("cuStreamCreate", r);
      d->own_stream_ = true;
    }
    DeviceDescription& desc = d->desc_;
    desc.kind = "cuda";
    desc.index = ordinal;
    desc.name = d->info_.name;
    desc.arch = d->info_.arch();
    desc.performance = cuda_performance(d->info_);
    desc.gpu = true;
    desc.compute_units = d->info_.sm_count;
    desc.max_group = 1024;
    desc.addressing = Addressing::pointers;
    desc.device_step = true;
    desc.graphs = A.cuGraphLaunch && A.cuStreamBeginCapture && A.cuStreamEndCapture &&
                  A.cuGraphInstantiateWithFlags;
    desc.vector_aligned = true;
    return d;
  }
  ~CudaDevice() override {
    if (!(own_stream_ && stream_) && !capture_stream_) return;
    cuda::ContextScope scope(*api_, ctx_);
    if (own_stream_ && stream_) api_->cuStreamDestroy(stream_);
    if (capture_stream_) api_->cuStreamDestroy(capture_stream_);
  }
  const DeviceDescription& description() const override { return desc_; }
  const CudaDeviceInfo& info() const { return info_; }
  const cuda::Api& api() const { return *api_; }
  cuda::CUcontext context() const { return ctx_; }
  cuda::CUstream stream() const { return stream_; }
  void* queue() const override { return stream_; }

  // The caller's memory, as far as the driver can tell: memory CUDA allocated (device, managed
  // or pinned host memory), device memory of this GPU, holding `bytes` within its allocation.
  // A kernel given an address the driver does not know (a host pointer, freed memory, a wrong
  // number) faults on the GPU, and the fault ends the context: every later CUDA call of the
  // process, the framework's too, fails. The allocation's range is checked only for cuMemAlloc's
  // allocations (those that can be shared by legacy IPC): memory mapped through the virtual
  // memory API (PyTorch's expandable segments) or from a pool may be one range mapped in
  // pieces, and a tensor may span two. What was found good is remembered (an allocation, or
  // else the tensor's bytes), so gradients that are new tensors in the same memory every step
  // (a framework's caching allocator) cost no driver call after the first.
  Status check_memory(DeviceMemory m, size_t bytes) const override {
    if (!m || bytes == 0 || !api_->cuPointerGetAttributes) return Status::Ok();
    const uint64_t at = m.handle + m.offset, end = at + bytes;
    std::lock_guard lock(checked_mutex_);
    if (auto it = checked_.upper_bound(at); it != checked_.begin() && std::prev(it)->second >= end)
      return Status::Ok();
    // Each attribute read into 8 zeroed bytes (the driver writes 4 or 8 of them).
    int attributes[] = {cuda::kPointerMemoryType,    cuda::kPointerIsManaged,
                        cuda::kPointerDeviceOrdinal, cuda::kPointerLegacyIpc,
                        cuda::kPointerRangeStart,    cuda::kPointerRangeSize};
    uint64_t values[6] = {};
    void* data[6] = {&values[0], &values[1], &values[2], &values[3], &values[4], &values[5]};
    cuda::ContextScope scope(*api_, ctx_);
    if (cuda::CUresult r = api_->cuPointerGetAttributes(6, attributes, data, at); r != 0)
      return cuda::fail("cuPointerGetAttributes", r);
    const auto type = static_cast<uint32_t>(values[0]);
    const bool managed = static_cast<uint32_t>(values[1]) != 0;
    const auto ordinal = static_cast<int32_t>(static_cast<uint32_t>(values[2]));
    const bool allocation = static_cast<uint32_t>(values[3]) != 0;  // one cuMemAlloc
    const uint64_t start = allocation ? values[4] : at, size = allocation ? values[5] : bytes;
    if (type == 0)
      return make_error(
          "address {:#x} is not memory CUDA allocated (device, managed or pinned host memory): "
          "a host pointer, freed memory or a wrong number",
          at);
    if (type == cuda::kMemoryTypeDevice && !managed && ordinal != desc_.index)
      return make_error(
          "address {:#x} is memory of CUDA device {}, and the optimizer is on device {}", at,
          ordinal, desc_.index);
    if (size > 0 && (at < start || end > start + size))
      return make_error(
          "{} bytes at {:#x} pass the end of its CUDA allocation ({} bytes from {:#x})", bytes, at,
          size, start);
    if (size > 0) {
      if (checked_.size() >= 4096) checked_.clear();
      checked_[start] = start + size;
    }
    return Status::Ok();
  }

  Expected<DeviceMemory> allocate(size_t bytes, const char* what) override {
    cuda::ContextScope scope(*api_, ctx_);
    cuda::CUdeviceptr p = 0;
    if (cuda::CUresult r = api_->cuMemAlloc(&p, std::max<size_t>(bytes, 8)); r != 0) {
      Error e = cuda::fail(what, r);
      if (r == 2)  // CUDA_ERROR_OUT_OF_MEMORY: how much was asked for, of how much
        e.message += fmt::format(": {:.1f} MiB asked for, and '{}' has {:.1f} MiB in all",
                                 static_cast<double>(bytes) / 1048576.0, info_.name,
                                 static_cast<double>(info_.memory) / 1048576.0);
      return e;
    }
    return DeviceMemory{p, 0};
  }
  void release(DeviceMemory m) override {
    cuda::ContextScope scope(*api_, ctx_);
    api_->cuMemFree(m.handle);
  }
  Status write(DeviceMemory dst, const void* src, size_t bytes) override {
    OPTJIT_TRY(write_async(dst, src, bytes));
    return finish();
  }
  Status write_async(DeviceMemory dst, const void* src, size_t bytes) override {
    if (bytes == 0) return Status::Ok();
    cuda::ContextScope scope(*api_, ctx_);
    if (cuda::CUresult r = api_->cuMemcpyHtoDAsync(address(dst), src, bytes, stream_); r != 0)
      return cuda::fail("copying to the device", r);
    return Status::Ok();
  }
  // An asynchronous copy from pageable memory may wait for the stream; a memset takes its
  // value when queued. One per 4 bytes.
  Status write_queued(DeviceMemory dst, const void* src, size_t bytes) override {
    cuda::ContextScope scope(*api_, ctx_);
    for (size_t at = 0; at < bytes; at += 4) {
      unsigned word;
      std::memcpy(&word, static_cast<const uint8_t*>(src) + at, 4);
      if (cuda::CUresult r = api_->cuMemsetD32Async(address(dst) + at, word, 1, stream_); r != 0)
        return cuda::fail("writing hyperparameters to the device", r);
    }
    return Status::Ok();
  }
  Status read(void* dst, DeviceMemory src, size_t bytes) override {
    if (bytes == 0) return Status::Ok();
    cuda::ContextScope scope(*api_, ctx_);
    cuda::CUresult r = api_->cuMemcpyDtoHAsync(dst, address(src), bytes, stream_);
    if (r == 0) r = api_->cuStreamSynchronize(stream_);
    if (r != 0) return cuda::fail("copying from the device", r);
    return Status::Ok();
  }
  Status copy(DeviceMemory dst, DeviceMemory src, size_t bytes) override {
    if (bytes == 0) return Status::Ok();
    cuda::ContextScope scope(*api_, ctx_);
    if (cuda::CUresult r = api_->cuMemcpyDtoDAsync(address(dst), address(src), bytes, stream_);
        r != 0)
      return cuda::fail("copying between device buffers", r);
    return Status::Ok();
  }
  Status finish() override {
    cuda::ContextScope scope(*api_, ctx_);
    if (cuda::CUresult r = api_->cuStreamSynchronize(stream_); r != 0)
      return cuda::fail("running on the device", r);
    return Status::Ok();
  }

  Expected<std::unique_ptr<Module>> load(const plan::Plan& plan, const ModuleSpec& spec,
                                         cache::KernelCache* cache) override {
    auto built = codegen::plan_cubin(plan, info_.arch(), spec.launch, cache, spec.device_step);
    if (!built) return built.error();
    cuda::ContextScope scope(*api_, ctx_);
    cuda::CUmodule module = nullptr;
    if (cuda::CUresult r = api_->cuModuleLoadData(&module, built->cubin.image.data()); r != 0)
      return cuda::fail("loading the cubin", r);
    auto m = std::make_unique<CudaModule>(*this, module, built->cubin.compile_seconds,
                                          built->from_cache);
    OPTJIT_TRY(m->resolve(plan, spec.device_step));
    return std::unique_ptr<Module>(std::move(m));
  }

  Expected<std::unique_ptr<Graph>> capture(const std::function<Status()>& enqueue) override {
    if (!desc_.graphs) return make_error("this CUDA driver has no graph API (cuGraphLaunch)");
    cuda::ContextScope scope(*api_, ctx_);
    // The default streams (a framework's current stream is often the legacy one) cannot be
    // captured: the launches are captured on a stream of the device's own, and the graph is
    // replayed on stream_ as any graph may be.
    cuda::CUstream replay_on = stream_;
    if (default_stream(stream_)) {
      if (!capture_stream_) {
        if (cuda::CUresult r = api_->cuStreamCreate(&capture_stream_, 1 /* non-blocking */); r)
          return cuda::fail("cuStreamCreate", r);
      }
      stream_ = capture_stream_;
    }
    struct Restore {
      cuda::CUstream& stream;
      cuda::CUstream saved;
      ~Restore() { stream = saved; }
    } restore{stream_, replay_on};
    cuda::CUresult r = api_->cuStreamBeginCapture(stream_, cuda::kCaptureModeThreadLocal);
    if (r != 0) return cuda::fail("cuStreamBeginCapture", r);
    const Status launched = enqueue();
    cuda::CUgraph graph = nullptr;
    r = api_->cuStreamEndCapture(stream_, &graph);
    // A failed capture may still hand back a graph; it is freed, not kept half-built.
    auto drop = [&] {
      if (graph) api_->cuGraphDestroy(graph);
    };
    if (!launched) return drop(), launched.error();
    if (r != 0) return drop(), cuda::fail("cuStreamEndCapture", r);
    cuda::CUgraphExec exec = nullptr;
    if ((r = api_->cuGraphInstantiateWithFlags(&exec, graph, 0)) != 0)
      return drop(), cuda::fail("cuGraphInstantiate", r);
    return std::unique_ptr<Graph>(new CudaGraph(*this, graph, exec));
  }

 private:
  CudaDevice() = default;
  const cuda::Api* api_ = nullptr;
  CudaDeviceInfo info_;
  DeviceDescription desc_;
  cuda::CUdevice dev_ = 0;
  cuda::CUcontext ctx_ = nullptr;
  cuda::CUstream stream_ = nullptr;
  bool own_stream_ = false;
  cuda::CUstream capture_stream_ = nullptr;  // where graphs of a default stream's steps are made
  // Allocations of the caller's that check_memory found good: start -> end.
  mutable std::mutex checked_mutex_;
  mutable std::map<uint64_t, uint64_t> checked_;

  static bool default_stream(cuda::CUstream s) {
    return s == cuda::kStreamLegacy || s == cuda::kStreamPerThread;
  }
};

CudaModule::~CudaModule() {
  cuda::ContextScope scope(dev_.api(), dev_.context());
  dev_.api().cuModuleUnload(module_);
}

Status CudaModule::resolve(const plan::Plan& plan, bool device_step) {
  const std::vector<KernelId> ids = module_kernels(plan, device_step);
  cuda::ContextScope scope(dev_.api(), dev_.context());
  for (const KernelId& id : ids) {
    cuda::CUfunction f = nullptr;
    const std::string name = id.name();
    if (cuda::CUresult r = dev_.api().cuModuleGetFunction(&f, module_, name.c_str()); r != 0)
      return cuda::fail("cuModuleGetFunction", r);
    functions_[name] = f;
  }
  return Status::Ok();
}

Status CudaModule::launch(KernelId kernel, size_t groups, size_t group_size,
                          std::span<const KernelArg> args) {
  auto it = functions_.find(kernel.name());
  if (it == functions_.end()) return make_error("no kernel {} in this module", kernel.name());
  std::vector<uint64_t> values(args.size());
  std::vector<void*> params(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    values[i] =
        args[i].is_memory ? dev_.address(args[i].memory) : static_cast<uint64_t>(args[i].integer);
    params[i] = &values[i];
  }
  cuda::ContextScope scope(dev_.api(), dev_.context());
  cuda::CUresult r = dev_.api().cuLaunchKernel(it->second, static_cast<unsigned>(groups), 1, 1,
                                               static_cast<unsigned>(group_size), 1, 1, 0,
                                               dev_.stream(), params.data(), nullptr);
  if (r != 0) return cuda::fail("launching a kernel", r);
  return Status::Ok();
}

CudaGraph::~CudaGraph() {
  cuda::ContextScope scope(dev_.api(), dev_.context());
  dev_.api().cuGraphExecDestroy(exec_);
  dev_.api().cuGraphDestroy(graph_);
}

Status CudaGraph::replay() {
  cuda::ContextScope scope(dev_.api(), dev_.context());
  if (cuda::CUresult r = dev_.api().cuGraphLaunch(exec_, dev_.stream()); r != 0)
    return cuda::fail("cuGraphLaunch", r);
  return Status::Ok();
}

const DeviceKindRegistration registration({
    .name = "cuda",
    .auto_label = "CUDA device",
    .list_order = 2,
    .auto_rank = 0,
    .device_step = true,
    .graphs = true,
    .open = [](int ordinal, void* stream) -> Expected<std::shared_ptr<Device>> {
      auto d = CudaDevice::open(ordinal, stream);
      if (!d) return d.error();
      return std::shared_ptr<Device>(std::move(*d));
    },
    .list = []() -> Expected<std::vector<DeviceRecord>> {
      auto cuda = cuda_devices();
      if (!cuda) return cuda.error();
      std::vector<DeviceRecord> out;
      for (const auto& i : *cuda)
        out.push_back({"cuda", i.ordinal, i.name, true, cuda_exact(i), cuda_performance(i)});
      return out;
    },
});

}  // namespace

}  // namespace optjit::runtime
