#include "api/optimizer.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <tuple>
#include <unordered_map>

#include <unistd.h>
#include <xxhash.h>

#include "api/shard.h"
#include "autotune/cpu_tuner.h"
#include "autotune/gpu_tuner.h"
#include "ir/compile.h"
#include "ir/pipeline_text.h"
#include "runtime/device.h"
#include "runtime/devices.h"
#include "runtime/executor.h"
#include "runtime/reference.h"

namespace optjit {

namespace {

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The device's verdict on `bytes` of the caller's memory (Device::check_memory), the memory
// named in the error by `name()`, called only then: gradients are checked whenever they are
// rebound, which can be every step.
template <class Name>
Status caller_memory(const runtime::Device& device, DeviceMemory memory, size_t bytes, Name name) {
  Status s = device.check_memory(memory, bytes);
  if (s) return s;
  return make_error("{}: {}", name(), s.error().message);
}

// Two byte ranges overlap (a parameter must not alias another parameter or a gradient).
bool overlap(const void* a, size_t na, const void* b, size_t nb) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return na > 0 && nb > 0 && x < y + nb && y < x + na;
}

// A parameter's memory: bytes [begin, end) of host memory or of one device buffer.
struct Span {
  uint64_t buffer = 0, begin = 0, end = 0;  // buffer: 0 for host memory, else the handle + 1
  size_t index = 0;
  bool overlaps(const Span& o) const {
    return buffer == o.buffer && begin < o.end && o.begin < end;
  }
};

// The memory parameter i takes; nothing (an empty span) for one with no elements.
std::optional<Span> span_of(const Param& p, size_t i) {
  const uint64_t bytes = static_cast<uint64_t>(numel_of(p.shape)) * size_bytes(p.dtype);
  if (bytes == 0) return std::nullopt;
  if (p.data)
    return Span{0, reinterpret_cast<uintptr_t>(p.data), reinterpret_cast<uintptr_t>(p.data) + bytes,
                i};
  if (p.device) return Span{p.device.handle + 1, p.device.offset, p.device.offset + bytes, i};
  return std::nullopt;
}

// Two parameters whose memory overlaps (the lower index first), if any, from their spans sorted
// by (device buffer, start): if any two overlap, two neighbours do (the one after the first of
// them starts inside it). 30,000 tensors take milliseconds; every pair took 3 s.
std::optional<std::pair<size_t, size_t>> overlapping(const std::vector<Param>& params) {
  std::vector<Span> spans;
  for (size_t i = 0; i < params.size(); ++i)
    if (auto sp = span_of(params[i], i)) spans.push_back(*sp);
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return std::tie(a.buffer, a.begin) < std::tie(b.buffer, b.begin);
  });
  for (size_t k = 1; k < spans.size(); ++k)
    if (spans[k].buffer == spans[k - 1].buffer && spans[k].begin < spans[k - 1].end)
      return std::minmax(spans[k - 1].index, spans[k].index);
  return std::nullopt;
}

// The reductions of two plans of one pipeline for different dtypes line up pass by pass, so
// their all-tensor reductions can be combined into one.
bool same_reductions(const plan::Plan& a, const plan::Plan& b) {
  if (a.passes.size() != b.passes.size()) return false;
  for (size_t k = 0; k < a.passes.size(); ++k) {
    const auto &ra = a.passes[k].reductions, &rb = b.passes[k].reductions;
    if (ra.size() != rb.size()) return false;
    for (size_t r = 0; r < ra.size(); ++r)
      if (a.program.at(ra[r]).op != b.program.at(rb[r]).op ||
          a.program.at(ra[r]).attr != b.program.at(rb[r]).attr)
        return false;
  }
  return a.program.hypers.size() == b.program.hypers.size() &&
         a.program.states.size() == b.program.states.size();
}

}  // namespace

// The parameters of one dtype: their program, state and executor.
struct Part {
  plan::Plan plan;
  runtime::OptimizerState state;
  uint32_t grad_buffer = 0;
  size_t grad_bytes = 0;  // per gradient element
  std::unique_ptr<runtime::Executor> executor;
  std::vector<size_t> params;  // this part's tensors, as indices into the optimizer's params
  bool fallback_told = false;  // its executor's vector_fallback is in the warnings
};

struct Optimizer::Impl {
  std::vector<Part> parts;
  std::vector<std::pair<size_t, size_t>> where;  // param -> (part, tensor)
  std::vector<Param> params;
  OptimizerOptions options;
  std::unique_ptr<cache::KernelCache> cache;
  std::shared_ptr<runtime::Device> device;
  Backend backend = Backend::cpu;
  codegen::CpuLaunch cpu_launch;
  codegen::GpuLaunch gpu_launch;
  bool tuned = false;
  bool last_skipped = false;  // the last step's StepResult::skipped, once known
  bool last_queued = false;   // the last step was queued: last_skipped is the device's
  runtime::StepMode mode = runtime::StepMode::host;
  std::vector<std::string> warnings;
  size_t cache_warnings = 0;  // the cache's warnings already in `warnings`
  // Hyperparameters the step's scheduler epoch may not pass (one_cycle_lr's total_steps),
  // found once at creation so the step only compares.
  std::vector<uint32_t> step_limits;
  // A sharded step's layout, agreed by every process at the first step.
  std::optional<detail::ShardLayout> layout;
  // The gradients bound at the last step (one of the two is empty).
  std::vector<const void*> bound_host;
  std::vector<DeviceMemory> bound_device;
  // The process that opened the device: a fork of it cannot use a GPU's or an OpenCL
  // context (CUDA refuses it; PoCL's and wgpu's threads are not in the child, which waits for
  // them forever). The CPU backend runs in a fork (runtime/cpu_device.cpp).
  pid_t opened_by = ::getpid();
  Status not_forked() const {
    if (backend == Backend::cpu || backend == Backend::reference || ::getpid() == opened_by)
      return Status::Ok();
    return make_error(
        "this optimizer's {} device was opened by process {}, and this process ({}) is a fork "
        "of it: a forked process cannot use its parent's GPU or OpenCL context (create the "
        "optimizer in this process, or start processes with the 'spawn' method)",
        to_string(backend), opened_by, ::getpid());
  }

  runtime::TensorState& tensor(size_t param) {
    auto [p, t] = where[param];
    return parts[p].state.tensors[t];
  }
  Expected<std::unique_ptr<runtime::Executor>> make_executor(const plan::Plan& plan) const;
  Status resolve_launch();
  Status bind_grads(const char* who, const std::vector<const void*>* host,
                    const std::vector<DeviceMemory>* device);
  void unbind_grads();
  Expected<runtime::StepResult> step();
  Expected<runtime::StepResult> lockstep();
  Status agree_layout();
  Status place_tensors();
  Status checkpoint_names_are_distinct(
      const std::vector<Param>& params,
      const std::unordered_map<std::string_view, size_t>& named) const;
  Status to_host(Part& part, std::vector<std::pair<size_t, size_t>>* borrowed,
                 bool materialize = true);
  // Memory for the part's pending state buffers (runtime::materialize), the executor told.
  Status materialize(Part& part) {
    auto made = runtime::materialize(part.plan, part.state);
    if (!made) return made.error();
    if (*made && part.executor) part.executor->state_changed();
    return Status::Ok();
  }
  // Reads back what queued device steps left on the device (scalar states, a step count and
  // skip flag they may have skipped).
  Status settle();
  // Whether the step count is the device's until settle() (queued steps that could skip).
  bool count_stale() const {
    return std::any_of(parts.begin(), parts.end(),
                       [](const Part& p) { return p.executor && p.executor->count_stale(); });
  }
  // Notes whether step `r` was skipped (or queued, so that it is known later).
  Expected<runtime::StepResult> stepped(Expected<runtime::StepResult> r) {
    if (r) last_skipped = r->skipped, last_queued = r->queued;
    return r;
  }
  Expected<autotune::TuneResult> tune(const std::vector<const void*>* host,
                                      const std::vector<DeviceMemory>* dev,
                                      autotune::TuneOptions options);
  Status from_host(Part& part, const std::vector<std::pair<size_t, size_t>>& borrowed,
                   bool write_device);
  Expected<uint32_t> state_buffer(const Part& part, std::string_view name) const;
  struct StateRef {
    const plan::Plan* plan;
    uint32_t buffer;
    const runtime::TensorState* tensor;
  };
  Expected<StateRef> state_ref(size_t param, std::string_view name) const;
  Status bind_state(size_t param, std::string_view buffer, void* host, DeviceMemory memory,
                    bool adopt);
};

