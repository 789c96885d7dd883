#include "runtime/devices.h"

#include <omp.h>

#include <xxhash.h>
#include <cstdio>

#include "codegen/cpu_jit.h"
#include "runtime/device.h"

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
  for (const auto& kind : device_kinds()) {
    auto found = kind.list();
    if (!found) {
      out.unavailable.push_back(kind.name + ": " + found.error().message);
      continue;
    }
    for (auto& d : *found) out.devices.push_back(std::move(d));
  }
  return out;
}

DeviceRecord pick_auto(const DeviceList& list, std::string* why) {
  std::string unused;
  if (!why) why = &unused;
  // A GPU of the kind that ranks first (CUDA, then OpenCL), else the CPU.
  const DeviceRecord* best = nullptr;
  const DeviceKind* best_kind = nullptr;
  for (const auto& d : list.devices) {
    const DeviceKind* k = find_device_kind(d.backend);
    if (!k || k->auto_rank < 0 || !d.gpu) continue;
    if (!best || k->auto_rank < best_kind->auto_rank) best = &d, best_kind = k;
  }
  if (best) {
    *why = fmt::format("auto: {} {} ({})", best_kind->auto_label, best->index, best->name);
    return *best;
  }
  for (const auto& d : list.devices)
    if (d.backend == "cpu") {
      *why = fmt::format("auto: the CPU ({})", d.name);
      return d;
    }
  return cpu_device();
}

}  // namespace optjit::runtime
