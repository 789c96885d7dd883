#include "runtime/optimizer.h"

#include <cstring>

#include "autotune/cpu_tuner.h"
#include "autotune/gpu_tuner.h"
#include "ir/compile.h"
#include "runtime/devices.h"

namespace optjit {

namespace {

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Two byte ranges overlap (a parameter must not alias another parameter or a gradient).
bool overlap(const void* a, size_t na, const void* b, size_t nb) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return na > 0 && nb > 0 && x < y + nb && y < x + na;
}

}  // namespace

std::string_view to_string(Backend b) {
  switch (b) {
    case Backend::reference:
      return "reference";
    case Backend::cpu:
      return "cpu";
    case Backend::opencl:
      return "opencl";
    case Backend::cuda:
      return "cuda";
    case Backend::automatic:
      break;
  }
  return "auto";
}

Expected<std::unique_ptr<Optimizer>> Optimizer::create(std::string_view text,
                                                       std::vector<Param> params,
                                                       OptimizerOptions options) {
  if (params.empty()) return make_error("an optimizer needs at least one parameter");
  DType pt = params[0].dtype;
  return build(compile_pipeline(text, {pt, options.grad_dtype.value_or(pt), pt}), std::move(params),
               std::move(options));
}

Expected<std::unique_ptr<Optimizer>> Optimizer::create(const dsl::Pipeline& pipeline,
                                                       std::vector<Param> params,
                                                       OptimizerOptions options) {
  if (params.empty()) return make_error("an optimizer needs at least one parameter");
  DType pt = params[0].dtype;
  auto program = dsl::lower(pipeline, {pt, options.grad_dtype.value_or(pt), pt});
  if (!program) return program.error();
  return build(plan::make_plan(*program), std::move(params), std::move(options));
}

Expected<std::unique_ptr<Optimizer>> Optimizer::build(Expected<plan::Plan> plan,
                                                      std::vector<Param> params,
                                                      OptimizerOptions options) {
  if (!plan) return plan.error();
  for (size_t i = 0; i < params.size(); ++i) {
    const Param& p = params[i];
    if (p.dtype != params[0].dtype)
      return make_error("parameter '{}' is {} but '{}' is {}; one optimizer needs one dtype",
                        p.name, to_string(p.dtype), params[0].name, to_string(params[0].dtype));
    for (int64_t d : p.shape)
      if (d < 0) return make_error("parameter '{}' has a negative dimension", p.name);
    if (!p.data && numel_of(p.shape) > 0) return make_error("parameter '{}' has no data", p.name);
    for (size_t j = 0; j < i; ++j)
      if (overlap(p.data, numel_of(p.shape) * size_bytes(p.dtype), params[j].data,
                  numel_of(params[j].shape) * size_bytes(params[j].dtype)))
        return make_error("parameters '{}' and '{}' overlap in memory", params[j].name, p.name);
  }
  std::unique_ptr<Optimizer> o(new Optimizer());
  o->plan_ = std::move(*plan);
  o->params_ = std::move(params);
  o->param_buffer_ = o->plan_.program.param_buffer();
  o->grad_buffer_ = o->plan_.program.grad_buffer();
  // Parameters are referenced, not copied: init_state sees empty tensors for them.
  std::vector<runtime::HostTensor> shapes;
  for (const auto& p : o->params_) shapes.push_back({p.name, p.dtype, p.shape, {}});
  std::vector<runtime::HostTensor> empties = shapes;
  for (auto& e : empties) e.data.assign(static_cast<size_t>(e.numel()) * size_bytes(e.dtype), 0);
  std::vector<int> group_of;
  for (const auto& p : o->params_) group_of.push_back(p.group);
  auto state = runtime::init_state(o->plan_, empties, options.groups, group_of);
  if (!state) return state.error();
  o->state_ = std::move(*state);
  for (size_t i = 0; i < o->params_.size(); ++i) {
    auto& t = o->state_.tensors[i];
    t.owned[o->param_buffer_].clear();
    t.owned[o->param_buffer_].shrink_to_fit();
    t.owned[o->grad_buffer_].clear();
    t.owned[o->grad_buffer_].shrink_to_fit();
    t.external[o->param_buffer_] = static_cast<uint8_t*>(o->params_[i].data);
  }
  o->backend_ = options.backend;
  if (o->backend_ == Backend::automatic) {
    const std::string pick = runtime::pick_auto(runtime::list_devices()).backend;
    o->backend_ = pick == "cuda"     ? Backend::cuda
                  : pick == "opencl" ? Backend::opencl
                                     : Backend::cpu;
  }
  if (options.cuda_graph && o->backend_ != Backend::cuda)
    return make_error("cuda_graph needs the cuda backend, not {}", to_string(o->backend_));
  if (options.device_step.value_or(false) && o->backend_ != Backend::cuda &&
      o->backend_ != Backend::opencl)
    return make_error("device_step needs the cuda or opencl backend, not {}",
                      to_string(o->backend_));
  std::unique_ptr<cache::KernelCache>& kc = o->cache_;
  if (options.cache && o->backend_ != Backend::reference) {
    auto c = cache::open_for_run(*options.cache, o->warnings_);
    if (!c) return c.error();
    kc = std::move(*c);
  }
  if (o->backend_ == Backend::opencl || o->backend_ == Backend::cuda)
    OPTJIT_TRY(o->create_device_backend(options));
  if (o->backend_ == Backend::cpu) {
    o->launch_ = options.cpu;
    const runtime::CpuOptions defaults;
    if (options.cpu.threads == defaults.threads &&
        options.cpu.chunk_elements == defaults.chunk_elements &&
        options.cpu.unroll == defaults.unroll)
      if (auto d = autotune::stored_decision(autotune::cpu_target(o->plan_, o->state_.elements()),
                                             kc.get()))
        if (auto c = autotune::parse_cpu_config(*d)) {
          o->launch_ = *c;
          o->tuned_ = true;
        }
    auto cpu = runtime::CpuBackend::create(o->plan_, o->launch_, kc.get());
    if (!cpu) return cpu.error();
    o->cpu_ = std::move(*cpu);
  }
  return o;
}

