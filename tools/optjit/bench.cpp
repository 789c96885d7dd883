// optjit bench: time per step, effective bandwidth against a memory roofline measured by the
// same binary in the same run, and an unfused baseline. A benchmark, not a test.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "api/optimizer.h"
#include "autotune/cpu_tuner.h"
#include "autotune/gpu_tuner.h"
#include "cache/kernel_cache.h"
#include "ir/builtins.h"
#include "ir/compile.h"
#include "ir/pipeline_text.h"
#include "runtime/device.h"
#include "support/input_file.h"
#include "tools/optjit/commands.h"

namespace optjit::cli {

namespace {

using Shapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;

Shapes gpt2_small() {
  const int64_t d = 768, vocab = 50257, ctx = 1024;
  Shapes s = {{"wte.weight", {vocab, d}}, {"wpe.weight", {ctx, d}}};
  for (int l = 0; l < 12; ++l) {
    auto n = [l](const char* x) { return fmt::format("h.{}.{}", l, x); };
    s.push_back({n("ln_1.weight"), {d}});
    s.push_back({n("ln_1.bias"), {d}});
    s.push_back({n("attn.c_attn.weight"), {d, 3 * d}});
    s.push_back({n("attn.c_attn.bias"), {3 * d}});
    s.push_back({n("attn.c_proj.weight"), {d, d}});
    s.push_back({n("attn.c_proj.bias"), {d}});
    s.push_back({n("ln_2.weight"), {d}});
    s.push_back({n("ln_2.bias"), {d}});
    s.push_back({n("mlp.c_fc.weight"), {d, 4 * d}});
    s.push_back({n("mlp.c_fc.bias"), {4 * d}});
    s.push_back({n("mlp.c_proj.weight"), {4 * d, d}});
    s.push_back({n("mlp.c_proj.bias"), {d}});
  }
  s.push_back({"ln_f.weight", {d}});
  s.push_back({"ln_f.bias", {d}});
  return s;
}

Shapes resnet50() {
  Shapes s;
  auto conv = [&](const std::string& n, int64_t out, int64_t in, int64_t k) {
    s.push_back({n + ".weight", {out, in, k, k}});
  };
  auto bn = [&](const std::string& n, int64_t c) {
    s.push_back({n + ".weight", {c}});
    s.push_back({n + ".bias", {c}});
  };
  conv("conv1", 64, 3, 7);
  bn("bn1", 64);
  int64_t in = 64;
  const int blocks[] = {3, 4, 6, 3};
  for (int layer = 0; layer < 4; ++layer) {
    int64_t w = 64LL << layer;
    for (int b = 0; b < blocks[layer]; ++b) {
      std::string p = fmt::format("layer{}.{}", layer + 1, b);
      conv(p + ".conv1", w, in, 1);
      bn(p + ".bn1", w);
      conv(p + ".conv2", w, w, 3);
      bn(p + ".bn2", w);
      conv(p + ".conv3", 4 * w, w, 1);
      bn(p + ".bn3", 4 * w);
      if (b == 0) {
        conv(p + ".downsample.0", 4 * w, in, 1);
        bn(p + ".downsample.1", 4 * w);
      }
      in = 4 * w;
    }
  }
  s.push_back({"fc.weight", {1000, 2048}});
  s.push_back({"fc.bias", {1000}});
  return s;
}

Expected<Shapes> preset_shapes(const BenchOptions& o);

// The shapes to bench, with their sizes checked (no overflow, optjit's element limit).
Expected<Shapes> shapes_for(const BenchOptions& o) {
  if (o.numel < 0) return make_error("--numel must be positive");
  auto s = preset_shapes(o);
  if (!s) return s;
  int64_t total = 0;
  for (const auto& [name, shape] : *s) {
    auto n =
        element_count(shape, o.numel > 0 ? "--numel" : fmt::format("tensor '{}'", name), total);
    if (!n) return n.error();
    total += *n;
  }
  return s;
}

Expected<Shapes> preset_shapes(const BenchOptions& o) {
  if (o.numel > 0) return Shapes{{"weight", {o.numel}}};
  if (o.shapes == "gpt2-small") return gpt2_small();
  if (o.shapes == "resnet50") return resnet50();
  if (o.shapes == "many-small") {
    Shapes s;
    for (int i = 0; i < 10000; ++i) s.push_back({fmt::format("p{}", i), {1000}});
    return s;
  }
  // A JSON file: {"name": [dims], ...}
  std::error_code ec;
  if (!std::filesystem::exists(o.shapes, ec))
    return make_error(
        "--shapes '{}' is not a preset (gpt2-small, resnet50, many-small) or a readable file",
        o.shapes);
  auto text = support::read_file(o.shapes, 64 << 20);
  if (!text) return make_error("--shapes {}", text.error().message);
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return make_error("{}: expected a JSON object of name: [dims]", o.shapes);
  Shapes s;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it.value().is_array())
      return make_error("{}: '{}' is not a list of dims", o.shapes, it.key());
    std::vector<int64_t> dims;
    for (const auto& d : it.value()) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        return make_error("{}: '{}' has a bad dim", o.shapes, it.key());
      dims.push_back(d.get<int64_t>());
    }
    s.push_back({it.key(), dims});
  }
  if (s.empty()) return make_error("{}: no tensors", o.shapes);
  return s;
}

