// A place in a device's memory, as the executor and its callers name it (internal to runtime/,
// also used by the public API to bind a framework's device tensors).
#pragma once

#include <cstdint>

namespace optjit::runtime {

/// A handle the device understands (an address on the CPU and on CUDA, a cl_mem on OpenCL)
/// and a byte offset into it. Also how a caller hands the executor its own memory (a
/// framework's parameter on the GPU).
struct DeviceMemory {
  uint64_t handle = 0;
  uint64_t offset = 0;
  explicit operator bool() const { return handle != 0; }
  bool operator==(const DeviceMemory&) const = default;
  DeviceMemory at(uint64_t bytes) const { return {handle, offset + bytes}; }
};

}  // namespace optjit::runtime
