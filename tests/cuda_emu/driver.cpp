// The CUDA emulator's driver (tests/cuda_emu/README.md): libcuda.so.1 with the entry points
// optjit's runtime/cuda_driver.cpp resolves, over host memory and host threads.
//  - One device, "optjit CUDA emulator", sm_90, 4 SMs; its memory is host memory, and a pointer
//    range that is not inside one allocation is refused (CUDA_ERROR_INVALID_VALUE), as is
//    allocating past the device's size ($OPTJIT_EMU_MEMORY bytes, default 8 GiB).
//  - Each stream is a host thread running its work in order; copies to the device take the
//    host bytes when called and copies to the host return when done, as with pageable memory on
//    a GPU. Synchronising or copying to the host while a stream is captured fails as on a GPU.
//  - Modules are the emulator's NVRTC's shared objects; a launch runs the grid on the stream's
//    thread (device_runtime.cpp), one launch at a time in the process. A launch that fails (a
//    deadlock, a bad shuffle) makes every later call fail with CUDA_ERROR_LAUNCH_FAILED, as a GPU's
//    sticky errors do, and prints what went wrong.
#include <dlfcn.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using CUresult = int;
enum : CUresult {
  kSuccess = 0,
  kInvalidValue = 1,
  kOutOfMemory = 2,
  kNotInitialized = 3,
  kInvalidDevice = 101,
  kInvalidImage = 200,
  kInvalidContext = 201,
  kInvalidHandle = 400,
  kNotFound = 500,
  kNotReady = 600,
  kLaunchFailed = 719,
  kCaptureUnsupported = 900,
  kCaptureInvalidated = 901,
};

struct Ctx {};
Ctx primary;

struct Function {
  std::string name;
  void* (*pack)(void**) = nullptr;
  const char* (*run)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned) = nullptr;
};
struct Module {
  void* lib = nullptr;
  std::map<std::string, std::unique_ptr<Function>> functions;
};

using Work = std::function<void()>;
struct Graph {
  std::vector<Work> work;
};

struct Stream {
  std::mutex m;
  std::condition_variable cv;
  std::deque<Work> queue;
  bool busy = false, stop = false;
  Graph* capture = nullptr;
  bool capture_broken = false;
  std::thread worker;

  Stream() {
    worker = std::thread([this] {
      std::unique_lock lock(m);
      for (;;) {
        cv.wait(lock, [&] { return stop || !queue.empty(); });
        if (queue.empty()) return;
        Work w = std::move(queue.front());
        queue.pop_front();
        busy = true;
        lock.unlock();
        w();
        lock.lock();
        busy = false;
        cv.notify_all();
      }
    });
  }
  ~Stream() {
    {
      std::unique_lock lock(m);
      cv.wait(lock, [&] { return queue.empty() && !busy; });
      stop = true;
      cv.notify_all();
    }
    worker.join();
  }
  void push(Work w) {
    std::lock_guard lock(m);
    queue.push_back(std::move(w));
    cv.notify_all();
  }
  void drain() {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return queue.empty() && !busy; });
  }
  bool drain_for(std::chrono::seconds limit) {
    std::unique_lock lock(m);
    return cv.wait_for(lock, limit, [&] { return queue.empty() && !busy; });
  }
  bool idle() {
    std::lock_guard lock(m);
    return queue.empty() && !busy;
  }
};

std::mutex streams_mutex;  // streams
std::vector<Stream*> streams;
std::mutex state_mutex;  // allocations
struct Allocation {
  size_t bytes;  // asked for
  void* map;     // the mapping: the allocation, then a page that faults
  size_t map_bytes;
};
std::map<uintptr_t, Allocation> allocations;
size_t allocated = 0;
std::atomic<int> sticky{kSuccess};
std::mutex launch_mutex;  // one grid at a time (the device runtime keeps the block in statics)

size_t device_memory() {
  if (const char* m = std::getenv("OPTJIT_EMU_MEMORY"); m && *m)
    return std::strtoull(m, nullptr, 10);
  return size_t{8} << 30;
}

// The legacy and per-thread default streams (and a null stream) are one stream here.
Stream& default_stream() {
  static Stream* s = new Stream;  // never destroyed: work may still be queued at exit
  return *s;
}

