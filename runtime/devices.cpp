#include "runtime/devices.h"

#include <omp.h>

#include <xxhash.h>
#include <cstdio>

#include "codegen/cpu_jit.h"
#include "codegen/nvrtc.h"
#include "runtime/cuda_driver.h"
#include "runtime/opencl_device.h"

namespace optjit::runtime {

namespace {
// The CPU's model name: LLVM 15 calls CPUs newer than it "generic", which says too little.
std::string cpu_model() {
  std::FILE* f = std::fopen("/proc/cpuinfo", "r");
  if (!f) return "";
  char line[512];
  std::string model;
  while (std::fgets(line, sizeof(line), f)) {
    std::string l(line);
    if (l.rfind("model name", 0) == 0) {
      model = l.substr(l.find(':') + 2);
      while (!model.empty() && (model.back() == '\n' || model.back() == ' ')) model.pop_back();
      break;
    }
  }
  std::fclose(f);
  return model;
}

std::string hash16(const std::string& s) {
  return fmt::format("{:016x}", XXH3_64bits(s.data(), s.size()));
}
}  // namespace

std::string opencl_exact(const OpenclDeviceInfo& i) {
  return fmt::format("opencl|{}|{}|{}|{}|driver {}|uuid {}|codegen {}", i.platform,
                     i.platform_version, i.vendor, i.name, i.driver_version, i.uuid,
                     kCodegenVersion);
}

std::string opencl_performance(const OpenclDeviceInfo& i) {
  return fmt::format("opencl|{}|{}|{} units", i.vendor, i.name, i.compute_units);
}

std::string cuda_exact(const CudaDeviceInfo& i) {
  return fmt::format("cuda|{}|{}|driver {}|nvrtc {}|uuid {}|codegen {}", i.arch(), i.name,
                     i.driver_version, codegen::nvrtc_version(), i.uuid, kCodegenVersion);
}

std::string cuda_performance(const CudaDeviceInfo& i) {
  return fmt::format("cuda|{}|{} SMs", i.arch(), i.sm_count);
}

std::string fingerprint_id(const std::string& exact) { return hash16(exact); }

std::string DeviceRecord::exact_id() const { return hash16(exact); }
std::string DeviceRecord::performance_id() const { return hash16(performance); }

DeviceRecord cpu_device() {
  codegen::CpuTarget t = codegen::CpuTarget::host();
  DeviceRecord d;
  d.backend = "cpu";
  std::string model = cpu_model();
  d.name = fmt::format("{} (LLVM: {}, {})", model.empty() ? "unknown CPU" : model, t.cpu, t.triple);
  d.exact = t.exact();
  d.performance = fmt::format("cpu|{}|{}|{} threads", model, t.cpu, omp_get_max_threads());
  return d;
}

DeviceList list_devices() {
  DeviceList out;
  out.devices.push_back(cpu_device());
  if (auto cl = opencl_devices()) {
    for (const auto& i : *cl) {
      DeviceRecord d;
      d.backend = "opencl";
      d.index = i.index;
      d.name = i.name;
      d.gpu = i.gpu;
      d.exact = opencl_exact(i);
      d.performance = opencl_performance(i);
      out.devices.push_back(d);
    }
  } else {
    out.unavailable.push_back("opencl: " + cl.error().message);
  }
  if (auto cuda = cuda_devices()) {
    for (const auto& i : *cuda) {
      DeviceRecord d;
      d.backend = "cuda";
      d.index = i.ordinal;
      d.name = i.name;
      d.gpu = true;
      d.exact = cuda_exact(i);
      d.performance = cuda_performance(i);
      out.devices.push_back(d);
    }
  } else {
    out.unavailable.push_back("cuda: " + cuda.error().message);
  }
  return out;
}

DeviceRecord pick_auto(const DeviceList& list, std::string* why) {
  std::string unused;
  if (!why) why = &unused;
  const DeviceRecord* cpu = nullptr;
  const DeviceRecord* cl_gpu = nullptr;
  const DeviceRecord* cuda = nullptr;
  for (const auto& d : list.devices) {
    if (d.backend == "cpu" && !cpu) cpu = &d;
    if (d.backend == "opencl" && d.gpu && !cl_gpu) cl_gpu = &d;
    if (d.backend == "cuda" && !cuda) cuda = &d;
  }
  if (cuda) {
    *why = fmt::format("auto: CUDA device {} ({})", cuda->index, cuda->name);
    return *cuda;
  }
  if (cl_gpu) {
    *why = fmt::format("auto: OpenCL GPU {} ({})", cl_gpu->index, cl_gpu->name);
    return *cl_gpu;
  }
  *why = fmt::format("auto: the CPU ({})", cpu->name);
  return *cpu;
}

}  // namespace optjit::runtime
