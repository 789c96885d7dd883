#include "runtime/cuda_driver.h"

#include <dlfcn.h>

#include <map>
#include <mutex>

#include "runtime/cuda_api.h"

namespace optjit::runtime {

namespace cuda {

namespace {
const Api* loaded_api = nullptr;
}  // namespace

Expected<const Api*> api() {
  static Api a{};
  loaded_api = &a;
  static std::string error;
  static bool tried = false;
  if (!tried) {
    tried = true;
    void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      error =
          "no CUDA driver on this machine (libcuda.so.1 not found), so no NVIDIA GPU can be used; "
          "optjit compile --backend cuda still builds cubins";
    } else {
      // Optional entry points (CUDA graphs) stay null where the driver lacks them.
      auto sym = [&](auto& fn, const char* name, bool required = true) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(lib, name));
        if (!fn && required && error.empty()) error = fmt::format("the CUDA driver lacks {}", name);
      };
      sym(a.cuInit, "cuInit");
      sym(a.cuDriverGetVersion, "cuDriverGetVersion");
      sym(a.cuDeviceGetCount, "cuDeviceGetCount");
      sym(a.cuDeviceGet, "cuDeviceGet");
      sym(a.cuDeviceGetName, "cuDeviceGetName");
      sym(a.cuDeviceGetAttribute, "cuDeviceGetAttribute");
      sym(a.cuDeviceTotalMem, "cuDeviceTotalMem_v2");
      sym(a.cuDeviceGetUuid, "cuDeviceGetUuid");
      sym(a.cuGetErrorString, "cuGetErrorString");
      sym(a.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
      sym(a.cuCtxPushCurrent, "cuCtxPushCurrent_v2");
      sym(a.cuCtxPopCurrent, "cuCtxPopCurrent_v2");
      sym(a.cuCtxGetCurrent, "cuCtxGetCurrent");
      sym(a.cuModuleLoadData, "cuModuleLoadData");
      sym(a.cuModuleUnload, "cuModuleUnload");
      sym(a.cuModuleGetFunction, "cuModuleGetFunction");
      sym(a.cuMemAlloc, "cuMemAlloc_v2");
      sym(a.cuMemFree, "cuMemFree_v2");
      sym(a.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
      sym(a.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
      sym(a.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
      sym(a.cuMemsetD32Async, "cuMemsetD32Async");
      sym(a.cuStreamCreate, "cuStreamCreate");
      sym(a.cuStreamDestroy, "cuStreamDestroy_v2");
      sym(a.cuStreamSynchronize, "cuStreamSynchronize");
      sym(a.cuStreamQuery, "cuStreamQuery", false);
      sym(a.cuLaunchHostFunc, "cuLaunchHostFunc", false);
      sym(a.cuLaunchKernel, "cuLaunchKernel");
      sym(a.cuPointerGetAttributes, "cuPointerGetAttributes", false);
      sym(a.cuStreamBeginCapture, "cuStreamBeginCapture_v2", false);
      sym(a.cuStreamEndCapture, "cuStreamEndCapture", false);
      sym(a.cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", false);
      sym(a.cuGraphLaunch, "cuGraphLaunch", false);
      sym(a.cuGraphExecDestroy, "cuGraphExecDestroy", false);
      sym(a.cuGraphDestroy, "cuGraphDestroy", false);
      if (error.empty()) {
        CUresult r = a.cuInit(0);
        if (r != 0) error = fail("starting the CUDA driver", r).message;
      }
    }
  }
  if (!error.empty()) return make_error("{}", error);
  return &a;
}

Error fail(const char* what, CUresult r) {
  const char* s = nullptr;
  // cuGetErrorString leaves the string null (and returns an error) for a code it does not know.
  if (loaded_api && loaded_api->cuGetErrorString && loaded_api->cuGetErrorString(r, &s) != 0)
    s = nullptr;
  return make_error("CUDA: {} failed: {} (error {})", what, s ? s : "unknown error", r);
}

Expected<CUcontext> primary_context(CUdevice device) {
  auto a = api();
  if (!a) return a.error();
  static std::mutex mutex;
  static std::map<CUdevice, CUcontext> retained;
  std::lock_guard lock(mutex);
  if (auto it = retained.find(device); it != retained.end()) return it->second;
  CUcontext ctx = nullptr;
  if (CUresult r = (*a)->cuDevicePrimaryCtxRetain(&ctx, device); r != 0)
    return fail("cuDevicePrimaryCtxRetain", r);
  retained.emplace(device, ctx);
  return ctx;
}

}  // namespace cuda

Expected<std::vector<CudaDeviceInfo>> cuda_devices() {
  auto a = cuda::api();
  if (!a) return a.error();
  const cuda::Api& D = **a;
  int count = 0, version = 0;
  D.cuDriverGetVersion(&version);
  if (D.cuDeviceGetCount(&count) != 0 || count == 0)
    return make_error("the CUDA driver found no GPU");
  std::vector<CudaDeviceInfo> out;
  for (int i = 0; i < count; ++i) {
    cuda::CUdevice dev;
    if (D.cuDeviceGet(&dev, i) != 0) continue;
    CudaDeviceInfo info;
    info.ordinal = i;
    info.driver_version = version;
    char name[256] = {};
    D.cuDeviceGetName(name, sizeof(name), dev);
    info.name = name;
    D.cuDeviceGetAttribute(&info.cc_major, cuda::kAttrCcMajor, dev);
    D.cuDeviceGetAttribute(&info.cc_minor, cuda::kAttrCcMinor, dev);
    D.cuDeviceGetAttribute(&info.sm_count, cuda::kAttrSmCount, dev);
    size_t mem = 0;
    D.cuDeviceTotalMem(&mem, dev);
    info.memory = mem;
    unsigned char uuid[16] = {};
    if (D.cuDeviceGetUuid(uuid, dev) == 0)
      for (unsigned char c : uuid) info.uuid += fmt::format("{:02x}", c);
    out.push_back(info);
  }
  return out;
}

}  // namespace optjit::runtime