Optimizer::Optimizer() : impl_(std::make_unique<Impl>()) {}
Optimizer::~Optimizer() = default;

namespace {

// Parameters grouped by dtype, in the order their dtypes first appear.
std::map<DType, std::vector<size_t>> by_dtype(const std::vector<Param>& params,
                                              std::vector<DType>* order) {
  std::map<DType, std::vector<size_t>> out;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!out.count(params[i].dtype)) order->push_back(params[i].dtype);
    out[params[i].dtype].push_back(i);
  }
  return out;
}

}  // namespace

namespace {

// One plan per parameter dtype, in the order the dtypes first appear; errors from the text form
// say "pipeline: ...".
Expected<std::vector<plan::Plan>> plans_for(const dsl::Pipeline& pipeline,
                                            const std::vector<Param>& params,
                                            const OptimizerOptions& options,
                                            std::vector<std::vector<size_t>>* members,
                                            const char* prefix) {
  if (params.empty()) return make_error("an optimizer needs at least one parameter");
  std::vector<DType> order;
  auto groups = by_dtype(params, &order);
  std::vector<plan::Plan> plans;
  for (DType dt : order) {
    if (!is_float(dt))
      return make_error("parameter '{}' is {}, not a float type", params[groups[dt][0]].name,
                        to_string(dt));
    auto program = dsl::lower(
        pipeline, {dt, options.grad_dtype.value_or(dt), dt, options.stochastic_param_rounding});
    if (!program) return make_error("{}{}", prefix, program.error().message);
    auto plan = plan::make_plan(*program);
    if (!plan) return plan.error();
    if (!plans.empty() && !same_reductions(plans[0], *plan))
      return make_error(
          "this pipeline plans differently for {} and {} parameters, so one optimizer cannot "
          "step both",
          to_string(order[0]), to_string(dt));
    plans.push_back(std::move(*plan));
    members->push_back(groups[dt]);
  }
  return plans;
}

}  // namespace

Expected<std::unique_ptr<Optimizer>> Optimizer::create(std::string_view text,
                                                       std::vector<Param> params,
                                                       OptimizerOptions options) {
  if (params.empty()) return make_error("an optimizer needs at least one parameter");
  auto pipeline = dsl::parse_pipeline(text);
  if (!pipeline) return make_error("pipeline: {}", pipeline.error().message);
  std::vector<std::vector<size_t>> members;
  auto plans = plans_for(*pipeline, params, options, &members, "pipeline: ");
  if (!plans) return plans.error();
  return create_parts(std::move(*plans), std::move(members), std::move(params), std::move(options));
}

Expected<std::unique_ptr<Optimizer>> Optimizer::create(const dsl::Pipeline& pipeline,
                                                       std::vector<Param> params,
                                                       OptimizerOptions options) {
  std::vector<std::vector<size_t>> members;
  auto plans = plans_for(pipeline, params, options, &members, "");
  if (!plans) return plans.error();
  return create_parts(std::move(*plans), std::move(members), std::move(params), std::move(options));
}

Expected<std::unique_ptr<Optimizer>> Optimizer::create_parts(
    std::vector<plan::Plan> plans, std::vector<std::vector<size_t>> members,
    std::vector<Param> params, OptimizerOptions options) {
  std::unique_ptr<Optimizer> o(new Optimizer());
  for (size_t i = 0; i < plans.size(); ++i) {
    Part part;
    part.plan = std::move(plans[i]);
    part.params = std::move(members[i]);
    o->impl_->parts.push_back(std::move(part));
  }
  OPTJIT_TRY(o->build(std::move(params), std::move(options)));
  return o;
}

Expected<std::unique_ptr<Optimizer>> Optimizer::create(plan::Plan plan, std::vector<Param> params,
                                                       OptimizerOptions options) {
  if (params.empty()) return make_error("an optimizer needs at least one parameter");
  const DType want = plan.buffers[plan.program.param_buffer()].storage;
  for (const auto& p : params)
    if (p.dtype != want)
      return make_error("parameter '{}' is {} but the plan's parameters are {}", p.name,
                        to_string(p.dtype), to_string(want));
  std::unique_ptr<Optimizer> o(new Optimizer());
  Part part;
  part.plan = std::move(plan);
  for (size_t i = 0; i < params.size(); ++i) part.params.push_back(i);
  o->impl_->parts.push_back(std::move(part));
  OPTJIT_TRY(o->build(std::move(params), std::move(options)));
  return o;
}

