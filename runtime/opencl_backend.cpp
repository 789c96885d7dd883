#define CL_TARGET_OPENCL_VERSION 300
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include "runtime/opencl_backend.h"

#include "runtime/chunks.h"

#include <CL/cl.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "cache/kernel_cache.h"
#include "codegen/c_emitter.h"
#include "ir/text.h"
#include "runtime/device_step.h"
#include "runtime/devices.h"

namespace optjit::runtime {

namespace {

const char* cl_error(cl_int e) {
  switch (e) {
    case CL_DEVICE_NOT_FOUND:
      return "CL_DEVICE_NOT_FOUND";
    case CL_OUT_OF_RESOURCES:
      return "CL_OUT_OF_RESOURCES";
    case CL_OUT_OF_HOST_MEMORY:
      return "CL_OUT_OF_HOST_MEMORY";
    case CL_MEM_OBJECT_ALLOCATION_FAILURE:
      return "CL_MEM_OBJECT_ALLOCATION_FAILURE (out of device memory)";
    case CL_BUILD_PROGRAM_FAILURE:
      return "CL_BUILD_PROGRAM_FAILURE";
    case CL_INVALID_VALUE:
      return "CL_INVALID_VALUE";
    case CL_INVALID_BUFFER_SIZE:
      return "CL_INVALID_BUFFER_SIZE";
    case CL_INVALID_WORK_GROUP_SIZE:
      return "CL_INVALID_WORK_GROUP_SIZE";
    case CL_INVALID_KERNEL_ARGS:
      return "CL_INVALID_KERNEL_ARGS";
    case -1001:
      return "CL_PLATFORM_NOT_FOUND_KHR";
    default:
      return "an OpenCL error";
  }
}

Error cl_fail(const char* what, cl_int e) {
  return make_error("OpenCL: {} failed: {} ({})", what, cl_error(e), e);
}

std::string device_string(cl_device_id d, cl_device_info what) {
  size_t n = 0;
  if (clGetDeviceInfo(d, what, 0, nullptr, &n) != CL_SUCCESS) return "";
  std::string s(n, '\0');
  clGetDeviceInfo(d, what, n, s.data(), nullptr);
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

std::string platform_string(cl_platform_id p, cl_platform_info what) {
  size_t n = 0;
  if (clGetPlatformInfo(p, what, 0, nullptr, &n) != CL_SUCCESS) return "";
  std::string s(n, '\0');
  clGetPlatformInfo(p, what, n, s.data(), nullptr);
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

struct Found {
  cl_platform_id platform;
  cl_device_id device;
  OpenclDeviceInfo info;
};

Expected<std::vector<Found>> find_devices() {
  cl_uint np = 0;
  cl_int e = clGetPlatformIDs(0, nullptr, &np);
  if (e == -1001 || np == 0)
    return make_error("no OpenCL platform found (install an ICD, e.g. Debian's pocl-opencl-icd)");
  if (e != CL_SUCCESS) return cl_fail("clGetPlatformIDs", e);
  std::vector<cl_platform_id> platforms(np);
  clGetPlatformIDs(np, platforms.data(), nullptr);
  std::vector<Found> out;
  for (cl_platform_id p : platforms) {
    cl_uint nd = 0;
    if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &nd) != CL_SUCCESS || nd == 0) continue;
    std::vector<cl_device_id> devs(nd);
    clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, nd, devs.data(), nullptr);
    for (cl_device_id d : devs) {
      OpenclDeviceInfo i;
      i.index = static_cast<int>(out.size());
      i.platform = platform_string(p, CL_PLATFORM_NAME);
      i.platform_version = platform_string(p, CL_PLATFORM_VERSION);
      i.name = device_string(d, CL_DEVICE_NAME);
      i.vendor = device_string(d, CL_DEVICE_VENDOR);
      i.driver_version = device_string(d, CL_DRIVER_VERSION);
      i.version = device_string(d, CL_DEVICE_VERSION);
      cl_device_type type = 0;
      clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof(type), &type, nullptr);
      i.gpu = (type & CL_DEVICE_TYPE_GPU) != 0;
      clGetDeviceInfo(d, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof(i.compute_units), &i.compute_units,
                      nullptr);
      cl_ulong mem = 0;
      clGetDeviceInfo(d, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof(mem), &mem, nullptr);
      i.global_memory = mem;
      clGetDeviceInfo(d, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof(i.max_work_group), &i.max_work_group,
                      nullptr);
      i.fp64 = device_string(d, CL_DEVICE_EXTENSIONS).find("cl_khr_fp64") != std::string::npos;
      if (device_string(d, CL_DEVICE_EXTENSIONS).find("cl_khr_device_uuid") != std::string::npos) {
        unsigned char uuid[16] = {};
        if (clGetDeviceInfo(d, 0x106A /* CL_DEVICE_UUID_KHR */, 16, uuid, nullptr) == CL_SUCCESS)
          for (unsigned char c : uuid) i.uuid += fmt::format("{:02x}", c);
      }
      out.push_back({p, d, i});
    }
  }
  if (out.empty()) return make_error("OpenCL platforms were found, but no devices");
  return out;
}

}  // namespace

