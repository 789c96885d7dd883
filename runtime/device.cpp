#include "runtime/device.h"

#include <algorithm>
#include <chrono>

namespace optjit::runtime {

std::shared_ptr<Device> open_cpu_device();
Expected<std::shared_ptr<Device>> open_opencl_device(int index, void* queue);
Expected<std::shared_ptr<Device>> open_cuda_device(int ordinal, void* stream);

Expected<std::shared_ptr<Device>> open_device(const DeviceSpec& spec) {
  if (spec.kind == "cpu") {
    if (spec.queue) return make_error("the cpu device takes no queue");
    return open_cpu_device();
  }
  if (spec.kind == "opencl") return open_opencl_device(spec.index, spec.queue);
  if (spec.kind == "cuda") return open_cuda_device(spec.index, spec.queue);
  return make_error("no device kind '{}' (cpu, opencl, cuda)", spec.kind);
}

std::string KernelId::name() const {
  switch (kind) {
    case pass:
      return fmt::format("optjit_pass_{}", k);
    case segment:
      return fmt::format("optjit_segment_{}", k);
    case combine:
      return fmt::format("optjit_combine_{}", k);
    case fold:
      return fmt::format("optjit_fold_{}", k);
    case commit:
      break;
  }
  return "optjit_commit";
}

Expected<std::unique_ptr<Graph>> Device::capture(const std::function<Status()>&) {
  return make_error("{} devices do not capture graphs", description().kind);
}

Expected<DeviceAllocation> allocate(Device& device, size_t bytes, const char* what) {
  bytes = std::max<size_t>(bytes, 8);
  auto m = device.allocate(bytes, what);
  if (!m) return m.error();
  return DeviceAllocation(&device, *m, bytes);
}

Expected<double> Device::copy_seconds(size_t bytes, int repetitions) {
  auto src = runtime::allocate(*this, bytes, "allocating a copy-bandwidth buffer");
  if (!src) return src.error();
  auto dst = runtime::allocate(*this, bytes, "allocating a copy-bandwidth buffer");
  if (!dst) return dst.error();
  std::vector<double> times;
  for (int i = 0; i <= repetitions; ++i) {  // the first is a warm-up
    auto t0 = std::chrono::steady_clock::now();
    OPTJIT_TRY(copy(dst->memory(), src->memory(), bytes));
    OPTJIT_TRY(finish());
    if (i > 0)
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace optjit::runtime
