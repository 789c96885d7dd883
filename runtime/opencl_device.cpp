#define CL_TARGET_OPENCL_VERSION 300
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include "runtime/opencl_device.h"

#include <CL/cl.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include <map>

#include "cache/kernel_cache.h"
#include "codegen/c_emitter.h"
#include "ir/text.h"
#include "runtime/device.h"
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

std::string opencl_exact(const OpenclDeviceInfo& i) {
  return fmt::format("opencl|{}|{}|{}|{}|driver {}|uuid {}|codegen {}", i.platform,
                     i.platform_version, i.vendor, i.name, i.driver_version, i.uuid,
                     kCodegenVersion);
}

std::string opencl_performance(const OpenclDeviceInfo& i) {
  return fmt::format("opencl|{}|{}|{} units", i.vendor, i.name, i.compute_units);
}

Expected<std::vector<OpenclDeviceInfo>> opencl_devices() {
  auto found = find_devices();
  if (!found) return found.error();
  std::vector<OpenclDeviceInfo> out;
  for (const auto& f : *found) out.push_back(f.info);
  return out;
}

namespace {

class OpenclDevice;

class OpenclModule final : public Module {
 public:
  OpenclModule(OpenclDevice& dev, cl_program program, double seconds, bool cached)
      : dev_(dev), program_(program), seconds_(seconds), cached_(cached) {}
  ~OpenclModule() override {
    for (auto& [name, k] : kernels_) clReleaseKernel(k);
    clReleaseProgram(program_);
  }
  Status resolve(const plan::Plan& plan, bool device_step, int block);
  Status launch(KernelId kernel, size_t groups, size_t group_size,
                std::span<const KernelArg> args) override;
  double compile_seconds() const override { return seconds_; }
  bool from_cache() const override { return cached_; }

 private:
  OpenclDevice& dev_;
  cl_program program_;
  std::map<std::string, cl_kernel> kernels_;
  double seconds_;
  bool cached_;
};

class OpenclDevice final : public Device {
 public:
  static Expected<std::shared_ptr<OpenclDevice>> open(int index, void* queue) {
    if (queue) OPTJIT_TRY(check_handle(queue, "queue", "cl_command_queue"));
    auto found = find_devices();
    if (!found) return found.error();
    auto d = std::shared_ptr<OpenclDevice>(new OpenclDevice());
    cl_int e = CL_SUCCESS;
    if (queue) {
      // The caller's queue: its context and device are the ones to use.
      d->queue_ = static_cast<cl_command_queue>(queue);
      if ((e = clGetCommandQueueInfo(d->queue_, CL_QUEUE_CONTEXT, sizeof(d->ctx_), &d->ctx_,
                                     nullptr)) != CL_SUCCESS ||
          (e = clGetCommandQueueInfo(d->queue_, CL_QUEUE_DEVICE, sizeof(d->device_), &d->device_,
                                     nullptr)) != CL_SUCCESS)
        return cl_fail("reading the caller's command queue", e);
      clRetainCommandQueue(d->queue_);
      clRetainContext(d->ctx_);
      index = -1;
      for (const auto& f : *found)
        if (f.device == d->device_) index = f.info.index;
      if (index < 0)
        return make_error("the caller's OpenCL queue is on a device optjit cannot see");
    } else {
      std::vector<bool> gpu;
      for (const auto& f : *found) gpu.push_back(f.info.gpu);
      auto chosen = choose_device(index, gpu, "OpenCL device");
      if (!chosen) return chosen.error();
      index = *chosen;
      d->device_ = (*found)[index].device;
      d->ctx_ = clCreateContext(nullptr, 1, &d->device_, nullptr, nullptr, &e);
      if (!d->ctx_) return cl_fail("clCreateContext", e);
      d->queue_ = clCreateCommandQueue(d->ctx_, d->device_, 0, &e);
      if (!d->queue_) return cl_fail("clCreateCommandQueue", e);
    }
    d->info_ = (*found)[index].info;
    if (!d->info_.fp64)
      return make_error("OpenCL device '{}' lacks cl_khr_fp64, which optjit's reductions use",
                        d->info_.name);
    DeviceDescription& desc = d->desc_;
    desc.kind = "opencl";
    desc.index = index;
    desc.name = d->info_.name;
    desc.performance = opencl_performance(d->info_);
    desc.gpu = d->info_.gpu;
    desc.compute_units = static_cast<int>(d->info_.compute_units);
    desc.max_group = d->info_.max_work_group;
    desc.addressing = Addressing::arenas;
    desc.device_step = true;
    desc.default_launch = codegen::GpuLaunch::device_default(desc.gpu);
    return d;
  }
  ~OpenclDevice() override {
    if (queue_) clReleaseCommandQueue(queue_);
    if (ctx_) clReleaseContext(ctx_);
  }
  const DeviceDescription& description() const override { return desc_; }
  const OpenclDeviceInfo& info() const { return info_; }
  cl_command_queue cl_queue() const { return queue_; }
  void* queue() const override { return queue_; }