// A checkpoint (export_state) names a parameter's tensor by the parameter's name, each of its
// states "<name>.<state>" (a quantized one's scales "<name>.<state>.absmax") and the step count
// "step": a name that is another's key would make save() write one tensor twice, or (a
// parameter named "step") drop the step count, so that load() refuses the file. Refused here,
// before any training, not at the first save.
Status Optimizer::Impl::checkpoint_names_are_distinct(
    const std::vector<Param>& params,
    const std::unordered_map<std::string_view, size_t>& named) const {
  for (const Param& p : params)
    if (p.name == "step")
      return make_error(
          "a parameter is named 'step', the name checkpoints give the step count: give it "
          "another name");
  std::vector<std::string_view> keys;  // every part's state keys, once each
  for (const Part& part : parts) {
    for (const auto& b : part.plan.program.buffers)
      if (b.role == ir::BufferRole::state) keys.push_back(b.name);
    for (const auto& s : part.plan.program.states) keys.push_back(s.name);
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  for (const Param& p : params)
    for (std::string_view key : keys) {
      // Only a name ending in ".<key>" can be another's state key: look up its stem.
      if (p.name.size() <= key.size() || !p.name.ends_with(key) ||
          p.name[p.name.size() - key.size() - 1] != '.')
        continue;
      const std::string_view stem(p.name.data(), p.name.size() - key.size() - 1);
      if (auto owner = named.find(stem); owner != named.end())
        return make_error(
            "parameter '{}' has the name checkpoints give the state '{}' of parameter '{}': "
            "give one of them another name",
            p.name, key, stem);
    }
  return Status::Ok();
}

Status Optimizer::build(std::vector<Param> params, OptimizerOptions options) {
  Impl& m = *impl_;
  int64_t elements = 0;
  std::unordered_map<std::string_view, size_t> named;
  for (size_t i = 0; i < params.size(); ++i) {
    const Param& p = params[i];
    // A name keys the parameter's state in checkpoints (save() would write a file that load()
    // refuses) and in sharded plans.
    if (auto [first, fresh] = named.emplace(p.name, i); !fresh)
      return make_error(
          "parameters {} and {} are both named '{}': each parameter needs its own "
          "name (it keys its state in checkpoints)",
          first->second, i, p.name);
    for (int64_t d : p.shape)
      if (d < 0) return make_error("parameter '{}' has a negative dimension", p.name);
    auto counted = element_count(p.shape, fmt::format("parameter '{}'", p.name), elements);
    if (!counted) return counted.error();
    elements += *counted;
    const int64_t n = *counted;
    if (p.data && p.device)
      return make_error("parameter '{}' has both host data and device memory", p.name);
    if (!p.data && !p.device && n > 0) return make_error("parameter '{}' has no data", p.name);
  }
  OPTJIT_TRY(m.checkpoint_names_are_distinct(params, named));
  if (auto pair = overlapping(params))
    return make_error("parameters '{}' and '{}' overlap in {}memory", params[pair->first].name,
                      params[pair->second].name, params[pair->first].device ? "device " : "");
  if (options.shard && !options.shard->comm)
    return make_error("a sharded step needs a communicator (ShardOptions::comm)");
  m.params = std::move(params);
  m.options = std::move(options);
  m.where.resize(m.params.size());
  // A group pattern that matches no parameter is almost always a typo ("*.bais").
  for (size_t g = 0; g < m.options.groups.size(); ++g)
    for (const auto& pat : m.options.groups[g].patterns) {
      bool any = false;
      for (const auto& p : m.params) any = any || runtime::glob_match(pat, p.name);
      if (!any)
        m.warnings.push_back(
            fmt::format("parameter group {}: pattern '{}' matches no parameter", g + 1, pat));
    }
  for (size_t pi = 0; pi < m.parts.size(); ++pi) {
    Part& part = m.parts[pi];
    // Parameters are referenced, not copied: init_state sees empty tensors for them.
    std::vector<runtime::HostTensor> empties;
    std::vector<int> groups;
    std::vector<std::optional<bool>> quantize;
    for (size_t i : part.params) {
      const Param& p = m.params[i];
      empties.push_back({p.name, p.dtype, p.shape, {}});
      groups.push_back(p.group);
      quantize.push_back(p.quantize);
    }
    // State is deferred: memory the caller binds (optjit.torch binds every state) needs none
    // of the optimizer's own; the rest is made at the first step that needs it.
    auto state = runtime::init_state(part.plan, empties, m.options.groups, groups, true, quantize);
    if (!state) return state.error();
    part.state = std::move(*state);
    const uint32_t pb = part.plan.program.param_buffer(), gb = part.plan.program.grad_buffer();
    part.grad_buffer = gb;
    part.grad_bytes = size_bytes(part.plan.buffers[gb].storage);
    part.state.bindings.track();  // whenever a binding changes, changed() says so
    for (size_t t = 0; t < part.params.size(); ++t) {
      auto& ts = part.state.tensors[t];
      const Param& p = m.params[part.params[t]];
      ts.owned[pb] = {};
      ts.owned[gb] = {};
      ts.external[pb] = static_cast<uint8_t*>(p.data);
      ts.device[pb] = p.device;
      m.where[part.params[t]] = {pi, t};
    }
  }
  OPTJIT_TRY(m.place_tensors());
  const auto& hypers = m.parts[0].plan.program.hypers;
  for (uint32_t h = 0; h < hypers.size(); ++h)
    if (hypers[h].step_limit) m.step_limits.push_back(h);
  // The device.
  m.backend = m.options.backend;
  if (m.backend == Backend::automatic)
    m.backend = Backend(runtime::pick_auto(runtime::list_devices()).backend);
  // Any device that is not the host's memory (CUDA, OpenCL, and kinds registered later).
  const bool gpu = m.backend != Backend::cpu && m.backend != Backend::reference;
  if (m.options.cuda_graph && m.backend != Backend::cuda)
    return make_error("cuda_graph needs the cuda backend, not {}", to_string(m.backend));
  if (m.options.device_step.value_or(false) && !gpu)
    return make_error("device_step needs the cuda or opencl backend, not {}", to_string(m.backend));
  if (m.options.queue && !gpu)
    return make_error("a queue is for the cuda, opencl and webgpu backends, not {}",
                      to_string(m.backend));
  for (const auto& p : m.params)
    if (p.device && !gpu)
      return make_error("parameter '{}' is in device memory, which the {} backend cannot use",
                        p.name, to_string(m.backend));
  if (m.backend == Backend::reference) return Status::Ok();
  if (m.options.cache) {
    auto c = cache::open_for_run(*m.options.cache, m.warnings);
    if (!c) return c.error();
    m.cache = std::move(*c);
    if (m.cache) m.cache_warnings = m.cache->warnings().size();
  }
  auto device = runtime::open_device(
      {.kind = m.backend.name(), .index = m.options.device, .queue = m.options.queue});
  if (!device) return device.error();
  m.device = std::move(*device);
  // The step mode: a graph, the device step where the device has it, else the host.
  const auto& desc = m.device->description();
  if (m.options.cuda_graph)
    m.mode = runtime::StepMode::graph;
  else if (m.options.device_step.value_or(desc.device_step && m.parts.size() == 1 &&
                                          (!m.options.shard || m.options.shard->comm->enqueues())))
    m.mode = runtime::StepMode::device;
  // Sharded, the device step all-reduces each pass's partials on the device (NCCL on the
  // stream; other communicators through the host); a graph needs a communicator that only
  // enqueues, on the stream the graph is captured on.
  if (m.mode == runtime::StepMode::graph && m.options.shard && !m.options.shard->comm->capturable())
    return make_error(
        "a CUDA graph cannot capture a sharded step over {}, {}; use optjit's NCCL communicator "
        "(nccl_communicator), or the device step without cuda_graph",
        m.options.shard->comm->name(),
        m.options.shard->comm->enqueues() ? "whose all-reduce runs on a stream of its own"
                                          : "which synchronises with the host");
  if (m.mode != runtime::StepMode::host && m.parts.size() > 1)
    return make_error(
        "parameters of several dtypes step with the scalar program on the host; device_step "
        "and cuda_graph need parameters of one dtype");
  for (const Param& p : m.params)
    OPTJIT_TRY(caller_memory(*m.device, p.device, numel_of(p.shape) * size_bytes(p.dtype),
                             [&] { return fmt::format("parameter '{}'", p.name); }));
  OPTJIT_TRY(m.resolve_launch());
  for (Part& part : m.parts) {
    auto e = m.make_executor(part.plan);
    if (!e) return e.error();
    part.executor = std::move(*e);
  }
  return Status::Ok();
}

// The launch: as given, else the kernel cache's tuning decision for this program on this device
// at this size, else the default for this plan on this device.
Status Optimizer::Impl::resolve_launch() {
  int64_t elements = 0;
  for (const Part& p : parts) elements += p.state.elements();
  const plan::Plan& plan = parts[0].plan;
  const auto& desc = device->description();
  const autotune::TuneTarget target{autotune::program_id(plan), desc.performance, elements};
  if (desc.kind == "cpu") {
    cpu_launch = options.cpu;
    if (options.cpu == codegen::CpuLaunch{})
      if (auto d = autotune::stored_decision(target, cache.get()))
        if (auto c = autotune::parse_cpu_config(*d)) {
          cpu_launch = *c;
          tuned = true;
        }
    if (cpu_launch.chunk_elements < 1) return make_error("chunk size must be at least 1 element");
    return Status::Ok();
  }
  if (options.gpu_launch) {
    gpu_launch = *options.gpu_launch;
    return Status::Ok();
  }
  std::string from;
  gpu_launch =
      autotune::gpu_launch_for(target, cache.get(), &from, autotune::default_launch(plan, desc));
  tuned = !from.empty();
  if (options.gpu_chunk_elements != 0) {
    // A vector width the caller did not choose gives way to vec=1 on chunks it does not divide.
    if (options.gpu_chunk_elements % gpu_launch.vec != 0) gpu_launch = gpu_launch.scalar();
    gpu_launch.chunk_elements = options.gpu_chunk_elements;
    OPTJIT_TRY(gpu_launch.validate());
  }
  return Status::Ok();
}

Expected<std::unique_ptr<runtime::Executor>> Optimizer::Impl::make_executor(
    const plan::Plan& plan) const {
  runtime::ExecutorOptions o;
  if (device->description().kind == "cpu") {
    o = runtime::ExecutorOptions::of(cpu_launch);
  } else {
    o.launch = gpu_launch;
    // The caller's host parameters are the truth: uploaded before each step, updated after it.
    // The state stays on the device between steps; save() fetches it.
    o.copy_back = runtime::ExecutorOptions::CopyBack::params;
    o.host_params = true;
    o.resident_grads = options.resident_grads;
    // On the caller's queue, which orders whatever the caller queues next, a device step need
    // not wait for the device.
    o.queued_steps = options.queue != nullptr;
    o.defer_skips = options.defer_skips;
    // A vector width the caller did not choose (the default, or tuned) gives way to vec=1 on
    // unaligned memory.
    o.vec_fallback = !options.gpu_launch || tuned;
  }
  o.step = mode;
  return runtime::Executor::create(plan, device, o, cache.get());
}

Status Optimizer::Impl::bind_grads(const char* who, const std::vector<const void*>* host,
                                   const std::vector<DeviceMemory>* dev) {
  const size_t n = host ? host->size() : dev->size();
  if (n != params.size())
    return make_error("{}() got {} gradients for {} parameters", who, n, params.size());
  if (dev && !device)
    return make_error("gradients in device memory need a GPU backend (cuda, opencl, webgpu)");
  // The same gradients as last step (a framework's gradient buffers usually are): checked and
  // bound then, so nothing to do; with 10,000 tensors this is most of a step's host work.
  if (host ? (bound_host == *host && bound_device.empty())
           : (bound_device == *dev && bound_host.empty()))
    return Status::Ok();
  for (size_t i = 0; i < n; ++i) {
    const auto [p, t] = where[i];
    const int64_t numel = parts[p].state.tensors[t].numel;
    const size_t gbytes = parts[p].grad_bytes;
    if (host) {
      if (!(*host)[i] && numel > 0)
        return make_error("the gradient of '{}' is null", params[i].name);
      if (overlap((*host)[i], numel * gbytes, params[i].data, numel * size_bytes(params[i].dtype)))
        return make_error("the gradient of '{}' overlaps its parameter", params[i].name);
    } else {
      if (!(*dev)[i] && numel > 0)
        return make_error("the gradient of '{}' is null", params[i].name);
      if ((*dev)[i] == params[i].device && numel > 0)
        return make_error("the gradient of '{}' is its parameter's memory", params[i].name);
      OPTJIT_TRY(caller_memory(*device, (*dev)[i], numel * gbytes, [&] {
        return fmt::format("the gradient of '{}'", params[i].name);
      }));
    }
  }
  for (size_t i = 0; i < n; ++i) {
    auto [p, t] = where[i];
    runtime::TensorState& ts = parts[p].state.tensors[t];
    const uint32_t gb = parts[p].grad_buffer;
    // The kernels only read gradients.
    uint8_t* h = host ? const_cast<uint8_t*>(static_cast<const uint8_t*>((*host)[i])) : nullptr;
    const DeviceMemory d = dev ? (*dev)[i] : DeviceMemory{};
    if (ts.external[gb] != h || ts.device[gb] != d) {
      ts.external[gb] = h;
      ts.device[gb] = d;
      parts[p].state.bindings.changed();  // the executor reads the new binding
    }
  }
  bound_host = host ? *host : std::vector<const void*>{};
  bound_device = dev ? *dev : std::vector<DeviceMemory>{};
  return Status::Ok();
}

void Optimizer::Impl::unbind_grads() {
  bound_host.clear();
  bound_device.clear();
  for (Part& part : parts) {
    for (auto& t : part.state.tensors)
      t.external[part.grad_buffer] = nullptr, t.device[part.grad_buffer] = {};
    part.state.bindings.changed();
  }
}

Expected<runtime::StepResult> Optimizer::Impl::step() {
  for (Part& part : parts) OPTJIT_TRY(materialize(part));
  // A schedule that ends (one_cycle_lr's total_steps) ends the run where torch's scheduler
  // raises, before anything is written: the step's scheduler epoch may not pass it (after queued
  // steps that could be skipped, the device knows the epoch).
  if (!step_limits.empty() && count_stale()) OPTJIT_TRY(settle());
  // Hyperparameters in device memory (set_hyper_source): the device step copies them on the
  // queue; the host's step reads them.
  for (Part& part : parts)
    if (part.executor && mode == runtime::StepMode::host)
      for (const auto& [h, src] : part.executor->hyper_sources()) {
        double v = 0;
        OPTJIT_TRY(device->read(&v, src, sizeof v));
        for (auto& g : part.state.groups) g.hypers[h] = v;
      }
  const Part& first = parts[0];
  const int64_t epoch = first.state.step;  // step t is scheduled as epoch t - 1
  for (uint32_t h : step_limits) {
    const ir::HyperDecl& decl = first.plan.program.hypers[h];
    for (size_t g = 0; g < first.state.groups.size(); ++g) {
      const double limit = first.state.groups[g].hypers[h];
      if (static_cast<double>(epoch) > limit)
        return make_error(
            "step {} is past {} = {}{}: the schedule has ended (torch raises here: \"Tried to "
            "step {} times. The specified number of total steps is {}\")",
            epoch + 1, decl.name, limit,
            first.state.groups.size() > 1 ? fmt::format(" of parameter group {}", g) : "", epoch,
            limit);
    }
  }
  if (parts.size() > 1 || (options.shard && mode == runtime::StepMode::host)) return lockstep();
  if (options.shard && !layout) {  // the first sharded device step
    OPTJIT_TRY(agree_layout());
    parts[0].executor->set_shard(
        std::make_shared<const runtime::DeviceShard>(layout->device_shard()));
  }
  if (!device) return runtime::ReferenceBackend(parts[0].plan).step(parts[0].state);
  return parts[0].executor->step(parts[0].state);
}

// Parameters of several dtypes: one program each, stepped pass by pass together, with every
// all-tensor reduction combined over all of them in parameter order, exactly as one program
// over all the tensors would combine it.
Expected<runtime::StepResult> Optimizer::Impl::lockstep() {
  // Each part on its executor, or (the reference backend) on the float64 interpreter.
  auto run_pass = [&](Part& part, size_t k,
                      runtime::HostProgram& host) -> Expected<std::vector<std::vector<double>>> {
    if (part.executor) return part.executor->run_pass(k, host, part.state);
    return runtime::ReferenceBackend(part.plan).run_pass(k, part.state, host);
  };
  auto finish = [&](Part& part) {
    return part.executor ? part.executor->finish(part.state) : Status::Ok();
  };
  if (options.shard && !layout) OPTJIT_TRY(agree_layout());
  for (Part& part : parts)
    if (part.executor) OPTJIT_TRY(part.executor->prepare(part.state));
  std::vector<std::unique_ptr<runtime::HostProgram>> hosts;
  for (Part& part : parts)
    hosts.push_back(std::make_unique<runtime::HostProgram>(part.plan, part.state));
  const size_t P = parts[0].plan.passes.size();
  for (size_t k = 0; k <= P; ++k) {
    bool skipped = false;
    for (auto& h : hosts) skipped |= h->run_segment(k);
    if (skipped) {
      for (Part& part : parts) OPTJIT_TRY(finish(part));
      return runtime::StepResult{true};
    }
    if (k == P) break;
    std::vector<std::vector<std::vector<double>>> partial(parts.size());
    for (size_t p = 0; p < parts.size(); ++p) {
      auto r = run_pass(parts[p], k, *hosts[p]);
      if (!r) return r.error();
      partial[p] = std::move(*r);
    }
    const auto& reds = parts[0].plan.passes[k].reductions;
    if (!reds.empty()) {
      // Each reduction's partials in parameter order; sharded, completed over every process
      // (one all-reduce) into one value per global tensor, in the global table's order.
      std::vector<ir::Op> ops;
      std::vector<std::vector<double>> all(reds.size(), std::vector<double>(params.size()));
      for (size_t r = 0; r < reds.size(); ++r) {
        ops.push_back(parts[0].plan.program.at(reds[r]).op);
        for (size_t i = 0; i < params.size(); ++i)
          all[r][i] = partial[where[i].first][r][where[i].second];
      }
      if (layout) {
        std::vector<bool> all_tensors;
        for (ir::ValueId r : reds)
          all_tensors.push_back(static_cast<ir::Scope>(parts[0].plan.program.at(r).attr) ==
                                ir::Scope::all);
        auto global = layout->complete(ops, all_tensors, all);
        if (!global) return global.error();
        all = std::move(*global);
      }
      for (size_t r = 0; r < reds.size(); ++r) {
        if (static_cast<ir::Scope>(parts[0].plan.program.at(reds[r]).attr) == ir::Scope::all) {
          for (auto& pp : partial) pp[r] = all[r];  // combine() of these is the global value
        } else if (layout) {                        // a split tensor's value over all its pieces
          for (size_t i = 0; i < params.size(); ++i)
            partial[where[i].first][r][where[i].second] = all[r][layout->tensor_of(i)];
        }
      }
    }
    for (size_t p = 0; p < parts.size(); ++p)
      if (!partial[p].empty()) hosts[p]->finish_reductions(k, partial[p]);
  }
  runtime::StepResult done{false};
  done.moved_bytes = 0;
  for (size_t p = 0; p < parts.size(); ++p) {
    OPTJIT_TRY(finish(parts[p]));
    for (auto [g, st, v] : hosts[p]->pending_states()) parts[p].state.groups[g].states[st] = v;
    ++parts[p].state.step;
    if (parts[p].executor) {
      done.copied_bytes += parts[p].executor->copied_bytes();
      done.moved_bytes += parts[p].executor->moved_bytes();
    } else {
      done.moved_bytes = std::numeric_limits<double>::quiet_NaN();  // the reference backend
    }
  }
  return done;
}

// Each tensor's place in the model as its program sees it (TensorState::whole and first): in
// parameter order over all the parts; sharded, in the global tensor table's order, a piece
// starting at its offset in its tensor. So `numel` and stochastic rounding do not depend on
// how parameters are split by dtype or across processes. A piece whose tensor is not in the
// table keeps its local place: the first step's layout check names it.
Status Optimizer::Impl::place_tensors() {
  // name -> (its first element in the model, the tensor)
  std::map<std::string, std::pair<int64_t, const GlobalTensor*>> global;
  if (options.shard) {
    int64_t at = 0;
    for (const auto& t : options.shard->tensors) {
      global.emplace(t.name, std::pair{at, &t});
      at += std::max<int64_t>(t.numel, 0);
    }
  }
  int64_t at = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    Part& part = parts[where[i].first];
    auto& ts = part.state.tensors[where[i].second];
    ts.whole = ts.numel;
    ts.first = at;
    at += ts.numel;
    if (!options.shard) continue;
    auto g = global.find(params[i].name);
    if (g == global.end()) continue;
    const auto& offsets = options.shard->offsets;
    const int64_t offset = i < offsets.size() ? offsets[i] : 0;
    const auto& [start, tensor] = g->second;
    ts.first = start + offset;
    ts.whole = tensor->numel;
    if (!tensor->quantize) ts.quantize = false;
    OPTJIT_TRY(runtime::check_quantize(part.plan, ts));  // (now for the whole tensor)
    // Quantized state follows the whole tensor (whether it is quantized, and its blocks): the
    // piece's state is made again now that `whole` is known.
    for (size_t b = 0; b < part.plan.buffers.size(); ++b) {
      const ir::BufferDecl& d = part.plan.buffers[b];
      if (d.role != ir::BufferRole::state) continue;
      if (!d.per_block && runtime::holds_codes(part.plan, b, ts)) {
        const int64_t block = ir::info(d.quant).block, end = offset + ts.numel;
        if (offset % block != 0 || (end % block != 0 && end != ts.whole))
          return make_error(
              "sharded step: the piece of '{}' (elements [{}, {}) of {}) cuts the {}-element "
              "blocks its state '{}' is quantized in ({}): cut a tensor with quantized state at "
              "multiples of {} elements, or keep its state unquantized (GlobalTensor::quantize)",
              params[i].name, offset, end, ts.whole, block, d.name, ir::info(d.quant).description,
              block);
      }
      ts.owned[b] = {};  // pending: made (or bound) for the piece's size
      part.state.pending = true;
    }
  }
  return Status::Ok();
}