// Parameters and gradients of the given shapes with small deterministic values, from a
// counter-based hash of (buffer, element), so the fill runs in parallel (a billion parameters
// would take minutes on one thread).
void fill(std::vector<runtime::HostTensor>& out, const Shapes& shapes, DType t, double scale,
          uint64_t stream) {
  auto value = [](uint64_t key) {
    key += 0x9e3779b97f4a7c15ull;  // splitmix64
    key = (key ^ (key >> 30)) * 0xbf58476d1ce4e5b9ull;
    key = (key ^ (key >> 27)) * 0x94d049bb133111ebull;
    key ^= key >> 31;
    return static_cast<double>(key >> 11) * 0x1.0p-53 - 0.5;
  };
  uint64_t offset = stream << 56;
  for (const auto& [name, shape] : shapes) {
    out.push_back({name, t, shape, {}});
    runtime::HostTensor& h = out.back();
    const int64_t n = h.numel();
    h.data.resize(static_cast<size_t>(n) * size_bytes(t));
    uint8_t* data = h.data.data();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i)
      runtime::store_element(data, t, i, scale * value(offset + static_cast<uint64_t>(i)));
    offset += static_cast<uint64_t>(n);
  }
}

// One optimizer over the given tensors, through the public API as a framework uses it: on the
// CPU, parameters and gradients in host memory; on a GPU, both in device memory allocated on
// `gpu` and used in place (nothing is copied to or from the host in a step).
struct Runner {
  std::vector<runtime::HostTensor> params, grads;
  std::vector<runtime::DeviceAllocation> device_params, device_grads;
  std::vector<const void*> host_grads;
  std::vector<DeviceMemory> dev_grads;
  std::vector<std::vector<uint8_t>> grad_out;  // unfused stages: the materialized gradient
  std::unique_ptr<Optimizer> opt;

  std::string device_name() const { return opt->device_name(); }
  double compile_seconds() const { return opt->compile_seconds(); }
  int threads() const {
    return opt->launch().threads > 0 ? opt->launch().threads
                                     : opt->device()->description().compute_units;
  }
  /// One step; a failed one (a launch error, a sticky device fault) ends the benchmark rather
  /// than being timed.
  Status step() {
    auto r = dev_grads.empty() ? opt->step(host_grads) : opt->step_device(dev_grads);
    if (!r) return r.error();
    return Status::Ok();
  }
  /// GPU devices: seconds per device-to-device copy of `bytes` (their bandwidth yardstick).
  Expected<double> copy_seconds(size_t bytes, int repetitions) {
    return opt->device()->copy_seconds(bytes, repetitions);
  }
  /// Seconds per step, until the device has run them: a device step on the caller's queue
  /// returns once queued, so the queue is drained before the clock starts and before it stops.
  Expected<double> step_seconds(int steps) {
    const std::shared_ptr<runtime::Device> dev = opt->device();
    if (dev) OPTJIT_TRY(dev->finish());
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) OPTJIT_TRY(step());
    if (dev) OPTJIT_TRY(dev->finish());
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
  }
};

