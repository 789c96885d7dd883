#include "runtime/cuda_driver.h"

#include <dlfcn.h>

namespace optjit::runtime {

namespace {

// The few driver entry points discovery needs, with the driver's own signatures.
using CUresult = int;
using CUdevice = int;
struct Driver {
  void* lib = nullptr;
  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuDriverGetVersion)(int*) = nullptr;
  CUresult (*cuDeviceGetCount)(int*) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDeviceGetName)(char*, int, CUdevice) = nullptr;
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice) = nullptr;
  CUresult (*cuDeviceTotalMem)(size_t*, CUdevice) = nullptr;
  CUresult (*cuDeviceGetUuid)(unsigned char*, CUdevice) = nullptr;
  CUresult (*cuGetErrorString)(CUresult, const char**) = nullptr;
};

constexpr int kAttrSmCount = 16, kAttrCcMajor = 75, kAttrCcMinor = 76;

Expected<Driver*> driver() {
  static Driver d;
  static std::string error;
  static bool tried = false;
  if (!tried) {
    tried = true;
    d.lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!d.lib) {
      error =
          "no CUDA driver on this machine (libcuda.so.1 not found), so no NVIDIA GPU can be used; "
          "optjit compile --backend cuda still builds cubins";
    } else {
      auto sym = [&](auto& fn, const char* name) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(d.lib, name));
        if (!fn && error.empty()) error = fmt::format("the CUDA driver lacks {}", name);
      };
      sym(d.cuInit, "cuInit");
      sym(d.cuDriverGetVersion, "cuDriverGetVersion");
      sym(d.cuDeviceGetCount, "cuDeviceGetCount");
      sym(d.cuDeviceGet, "cuDeviceGet");
      sym(d.cuDeviceGetName, "cuDeviceGetName");
      sym(d.cuDeviceGetAttribute, "cuDeviceGetAttribute");
      sym(d.cuDeviceTotalMem, "cuDeviceTotalMem_v2");
      sym(d.cuDeviceGetUuid, "cuDeviceGetUuid");
      sym(d.cuGetErrorString, "cuGetErrorString");
      if (error.empty()) {
        CUresult r = d.cuInit(0);
        if (r != 0) {
          const char* s = "unknown error";
          d.cuGetErrorString(r, &s);
          error = fmt::format("the CUDA driver did not start: {} (error {})", s, r);
        }
      }
    }
  }
  if (!error.empty()) return make_error("{}", error);
  return &d;
}

}  // namespace

Expected<std::vector<CudaDeviceInfo>> cuda_devices() {
  auto d = driver();
  if (!d) return d.error();
  Driver& D = **d;
  int count = 0, version = 0;
  D.cuDriverGetVersion(&version);
  if (D.cuDeviceGetCount(&count) != 0 || count == 0)
    return make_error("the CUDA driver found no GPU");
  std::vector<CudaDeviceInfo> out;
  for (int i = 0; i < count; ++i) {
    CUdevice dev;
    if (D.cuDeviceGet(&dev, i) != 0) continue;
    CudaDeviceInfo info;
    info.ordinal = i;
    info.driver_version = version;
    char name[256] = {};
    D.cuDeviceGetName(name, sizeof(name), dev);
    info.name = name;
    D.cuDeviceGetAttribute(&info.cc_major, kAttrCcMajor, dev);
    D.cuDeviceGetAttribute(&info.cc_minor, kAttrCcMinor, dev);
    D.cuDeviceGetAttribute(&info.sm_count, kAttrSmCount, dev);
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
