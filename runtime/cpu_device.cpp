// The CPU as a device: its memory is the host's (host pointers are used in place), its kernels
// are the LLVM-JIT'd passes (codegen/cpu_jit.h), and a pass launch spreads the chunk table over
// OpenMP threads in contiguous ranges of about equal elements. The scalar program runs on the
// host between passes, which is this device too.
//
// Fork: libgomp's thread team does not survive fork(), and a child that starts a parallel
// region after its parent did waits forever for threads it does not have (Python's
// multiprocessing forks by default on Linux; a child that trains hung at its first step). A
// process forked after this device started a team runs its threads as std::threads instead.
#include <omp.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "codegen/cpu_jit.h"
#include "runtime/chunks.h"
#include "runtime/device.h"
#include "runtime/devices.h"

namespace optjit::runtime {

namespace {

std::atomic<bool> team_started{false};  // this process started an OpenMP team
std::atomic<bool> forked{false};        // and was forked from one that had (or is such a fork)

void after_fork_in_child() {
  if (team_started.load()) forked.store(true);
}

// body(t) for t in [0, n), each on its own thread (t = 0 on the caller's); returns when all
// have run. OpenMP's team, or in a fork of a process that had one, threads started for the call.
template <class Body>
void run_on_threads(int n, const Body& body) {
  static const int registered = pthread_atfork(nullptr, nullptr, after_fork_in_child);
  (void)registered;
  if (n <= 1) {
    if (n == 1) body(0);
    return;
  }
  if (!forked.load()) {
    team_started.store(true);
#pragma omp parallel num_threads(n)
    for (int t = omp_get_thread_num(); t < n; t += omp_get_num_threads()) body(t);  // any team
    return;
  }
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(n - 1));
  for (int t = 1; t < n; ++t) threads.emplace_back([&body, t] { body(t); });
  body(0);
  for (auto& th : threads) th.join();
}

class CpuModule final : public Module {
 public:
  // threads: as many as asked for; 0: up to every core, as many as the work pays for
  // (runtime::thread_ranges).
  CpuModule(std::unique_ptr<codegen::CpuKernels> kernels, int threads)
      : kernels_(std::move(kernels)),
        threads_(threads > 0 ? threads : omp_get_max_threads()),
        fixed_(threads > 0) {}

  Status launch(KernelId kernel, size_t, size_t, std::span<const KernelArg> args) override {
    if (kernel.kind != KernelId::pass || args.size() != 4)
      return make_error("the cpu device runs pass kernels only, not {}", kernel.name());
    const auto* rows = reinterpret_cast<const codegen::TensorRow*>(address(args[0]));
    const auto* chunks = reinterpret_cast<const codegen::Chunk*>(address(args[1]));
    const int64_t n = args[2].integer;
    auto* partials = reinterpret_cast<double*>(address(args[3]));
    balance(chunks, n);
    codegen::PassFn fn = kernels_->pass(kernel.k);
    const int used = static_cast<int>(start_.size()) - 1;
    run_on_threads(used, [&](int t) {
      if (start_[t] < start_[t + 1]) fn(rows, chunks, start_[t], start_[t + 1], partials);
    });
    return Status::Ok();
  }
  double compile_seconds() const override { return kernels_->compile_seconds(); }
  bool from_cache() const override { return kernels_->from_cache(); }

 private:
  static uint64_t address(const KernelArg& a) { return a.memory.handle + a.memory.offset; }
  // The threads' chunk ranges, recomputed only when the chunk table changes.
  void balance(const codegen::Chunk* chunks, int64_t n) {
    if (chunks == seen_ && n == seen_n_) return;
    seen_ = chunks, seen_n_ = n;
    start_ = thread_ranges(chunks, n, threads_, fixed_);
  }

  std::unique_ptr<codegen::CpuKernels> kernels_;
  int threads_;
  bool fixed_;  // threads_ was asked for: as many, whatever the work (up to one a chunk)
  const codegen::Chunk* seen_ = nullptr;
  int64_t seen_n_ = -1;
  std::vector<int64_t> start_;
};

class CpuDevice final : public Device {
 public:
  CpuDevice() {
    desc_.kind = "cpu";
    const DeviceRecord cpu = cpu_device();
    desc_.name = cpu.name;
    desc_.performance = cpu.performance;
    desc_.compute_units = omp_get_max_threads();
    desc_.addressing = Addressing::pointers;
    desc_.host_memory = true;
  }
  const DeviceDescription& description() const override { return desc_; }

  Expected<DeviceMemory> allocate(size_t bytes, const char* what) override {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) return make_error("{}: out of host memory ({} bytes)", what, bytes);
    return DeviceMemory{reinterpret_cast<uint64_t>(p), 0};
  }
  void release(DeviceMemory m) override { std::free(reinterpret_cast<void*>(m.handle)); }
  Status write(DeviceMemory dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(ptr(dst), src, bytes);
    return Status::Ok();
  }
  Status write_async(DeviceMemory dst, const void* src, size_t bytes) override {
    return write(dst, src, bytes);
  }
  Status read(void* dst, DeviceMemory src, size_t bytes) override {
    if (bytes) std::memcpy(dst, ptr(src), bytes);
    return Status::Ok();
  }
  Status copy(DeviceMemory dst, DeviceMemory src, size_t bytes) override {
    // In parallel, so copy_seconds measures the memory system rather than one core.
    auto* d = ptr(dst);
    const auto* s = ptr(src);
    const int64_t blocks = static_cast<int64_t>((bytes + (1 << 20) - 1) >> 20);
    const int threads = static_cast<int>(std::min<int64_t>(desc_.compute_units, blocks));
    run_on_threads(threads, [&](int t) {  // contiguous ranges of 1 MiB blocks
      for (int64_t i = blocks * t / threads; i < blocks * (t + 1) / threads; ++i) {
        const size_t at = static_cast<size_t>(i) << 20;
        std::memcpy(d + at, s + at, std::min<size_t>(size_t{1} << 20, bytes - at));
      }
    });
    return Status::Ok();
  }
  Status finish() override { return Status::Ok(); }

  Expected<std::unique_ptr<Module>> load(const plan::Plan& plan, const ModuleSpec& spec,
                                         cache::KernelCache* cache) override {
    auto kernels = codegen::CpuKernels::compile(plan, cache, spec.cpu_unroll);
    if (!kernels) return kernels.error();
    return std::unique_ptr<Module>(new CpuModule(std::move(*kernels), spec.cpu_threads));
  }

 private:
  static uint8_t* ptr(DeviceMemory m) { return reinterpret_cast<uint8_t*>(m.handle + m.offset); }
  DeviceDescription desc_;
};

const DeviceKindRegistration registration({
    .name = "cpu",
    .auto_label = "the CPU",
    .list_order = 0,
    .open = [](int index, void* queue) -> Expected<std::shared_ptr<Device>> {
      if (queue) return make_error("the cpu device takes no queue");
      if (index > 0) return make_error("no cpu device {} (there is one, 0)", index);
      OPTJIT_TRY(codegen::check_cpu_feature_changes());
      return std::shared_ptr<Device>(std::make_shared<CpuDevice>());
    },
    .list = []() -> Expected<std::vector<DeviceRecord>> {
      OPTJIT_TRY(codegen::check_cpu_feature_changes());
      return std::vector{cpu_device()};
    },
});

}  // namespace

}  // namespace optjit::runtime