// At exit, before this library's statics go, the streams finish what is queued (a process
// that never synchronises before returning from main), each within 10 s: a stream held by a
// host function that never returns is left as it is.
void finish_streams_at_exit() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::atexit([] {
      default_stream().drain_for(std::chrono::seconds(10));
      std::lock_guard lock(streams_mutex);
      for (Stream* s : streams) s->drain_for(std::chrono::seconds(10));
    });
  });
}
// What cuMemFree and cuModuleUnload wait for: every stream's queued work. (Not under the
// allocations' lock: a host function holding a stream may wait for a thread that copies.)
void wait_for_device() {
  default_stream().drain();
  std::lock_guard lock(streams_mutex);
  for (Stream* s : streams) s->drain();
}

Stream* stream_of(void* handle) {
  const auto h = reinterpret_cast<uintptr_t>(handle);
  return h <= 2 ? &default_stream() : static_cast<Stream*>(handle);
}

// Whether [p, p + n) lies in one allocation.
bool device_range(uintptr_t p, size_t n) {
  std::lock_guard lock(state_mutex);
  auto it = allocations.upper_bound(p);
  if (it == allocations.begin()) return false;
  --it;
  return p >= it->first && p + n <= it->first + it->second.bytes;
}

// Work for a stream, or for its capture.
CUresult enqueue(void* handle, Work w) {
  if (sticky != kSuccess) return sticky;
  finish_streams_at_exit();
  Stream* s = stream_of(handle);
  {
    std::lock_guard lock(s->m);
    if (s->capture) {
      s->capture->work.push_back(std::move(w));
      return kSuccess;
    }
  }
  s->push(std::move(w));
  return kSuccess;
}

thread_local std::vector<void*> context_stack;

// The kernel running on this thread, for the fault handler.
thread_local const char* running_kernel = nullptr;

// Freed allocations, kept reserved and unreadable (cuMemFree_v2), for the fault handler.
struct Freed {
  uintptr_t map = 0;
  size_t map_bytes = 0;
  uintptr_t at = 0;
  size_t bytes = 0;
};
constexpr size_t kFreedKept = 4096;
Freed freed[kFreedKept];
size_t freed_next = 0;

// A kernel that reads or writes past the end of an allocation touches the page after it, which
// faults: the process stops with the kernel's name, not a corrupted heap later.
void on_fault(int sig, siginfo_t* info, void*) {
  if (running_kernel) {
    const auto a = reinterpret_cast<uintptr_t>(info->si_addr);
    const Freed* was = nullptr;
    for (const Freed& f : freed)
      if (f.map && a >= f.map && a < f.map + f.map_bytes) was = &f;
    char line[512];
    const int n =
        was ? std::snprintf(line, sizeof(line),
                            "optjit CUDA emulator: kernel %s touched %p, in an allocation of %zu "
                            "bytes at %p that was freed (an illegal address on a GPU, or "
                            "another buffer's data once the memory is reused)\n",
                            running_kernel, info->si_addr, was->bytes,
                            reinterpret_cast<void*>(was->at))
            : std::snprintf(line, sizeof(line),
                            "optjit CUDA emulator: kernel %s touched %p, outside every "
                            "allocation (an illegal address on a GPU)\n",
                            running_kernel, info->si_addr);
    if (n > 0) (void)!::write(2, line, static_cast<size_t>(std::min(n, 511)));
  }
  ::signal(sig, SIG_DFL);  // the fault happens again, and ends the process as it would have
}

// Kernels are built with -fsanitize=alignment, which traps on an access through a misaligned
// pointer (a vector load at an odd offset): a "misaligned address" error on a GPU.
void on_trap(int sig, siginfo_t* info, void*) {
  if (running_kernel) {
    char line[512];
    const int n = std::snprintf(line, sizeof(line),
                                "optjit CUDA emulator: kernel %s trapped at %p: a load or store "
                                "through a pointer not aligned for its type (a misaligned "
                                "address on a GPU)\n",
                                running_kernel, info->si_addr);
    if (n > 0) (void)!::write(2, line, static_cast<size_t>(std::min(n, 511)));
  }
  ::signal(sig, SIG_DFL);
}