// The first sharded step: every process checks that the others step the same optimizer (the
// reductions of each pass, the hyperparameters, states, groups and the global tensor table) and
// learns where every piece of every tensor is.
Status Optimizer::Impl::agree_layout() {
  const ShardOptions& sh = *options.shard;
  const plan::Plan& plan = parts[0].plan;
  std::string id = fmt::format("optjit-shard-1 processes {}\n", sh.comm->size());
  for (const auto& pass : plan.passes) {
    id += "pass";
    for (ir::ValueId r : pass.reductions)
      id += fmt::format(" {}:{}", ir::info(plan.program.at(r).op).text, plan.program.at(r).attr);
    id += "\n";
  }
  for (const auto& h : plan.program.hypers) id += "hyper " + h.name + "\n";
  for (const auto& st : plan.program.states) id += "state " + st.name + "\n";
  for (const auto& b : plan.buffers) id += "buffer " + b.name + "\n";
  for (const auto& g : options.groups) {
    id += "group";
    for (const auto& pat : g.patterns) id += " " + pat;
    for (const auto& [k, v] : g.overrides) id += fmt::format(" {}={}", k, v);
    id += "\n";
  }
  for (const auto& t : sh.tensors)
    id += fmt::format("tensor {} {}{}\n", t.name, t.numel, t.quantize ? "" : " unquantized");
  std::vector<std::string> names;
  std::vector<int64_t> numels;
  for (const auto& p : params) names.push_back(p.name), numels.push_back(numel_of(p.shape));
  auto l = detail::ShardLayout::agree(sh, names, numels, XXH3_64bits(id.data(), id.size()));
  if (!l) return l.error();
  layout = std::move(*l);
  return Status::Ok();
}

