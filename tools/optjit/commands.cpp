#include "tools/optjit/commands.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <random>
#include <set>

#include <fmt/chrono.h>
#include <fmt/core.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "api/optimizer.h"
#include "autotune/cpu_tuner.h"
#include "autotune/gpu_tuner.h"
#include "cache/bundle.h"
#include "cache/kernel_cache.h"
#include "codegen/c_emitter.h"
#include "codegen/cpu_jit.h"
#include "codegen/cuda_kernels.h"
#include "codegen/nvrtc.h"
#include "ir/builtins.h"
#include "ir/compile.h"
#include "ir/pipeline_text.h"
#include "ir/text.h"
#include "runtime/device.h"
#include "runtime/devices.h"
#include "runtime/reference.h"
#include "support/output_file.h"

namespace optjit::cli {

using runtime::HostTensor;
using runtime::TensorFile;

void print_warnings(const Optimizer& opt) {
  // Once per process: bench builds several optimizers over one cache.
  static std::set<std::string> printed;
  for (const auto& w : opt.warnings())
    if (printed.insert(w).second) std::fprintf(stderr, "optjit: warning: %s\n", w.c_str());
}

int fail(const std::string& message) {
  std::fprintf(stderr, "optjit: %s\n", message.c_str());
  return 1;
}

const char* const kStepHelp =
    "cuda/opencl: where the scalar program between passes runs: host | device (as kernels: no "
    "host round trip within a step) | graph (cuda: the device step captured once in a CUDA graph "
    "and replayed) | auto (the device step on cuda and opencl with parameters of one dtype)";

Expected<StepMode> parse_step(const std::string& step, const std::string& backend) {
  // The device step wherever there is one: verified on every fixture on OpenCL (PoCL) and on
  // CUDA (an H100, tools/gpu/device_run.sh tests).
  const runtime::DeviceKind* kind = runtime::find_device_kind(backend);
  if (step == "auto") return kind && kind->device_step ? StepMode::device : StepMode::host;
  if (step == "host") return StepMode::host;
  if (step != "device" && step != "graph")
    return make_error("--step: '{}' is not host, device, graph or auto", step);
  const bool graph = step == "graph";
  if (!kind || !(graph ? kind->graphs : kind->device_step))
    return make_error("--step {} is for --backend {}, not {}", step,
                      runtime::device_kind_names([graph](const runtime::DeviceKind& k) {
                        return graph ? k.graphs : k.device_step;
                      }),
                      backend);
  return graph ? StepMode::graph : StepMode::device;
}

namespace {

Expected<DType> float_dtype(const std::string& s) {
  auto t = parse_dtype(s);
  if (!t || !is_float(*t)) return make_error("'{}' is not a float type (f32, f16, bf16, f64)", s);
  return *t;
}

Expected<double> parse_number(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0') return make_error("'{}' is not a number", s);
  if (std::isinf(v) && s.find("inf") == std::string::npos)  // strtod's overflow: 1e999
    return make_error("'{}' is too large for a double (write inf for infinity)", s);
  return v;
}

// 'PATTERN[,PATTERN]:name=value[,name=value]'
Expected<runtime::GroupSpec> parse_group(const std::string& s) {
  size_t colon = s.find(':');
  if (colon == std::string::npos || colon == 0)
    return make_error("--group '{}': expected PATTERN[,PATTERN...]:name=value[,...]", s);
  runtime::GroupSpec g;
  std::string pats = s.substr(0, colon), sets = s.substr(colon + 1);
  for (size_t pos = 0; pos <= pats.size();) {
    size_t c = pats.find(',', pos);
    std::string p = pats.substr(pos, c == std::string::npos ? std::string::npos : c - pos);
    if (!p.empty()) g.patterns.push_back(p);
    if (c == std::string::npos) break;
    pos = c + 1;
  }
  for (size_t pos = 0; pos < sets.size();) {
    size_t c = sets.find(',', pos);
    std::string kv = sets.substr(pos, c == std::string::npos ? std::string::npos : c - pos);
    size_t eq = kv.find('=');
    if (eq == std::string::npos) return make_error("--group '{}': '{}' is not name=value", s, kv);
    auto v = parse_number(kv.substr(eq + 1));
    if (!v) return make_error("--group '{}': {}", s, v.error().message);
    if (!g.overrides.emplace(kv.substr(0, eq), *v).second)
      return make_error("--group '{}': '{}' is given twice", s, kv.substr(0, eq));
    if (c == std::string::npos) break;
    pos = c + 1;
  }
  if (g.patterns.empty() || g.overrides.empty())
    return make_error("--group '{}': needs at least one pattern and one name=value", s);
  return g;
}

bool has_skip(const plan::Plan& p) {
  for (const auto& in : p.program.insts)
    if (in.op == ir::Op::SkipIf) return true;
  return false;
}

// The gradient for parameter `param` at step k (0-based): the tensor itself, or slice k.
struct GradSource {
  const HostTensor* tensor;
  bool sliced;
};

HostTensor slice(const HostTensor& g, int64_t k, int64_t numel, const std::vector<int64_t>& shape) {
  HostTensor out{g.name, g.dtype, shape, {}};
  size_t bytes = static_cast<size_t>(numel) * size_bytes(g.dtype);
  out.data.assign(g.data.begin() + static_cast<std::ptrdiff_t>(k * bytes),
                  g.data.begin() + static_cast<std::ptrdiff_t>((k + 1) * bytes));
  return out;
}

}  // namespace

// The optimizer options a command's --backend, --threads, --chunk, --launch and --step ask for.
Expected<OptimizerOptions> optimizer_options(const std::string& backend_name, int threads,
                                             long long chunk, const std::string& launch,
                                             const std::string& step_text) {
  OptimizerOptions opts;
  opts.backend = Backend(backend_name);
  if ((backend_name == "cpu" || backend_name == "reference") && !launch.empty())
    return make_error(
        "--launch is for --backend cuda and opencl; the cpu backend takes --threads and --chunk");
  auto step = parse_step(step_text, backend_name);
  if (!step) return step.error();
  opts.cpu = {threads, chunk, 0};
  const bool gpu = opts.backend != Backend::cpu && opts.backend != Backend::reference;
  if (gpu) {
    // Launch parameters: as given (over the device's default), else the kernel cache's tuning
    // decision or the default for the pipeline on the device (the optimizer looks), with --chunk.
    const codegen::GpuLaunch base = opts.backend == Backend::opencl
                                        ? autotune::opencl_default_launch(-1)
                                        : codegen::GpuLaunch{};
    if (!launch.empty()) {
      auto l = codegen::GpuLaunch::from_text(launch, base);
      if (!l) return make_error("--launch: {}", l.error().message);
      opts.gpu_launch = *l;
    } else if (chunk != (1 << 16)) {
      opts.gpu_chunk_elements = chunk;
    }
    if (step_text != "auto") opts.device_step = *step != StepMode::host;
    opts.cuda_graph = *step == StepMode::graph;
  }
  return opts;
}

int run(const RunOptions& o) {
  std::string backend_name = o.backend, why_auto;
  if (o.backend == "auto")
    backend_name = runtime::pick_auto(runtime::list_devices(), &why_auto).backend;
  auto opts = optimizer_options(backend_name, o.threads, o.chunk, o.launch, o.step);
  if (!opts) return fail(opts.error().message);
  auto text = read_pipeline_text(o.pipeline);
  if (!text) return fail(text.error().message);
  // Before any work: an output that cannot be written is known now, not after K steps.
  if (Status st = support::check_target(o.out); !st) return fail("--out " + st.error().message);
  // The output replaces an input it names only where it holds what that input held: the
  // parameters (updated, with the state beside them) or the state (resumed in place).
  if (support::same_file(o.out, o.grads))
    return fail(fmt::format(
        "--out {} is the gradients file (--grads {}): the output would replace the gradients",
        o.out, o.grads));
  auto params = runtime::read_safetensors(o.params);
  if (!params) return fail(params.error().message);
  // An earlier run's OUT as --params gives its parameters; its state is resumed by --state.
  if (const HostTensor* step = params->find("step");
      o.state.empty() && step && params->metadata.count("optjit.params"))
    std::fprintf(stderr,
                 "optjit: warning: %s also holds an earlier run's optimizer state (step %lld), "
                 "which --params does not resume: this run starts from fresh state (--state %s "
                 "resumes it)\n",
                 o.params.c_str(), static_cast<long long>(step->get(0)), o.params.c_str());
  params->tensors = runtime::parameters_of(std::move(*params));
  auto grads = runtime::read_safetensors(o.grads);
  if (!grads) return fail(grads.error().message);
  if (params->tensors.empty()) return fail(fmt::format("{}: holds no tensors", o.params));

  std::set<DType> param_types;
  for (const auto& t : params->tensors) {
    if (!is_float(t.dtype))
      return fail(fmt::format("{}: parameter '{}' is {}, not a float type", o.params, t.name,
                              to_string(t.dtype)));
    param_types.insert(t.dtype);
  }
  std::vector<GradSource> sources;
  // The gradients' dtype: each parameter's own, or one for all.
  bool own_dtype = true;
  std::set<DType> grad_types;
  for (size_t i = 0; i < params->tensors.size(); ++i) {
    const HostTensor& p = params->tensors[i];
    const HostTensor* g = grads->find(p.name);
    if (!g) return fail(fmt::format("{}: no gradient for parameter '{}'", o.grads, p.name));
    if (!is_float(g->dtype))
      return fail(fmt::format("{}: gradient '{}' is not a float type", o.grads, p.name));
    own_dtype &= g->dtype == p.dtype;
    grad_types.insert(g->dtype);
    bool same = g->shape == p.shape;
    std::vector<int64_t> stacked = {o.steps};
    stacked.insert(stacked.end(), p.shape.begin(), p.shape.end());
    bool sliced = g->shape == stacked;
    if (!same && !sliced)
      return fail(fmt::format("{}: gradient '{}' has shape {}, expected {} or {}", o.grads, p.name,
                              fmt::format("[{}]", fmt::join(g->shape, ", ")),
                              fmt::format("[{}]", fmt::join(p.shape, ", ")),
                              fmt::format("[{}]", fmt::join(stacked, ", "))));
    sources.push_back({g, sliced && !same});
  }
  if (!own_dtype && grad_types.size() > 1)
    return fail(fmt::format(
        "{}: gradients mix {} and {}; give each parameter's gradient in its own dtype, or all in "
        "one",
        o.grads, to_string(*grad_types.begin()), to_string(*grad_types.rbegin())));
  if (!own_dtype) opts->grad_dtype = *grad_types.begin();
  for (const auto& g : grads->tensors)
    if (!params->find(g.name))
      return fail(fmt::format("{}: gradient '{}' has no parameter", o.grads, g.name));

  auto pipeline = dsl::parse_pipeline(*text);
  if (!pipeline) return fail("pipeline: " + pipeline.error().message);
  std::vector<runtime::GroupSpec> groups;
  for (const auto& s : o.groups) {
    auto g = parse_group(s);
    if (!g) return fail(g.error().message);
    groups.push_back(std::move(*g));
  }
  opts->groups = groups;
  opts->stochastic_param_rounding = o.param_rounding == "stochastic";
  if (o.no_cache)
    opts->cache.reset();
  else
    opts->cache->strict = o.cache_strict;
  std::vector<Param> ps;
  for (auto& t : params->tensors) ps.push_back({t.name, t.data.data(), t.dtype, t.shape});
  auto created = Optimizer::create(*pipeline, std::move(ps), *opts);
  if (!created) return fail(created.error().message);
  Optimizer& opt = **created;
  print_warnings(opt);

  if (!o.allow_nonfinite && !has_skip(opt.plan())) {
    for (size_t i = 0; i < sources.size(); ++i) {
      const HostTensor& g = *sources[i].tensor;
      for (int64_t e = 0; e < g.numel(); ++e)
        if (!std::isfinite(g.get(e))) {
          int64_t per = params->tensors[i].numel();
          return fail(fmt::format(
              "{}: gradient '{}' has a non-finite value ({}) at element {}{}; add "
              "grad_scaler(...) to skip such steps, or pass --allow-nonfinite",
              o.grads, g.name, g.get(e), sources[i].sliced ? e % std::max<int64_t>(per, 1) : e,
              sources[i].sliced ? fmt::format(" of step {}", e / std::max<int64_t>(per, 1) + 1)
                                : ""));
        }
    }
  }
  std::set<std::string> set_names;
  for (const auto& s : o.sets) {
    size_t eq = s.find('=');
    if (eq == std::string::npos) return fail(fmt::format("--set '{}': expected name=value", s));
    if (!set_names.insert(s.substr(0, eq)).second)
      return fail(fmt::format("--set: '{}' is given twice", s.substr(0, eq)));
    std::vector<double> values;
    std::string rhs = s.substr(eq + 1);
    for (size_t pos = 0; pos <= rhs.size();) {
      size_t c = rhs.find(',', pos);
      auto v = parse_number(rhs.substr(pos, c == std::string::npos ? std::string::npos : c - pos));
      if (!v) return fail(fmt::format("--set '{}': {}", s, v.error().message));
      values.push_back(*v);
      if (c == std::string::npos) break;
      pos = c + 1;
    }
    Status st = opt.set_hyper(s.substr(0, eq), values);
    if (!st) return fail(fmt::format("--set: {}", st.error().message));
  }
  if (!o.state.empty()) {
    auto resume = runtime::read_safetensors(o.state);
    if (!resume) return fail(resume.error().message);
    Status st = opt.import_state(*resume);
    if (!st) return fail(fmt::format("{}: {}", o.state, st.error().message));
  }

  int skipped = 0;
  auto t0 = std::chrono::steady_clock::now();
  std::vector<HostTensor> slices(sources.size());
  std::vector<const void*> step_grads(sources.size());
  for (int k = 0; k < o.steps; ++k) {
    for (size_t i = 0; i < sources.size(); ++i) {
      if (sources[i].sliced) {
        slices[i] =
            slice(*sources[i].tensor, k, params->tensors[i].numel(), params->tensors[i].shape);
        step_grads[i] = slices[i].data.data();
      } else {
        step_grads[i] = sources[i].tensor->data.data();
      }
    }
    auto r = opt.step(step_grads);
    if (!r) return fail(r.error().message);
    skipped += r->skipped;
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto out = opt.export_state();
  if (!out) return fail(out.error().message);
  out->metadata["pipeline"] = *text;
  out->metadata["backend"] = backend_name;
  Status st = runtime::write_safetensors(o.out, *out);
  if (!st) return fail(st.error().message);
  if (!o.quiet) {
    int64_t numel = 0;
    for (const auto& t : params->tensors) numel += t.numel();
    std::string types;
    for (DType t : param_types) types += (types.empty() ? "" : ", ") + std::string(to_string(t));
    const bool gpu = opt.backend() == Backend::cuda || opt.backend() == Backend::opencl;
    fmt::print(
        "ran {} step{} ({} skipped) on {} tensors, {} parameters ({}), {} backend, {:.3f} s{}\n",
        o.steps, o.steps == 1 ? "" : "s", skipped, params->tensors.size(), numel, types,
        backend_name, secs,
        opt.backend() == Backend::reference
            ? std::string()
            : fmt::format(
                  " (+{:.3f} s {}, {}{})", opt.compile_seconds(),
                  opt.kernels_from_cache() ? "loading kernels from the cache" : "compiling kernels",
                  opt.device_name(),
                  opt.backend() == Backend::cpu
                      ? fmt::format(", {} threads", opt.launch().threads > 0
                                                        ? opt.launch().threads
                                                        : opt.device()->description().compute_units)
                      : ""));
    if (gpu)
      fmt::print("scalar program between passes: {}\n",
                 opt.step_mode() == "host"     ? "on the host"
                 : opt.step_mode() == "device" ? "on the device"
                                               : "on the device, replayed as a CUDA graph");
    const plan::Plan& plan = opt.plan();
    fmt::print("plan: {} pass{}, {} bytes per parameter{}; step count now {}\n", plan.passes.size(),
               plan.passes.size() == 1 ? "" : "es", plan.bytes_per_param(),
               opt.programs() > 1
                   ? fmt::format(" (for {}; {} programs, one per dtype)",
                                 to_string(plan.buffers[plan.program.param_buffer()].storage),
                                 opt.programs())
                   : "",
               opt.step_count());
    if (!why_auto.empty()) fmt::print("{}\n", why_auto);
    if (opt.launch_from_tuning())
      fmt::print("launch parameters from the kernel cache's tuning: {}\n",
                 gpu ? opt.gpu_launch().to_string() : autotune::to_string(opt.launch()));
    else if (gpu)
      fmt::print("launch parameters: {}\n", opt.gpu_launch().to_string());
    fmt::print("wrote {}\n", o.out);
  }
  return 0;
}

int plan(const PlanOptions& o) {
  auto text = read_pipeline_text(o.pipeline);
  if (!text) return fail(text.error().message);
  auto dt = float_dtype(o.dtype);
  if (!dt) return fail(dt.error().message);
  auto gt = float_dtype(o.grad_dtype.empty() ? o.dtype : o.grad_dtype);
  if (!gt) return fail(gt.error().message);
  auto p = compile_pipeline(*text, {*dt, *gt, *dt});
  if (!p) return fail(p.error().message);
  // Sharding on paper: everything checked before anything is printed.
  std::vector<long long> process_counts;
  if (o.params > 0) {
    if (o.tensors <= 0) return fail("--params needs --tensors: the model's tensor count");
    if (static_cast<double>(o.tensors) > o.params)
      return fail(
          fmt::format("--tensors {} is more than --params {:g}: every tensor holds at "
                      "least one parameter",
                      o.tensors, o.params));
    for (size_t pos = 0; pos <= o.processes.size();) {
      size_t comma = o.processes.find(',', pos);
      if (comma == std::string::npos) comma = o.processes.size();
      const std::string item = o.processes.substr(pos, comma - pos);
      pos = comma + 1;
      char* end = nullptr;
      errno = 0;
      const long long n = std::strtoll(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0' || errno == ERANGE || n < 1 || n > (1LL << 40))
        return fail(fmt::format(
            "--processes: '{}' is not a process count (a whole number from 1 to 2^40)", item));
      process_counts.push_back(n);
    }
  } else if (o.tensors > 0) {
    return fail("--tensors goes with --params: the model's parameter count");
  }
  if (o.json) {
    nlohmann::json j;
    j["passes"] = nlohmann::json::array();
    for (const auto& pass : p->passes) {
      nlohmann::json jp;
      for (uint32_t r : pass.reads) jp["reads"].push_back(p->buffers[r].name);
      for (uint32_t w : pass.writes) jp["writes"].push_back(p->buffers[w].name);
      jp["bytes_read"] = pass.bytes_read;
      jp["bytes_written"] = pass.bytes_written;
      // Pass versions: what a tensor moves when the guards (the program's values "%N") hold
      // the values in "when".
      for (const auto& v : pass.versions) {
        nlohmann::json jv;
        for (size_t g = 0; g < pass.guards.size(); ++g)
          jv["when"][fmt::format("%{}", ir::index(pass.uniforms[pass.guards[g]]))] = v.when[g];
        jv["reads"] = jv["writes"] = nlohmann::json::array();
        for (uint32_t r : v.reads) jv["reads"].push_back(p->buffers[r].name);
        for (uint32_t w : v.writes) jv["writes"].push_back(p->buffers[w].name);
        jv["bytes_read"] = v.bytes_read;
        jv["bytes_written"] = v.bytes_written;
        jp["versions"].push_back(jv);
      }
      j["passes"].push_back(jp);
    }
    j["bytes_per_param"] = p->bytes_per_param();
    for (const auto& h : p->program.hypers) j["hyperparameters"][h.name] = h.value;
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("{}", plan::describe(*p, !o.no_bodies));
  if (o.params > 0) {
    const ShardKind kind = o.layout == "flat"   ? ShardKind::flat
                           : o.layout == "dim0" ? ShardKind::dim0
                                                : ShardKind::by_tensor;
    const ShardOrder order =
        o.order == "by_process" ? ShardOrder::by_process : ShardOrder::by_tensor;
    fmt::print(
        "\nsharded over processes: {:g} parameters in {} tensors, layout {}, all-reduce {}\n"
        "{:>10} {:>14} {:>14} {:>16} {:>11} {:>16}\n",
        o.params, o.tensors, o.layout, o.order, "processes", "params/proc", "state/proc",
        "moved/proc/step", "allreduces", "allreduced/step");
    for (const long long n : process_counts) {
      const ShardCost c = shard_cost(*p, o.params, o.tensors, n, kind, order);
      auto bytes = [](double b) {
        const char* unit[] = {"B", "KB", "MB", "GB", "TB"};
        int u = 0;
        while (b >= 1000 && u < 4) b /= 1000, ++u;
        return fmt::format("{:.3g} {}", b, unit[u]);
      };
      fmt::print("{:>10} {:>14.4g} {:>14} {:>16} {:>11} {:>16}\n", n, c.params_per_process,
                 bytes(c.state_bytes), bytes(c.bytes_moved), c.allreduces,
                 bytes(c.allreduce_bytes));
    }
  }
  return 0;
}

int emit(const EmitOptions& o) {
  auto text = read_pipeline_text(o.pipeline);
  if (!text) return fail(text.error().message);
  auto dt = float_dtype(o.dtype);
  if (!dt) return fail(dt.error().message);
  auto p = compile_pipeline(*text, {*dt, *dt, *dt});
  if (!p) return fail(p.error().message);
  auto step = parse_step(o.step, o.backend);
  if (!step) return fail(step.error().message);
  if (o.assembly && o.backend != "cpu")
    return fail(fmt::format("--asm is the cpu backend's machine code; --backend {} emits {}",
                            o.backend,
                            o.backend == "webgpu" ? "WGSL"
                            : o.backend == "cuda" ? "CUDA C"
                                                  : "OpenCL C"));
  if (o.backend != "cpu") {
    auto l = codegen::GpuLaunch::from_text(o.launch);
    if (!l) return fail("--launch: " + l.error().message);
    auto src = codegen::emit_c(*p, {o.backend == "cuda"     ? codegen::CLanguage::cuda
                                    : o.backend == "webgpu" ? codegen::CLanguage::wgsl
                                                            : codegen::CLanguage::opencl,
                                    *l, *step != StepMode::host});
    if (!src) return fail(src.error().message);
    fmt::print("{}", *src);
    return 0;
  }
  if (o.cpu.empty())
    if (auto ok = codegen::check_cpu_feature_changes(); !ok) return fail(ok.error().message);
  auto target = o.cpu.empty() ? Expected<codegen::CpuTarget>(codegen::CpuTarget::host())
                              : codegen::CpuTarget::named(o.cpu);
  if (!target) return fail("--cpu: " + target.error().message);
  auto ir = o.assembly ? codegen::emit_cpu_asm(*p, *target, o.unroll)
                       : codegen::emit_cpu_ir(*p, o.optimized, *target, o.unroll);
  if (!ir) return fail(ir.error().message);
  fmt::print("{}", *ir);
  return 0;
}

int compile(const CompileOptions& o) {
  auto text = read_pipeline_text(o.pipeline);
  if (!text) return fail(text.error().message);
  auto dt = float_dtype(o.dtype);
  if (!dt) return fail(dt.error().message);
  auto p = compile_pipeline(*text, {*dt, *dt, *dt});
  if (!p) return fail(p.error().message);
  std::unique_ptr<cache::KernelCache> kcache;
  if (!o.no_cache) {
    auto c = cache::KernelCache::open();
    if (!c) return fail(c.error().message);
    kcache = std::move(*c);
    for (const auto& w : kcache->warnings())
      std::fprintf(stderr, "optjit: warning: %s\n", w.c_str());
  }
  auto step = parse_step(o.step, o.backend);
  if (!step) return fail(step.error().message);
  const uint64_t hash = ir::structural_hash(p->program);
  auto launch = codegen::GpuLaunch::from_text(o.launch);
  if (!launch) return fail("--launch: " + launch.error().message);
  fmt::print("{} passes, {} bytes per parameter; NVRTC {}; {}\n", p->passes.size(),
             p->bytes_per_param(), codegen::nvrtc_version(), launch->code_variant());
  // Every name first, then every compile, then every file: a bad name writes nothing.
  std::vector<std::string> archs;
  for (size_t pos = 0; pos <= o.arch.size();) {
    size_t comma = o.arch.find(',', pos);
    std::string arch =
        o.arch.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (Status st = codegen::check_cuda_arch(arch); !st)
      return fail("--arch: " + st.error().message);
    if (std::find(archs.begin(), archs.end(), arch) != archs.end())
      return fail(fmt::format("--arch: '{}' is given twice", arch));
    archs.push_back(arch);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  // --out: a directory, made (one level) once every cubin is built, so a failed compile leaves
  // nothing behind.
  namespace fs = std::filesystem;
  bool make_out = false;
  if (!o.out.empty()) {
    std::error_code ec;
    const auto st = fs::symlink_status(o.out, ec);
    const fs::path parent = fs::path(o.out).has_parent_path() ? fs::path(o.out).parent_path() : ".";
    if (ec && st.type() != fs::file_type::not_found)  // (it read "not a directory")
      return fail(fmt::format("--out {}: cannot be examined ({})", o.out, ec.message()));
    if (st.type() == fs::file_type::not_found) {
      if (!fs::is_directory(parent, ec))
        return fail(
            fmt::format("--out {}: the directory {} does not exist", o.out, parent.string()));
      make_out = true;
    } else if (!fs::is_directory(o.out, ec)) {
      return fail(fmt::format("--out {}: not a directory", o.out));
    }
  }
  std::vector<std::pair<std::string, codegen::Cubin>> cubins;
  std::string not_stored;
  for (const auto& arch : archs) {
    auto built = codegen::plan_cubin(*p, arch, *launch, kcache.get(), *step != StepMode::host);
    if (!built) return fail(built.error().message);
    const codegen::Cubin* cubin = &built->cubin;
    fmt::print("{}: {} bytes in {:.0f} ms{}\n", arch, cubin->image.size(),
               1e3 * cubin->compile_seconds,
               built->from_cache            ? " (from the kernel cache)"
               : !built->not_stored.empty() ? " (NOT stored in the kernel cache)"
               : kcache                     ? " (stored in the kernel cache)"
                                            : "");
    if (!built->not_stored.empty()) not_stored = built->not_stored;
    for (const auto& k : cubin->kernels)
      fmt::print("  {:<16} {:>3} registers, {} B spill stores, {} B spill loads, {} B shared\n",
                 k.name, k.registers, k.spill_stores, k.spill_loads, k.shared_bytes);
    cubins.emplace_back(arch, std::move(built->cubin));
  }
  // Filling the cache is this command's job unless it writes files: a cache that took nothing
  // is a failure then (a cache meant to ship warm would ship cold), a warning otherwise.
  if (!not_stored.empty()) {
    if (o.out.empty()) return fail("the kernels were compiled but not stored: " + not_stored);
    std::fprintf(stderr, "optjit: warning: the kernels were not stored: %s\n", not_stored.c_str());
  }
  if (o.out.empty()) return 0;
  if (make_out) {
    std::error_code ec;
    if (!fs::create_directory(o.out, ec) && ec)
      return fail(fmt::format("--out {}: cannot create ({})", o.out, ec.message()));
  }
  std::vector<support::OutputFile> files;
  auto written = [&]() -> Status {
    for (const auto& [arch, cubin] : cubins) {
      auto f =
          support::OutputFile::create(fmt::format("{}/optjit_{:016x}_{}.cubin", o.out, hash, arch));
      if (!f) return f.error();
      OPTJIT_TRY(f->write(cubin.image.data(), cubin.image.size()));
      files.push_back(std::move(*f));
    }
    std::vector<support::OutputFile*> all;
    for (auto& f : files) all.push_back(&f);
    return support::commit_all(all);
  }();
  if (!written) {
    files.clear();
    std::error_code ec;
    if (make_out) fs::remove(o.out, ec);  // only if still empty
    return fail(written.error().message);
  }
  for (const auto& f : files) fmt::print("wrote {}\n", f.path());
  return 0;
}

int cache(const CacheCommand& c) {
  auto kc = cache::KernelCache::open();
  if (!kc) return fail(kc.error().message);
  for (const auto& w : (*kc)->warnings()) std::fprintf(stderr, "optjit: warning: %s\n", w.c_str());
  if (c.action == "path") {
    fmt::print("{}\n", (*kc)->path());
  } else if (c.action == "ls") {
    for (const auto& e : (*kc)->list())
      fmt::print("{}/{}/{}  {:<12} {:>9} B  compiled in {:.0f} ms  last used {:%Y-%m-%d %H:%M}\n",
                 e.key.fingerprint, e.key.program, e.key.variant, e.format, e.payload.size(),
                 1e3 * e.compile_seconds, fmt::gmtime(static_cast<std::time_t>(e.last_used)));
  } else if (c.action == "stats") {
    auto s = (*kc)->stats();
    if (c.json)
      fmt::print("{{\"path\": \"{}\", \"kernels\": {}, \"bytes\": {}}}\n", (*kc)->path(), s.kernels,
                 s.bytes);
    else
      fmt::print("{}: {} kernels, {} bytes\n", (*kc)->path(), s.kernels, s.bytes);
  } else if (c.action == "verify") {
    auto bad = (*kc)->verify();
    for (const auto& b : bad) fmt::print("{}\n", b);
    fmt::print("{}: {} bad kernel{}\n", (*kc)->path(), bad.size(), bad.size() == 1 ? "" : "s");
    return bad.empty() ? 0 : 1;
  } else if (c.action == "export") {
    if (c.file.empty()) return fail("cache export needs a bundle path");
    // --device: fingerprint ids or sm_XX (ahead-of-time cubins); empty: everything.
    std::vector<std::string> fps;
    for (const auto& d : c.devices)
      fps.push_back(d.rfind("sm_", 0) == 0 ? codegen::cubin_fingerprint_id(d) : d);
    auto n = cache::export_bundle(**kc, c.file, fps, c.key);
    if (!n) return fail(n.error().message);
    fmt::print("exported {} kernel{} and {} tuning decision{} to {}{}\n", n->kernels,
               n->kernels == 1 ? "" : "s", n->decisions, n->decisions == 1 ? "" : "s", c.file,
               c.key.empty() ? "" : " (signed: " + c.file + ".sig)");
  } else if (c.action == "import") {
    if (c.file.empty()) return fail("cache import needs a bundle path");
    if (!c.key.empty())
      if (Status st = cache::verify_file(c.file, c.key); !st) return fail(st.error().message);
    auto n = cache::import_bundle(**kc, c.file);
    if (!n) return fail(n.error().message);
    fmt::print("imported {} kernel{} and {} tuning decision{} from {}{}\n", n->kernels,
               n->kernels == 1 ? "" : "s", n->decisions, n->decisions == 1 ? "" : "s", c.file,
               c.key.empty() ? "" : " (signature verified)");
  } else if (c.action == "keygen") {
    if (c.file.empty()) return fail("cache keygen needs a path prefix");
    if (Status st = cache::make_signing_key(c.file); !st) return fail(st.error().message);
    fmt::print("wrote {0}.key (secret: keep it) and {0}.pub (give it to users)\n", c.file);
  } else if (c.action == "coverage") {
    // Which programs are warm for which devices: this machine's, and any sm_XX with cubins.
    std::map<std::string, std::string> device_names;
    for (const auto& d : runtime::list_devices().devices)
      device_names[d.exact_id()] = d.backend + ":" + d.name;
    for (const char* arch :
         {"sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"})
      device_names[codegen::cubin_fingerprint_id(arch)] =
          std::string("cuda ") + arch + " (ahead of time)";
    std::map<std::string, std::set<std::string>> warm;
    std::map<std::string, std::vector<cache::TuningDecision>> tuned;
    for (const auto& e : (*kc)->list()) warm[e.key.program].insert(e.key.fingerprint);
    for (const auto& d : (*kc)->decisions()) {
      warm[d.program];
      tuned[d.program].push_back(d);
    }
    for (const auto& [program, fps] : warm) {
      fmt::print("program {}:\n", program);
      for (const auto& f : fps)
        fmt::print("  warm on {} {}\n", f,
                   device_names.count(f) ? device_names[f] : "(another machine)");
      for (const auto& d : tuned[program])
        fmt::print("  tuned on {} for 2^{} elements: {}\n", d.performance, d.size_bucket, d.config);
    }
    if (warm.empty()) fmt::print("the kernel cache is empty\n");
  } else if (c.action == "prune") {
    auto n = (*kc)->prune(c.max_age_days, c.max_bytes);
    if (!n) return fail(n.error().message);
    fmt::print("removed {} kernel{}\n", *n, *n == 1 ? "" : "s");
  }
  return 0;
}

int devices(bool json) {
  runtime::DeviceList list = runtime::list_devices();
  if (json) {
    nlohmann::json j;
    j["devices"] = nlohmann::json::array();
    for (const auto& d : list.devices)
      j["devices"].push_back({{"backend", d.backend},
                              {"index", d.index},
                              {"name", d.name},
                              {"gpu", d.gpu},
                              {"exact_fingerprint", d.exact_id()},
                              {"exact", d.exact},
                              {"performance_fingerprint", d.performance_id()},
                              {"performance", d.performance}});
    j["unavailable"] = list.unavailable;
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  for (const auto& d : list.devices) {
    fmt::print("{}:{}  {}{}\n", d.backend, d.index, d.name, d.gpu ? " (GPU)" : "");
    fmt::print("    exact {}  {}\n", d.exact_id(),
               d.exact.size() > 160 ? d.exact.substr(0, 157) + "..." : d.exact);
    fmt::print("    perf  {}  {}\n", d.performance_id(), d.performance);
  }
  for (const auto& u : list.unavailable) fmt::print("{}\n", u);
  std::string why;
  runtime::pick_auto(list, &why);
  fmt::print("{}\n", why);
  return 0;
}

int list() {
  for (auto kind : {dsl::DefKind::transform, dsl::DefKind::schedule}) {
    fmt::print("{}\n", kind == dsl::DefKind::transform ? "transforms:"
                                                       : "\nschedules (use wherever lr is):");
    if (kind == dsl::DefKind::transform)
      fmt::print(
          "  every transform, custom ones too, also takes {}=\"FORMAT[,STATE:FORMAT...]\": how "
          "its\n  per-element state is stored ({}; default: as the parameters), e.g. "
          "adamw(state_format=\"bf16\")\n",
          dsl::kStateFormat, dsl::state_format_names());
    for (const auto& d : dsl::builtins()) {
      if (d->kind != kind) continue;
      std::vector<std::string> args;
      for (const auto& h : d->hypers) {
        if (h.defaults.empty())
          args.push_back(fmt::format("{}=<required>", h.name));
        else if (h.defaults.size() == 1 && h.arity == 1)
          args.push_back(fmt::format("{}={}", h.name, h.defaults[0]));
        else
          args.push_back(fmt::format("{}=({})", h.name, fmt::join(h.defaults, ", ")));
      }
      for (const auto& op : d->options) {
        if (op.default_value.index() == 0)
          args.push_back(fmt::format("{}={}", op.name, std::get<0>(op.default_value)));
        else
          args.push_back(fmt::format("{}=\"{}\"", op.name, std::get<1>(op.default_value)));
      }
      fmt::print("  {}({})\n      {}\n", d->name, fmt::join(args, ", "), d->doc);
      if (kind == dsl::DefKind::transform) {
        dsl::Args required;
        for (const auto& h : d->hypers)
          if (h.defaults.empty()) required.emplace(h.name, 1.0);
        auto b = dsl::bind(d, required);
        if (!b) continue;
        auto prog = dsl::lower({*b});
        if (!prog) continue;
        std::vector<std::string> states;
        for (const auto& buf : prog->buffers)
          if (buf.role == ir::BufferRole::state) states.push_back(buf.name);
        for (const auto& s : prog->states) states.push_back(s.name + " (scalar)");
        if (!states.empty()) fmt::print("      state: {}\n", fmt::join(states, ", "));
      }
    }
  }
  fmt::print("\nfunctions in custom transform bodies:\n{}", dsl::describe_text_functions());
  return 0;
}

int inspect(const std::string& path, const std::string& match) {
  auto f = runtime::read_safetensors(path);
  if (!f) return fail(f.error().message);
  // min, max and l2 norm of the finite values ("-" where there are none), and how many are NaN
  // or infinite: a diverged run's checkpoint shows where, rather than min/max that skip NaNs.
  fmt::print("{:<34} {:>5} {:>14} {:>13} {:>13} {:>13} {:>7} {:>7}\n", "tensor", "dtype", "shape",
             "min", "max", "l2 norm", "nan", "inf");
  for (const auto& t : f->tensors) {
    if (!match.empty() && !runtime::glob_match(match, t.name)) continue;
    double lo = std::numeric_limits<double>::infinity(), hi = -lo, sq = 0;
    int64_t nans = 0, infs = 0;
    for (int64_t i = 0; i < t.numel(); ++i) {
      const double v = t.get(i);
      if (std::isnan(v)) {
        ++nans;
      } else if (std::isinf(v)) {
        ++infs;
      } else {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
        sq += v * v;
      }
    }
    auto num = [&](double v) {
      return nans + infs == t.numel() ? std::string("-") : fmt::format("{:.6g}", v);
    };
    fmt::print("{:<34} {:>5} {:>14} {:>13} {:>13} {:>13} {:>7} {:>7}\n", t.name, to_string(t.dtype),
               fmt::format("[{}]", fmt::join(t.shape, ",")), num(lo), num(hi), num(std::sqrt(sq)),
               nans, infs);
  }
  for (const auto& [k, v] : f->metadata)
    if (match.empty() && k != "optjit.params")
      fmt::print("metadata {}: {}\n", k, v.size() > 200 ? v.substr(0, 200) + "..." : v);
  return 0;
}

int synth(const SynthOptions& o) {
  auto dt = float_dtype(o.dtype);
  if (!dt) return fail(dt.error().message);
  if (support::same_file(o.params, o.grads)) return fail("--params and --grads are the same file");
  for (const auto& [flag, path] : {std::pair{"--params", &o.params}, {"--grads", &o.grads}})
    if (Status st = support::check_target(*path); !st)
      return fail(fmt::format("{} {}", flag, st.error().message));
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
  if (o.preset == "one") {
    if (o.numel <= 0) return fail("--numel must be positive");
    shapes.push_back({"weight", {o.numel}});
  } else if (o.preset == "mlp") {
    shapes = {{"fc1.weight", {512, 784}}, {"fc1.bias", {512}},       {"fc2.weight", {256, 512}},
              {"fc2.bias", {256}},        {"out.weight", {10, 256}}, {"out.bias", {10}}};
  } else {  // tiny-gpt: a 4-layer, 256-wide GPT-2-shaped model
    const int64_t d = 256, vocab = 4096, ctx = 256;
    shapes = {{"wte.weight", {vocab, d}}, {"wpe.weight", {ctx, d}}};
    for (int l = 0; l < 4; ++l) {
      auto n = [l](const char* s) { return fmt::format("h.{}.{}", l, s); };
      shapes.push_back({n("ln_1.weight"), {d}});
      shapes.push_back({n("ln_1.bias"), {d}});
      shapes.push_back({n("attn.c_attn.weight"), {d, 3 * d}});
      shapes.push_back({n("attn.c_attn.bias"), {3 * d}});
      shapes.push_back({n("attn.c_proj.weight"), {d, d}});
      shapes.push_back({n("attn.c_proj.bias"), {d}});
      shapes.push_back({n("ln_2.weight"), {d}});
      shapes.push_back({n("ln_2.bias"), {d}});
      shapes.push_back({n("mlp.c_fc.weight"), {d, 4 * d}});
      shapes.push_back({n("mlp.c_fc.bias"), {4 * d}});
      shapes.push_back({n("mlp.c_proj.weight"), {4 * d, d}});
      shapes.push_back({n("mlp.c_proj.bias"), {d}});
    }
    shapes.push_back({"ln_f.weight", {d}});
    shapes.push_back({"ln_f.bias", {d}});
  }
  // Sizes first, checked, before anything is allocated or written.
  if (o.steps < 1) return fail("--steps must be at least 1");
  int64_t elements = 0;
  for (const auto& [name, shape] : shapes) {
    std::vector<int64_t> gshape = shape;
    gshape.insert(gshape.begin(), o.steps);
    auto n =
        element_count(gshape, fmt::format("'{}' with {} gradient steps", name, o.steps), elements);
    if (!n) return fail(n.error().message);
    elements += *n;
  }
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  TensorFile params, grads;
  for (const auto& [name, shape] : shapes) {
    HostTensor p = HostTensor::zeros(name, *dt, shape);
    bool is_norm = name.find("ln_") != std::string::npos;
    bool is_bias = name.find("bias") != std::string::npos;
    for (int64_t i = 0; i < p.numel(); ++i)
      p.set(i, is_norm && !is_bias ? 1.0 : is_bias ? 0.0 : 0.02 * normal(rng));
    std::vector<int64_t> gshape = shape;
    if (o.steps > 1) gshape.insert(gshape.begin(), o.steps);
    HostTensor g = HostTensor::zeros(name, *dt, gshape);
    for (int64_t i = 0; i < g.numel(); ++i) g.set(i, 1e-3 * normal(rng));
    params.tensors.push_back(std::move(p));
    grads.tensors.push_back(std::move(g));
  }
  if (Status s = runtime::write_safetensors({{o.params, &params}, {o.grads, &grads}}); !s)
    return fail(s.error().message);
  int64_t total = 0;
  for (const auto& t : params.tensors) total += t.numel();
  fmt::print("wrote {} tensors, {} parameters ({}) to {} and {} gradient step(s) to {}\n",
             params.tensors.size(), total, o.dtype, o.params, o.steps, o.grads);
  return 0;
}

}  // namespace optjit::cli