  Expected<DeviceMemory> allocate(size_t bytes, const char* what) override {
    cl_int e;
    cl_mem m = clCreateBuffer(ctx_, CL_MEM_READ_WRITE, std::max<size_t>(bytes, 8), nullptr, &e);
    if (!m) return cl_fail(what, e);
    return DeviceMemory{reinterpret_cast<uint64_t>(m), 0};
  }
  void release(DeviceMemory m) override { clReleaseMemObject(mem(m)); }
  // A caller's buffer: an OpenCL memory object of this queue's context, large enough. Kernels
  // index what the tensor table says, unchecked: a buffer that was too small was written past.
  Status check_memory(DeviceMemory m, size_t bytes) const override {
    if (!m || bytes == 0) return Status::Ok();
    OPTJIT_TRY(check_handle(reinterpret_cast<void*>(m.handle), "buffer", "cl_mem"));
    cl_context ctx = nullptr;
    size_t size = 0;
    cl_int e = clGetMemObjectInfo(mem(m), CL_MEM_CONTEXT, sizeof(ctx), &ctx, nullptr);
    if (e == CL_SUCCESS) e = clGetMemObjectInfo(mem(m), CL_MEM_SIZE, sizeof(size), &size, nullptr);
    if (e != CL_SUCCESS)
      return make_error("{:#x} is not an OpenCL buffer ({})", m.handle, cl_error(e));
    if (ctx != ctx_)
      return make_error(
          "the OpenCL buffer belongs to another context than the optimizer's queue (give the "
          "optimizer that context's queue)");
    if (m.offset + bytes > size)
      return make_error("{} bytes at offset {} pass the end of its OpenCL buffer of {} bytes",
                        bytes, m.offset, size);
    return Status::Ok();
  }
  Status write(DeviceMemory dst, const void* src, size_t bytes) override {
    return enqueue_write(dst, src, bytes, CL_TRUE);
  }
  Status write_async(DeviceMemory dst, const void* src, size_t bytes) override {
    return enqueue_write(dst, src, bytes, CL_FALSE);
  }
  // A non-blocking write would read `src` whenever the queue gets to it; a fill copies its
  // pattern when enqueued. One fill per 8 (else 4) bytes.
  Status write_queued(DeviceMemory dst, const void* src, size_t bytes) override {
    const size_t word = bytes % 8 == 0 && dst.offset % 8 == 0 ? 8 : 4;
    for (size_t at = 0; at < bytes; at += word) {
      cl_int e = clEnqueueFillBuffer(queue_, mem(dst), static_cast<const uint8_t*>(src) + at, word,
                                     dst.offset + at, word, 0, nullptr, nullptr);
      if (e != CL_SUCCESS) return cl_fail("clEnqueueFillBuffer", e);
    }
    return Status::Ok();
  }
  Status read(void* dst, DeviceMemory src, size_t bytes) override {
    if (bytes == 0) return Status::Ok();
    cl_int e =
        clEnqueueReadBuffer(queue_, mem(src), CL_TRUE, src.offset, bytes, dst, 0, nullptr, nullptr);
    return e == CL_SUCCESS ? Status::Ok() : Status(cl_fail("clEnqueueReadBuffer", e));
  }
  Status copy(DeviceMemory dst, DeviceMemory src, size_t bytes) override {
    if (bytes == 0) return Status::Ok();
    cl_int e = clEnqueueCopyBuffer(queue_, mem(src), mem(dst), src.offset, dst.offset, bytes, 0,
                                   nullptr, nullptr);
    return e == CL_SUCCESS ? Status::Ok() : Status(cl_fail("clEnqueueCopyBuffer", e));
  }
  Status finish() override {
    cl_int e = clFinish(queue_);
    return e == CL_SUCCESS ? Status::Ok() : Status(cl_fail("clFinish", e));
  }

