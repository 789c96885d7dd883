// Every device on every backend, with the fingerprints that key compiled kernels and tuning.
#pragma once

#include <string>
#include <vector>

#include "codegen/version.h"
#include "ir/error.h"

namespace optjit::runtime {

using codegen::kCodegenVersion;

struct DeviceRecord {
  std::string backend;  // "cpu" | "opencl" | "cuda"
  int index = 0;
  std::string name;
  bool gpu = false;
  std::string
      exact;  // what gates reuse of binaries: target, features, compiler, driver, codegen version
  std::string performance;       // what gates reuse of tuning results: architecture and unit count
  std::string exact_id() const;  // XXH3 of `exact`, 16 hex digits
  std::string performance_id() const;  // XXH3 of `performance`
};

struct DeviceList {
  std::vector<DeviceRecord> devices;
  std::vector<std::string> unavailable;  // one line per backend that has no device, saying why
};

std::string fingerprint_id(const std::string& exact);

DeviceList list_devices();
/// Just this machine's CPU (cheap: no OpenCL or CUDA discovery).
DeviceRecord cpu_device();

/// The best device for --backend auto: a CUDA GPU, then an OpenCL GPU, then the CPU; `why`
/// (if given) says which.
DeviceRecord pick_auto(const DeviceList& list, std::string* why = nullptr);

}  // namespace optjit::runtime