void catch_faults() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa = {};
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO;
    ::sigaction(SIGSEGV, &sa, nullptr);
    struct sigaction trap = {};
    trap.sa_sigaction = on_trap;
    trap.sa_flags = SA_SIGINFO;
    ::sigaction(SIGILL, &trap, nullptr);
  });
}

}  // namespace

extern "C" {

CUresult cuInit(unsigned flags) { return flags == 0 ? kSuccess : kInvalidValue; }
CUresult cuDriverGetVersion(int* v) {
  if (!v) return kInvalidValue;
  *v = 13000;
  return kSuccess;
}
CUresult cuDeviceGetCount(int* n) {
  if (!n) return kInvalidValue;
  *n = 1;
  return kSuccess;
}
CUresult cuDeviceGet(int* d, int ordinal) {
  if (!d) return kInvalidValue;
  if (ordinal != 0) return kInvalidDevice;
  *d = 0;
  return kSuccess;
}
CUresult cuDeviceGetName(char* name, int len, int d) {
  if (d != 0) return kInvalidDevice;
  if (!name || len <= 0) return kInvalidValue;
  std::snprintf(name, static_cast<size_t>(len), "%s", "optjit CUDA emulator");
  return kSuccess;
}
CUresult cuDeviceGetAttribute(int* v, int attribute, int d) {
  if (d != 0) return kInvalidDevice;
  if (!v) return kInvalidValue;
  switch (attribute) {
    case 16:  // multiprocessors
      *v = 4;
      return kSuccess;
    case 75:  // compute capability
      *v = 9;
      return kSuccess;
    case 76:
      *v = 0;
      return kSuccess;
    case 1:  // max threads per block
      *v = 1024;
      return kSuccess;
    case 10:  // warp size
      *v = 32;
      return kSuccess;
    default:
      return kInvalidValue;
  }
}
CUresult cuDeviceTotalMem_v2(size_t* bytes, int d) {
  if (d != 0) return kInvalidDevice;
  if (!bytes) return kInvalidValue;
  *bytes = device_memory();
  return kSuccess;
}
CUresult cuDeviceGetUuid(unsigned char* uuid, int d) {
  if (d != 0) return kInvalidDevice;
  if (!uuid) return kInvalidValue;
  for (int i = 0; i < 16; ++i) uuid[i] = static_cast<unsigned char>(0xe0 + i);
  return kSuccess;
}
CUresult cuGetErrorString(CUresult r, const char** s) {
  static const std::map<CUresult, const char*> names = {
      {kSuccess, "no error"},
      {kInvalidValue, "invalid argument"},
      {kOutOfMemory, "out of memory"},
      {kNotInitialized, "initialization error"},
      {kInvalidDevice, "invalid device ordinal"},
      {kInvalidImage, "device kernel image is invalid"},
      {kInvalidContext, "invalid device context"},
      {kInvalidHandle, "invalid resource handle"},
      {kNotFound, "named symbol not found"},
      {kNotReady, "device not ready"},
      {kLaunchFailed, "unspecified launch failure"},
      {kCaptureUnsupported, "operation not permitted when stream is capturing"},
      {kCaptureInvalidated, "operation failed due to a previous error during capture"},
  };
  if (!s) return kInvalidValue;
  auto it = names.find(r);
  if (it == names.end()) {
    *s = nullptr;
    return kInvalidValue;
  }
  *s = it->second;
  return kSuccess;
}

CUresult cuDevicePrimaryCtxRetain(void** ctx, int d) {
  if (d != 0) return kInvalidDevice;
  if (!ctx) return kInvalidValue;
  *ctx = &primary;
  return kSuccess;
}
CUresult cuCtxPushCurrent_v2(void* ctx) {
  if (ctx != &primary) return kInvalidContext;
  context_stack.push_back(ctx);
  return kSuccess;
}
CUresult cuCtxPopCurrent_v2(void** ctx) {
  if (context_stack.empty()) return kInvalidContext;
  if (ctx) *ctx = context_stack.back();
  context_stack.pop_back();
  return kSuccess;
}
CUresult cuCtxGetCurrent(void** ctx) {
  if (!ctx) return kInvalidValue;
  *ctx = context_stack.empty() ? nullptr : context_stack.back();
  return kSuccess;
}

CUresult cuModuleLoadData(Module** module, const void* image) {
  if (!module || !image) return kInvalidValue;
  const char* bytes = static_cast<const char*>(image);
  if (std::memcmp(bytes, "OPTJEMU1", 8) != 0) {
    std::fprintf(stderr, "optjit CUDA emulator: this image is not the emulator's NVRTC's\n");
    return kInvalidImage;
  }
  uint64_t size = 0;
  std::memcpy(&size, bytes + 8, sizeof(size));
  // A file of its own name: dlopen hands back a loaded library for a name it has seen.
  char path[] = "/tmp/optjit-cuda-emu-module-XXXXXX";
  const int fd = ::mkstemp(path);
  if (fd < 0) return kOutOfMemory;
  const bool written = ::write(fd, bytes + 16, size) == static_cast<ssize_t>(size);
  ::close(fd);
  void* lib = written ? ::dlopen(path, RTLD_NOW | RTLD_LOCAL) : nullptr;
  ::unlink(path);
  if (!lib) {
    std::fprintf(stderr, "optjit CUDA emulator: loading a module failed: %s\n", ::dlerror());
    return kInvalidImage;
  }
  *module = new Module{lib, {}};
  return kSuccess;
}
CUresult cuModuleUnload(Module* module) {
  if (!module) return kInvalidHandle;
  // Work queued before the unload may still run this module's code.
  wait_for_device();
  ::dlclose(module->lib);
  delete module;
  return kSuccess;
}
CUresult cuModuleGetFunction(Function** f, Module* module, const char* name) {
  if (!f || !module || !name) return kInvalidValue;
  std::lock_guard lock(state_mutex);
  auto& slot = module->functions[name];
  if (!slot) {
    auto fn = std::make_unique<Function>();
    fn->name = name;
    const std::string n = name;
    fn->pack = reinterpret_cast<decltype(fn->pack)>(
        ::dlsym(module->lib, ("optjit_emu_pack_" + n).c_str()));
    fn->run =
        reinterpret_cast<decltype(fn->run)>(::dlsym(module->lib, ("optjit_emu_run_" + n).c_str()));
    if (!fn->pack || !fn->run) {
      std::fprintf(stderr, "optjit CUDA emulator: the module has no kernel '%s'\n", name);
      module->functions.erase(name);
      return kNotFound;
    }
    slot = std::move(fn);
  }
  *f = slot.get();
  return kSuccess;
}

CUresult cuMemAlloc_v2(uintptr_t* p, size_t bytes) {
  if (!p || bytes == 0) return kInvalidValue;
  if (sticky != kSuccess) return sticky;
  std::lock_guard lock(state_mutex);
  if (allocated + bytes > device_memory()) return kOutOfMemory;
  // 256-byte aligned, as cuMemAlloc's, and ending where a page that faults begins (up to 255
  // bytes of rounding past the end go unnoticed, as they would on a GPU).
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE)),
               rounded = (bytes + 255) / 256 * 256, used = (rounded + page - 1) / page * page,
               map_bytes = used + page;
  void* map =
      ::mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) return kOutOfMemory;
  ::mprotect(static_cast<char*>(map) + used, page, PROT_NONE);
  *p = reinterpret_cast<uintptr_t>(map) + (used - rounded);
  allocations[*p] = {bytes, map, map_bytes};
  allocated += bytes;
  return kSuccess;
}
CUresult cuMemFree_v2(uintptr_t p) {
  // cuMemFree waits for the device: work queued before it may still use the memory.
  wait_for_device();
  std::lock_guard lock(state_mutex);
  auto it = allocations.find(p);
  if (it == allocations.end()) return kInvalidValue;
  allocated -= it->second.bytes;
  // The pages go back to the system but their addresses stay reserved, unreadable, so a kernel
  // that uses the memory afterwards faults and is named (on_fault); the last kFreedKept frees
  // are kept so.
  Allocation& a = it->second;
  ::madvise(a.map, a.map_bytes, MADV_DONTNEED);
  ::mprotect(a.map, a.map_bytes, PROT_NONE);
  Freed& f = freed[freed_next % kFreedKept];
  if (f.map) ::munmap(reinterpret_cast<void*>(f.map), f.map_bytes);
  f = {reinterpret_cast<uintptr_t>(a.map), a.map_bytes, p, a.bytes};
  ++freed_next;
  allocations.erase(it);
  return kSuccess;
}