  Expected<std::unique_ptr<Module>> load(const plan::Plan& plan, const ModuleSpec& spec,
                                         cache::KernelCache* cache) override;

  static cl_mem mem(DeviceMemory m) { return reinterpret_cast<cl_mem>(m.handle); }
  cl_device_id device_id() const { return device_; }

 private:
  OpenclDevice() = default;
  Status enqueue_write(DeviceMemory dst, const void* src, size_t bytes, cl_bool blocking) {
    if (bytes == 0) return Status::Ok();
    cl_int e = clEnqueueWriteBuffer(queue_, mem(dst), blocking, dst.offset, bytes, src, 0, nullptr,
                                    nullptr);
    return e == CL_SUCCESS ? Status::Ok() : Status(cl_fail("clEnqueueWriteBuffer", e));
  }
  cl_context ctx_ = nullptr;
  cl_command_queue queue_ = nullptr;
  cl_device_id device_ = nullptr;
  OpenclDeviceInfo info_;
  DeviceDescription desc_;

  friend class OpenclModule;
  cl_context context() const { return ctx_; }
};

Expected<std::unique_ptr<Module>> OpenclDevice::load(const plan::Plan& plan, const ModuleSpec& spec,
                                                     cache::KernelCache* cache) {
  const codegen::GpuLaunch& launch = spec.launch;
  auto t0 = std::chrono::steady_clock::now();
  auto src = codegen::emit_c(plan, {codegen::CLanguage::opencl, launch, spec.device_step});
  if (!src) return src.error();
  // IEEE division and square root, as on the other backends.
  const char* build_options = "-cl-fp32-correctly-rounded-divide-sqrt";
  const cache::KernelKey key{
      fingerprint_id(opencl_exact(info_)),
      fmt::format("{:016x}", ir::structural_hash(plan.program)),
      codegen::source_variant(spec.device_step ? "opencl-step" : "opencl", launch, *src)};
  cl_program program = nullptr;  // built from source, or from the stored binary
  auto from_binary = [&](const cache::KernelEntry& hit) {
    const unsigned char* bin = hit.payload.data();
    size_t size = hit.payload.size();
    cl_int status = CL_SUCCESS, e = CL_SUCCESS;
    program = clCreateProgramWithBinary(ctx_, 1, &device_, &size, &bin, &status, &e);
    if (program && status == CL_SUCCESS && e == CL_SUCCESS &&
        clBuildProgram(program, 1, &device_, build_options, nullptr, nullptr) == CL_SUCCESS)
      return true;
    if (program) clReleaseProgram(program);  // the driver refused it: build from source
    program = nullptr;
    return false;
  };
  auto from_source = [&]() -> Expected<cache::Compiled> {
    const char* text = src->c_str();
    cl_int e = CL_SUCCESS;
    program = clCreateProgramWithSource(ctx_, 1, &text, nullptr, &e);
    if (!program) return cl_fail("clCreateProgramWithSource", e);
    e = clBuildProgram(program, 1, &device_, build_options, nullptr, nullptr);
    if (e != CL_SUCCESS) {
      size_t n = 0;
      clGetProgramBuildInfo(program, device_, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
      std::string log(n, '\0');
      clGetProgramBuildInfo(program, device_, CL_PROGRAM_BUILD_LOG, n, log.data(), nullptr);
      clReleaseProgram(program);
      program = nullptr;
      return make_error("OpenCL: building the kernels for '{}' failed ({}):\n{}", info_.name,
                        cl_error(e), log);
    }
    cache::Compiled out;
    size_t size = 0;
    if (clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof(size), &size, nullptr) ==
            CL_SUCCESS &&
        size > 0) {
      out.payload.resize(size);
      unsigned char* ptr = out.payload.data();
      if (clGetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof(ptr), &ptr, nullptr) != CL_SUCCESS)
        out.payload.clear();
    }
    return out;
  };
  auto built = cache::cached_compile(cache, key, "opencl-binary", "the opencl kernels", from_source,
                                     from_binary);
  if (!built) {
    if (program) clReleaseProgram(program);
    return built.error();
  }
  const bool cached = built->from_cache;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto m = std::make_unique<OpenclModule>(*this, program, secs, cached);
  OPTJIT_TRY(m->resolve(plan, spec.device_step, launch.block));
  return std::unique_ptr<Module>(std::move(m));
}

