#include "runtime/optimizer.h"

#include <cstring>

#include "autotune/cpu_tuner.h"
#include "ir/compile.h"

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
  if (options.backend == Backend::cpu) {
    std::unique_ptr<cache::KernelCache>& kc = o->cache_;
    if (options.cache) {
      auto c = cache::open_for_run(*options.cache, o->warnings_);
      if (!c) return c.error();
      kc = std::move(*c);
    }
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
  runtime::StepResult r = cpu_ ? cpu_->step(state_) : runtime::ReferenceBackend(plan_).step(state_);
  unbind_grads();
  return r;
}

Expected<autotune::TuneResult> Optimizer::tune(const std::vector<const void*>& grads,
                                               autotune::TuneOptions options) {
  if (!cpu_) return make_error("tune() needs the cpu backend");
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
  return Status::Ok();
}

}  // namespace optjit