// `options` names the backend, launch and step mode; on a GPU `gpu` is the device (its queue is
// shared, so the optimizer can use memory allocated on it).
Expected<std::unique_ptr<Runner>> make_runner(plan::Plan plan, const Shapes& shapes, DType t,
                                              OptimizerOptions options,
                                              const std::shared_ptr<runtime::Device>& gpu) {
  auto r = std::make_unique<Runner>();
  const DType gt = plan.buffers[plan.program.grad_buffer()].storage;
  fill(r->params, shapes, t, 0.1, 0);
  fill(r->grads, shapes, gt, 1e-3, 1);
  std::vector<Param> ps;
  for (auto& p : r->params) ps.push_back({p.name, p.data.data(), t, p.shape});
  if (gpu) {
    options.queue = gpu->queue();
    // Pointer devices (CUDA): one allocation per tensor, as PyTorch has them. Arena devices
    // (OpenCL): one buffer per role holding every tensor, which kernels use in place (separate
    // buffers would be copied in and out of the executor's arenas every step).
    const bool flat = gpu->description().addressing == runtime::Addressing::arenas;
    for (auto* list : {&r->device_params, &r->device_grads}) {
      const auto& hosts = list == &r->device_params ? r->params : r->grads;
      std::vector<DeviceMemory> where;
      if (flat) {
        size_t total = 0;
        std::vector<size_t> at;
        for (const auto& h : hosts) at.push_back(total), total += (h.data.size() + 127) / 128 * 128;
        auto a = runtime::allocate(*gpu, total, "allocating benchmark tensors");
        if (!a) return a.error();
        for (size_t i = 0; i < hosts.size(); ++i) where.push_back(a->memory().at(at[i]));
        list->push_back(std::move(*a));
      } else {
        for (const auto& h : hosts) {
          auto a = runtime::allocate(*gpu, h.data.size(), "allocating benchmark tensors");
          if (!a) return a.error();
          where.push_back(a->memory());
          list->push_back(std::move(*a));
        }
      }
      for (size_t i = 0; i < hosts.size(); ++i) {
        OPTJIT_TRY(gpu->write(where[i], hosts[i].data.data(), hosts[i].data.size()));
        if (list == &r->device_params) {
          ps[i].data = nullptr;
          ps[i].device = where[i];
        } else {
          r->dev_grads.push_back(where[i]);
        }
      }
    }
    r->params.clear();  // the device holds them now
    r->grads.clear();
  } else {
    for (auto& g : r->grads) r->host_grads.push_back(g.data.data());
  }
  auto o = Optimizer::create(std::move(plan), std::move(ps), std::move(options));
  if (!o) return o.error();
  r->opt = std::move(*o);
  print_warnings(*r->opt);
  return r;
}

