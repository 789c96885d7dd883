#include "runtime/cuda_backend.h"

#include "runtime/chunks.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "codegen/c_emitter.h"
#include "codegen/cuda_kernels.h"
#include "runtime/cuda_api.h"
#include "runtime/device_step.h"

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
  TensorSet tensors;  // what the buffers below are for
  bool uploaded = false;
  // The device step (CudaOptions::device_step): its kernels, and its buffers per tensor set.
  std::optional<DeviceStepHost> step_host;
  std::vector<cuda::CUfunction> segments, combines, folds;  // combines and folds: null where none
  cuda::CUfunction commit = nullptr;
  CUdeviceptr hypers = 0, ctl = 0, tinfo = 0, vals = 0, fold_rows = 0, first = 0;
  std::vector<CUdeviceptr> uniform_bufs, row_bufs;  // per pass
  std::vector<double> hyper_values;                 // this step's, until the copy has left them
  cuda::CUgraph graph = nullptr;
  cuda::CUgraphExec graph_exec = nullptr;

  void free_all() {
    for (CUdeviceptr p : arenas)
      if (p) api->cuMemFree(p);
    arenas.clear();
    for (CUdeviceptr* p : {&pointer_table, &rows, &chunk_buf, &uniforms, &partials, &hypers, &ctl,
                           &tinfo, &vals, &fold_rows, &first})
      if (*p) api->cuMemFree(*p), *p = 0;
    for (auto* list : {&uniform_bufs, &row_bufs}) {
      for (CUdeviceptr p : *list) api->cuMemFree(p);
      list->clear();
    }
    uniforms_bytes = partials_bytes = 0;
    if (step_host) step_host->forget();
    if (graph_exec) api->cuGraphExecDestroy(graph_exec), graph_exec = nullptr;
    if (graph) api->cuGraphDestroy(graph), graph = nullptr;
  }
  Status allocate_device_step(const plan::Plan& plan, const OptimizerState& s);
  cuda::CUresult enqueue_device_step(const plan::Plan& plan, const CudaDeviceInfo& info);
  Status capture_graph(const plan::Plan& plan, const CudaDeviceInfo& info);
  Expected<StepResult> device_step(const plan::Plan& plan, OptimizerState& s,
                                   const CudaDeviceInfo& info);
  Status copy_back(const plan::Plan& plan, OptimizerState& s);
  ~Impl() {
    if (!api || !ctx) return;
    cuda::ContextScope scope(*api, ctx);
    free_all();
    if (stream) api->cuStreamDestroy(stream);
    if (module) api->cuModuleUnload(module);
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
  options.device_step |= options.graph;
  std::unique_ptr<CudaBackend> b(new CudaBackend(plan));
  b->info_ = (*devices)[options.device];
  if (options.graph && !(*cuda::api())->cuGraphLaunch)
    return make_error("this CUDA driver has no graph API (cuGraphLaunch); run without graphs");
  auto built =
      codegen::plan_cubin(plan, b->info_.arch(), options.launch, cache, options.device_step);
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
  auto ctx = cuda::primary_context(m.dev);
  if (!ctx) return ctx.error();
  m.ctx = *ctx;
  cuda::ContextScope scope(A, m.ctx);
  if (!scope.ok()) return make_error("CUDA: could not make device {}'s context current", options.device);
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
  if (options.device_step) {
    m.step_host.emplace(codegen::device_step_layout(plan));
    auto get = [&](const std::string& name, cuda::CUfunction* f) -> Status {
      cuda::CUresult err = A.cuModuleGetFunction(f, m.module, name.c_str());
      return err == 0 ? Status::Ok() : Status(cuda::fail("cuModuleGetFunction", err));
    };
    for (size_t k = 0; k <= plan.passes.size(); ++k) {
      m.segments.push_back(nullptr);
      OPTJIT_TRY(get(fmt::format("optjit_segment_{}", k), &m.segments.back()));
      if (k == plan.passes.size()) break;
      m.combines.push_back(nullptr);
      m.folds.push_back(nullptr);
      if (m.step_host->layout().combines[k])
        OPTJIT_TRY(get(fmt::format("optjit_combine_{}", k), &m.combines.back()));
      if (m.step_host->layout().folds[k])
        OPTJIT_TRY(get(fmt::format("optjit_fold_{}", k), &m.folds.back()));
    }
    OPTJIT_TRY(get("optjit_commit", &m.commit));
  }
  return b;
}