Expected<std::vector<OpenclDeviceInfo>> opencl_devices() {
  auto found = find_devices();
  if (!found) return found.error();
  std::vector<OpenclDeviceInfo> out;
  for (const auto& f : *found) out.push_back(f.info);
  return out;
}

namespace {

// Sets a kernel's arguments in order from index `first` (cl_mem handles and 64-bit integers).
template <typename... Args>
Status set_args_from(cl_kernel kernel, cl_uint first, const Args&... args) {
  cl_uint i = first;
  cl_int e = CL_SUCCESS;
  ((e = e == CL_SUCCESS ? clSetKernelArg(kernel, i++, sizeof(Args), &args) : e), ...);
  return e == CL_SUCCESS ? Status::Ok() : Status(cl_fail("clSetKernelArg", e));
}

template <typename... Args>
Status set_args(cl_kernel kernel, const Args&... args) {
  return set_args_from(kernel, 0, args...);
}

}  // namespace

struct OpenclBackend::Impl {
  cl_context ctx = nullptr;
  cl_command_queue queue = nullptr;
  cl_program program = nullptr;
  std::vector<cl_kernel> kernels;
  OpenclOptions options;
  // Per tensor set (rebuilt when numels change).
  ChunkTable table;
  std::vector<cl_mem> arenas;
  cl_mem rows = nullptr, chunk_buf = nullptr;
  TensorSet tensors;  // what the buffers below are for
  bool uploaded = false;
  // The device step (OpenclOptions::device_step): its kernels, and its buffers per tensor set.
  std::optional<DeviceStepHost> step_host;
  std::vector<cl_kernel> segments, combines, folds;  // combines and folds: null where none
  cl_kernel commit = nullptr;
  cl_mem hypers = nullptr, ctl = nullptr, tinfo = nullptr, vals = nullptr, fold_rows = nullptr,
         first = nullptr, partials = nullptr;
  std::vector<cl_mem> uniform_bufs, row_bufs;  // per pass
  ~Impl() {
    release_buffers();
    for (auto* list : {&kernels, &segments, &combines, &folds})
      for (cl_kernel k : *list)
        if (k) clReleaseKernel(k);
    if (commit) clReleaseKernel(commit);
    if (program) clReleaseProgram(program);
    if (queue) clReleaseCommandQueue(queue);
    if (ctx) clReleaseContext(ctx);
  }
  void release_buffers() {
    for (cl_mem m : arenas)
      if (m) clReleaseMemObject(m);
    arenas.clear();
    if (rows) clReleaseMemObject(rows), rows = nullptr;
    if (chunk_buf) clReleaseMemObject(chunk_buf), chunk_buf = nullptr;
    for (cl_mem* m : {&hypers, &ctl, &tinfo, &vals, &fold_rows, &first, &partials})
      if (*m) clReleaseMemObject(*m), *m = nullptr;
    for (auto* list : {&uniform_bufs, &row_bufs}) {
      for (cl_mem m : *list) clReleaseMemObject(m);
      list->clear();
    }
    if (step_host) step_host->forget();
  }
  Expected<cl_mem> buffer(size_t bytes, const void* init, const char* what) {
    cl_int e;
    cl_mem mem = clCreateBuffer(ctx, CL_MEM_READ_WRITE | (init ? CL_MEM_COPY_HOST_PTR : 0),
                                std::max<size_t>(bytes, 8), const_cast<void*>(init), &e);
    if (!mem) return cl_fail(what, e);
    return mem;
  }
  // Pass k's arguments: every arena, then its tables (and, for the device step, ctl).
  Status set_pass_args(size_t k, cl_mem uniforms, cl_mem rows, cl_mem partials_buf) {
    for (size_t b = 0; b < arenas.size(); ++b)
      OPTJIT_TRY(set_args_from(kernels[k], static_cast<cl_uint>(b), arenas[b]));
    const auto a = static_cast<cl_uint>(arenas.size());
    const auto n = static_cast<cl_long>(table.chunks.size());
    if (options.device_step)
      return set_args_from(kernels[k], a, uniforms, rows, chunk_buf, n, partials_buf, ctl);
    return set_args_from(kernels[k], a, uniforms, rows, chunk_buf, n, partials_buf);
  }
  Status copy_back(const plan::Plan& plan, OptimizerState& s);
  Status allocate_device_step(const plan::Plan& plan, const OptimizerState& s);
  Expected<StepResult> device_step(const plan::Plan& plan, OptimizerState& s,
                                   const OpenclDeviceInfo& info);
};

