// WebGPU through wgpu-native: a Device and a Module for the executor (runtime/device.h), with
// kernels in WGSL from the C-family emitter (codegen/c_lang.cpp). The library is loaded at run
// time (dlopen), as the CUDA driver is: OPTJIT_WGPU_LIBRARY names a copy, else the one the build
// found (the `wgpu` Python package's), else the loader's search path. Only its header is needed
// to build.
//
// What runs where: the pass kernels run on the device; the scalar program between passes (the
// learning rate, bias corrections, the clip coefficient) and the combining of reduction partials
// run on the host in f64 (WGSL has no f64, so there is no device step). Buffers are arenas (one
// storage buffer per plan buffer); kernel arguments become one bind group per launch, bindings
// in argument order, integers in a uniform buffer.
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <utility>

#include <webgpu.h>
#include <wgpu.h>

#include "cache/kernel_cache.h"
#include "codegen/c_emitter.h"
#include "ir/text.h"
#include "runtime/device.h"
#include "runtime/devices.h"

namespace optjit::runtime {
namespace {

// The entry points optjit uses, typed from the header's declarations.
// clang-format off
#define OPTJIT_WGPU_FUNCTIONS(X) \
  X(wgpuCreateInstance) \
  X(wgpuInstanceRelease) \
  X(wgpuInstanceEnumerateAdapters) \
  X(wgpuInstanceProcessEvents) \
  X(wgpuAdapterGetInfo) \
  X(wgpuAdapterInfoFreeMembers) \
  X(wgpuAdapterGetLimits) \
  X(wgpuAdapterRequestDevice) \
  X(wgpuAdapterRelease) \
  X(wgpuDeviceRelease) \
  X(wgpuDeviceAddRef) \
  X(wgpuDeviceGetLimits) \
  X(wgpuDeviceGetQueue) \
  X(wgpuDeviceCreateBuffer) \
  X(wgpuBufferRelease) \
  X(wgpuBufferDestroy) \
  X(wgpuBufferMapAsync) \
  X(wgpuBufferGetConstMappedRange) \
  X(wgpuBufferGetMappedRange) \
  X(wgpuBufferUnmap) \
  X(wgpuBufferGetSize) \
  X(wgpuBufferGetUsage) \
  X(wgpuQueueWriteBuffer) \
  X(wgpuQueueSubmit) \
  X(wgpuQueueRelease) \
  X(wgpuDeviceCreateCommandEncoder) \
  X(wgpuCommandEncoderCopyBufferToBuffer) \
  X(wgpuCommandEncoderBeginComputePass) \
  X(wgpuCommandEncoderFinish) \
  X(wgpuCommandEncoderRelease) \
  X(wgpuCommandBufferRelease) \
  X(wgpuComputePassEncoderSetPipeline) \
  X(wgpuComputePassEncoderSetBindGroup) \
  X(wgpuComputePassEncoderDispatchWorkgroups) \
  X(wgpuComputePassEncoderEnd) \
  X(wgpuComputePassEncoderRelease) \
  X(wgpuDeviceCreateShaderModule) \
  X(wgpuShaderModuleRelease) \
  X(wgpuDeviceCreateBindGroupLayout) \
  X(wgpuBindGroupLayoutRelease) \
  X(wgpuDeviceCreatePipelineLayout) \
  X(wgpuPipelineLayoutRelease) \
  X(wgpuDeviceCreateComputePipeline) \
  X(wgpuComputePipelineRelease) \
  X(wgpuDeviceCreateBindGroup) \
  X(wgpuBindGroupRelease) \
  X(wgpuDevicePushErrorScope) \
  X(wgpuDevicePopErrorScope) \
  X(wgpuDevicePoll) \
  X(wgpuGetVersion)
// clang-format on

struct Api {
#define OPTJIT_DECLARE(name) decltype(&::name) name = nullptr;
  OPTJIT_WGPU_FUNCTIONS(OPTJIT_DECLARE)
#undef OPTJIT_DECLARE
  // wgpu-native's own: a shader module without the bounds checks WebGPU inserts at every
  // storage access (they keep the element loops from vectorizing). Optional.
  decltype(&::wgpuDeviceCreateShaderModuleTrusted) wgpuDeviceCreateShaderModuleTrusted = nullptr;
  // wgpu-native's count of the objects alive, for leak checks. Optional.
  decltype(&::wgpuGenerateReport) wgpuGenerateReport = nullptr;
  std::string path;
};

// The library, loaded once, or why it could not be.
Expected<const Api*> api() {
  static std::once_flag once;
  static Api a;
  static std::string why;
  std::call_once(once, [] {
    std::vector<std::string> tries;
    if (const char* env = std::getenv("OPTJIT_WGPU_LIBRARY"); env && *env) {
      tries.push_back(env);  // the user's choice, and only it
    } else {
#ifdef OPTJIT_WGPU_DEFAULT_LIBRARY
      tries.push_back(OPTJIT_WGPU_DEFAULT_LIBRARY);
#endif
      tries.push_back("libwgpu_native.so");
    }
    void* lib = nullptr;
    std::string errors;
    for (const auto& t : tries) {
      lib = ::dlopen(t.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib) {
        a.path = t;
        break;
      }
      errors += fmt::format("\n  {}: {}", t, ::dlerror());
    }
    if (!lib) {
      why =
          "no WebGPU library (wgpu-native): `pip install wgpu` provides one, or set "
          "OPTJIT_WGPU_LIBRARY to a libwgpu_native.so; tried:" +
          errors;
      return;
    }
#define OPTJIT_LOAD(name)                                                          \
  a.name = reinterpret_cast<decltype(a.name)>(::dlsym(lib, #name));                \
  if (!a.name) {                                                                   \
    why = fmt::format("{} lacks {} (an incompatible wgpu-native)", a.path, #name); \
    return;                                                                        \
  }
    OPTJIT_WGPU_FUNCTIONS(OPTJIT_LOAD)
#undef OPTJIT_LOAD
    a.wgpuDeviceCreateShaderModuleTrusted =
        reinterpret_cast<decltype(a.wgpuDeviceCreateShaderModuleTrusted)>(
            ::dlsym(lib, "wgpuDeviceCreateShaderModuleTrusted"));
    a.wgpuGenerateReport =
        reinterpret_cast<decltype(a.wgpuGenerateReport)>(::dlsym(lib, "wgpuGenerateReport"));
  });
  if (!why.empty()) return make_error("{}", why);
  return &a;
}

WGPUStringView sv(const char* s) { return {s, s ? std::strlen(s) : 0}; }
WGPUStringView sv(const std::string& s) { return {s.data(), s.size()}; }
std::string str(WGPUStringView v) {
  return v.data ? std::string(v.data, v.length == WGPU_STRLEN ? std::strlen(v.data) : v.length)
                : std::string();
}

const char* backend_name(WGPUBackendType t) {
  switch (t) {
    case WGPUBackendType_Vulkan:
      return "Vulkan";
    case WGPUBackendType_Metal:
      return "Metal";
    case WGPUBackendType_D3D12:
      return "D3D12";
    case WGPUBackendType_OpenGL:
      return "OpenGL";
    default:
      return "other";
  }
}

struct AdapterInfo {
  int index = 0;
  std::string name, vendor, driver, backend;
  uint32_t vendor_id = 0, device_id = 0;
  bool gpu = false;
  WGPULimits limits = WGPU_LIMITS_INIT;
};

// One instance per process (the library's global state), never released.
Expected<WGPUInstance> instance() {
  auto a = api();
  if (!a) return a.error();
  static WGPUInstance inst = nullptr;
  static std::once_flag once;
  std::call_once(once, [&] {
    // Mesa's Vulkan drivers print an error when XDG_RUNTIME_DIR is unset; optjit presents
    // nothing, so any directory will do.
    if (!std::getenv("XDG_RUNTIME_DIR")) ::setenv("XDG_RUNTIME_DIR", "/tmp", 0);
    inst = (*a)->wgpuCreateInstance(nullptr);
  });
  if (!inst) return make_error("WebGPU: wgpuCreateInstance failed ({})", (*a)->path);
  return inst;
}

// An adapter the library enumerated, released with this unless taken (an adapter is a
// reference the caller owns; every enumeration, `optjit devices` and each device opened leaked
// theirs, LeakSanitizer found).
struct Found {
  WGPUAdapter adapter = nullptr;
  AdapterInfo info;

  Found(WGPUAdapter a, AdapterInfo i) : adapter(a), info(std::move(i)) {}
  Found(Found&& o) noexcept : adapter(std::exchange(o.adapter, nullptr)), info(std::move(o.info)) {}
  Found& operator=(Found&&) = delete;
  ~Found() {
    if (adapter) (*api())->wgpuAdapterRelease(adapter);
  }
  WGPUAdapter take() { return std::exchange(adapter, nullptr); }
};

// What optjit keeps of an adapter's info (freeing the library's strings).
AdapterInfo adapter_info(const Api& w, WGPUAdapterInfo& ai) {
  AdapterInfo i;
  i.name = str(ai.device);
  i.vendor = str(ai.vendor);
  i.driver = str(ai.description);
  i.backend = backend_name(ai.backendType);
  i.vendor_id = ai.vendorID;
  i.device_id = ai.deviceID;
  i.gpu = ai.adapterType == WGPUAdapterType_DiscreteGPU ||
          ai.adapterType == WGPUAdapterType_IntegratedGPU;
  w.wgpuAdapterInfoFreeMembers(ai);
  return i;
}

Expected<std::vector<Found>> find_adapters() {
  auto a = api();
  if (!a) return a.error();
  auto inst = instance();
  if (!inst) return inst.error();
  const Api& w = **a;
  size_t n = w.wgpuInstanceEnumerateAdapters(*inst, nullptr, nullptr);
  std::vector<WGPUAdapter> adapters(n);
  if (n) w.wgpuInstanceEnumerateAdapters(*inst, nullptr, adapters.data());
  std::vector<Found> out;
  for (WGPUAdapter ad : adapters) {
    Found f(ad, {});
    WGPUAdapterInfo ai = WGPU_ADAPTER_INFO_INIT;
    if (w.wgpuAdapterGetInfo(ad, &ai) != WGPUStatus_Success) continue;
    f.info = adapter_info(w, ai);
    w.wgpuAdapterGetLimits(ad, &f.info.limits);
    // Compute needs storage buffers; the GL backend's adapters lack what the kernels use.
    if (f.info.limits.maxStorageBuffersPerShaderStage < 8) continue;
    f.info.index = static_cast<int>(out.size());
    out.push_back(std::move(f));
  }
  if (out.empty())
    return make_error(
        "WebGPU: no adapter with compute (wgpu-native at {} found none; on a machine without a "
        "GPU, Debian's mesa-vulkan-drivers gives one on the CPU)",
        w.path);
  return out;
}

std::string webgpu_exact(const AdapterInfo& i) {
  return fmt::format("webgpu|{}|{}|{}|{:04x}:{:04x}|{}|wgpu {:x}|codegen {}", i.backend, i.vendor,
                     i.name, i.vendor_id, i.device_id, i.driver, (*api())->wgpuGetVersion(),
                     kCodegenVersion);
}
std::string webgpu_performance(const AdapterInfo& i) {
  return fmt::format("webgpu|{}|{}|{}", i.backend, i.vendor, i.name);
}

// The library's message on one line: "Validation Error\n\nCaused by:\n  In f\n    what" reads
// "Validation Error: In f: what".
std::string one_line(const std::string& message) {
  std::string out, line;
  std::istringstream in(message);
  while (std::getline(in, line)) {
    const size_t a = line.find_first_not_of(" \t"), b = line.find_last_not_of(" \t");
    if (a == std::string::npos || line.substr(a, b - a + 1) == "Caused by:") continue;
    out += (out.empty() ? "" : ": ") + line.substr(a, b - a + 1);
  }
  return out;
}

// Errors the library reports through a popped error scope (shader, pipeline and bind group
// creation), with its message.
struct ScopeResult {
  bool done = false;
  WGPUErrorType type = WGPUErrorType_NoError;
  std::string message;
};

class WebgpuDevice;

class WebgpuModule final : public Module {
 public:
  WebgpuModule(WebgpuDevice& dev, bool cached) : dev_(dev), cached_(cached) {}
  ~WebgpuModule() override;
  Status build(const plan::Plan& plan, const std::string& source, int block);
  Status launch(KernelId kernel, size_t groups, size_t group_size,
                std::span<const KernelArg> args) override;
  double compile_seconds() const override { return seconds; }
  bool from_cache() const override { return cached_; }

 private:
  WebgpuDevice& dev_;
  WGPUShaderModule shader_ = nullptr;
  WGPUBindGroupLayout layout_ = nullptr;
  WGPUPipelineLayout pipeline_layout_ = nullptr;
  std::map<std::string, WGPUComputePipeline> pipelines_;
  std::vector<WGPUBuffer> dummies_;  // bound where a launch passes no memory
  WGPUBuffer tables_ = nullptr;      // codegen::constant_tables, where the plan has any
  Expected<WGPUBuffer> int_buffer(const std::array<int32_t, 4>& ints);
  void forget_bind_groups();
  static constexpr size_t kKeptBindGroups = 256;
  std::map<std::vector<uint64_t>, WGPUBindGroup> bind_groups_;  // by buffers and integers
  std::map<std::array<int32_t, 4>, WGPUBuffer> int_buffers_;
  uint64_t releases_seen_ = 0;
  size_t bindings_ = 0;  // storage bindings; then one uniform binding
  int block_ = 0;
  bool cached_;

 public:
  double seconds = 0;  // emitting (or the cache) and compiling
};

class WebgpuDevice final : public Device {
 public:
  static Expected<std::shared_ptr<WebgpuDevice>> open(int index) {
    auto found = find_adapters();
    if (!found) return found.error();
    std::vector<bool> gpu;
    for (const auto& f : *found) gpu.push_back(f.info.gpu);
    auto chosen = choose_device(index, gpu, "WebGPU adapter");
    if (!chosen) return chosen.error();
    index = *chosen;
    auto d = std::shared_ptr<WebgpuDevice>(new WebgpuDevice());
    d->w_ = *api();
    d->info_ = (*found)[index].info;
    d->adapter_ = (*found)[index].take();
    // The adapter's own limits (storage buffers per stage, buffer sizes) rather than WebGPU's
    // portable defaults, which cap a storage binding at 128 MiB and a stage at 8 of them.
    WGPULimits limits = d->info_.limits;
    limits.nextInChain = nullptr;
    WGPUDeviceDescriptor desc = WGPU_DEVICE_DESCRIPTOR_INIT;
    desc.label = sv("optjit");
    desc.requiredLimits = &limits;
    desc.uncapturedErrorCallbackInfo.callback = [](WGPUDevice const*, WGPUErrorType,
                                                   WGPUStringView message, void* self, void*) {
      auto* dev = static_cast<WebgpuDevice*>(self);
      if (dev->uncaptured_.empty()) dev->uncaptured_ = one_line(str(message));
    };
    desc.uncapturedErrorCallbackInfo.userdata1 = d.get();
    desc.deviceLostCallbackInfo.mode = WGPUCallbackMode_AllowSpontaneous;
    desc.deviceLostCallbackInfo.callback = [](WGPUDevice const*, WGPUDeviceLostReason reason,
                                              WGPUStringView message, void* self, void*) {
      if (reason == WGPUDeviceLostReason_Destroyed ||
          reason == WGPUDeviceLostReason_CallbackCancelled)
        return;
      auto* dev = static_cast<WebgpuDevice*>(self);
      dev->uncaptured_ = "the WebGPU device was lost: " + str(message);
    };
    desc.deviceLostCallbackInfo.userdata1 = d.get();
    struct Got {
      bool done = false;
      WGPUDevice device = nullptr;
      std::string message;
    } got;
    WGPURequestDeviceCallbackInfo cb = WGPU_REQUEST_DEVICE_CALLBACK_INFO_INIT;
    cb.mode = WGPUCallbackMode_AllowProcessEvents;
    cb.callback = [](WGPURequestDeviceStatus status, WGPUDevice device, WGPUStringView message,
                     void* g, void*) {
      auto* r = static_cast<Got*>(g);
      r->done = true;
      if (status == WGPURequestDeviceStatus_Success) r->device = device;
      r->message = str(message);
    };
    cb.userdata1 = &got;
    d->w_->wgpuAdapterRequestDevice(d->adapter_, &desc, cb);
    auto inst = instance();
    for (int spins = 0; !got.done && spins < 100000; ++spins)
      d->w_->wgpuInstanceProcessEvents(*inst);
    if (!got.device)
      return make_error("WebGPU: requesting a device on '{}' failed: {}", d->info_.name,
                        got.done ? got.message : "no answer");
    d->device_ = got.device;
    d->queue_ = d->w_->wgpuDeviceGetQueue(d->device_);
    OPTJIT_TRY(d->describe(index));
    return d;
  }

  /// The caller's device (a WGPUDevice from this library, e.g. the application's or wgpu-py's):
  /// optjit holds a reference and queues its work on the device's queue. Its errors reach
  /// optjit through error scopes around everything optjit does on it (the device's uncaptured
  /// error callback stays the caller's). wgpu-native cannot say which adapter a device is on
  /// (wgpuDeviceGetAdapterInfo is unimplemented and panics), so `index`, the adapter's index in
  /// `optjit devices`, names it for the fingerprints; -1: an unnamed device of its own
  /// fingerprint (its kernels and tuning decisions cached under it).
  static Expected<std::shared_ptr<WebgpuDevice>> adopt(WGPUDevice device, int index) {
    auto a = api();
    if (!a) return a.error();
    const Api& w = **a;
    auto d = std::shared_ptr<WebgpuDevice>(new WebgpuDevice());
    d->w_ = &w;
    if (index >= 0) {
      auto found = find_adapters();
      if (!found) return found.error();
      if (index >= static_cast<int>(found->size()))
        return make_error("no WebGPU adapter {} (there are {}; `optjit devices` lists them)", index,
                          found->size());
      d->info_ = (*found)[static_cast<size_t>(index)].info;
    } else {
      d->info_.name = "the caller's WebGPU device";
      d->info_.backend = "unknown";
      d->info_.index = -1;
    }
    if (w.wgpuDeviceGetLimits(device, &d->info_.limits) != WGPUStatus_Success)
      return make_error("WebGPU: the caller's device gave no limits");
    d->info_.limits.nextInChain = nullptr;
    w.wgpuDeviceAddRef(device);
    d->device_ = device;
    d->adopted_ = true;
    d->queue_ = w.wgpuDeviceGetQueue(device);
    OPTJIT_TRY(d->describe(index));
    return d;
  }

  ~WebgpuDevice() override {
    if (probe_layout_) w_->wgpuBindGroupLayoutRelease(probe_layout_);
    if (staging_) w_->wgpuBufferRelease(staging_);
    if (queue_) w_->wgpuQueueRelease(queue_);
    if (device_) w_->wgpuDeviceRelease(device_);
    if (adapter_) w_->wgpuAdapterRelease(adapter_);
  }

  const DeviceDescription& description() const override { return desc_; }
  const AdapterInfo& info() const { return info_; }
  const Api& w() const { return *w_; }
  /// The handle another optimizer is given to share this device and its buffers: the
  /// WGPUDevice (WebGPU buffers belong to the device that made them; its queue is found from it).
  void* queue() const override { return device_; }
  WGPUDevice device() const { return device_; }

  Expected<DeviceMemory> allocate(size_t bytes, const char* what) override {
    const uint64_t size = round4(std::max<size_t>(bytes, 16));
    if (size > info_.limits.maxBufferSize)
      return make_error("{}: {} bytes exceed the largest WebGPU buffer '{}' allows ({} bytes)",
                        what, bytes, info_.name, info_.limits.maxBufferSize);
    WGPUBufferDescriptor d = WGPU_BUFFER_DESCRIPTOR_INIT;
    d.label = sv(what);
    d.usage = WGPUBufferUsage_Storage | WGPUBufferUsage_CopySrc | WGPUBufferUsage_CopyDst;
    d.size = size;
    // Out of memory is its own kind of WebGPU error, reported through its own scope.
    push_scope(WGPUErrorFilter_OutOfMemory);
    push_scope();
    WGPUBuffer b = w_->wgpuDeviceCreateBuffer(device_, &d);
    Status invalid = pop_scope(what);
    Status oom = pop_scope(fmt::format("{} ({} bytes: out of device memory)", what, bytes));
    if (!invalid.ok() || !oom.ok() || !b) {
      if (b) w_->wgpuBufferRelease(b);
      if (!oom.ok()) return oom.error();
      return invalid.ok()
                 ? make_error("{}: WebGPU could not create a buffer of {} bytes", what, bytes)
                 : invalid.error();
    }
    sizes_[reinterpret_cast<uint64_t>(b)] = size;
    return DeviceMemory{reinterpret_cast<uint64_t>(b), 0};
  }
  void release(DeviceMemory m) override {
    sizes_.erase(m.handle);
    ++releases_;  // bind groups that may name it are made again (WebgpuModule::launch)
    w_->wgpuBufferDestroy(buf(m));
    w_->wgpuBufferRelease(buf(m));
  }
  /// How many buffers this device has released: a bind group made before may name one.
  uint64_t releases() const { return releases_; }
  /// Whether this device allocated the buffer (else it is the caller's).
  bool owns(DeviceMemory m) const { return sizes_.count(m.handle) != 0; }
  /// The size of a buffer: one this device allocated, or the caller's.
  uint64_t size_of(DeviceMemory m) const {
    if (!m) return 0;
    auto it = sizes_.find(m.handle);
    return it == sizes_.end() ? w_->wgpuBufferGetSize(buf(m)) : it->second;
  }
  Status check_memory(DeviceMemory m, size_t bytes) const override {
    if (!m || bytes == 0) return Status::Ok();
    OPTJIT_TRY(check_handle(reinterpret_cast<void*>(m.handle), "buffer", "WGPUBuffer"));
    const WGPUBufferUsage need =
        WGPUBufferUsage_Storage | WGPUBufferUsage_CopySrc | WGPUBufferUsage_CopyDst;
    if ((w_->wgpuBufferGetUsage(buf(m)) & need) != need)
      return make_error(
          "the WebGPU buffer lacks usage Storage | CopySrc | CopyDst (optjit binds it to kernels "
          "and copies to and from it)");
    if (const uint64_t size = size_of(m); m.offset + bytes > size)
      return make_error("{} bytes at offset {} pass the end of its WebGPU buffer of {} bytes",
                        bytes, m.offset, size);
    if (m.offset % 4)
      return make_error("offset {} in its WebGPU buffer is not a multiple of 4 bytes", m.offset);
    return Status::Ok();
  }
  Status write(DeviceMemory dst, const void* src, size_t bytes) override {
    if (bytes == 0) return Status::Ok();
    OPTJIT_TRY(usable(dst, "writing a buffer"));
    // WebGPU writes whole 4-byte words: a range of 16-bit elements that starts or ends inside a
    // word keeps the word's other bytes (read back first).
    const uint64_t lo = dst.offset & ~uint64_t{3}, hi = round4(dst.offset + bytes);
    if (lo == dst.offset && hi == dst.offset + bytes) {
      return watched("writing a buffer", [&] {
        w_->wgpuQueueWriteBuffer(queue_, buf(dst), dst.offset, src, bytes);  // copied at once
        return Status::Ok();
      });
    }
    std::vector<uint8_t> words(hi - lo);
    OPTJIT_TRY(read(words.data(), {dst.handle, lo}, 4));
    OPTJIT_TRY(read(words.data() + words.size() - 4, {dst.handle, hi - 4}, 4));
    std::memcpy(words.data() + (dst.offset - lo), src, bytes);
    return watched("writing a buffer", [&] {
      w_->wgpuQueueWriteBuffer(queue_, buf(dst), lo, words.data(), words.size());
      return Status::Ok();
    });
  }
  Status write_async(DeviceMemory dst, const void* src, size_t bytes) override {
    return write(dst, src, bytes);
  }
  Status read(void* dst, DeviceMemory src, size_t bytes) override {
    if (bytes == 0) return Status::Ok();
    OPTJIT_TRY(usable(src, "reading a buffer back"));
    // Whole words (buffers are allocated in whole words, so they hold them).
    const uint64_t lo = src.offset & ~uint64_t{3}, size = round4(src.offset + bytes) - lo;
    // One mapped read-back buffer, kept and grown (the host step reads partials every pass).
    if (staging_size_ < size) {
      if (staging_) w_->wgpuBufferRelease(staging_);
      WGPUBufferDescriptor d = WGPU_BUFFER_DESCRIPTOR_INIT;
      d.label = sv("optjit read-back");
      d.usage = WGPUBufferUsage_MapRead | WGPUBufferUsage_CopyDst;
      d.size = std::max<uint64_t>(size, 4096);
      staging_ = w_->wgpuDeviceCreateBuffer(device_, &d);
      staging_size_ = staging_ ? d.size : 0;
      if (!staging_) return make_error("WebGPU: no staging buffer of {} bytes", size);
    }
    WGPUBuffer staging = staging_;
    WGPUCommandEncoder enc = w_->wgpuDeviceCreateCommandEncoder(device_, nullptr);
    w_->wgpuCommandEncoderCopyBufferToBuffer(enc, buf(src), lo, staging, 0, size);
    OPTJIT_TRY(submit(enc, "reading a buffer back"));
    struct Mapped {
      bool done = false;
      WGPUMapAsyncStatus status = WGPUMapAsyncStatus_Error;
      std::string message;
    } mapped;
    WGPUBufferMapCallbackInfo cb = WGPU_BUFFER_MAP_CALLBACK_INFO_INIT;
    cb.mode = WGPUCallbackMode_AllowProcessEvents;
    cb.callback = [](WGPUMapAsyncStatus status, WGPUStringView message, void* m, void*) {
      auto* r = static_cast<Mapped*>(m);
      r->done = true;
      r->status = status;
      r->message = str(message);
    };
    cb.userdata1 = &mapped;
    w_->wgpuBufferMapAsync(staging, WGPUMapMode_Read, 0, size, cb);
    auto inst = instance();
    while (!mapped.done) {
      w_->wgpuDevicePoll(device_, true, nullptr);
      w_->wgpuInstanceProcessEvents(*inst);
    }
    Status st = Status::Ok();
    if (mapped.status == WGPUMapAsyncStatus_Success) {
      const void* p = w_->wgpuBufferGetConstMappedRange(staging, 0, size);
      if (p)
        std::memcpy(dst, static_cast<const uint8_t*>(p) + (src.offset - lo), bytes);
      else
        st = make_error("WebGPU: a mapped read-back buffer has no range");
      w_->wgpuBufferUnmap(staging);
    } else {
      st = make_error("WebGPU: reading a buffer back failed: {}", mapped.message);
    }
    OPTJIT_TRY(check("reading a buffer back"));
    return st;
  }
  Status copy(DeviceMemory dst, DeviceMemory src, size_t bytes) override {
    if (bytes == 0) return Status::Ok();
    if (dst.offset % 4 || src.offset % 4 || bytes % 4)
      return make_error("WebGPU copies whole 4-byte words (offsets {} and {}, {} bytes)",
                        src.offset, dst.offset, bytes);
    OPTJIT_TRY(usable(src, "copying a buffer"));
    OPTJIT_TRY(usable(dst, "copying a buffer"));
    WGPUCommandEncoder enc = w_->wgpuDeviceCreateCommandEncoder(device_, nullptr);
    w_->wgpuCommandEncoderCopyBufferToBuffer(enc, buf(src), src.offset, buf(dst), dst.offset,
                                             bytes);
    return submit(enc, "copying a buffer");
  }
  Status finish() override {
    w_->wgpuDevicePoll(device_, true, nullptr);
    return check("running the queue");
  }
  Expected<std::unique_ptr<Module>> load(const plan::Plan& plan, const ModuleSpec& spec,
                                         cache::KernelCache* cache) override;

  static WGPUBuffer buf(DeviceMemory m) { return reinterpret_cast<WGPUBuffer>(m.handle); }
  static uint64_t round4(uint64_t n) { return (n + 3) & ~uint64_t{3}; }

  // Whether a caller's buffer can still be used: one the caller destroyed is found by
  // wgpu-native only when work naming it is submitted, which it takes as fatal (the process
  // aborts), where making a bind group that names it is checked at once (optjit's own buffers
  // are never destroyed under it; kernels' bind groups are checked as they are made).
  Status usable(DeviceMemory m, const char* what) {
    if (!m || owns(m)) return Status::Ok();
    if (!probe_layout_) {
      WGPUBindGroupLayoutEntry le = WGPU_BIND_GROUP_LAYOUT_ENTRY_INIT;
      le.binding = 0;
      le.visibility = WGPUShaderStage_Compute;
      le.buffer.type = WGPUBufferBindingType_ReadOnlyStorage;
      WGPUBindGroupLayoutDescriptor ld = WGPU_BIND_GROUP_LAYOUT_DESCRIPTOR_INIT;
      ld.entryCount = 1;
      ld.entries = &le;
      probe_layout_ = w_->wgpuDeviceCreateBindGroupLayout(device_, &ld);
    }
    WGPUBindGroupEntry e = WGPU_BIND_GROUP_ENTRY_INIT;
    e.binding = 0;
    e.buffer = buf(m);
    e.size = 4;  // (a buffer optjit uses holds at least a word)
    WGPUBindGroupDescriptor d = WGPU_BIND_GROUP_DESCRIPTOR_INIT;
    d.layout = probe_layout_;
    d.entryCount = 1;
    d.entries = &e;
    push_scope();
    WGPUBindGroup group = w_->wgpuDeviceCreateBindGroup(device_, &d);
    Status st = pop_scope(what);
    if (group) w_->wgpuBindGroupRelease(group);
    return st;
  }
  // Finishes `enc` and submits it (watched), unless its encoding failed: wgpu-native takes an
  // invalid command buffer at wgpuQueueSubmit as fatal (it panics, and the process aborts), so
  // an encoding error (a copy from a caller's buffer that was destroyed or is another device's)
  // is caught in a scope around the finish, and returned.
  Status submit(WGPUCommandEncoder enc, const char* what) {
    return watched(what, [&] {
      push_scope();
      WGPUCommandBuffer cmd = w_->wgpuCommandEncoderFinish(enc, nullptr);
      Status encoded = pop_scope(what);
      if (encoded.ok()) w_->wgpuQueueSubmit(queue_, 1, &cmd);
      if (cmd) w_->wgpuCommandBufferRelease(cmd);
      w_->wgpuCommandEncoderRelease(enc);
      return encoded;
    });
  }
  void push_scope(WGPUErrorFilter filter = WGPUErrorFilter_Validation) {
    w_->wgpuDevicePushErrorScope(device_, filter);
  }
  // The error the scope caught while doing `what`, if any.
  Status pop_scope(const std::string& what) {
    ScopeResult r;
    WGPUPopErrorScopeCallbackInfo cb = WGPU_POP_ERROR_SCOPE_CALLBACK_INFO_INIT;
    cb.mode = WGPUCallbackMode_AllowProcessEvents;
    cb.callback = [](WGPUPopErrorScopeStatus, WGPUErrorType type, WGPUStringView message, void* p,
                     void*) {
      auto* res = static_cast<ScopeResult*>(p);
      res->done = true;
      res->type = type;
      res->message = one_line(str(message));
    };
    cb.userdata1 = &r;
    w_->wgpuDevicePopErrorScope(device_, cb);
    auto inst = instance();
    for (int spins = 0; !r.done && spins < 100000; ++spins) w_->wgpuInstanceProcessEvents(*inst);
    if (r.done && r.type != WGPUErrorType_NoError)
      return make_error("WebGPU: {} failed on '{}': {}", what, info_.name, r.message);
    return Status::Ok();
  }
  // Runs `enqueue` (a submission or a queue write) and returns its error, or the one the
  // library reported for it: on optjit's own device through its uncaptured-error callback, on
  // the caller's (whose callback is the caller's) through error scopes around it.
  template <class Enqueue>
  Status watched(const char* what, Enqueue enqueue) {
    if (!adopted_) {
      Status done = enqueue();
      Status reported = check(what);
      return done.ok() ? reported : done;
    }
    push_scope(WGPUErrorFilter_OutOfMemory);
    push_scope();
    Status done = enqueue();
    Status invalid = pop_scope(what);
    Status oom = pop_scope(what);  // the library's message says it is out of memory
    if (!done.ok()) return done;
    return invalid.ok() ? oom : invalid;
  }
  // An error the library reported outside any scope (a launch, a copy, a lost device).
  Status check(const char* what) {
    if (uncaptured_.empty()) return Status::Ok();
    std::string m = std::move(uncaptured_);
    uncaptured_.clear();
    return make_error("WebGPU: {} on '{}' failed: {}", what, info_.name, m);
  }

 private:
  WebgpuDevice() = default;
  // Whether kernels that divide and take square roots as `division` says round as IEEE does on
  // this adapter: 65,536 pairs through codegen::wgsl_rounding_probe, against the host's own
  // results. The operands and results are normal (the kernels' correction covers only those),
  // the significands random, the exponents within 2^±40; the first pairs are hard cases. WGSL
  // allows 2.5 ulp and NVIDIA's Vulkan driver is off by an ulp for ~10% of random quotients, so
  // one miss in 65,536 would show; so would an `fma` that is not fused (lavapipe's). A probe
  // that cannot run reads as "no".
  bool probe_rounding(codegen::F32Division division) {
    constexpr size_t kPairs = 65536;
    std::vector<float> io(2 * kPairs);
    uint64_t r = 0x2545f4914f6cdd1dull;
    auto next = [&] {
      r ^= r << 13, r ^= r >> 7, r ^= r << 17;
      return r;
    };
    auto normal = [&](int range) {
      const uint64_t b = next();
      const uint32_t e = 127 - range + static_cast<uint32_t>((b >> 40) % (2 * range + 1));
      return std::bit_cast<float>(static_cast<uint32_t>(b & 0x7fffffu) | (e << 23));
    };
    for (size_t i = 0; i < kPairs; ++i) io[2 * i] = normal(40), io[2 * i + 1] = normal(40);
    const float hard[] = {1.0f, 0x1.fffffep0f, 0x1.000002p0f, 3.0f, 0x1.5p0f, 0x1.fffffcp0f};
    for (size_t i = 0; i < 36; ++i) io[2 * i] = hard[i % 6], io[2 * i + 1] = hard[i / 6];
    auto mem = allocate(io.size() * sizeof(float), "the rounding probe");
    if (!mem) return false;
    WGPUBufferDescriptor ud = WGPU_BUFFER_DESCRIPTOR_INIT;
    ud.usage = WGPUBufferUsage_Uniform;
    ud.size = 16;
    ud.mappedAtCreation = true;  // zeroed: the kernels' integer arguments, args.w 0
    WGPUBuffer args = w_->wgpuDeviceCreateBuffer(device_, &ud);
    if (args) w_->wgpuBufferUnmap(args);
    const std::string source = codegen::wgsl_rounding_probe(division);
    WGPUShaderSourceWGSL wgsl = WGPU_SHADER_SOURCE_WGSL_INIT;
    wgsl.code = sv(source);
    WGPUShaderModuleDescriptor md = WGPU_SHADER_MODULE_DESCRIPTOR_INIT;
    md.nextInChain = &wgsl.chain;
    WGPUBindGroupLayoutEntry le[2] = {WGPU_BIND_GROUP_LAYOUT_ENTRY_INIT,
                                      WGPU_BIND_GROUP_LAYOUT_ENTRY_INIT};
    for (uint32_t k = 0; k < 2; ++k) {
      le[k].binding = k;
      le[k].visibility = WGPUShaderStage_Compute;
      le[k].buffer.type = k == 0 ? WGPUBufferBindingType_Storage : WGPUBufferBindingType_Uniform;
    }
    WGPUBindGroupLayoutDescriptor ld = WGPU_BIND_GROUP_LAYOUT_DESCRIPTOR_INIT;
    ld.entryCount = 2;
    ld.entries = le;
    push_scope();
    WGPUShaderModule shader = w_->wgpuDeviceCreateShaderModule(device_, &md);
    WGPUBindGroupLayout layout = w_->wgpuDeviceCreateBindGroupLayout(device_, &ld);
    WGPUPipelineLayoutDescriptor pd = WGPU_PIPELINE_LAYOUT_DESCRIPTOR_INIT;
    pd.bindGroupLayoutCount = 1;
    pd.bindGroupLayouts = &layout;
    WGPUPipelineLayout pipeline_layout = w_->wgpuDeviceCreatePipelineLayout(device_, &pd);
    WGPUComputePipelineDescriptor cd = WGPU_COMPUTE_PIPELINE_DESCRIPTOR_INIT;
    cd.layout = pipeline_layout;
    cd.compute.module = shader;
    cd.compute.entryPoint = sv("optjit_probe");
    WGPUComputePipeline pipeline = w_->wgpuDeviceCreateComputePipeline(device_, &cd);
    WGPUBindGroupEntry be[2] = {WGPU_BIND_GROUP_ENTRY_INIT, WGPU_BIND_GROUP_ENTRY_INIT};
    be[0].binding = 0;
    be[0].buffer = buf(*mem);
    be[0].size = io.size() * sizeof(float);
    be[1].binding = 1;
    be[1].buffer = args;
    be[1].size = 16;
    WGPUBindGroupDescriptor bd = WGPU_BIND_GROUP_DESCRIPTOR_INIT;
    bd.layout = layout;
    bd.entryCount = 2;
    bd.entries = be;
    WGPUBindGroup group = w_->wgpuDeviceCreateBindGroup(device_, &bd);
    bool ok = pop_scope("building the rounding probe").ok();
    ok = ok && write(*mem, io.data(), io.size() * sizeof(float)).ok();
    if (ok) {
      WGPUCommandEncoder enc = w_->wgpuDeviceCreateCommandEncoder(device_, nullptr);
      WGPUComputePassEncoder pass = w_->wgpuCommandEncoderBeginComputePass(enc, nullptr);
      w_->wgpuComputePassEncoderSetPipeline(pass, pipeline);
      w_->wgpuComputePassEncoderSetBindGroup(pass, 0, group, 0, nullptr);
      w_->wgpuComputePassEncoderDispatchWorkgroups(pass, kPairs / 64, 1, 1);
      w_->wgpuComputePassEncoderEnd(pass);
      w_->wgpuComputePassEncoderRelease(pass);
      ok = submit(enc, "running the rounding probe").ok() && finish().ok();
    }
    std::vector<float> got(io.size());
    ok = ok && read(got.data(), *mem, got.size() * sizeof(float)).ok();
    for (size_t i = 0; ok && i < kPairs; ++i) {
      const float x = io[2 * i], y = io[2 * i + 1];
      ok = std::bit_cast<uint32_t>(got[2 * i]) == std::bit_cast<uint32_t>(x / y) &&
           std::bit_cast<uint32_t>(got[2 * i + 1]) == std::bit_cast<uint32_t>(std::sqrt(x));
    }
    if (group) w_->wgpuBindGroupRelease(group);
    if (pipeline) w_->wgpuComputePipelineRelease(pipeline);
    if (pipeline_layout) w_->wgpuPipelineLayoutRelease(pipeline_layout);
    if (layout) w_->wgpuBindGroupLayoutRelease(layout);
    if (shader) w_->wgpuShaderModuleRelease(shader);
    if (args) w_->wgpuBufferRelease(args);
    release(*mem);
    return ok;
  }

  // The description both ways of getting a device share (open(), adopt()).
  Status describe(int index) {
    DeviceDescription& dd = desc_;
    dd.kind = "webgpu";
    dd.index = index;
    dd.name = info_.name;
    dd.performance = webgpu_performance(info_);
    dd.gpu = info_.gpu;
    // WebGPU does not say how many compute units an adapter has: 16 makes the grid cap's
    // groups per unit (the tuner tries 2..32) span 32..512 work-groups. The default, 256
    // groups of 256 invocations, two vectors of two elements each per trip, was the fastest of
    // those tried for clip+AdamW at 16M parameters on lavapipe (f32: 89 ms/step against 365 ms
    // with 8 groups and 264 ms with vectors of 4; bf16: 100 ms against 369 ms with vectors of
    // one element, where every store is two atomic read-modify-writes).
    dd.compute_units = 16;
    dd.default_launch =
        codegen::GpuLaunch{.block = 256, .items = 2, .vec = 2, .groups_per_unit = 16};
    dd.max_group = std::min(info_.limits.maxComputeInvocationsPerWorkgroup,
                            info_.limits.maxComputeWorkgroupSizeX);
    dd.addressing = Addressing::arenas;
    dd.device_step = false;
    // A kernel sees at most maxStorageBufferBindingSize bytes of a buffer (128 MiB on lavapipe,
    // GPT-2 small's parameters alone are 497 MB), so the executor binds windows of the arenas;
    // at most 1 GiB, so that a window's element offsets (i32 in WGSL, two 4-bit codes a byte)
    // stay below 2^31. OPTJIT_WEBGPU_MAX_BINDING and OPTJIT_WEBGPU_MAX_BUFFER lower the
    // binding and buffer limits, as a smaller device would (tests, or a browser's defaults of
    // 128 and 256 MiB).
    dd.binding_alignment = std::max<uint64_t>(info_.limits.minStorageBufferOffsetAlignment, 16);
    dd.max_binding =
        std::min<uint64_t>(info_.limits.maxStorageBufferBindingSize, uint64_t{1} << 30);
    auto lowered = [&](const char* name, uint64_t& limit) -> Status {
      const char* env = std::getenv(name);
      if (!env || !*env) return Status::Ok();
      char* end = nullptr;
      const unsigned long long v = std::strtoull(env, &end, 10);
      if (*end != '\0' || v < 4096 || v % dd.binding_alignment != 0)
        return make_error(
            "{}='{}' is not a byte count of at least 4096 and a multiple of '{}''s storage "
            "offset alignment ({})",
            name, env, info_.name, dd.binding_alignment);
      limit = std::min<uint64_t>(limit, v);
      return Status::Ok();
    };
    OPTJIT_TRY(lowered("OPTJIT_WEBGPU_MAX_BINDING", dd.max_binding));
    OPTJIT_TRY(lowered("OPTJIT_WEBGPU_MAX_BUFFER", info_.limits.maxBufferSize));
    dd.max_allocation = info_.limits.maxBufferSize;
    // The cheapest division that is exact here; Dekker's needs only what WGSL promises, so it
    // is the one left, unprobed. OPTJIT_WGSL_DIVISION=dekker takes it without probing (and so
    // the emulated fma too): to tell an adapter's own fma or division from the rest of the
    // kernel when its bits part from the CPU's; never needed otherwise.
    division_ = codegen::F32Division::dekker;
    const char* forced = std::getenv("OPTJIT_WGSL_DIVISION");
    if (forced && *forced && std::string_view(forced) != "dekker")
      return make_error("OPTJIT_WGSL_DIVISION='{}': the only division one can force is 'dekker'",
                        forced);
    if (!forced || !*forced)
      for (auto d : {codegen::F32Division::hardware, codegen::F32Division::fma})
        if (probe_rounding(d)) {
          division_ = d;
          break;
        }
    dd.division = codegen::to_string(division_);
    return Status::Ok();
  }

  const Api* w_ = nullptr;
  AdapterInfo info_;
  WGPUAdapter adapter_ = nullptr;
  WGPUDevice device_ = nullptr;
  WGPUQueue queue_ = nullptr;
  codegen::F32Division division_ = codegen::F32Division::dekker;  // describe()
  bool adopted_ = false;                                          // the caller's device (adopt())
  DeviceDescription desc_;
  std::string uncaptured_;
  WGPUBindGroupLayout probe_layout_ = nullptr;  // for usable()
  std::map<uint64_t, uint64_t> sizes_;
  uint64_t releases_ = 0;
  WGPUBuffer staging_ = nullptr;
  uint64_t staging_size_ = 0;
};

Expected<std::unique_ptr<Module>> WebgpuDevice::load(const plan::Plan& plan, const ModuleSpec& spec,
                                                     cache::KernelCache* cache) {
  if (spec.device_step)
    return make_error(
        "the webgpu backend has no device step (WGSL has no f64): use the host step (--step "
        "host)");
  const codegen::GpuLaunch& launch = spec.launch;
  if (static_cast<size_t>(launch.block) > desc_.max_group)
    return make_error("work-group size {} exceeds the {} invocations '{}' allows", launch.block,
                      desc_.max_group, info_.name);
  auto t0 = std::chrono::steady_clock::now();
  auto src = codegen::emit_c(plan, {codegen::CLanguage::wgsl, launch, false, division_});
  if (!src) return src.error();
  // The library compiles WGSL on every load (wgpu-native keeps no pipeline binaries through
  // this API): the cache holds the WGSL itself under its hash, so a warm cache skips the
  // emitter and records which kernels this device has run.
  const cache::KernelKey key{fingerprint_id(webgpu_exact(info_)),
                             fmt::format("{:016x}", ir::structural_hash(plan.program)),
                             codegen::source_variant("wgsl", launch, *src)};
  std::string source = *src;
  auto built = cache::cached_compile(
      cache, key, "wgsl", "the webgpu kernels",
      [&]() -> Expected<cache::Compiled> {
        cache::Compiled c;
        c.payload.assign(source.begin(), source.end());
        return c;
      },
      [&](const cache::KernelEntry& hit) {
        source.assign(hit.payload.begin(), hit.payload.end());
        return true;
      });
  if (!built) return built.error();
  auto m = std::make_unique<WebgpuModule>(*this, built->from_cache);
  OPTJIT_TRY(m->build(plan, source, launch.block));
  m->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return std::unique_ptr<Module>(std::move(m));
}

WebgpuModule::~WebgpuModule() {
  const Api& w = dev_.w();
  forget_bind_groups();
  for (auto& [ints, b] : int_buffers_) w.wgpuBufferRelease(b);
  for (auto& [name, p] : pipelines_) w.wgpuComputePipelineRelease(p);
  for (WGPUBuffer b : dummies_)
    if (b) w.wgpuBufferRelease(b);
  if (tables_) w.wgpuBufferRelease(tables_);
  if (pipeline_layout_) w.wgpuPipelineLayoutRelease(pipeline_layout_);
  if (layout_) w.wgpuBindGroupLayoutRelease(layout_);
  if (shader_) w.wgpuShaderModuleRelease(shader_);
}

Status WebgpuModule::build(const plan::Plan& plan, const std::string& source, int block) {
  const Api& w = dev_.w();
  block_ = block;
  // The bindings of c_lang.cpp's Wgsl preamble: the arenas, uniforms, rows, chunks, partials,
  // then the integer arguments.
  const size_t B = plan.buffers.size();
  bindings_ = B + 4;
  // Block-quantized formats' tables (codegen::constant_tables), after the integer arguments.
  const std::vector<codegen::ConstantTable> tables = codegen::constant_tables(plan);
  const size_t storage = bindings_ + (tables.empty() ? 0 : 1);
  if (storage > dev_.info().limits.maxStorageBuffersPerShaderStage)
    return make_error(
        "this pipeline needs {} storage buffers per kernel; WebGPU adapter '{}' allows {}", storage,
        dev_.info().name, dev_.info().limits.maxStorageBuffersPerShaderStage);
  std::vector<WGPUBindGroupLayoutEntry> entries(bindings_ + (tables.empty() ? 1 : 2));
  for (size_t i = 0; i < entries.size(); ++i) {
    WGPUBindGroupLayoutEntry& e = entries[i];
    e = WGPU_BIND_GROUP_LAYOUT_ENTRY_INIT;
    e.binding = static_cast<uint32_t>(i);
    e.visibility = WGPUShaderStage_Compute;
    e.buffer.type = i == bindings_                           ? WGPUBufferBindingType_Uniform
                    : (i >= B && i < B + 3) || i > bindings_ ? WGPUBufferBindingType_ReadOnlyStorage
                                                             : WGPUBufferBindingType_Storage;
  }
  if (!tables.empty()) {
    std::vector<uint32_t> all;
    for (const auto& t : tables) all.insert(all.end(), t.values.begin(), t.values.end());
    dev_.push_scope();
    WGPUBufferDescriptor d = WGPU_BUFFER_DESCRIPTOR_INIT;
    d.usage = WGPUBufferUsage_Storage;
    d.size = (all.size() * 4 + 15) / 16 * 16;
    d.mappedAtCreation = true;
    tables_ = w.wgpuDeviceCreateBuffer(dev_.device(), &d);
    if (tables_) {
      void* p = w.wgpuBufferGetMappedRange(tables_, 0, d.size);
      if (p) std::memcpy(p, all.data(), all.size() * 4);
      w.wgpuBufferUnmap(tables_);
    }
    OPTJIT_TRY(dev_.pop_scope("uploading the quantization tables"));
  }
  dev_.push_scope();
  WGPUShaderSourceWGSL wgsl = WGPU_SHADER_SOURCE_WGSL_INIT;
  wgsl.code = sv(source);
  WGPUShaderModuleDescriptor md = WGPU_SHADER_MODULE_DESCRIPTOR_INIT;
  md.nextInChain = &wgsl.chain;
  md.label = sv("optjit");
  // optjit's kernels index only what the executor's tables say, within the arenas it sized,
  // and every loop is bounded, as on CUDA and OpenCL, which check nothing either; set
  // OPTJIT_WGPU_BOUNDS_CHECKS=1 to have WebGPU's checks anyway. Another value is an error:
  // "false" or "off" had turned them on.
  const char* checks = std::getenv("OPTJIT_WGPU_BOUNDS_CHECKS");
  const std::string_view want = checks ? checks : "";
  if (!want.empty() && want != "0" && want != "1")
    return make_error(
        "OPTJIT_WGPU_BOUNDS_CHECKS='{}': 1 keeps WebGPU's bounds checks in the "
        "kernels, 0 (or unset) leaves them out",
        want);
  if (w.wgpuDeviceCreateShaderModuleTrusted && want != "1")
    shader_ =
        w.wgpuDeviceCreateShaderModuleTrusted(dev_.device(), &md, WGPUShaderRuntimeChecks_None);
  else
    shader_ = w.wgpuDeviceCreateShaderModule(dev_.device(), &md);
  OPTJIT_TRY(dev_.pop_scope("compiling the WGSL kernels"));
  dev_.push_scope();
  WGPUBindGroupLayoutDescriptor ld = WGPU_BIND_GROUP_LAYOUT_DESCRIPTOR_INIT;
  ld.entryCount = entries.size();
  ld.entries = entries.data();
  layout_ = w.wgpuDeviceCreateBindGroupLayout(dev_.device(), &ld);
  WGPUPipelineLayoutDescriptor pd = WGPU_PIPELINE_LAYOUT_DESCRIPTOR_INIT;
  pd.bindGroupLayoutCount = 1;
  pd.bindGroupLayouts = &layout_;
  pipeline_layout_ = w.wgpuDeviceCreatePipelineLayout(dev_.device(), &pd);
  OPTJIT_TRY(dev_.pop_scope("creating the kernels' bind group layout"));
  for (const KernelId& id : module_kernels(plan, false)) {
    const std::string name = id.name();
    dev_.push_scope();
    WGPUComputePipelineDescriptor cd = WGPU_COMPUTE_PIPELINE_DESCRIPTOR_INIT;
    cd.layout = pipeline_layout_;
    cd.compute.module = shader_;
    cd.compute.entryPoint = sv(name);
    WGPUComputePipeline p = w.wgpuDeviceCreateComputePipeline(dev_.device(), &cd);
    pipelines_[name] = p;
    OPTJIT_TRY(dev_.pop_scope("building kernel " + name));
  }
  // One small buffer per binding for launches that pass none (distinct: a writable binding
  // may not share its buffer with another binding of the same dispatch).
  dummies_.assign(bindings_ + 1, nullptr);
  for (size_t i = 0; i <= bindings_; ++i) {
    WGPUBufferDescriptor d = WGPU_BUFFER_DESCRIPTOR_INIT;
    d.usage = (i == bindings_ ? WGPUBufferUsage_Uniform : WGPUBufferUsage_Storage) |
              WGPUBufferUsage_CopyDst;
    d.size = 16;
    dummies_[i] = w.wgpuDeviceCreateBuffer(dev_.device(), &d);
  }
  return Status::Ok();
}

Status WebgpuModule::launch(KernelId kernel, size_t groups, size_t group_size,
                            std::span<const KernelArg> args) {
  const Api& w = dev_.w();
  auto it = pipelines_.find(kernel.name());
  if (it == pipelines_.end()) return make_error("no kernel {} in this module", kernel.name());
  if (group_size != static_cast<size_t>(block_))
    return make_error(
        "WGSL kernels run in work-groups of the size they were compiled for ({}, "
        "not {})",
        block_, group_size);
  if (groups == 0) return Status::Ok();
  if (groups > dev_.info().limits.maxComputeWorkgroupsPerDimension)
    return make_error("{} work-groups exceed the {} WebGPU allows in one dispatch", groups,
                      dev_.info().limits.maxComputeWorkgroupsPerDimension);
  std::vector<WGPUBindGroupEntry> entries;
  std::array<int32_t, 4> ints = {0, 0, 0, 0};
  size_t nint = 0;
  for (const KernelArg& a : args) {
    if (!a.is_memory) {
      // The fourth stays 0: the kernels' opaque zero (optjit_mul, codegen/c_lang.cpp).
      if (nint == 3) return make_error("a WGSL kernel takes at most 3 integer arguments");
      if (a.integer < INT32_MIN || a.integer > INT32_MAX)
        return make_error("WGSL kernel argument {} does not fit in 32 bits", a.integer);
      ints[nint++] = static_cast<int32_t>(a.integer);
      continue;
    }
    if (entries.size() == bindings_)
      return make_error("{} takes {} buffers; more were given", kernel.name(), bindings_);
    // The argument's window: from its offset, `bytes` of it (0: the rest of the buffer).
    const uint64_t total = dev_.size_of(a.memory), at = a.memory.offset;
    const uint64_t limit = dev_.description().max_binding;
    if (a.memory && (at % dev_.description().binding_alignment != 0 || at >= total))
      return make_error(
          "{}: argument {} is bound at offset {} of a buffer of {} bytes (WebGPU "
          "binds from multiples of {} inside it)",
          kernel.name(), entries.size(), at, total, dev_.description().binding_alignment);
    const uint64_t n = a.bytes == 0 ? total - at : std::min((a.bytes + 3) / 4 * 4, total - at);
    if (a.memory && n > limit)
      return make_error(
          "{}: argument {} spans {} bytes; WebGPU adapter '{}' binds at most {} bytes to a "
          "kernel",
          kernel.name(), entries.size(), n, dev_.info().name, limit);
    WGPUBindGroupEntry e = WGPU_BIND_GROUP_ENTRY_INIT;
    e.binding = static_cast<uint32_t>(entries.size());
    e.buffer = a.memory ? WebgpuDevice::buf(a.memory) : dummies_[entries.size()];
    e.offset = a.memory ? at : 0;
    e.size = a.memory ? n : WGPU_WHOLE_SIZE;
    entries.push_back(e);
  }
  while (entries.size() < bindings_) {  // kernels without reductions get no partials
    WGPUBindGroupEntry e = WGPU_BIND_GROUP_ENTRY_INIT;
    e.binding = static_cast<uint32_t>(entries.size());
    e.buffer = dummies_[entries.size()];
    e.size = WGPU_WHOLE_SIZE;
    entries.push_back(e);
  }
  // A step launches the same kernels with the same buffers every time: bind groups (one layout
  // for every kernel of the module) and the integer arguments' buffers are made once and kept,
  // until the device releases a buffer a kept group might name. Not a group that names a
  // caller's buffer: the caller may destroy it, and a kept group's destroyed buffer is found
  // only when the launch is submitted, which wgpu-native takes as fatal (the process aborts);
  // making the group validates it.
  bool keep = true;
  for (const KernelArg& a : args)
    if (a.is_memory && a.memory && !dev_.owns(a.memory)) keep = false;
  if (releases_seen_ != dev_.releases()) {
    forget_bind_groups();
    releases_seen_ = dev_.releases();
  }
  std::vector<uint64_t> key;  // (only a group that may be kept is looked for)
  if (keep) {
    for (const WGPUBindGroupEntry& e : entries)
      key.insert(key.end(), {reinterpret_cast<uint64_t>(e.buffer), e.offset, e.size});
    for (int32_t v : ints) key.push_back(static_cast<uint32_t>(v));
  }
  WGPUBindGroup group = nullptr;
  if (auto kept = keep ? bind_groups_.find(key) : bind_groups_.end(); kept != bind_groups_.end()) {
    group = kept->second;
  } else {
    auto ubuf = int_buffer(ints);
    if (!ubuf) return ubuf.error();
    WGPUBindGroupEntry ue = WGPU_BIND_GROUP_ENTRY_INIT;
    ue.binding = static_cast<uint32_t>(bindings_);
    ue.buffer = *ubuf;
    ue.size = WGPU_WHOLE_SIZE;
    entries.push_back(ue);
    if (tables_) {
      WGPUBindGroupEntry te = WGPU_BIND_GROUP_ENTRY_INIT;
      te.binding = static_cast<uint32_t>(bindings_ + 1);
      te.buffer = tables_;
      te.size = WGPU_WHOLE_SIZE;
      entries.push_back(te);
    }
    dev_.push_scope();
    WGPUBindGroupDescriptor bd = WGPU_BIND_GROUP_DESCRIPTOR_INIT;
    bd.layout = layout_;
    bd.entryCount = entries.size();
    bd.entries = entries.data();
    group = w.wgpuDeviceCreateBindGroup(dev_.device(), &bd);
    Status bound = dev_.pop_scope("binding the arguments of " + kernel.name());
    if (!bound.ok()) {
      if (group) w.wgpuBindGroupRelease(group);
      return bound;
    }
    if (keep) {
      if (bind_groups_.size() >= kKeptBindGroups) forget_bind_groups();
      bind_groups_.emplace(std::move(key), group);
    }
  }
  WGPUCommandEncoder enc = w.wgpuDeviceCreateCommandEncoder(dev_.device(), nullptr);
  WGPUComputePassEncoder pass = w.wgpuCommandEncoderBeginComputePass(enc, nullptr);
  w.wgpuComputePassEncoderSetPipeline(pass, it->second);
  w.wgpuComputePassEncoderSetBindGroup(pass, 0, group, 0, nullptr);
  w.wgpuComputePassEncoderDispatchWorkgroups(pass, static_cast<uint32_t>(groups), 1, 1);
  w.wgpuComputePassEncoderEnd(pass);
  w.wgpuComputePassEncoderRelease(pass);
  Status launched = dev_.submit(enc, "launching a kernel");
  if (!keep) w.wgpuBindGroupRelease(group);  // (the submitted work holds its own reference)
  return launched;
}

// The buffer of integer arguments `ints`, made once per distinct value (a step's are the chunk
// counts of its passes) and kept with the module.
Expected<WGPUBuffer> WebgpuModule::int_buffer(const std::array<int32_t, 4>& ints) {
  if (auto kept = int_buffers_.find(ints); kept != int_buffers_.end()) return kept->second;
  const Api& w = dev_.w();
  if (int_buffers_.size() >= kKeptBindGroups) {  // kept groups hold their own references
    for (auto& [v, b] : int_buffers_) w.wgpuBufferRelease(b);
    int_buffers_.clear();
  }
  WGPUBufferDescriptor ud = WGPU_BUFFER_DESCRIPTOR_INIT;
  ud.usage = WGPUBufferUsage_Uniform;
  ud.size = sizeof(ints);
  ud.mappedAtCreation = true;
  WGPUBuffer ubuf = w.wgpuDeviceCreateBuffer(dev_.device(), &ud);
  if (!ubuf) return make_error("WebGPU: no buffer for a kernel's integer arguments");
  std::memcpy(w.wgpuBufferGetMappedRange(ubuf, 0, sizeof(ints)), ints.data(), sizeof(ints));
  w.wgpuBufferUnmap(ubuf);
  int_buffers_.emplace(ints, ubuf);
  return ubuf;
}

// Bind groups hold their own references (the queue keeps what it uses alive until the work is
// done), so releasing ours is safe at any time.
void WebgpuModule::forget_bind_groups() {
  for (auto& [key, group] : bind_groups_) dev_.w().wgpuBindGroupRelease(group);
  bind_groups_.clear();
}

const DeviceKindRegistration registration({
    .name = "webgpu",
    .auto_label = "WebGPU GPU",
    .list_order = 3,
    .auto_rank = 2,
    .device_step = false,
    .open = [](int index, void* queue) -> Expected<std::shared_ptr<Device>> {
      // Devices by their WGPUDevice, so that a second optimizer given one (queue()) shares the
      // device and its buffers: WebGPU buffers belong to the device that made them.
      static std::mutex mu;
      static std::map<void*, std::weak_ptr<WebgpuDevice>> live;
      std::lock_guard lock(mu);
      if (queue) {  // a WGPUDevice: one optjit opened (queue()), or the caller's
        OPTJIT_TRY(check_handle(queue, "queue", "WGPUDevice"));
        auto it = live.find(queue);
        if (it != live.end())
          if (auto d = it->second.lock()) return std::shared_ptr<Device>(std::move(d));
        auto d = WebgpuDevice::adopt(static_cast<WGPUDevice>(queue), index);
        if (!d) return d.error();
        live[queue] = *d;
        return std::shared_ptr<Device>(std::move(*d));
      }
      auto d = WebgpuDevice::open(index);
      if (!d) return d.error();
      live[(*d)->queue()] = *d;
      return std::shared_ptr<Device>(std::move(*d));
    },
    .list = []() -> Expected<std::vector<DeviceRecord>> {
      auto found = find_adapters();
      if (!found) return found.error();
      std::vector<DeviceRecord> out;
      for (const auto& f : *found)
        out.push_back({"webgpu", f.info.index, fmt::format("{} ({})", f.info.name, f.info.backend),
                       f.info.gpu, webgpu_exact(f.info), webgpu_performance(f.info)});
      return out;
    },
});

}  // namespace

Expected<std::map<std::string, size_t>> webgpu_live_objects() {
  auto a = api();
  if (!a) return a.error();
  auto inst = instance();
  if (!inst) return inst.error();
  if (!(*a)->wgpuGenerateReport)
    return make_error("WebGPU: {} does not report its objects (not wgpu-native)", (*a)->path);
  WGPUGlobalReport r{};
  (*a)->wgpuGenerateReport(*inst, &r);
  const WGPUHubReport& h = r.hub;
  std::map<std::string, size_t> live;
  for (const auto& [name, reg] : std::initializer_list<std::pair<const char*, WGPURegistryReport>>{
           {"adapters", h.adapters},
           {"devices", h.devices},
           {"queues", h.queues},
           {"pipeline layouts", h.pipelineLayouts},
           {"shader modules", h.shaderModules},
           {"bind group layouts", h.bindGroupLayouts},
           {"bind groups", h.bindGroups},
           {"command buffers", h.commandBuffers},
           {"compute pipelines", h.computePipelines},
           {"query sets", h.querySets},
           {"buffers", h.buffers}})
    live[name] = reg.numAllocated;
  return live;
}

Expected<std::string> webgpu_library() {
  auto a = api();
  if (!a) return a.error();
  return (*a)->path;
}

}  // namespace optjit::runtime