// The attributes optjit asks for, of an allocation of this emulated device 0 (device memory
// of ordinal 0, its start and size); an address of none reads as zeros, as on a GPU.
CUresult cuPointerGetAttributes(unsigned n, int* attributes, void** data, uintptr_t p) {
  if (!attributes || !data) return kInvalidValue;
  uintptr_t start = 0;
  size_t size = 0;
  {
    std::lock_guard lock(state_mutex);
    auto it = allocations.upper_bound(p);
    if (it != allocations.begin() && p < std::prev(it)->first + std::prev(it)->second.bytes)
      start = std::prev(it)->first, size = std::prev(it)->second.bytes;
  }
  for (unsigned i = 0; i < n; ++i) {
    switch (attributes[i]) {
      case 2:  // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
        *static_cast<unsigned*>(data[i]) = size ? 2u /* CU_MEMORYTYPE_DEVICE */ : 0u;
        break;
      case 8:  // CU_POINTER_ATTRIBUTE_IS_MANAGED
        *static_cast<unsigned*>(data[i]) = 0;
        break;
      case 9:  // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
        *static_cast<int*>(data[i]) = size ? 0 : -2;
        break;
      case 10:  // CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE (a cuMemAlloc allocation)
        *static_cast<unsigned*>(data[i]) = size ? 1u : 0u;
        break;
      case 11:  // CU_POINTER_ATTRIBUTE_RANGE_START_ADDR
        *static_cast<uintptr_t*>(data[i]) = start;
        break;
      case 12:  // CU_POINTER_ATTRIBUTE_RANGE_SIZE
        *static_cast<size_t*>(data[i]) = size;
        break;
      default:
        return kInvalidValue;
    }
  }
  return kSuccess;
}