Expected<runtime::StepResult> Optimizer::step(const std::vector<const void*>& grads) {
  // The gradients stay bound until the next step replaces them (rebinding the same memory
  // costs nothing then); nothing reads them in between.
  OPTJIT_TRY(impl_->not_forked());
  OPTJIT_TRY(impl_->bind_grads("step", &grads, nullptr));
  return impl_->stepped(impl_->step());
}

Expected<runtime::StepResult> Optimizer::step_device(const std::vector<DeviceMemory>& grads) {
  OPTJIT_TRY(impl_->not_forked());
  OPTJIT_TRY(impl_->bind_grads("step_device", nullptr, &grads));
  return impl_->stepped(impl_->step());
}

Expected<uint32_t> Optimizer::Impl::state_buffer(const Part& part, std::string_view name) const {
  std::string names;
  for (size_t b = 0; b < part.plan.buffers.size(); ++b) {
    if (part.plan.buffers[b].role != ir::BufferRole::state) continue;
    if (part.plan.buffers[b].name == name) return static_cast<uint32_t>(b);
    names += (names.empty() ? "" : ", ") + part.plan.buffers[b].name;
  }
  return make_error("no state buffer '{}' (this optimizer has: {})", name,
                    names.empty() ? "none" : names);
}

// Host copies of every buffer that lives only in device memory (the caller's), and the state
// the device holds, so the host state is whole (for a checkpoint). `borrowed` lists the copies
// made; from_host() gives them back (and writes them to the device after an import).
Status Optimizer::Impl::to_host(Part& part, std::vector<std::pair<size_t, size_t>>* borrowed,
                                bool materialize) {
  OPTJIT_TRY(not_forked());
  if (materialize) OPTJIT_TRY(this->materialize(part));
  if (part.executor) OPTJIT_TRY(part.executor->sync_to_host(part.state));
  for (size_t t = 0; t < part.state.tensors.size(); ++t) {
    auto& ts = part.state.tensors[t];
    for (size_t b = 0; b < part.plan.buffers.size(); ++b) {
      if (!ts.device[b] || part.plan.buffers[b].role == ir::BufferRole::grad) continue;
      ts.owned[b].resize(runtime::buffer_bytes(part.plan, b, ts));
      OPTJIT_TRY(device->read(ts.owned[b].data(), ts.device[b], ts.owned[b].size()));
      borrowed->push_back({t, b});
    }
  }
  return Status::Ok();
}

Status Optimizer::Impl::from_host(Part& part,
                                  const std::vector<std::pair<size_t, size_t>>& borrowed,
                                  bool write_device) {
  Status st = Status::Ok();
  for (auto [t, b] : borrowed) {
    auto& ts = part.state.tensors[t];
    if (write_device && st)
      st = device->write(ts.device[b], ts.owned[b].data(), ts.owned[b].size());
    ts.owned[b] = {};
  }
  return st;
}

