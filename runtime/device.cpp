#include "runtime/device.h"

#include "codegen/c_emitter.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <string>
#include <vector>

namespace optjit::runtime {

namespace {

std::vector<DeviceKind>& registry() {
  static std::vector<DeviceKind> kinds;
  return kinds;
}

}  // namespace

void register_device_kind(DeviceKind kind) {
  auto& kinds = registry();
  kinds.push_back(std::move(kind));
  std::stable_sort(kinds.begin(), kinds.end(), [](const DeviceKind& a, const DeviceKind& b) {
    return a.list_order < b.list_order;
  });
}

std::vector<DeviceKind> device_kinds() { return registry(); }

const DeviceKind* find_device_kind(const std::string& name) {
  for (const auto& k : registry())
    if (k.name == name) return &k;
  return nullptr;
}

std::string device_kind_names(const std::function<bool(const DeviceKind&)>& pred) {
  std::vector<std::string> names;
  for (const auto& k : registry())
    if (!pred || pred(k)) names.push_back(k.name);
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return out;
}

namespace {

// The device kinds this process opened, and those its parent had opened when it forked. A
// driver that keeps threads (PoCL's, lavapipe's, CUDA's) does not survive fork(): in the child,
// its next blocking call waits forever for threads that were not copied. So a fork opens only
// kinds its parent never did (the cpu device runs in a fork: runtime/cpu_device.cpp).
std::mutex fork_mutex;
std::vector<std::string> opened_kinds, parent_kinds;

// fork_mutex is taken around fork(), so that the child never inherits it held; the child (one
// thread) moves what its parent had opened to parent_kinds.
void before_fork() { fork_mutex.lock(); }
void after_fork_in_parent() { fork_mutex.unlock(); }
void after_fork_in_child() {
  parent_kinds.insert(parent_kinds.end(), opened_kinds.begin(), opened_kinds.end());
  opened_kinds.clear();
  fork_mutex.unlock();
}

}  // namespace

Status check_handle(const void* handle, const char* role, const char* what) {
  const auto a = reinterpret_cast<uintptr_t>(handle);
  if (a < 65536 || a % alignof(void*) != 0)
    return make_error("{} {:#x} is not the address of a {}", role, a, what);
  return Status::Ok();
}

Expected<std::shared_ptr<Device>> open_device(const DeviceSpec& spec) {
  const DeviceKind* kind = find_device_kind(spec.kind);
  if (!kind) return make_error("no device kind '{}' ({})", spec.kind, device_kind_names());
  if (spec.index < -1)
    return make_error(
        "device index {}: an index from `optjit devices` (0, 1, ...), or -1 for the first GPU "
        "(else the first device)",
        spec.index);
  static const int registered =
      pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
  (void)registered;
  if (kind->name != "cpu") {
    std::lock_guard lock(fork_mutex);
    if (std::find(parent_kinds.begin(), parent_kinds.end(), kind->name) != parent_kinds.end())
      return make_error(
          "cannot open a device of kind '{}' in process {}: it is a fork of a process that "
          "had opened one, and the driver's threads do not survive fork() (open devices only after "
          "forking, or start processes with the 'spawn' method)",
          kind->name, ::getpid());
  }
  auto device = kind->open(spec.index, spec.queue);
  if (device && kind->name != "cpu") {
    std::lock_guard lock(fork_mutex);
    if (std::find(opened_kinds.begin(), opened_kinds.end(), kind->name) == opened_kinds.end())
      opened_kinds.push_back(kind->name);
  }
  return device;
}

std::string KernelId::name() const {
  switch (kind) {
    case pass:
      return fmt::format("optjit_pass_{}", k);
    case segment:
      return fmt::format("optjit_segment_{}", k);
    case combine:
      return fmt::format("optjit_combine_{}", k);
    case shard_out:
      return fmt::format("optjit_shard_out_{}", k);
    case shard_in:
      return fmt::format("optjit_shard_in_{}", k);
    case fold:
      return fmt::format("optjit_fold_{}", k);
    case commit:
      break;
  }
  return "optjit_commit";
}

std::vector<KernelId> module_kernels(const plan::Plan& plan, bool device_step) {
  std::vector<KernelId> ids;
  for (uint32_t k = 0; k < plan.passes.size(); ++k) ids.push_back({KernelId::pass, k});
  if (!device_step) return ids;
  const auto layout = codegen::device_step_layout(plan);
  for (uint32_t k = 0; k <= plan.passes.size(); ++k) {
    ids.push_back({KernelId::segment, k});
    if (k == plan.passes.size()) break;
    if (layout.combines[k]) {
      ids.push_back({KernelId::combine, k});
      ids.push_back({KernelId::shard_out, k});
      ids.push_back({KernelId::shard_in, k});
    }
    if (layout.folds[k]) ids.push_back({KernelId::fold, k});
  }
  ids.push_back({KernelId::commit, 0});
  return ids;
}

Expected<std::unique_ptr<Graph>> Device::capture(const std::function<Status()>&) {
  return make_error("{} devices do not capture graphs", description().kind);
}

Expected<int> choose_device(int index, const std::vector<bool>& gpu, const char* what) {
  if (index < 0) {
    auto first_gpu = std::find(gpu.begin(), gpu.end(), true);
    index = first_gpu == gpu.end() ? 0 : static_cast<int>(first_gpu - gpu.begin());
  }
  if (index >= static_cast<int>(gpu.size()))
    return make_error("no {} {} (there are {})", what, index, gpu.size());
  return index;
}

Expected<DeviceAllocation> allocate(Device& device, size_t bytes, const char* what) {
  bytes = std::max<size_t>(bytes, 8);
  auto m = device.allocate(bytes, what);
  if (!m) return m.error();
  return DeviceAllocation(&device, *m, bytes);
}

Expected<double> Device::copy_seconds(size_t bytes, int repetitions) {
  // Past the largest allocation (WebGPU's 4 GiB on NVIDIA): the largest copy that fits, its
  // time scaled to `bytes` (a copy that large is at its bandwidth already).
  const uint64_t most = description().max_allocation / 256 * 256;
  if (most > 0 && bytes > most) {
    auto part = copy_seconds(static_cast<size_t>(most), repetitions);
    if (!part) return part.error();
    return *part * static_cast<double>(bytes) / static_cast<double>(most);
  }
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

#ifndef OPTJIT_HAVE_WEBGPU
Expected<std::string> webgpu_library() {
  return make_error("optjit was built without the webgpu backend (no wgpu headers at build time)");
}
Expected<std::map<std::string, size_t>> webgpu_live_objects() { return webgpu_library().error(); }
#endif

}  // namespace optjit::runtime
