// OpenCL devices as the ICD loader finds them (PoCL gives one on every CPU), for `optjit
// devices`, fingerprints and tuning. The device itself is runtime/opencl_device.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/error.h"

namespace optjit::runtime {

struct OpenclDeviceInfo {
  int index = 0;  // position in opencl_devices()
  std::string platform, platform_version, name, vendor, driver_version, version, uuid;
  bool gpu = false;
  uint32_t compute_units = 0;
  uint64_t global_memory = 0;
  size_t max_work_group = 0;
  bool fp64 = false;
};

/// The exact fingerprint (what gates reuse of binaries) and the performance one (what gates
/// reuse of tuning decisions) of an OpenCL device.
std::string opencl_exact(const OpenclDeviceInfo& i);
std::string opencl_performance(const OpenclDeviceInfo& i);

/// Every device of every OpenCL platform; an error when the ICD loader finds no platform.
Expected<std::vector<OpenclDeviceInfo>> opencl_devices();

}  // namespace optjit::runtime