Expected<runtime::TensorFile> Optimizer::export_state() const {
  Impl& m = *impl_;
  runtime::TensorFile out;
  std::string names;
  for (Part& part : m.parts) {
    std::vector<std::pair<size_t, size_t>> borrowed;
    Status st = m.to_host(part, &borrowed);
    if (st) {
      runtime::TensorFile f = runtime::export_state(part.plan, part.state);
      for (auto& t : f.tensors)
        if (t.name != "step" || !out.find("step")) out.tensors.push_back(std::move(t));
      for (auto& [k, v] : f.metadata)  // the format, and each quantized state's map
        if (k != "optjit.params") out.metadata[k] = v;
    }
    OPTJIT_TRY(m.from_host(part, borrowed, false));
    OPTJIT_TRY(st);
  }
  for (const auto& p : m.params) names += (names.empty() ? "" : "\n") + p.name;
  out.metadata["optjit.params"] = names;
  return out;
}

Status Optimizer::sync_state() {
  OPTJIT_TRY(impl_->not_forked());
  for (Part& part : impl_->parts)
    if (part.executor) OPTJIT_TRY(part.executor->sync_to_host(part.state));
  return Status::Ok();
}

Status Optimizer::import_state(const runtime::TensorFile& file) {
  Impl& m = *impl_;
  // All or nothing: a bad file leaves every part as it was.
  std::vector<runtime::OptimizerState> copies;
  for (Part& part : m.parts) {
    std::vector<std::pair<size_t, size_t>> borrowed;
    Status st = m.to_host(part, &borrowed);
    runtime::OptimizerState copy = part.state;
    if (st) st = runtime::import_state(part.plan, copy, file);
    OPTJIT_TRY(m.from_host(part, borrowed, false));
    OPTJIT_TRY(st);
    copies.push_back(std::move(copy));
  }
  for (size_t p = 0; p < m.parts.size(); ++p) {
    Part& part = m.parts[p];
    // Buffers in the caller's device memory get the imported values there.
    std::vector<std::pair<size_t, size_t>> borrowed;
    for (size_t t = 0; t < part.state.tensors.size(); ++t)
      for (size_t b = 0; b < part.plan.buffers.size(); ++b)
        if (copies[p].tensors[t].device[b] && part.plan.buffers[b].role == ir::BufferRole::state)
          borrowed.push_back({t, b});
    part.state = std::move(copies[p]);
    OPTJIT_TRY(m.from_host(part, borrowed, true));
    if (part.executor) part.executor->state_changed();  // the device's copy is stale now
  }
  return Status::Ok();
}

Status Optimizer::save(const std::string& path) const {
  auto f = export_state();
  if (!f) return f.error();
  return runtime::write_safetensors(path, *f);
}

Status Optimizer::load(const std::string& path) {
  auto f = runtime::read_safetensors(path);
  if (!f) return f.error();
  return import_state(*f);
}

Status Optimizer::rebind_params(std::span<const Rebinding> changes) {
  Impl& m = *impl_;
  const bool have_device = m.device && !m.device->description().host_memory;
  for (const Rebinding& c : changes) {
    if (c.param >= m.params.size()) return make_error("rebind_param: no parameter {}", c.param);
    const Param& p = m.params[c.param];
    const size_t bytes = static_cast<size_t>(numel_of(p.shape)) * size_bytes(p.dtype);
    if (c.host && c.device)
      return make_error("rebind_param: '{}' is given both host and device memory", p.name);
    if (!c.host && !c.device && bytes > 0)
      return make_error("rebind_param: null memory for '{}'", p.name);
    if (c.device && !have_device)
      return make_error(
          "rebind_param: '{}' in device memory needs a GPU backend (cuda, opencl, webgpu), not {}",
          p.name, to_string(m.backend));
    if (c.device)
      OPTJIT_TRY(caller_memory(*m.device, c.device, bytes,
                               [&] { return fmt::format("parameter '{}'", p.name); }));
  }
  // The parameters as they will be must not overlap (on the way they may: two that trade
  // memory). One change against every other parameter; many at once by sorting all of them
  // (one at a time, a framework replacing 30,000 tensors paid 4.5 s of pairs).
  auto with = [&](const Rebinding& c) {
    Param p = m.params[c.param];
    p.data = c.host;
    p.device = c.device;
    return p;
  };
  std::optional<std::pair<size_t, size_t>> clash;
  if (changes.size() == 1) {
    if (auto mine = span_of(with(changes[0]), changes[0].param))
      for (size_t j = 0; j < m.params.size() && !clash; ++j)
        if (auto other = span_of(m.params[j], j);
            j != mine->index && other && mine->overlaps(*other))
          clash = {mine->index, j};
  } else if (!changes.empty()) {
    std::vector<Param> next = m.params;
    for (const Rebinding& c : changes) next[c.param] = with(c);
    clash = overlapping(next);
    if (clash && std::none_of(changes.begin(), changes.end(),
                              [&](const Rebinding& c) { return c.param == clash->first; }))
      std::swap(clash->first, clash->second);  // name a rebound one first
  }
  if (clash)
    return make_error("rebind_param: '{}' would overlap '{}'", m.params[clash->first].name,
                      m.params[clash->second].name);
  for (const Rebinding& c : changes) {
    auto [pi, t] = m.where[c.param];
    Part& part = m.parts[pi];
    const uint32_t pb = part.plan.program.param_buffer();
    auto& ts = part.state.tensors[t];
    ts.external[pb] = static_cast<uint8_t*>(c.host);
    ts.device[pb] = c.device;
    m.params[c.param].data = c.host;
    m.params[c.param].device = c.device;
    part.state.bindings.changed();
  }
  return Status::Ok();
}

Status Optimizer::rebind_param(size_t param, void* host) {
  const Rebinding one{param, host, {}};
  return rebind_params({&one, 1});
}

Status Optimizer::rebind_param(size_t param, DeviceMemory device) {
  const Rebinding one{param, nullptr, device};
  return rebind_params({&one, 1});
}

// Makes a state buffer the caller's memory: its current value is copied there (host or device
// memory), then the optimizer's own copy is dropped and the state reads and writes it in place.
Status Optimizer::Impl::bind_state(size_t param, std::string_view buffer, void* host,
                                   DeviceMemory memory, bool adopt) {
  if (param >= params.size()) return make_error("no parameter {}", param);
  OPTJIT_TRY(not_forked());
  if (memory && (!device || device->description().host_memory))
    return make_error(
        "bind_state: device memory needs a GPU backend (cuda, opencl, webgpu), not {}",
        to_string(backend));
  Part& part = parts[where[param].first];
  auto b = state_buffer(part, buffer);
  if (!b) return b.error();
  // Nothing to bind: no elements (or a small tensor's quantization scales, which it has none of).
  if (runtime::buffer_bytes(part.plan, *b, tensor(param)) == 0) return Status::Ok();
  if (!host && !memory) return make_error("bind_state: null memory for '{}'", params[param].name);
  auto& ts = tensor(param);
  const size_t bytes = runtime::buffer_bytes(part.plan, *b, ts);
  if (memory)
    OPTJIT_TRY(caller_memory(*device, memory, bytes, [&] {
      return fmt::format("state '{}' of '{}'", buffer, params[param].name);
    }));
  if (!adopt) {
    // The buffer's current value, copied to the new memory. Only this buffer is read: reading
    // the whole part back (to_host: every parameter and state in device memory) made binding
    // each state of a model on a GPU read the model back each time.
    if (part.executor) OPTJIT_TRY(part.executor->sync_to_host(part.state));
    if (runtime::pending(part.plan, *b, ts)) {  // its initial value, made where it goes
      std::vector<uint8_t> staged(host ? 0 : bytes);
      uint8_t* out = host ? static_cast<uint8_t*>(host) : staged.data();
      runtime::initial_state(part.plan, *b, ts, part.state.init_groups[ts.group], out);
      if (!host) OPTJIT_TRY(device->write(memory, out, bytes));
    } else if (ts.device[*b]) {  // in device memory: copied on the device, or read back
      OPTJIT_TRY(memory ? device->copy(memory, ts.device[*b], bytes)
                        : device->read(host, ts.device[*b], bytes));
    } else if (host) {
      std::memmove(host, ts.data(*b), bytes);
    } else {
      OPTJIT_TRY(device->write(memory, ts.data(*b), bytes));
    }
  }
  ts.owned[*b] = {};
  ts.external[*b] = static_cast<uint8_t*>(host);
  ts.device[*b] = memory;
  part.state.bindings.changed();
  if (part.executor) part.executor->state_changed();
  return Status::Ok();
}