CUresult cuMemcpyHtoDAsync_v2(uintptr_t dst, const void* src, size_t n, void* stream) {
  if (!device_range(dst, n) || (!src && n)) return kInvalidValue;
  // Pageable host memory: the bytes are taken now.
  auto bytes = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                   static_cast<const char*>(src) + n);
  return enqueue(stream, [dst, bytes] {
    std::memcpy(reinterpret_cast<void*>(dst), bytes->data(), bytes->size());
  });
}
CUresult cuMemcpyDtoDAsync_v2(uintptr_t dst, uintptr_t src, size_t n, void* stream) {
  if (!device_range(dst, n) || !device_range(src, n)) return kInvalidValue;
  return enqueue(stream, [dst, src, n] {
    std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n);
  });
}
CUresult cuMemsetD32Async(uintptr_t dst, unsigned value, size_t words, void* stream) {
  if (!device_range(dst, words * 4)) return kInvalidValue;
  return enqueue(stream, [dst, value, words] {
    auto* w = reinterpret_cast<unsigned*>(dst);
    for (size_t i = 0; i < words; ++i) w[i] = value;
  });
}
CUresult cuStreamSynchronize(void* handle);
CUresult cuMemcpyDtoHAsync_v2(void* dst, uintptr_t src, size_t n, void* stream) {
  if (!device_range(src, n) || (!dst && n)) return kInvalidValue;
  Stream* s = stream_of(stream);
  {
    std::lock_guard lock(s->m);
    if (s->capture) {  // a copy to pageable memory cannot be captured
      s->capture_broken = true;
      return kCaptureUnsupported;
    }
  }
  // Pageable host memory: the call returns when the copy is done.
  auto done = std::make_shared<std::atomic<bool>>(false);
  if (CUresult r = enqueue(stream,
                           [dst, src, n, done] {
                             std::memcpy(dst, reinterpret_cast<const void*>(src), n);
                             *done = true;
                           });
      r != kSuccess)
    return r;
  s->drain();
  return *done ? sticky.load() : kLaunchFailed;
}

