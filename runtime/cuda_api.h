// The CUDA driver entry points optjit uses, resolved with dlsym from libcuda.so.1 (internal).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ir/error.h"

namespace optjit::runtime::cuda {

using CUresult = int;
using CUdevice = int;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUdeviceptr = unsigned long long;
using CUgraph = struct CUgraph_st*;
using CUgraphExec = struct CUgraphExec_st*;

struct Api {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDriverGetVersion)(int*);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuDeviceTotalMem)(size_t*, CUdevice);
  CUresult (*cuDeviceGetUuid)(unsigned char*, CUdevice);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuCtxPushCurrent)(CUcontext);
  CUresult (*cuCtxPopCurrent)(CUcontext*);
  CUresult (*cuCtxGetCurrent)(CUcontext*);
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream);
  CUresult (*cuMemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemsetD32Async)(CUdeviceptr, unsigned, size_t, CUstream);
  CUresult (*cuStreamCreate)(CUstream*, unsigned);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuStreamQuery)(CUstream);                             // optional
  CUresult (*cuLaunchHostFunc)(CUstream, void (*)(void*), void*);  // optional (tests gate with it)
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void**, void**);
  // What the driver knows of an address (optional: where absent, the caller's memory is not
  // checked). An address it does not know reads as zeros, CUDA_SUCCESS.
  CUresult (*cuPointerGetAttributes)(unsigned, int*, void**, CUdeviceptr);
  // CUDA graphs (optional: null where the driver lacks them; CudaOptions::graph says so).
  CUresult (*cuStreamBeginCapture)(CUstream, int /* CUstreamCaptureMode */);
  CUresult (*cuStreamEndCapture)(CUstream, CUgraph*);
  CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec*, CUgraph, unsigned long long);
  CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
  CUresult (*cuGraphExecDestroy)(CUgraphExec);
  CUresult (*cuGraphDestroy)(CUgraph);
};

inline constexpr int kCaptureModeThreadLocal = 1;  // CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
// CUpointer_attribute values, and the CUmemorytype of device memory.
inline constexpr int kPointerMemoryType = 2, kPointerIsManaged = 8, kPointerDeviceOrdinal = 9,
                     kPointerLegacyIpc = 10, kPointerRangeStart = 11, kPointerRangeSize = 12;
inline constexpr unsigned kMemoryTypeDevice = 2;
/// The default streams' handles (CU_STREAM_LEGACY, CU_STREAM_PER_THREAD): a framework's default
/// stream is named to optjit as the first, since a null queue means a stream of optjit's own.
inline const CUstream kStreamLegacy = reinterpret_cast<CUstream>(uintptr_t{0x1});
inline const CUstream kStreamPerThread = reinterpret_cast<CUstream>(uintptr_t{0x2});

/// The loaded driver, or why there is none ("no CUDA driver on this machine ...").
Expected<const Api*> api();
/// "cuMemAlloc failed: out of memory (error 2)"; an unknown code reads "unknown error".
Error fail(const char* what, CUresult r);

/// The device's primary context, retained once for the whole process (retaining and releasing
/// it per backend would create and destroy the context, and reload modules, every time; the
/// tuner builds a backend per candidate). The driver releases it when the process exits.
Expected<CUcontext> primary_context(CUdevice device);

/// Makes `ctx` current for a scope by pushing it, and pops it at the end, so the caller's
/// current context (PyTorch's, on whichever GPU it is using) is as it was afterwards.
class ContextScope {
 public:
  ContextScope(const Api& api, CUcontext ctx) : api_(api), ok_(api.cuCtxPushCurrent(ctx) == 0) {}
  ~ContextScope() {
    CUcontext popped = nullptr;
    if (ok_) api_.cuCtxPopCurrent(&popped);
  }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;
  bool ok() const { return ok_; }

 private:
  const Api& api_;
  bool ok_;
};

inline constexpr int kAttrSmCount = 16, kAttrCcMajor = 75, kAttrCcMinor = 76;

}  // namespace optjit::runtime::cuda