Status Optimizer::bind_state(size_t param, std::string_view buffer, void* host, bool adopt) {
  return impl_->bind_state(param, buffer, host, {}, adopt);
}

Status Optimizer::bind_state(size_t param, std::string_view buffer, DeviceMemory memory,
                             bool adopt) {
  return impl_->bind_state(param, buffer, nullptr, memory, adopt);
}

Expected<autotune::TuneResult> Optimizer::tune(const std::vector<const void*>& grads,
                                               autotune::TuneOptions options) {
  return impl_->tune(&grads, nullptr, options);
}

Expected<autotune::TuneResult> Optimizer::tune(const std::vector<DeviceMemory>& grads,
                                               autotune::TuneOptions options) {
  return impl_->tune(nullptr, &grads, options);
}

Expected<autotune::TuneResult> Optimizer::Impl::tune(const std::vector<const void*>* host,
                                                     const std::vector<DeviceMemory>* dev,
                                                     autotune::TuneOptions options) {
  if (!device) return make_error("tune() tunes a device; the reference backend has none");
  OPTJIT_TRY(not_forked());
  if (parts.size() > 1)
    return make_error("tune() takes parameters of one dtype; run `optjit tune` for each dtype");
  Part& part = parts[0];
  OPTJIT_TRY(materialize(part));
  OPTJIT_TRY(bind_grads("tune", host, dev));
  // The parameters (and bound state) live in the caller's memory, outside the state's snapshot:
  // host memory is saved on the host, device memory in a device copy of each buffer.
  std::vector<std::pair<uint8_t*, std::vector<uint8_t>>> saved;
  struct SavedDevice {
    DeviceMemory at;
    runtime::DeviceAllocation copy;
    size_t bytes;
  };
  std::vector<SavedDevice> saved_device;
  auto fail = [&](Status st) {
    unbind_grads();
    return Expected<autotune::TuneResult>(st.error());
  };
  for (auto& t : part.state.tensors)
    for (size_t b = 0; b < part.plan.buffers.size(); ++b) {
      if (part.plan.buffers[b].role == ir::BufferRole::grad) continue;
      const size_t n = runtime::buffer_bytes(part.plan, b, t);
      if (t.external[b]) {
        saved.push_back({t.external[b], std::vector<uint8_t>(t.external[b], t.external[b] + n)});
      } else if (t.device[b] && n > 0) {
        auto copy = runtime::allocate(*device, n, "saving the caller's memory while tuning");
        if (!copy) return fail(copy.error());
        if (Status st = device->copy(copy->memory(), t.device[b], n); !st) return fail(st);
        saved_device.push_back({t.device[b], std::move(*copy), n});
      }
    }
  Status restored = Status::Ok();
  auto restore = [&] {
    for (auto& [p, bytes] : saved)
      if (!bytes.empty()) std::memcpy(p, bytes.data(), bytes.size());
    Status st = Status::Ok();
    for (const SavedDevice& d : saved_device)
      if (st) st = device->copy(d.at, d.copy.memory(), d.bytes);
    if (st && !saved_device.empty()) st = device->finish();
    if (!st && restored) restored = st;
  };
  Status synced = part.executor->sync_to_host(part.state);
  Expected<autotune::TuneResult> r =
      !synced ? Expected<autotune::TuneResult>(synced.error())
      : device->description().kind == "cpu"
          ? autotune::tune_cpu(part.plan, part.state, cache.get(), options, restore)
          : autotune::tune_gpu(part.plan, part.state, device, cache.get(), options, restore);
  unbind_grads();
  if (!r) return r.error();
  if (!restored) return restored.error();
  if (device->description().kind == "cpu") {
    auto winner = autotune::parse_cpu_config(r->winner);
    if (!winner) return make_error("tuning chose an unreadable configuration '{}'", r->winner);
    cpu_launch = *winner;
  } else {
    auto winner = codegen::GpuLaunch::parse(r->winner);
    if (!winner) return make_error("tuning chose an unreadable configuration '{}'", r->winner);
    gpu_launch = *winner;
  }
  auto sources = part.executor->hyper_sources();  // set_hyper_source's, kept
  part.executor.reset();
  tuned = true;
  auto e = make_executor(part.plan);
  if (!e) return e.error();
  part.executor = std::move(*e);
  part.fallback_told = false;
  part.executor->set_hyper_sources(std::move(sources));
  return r;
}

Status Optimizer::set_hyper(std::string_view name, double value, std::optional<uint32_t> group) {
  return set_hyper(name, std::vector<double>{value}, group);
}

Status Optimizer::set_hyper(std::string_view name, const std::vector<double>& values,
                            std::optional<uint32_t> group) {
  // Every part or none: each checked before any is set. (Each part's whole state was copied
  // to be set and its groups kept: the optimizer's own state memory with it, 78 ms a call for
  // 16M AdamW parameters, seven steps' time, for a scheduler's lr set at every step.)
  std::vector<std::vector<uint32_t>> hypers;  // per part
  for (const Part& part : impl_->parts) {
    auto idx = runtime::check_set_hyper(part.plan.program, part.state, name, values, group);
    if (!idx) return idx.error();
    hypers.push_back(std::move(*idx));
  }
  for (size_t p = 0; p < impl_->parts.size(); ++p)
    runtime::apply_hyper(impl_->parts[p].state, hypers[p], values, group);
  return Status::Ok();
}

Expected<double> Optimizer::hyper(std::string_view name, uint32_t group) const {
  const Part& part = impl_->parts[0];
  auto idx = runtime::match_hyper(part.plan.program, name);
  if (!idx) return idx.error();
  if (idx->size() != 1)
    return make_error("'{}' is a tuple; ask for one element, e.g. {}.0", name, name);
  if (group >= part.state.groups.size()) return make_error("no parameter group {}", group);
  return part.state.groups[group].hypers[(*idx)[0]];
}

std::vector<std::string> Optimizer::state_buffers() const {
  std::vector<std::string> out;
  for (const auto& b : impl_->parts[0].plan.buffers)
    if (b.role == ir::BufferRole::state) out.push_back(b.name);
  return out;
}

// Parameter `param`'s state buffer `name`: the plan, the buffer and the tensor's elements.
Expected<Optimizer::Impl::StateRef> Optimizer::Impl::state_ref(size_t param,
                                                               std::string_view name) const {
  if (param >= where.size())
    return make_error("no parameter {} (this optimizer has {})", param, where.size());
  const Part& part = parts[where[param].first];
  auto b = state_buffer(part, name);
  if (!b) return b.error();
  return StateRef{&part.plan, *b, &part.state.tensors[where[param].second]};
}

Expected<DType> Optimizer::state_storage(size_t param, std::string_view name) const {
  auto r = impl_->state_ref(param, name);
  if (!r) return r.error();
  return runtime::stored_type(*r->plan, r->buffer, *r->tensor);
}

Expected<int64_t> Optimizer::state_elements(size_t param, std::string_view name) const {
  auto r = impl_->state_ref(param, name);
  if (!r) return r.error();
  return static_cast<int64_t>(runtime::buffer_bytes(*r->plan, r->buffer, *r->tensor) /
                              size_bytes(runtime::stored_type(*r->plan, r->buffer, *r->tensor)));
}

std::vector<std::string> Optimizer::scalar_states() const {
  std::vector<std::string> out;
  for (const auto& st : impl_->parts[0].plan.program.states) out.push_back(st.name);
  return out;
}

namespace {

Expected<uint32_t> scalar_index(const ir::Program& p, std::string_view name) {
  std::string names;
  for (uint32_t k = 0; k < p.states.size(); ++k) {
    if (p.states[k].name == name) return k;
    names += (names.empty() ? "" : ", ") + p.states[k].name;
  }
  return make_error("no scalar state '{}' (this optimizer has: {})", name,
                    names.empty() ? "none" : names);
}

}  // namespace

Status Optimizer::Impl::settle() {
  for (Part& part : parts)
    if (part.executor) OPTJIT_TRY(part.executor->settle(part.state));
  if (last_queued) {  // queued steps run on one part's device step
    last_skipped = parts[0].executor->last_skipped();
    last_queued = false;
  }
  return Status::Ok();
}