// An OpenCL or CUDA backend: the launch as given, else the cache's tuning decision for this
// device and size, else the device's default.
Status Optimizer::create_device_backend(const OptimizerOptions& options) {
  const bool cuda = backend_ == Backend::cuda;
  const int device = cuda ? std::max(options.device, 0) : options.device;
  const codegen::GpuLaunch base =
      cuda ? codegen::GpuLaunch{} : autotune::opencl_default_launch(options.device);
  if (options.gpu_launch) {
    gpu_launch_ = *options.gpu_launch;
  } else {
    std::string from;
    gpu_launch_ =
        autotune::gpu_launch_for(cuda ? autotune::cuda_target(plan_, state_.elements(), device)
                                      : autotune::opencl_target(plan_, state_.elements(), device),
                                 cache_.get(), &from, base);
    tuned_ = !from.empty();
  }
  if (cuda) {
    runtime::CudaOptions o{device, gpu_launch_};
    o.host_params = true;
    o.device_step = options.device_step.value_or(true);
    o.graph = options.cuda_graph;
    auto b = runtime::CudaBackend::create(plan_, o, cache_.get());
    if (!b) return b.error();
    cuda_ = std::move(*b);
  } else {
    runtime::OpenclOptions o{device, gpu_launch_};
    o.host_params = true;
    o.device_step = options.device_step.value_or(true);
    auto b = runtime::OpenclBackend::create(plan_, o, cache_.get());
    if (!b) return b.error();
    ocl_ = std::move(*b);
  }
  return Status::Ok();
}

std::string Optimizer::device_name() const {
  if (ocl_) return ocl_->device().name;
  if (cuda_) return cuda_->device().name;
  return backend_ == Backend::cpu ? runtime::cpu_device().name : "the reference interpreter";
}

double Optimizer::compile_seconds() const {
  if (cpu_) return cpu_->compile_seconds();
  if (ocl_) return ocl_->compile_seconds();
  if (cuda_) return cuda_->compile_seconds();
  return 0.0;
}