OpenclBackend::OpenclBackend(const plan::Plan& plan) : plan_(plan) {}
OpenclBackend::~OpenclBackend() = default;

Expected<std::unique_ptr<OpenclBackend>> OpenclBackend::create(const plan::Plan& plan,
                                                               OpenclOptions options,
                                                               cache::KernelCache* cache) {
  auto found = find_devices();
  if (!found) return found.error();
  int pick = options.device;
  if (pick < 0) {
    pick = 0;
    for (const auto& f : *found)
      if (f.info.gpu) {
        pick = f.info.index;
        break;
      }
  }
  if (pick >= static_cast<int>(found->size()))
    return make_error("no OpenCL device {} (there are {})", pick, found->size());
  const Found& dev = (*found)[pick];
  if (!dev.info.fp64)
    return make_error("OpenCL device '{}' lacks cl_khr_fp64, which optjit's reductions use",
                      dev.info.name);
  const codegen::GpuLaunch launch =
      options.launch.value_or(codegen::GpuLaunch::device_default(dev.info.gpu));
  OPTJIT_TRY(launch.validate());
  options.launch = launch;
  if (static_cast<size_t>(launch.block) > dev.info.max_work_group)
    return make_error("work-group size {} exceeds the device's {}", launch.block,
                      dev.info.max_work_group);
  auto t0 = std::chrono::steady_clock::now();
  auto src = codegen::emit_c(plan, {codegen::CLanguage::opencl, launch, options.device_step});
  if (!src) return src.error();
  std::unique_ptr<OpenclBackend> b(new OpenclBackend(plan));
  b->info_ = dev.info;
  b->impl_ = std::make_unique<Impl>();
  Impl& m = *b->impl_;
  m.options = options;
  cl_int e;
  m.ctx = clCreateContext(nullptr, 1, &dev.device, nullptr, nullptr, &e);
  if (!m.ctx) return cl_fail("clCreateContext", e);
  m.queue = clCreateCommandQueue(m.ctx, dev.device, 0, &e);
  if (!m.queue) return cl_fail("clCreateCommandQueue", e);
  // IEEE division and square root, as on the other backends.
  const char* build_options = "-cl-fp32-correctly-rounded-divide-sqrt";
  const cache::KernelKey key{
      fingerprint_id(opencl_exact(dev.info)),
      fmt::format("{:016x}", ir::structural_hash(plan.program)),
      codegen::source_variant(options.device_step ? "opencl-step" : "opencl", launch, *src)};
  if (cache) {
    if (auto hit = cache->get(key)) {
      const unsigned char* bin = hit->payload.data();
      size_t size = hit->payload.size();
      cl_int status = CL_SUCCESS;
      m.program = clCreateProgramWithBinary(m.ctx, 1, &dev.device, &size, &bin, &status, &e);
      if (m.program && status == CL_SUCCESS && e == CL_SUCCESS &&
          clBuildProgram(m.program, 1, &dev.device, build_options, nullptr, nullptr) ==
              CL_SUCCESS) {
        b->from_cache_ = true;
      } else if (m.program) {
        clReleaseProgram(m.program);  // the driver refused it: build from source below
        m.program = nullptr;
      }
    } else if (cache->strict()) {
      return make_error(
          "kernel cache miss in strict mode for the opencl kernels of this pipeline: {}",
          cache->explain_miss(key));
    }
  }
  if (!m.program) {
    const char* text = src->c_str();
    m.program = clCreateProgramWithSource(m.ctx, 1, &text, nullptr, &e);
    if (!m.program) return cl_fail("clCreateProgramWithSource", e);
    e = clBuildProgram(m.program, 1, &dev.device, build_options, nullptr, nullptr);
    if (e != CL_SUCCESS) {
      size_t n = 0;
      clGetProgramBuildInfo(m.program, dev.device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
      std::string log(n, '\0');
      clGetProgramBuildInfo(m.program, dev.device, CL_PROGRAM_BUILD_LOG, n, log.data(), nullptr);
      return make_error("OpenCL: building the kernels for '{}' failed ({}):\n{}", dev.info.name,
                        cl_error(e), log);
    }
    if (cache) {
      size_t size = 0;
      if (clGetProgramInfo(m.program, CL_PROGRAM_BINARY_SIZES, sizeof(size), &size, nullptr) ==
              CL_SUCCESS &&
          size > 0) {
        std::vector<uint8_t> binary(size);
        unsigned char* ptr = binary.data();
        if (clGetProgramInfo(m.program, CL_PROGRAM_BINARIES, sizeof(ptr), &ptr, nullptr) ==
            CL_SUCCESS) {
          double secs =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          (void)cache->put({key, "opencl-binary", std::move(binary), "{}", secs, 0, 0, ""});
        }
      }
    }
  }
  for (size_t k = 0; k < plan.passes.size(); ++k) {
    cl_kernel kern = clCreateKernel(m.program, fmt::format("optjit_pass_{}", k).c_str(), &e);
    if (!kern) return cl_fail("clCreateKernel", e);
    m.kernels.push_back(kern);
    // A kernel may allow less than the device (registers, local memory).
    size_t limit = 0;
    if (clGetKernelWorkGroupInfo(kern, dev.device, CL_KERNEL_WORK_GROUP_SIZE, sizeof(limit), &limit,
                                 nullptr) == CL_SUCCESS &&
        limit > 0 && static_cast<size_t>(launch.block) > limit)
      return make_error("work-group size {} exceeds the {} work-items pass {} allows on '{}'",
                        launch.block, limit, k, dev.info.name);
  }
  if (options.device_step) {
    m.step_host.emplace(codegen::device_step_layout(plan));
    auto kernel = [&](const std::string& name) -> Expected<cl_kernel> {
      cl_kernel kern = clCreateKernel(m.program, name.c_str(), &e);
      if (!kern) return cl_fail("clCreateKernel", e);
      return kern;
    };
    for (size_t k = 0; k <= plan.passes.size(); ++k) {
      auto seg = kernel(fmt::format("optjit_segment_{}", k));
      if (!seg) return seg.error();
      m.segments.push_back(*seg);
      if (k == plan.passes.size()) break;
      m.combines.push_back(nullptr);
      m.folds.push_back(nullptr);
      if (m.step_host->layout().combines[k]) {
        auto c = kernel(fmt::format("optjit_combine_{}", k));
        if (!c) return c.error();
        m.combines.back() = *c;
      }
      if (m.step_host->layout().folds[k]) {
        auto f = kernel(fmt::format("optjit_fold_{}", k));
        if (!f) return f.error();
        m.folds.back() = *f;
      }
    }
    auto commit = kernel("optjit_commit");
    if (!commit) return commit.error();
    m.commit = *commit;
  }
  b->compile_seconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return b;
}

Expected<StepResult> OpenclBackend::step(OptimizerState& s) {
  Impl& m = *impl_;
  const size_t T = s.tensors.size(), B = plan_.buffers.size();
  cl_int e;
  if (!m.tensors.matches(s) || m.arenas.empty()) {
    m.release_buffers();
    // Everything for this tensor set, or (on any failure, e.g. out of device memory) nothing,
    // so the next step starts again instead of using half of it.
    auto build = [&]() -> Status {
      m.tensors = TensorSet::of(s);
      m.table = ChunkTable::build(m.tensors.numels, m.options.launch->chunk_elements,
                                  codegen::kArenaAlignElements);
      for (size_t b = 0; b < B; ++b) {
        size_t bytes = std::max<size_t>(
            1, static_cast<size_t>(m.table.total) * size_bytes(plan_.buffers[b].storage));
        cl_mem mem = clCreateBuffer(m.ctx, CL_MEM_READ_WRITE, bytes, nullptr, &e);
        if (!mem) return cl_fail("clCreateBuffer (optimizer state)", e);
        m.arenas.push_back(mem);
      }
      m.chunk_buf =
          clCreateBuffer(m.ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                         m.table.chunks.size() * sizeof(codegen::Chunk), m.table.chunks.data(), &e);
      if (!m.chunk_buf) return cl_fail("clCreateBuffer (chunk table)", e);
      if (m.options.device_step) OPTJIT_TRY(m.allocate_device_step(plan_, s));
      return Status::Ok();
    };
    if (Status st = build(); !st) {
      m.release_buffers();
      m.table = {};
      m.tensors = {};
      return st.error();
    }
    m.uploaded = false;
  }
  // Host -> device: gradients every step; everything the first time.
  std::vector<uint8_t> staging;
  auto upload = [&](size_t b) -> Status {
    pack_arena(m.table, s, b, size_bytes(plan_.buffers[b].storage), staging);
    if (m.table.total == 0) return Status::Ok();
    cl_int err = clEnqueueWriteBuffer(m.queue, m.arenas[b], CL_FALSE, 0, staging.size(),
                                      staging.data(), 0, nullptr, nullptr);
    if (err != CL_SUCCESS) return cl_fail("clEnqueueWriteBuffer", err);
    return clFinish(m.queue) == CL_SUCCESS ? Status::Ok()
                                           : cl_fail("clFinish", CL_OUT_OF_RESOURCES);
  };
  for (size_t b = 0; b < B; ++b)
    if (uploads_before_step(plan_, b, !m.uploaded, m.options.resident_grads, m.options.host_params))
      OPTJIT_TRY(upload(b));
  m.uploaded = true;
  if (m.options.device_step) return m.device_step(plan_, s, info_);

  const int64_t nchunks = static_cast<int64_t>(m.table.chunks.size());
  auto run_pass = [&](size_t k, HostProgram& host) -> Status {
    const plan::Pass& pass = plan_.passes[k];
    const size_t U = std::max<size_t>(pass.uniforms.size(), 1), R = pass.reductions.size();
    std::vector<double> uniforms = host.uniform_table(k, U);
    std::vector<int64_t> rows(2 * T);
    for (size_t t = 0; t < T; ++t) {
      rows[2 * t] = m.table.base[t];
      rows[2 * t + 1] = static_cast<int64_t>(t * U);
    }
    cl_mem ubuf = clCreateBuffer(m.ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                 uniforms.size() * 8, uniforms.data(), &e);
    cl_mem rbuf = clCreateBuffer(m.ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                 rows.size() * 8 + 8, rows.data(), &e);
    size_t pbytes = std::max<size_t>(8, static_cast<size_t>(nchunks) * R * 8);
    cl_mem pbuf = clCreateBuffer(m.ctx, CL_MEM_READ_WRITE, pbytes, nullptr, &e);
    if (!ubuf || !rbuf || !pbuf) return cl_fail("clCreateBuffer (tables)", e);
    const Status args = m.set_pass_args(k, ubuf, rbuf, pbuf);
    size_t local = static_cast<size_t>(m.options.launch->block);
    size_t global = static_cast<size_t>(
                        m.options.launch->grid(nchunks, static_cast<int>(info_.compute_units))) *
                    local;
    if (args)
      e = clEnqueueNDRangeKernel(m.queue, m.kernels[k], 1, nullptr, &global, &local, 0, nullptr,
                                 nullptr);
    std::vector<double> partials(static_cast<size_t>(nchunks) * R);
    if (e == CL_SUCCESS && R > 0)
      e = clEnqueueReadBuffer(m.queue, pbuf, CL_TRUE, 0, partials.size() * 8, partials.data(), 0,
                              nullptr, nullptr);
    if (e == CL_SUCCESS) e = clFinish(m.queue);
    clReleaseMemObject(ubuf);
    clReleaseMemObject(rbuf);
    clReleaseMemObject(pbuf);
    if (!args) return args.error();
    if (e != CL_SUCCESS) return cl_fail("running a pass", e);
    if (R == 0) return Status::Ok();
    auto partial = combine_partials(plan_, pass, m.table, partials.data());
    host.finish_reductions(k, partial);
    return Status::Ok();
  };
  return drive_step(plan_, s, run_pass, [&] { return m.copy_back(plan_, s); });
}

// Device -> host: what the step wrote (parameters and state).
Status OpenclBackend::Impl::copy_back(const plan::Plan& plan, OptimizerState& s) {
  if (!options.copy_back) return Status::Ok();
  const std::vector<bool> written = visible_writes(plan);
  std::vector<uint8_t> staging;
  for (size_t b = 0; b < plan.buffers.size(); ++b) {
    if (!written[b] || table.total == 0) continue;
    size_t es = size_bytes(plan.buffers[b].storage);
    staging.resize(static_cast<size_t>(table.total) * es);
    cl_int e = clEnqueueReadBuffer(queue, arenas[b], CL_TRUE, 0, staging.size(), staging.data(), 0,
                                   nullptr, nullptr);
    if (e != CL_SUCCESS) return cl_fail("clEnqueueReadBuffer", e);
    unpack_arena(table, s, b, es, staging.data());
  }
  return Status::Ok();
}

// The device step's buffers for this tensor set, and every kernel's arguments, which stay set:
// a step is then only launches.
Status OpenclBackend::Impl::allocate_device_step(const plan::Plan& plan, const OptimizerState& s) {
  const size_t T = s.tensors.size(), G = s.groups.size(), P = plan.passes.size();
  const cl_long nT = static_cast<cl_long>(T), nG = static_cast<cl_long>(G);
  const codegen::DeviceStepLayout& layout = step_host->layout();
  const std::vector<double> info = DeviceStepHost::tensor_info(s);
  std::vector<cl_long> firsts(table.first.begin(), table.first.end());
  struct Want {
    cl_mem* mem;
    size_t bytes;
    const void* init;
  };
  for (const Want& w :
       {Want{&hypers, G * layout.hypers * 8, nullptr}, Want{&ctl, layout.ctl_size(G) * 8, nullptr},
        Want{&tinfo, info.size() * 8, info.data()},
        Want{&vals, layout.vals_size(G, T) * 8, nullptr},
        Want{&fold_rows, layout.fold_rows * T * 8, nullptr},
        Want{&first, firsts.size() * 8, firsts.data()},
        Want{&partials, table.chunks.size() * layout.partials_per_chunk * 8, nullptr}}) {
    auto mem = buffer(w.bytes, w.init, "clCreateBuffer (device step)");
    if (!mem) return mem.error();
    *w.mem = *mem;
  }
  for (size_t k = 0; k < P; ++k) {
    const size_t U = std::max<size_t>(plan.passes[k].uniforms.size(), 1);
    std::vector<cl_long> rows(2 * T);
    for (size_t t = 0; t < T; ++t) {
      rows[2 * t] = table.base[t];
      rows[2 * t + 1] = static_cast<cl_long>(t * U);
    }
    auto u = buffer(T * U * 8, nullptr, "clCreateBuffer (uniforms)");
    if (!u) return u.error();
    uniform_bufs.push_back(*u);
    auto r = buffer(rows.size() * 8, rows.data(), "clCreateBuffer (tensor table)");
    if (!r) return r.error();
    row_bufs.push_back(*r);
    OPTJIT_TRY(set_pass_args(k, uniform_bufs[k], row_bufs[k], partials));
    if (combines[k]) OPTJIT_TRY(set_args(combines[k], partials, first, vals, fold_rows, nT, nG));
    if (folds[k]) OPTJIT_TRY(set_args(folds[k], fold_rows, vals, nT, nG));
  }
  for (size_t k = 0; k <= P; ++k)
    OPTJIT_TRY(set_args(segments[k], hypers, ctl, tinfo, vals,
                        k < P ? uniform_bufs[k] : vals /* the last segment writes none */, nT, nG));
  return set_args(commit, ctl, nG);
}

Expected<StepResult> OpenclBackend::Impl::device_step(const plan::Plan& plan, OptimizerState& s,
                                                      const OpenclDeviceInfo& info) {
  const size_t T = s.tensors.size(), G = s.groups.size();
  cl_int e = CL_SUCCESS;
  // Both host vectors live until the blocking read below, after which the writes are done.
  const std::optional<std::vector<double>> ctl_values = step_host->ctl_to_write(s);
  if (ctl_values)
    e = clEnqueueWriteBuffer(queue, ctl, CL_FALSE, 0, ctl_values->size() * 8, ctl_values->data(), 0,
                             nullptr, nullptr);
  const std::vector<double> hyper_values = step_host->hypers(s);
  if (e == CL_SUCCESS && !hyper_values.empty())
    e = clEnqueueWriteBuffer(queue, hypers, CL_FALSE, 0, hyper_values.size() * 8,
                             hyper_values.data(), 0, nullptr, nullptr);
  auto launch = [&](cl_kernel kernel, size_t global, const size_t* local) {
    if (e == CL_SUCCESS)
      e = clEnqueueNDRangeKernel(queue, kernel, 1, nullptr, &global, local, 0, nullptr, nullptr);
  };
  const size_t one = 1, block = static_cast<size_t>(options.launch->block),
               lanes = static_cast<size_t>(codegen::kCombineLanes);
  const int64_t nchunks = static_cast<int64_t>(table.chunks.size());
  const size_t pass_global =
      static_cast<size_t>(options.launch->grid(nchunks, static_cast<int>(info.compute_units))) *
      block;
  for (size_t k = 0; k <= plan.passes.size(); ++k) {
    launch(segments[k], std::max({T, G, one}), nullptr);
    if (k == plan.passes.size()) break;
    launch(kernels[k], pass_global, &block);
    // A work-group of kCombineLanes per tensor, then one for the fold (kernel_abi.h).
    if (combines[k]) launch(combines[k], std::max(T, one) * lanes, &lanes);
    if (folds[k]) launch(folds[k], lanes, &lanes);
  }
  launch(commit, 1, &one);
  if (e == CL_SUCCESS)
    e = clEnqueueReadBuffer(queue, ctl, CL_TRUE, 0, step_host->layout().ctl_size(G) * 8,
                            step_host->read_back(s), 0, nullptr, nullptr);
  if (e != CL_SUCCESS) {
    step_host->forget();
    return cl_fail("running a step on the device", e);
  }
  if (step_host->skipped()) return StepResult{true};
  OPTJIT_TRY(copy_back(plan, s));
  step_host->commit(s);
  return StepResult{false};
}

void OpenclBackend::state_changed() {
  impl_->uploaded = false;
  if (impl_->step_host) impl_->step_host->forget();
}

Expected<double> OpenclBackend::copy_seconds(size_t bytes, int repetitions) {
  Impl& m = *impl_;
  cl_int e;
  cl_mem src = clCreateBuffer(m.ctx, CL_MEM_READ_WRITE, bytes, nullptr, &e);
  if (!src) return cl_fail("clCreateBuffer (copy bandwidth)", e);
  cl_mem dst = clCreateBuffer(m.ctx, CL_MEM_READ_WRITE, bytes, nullptr, &e);
  if (!dst) {
    clReleaseMemObject(src);
    return cl_fail("clCreateBuffer (copy bandwidth)", e);
  }
  // Touch both first, so the copies do not time first-use page faults.
  const cl_uchar zero = 0;
  e = clEnqueueFillBuffer(m.queue, src, &zero, 1, 0, bytes, 0, nullptr, nullptr);
  if (e == CL_SUCCESS)
    e = clEnqueueFillBuffer(m.queue, dst, &zero, 1, 0, bytes, 0, nullptr, nullptr);
  if (e == CL_SUCCESS) e = clFinish(m.queue);
  std::vector<double> times;
  for (int i = 0; i <= repetitions && e == CL_SUCCESS; ++i) {  // the first is a warm-up
    auto t0 = std::chrono::steady_clock::now();
    e = clEnqueueCopyBuffer(m.queue, src, dst, 0, 0, bytes, 0, nullptr, nullptr);
    if (e == CL_SUCCESS) e = clFinish(m.queue);
    if (i > 0)
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  clReleaseMemObject(src);
  clReleaseMemObject(dst);
  if (e != CL_SUCCESS) return cl_fail("clEnqueueCopyBuffer", e);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace optjit::runtime
