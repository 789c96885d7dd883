// An application's own WebGPU device, made through wgpu-native's C API (the library optjit
// loads, opened again here, as wgpu-py or a C application opens it), on its own instance: what
// a caller hands to OptimizerOptions::queue for the webgpu backend.
#pragma once

#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <webgpu.h>
#include <wgpu.h>

namespace optjit::testing {

class WgpuApp {
 public:
  // The first adapter with storage buffers enough for compute, and a device on it with
  // `limits` (the adapter's own where null: WebGPU's defaults are the device's otherwise).
  explicit WgpuApp(bool adapter_limits) {
    const char* env = std::getenv("OPTJIT_WGPU_LIBRARY");
#ifdef OPTJIT_TEST_WGPU_LIBRARY
    const char* path = env && *env ? env : OPTJIT_TEST_WGPU_LIBRARY;
#else
    const char* path = env && *env ? env : "libwgpu_native.so";
#endif
    if (!std::getenv("XDG_RUNTIME_DIR")) ::setenv("XDG_RUNTIME_DIR", "/tmp", 0);  // Mesa asks
    lib_ = ::dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib_) {
      why = std::string("dlopen: ") + ::dlerror();
      return;
    }
    instance_ = fn<decltype(&wgpuCreateInstance)>("wgpuCreateInstance")(nullptr);
    auto enumerate = fn<decltype(&wgpuInstanceEnumerateAdapters)>("wgpuInstanceEnumerateAdapters");
    std::vector<WGPUAdapter> adapters(enumerate(instance_, nullptr, nullptr));
    if (!adapters.empty()) enumerate(instance_, nullptr, adapters.data());
    auto get_limits = fn<decltype(&wgpuAdapterGetLimits)>("wgpuAdapterGetLimits");
    WGPULimits limits = WGPU_LIMITS_INIT;
    auto release = fn<decltype(&wgpuAdapterRelease)>("wgpuAdapterRelease");
    for (size_t i = 0; i < adapters.size(); ++i) {
      WGPULimits l = WGPU_LIMITS_INIT;
      get_limits(adapters[i], &l);
      if (!adapter_ && l.maxStorageBuffersPerShaderStage >= 8)
        adapter_ = adapters[i], limits = l;
      else
        release(adapters[i]);  // the adapters not taken
    }
    if (!adapter_) {
      why = "no adapter with compute";
      return;
    }
    WGPUDeviceDescriptor desc = WGPU_DEVICE_DESCRIPTOR_INIT;
    limits.nextInChain = nullptr;
    if (adapter_limits) desc.requiredLimits = &limits;
    desc.uncapturedErrorCallbackInfo.callback = [](WGPUDevice const*, WGPUErrorType,
                                                   WGPUStringView message, void* self, void*) {
      static_cast<WgpuApp*>(self)->uncaptured += std::string(message.data, message.length);
    };
    desc.uncapturedErrorCallbackInfo.userdata1 = this;
    WGPURequestDeviceCallbackInfo cb = WGPU_REQUEST_DEVICE_CALLBACK_INFO_INIT;
    cb.mode = WGPUCallbackMode_AllowProcessEvents;
    cb.callback = [](WGPURequestDeviceStatus, WGPUDevice d, WGPUStringView, void* self, void*) {
      static_cast<WgpuApp*>(self)->device = d;
    };
    cb.userdata1 = this;
    fn<decltype(&wgpuAdapterRequestDevice)>("wgpuAdapterRequestDevice")(adapter_, &desc, cb);
    auto process = fn<decltype(&wgpuInstanceProcessEvents)>("wgpuInstanceProcessEvents");
    for (int i = 0; i < 100000 && !device; ++i) process(instance_);
    if (!device) why = "no device";
  }
  ~WgpuApp() {
    if (device) fn<decltype(&wgpuDeviceRelease)>("wgpuDeviceRelease")(device);
    if (adapter_) fn<decltype(&wgpuAdapterRelease)>("wgpuAdapterRelease")(adapter_);
    if (instance_) fn<decltype(&wgpuInstanceRelease)>("wgpuInstanceRelease")(instance_);
  }
  WgpuApp(const WgpuApp&) = delete;
  WgpuApp& operator=(const WgpuApp&) = delete;

  // A buffer of `bytes` with `usage`, holding `data` (when given); null if the library refused.
  WGPUBuffer buffer(uint64_t bytes, WGPUBufferUsage usage, const void* data = nullptr) {
    WGPUBufferDescriptor d = WGPU_BUFFER_DESCRIPTOR_INIT;
    d.size = bytes;
    d.usage = usage;
    WGPUBuffer b = fn<decltype(&wgpuDeviceCreateBuffer)>("wgpuDeviceCreateBuffer")(device, &d);
    if (b && data) {
      WGPUQueue q = fn<decltype(&wgpuDeviceGetQueue)>("wgpuDeviceGetQueue")(device);
      fn<decltype(&wgpuQueueWriteBuffer)>("wgpuQueueWriteBuffer")(q, b, 0, data, bytes);
      fn<decltype(&wgpuQueueRelease)>("wgpuQueueRelease")(q);
    }
    return b;
  }
  void destroy(WGPUBuffer b) { fn<decltype(&wgpuBufferDestroy)>("wgpuBufferDestroy")(b); }
  void release(WGPUBuffer b) { fn<decltype(&wgpuBufferRelease)>("wgpuBufferRelease")(b); }

  WGPUDevice device = nullptr;
  std::string why;         // why there is no device
  std::string uncaptured;  // what the device's uncaptured-error callback was told

 private:
  template <class F>
  F fn(const char* name) {
    return reinterpret_cast<F>(::dlsym(lib_, name));
  }
  void* lib_ = nullptr;
  WGPUInstance instance_ = nullptr;
  WGPUAdapter adapter_ = nullptr;
};

}  // namespace optjit::testing