Status Optimizer::bind_grads(const char* who, const std::vector<const void*>& grads) {
  if (grads.size() != params_.size())
    return make_error("{}() got {} gradients for {} parameters", who, grads.size(), params_.size());
  const size_t gbytes = size_bytes(plan_.buffers[grad_buffer_].storage);
  for (size_t i = 0; i < grads.size(); ++i) {
    const int64_t n = state_.tensors[i].numel;
    if (!grads[i] && n > 0) return make_error("the gradient of '{}' is null", params_[i].name);
    if (overlap(grads[i], n * gbytes, params_[i].data, n * size_bytes(params_[i].dtype)))
      return make_error("the gradient of '{}' overlaps its parameter", params_[i].name);
  }
  // The kernels only read gradients.
  for (size_t i = 0; i < grads.size(); ++i)
    state_.tensors[i].external[grad_buffer_] =
        const_cast<uint8_t*>(static_cast<const uint8_t*>(grads[i]));
  return Status::Ok();
}

void Optimizer::unbind_grads() {
  for (auto& t : state_.tensors) t.external[grad_buffer_] = nullptr;
}

Expected<runtime::StepResult> Optimizer::step(const std::vector<const void*>& grads) {
  OPTJIT_TRY(bind_grads("step", grads));
  Expected<runtime::StepResult> r = runtime::StepResult{};
  if (cpu_)
    r = cpu_->step(state_);
  else if (ocl_)
    r = ocl_->step(state_);
  else if (cuda_)
    r = cuda_->step(state_);
  else
    r = runtime::ReferenceBackend(plan_).step(state_);
  unbind_grads();
  return r;
}

Expected<autotune::TuneResult> Optimizer::tune(const std::vector<const void*>& grads,
                                               autotune::TuneOptions options) {
  if (!cpu_)
    return make_error(
        "tune() tunes the cpu backend; for {} run `optjit tune PIPELINE --backend {}` once, and "
        "the optimizer uses the stored decision",
        to_string(backend_), to_string(backend_));
  OPTJIT_TRY(bind_grads("tune", grads));
  // The parameters live in the caller's memory, outside the state's snapshot.
  std::vector<std::vector<uint8_t>> saved;
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto* p = static_cast<const uint8_t*>(params_[i].data);
    saved.emplace_back(p, p + state_.tensors[i].numel * size_bytes(params_[i].dtype));
  }
  auto restore = [&] {
    for (size_t i = 0; i < params_.size(); ++i)
      if (!saved[i].empty()) std::memcpy(params_[i].data, saved[i].data(), saved[i].size());
  };
  auto r = autotune::tune_cpu(plan_, state_, cache_.get(), options, restore);
  unbind_grads();
  if (!r) return r.error();
  auto winner = autotune::parse_cpu_config(r->winner);
  if (!winner) return make_error("tuning chose an unreadable configuration '{}'", r->winner);
  auto cpu = runtime::CpuBackend::create(plan_, *winner, cache_.get());
  if (!cpu) return cpu.error();
  cpu_ = std::move(*cpu);
  launch_ = *winner;
  tuned_ = true;
  return r;
}

Status Optimizer::set_hyper(std::string_view name, double value, std::optional<uint32_t> group) {
  return runtime::set_hyper(plan_.program, state_, name, {value}, group);
}

Status Optimizer::set_hyper(std::string_view name, const std::vector<double>& values,
                            std::optional<uint32_t> group) {
  return runtime::set_hyper(plan_.program, state_, name, values, group);
}

Expected<double> Optimizer::hyper(std::string_view name, uint32_t group) const {
  auto idx = runtime::match_hyper(plan_.program, name);
  if (!idx) return idx.error();
  if (idx->size() != 1)
    return make_error("'{}' is a tuple; ask for one element, e.g. {}.0", name, name);
  if (group >= state_.groups.size()) return make_error("no parameter group {}", group);
  return state_.groups[group].hypers[(*idx)[0]];
}

Status Optimizer::save(const std::string& path) const {
  return runtime::write_safetensors(path, runtime::export_state(plan_, state_));
}

Status Optimizer::load(const std::string& path) {
  auto f = runtime::read_safetensors(path);
  if (!f) return f.error();
  runtime::OptimizerState copy = state_;  // all or nothing: a bad file leaves the state as it was
  OPTJIT_TRY(runtime::import_state(plan_, copy, *f));
  state_ = std::move(copy);
  if (ocl_) ocl_->state_changed();  // the device's copy of the state is stale now
  if (cuda_) cuda_->state_changed();
  return Status::Ok();
}

}  // namespace optjit