CUresult cuStreamCreate(Stream** s, unsigned) {
  if (!s) return kInvalidValue;
  finish_streams_at_exit();
  *s = new Stream;
  std::lock_guard lock(streams_mutex);
  streams.push_back(*s);
  return kSuccess;
}
CUresult cuStreamDestroy_v2(Stream* s) {
  if (reinterpret_cast<uintptr_t>(s) <= 2) return kInvalidHandle;
  {
    std::lock_guard lock(streams_mutex);
    auto it = std::find(streams.begin(), streams.end(), s);
    if (it == streams.end()) return kInvalidHandle;
    streams.erase(it);
  }
  delete s;  // finishes its work first
  return kSuccess;
}
CUresult cuStreamSynchronize(void* handle) {
  Stream* s = stream_of(handle);
  {
    std::lock_guard lock(s->m);
    if (s->capture) {
      s->capture_broken = true;
      return kCaptureUnsupported;
    }
  }
  s->drain();
  return sticky;
}
CUresult cuStreamQuery(void* handle) {
  if (sticky != kSuccess) return sticky;
  return stream_of(handle)->idle() ? kSuccess : kNotReady;
}
CUresult cuLaunchHostFunc(void* stream, void (*fn)(void*), void* data) {
  if (!fn) return kInvalidValue;
  return enqueue(stream, [fn, data] { fn(data); });
}

CUresult cuLaunchKernel(Function* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shared_bytes, void* stream,
                        void** params, void** extra) {
  if (!f || extra || !params) return kInvalidValue;
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 ||
      static_cast<uint64_t>(bx) * by * bz > 1024 || shared_bytes > 0)
    return kInvalidValue;
  // The arguments are copied when the launch is made, as the driver does.
  std::shared_ptr<void> packed(f->pack(params), std::free);
  if (!packed) return kOutOfMemory;
  catch_faults();
  return enqueue(stream, [f, packed, gx, gy, gz, bx, by, bz] {
    if (sticky != kSuccess) return;
    std::lock_guard lock(launch_mutex);
    running_kernel = f->name.c_str();
    const char* error = f->run(packed.get(), gx, gy, gz, bx, by, bz);
    running_kernel = nullptr;
    if (error) {
      std::fprintf(stderr, "optjit CUDA emulator: %s failed: %s\n", f->name.c_str(), error);
      sticky = kLaunchFailed;
    }
  });
}

CUresult cuStreamBeginCapture_v2(void* handle, int) {
  if (reinterpret_cast<uintptr_t>(handle) <= 2) return kCaptureUnsupported;  // as on a GPU
  Stream* s = stream_of(handle);
  std::lock_guard lock(s->m);
  if (s->capture) return kCaptureUnsupported;
  s->capture = new Graph;
  s->capture_broken = false;
  return kSuccess;
}
CUresult cuStreamEndCapture(void* handle, Graph** graph) {
  if (!graph) return kInvalidValue;
  Stream* s = stream_of(handle);
  std::lock_guard lock(s->m);
  if (!s->capture) return kInvalidValue;
  Graph* g = s->capture;
  s->capture = nullptr;
  if (s->capture_broken) {
    delete g;
    *graph = nullptr;
    return kCaptureInvalidated;
  }
  *graph = g;
  return kSuccess;
}
CUresult cuGraphInstantiateWithFlags(Graph** exec, Graph* graph, unsigned long long) {
  if (!exec || !graph) return kInvalidValue;
  *exec = new Graph(*graph);
  return kSuccess;
}
CUresult cuGraphLaunch(Graph* exec, void* stream) {
  if (!exec) return kInvalidHandle;
  for (const Work& w : exec->work)
    if (CUresult r = enqueue(stream, w); r != kSuccess) return r;
  return kSuccess;
}
CUresult cuGraphExecDestroy(Graph* exec) {
  if (!exec) return kInvalidHandle;
  delete exec;
  return kSuccess;
}
CUresult cuGraphDestroy(Graph* graph) {
  if (!graph) return kInvalidHandle;
  delete graph;
  return kSuccess;
}

}  // extern "C"