// A streaming loop with a pass's exact buffers: loads every buffer the pass reads, stores
// their sum to every buffer it writes. Same bytes, same runtime, same threads and chunks.
// A quantized state (1 byte of code and 4/256 of scale per element) and a scratch buffer of
// conditions (1 byte) stream as 16-bit buffers, and `scale` (the pass's bytes over the loop's)
// turns the loop's time into the time of the pass's own bytes at the same bandwidth.
struct Roofline {
  plan::Plan plan;
  double scale = 1;
};
template <class P>  // plan::Pass or plan::PassVersion: what it reads and writes
Expected<Roofline> roofline_plan(const plan::Plan& plan, const P& pass) {
  ir::Builder b;
  DType pt = plan.buffers[plan.program.param_buffer()].storage;
  DType ct = compute_type(pt);
  std::map<uint32_t, uint32_t> remap;
  remap[plan.program.param_buffer()] = b.add_buffer({"param", ir::BufferRole::param, pt, {}});
  remap[plan.program.grad_buffer()] = b.add_buffer(
      {"grad", ir::BufferRole::grad, plan.buffers[plan.program.grad_buffer()].storage, {}});
  auto buffer = [&](uint32_t k) {
    if (!remap.count(k)) {
      const ir::BufferDecl& d = plan.buffers[k];
      // Codes, and a scratch buffer's carried conditions (b1, a byte), stream as 16-bit values.
      const bool bytes = d.quant != ir::Quant::none || d.storage == DType::b1;
      remap[k] = b.add_buffer({d.name, ir::BufferRole::state, bytes ? DType::f16 : d.storage, {}});
    }
    return remap[k];
  };
  ir::ValueId sum = b.constant(0.0, ct);
  for (uint32_t r : pass.reads)
    if (!plan.buffers[r].per_block)
      sum = b.emit(ir::Op::Add, ct, {sum, b.emit(ir::Op::Load, ct, {}, buffer(r))});
  for (uint32_t w : pass.writes)
    if (!plan.buffers[w].per_block) b.emit(ir::Op::Store, DType::b1, {sum}, buffer(w));
  if (pass.writes.empty()) {
    // A read-only pass (a norm): reduce what it reads, and keep the result as a scalar state so
    // it is not dead. (Not a skip_if: on a device a step that can skip waits for each queued
    // step's verdict, which the fused step it bounds need not.)
    ir::ValueId total = b.emit(ir::Op::Sum, DType::f64, {sum}, 0);
    b.emit(ir::Op::SStore, DType::b1, {total}, b.add_state({"total", DType::f64, {}}));
  }
  auto rp = plan::make_plan(std::move(b).finish());
  if (!rp) return rp.error();
  const double loop_bytes = rp->bytes_per_param();
  return Roofline{std::move(*rp), (pass.bytes_read + pass.bytes_written) / loop_bytes};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int bench(const BenchOptions& o) {
  if (!runtime::find_device_kind(o.backend))
    return fail(
        fmt::format("bench runs on --backend {}, not {}", runtime::device_kind_names(), o.backend));
  if (o.backend == "cpu" && !o.launch.empty())
    return fail(
        "--launch is for --backend cuda and opencl; the cpu backend takes --threads and "
        "--chunk");
  if (o.steps < 1 || o.reps < 1) return fail("bench needs --steps and --reps of at least 1");
  auto step = parse_step(o.step, o.backend);
  if (!step) return fail(step.error().message);
  auto text = read_pipeline_text(o.pipeline);
  if (!text) return fail(text.error().message);
  auto dt = parse_dtype(o.dtype);
  if (!dt || !is_float(*dt)) return fail(fmt::format("'{}' is not a float type", o.dtype));
  auto shapes = shapes_for(o);
  if (!shapes) return fail(shapes.error().message);
  int64_t numel = 0;
  for (const auto& [n, s] : *shapes) {
    int64_t k = 1;
    for (int64_t d : s) k *= d;
    numel += k;
  }
  auto pipeline = dsl::parse_pipeline(*text);
  if (!pipeline) return fail("pipeline: " + pipeline.error().message);
  auto program = dsl::lower(*pipeline, {*dt, *dt, *dt});
  if (!program) return fail("pipeline: " + program.error().message);
  auto plan = plan::make_plan(*program);
  if (!plan) return fail(plan.error().message);

  // Every runner gets these options; a GPU's runners share one device and its queue.
  OptimizerOptions options;
  std::shared_ptr<runtime::Device> gpu;
  options.backend = Backend(o.backend);
  options.cpu = {o.threads, o.chunk, 0};
  if (o.backend != "cpu") {
    auto d = runtime::open_device({.kind = o.backend});
    if (!d) return fail(d.error().message);
    gpu = std::move(*d);
    // GPU launch parameters: as given (over the device's defaults), the cache's tuning
    // decision ("tuned"), or, with none given, the defaults for this plan on this device.
    codegen::GpuLaunch base = o.launch.empty() ? autotune::default_launch(*plan, gpu->description())
                                               : gpu->description().default_launch;
    base.chunk_elements = o.chunk;
    if (o.launch != "tuned") {
      auto l = codegen::GpuLaunch::from_text(o.launch, base);
      if (!l) return fail("--launch: " + l.error().message);
      options.gpu_launch = *l;
    }
    options.device_step = *step != StepMode::host;
    options.cuda_graph = *step == StepMode::graph;
  }

  auto fused = make_runner(*plan, *shapes, *dt, options, gpu);
  if (!fused) return fail(fused.error().message);
  if (o.launch == "tuned") {
    if (!(*fused)->opt->launch_from_tuning())
      return fail(
          fmt::format("--launch tuned: the kernel cache has no tuning decision for this "
                      "pipeline on {} at this size (run optjit tune first)",
                      o.backend));
    options.gpu_launch = (*fused)->opt->gpu_launch();  // the same for every runner below
  }
  const codegen::GpuLaunch launch = (*fused)->opt->gpu_launch();
  const double compile_s = (*fused)->compile_seconds();

  // Roofline runners: one per pass over its buffers, and for a pass with versions one per
  // version over that version's, weighted by the elements each version stepped.
  struct Roof {
    size_t pass;
    int version;  // -1: the whole pass
    std::unique_ptr<Runner> runner;
    double scale;
  };
  std::vector<Roof> roof;
  auto add_roof = [&](size_t k, int v, Expected<Roofline> rp) -> Status {
    if (!rp) return rp.error();
    const double scale = rp->scale;
    auto r = make_runner(std::move(rp->plan), *shapes, *dt, options, gpu);
    if (!r) return r.error();
    roof.push_back({k, v, std::move(*r), scale});
    return Status::Ok();
  };
  for (size_t k = 0; k < plan->passes.size(); ++k) {
    const plan::Pass& pass = plan->passes[k];
    if (Status st = add_roof(k, -1, roofline_plan(*plan, pass)); !st)
      return fail(st.error().message);
    for (size_t v = 0; v < pass.versions.size(); ++v)
      if (Status st = add_roof(k, static_cast<int>(v), roofline_plan(*plan, pass.versions[v])); !st)
        return fail(st.error().message);
  }

  // Unfused: each transform of the chain as its own optimizer; a gradient transform writes
  // its result to memory for the next one, as separate foreach sweeps do.
  std::vector<std::unique_ptr<Runner>> stages;
  double unfused_bytes = 0;
  // The unfused stages chain host buffers, so the baseline runs on the CPU backend only.
  if (!o.no_unfused && pipeline->size() > 1 && o.backend == "cpu") {
    auto keep = std::make_shared<dsl::Def>();
    keep->name = "materialize_grad";
    keep->apply = [](dsl::Ctx& c) {
      c.state("grad_out");
      c.set_state("grad_out", c.grad());
    };
    auto keep_bound = dsl::bind(keep, {});
    for (size_t i = 0; i < pipeline->size(); ++i) {
      dsl::Pipeline stage = {(*pipeline)[i]};
      if (i + 1 < pipeline->size()) stage.push_back(*keep_bound);
      auto sp = dsl::lower(stage, {*dt, *dt, *dt});
      if (!sp) return fail(sp.error().message);
      auto spl = plan::make_plan(*sp);
      if (!spl) return fail(spl.error().message);
      unfused_bytes += spl->bytes_per_param();
      // Stage i steps stage 0's parameters with stage i-1's materialized gradient.
      auto r = std::make_unique<Runner>();
      std::vector<Param> ps;
      for (size_t t = 0; t < shapes->size(); ++t) {
        const auto& first = i == 0 ? nullptr : stages[0].get();
        if (i == 0) fill(r->params, Shapes{(*shapes)[t]}, *dt, 0.1, 0);
        void* data = first ? first->params[t].data.data() : r->params[t].data.data();
        ps.push_back({(*shapes)[t].first, data, *dt, (*shapes)[t].second});
      }
      if (i == 0) {
        fill(r->grads, *shapes, *dt, 1e-3, 1);
        for (auto& g : r->grads) r->host_grads.push_back(g.data.data());
      } else {
        for (auto& g : stages[i - 1]->grad_out) r->host_grads.push_back(g.data());
      }
      auto opt = Optimizer::create(std::move(*spl), std::move(ps), options);
      if (!opt) return fail(opt.error().message);
      r->opt = std::move(*opt);
      if (i + 1 < pipeline->size())
        for (size_t t = 0; t < shapes->size(); ++t) {
          int64_t n = 1;
          for (int64_t d : (*shapes)[t].second) n *= d;
          r->grad_out.emplace_back(static_cast<size_t>(n) * size_bytes(*dt));
          if (Status st = r->opt->bind_state(t, "grad_out", r->grad_out.back().data()); !st)
            return fail(st.error().message);
        }
      stages.push_back(std::move(r));
    }
  }
  auto unfused_step = [&](int steps) -> Expected<double> {
    auto t1 = std::chrono::steady_clock::now();
    for (int k = 0; k < steps; ++k)
      for (auto& s : stages) OPTJIT_TRY(s->step());
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count() / steps;
  };

  // Per-step overhead: the same number of tensors with one element each.
  Shapes tiny;
  for (const auto& [n, s] : *shapes) tiny.push_back({n, {1}});
  auto overhead_runner = make_runner(*plan, tiny, *dt, options, gpu);
  if (!overhead_runner) return fail(overhead_runner.error().message);
  // On a device, the same with the scalar program in the other place, so the two overheads are
  // a ratio from one run.
  const StepMode other_step = *step == StepMode::host ? StepMode::device : StepMode::host;
  std::unique_ptr<Runner> other_overhead;
  const runtime::DeviceKind* kind = runtime::find_device_kind(o.backend);
  if (o.backend != "cpu" && kind && kind->device_step) {
    OptimizerOptions other = options;
    other.device_step = other_step != StepMode::host;
    other.cuda_graph = false;
    auto r = make_runner(*plan, tiny, *dt, other, gpu);
    if (!r) return fail(r.error().message);
    other_overhead = std::move(*r);
  }

  // The same total size as one tensor, to show what many tensors cost.
  std::unique_ptr<Runner> single;
  if (shapes->size() > 1) {
    auto r = make_runner(*plan, Shapes{{"all", {numel}}}, *dt, options, gpu);
    if (!r) return fail(r.error().message);
    single = std::move(*r);
  }

  // CPU: the same step over a tensor small enough to stay in cache (kInCache parameters a thread,
  // two chunks each), so what the step costs when memory is not the limit is a ratio from this
  // run: near 1, the arithmetic bounds the step, not the roofline. Only for a step larger than
  // that tensor: a smaller one is in cache itself (and its tensors may be too small to quantize,
  // where the one tensor is not).
  constexpr int64_t kInCache = 65536;
  std::unique_ptr<Runner> cached;
  const int64_t cached_numel = kInCache * (*fused)->threads();
  if (o.backend == "cpu" && numel > cached_numel) {
    OptimizerOptions c = options;
    c.cpu.chunk_elements = kInCache / 2;
    auto r = make_runner(*plan, Shapes{{"cached", {cached_numel}}}, *dt, c, gpu);
    if (!r) return fail(r.error().message);
    cached = std::move(*r);
  }

  // Warm up everything, then interleave repetitions so drift on a shared machine hits all alike.
  // Every timed call is checked: a failing step is an error, not a fast time.
  std::vector<double> t_fused, t_roof, t_unfused, t_overhead, t_other_overhead, t_single, t_copy,
      t_cached;
  std::vector<double> moved;      // bytes the fused step moved per step, each repetition
  bool versions_unknown = false;  // the device chose the versions: whole passes are counted
  const double plan_bytes =
      static_cast<double>(plan->bytes_per_param()) * static_cast<double>(numel);
  // A GPU's yardstick is its own copy bandwidth: copying half the bytes moves them all.
  const bool device_copy = o.backend != "cpu";
  auto measure = [&]() -> Status {
    auto timed = [](Expected<double> seconds, std::vector<double>* into) -> Status {
      if (!seconds) return seconds.error();
      if (into) into->push_back(*seconds);
      return Status::Ok();
    };
    OPTJIT_TRY(timed((*fused)->step_seconds(2), nullptr));
    for (auto& r : roof) OPTJIT_TRY(timed(r.runner->step_seconds(2), nullptr));
    if (!stages.empty()) OPTJIT_TRY(timed(unfused_step(2), nullptr));
    OPTJIT_TRY(timed((*overhead_runner)->step_seconds(20), nullptr));
    if (other_overhead) OPTJIT_TRY(timed(other_overhead->step_seconds(20), nullptr));
    if (single) OPTJIT_TRY(timed(single->step_seconds(2), nullptr));
    // As many steps of the cached runner as move about the fused steps' elements (at least 20).
    const int cached_steps =
        cached ? static_cast<int>(std::clamp<int64_t>(numel * o.steps / cached_numel, 20, 100000))
               : 0;
    if (cached) OPTJIT_TRY(timed(cached->step_seconds(cached_steps), nullptr));
    for (int rep = 0; rep < o.reps; ++rep) {
      const auto before = (*fused)->opt->version_elements();
      OPTJIT_TRY(timed((*fused)->step_seconds(o.steps), &t_fused));
      // The elements each version of each pass stepped in these steps (Pass::versions), where
      // the host step counted them; else the whole passes.
      auto stepped = (*fused)->opt->version_elements();
      const bool known = stepped.size() == plan->passes.size();
      versions_unknown = versions_unknown || !known;
      for (size_t k = 0; known && k < stepped.size(); ++k)
        for (size_t i = 0; i < stepped[k].size(); ++i)
          if (k < before.size() && i < before[k].size()) stepped[k][i] -= before[k][i];
      auto share = [&](size_t k, int v) {
        if (!known || plan->passes[k].versions.empty()) return v < 0 ? 1.0 : 0.0;
        double all = 0;
        for (double e : stepped[k]) all += e;
        return v < 0 || all == 0 ? 0.0 : stepped[k][static_cast<size_t>(v)] / all;
      };
      double m = 0;  // bytes moved per step
      for (size_t k = 0; k < plan->passes.size(); ++k) {
        const plan::Pass& pass = plan->passes[k];
        m += share(k, -1) * (pass.bytes_read + pass.bytes_written);
        for (size_t v = 0; v < pass.versions.size(); ++v)
          m += share(k, static_cast<int>(v)) *
               (pass.versions[v].bytes_read + pass.versions[v].bytes_written);
      }
      moved.push_back(m * static_cast<double>(numel));
      if (device_copy)
        OPTJIT_TRY(
            timed((*fused)->copy_seconds(static_cast<size_t>(plan_bytes / 2), o.steps), &t_copy));
      double r = 0;
      for (auto& rr : roof) {
        const double w = share(rr.pass, rr.version);
        if (w == 0) continue;  // a version no timed step ran
        std::vector<double> t;
        OPTJIT_TRY(timed(rr.runner->step_seconds(o.steps), &t));
        r += w * t[0] * rr.scale;
      }
      t_roof.push_back(r);
      if (!stages.empty()) OPTJIT_TRY(timed(unfused_step(o.steps), &t_unfused));
      OPTJIT_TRY(timed((*overhead_runner)->step_seconds(std::max(o.steps, 50)), &t_overhead));
      if (other_overhead)
        OPTJIT_TRY(timed(other_overhead->step_seconds(std::max(o.steps, 50)), &t_other_overhead));
      if (single) OPTJIT_TRY(timed(single->step_seconds(o.steps), &t_single));
      if (cached) OPTJIT_TRY(timed(cached->step_seconds(cached_steps), &t_cached));
    }
    return Status::Ok();
  };
  if (Status st = measure(); !st) return fail("bench: a step failed: " + st.error().message);
  // A plan with versions (plan::Pass::versions) moves fewer bytes on some steps than its
  // passes' full lists: the bytes are what the timed steps moved, and the roofline the
  // streaming loops over each version's buffers, weighted alike.
  double mean_moved = 0;
  for (double m : moved) mean_moved += m / static_cast<double>(moved.size());
  const bool versions_moved = std::abs(mean_moved - plan_bytes) > 1e-9 * plan_bytes;
  const double bytes = versions_moved ? mean_moved : plan_bytes;
  const double fused_s = median(t_fused), roof_s = median(t_roof), overhead_s = median(t_overhead);
  const double gbs = bytes / fused_s / 1e9, roof_gbs = bytes / roof_s / 1e9;
  nlohmann::json j;
  j["pipeline"] = *text;
  j["shapes"] = o.numel > 0 ? fmt::format("numel={}", o.numel) : o.shapes;
  j["tensors"] = shapes->size();
  j["parameters"] = numel;
  j["dtype"] = o.dtype;
  j["threads"] = o.backend == "cpu" ? (*fused)->threads() : 0;
  j["backend"] = o.backend;
  j["chunk_elements"] =
      o.backend == "cpu" ? (*fused)->opt->launch().chunk_elements : launch.chunk_elements;
  if (o.backend != "cpu") {
    j["launch"] = launch.to_string();
    j["step"] = *step == StepMode::host ? "host" : *step == StepMode::device ? "device" : "graph";
    // How the kernels divide and take square roots (WebGPU: probed on the adapter).
    j["f32_division"] = (*fused)->opt->device()->description().division;
  }
  j["passes"] = plan->passes.size();
  j["bytes_per_param"] = plan->bytes_per_param();
  j["moved_bytes_per_param"] = bytes / static_cast<double>(numel);
  bool has_versions = false;
  for (const auto& pass : plan->passes) has_versions = has_versions || !pass.versions.empty();
  // Pass versions the device step chose: the host saw none of it, so bytes and roofline are the
  // whole passes', an upper bound on what moved.
  const bool bytes_bound = has_versions && versions_unknown;
  j["moved_bytes_known"] = !bytes_bound;
  j["compile_seconds"] = compile_s;
  j["step_seconds"] = fused_s;
  j["step_seconds_min"] = *std::min_element(t_fused.begin(), t_fused.end());
  j["effective_gbs"] = gbs;
  j["roofline_step_seconds"] = roof_s;
  j["roofline_gbs"] = roof_gbs;
  j["fraction_of_roofline"] = roof_s / fused_s;
  j["overhead_seconds_per_step"] = overhead_s;
  const char* other_name = other_step == StepMode::host ? "host" : "device";
  if (other_overhead) {
    j["overhead_other_step"] = other_name;
    j["overhead_other_step_seconds"] = median(t_other_overhead);
  }
  if (device_copy) {
    j["copy_step_seconds"] = median(t_copy);
    j["copy_gbs"] = plan_bytes / median(t_copy) / 1e9;
    j["fraction_of_copy_bandwidth"] = median(t_copy) * bytes / plan_bytes / fused_s;
  }
  if (!stages.empty()) {
    const double un_s = median(t_unfused);
    j["unfused_step_seconds"] = un_s;
    j["unfused_bytes_per_param"] = unfused_bytes;
    j["unfused_effective_gbs"] =
        static_cast<double>(unfused_bytes) * static_cast<double>(numel) / un_s / 1e9;
    j["fusion_speedup"] = un_s / fused_s;
  }
  if (single) {
    j["single_tensor_step_seconds"] = median(t_single);
    j["vs_single_tensor"] = fused_s / median(t_single);
  }
  // The in-cache step's time per parameter, at this step's parameters.
  const double cached_s =
      cached ? median(t_cached) / static_cast<double>(cached_numel) * static_cast<double>(numel)
             : 0;
  if (cached) {
    j["in_cache_parameters"] = cached_numel;
    j["in_cache_step_seconds"] = median(t_cached);
    j["in_cache_scaled_step_seconds"] = cached_s;
    j["vs_in_cache"] = fused_s / cached_s;
  }
  if (o.json) {
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("pipeline     {}\n", *text);
  fmt::print("tensors      {} ({}), {} parameters, {}\n", shapes->size(),
             j["shapes"].get<std::string>(), numel, o.dtype);
  if (o.backend == "cpu")
    fmt::print("launch       cpu: {} threads, chunks of {}{}\n", j["threads"].get<int>(),
               j["chunk_elements"].get<int64_t>(),
               (*fused)->opt->launch_from_tuning() ? " (the kernel cache's tuning decision)" : "");
  else
    fmt::print("launch       {} on {}: {}, scalar program on the {}{}\n", o.backend,
               (*fused)->device_name(), launch.to_string(),
               *step == StepMode::host     ? "host"
               : *step == StepMode::device ? "device"
                                           : "device, as a CUDA graph",
               j["f32_division"] == "hardware"
                   ? ""
                   : fmt::format(", the adapter's f32 division and sqrt corrected ({})",
                                 j["f32_division"].get<std::string>()));
  fmt::print("plan         {} pass{}, {} bytes per parameter{}; compiled in {:.1f} ms\n",
             plan->passes.size(), plan->passes.size() == 1 ? "" : "es", plan->bytes_per_param(),
             versions_moved ? fmt::format(" ({:.4g} moved per step on average: pass versions)",
                                          bytes / static_cast<double>(numel))
             : bytes_bound
                 ? std::string(" at most (pass versions, chosen on the device, may move fewer)")
                 : std::string(),
             1e3 * compile_s);
  fmt::print("fused        {:9.3f} ms/step  {:7.2f} GB/s effective\n", 1e3 * fused_s, gbs);
  fmt::print(
      "roofline     {:9.3f} ms/step  {:7.2f} GB/s (streaming loop, same bytes)  -> {:.3f} of "
      "roofline\n",
      1e3 * roof_s, roof_gbs, roof_s / fused_s);
  if (cached)
    fmt::print(
        "in cache     {:9.3f} ms/step  (the step over {} parameters, staying in cache, scaled) -> "
        "fused takes {:.2f}x that\n",
        1e3 * cached_s, cached_numel, fused_s / cached_s);
  if (device_copy)
    fmt::print(
        "device copy  {:9.3f} ms       {:7.2f} GB/s ({}, same bytes)  -> {:.3f} of copy "
        "bandwidth\n",
        1e3 * median(t_copy), j["copy_gbs"].get<double>(),
        o.backend == "cuda"     ? "cuMemcpyDtoD"
        : o.backend == "webgpu" ? "copyBufferToBuffer"
                                : "clEnqueueCopyBuffer",
        j["fraction_of_copy_bandwidth"].get<double>());
  if (!stages.empty())
    fmt::print(
        "unfused      {:9.3f} ms/step  {} bytes per parameter in {} stages -> fusion is {:.2f}x "
        "faster\n",
        1e3 * j["unfused_step_seconds"].get<double>(), unfused_bytes, stages.size(),
        j["fusion_speedup"].get<double>());
  if (single)
    fmt::print(
        "one tensor   {:9.3f} ms/step  (the same {} parameters as one tensor) -> these shapes take "
        "{:.3f}x\n",
        1e3 * median(t_single), numel, fused_s / median(t_single));
  fmt::print("overhead     {:9.1f} us/step  (same {} tensors, one element each)\n",
             1e6 * overhead_s, shapes->size());
  if (other_overhead)
    fmt::print("  with --step {:<6} {:6.1f} us/step  -> --step {} takes {:.2f}x of it\n",
               other_name, 1e6 * median(t_other_overhead), j["step"].get<std::string>(),
               overhead_s / median(t_other_overhead));
  return 0;
}

int tune(const TuneCommand& o) {
  if (!runtime::find_device_kind(o.backend))
    return fail(
        fmt::format("tune runs on --backend {}, not {}", runtime::device_kind_names(), o.backend));
  auto text = read_pipeline_text(o.pipeline);
  if (!text) return fail(text.error().message);
  auto dt = parse_dtype(o.dtype);
  if (!dt || !is_float(*dt)) return fail(fmt::format("'{}' is not a float type", o.dtype));
  BenchOptions shapes_opts;
  shapes_opts.shapes = o.shapes;
  shapes_opts.numel = o.numel;
  auto shapes = shapes_for(shapes_opts);
  if (!shapes) return fail(shapes.error().message);
  auto plan = compile_pipeline(*text, {*dt, *dt, *dt});
  if (!plan) return fail(plan.error().message);
  // The parameters and gradients as a caller would have them in host memory; the optimizer
  // tunes on its device with them (and restores them).
  std::vector<runtime::HostTensor> params, grads;
  fill(params, *shapes, *dt, 0.1, 0);
  fill(grads, *shapes, *dt, 1e-3, 1);
  std::vector<Param> ps;
  std::vector<const void*> gs;
  for (size_t i = 0; i < params.size(); ++i) {
    ps.push_back({params[i].name, params[i].data.data(), *dt, params[i].shape});
    gs.push_back(grads[i].data.data());
  }
  OptimizerOptions options;
  options.backend = Backend(o.backend);
  // What is tuned is the launch the optimizer would otherwise take from the cache: start from
  // the defaults, whatever the cache holds.
  options.gpu_launch = codegen::GpuLaunch{};
  auto opt = Optimizer::create(std::move(*plan), std::move(ps), options);
  if (!opt) return fail(opt.error().message);
  print_warnings(**opt);
  autotune::TuneOptions topts;
  topts.budget_seconds = o.budget_seconds;
  topts.max_candidates = o.max_candidates;
  auto r = (*opt)->tune(gs, topts);
  if (!r) return fail(r.error().message);
  if (r->from_cache) {
    fmt::print("decision from the kernel cache{}: {} ({:.3f} s)\n",
               r->exact_device ? "" : " (tuned on the nearest device)", r->winner,
               r->tuning_seconds);
    return 0;
  }
  fmt::print("tuned {} candidates ({} pruned or failed) in {:.1f} s: {}\n", r->measured.size(),
             r->skipped.size(), r->tuning_seconds, r->winner);
  fmt::print("default {:.3f} ms/step, tuned {:.3f} ms/step: tuned / default = {:.3f}\n",
             1e3 * r->default_seconds, 1e3 * r->tuned_seconds,
             r->tuned_seconds / r->default_seconds);
  // Storing the decision is what this command is for.
  if (!r->not_stored.empty()) return fail("the decision was not stored: " + r->not_stored);
  return 0;
}

}  // namespace optjit::cli