Status OpenclModule::resolve(const plan::Plan& plan, bool device_step, int block) {
  const std::vector<KernelId> ids = module_kernels(plan, device_step);
  for (const KernelId& id : ids) {
    cl_int e;
    const std::string name = id.name();
    cl_kernel kern = clCreateKernel(program_, name.c_str(), &e);
    if (!kern) return cl_fail("clCreateKernel", e);
    kernels_[name] = kern;
    if (id.kind != KernelId::pass) continue;
    // A kernel may allow less than the device (registers, local memory).
    size_t limit = 0;
    if (clGetKernelWorkGroupInfo(kern, dev_.device_id(), CL_KERNEL_WORK_GROUP_SIZE, sizeof(limit),
                                 &limit, nullptr) == CL_SUCCESS &&
        limit > 0 && static_cast<size_t>(block) > limit)
      return make_error("work-group size {} exceeds the {} work-items pass {} allows on '{}'",
                        block, limit, id.k, dev_.info().name);
  }
  return Status::Ok();
}

Status OpenclModule::launch(KernelId kernel, size_t groups, size_t group_size,
                            std::span<const KernelArg> args) {
  auto it = kernels_.find(kernel.name());
  if (it == kernels_.end()) return make_error("no kernel {} in this module", kernel.name());
  cl_kernel k = it->second;
  for (size_t i = 0; i < args.size(); ++i) {
    cl_int e;
    if (args[i].is_memory) {
      if (args[i].memory.offset != 0)
        return make_error("OpenCL kernel arguments are whole buffers (an offset of {} was given)",
                          args[i].memory.offset);
      cl_mem m = OpenclDevice::mem(args[i].memory);
      e = clSetKernelArg(k, static_cast<cl_uint>(i), sizeof(cl_mem), &m);
    } else {
      cl_long v = args[i].integer;
      e = clSetKernelArg(k, static_cast<cl_uint>(i), sizeof(cl_long), &v);
    }
    if (e != CL_SUCCESS) return cl_fail("clSetKernelArg", e);
  }
  const size_t local = group_size, global = groups * group_size;
  cl_int e =
      clEnqueueNDRangeKernel(dev_.cl_queue(), k, 1, nullptr, &global, &local, 0, nullptr, nullptr);
  return e == CL_SUCCESS ? Status::Ok() : Status(cl_fail("launching a kernel", e));
}

const DeviceKindRegistration registration({
    .name = "opencl",
    .auto_label = "OpenCL GPU",
    .list_order = 1,
    .auto_rank = 1,
    .device_step = true,
    .open = [](int index, void* queue) -> Expected<std::shared_ptr<Device>> {
      auto d = OpenclDevice::open(index, queue);
      if (!d) return d.error();
      return std::shared_ptr<Device>(std::move(*d));
    },
    .list = []() -> Expected<std::vector<DeviceRecord>> {
      auto cl = opencl_devices();
      if (!cl) return cl.error();
      std::vector<DeviceRecord> out;
      for (const auto& i : *cl)
        out.push_back({"opencl", i.index, i.name, i.gpu, opencl_exact(i), opencl_performance(i)});
      return out;
    },
});

}  // namespace

}  // namespace optjit::runtime