Expected<double> Optimizer::scalar_state(std::string_view name, uint32_t group) const {
  OPTJIT_TRY(impl_->settle());  // queued steps' scalar states are on the device
  const Part& part = impl_->parts[0];
  auto k = scalar_index(part.plan.program, name);
  if (!k) return k.error();
  if (group >= part.state.groups.size()) return make_error("no parameter group {}", group);
  return part.state.groups[group].states[*k];
}

Status Optimizer::set_scalar_state(std::string_view name, double value,
                                   std::optional<uint32_t> group) {
  OPTJIT_TRY(impl_->settle());  // the others are written back with this one
  for (Part& part : impl_->parts) {
    auto k = scalar_index(part.plan.program, name);
    if (!k) return k.error();
    if (group && *group >= part.state.groups.size())
      return make_error("no parameter group {}", *group);
    for (uint32_t g = 0; g < part.state.groups.size(); ++g)
      if (!group || g == *group) part.state.groups[g].states[*k] = value;
  }
  return Status::Ok();  // a device-resident step sees the change at the next step
}

Status Optimizer::set_step_count(int64_t step) {
  if (step < 0) return make_error("a step count cannot be negative ({})", step);
  // The next step's number (step + 1) is an i64 value of the scalar program, exact in a double.
  if (static_cast<double>(step) >= kI64Limit)
    return make_error("a step count is a whole number from 0 to 2^53, not {}", step);
  OPTJIT_TRY(impl_->settle());
  for (Part& part : impl_->parts) part.state.step = step;
  return Status::Ok();
}

Status Optimizer::initialize_state() {
  Impl& m = *impl_;
  OPTJIT_TRY(m.settle());
  for (Part& part : m.parts) {
    std::vector<std::pair<size_t, size_t>> borrowed;  // device memory bound with bind_state
    OPTJIT_TRY(m.to_host(part, &borrowed, /*materialize=*/false));
    for (auto& g : part.state.groups) runtime::initial_scalar_states(part.plan.program, g);
    part.state.init_groups = part.state.groups;  // what pending buffers will start from
    for (auto& ts : part.state.tensors)
      for (size_t b = 0; b < part.plan.buffers.size(); ++b)
        if (part.plan.buffers[b].role == ir::BufferRole::state &&
            !runtime::pending(part.plan, b, ts))
          runtime::initial_state(part.plan, b, ts, part.state.groups[ts.group], ts.data(b));
    OPTJIT_TRY(m.from_host(part, borrowed, true));
    part.state.step = 0;
    if (part.executor) part.executor->state_changed();
  }
  return Status::Ok();
}

size_t Optimizer::groups() const { return impl_->parts[0].state.groups.size(); }

std::vector<std::string> Optimizer::hyperparameters() const {
  std::vector<std::string> out;
  for (const auto& h : impl_->parts[0].plan.program.hypers) out.push_back(h.name);
  return out;
}

bool Optimizer::reduces_over_all_tensors() const {
  const plan::Plan& plan = impl_->parts[0].plan;
  for (const auto& pass : plan.passes)
    for (ir::ValueId r : pass.reductions)
      if (static_cast<ir::Scope>(plan.program.at(r).attr) == ir::Scope::all) return true;
  return false;
}

const plan::Plan& Optimizer::plan() const { return impl_->parts[0].plan; }
size_t Optimizer::programs() const { return impl_->parts.size(); }
Backend Optimizer::backend() const { return impl_->backend; }
std::shared_ptr<runtime::Device> Optimizer::device() const { return impl_->device; }
int64_t Optimizer::step_count() const {
  // After queued steps that could be skipped, the count is the device's. A failure to read it
  // back returns the host's and comes back from the next call that reports errors.
  if (impl_->count_stale()) (void)impl_->settle();
  return impl_->parts[0].state.step;
}

Status Optimizer::set_hyper_source(std::string_view name, DeviceMemory value) {
  Impl& m = *impl_;
  if (!m.device || m.device->description().kind == "cpu")
    return make_error(
        "set_hyper_source: hyperparameters in device memory need the cuda or "
        "opencl backend, not {}",
        to_string(m.backend));
  for (Part& part : m.parts) {
    auto idx = runtime::match_hyper(part.plan.program, name);
    if (!idx) return idx.error();
    if (idx->size() != 1)
      return make_error("set_hyper_source: '{}' has {} elements; name one ('{}.0')", name,
                        idx->size(), name);
    auto sources = part.executor->hyper_sources();
    std::erase_if(sources, [&](const auto& s) { return s.first == (*idx)[0]; });
    if (value) sources.push_back({(*idx)[0], value});
    part.executor->set_hyper_sources(std::move(sources));
  }
  return Status::Ok();
}

Expected<bool> Optimizer::last_step_skipped() {
  OPTJIT_TRY(impl_->settle());
  return impl_->last_skipped;
}

namespace {

// The one executor whose device step keeps its control block on the device, for `what`.
Expected<const runtime::Executor*> device_step_executor(const std::vector<Part>& parts,
                                                        runtime::StepMode mode,
                                                        std::string_view what) {
  if (parts.size() != 1 || !parts[0].executor || mode == runtime::StepMode::host)
    return make_error("{}: only a device step (cuda or opencl, one dtype) keeps it on the device",
                      what);
  return parts[0].executor.get();
}

}  // namespace

Expected<DeviceMemory> Optimizer::skip_flag() const {
  auto e = device_step_executor(impl_->parts, impl_->mode, "skip_flag");
  if (!e) return e.error();
  DeviceMemory f = (*e)->skip_flag();
  if (!f) return make_error("skip_flag: no step has run yet");
  return f;
}

Expected<DeviceMemory> Optimizer::scalar_state_memory(std::string_view name, uint32_t group) const {
  auto e = device_step_executor(impl_->parts, impl_->mode, "scalar_state_memory");
  if (!e) return e.error();
  const Part& part = impl_->parts[0];
  auto k = scalar_index(part.plan.program, name);
  if (!k) return k.error();
  if (group >= part.state.groups.size()) return make_error("no parameter group {}", group);
  DeviceMemory f = (*e)->scalar_state_memory(group, *k);
  if (!f) return make_error("scalar_state_memory: no step has run yet");
  return f;
}
size_t Optimizer::group_of(size_t param) const { return impl_->tensor(param).group; }
const codegen::CpuLaunch& Optimizer::launch() const { return impl_->cpu_launch; }
const codegen::GpuLaunch& Optimizer::gpu_launch() const { return impl_->gpu_launch; }
bool Optimizer::launch_from_tuning() const { return impl_->tuned; }
std::string_view Optimizer::step_mode() const { return runtime::to_string(impl_->mode); }
const std::vector<std::string>& Optimizer::warnings() const {
  // The cache warns after it is opened too (a kernel it rejected or could not store).
  Impl& m = *impl_;
  if (m.cache)
    for (const auto& w = m.cache->warnings(); m.cache_warnings < w.size(); ++m.cache_warnings)
      m.warnings.push_back(w[m.cache_warnings]);
  // So do the executors, once, when unaligned memory made one give up its vectors.
  for (Part& p : m.parts)
    if (p.executor && !p.fallback_told && !p.executor->vector_fallback().empty()) {
      m.warnings.push_back(p.executor->vector_fallback());
      p.fallback_told = true;
    }
  return m.warnings;
}

std::string Optimizer::device_name() const {
  return impl_->device ? impl_->device->description().name : "the reference interpreter";
}

double Optimizer::compile_seconds() const {
  double s = 0;
  for (const Part& p : impl_->parts)
    if (p.executor) s += p.executor->compile_seconds();
  return s;
}

std::vector<std::vector<double>> Optimizer::version_elements(size_t program) const {
  if (program >= impl_->parts.size() || !impl_->parts[program].executor) return {};
  return impl_->parts[program].executor->version_elements();
}

bool Optimizer::kernels_from_cache() const {
  bool all = !impl_->parts.empty() && impl_->device;
  for (const Part& p : impl_->parts) all &= p.executor && p.executor->kernels_from_cache();
  return all;
}

}  // namespace optjit