Expected<StepResult> CudaBackend::step(OptimizerState& s) {
  Impl& m = *impl_;
  const cuda::Api& A = *m.api;
  cuda::ContextScope scope(A, m.ctx);
  const size_t T = s.tensors.size(), B = plan_.buffers.size();
  if (!m.tensors.matches(s) || m.arenas.empty()) {
    m.free_all();
    // Everything for this tensor set, or (on any failure, e.g. out of device memory) nothing,
    // so the next step starts again instead of using half of it.
    auto build = [&]() -> Status {
      m.tensors = TensorSet::of(s);
      m.table = ChunkTable::build(m.tensors.numels, m.options.launch.chunk_elements,
                                  codegen::kArenaAlignElements);
      m.arenas.assign(B, 0);
      for (size_t b = 0; b < B; ++b)
        OPTJIT_TRY(m.alloc(
            &m.arenas[b], static_cast<size_t>(m.table.total) * size_bytes(plan_.buffers[b].storage),
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
      if (m.options.device_step) OPTJIT_TRY(m.allocate_device_step(plan_, s));
      return Status::Ok();
    };
    if (Status st = build(); !st) {
      m.free_all();
      m.table = {};
      m.tensors = {};
      return st.error();
    }
    m.uploaded = false;
  }
  std::vector<uint8_t> staging;
  auto copy_in = [&](size_t b) -> Status {
    pack_arena(m.table, s, b, size_bytes(plan_.buffers[b].storage), staging);
    return m.upload(m.arenas[b], staging.data(), staging.size());
  };
  for (size_t b = 0; b < B; ++b)
    if (uploads_before_step(plan_, b, !m.uploaded, m.options.resident_grads, m.options.host_params))
      OPTJIT_TRY(copy_in(b));
  m.uploaded = true;
  if (m.options.device_step) return m.device_step(plan_, s, info_);

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
  return drive_step(plan_, s, run_pass, [&] { return m.copy_back(plan_, s); });
}

Status CudaBackend::Impl::copy_back(const plan::Plan& plan, OptimizerState& s) {
  if (!options.copy_back) return Status::Ok();
  const std::vector<bool> written = visible_writes(plan);
  std::vector<uint8_t> staging;
  for (size_t b = 0; b < plan.buffers.size(); ++b) {
    if (!written[b] || table.total == 0) continue;
    size_t es = size_bytes(plan.buffers[b].storage);
    staging.resize(static_cast<size_t>(table.total) * es);
    OPTJIT_TRY(download(staging.data(), arenas[b], staging.size()));
    unpack_arena(table, s, b, es, staging.data());
  }
  return Status::Ok();
}

// The device step's buffers for this tensor set: the control block (step count, skip flags,
// scalar states), hyperparameters, the tensor table (group, numel), the scalar program's values,
// and per pass a uniform table and the rows pointing into it.
Status CudaBackend::Impl::allocate_device_step(const plan::Plan& plan, const OptimizerState& s) {
  const size_t T = s.tensors.size(), G = s.groups.size(), B = plan.buffers.size();
  const codegen::DeviceStepLayout& layout = step_host->layout();
  const std::vector<double> info = DeviceStepHost::tensor_info(s);
  std::vector<long long> firsts(table.first.begin(), table.first.end());
  OPTJIT_TRY(alloc(&hypers, G * layout.hypers * 8, "allocating hyperparameters"));
  OPTJIT_TRY(alloc(&ctl, layout.ctl_size(G) * 8, "allocating the step's control block"));
  OPTJIT_TRY(alloc(&tinfo, info.size() * 8, "allocating the tensor table"));
  OPTJIT_TRY(upload(tinfo, info.data(), info.size() * 8));
  OPTJIT_TRY(alloc(&vals, layout.vals_size(G, T) * 8, "allocating the scalar program's values"));
  OPTJIT_TRY(alloc(&fold_rows, layout.fold_rows * T * 8, "allocating reduction rows"));
  OPTJIT_TRY(alloc(&first, firsts.size() * 8, "allocating the chunk index"));
  OPTJIT_TRY(upload(first, firsts.data(), firsts.size() * 8));
  OPTJIT_TRY(ensure(&partials, &partials_bytes, table.chunks.size() * layout.partials_per_chunk * 8,
                    "allocating partials"));
  for (const auto& pass : plan.passes) {
    const size_t U = std::max<size_t>(pass.uniforms.size(), 1);
    uniform_bufs.push_back(0);
    OPTJIT_TRY(alloc(&uniform_bufs.back(), T * U * 8, "allocating uniforms"));
    std::vector<CUdeviceptr> r(2 * T);
    for (size_t t = 0; t < T; ++t) {
      r[2 * t] = pointer_table + t * B * 8;
      r[2 * t + 1] = uniform_bufs.back() + t * U * 8;
    }
    row_bufs.push_back(0);
    OPTJIT_TRY(alloc(&row_bufs.back(), r.size() * 8, "allocating the tensor table"));
    OPTJIT_TRY(upload(row_bufs.back(), r.data(), r.size() * 8));
  }
  return Status::Ok();
}

// Every launch of one step, in order, on the stream (also what a graph captures).
cuda::CUresult CudaBackend::Impl::enqueue_device_step(const plan::Plan& plan,
                                                      const CudaDeviceInfo& info) {
  const cuda::Api& A = *api;
  long long T = static_cast<long long>(tensors.numels.size()),
            G = static_cast<long long>(tensors.group_count),
            n = static_cast<long long>(table.chunks.size());
  constexpr unsigned kThreads = 128;
  auto blocks = [&](long long items) {
    return static_cast<unsigned>((std::max(items, 1LL) + kThreads - 1) / kThreads);
  };
  cuda::CUresult r = 0;
  auto launch = [&](cuda::CUfunction f, unsigned grid, unsigned block, void** args) {
    if (r == 0) r = A.cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, stream, args, nullptr);
  };
  const unsigned pass_grid = static_cast<unsigned>(options.launch.grid(n, info.sm_count));
  for (size_t k = 0; k <= plan.passes.size(); ++k) {
    CUdeviceptr uni = k < plan.passes.size() ? uniform_bufs[k] : vals;  // the last writes none
    void* seg_args[] = {&hypers, &ctl, &tinfo, &vals, &uni, &T, &G};
    launch(segments[k], blocks(std::max(T, G)), kThreads, seg_args);
    if (k == plan.passes.size()) break;
    void* pass_args[] = {&row_bufs[k], &chunk_buf, &n, &partials, &ctl};
    launch(kernels[k], pass_grid, static_cast<unsigned>(options.launch.block), pass_args);
    // A work-group of kCombineLanes per tensor, then one for the fold (kernel_abi.h).
    constexpr unsigned kLanes = static_cast<unsigned>(codegen::kCombineLanes);
    void* combine_args[] = {&partials, &first, &vals, &fold_rows, &T, &G};
    if (combines[k]) launch(combines[k], static_cast<unsigned>(std::max(T, 1LL)), kLanes, combine_args);
    void* fold_args[] = {&fold_rows, &vals, &T, &G};
    if (folds[k]) launch(folds[k], 1, kLanes, fold_args);
  }
  void* commit_args[] = {&ctl, &G};
  launch(commit, 1, 1, commit_args);
  return r;
}

// Records the step once; replays then cost one cuGraphLaunch. The kernels' arguments are all
// device addresses fixed for this tensor set (the values they point at change, the addresses
// do not), so the graph stays valid until the tensors change.
Status CudaBackend::Impl::capture_graph(const plan::Plan& plan, const CudaDeviceInfo& info) {
  const cuda::Api& A = *api;
  cuda::CUresult r = A.cuStreamBeginCapture(stream, cuda::kCaptureModeThreadLocal);
  if (r != 0) return cuda::fail("cuStreamBeginCapture", r);
  cuda::CUresult launched = enqueue_device_step(plan, info);
  r = A.cuStreamEndCapture(stream, &graph);
  // A failed capture may still hand back a graph; it is freed here, not kept half-built.
  auto drop = [&] {
    if (graph) A.cuGraphDestroy(graph), graph = nullptr;
  };
  if (launched != 0) return drop(), cuda::fail("capturing a step's launches", launched);
  if (r != 0) return drop(), cuda::fail("cuStreamEndCapture", r);
  if ((r = A.cuGraphInstantiateWithFlags(&graph_exec, graph, 0)) != 0) {
    graph_exec = nullptr;
    return drop(), cuda::fail("cuGraphInstantiate", r);
  }
  return Status::Ok();
}

Expected<StepResult> CudaBackend::Impl::device_step(const plan::Plan& plan, OptimizerState& s,
                                                    const CudaDeviceInfo& info) {
  const cuda::Api& A = *api;
  if (auto ctl_values = step_host->ctl_to_write(s))
    OPTJIT_TRY(upload(ctl, ctl_values->data(), ctl_values->size() * 8));
  hyper_values = step_host->hypers(s);
  cuda::CUresult r = 0;
  if (!hyper_values.empty())
    r = A.cuMemcpyHtoDAsync(hypers, hyper_values.data(), hyper_values.size() * 8, stream);
  if (r != 0) return cuda::fail("copying hyperparameters to the device", r);
  if (options.graph) {
    if (!graph_exec) OPTJIT_TRY(capture_graph(plan, info));
    if ((r = A.cuGraphLaunch(graph_exec, stream)) != 0) return cuda::fail("cuGraphLaunch", r);
  } else if ((r = enqueue_device_step(plan, info)) != 0) {
    return cuda::fail("launching a step", r);
  }
  const size_t ctl_bytes = step_host->layout().ctl_size(s.groups.size()) * 8;
  if (Status st = download(step_host->read_back(s), ctl, ctl_bytes); !st) {
    step_host->forget();
    return st.error();
  }
  if (step_host->skipped()) return StepResult{true};
  OPTJIT_TRY(copy_back(plan, s));
  step_host->commit(s);
  return StepResult{false};
}

void CudaBackend::state_changed() {
  impl_->uploaded = false;
  if (impl_->step_host) impl_->step_host->forget();
}

Expected<double> CudaBackend::copy_seconds(size_t bytes, int repetitions) {
  Impl& m = *impl_;
  const cuda::Api& A = *m.api;
  cuda::ContextScope scope(A, m.ctx);
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
