#include "runtime/cuda_backend.h"

#include "runtime/chunks.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "codegen/c_emitter.h"
#include "codegen/cuda_kernels.h"
#include "runtime/cuda_api.h"

namespace optjit::runtime {

using cuda::CUdeviceptr;

struct CudaBackend::Impl {
  const cuda::Api* api = nullptr;
  cuda::CUdevice dev = 0;
  cuda::CUcontext ctx = nullptr;
  cuda::CUmodule module = nullptr;
  cuda::CUstream stream = nullptr;
  std::vector<cuda::CUfunction> kernels;
  CudaOptions options;
  ChunkTable table;
  std::vector<CUdeviceptr> arenas;  // one per plan buffer
  CUdeviceptr pointer_table = 0, rows = 0, chunk_buf = 0, uniforms = 0, partials = 0;
  size_t uniforms_bytes = 0, partials_bytes = 0;
  bool uploaded = false;

  void free_all() {
    for (CUdeviceptr p : arenas)
      if (p) api->cuMemFree(p);
    arenas.clear();
    for (CUdeviceptr* p : {&pointer_table, &rows, &chunk_buf, &uniforms, &partials})
      if (*p) api->cuMemFree(*p), *p = 0;
    uniforms_bytes = partials_bytes = 0;
  }
  ~Impl() {
    if (!api) return;
    api->cuCtxSetCurrent(ctx);
    free_all();
    if (stream) api->cuStreamDestroy(stream);
    if (module) api->cuModuleUnload(module);
    if (ctx) api->cuDevicePrimaryCtxRelease(dev);
  }
  Status alloc(CUdeviceptr* p, size_t bytes, const char* what) {
    cuda::CUresult r = api->cuMemAlloc(p, std::max<size_t>(bytes, 8));
    if (r != 0) return cuda::fail(what, r);
    return Status::Ok();
  }
  Status upload(CUdeviceptr dst, const void* src, size_t bytes) {
    if (bytes == 0) return Status::Ok();
    cuda::CUresult r = api->cuMemcpyHtoDAsync(dst, src, bytes, stream);
    if (r == 0) r = api->cuStreamSynchronize(stream);
    return r == 0 ? Status::Ok() : Status(cuda::fail("copying to the device", r));
  }
  Status download(void* dst, CUdeviceptr src, size_t bytes) {
    if (bytes == 0) return Status::Ok();
    cuda::CUresult r = api->cuMemcpyDtoHAsync(dst, src, bytes, stream);
    if (r == 0) r = api->cuStreamSynchronize(stream);
    return r == 0 ? Status::Ok() : Status(cuda::fail("copying from the device", r));
  }
  // Grows a scratch device buffer to at least `bytes`.
  Status ensure(CUdeviceptr* p, size_t* have, size_t bytes, const char* what) {
    if (*have >= bytes && *p) return Status::Ok();
    if (*p) api->cuMemFree(*p), *p = 0;
    OPTJIT_TRY(alloc(p, bytes, what));
    *have = bytes;
    return Status::Ok();
  }
};

CudaBackend::CudaBackend(const plan::Plan& plan) : plan_(plan) {}
CudaBackend::~CudaBackend() = default;

Expected<std::unique_ptr<CudaBackend>> CudaBackend::create(const plan::Plan& plan,
                                                           CudaOptions options,
                                                           cache::KernelCache* cache) {
  auto devices = cuda_devices();
  if (!devices) return devices.error();
  if (options.device < 0 || options.device >= static_cast<int>(devices->size()))
    return make_error("no CUDA device {} (there are {})", options.device, devices->size());
  OPTJIT_TRY(options.launch.validate());
  std::unique_ptr<CudaBackend> b(new CudaBackend(plan));
  b->info_ = (*devices)[options.device];
  auto built = codegen::plan_cubin(plan, b->info_.arch(), options.launch, cache);
  if (!built) return built.error();
  const codegen::Cubin* cubin = &built->cubin;
  b->compile_seconds_ = cubin->compile_seconds;
  b->impl_ = std::make_unique<Impl>();
  Impl& m = *b->impl_;
  m.api = *cuda::api();
  m.options = options;
  const cuda::Api& A = *m.api;
  cuda::CUresult r;
  if ((r = A.cuDeviceGet(&m.dev, options.device)) != 0) return cuda::fail("cuDeviceGet", r);
  if ((r = A.cuDevicePrimaryCtxRetain(&m.ctx, m.dev)) != 0)
    return cuda::fail("cuDevicePrimaryCtxRetain", r);
  if ((r = A.cuCtxSetCurrent(m.ctx)) != 0) return cuda::fail("cuCtxSetCurrent", r);
  if ((r = A.cuModuleLoadData(&m.module, cubin->image.data())) != 0)
    return cuda::fail("loading the cubin", r);
  if ((r = A.cuStreamCreate(&m.stream, 1 /* non-blocking */)) != 0)
    return cuda::fail("cuStreamCreate", r);
  for (size_t k = 0; k < plan.passes.size(); ++k) {
    cuda::CUfunction f;
    if ((r = A.cuModuleGetFunction(&f, m.module, fmt::format("optjit_pass_{}", k).c_str())) != 0)
      return cuda::fail("cuModuleGetFunction", r);
    m.kernels.push_back(f);
  }
  return b;
}

Expected<StepResult> CudaBackend::step(OptimizerState& s) {
  Impl& m = *impl_;
  const cuda::Api& A = *m.api;
  A.cuCtxSetCurrent(m.ctx);
  const size_t T = s.tensors.size(), B = plan_.buffers.size();
  std::vector<int64_t> numels;
  for (const auto& t : s.tensors) numels.push_back(t.numel);
  if (numels != m.table.numels || m.arenas.empty()) {
    m.free_all();
    m.table =
        ChunkTable::build(numels, m.options.launch.chunk_elements, codegen::kArenaAlignElements);
    m.arenas.assign(B, 0);
    for (size_t b = 0; b < B; ++b)
      OPTJIT_TRY(m.alloc(&m.arenas[b],
                         static_cast<size_t>(m.table.total) * size_bytes(plan_.buffers[b].storage),
                         "allocating optimizer state on the GPU"));
    // The pointer table: per tensor, where each buffer's elements start.
    std::vector<CUdeviceptr> ptrs(T * B);
    for (size_t t = 0; t < T; ++t)
      for (size_t b = 0; b < B; ++b)
        ptrs[t * B + b] = m.arenas[b] + m.table.base[t] * size_bytes(plan_.buffers[b].storage);
    OPTJIT_TRY(m.alloc(&m.pointer_table, ptrs.size() * 8, "allocating the tensor table"));
    OPTJIT_TRY(m.upload(m.pointer_table, ptrs.data(), ptrs.size() * 8));
    OPTJIT_TRY(m.alloc(&m.rows, T * 16, "allocating the tensor table"));
    OPTJIT_TRY(m.alloc(&m.chunk_buf, m.table.chunks.size() * sizeof(codegen::Chunk),
                       "allocating the chunk table"));
    OPTJIT_TRY(m.upload(m.chunk_buf, m.table.chunks.data(),
                        m.table.chunks.size() * sizeof(codegen::Chunk)));
    m.uploaded = false;
  }
  std::vector<uint8_t> staging;
  auto copy_in = [&](size_t b) -> Status {
    pack_arena(m.table, s, b, size_bytes(plan_.buffers[b].storage), staging);
    return m.upload(m.arenas[b], staging.data(), staging.size());
  };
  for (size_t b = 0; b < B; ++b)
    if (uploads_before_step(plan_, b, !m.uploaded, m.options.resident_grads))
      OPTJIT_TRY(copy_in(b));
  m.uploaded = true;

  const int64_t nchunks = static_cast<int64_t>(m.table.chunks.size());
  auto run_pass = [&](size_t k, HostProgram& host) -> Status {
    const plan::Pass& pass = plan_.passes[k];
    const size_t U = std::max<size_t>(pass.uniforms.size(), 1), R = pass.reductions.size();
    // Uniforms (device values) and rows {pointer row, uniform row}.
    std::vector<double> uniforms = host.uniform_table(k, U);
    OPTJIT_TRY(
        m.ensure(&m.uniforms, &m.uniforms_bytes, uniforms.size() * 8, "allocating uniforms"));
    OPTJIT_TRY(m.upload(m.uniforms, uniforms.data(), uniforms.size() * 8));
    std::vector<CUdeviceptr> rows(2 * T);
    for (size_t t = 0; t < T; ++t) {
      rows[2 * t] = m.pointer_table + t * B * 8;
      rows[2 * t + 1] = m.uniforms + t * U * 8;
    }
    OPTJIT_TRY(m.upload(m.rows, rows.data(), rows.size() * 8));
    OPTJIT_TRY(m.ensure(&m.partials, &m.partials_bytes, std::max<size_t>(8, nchunks * R * 8),
                        "allocating partials"));
    long long n = nchunks;
    void* args[] = {&m.rows, &m.chunk_buf, &n, &m.partials};
    const codegen::GpuLaunch& launch = m.options.launch;
    unsigned grid = static_cast<unsigned>(launch.grid(nchunks, info_.sm_count));
    cuda::CUresult r =
        A.cuLaunchKernel(m.kernels[k], grid, 1, 1, static_cast<unsigned>(launch.block), 1, 1, 0,
                         m.stream, args, nullptr);
    if (r != 0) return cuda::fail("launching a pass", r);
    std::vector<double> partials(static_cast<size_t>(nchunks) * R);
    if (R > 0)
      OPTJIT_TRY(m.download(partials.data(), m.partials, partials.size() * 8));
    else if ((r = A.cuStreamSynchronize(m.stream)) != 0)
      return cuda::fail("running a pass", r);
    if (R == 0) return Status::Ok();
    auto partial = combine_partials(plan_, pass, m.table, partials.data());
    host.finish_reductions(k, partial);
    return Status::Ok();
  };
  auto copy_back = [&]() -> Status {
    if (m.options.copy_back) {
      const std::vector<bool> written = visible_writes(plan_);
      for (size_t b = 0; b < B; ++b) {
        if (!written[b] || m.table.total == 0) continue;
        size_t es = size_bytes(plan_.buffers[b].storage);
        staging.resize(static_cast<size_t>(m.table.total) * es);
        OPTJIT_TRY(m.download(staging.data(), m.arenas[b], staging.size()));
        unpack_arena(m.table, s, b, es, staging.data());
      }
    }
    return Status::Ok();
  };
  return drive_step(plan_, s, run_pass, copy_back);
}

Expected<double> CudaBackend::copy_seconds(size_t bytes, int repetitions) {
  Impl& m = *impl_;
  const cuda::Api& A = *m.api;
  A.cuCtxSetCurrent(m.ctx);
  CUdeviceptr src = 0, dst = 0;
  OPTJIT_TRY(m.alloc(&src, bytes, "allocating a copy-bandwidth buffer"));
  if (Status st = m.alloc(&dst, bytes, "allocating a copy-bandwidth buffer"); !st) {
    A.cuMemFree(src);
    return st.error();
  }
  std::vector<double> times;
  cuda::CUresult r = 0;
  for (int i = 0; i <= repetitions && r == 0; ++i) {  // the first is a warm-up
    auto t0 = std::chrono::steady_clock::now();
    r = A.cuMemcpyDtoDAsync(dst, src, bytes, m.stream);
    if (r == 0) r = A.cuStreamSynchronize(m.stream);
    if (i > 0)
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  A.cuMemFree(src);
  A.cuMemFree(dst);
  if (r != 0) return cuda::fail("copying between device buffers", r);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace optjit::runtime
