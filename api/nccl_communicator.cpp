// NCCL as a Communicator (api/communicator.h): the sharded device step's all-reduce of each
// pass's partials runs on the optimizer's CUDA stream with no host synchronisation, so the
// step stays capturable in a CUDA graph. NCCL is loaded at run time, as the CUDA driver and
// NVRTC are, so the library has no link dependency on it: $OPTJIT_NCCL (and only it, when
// set), else libnccl.so.2 on the loader's path, else the CUDA toolkit's found at build time.
#include <dlfcn.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#ifdef OPTJIT_HAVE_MPI
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>
#endif

#include "api/communicator.h"
#include "runtime/cuda_api.h"
#include "runtime/device.h"

namespace optjit {
namespace {

// The NCCL ABI optjit uses (nccl.h: stable across NCCL 2.x).
using ncclComm_t = struct ncclComm*;
using ncclResult_t = int;
constexpr ncclResult_t kNcclSuccess = 0, kNcclInProgress = 7;
constexpr int kNcclFloat64 = 8, kNcclSum = 0;
struct ncclUniqueId {
  char internal[128];
};

struct Nccl {
  ncclResult_t (*ncclGetVersion)(int*);
  ncclResult_t (*ncclGetUniqueId)(ncclUniqueId*);
  ncclResult_t (*ncclCommInitRank)(ncclComm_t*, int, ncclUniqueId, int);
  ncclResult_t (*ncclCommDestroy)(ncclComm_t);
  ncclResult_t (*ncclCommAbort)(ncclComm_t);
  ncclResult_t (*ncclCommCount)(ncclComm_t, int*);
  ncclResult_t (*ncclCommUserRank)(ncclComm_t, int*);
  ncclResult_t (*ncclCommCuDevice)(ncclComm_t, int*);
  ncclResult_t (*ncclCommGetAsyncError)(ncclComm_t, ncclResult_t*);
  ncclResult_t (*ncclAllReduce)(const void*, void*, size_t, int, int, ncclComm_t, void*);
  const char* (*ncclGetErrorString)(ncclResult_t);
  std::string path;
};

Expected<const Nccl*> nccl() {
  static std::once_flag once;
  static Nccl n;
  static std::string why;
  std::call_once(once, [] {
    std::vector<std::string> tries;
    if (const char* env = std::getenv("OPTJIT_NCCL"); env && *env) {
      tries.push_back(env);
    } else {
      tries.push_back("libnccl.so.2");
#ifdef OPTJIT_CUDA_LIBDIR
      tries.push_back(std::string(OPTJIT_CUDA_LIBDIR) + "/libnccl.so.2");
      tries.push_back(std::string(OPTJIT_CUDA_LIBDIR) + "/../lib/libnccl.so.2");
#endif
      tries.push_back("/usr/local/cuda/lib64/libnccl.so.2");
      tries.push_back("/usr/local/cuda/lib/libnccl.so.2");
    }
    void* lib = nullptr;
    for (const auto& t : tries)
      if ((lib = ::dlopen(t.c_str(), RTLD_NOW | RTLD_LOCAL))) {
        n.path = t;
        break;
      }
    if (!lib) {
      why = fmt::format("no NCCL library (libnccl.so.2; set OPTJIT_NCCL to its path): tried {}",
                        fmt::join(tries, ", "));
      return;
    }
#define OPTJIT_NCCL_LOAD(name)                                                 \
  n.name = reinterpret_cast<decltype(n.name)>(::dlsym(lib, #name));            \
  if (!n.name) {                                                               \
    why = fmt::format("{} lacks {} (an NCCL older than 2.x?)", n.path, #name); \
    return;                                                                    \
  }
    OPTJIT_NCCL_LOAD(ncclGetVersion)
    OPTJIT_NCCL_LOAD(ncclGetUniqueId)
    OPTJIT_NCCL_LOAD(ncclCommInitRank)
    OPTJIT_NCCL_LOAD(ncclCommDestroy)
    OPTJIT_NCCL_LOAD(ncclCommAbort)
    OPTJIT_NCCL_LOAD(ncclCommCount)
    OPTJIT_NCCL_LOAD(ncclCommUserRank)
    OPTJIT_NCCL_LOAD(ncclCommCuDevice)
    OPTJIT_NCCL_LOAD(ncclCommGetAsyncError)
    OPTJIT_NCCL_LOAD(ncclAllReduce)
    OPTJIT_NCCL_LOAD(ncclGetErrorString)
#undef OPTJIT_NCCL_LOAD
  });
  if (!why.empty()) return make_error("{}", why);
  return &n;
}

Error nccl_fail(const Nccl& n, const char* what, ncclResult_t r) {
  return make_error("NCCL: {} failed: {} ({})", what, n.ncclGetErrorString(r), r);
}

// $OPTJIT_NCCL_TIMEOUT: the seconds an all-reduce may make no progress before the
// communicator is aborted (default 300). Read when a communicator is made, so a bad value is an
// error there rather than an all-reduce that gives up at once (it was read with atof: "5min"
// waited 5 s, "abc" aborted the communicator at the first poll).
Expected<double> nccl_timeout() {
  const char* t = std::getenv("OPTJIT_NCCL_TIMEOUT");
  if (!t || !*t) return 300.0;
  char* end = nullptr;
  const double seconds = std::strtod(t, &end);
  if (end == t || *end != '\0' || !(seconds > 0) || !std::isfinite(seconds))
    return make_error(
        "OPTJIT_NCCL_TIMEOUT='{}' is not a number of seconds greater than 0 (how "
        "long an all-reduce may make no progress; unset, 300)",
        t);
  return seconds;
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const Nccl& n, const runtime::cuda::Api& cu, ncclComm_t comm, bool owned,
                   void* stream, int device, double timeout)
      : n_(n),
        cu_(cu),
        comm_(comm),
        owned_(owned),
        stream_(stream),
        device_(device),
        timeout_(timeout) {
    n_.ncclCommCount(comm_, &size_);
    n_.ncclCommUserRank(comm_, &rank_);
  }
  ~NcclCommunicator() override {
    if (owned_) n_.ncclCommDestroy(comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "nccl"; }
  bool capturable() const override { return true; }

  // Through device memory on the communicator's stream, waited for (the layout agreement at
  // the first step; never per pass). A peer that fails or dies shows as NCCL's asynchronous
  // error, or as no progress for $OPTJIT_NCCL_TIMEOUT seconds (default 300): then the
  // communicator is aborted and this returns an error, instead of waiting forever.
  Status allreduce_sum(std::span<double> data) override {
    if (data.empty()) return Status::Ok();
    auto ctx = runtime::cuda::primary_context(device_);
    if (!ctx) return ctx.error();
    runtime::cuda::ContextScope scope(cu_, *ctx);
    const size_t bytes = data.size() * sizeof(double);
    runtime::cuda::CUdeviceptr d = 0;
    if (auto r = cu_.cuMemAlloc(&d, bytes); r != 0)
      return runtime::cuda::fail("allocating the all-reduce buffer", r);
    auto stream = static_cast<runtime::cuda::CUstream>(stream_);
    Status st = Status::Ok();
    if (auto r = cu_.cuMemcpyHtoDAsync(d, data.data(), bytes, stream); r != 0)
      st = runtime::cuda::fail("cuMemcpyHtoDAsync", r);
    if (st.ok())
      if (auto r = n_.ncclAllReduce(reinterpret_cast<void*>(d), reinterpret_cast<void*>(d),
                                    data.size(), kNcclFloat64, kNcclSum, comm_, stream_);
          r != kNcclSuccess)
        st = nccl_fail(n_, "ncclAllReduce", r);
    if (st.ok())
      if (auto r = cu_.cuMemcpyDtoHAsync(data.data(), d, bytes, stream); r != 0)
        st = runtime::cuda::fail("cuMemcpyDtoHAsync", r);
    if (st.ok()) st = wait();
    cu_.cuMemFree(d);
    return st;
  }

  // On the device's stream: enqueued, never waited for.
  Status allreduce_sum_device(runtime::Device& device, runtime::DeviceMemory data,
                              size_t count) override {
    const auto& desc = device.description();
    if (desc.kind != "cuda")
      return make_error("an NCCL communicator all-reduces CUDA memory, not {} memory", desc.kind);
    if (desc.index != device_)
      return make_error("the NCCL communicator is on CUDA device {}, the optimizer on {}", device_,
                        desc.index);
    if (device.queue() != stream_)
      return make_error(
          "the NCCL communicator's stream is not the optimizer's (give both the same: "
          "OptimizerOptions::queue)");
    auto ctx = runtime::cuda::primary_context(device_);
    if (!ctx) return ctx.error();
    runtime::cuda::ContextScope scope(cu_, *ctx);
    void* p = reinterpret_cast<void*>(device.address(data));
    if (auto r = n_.ncclAllReduce(p, p, count, kNcclFloat64, kNcclSum, comm_, stream_);
        r != kNcclSuccess)
      return nccl_fail(n_, "ncclAllReduce", r);
    return Status::Ok();
  }

 private:
  Status wait() {
    const auto t0 = std::chrono::steady_clock::now();
    auto stream = static_cast<runtime::cuda::CUstream>(stream_);
    for (;;) {
      // cuStreamSynchronize would wait forever on a dead peer: poll instead.
      const int r = cu_.cuStreamQuery ? cu_.cuStreamQuery(stream) : cu_.cuStreamSynchronize(stream);
      if (r == 0) return Status::Ok();
      if (r != 600 /* CUDA_ERROR_NOT_READY */) return runtime::cuda::fail("the NCCL stream", r);
      ncclResult_t async = kNcclSuccess;
      n_.ncclCommGetAsyncError(comm_, &async);
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if ((async != kNcclSuccess && async != kNcclInProgress) || waited > timeout_) {
        n_.ncclCommAbort(comm_);
        owned_ = false;
        return async != kNcclSuccess && async != kNcclInProgress
                   ? nccl_fail(n_, "an all-reduce", async)
                   : make_error(
                         "NCCL: an all-reduce made no progress for {} s (a peer died or "
                         "did not take part); the communicator was aborted",
                         timeout_);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  const Nccl& n_;
  const runtime::cuda::Api& cu_;
  ncclComm_t comm_;
  bool owned_;
  void* stream_;
  int device_;
  double timeout_;  // seconds without progress (nccl_timeout)
  int rank_ = 0, size_ = 1;
};

// NCCL and the CUDA driver, and the timeout every communicator takes (checked first: a bad
// value is refused on a machine without a GPU too).
struct Libraries {
  const Nccl* nccl;
  const runtime::cuda::Api* cuda;
  double timeout;
};

Expected<Libraries> libraries() {
  auto timeout = nccl_timeout();
  if (!timeout) return timeout.error();
  auto n = nccl();
  if (!n) return n.error();
  auto cu = runtime::cuda::api();
  if (!cu) return cu.error();
  return Libraries{*n, *cu, *timeout};
}

}  // namespace

bool have_nccl() { return nccl().ok(); }

Expected<std::shared_ptr<Communicator>> nccl_communicator(void* nccl_comm, void* cuda_stream) {
  auto libs = libraries();
  if (!libs) return libs.error();
  if (!nccl_comm) return make_error("nccl_communicator: no ncclComm_t given");
  auto comm = static_cast<ncclComm_t>(nccl_comm);
  int device = 0;
  if (auto r = libs->nccl->ncclCommCuDevice(comm, &device); r != kNcclSuccess)
    return nccl_fail(*libs->nccl, "ncclCommCuDevice", r);
  return std::shared_ptr<Communicator>(std::make_shared<NcclCommunicator>(
      *libs->nccl, *libs->cuda, comm, false, cuda_stream, device, libs->timeout));
}

Expected<NcclId> nccl_unique_id() {
  auto n = nccl();
  if (!n) return n.error();
  ncclUniqueId id{};
  if (auto r = (*n)->ncclGetUniqueId(&id); r != kNcclSuccess)
    return nccl_fail(**n, "ncclGetUniqueId", r);
  NcclId out;
  std::memcpy(out.data(), id.internal, out.size());
  return out;
}

Expected<std::shared_ptr<Communicator>> nccl_communicator_init(int ranks, int rank,
                                                               const NcclId& id, int device,
                                                               void* cuda_stream) {
  auto libs = libraries();
  if (!libs) return libs.error();
  if (ranks < 1 || rank < 0 || rank >= ranks)
    return make_error("nccl_communicator_init: rank {} of {}", rank, ranks);
  auto ctx = runtime::cuda::primary_context(device);
  if (!ctx) return ctx.error();
  runtime::cuda::ContextScope scope(*libs->cuda, *ctx);
  ncclUniqueId uid;
  std::memcpy(uid.internal, id.data(), id.size());
  ncclComm_t comm = nullptr;
  if (auto r = libs->nccl->ncclCommInitRank(&comm, ranks, uid, rank); r != kNcclSuccess)
    return nccl_fail(*libs->nccl, "ncclCommInitRank", r);
  return std::shared_ptr<Communicator>(std::make_shared<NcclCommunicator>(
      *libs->nccl, *libs->cuda, comm, true, cuda_stream, device, libs->timeout));
}

Expected<std::shared_ptr<Communicator>> nccl_communicator_mpi(int device, void* cuda_stream) {
#ifdef OPTJIT_HAVE_MPI
  auto libs = libraries();  // before MPI: a machine without NCCL or a GPU says so first
  if (!libs) return libs.error();
  auto mpi = mpi_communicator();  // initialises MPI if the program has not
  if (!mpi) return mpi.error();
  NcclId id{};
  if ((*mpi)->rank() == 0) {
    auto made = nccl_unique_id();
    if (!made) return made.error();
    id = *made;
  }
  if (MPI_Bcast(id.data(), static_cast<int>(id.size()), MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
    return make_error("MPI_Bcast of NCCL's unique id failed");
  return nccl_communicator_init((*mpi)->size(), (*mpi)->rank(), id, device, cuda_stream);
#else
  (void)device, (void)cuda_stream;
  return make_error("nccl_communicator_mpi: this build of optjit has no MPI (libopenmpi-dev)");
#endif
}

}  // namespace optjit
