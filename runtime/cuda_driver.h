// The CUDA driver API, loaded at run time with dlopen("libcuda.so.1"), so optjit's library and
// CLI start on machines without a GPU and say plainly that there is none.
#pragma once

#include <string>
#include <vector>

#include "ir/error.h"

namespace optjit::runtime {

struct CudaDeviceInfo {
  int ordinal = 0;
  std::string name, uuid;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  uint64_t memory = 0;
  int driver_version = 0;  // e.g. 13000
  std::string arch() const { return "sm_" + std::to_string(cc_major) + std::to_string(cc_minor); }
};

/// The exact and performance fingerprints of a CUDA device (runtime/devices.h).
std::string cuda_exact(const CudaDeviceInfo& i);
std::string cuda_performance(const CudaDeviceInfo& i);

/// The CUDA devices, or an error that says why there are none (no driver library, no
/// device, a driver error).
Expected<std::vector<CudaDeviceInfo>> cuda_devices();

}  // namespace optjit::runtime
