#include "runtime/executor.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "codegen/c_emitter.h"
#include "codegen/kernel_abi.h"
#include "runtime/chunks.h"
#include "runtime/device_step.h"

namespace optjit::runtime {

std::string_view to_string(StepMode m) {
  switch (m) {
    case StepMode::host:
      return "host";
    case StepMode::device:
      return "device";
    case StepMode::graph:
      return "graph";
  }
  return "?";
}

namespace {

constexpr size_t kSegmentGroup = 64;  // work-items per group of the device step's segments

size_t groups_for(size_t items, size_t per) { return (std::max<size_t>(items, 1) + per - 1) / per; }

}  // namespace

struct Executor::Impl {
  Impl(const plan::Plan& p, Device& d, ExecutorOptions o)
      : plan(p), dev(d), desc(d.description()), options(o) {}

  const plan::Plan& plan;
  Device& dev;
  const DeviceDescription& desc;
  ExecutorOptions options;
  cache::KernelCache* cache = nullptr;
  std::unique_ptr<Module> module;
  // Kernels replaced by scalar ones (vec_fallback) and the graph that launched them, kept
  // until the executor goes: a queued step may still run them.
  std::vector<std::unique_ptr<Module>> retired;
  std::vector<std::unique_ptr<Graph>> retired_graphs;
  std::string fallback;  // why the kernels run with vec=1 (Executor::vector_fallback)
  size_t B = 0, P = 0, max_reductions = 0;
  std::vector<size_t> es;       // bytes per element of each buffer
  bool quantized = false;       // the plan has block-quantized state
  std::vector<bool> written;    // buffers a step writes that its caller sees
  std::vector<bool> per_group;  // per pass: one uniform row per group (host step)

  // Per tensor set.
  TensorSet tensors;
  ChunkTable table;
  bool built = false;
  std::vector<DeviceAllocation> arenas;  // per buffer: the executor's own, where needed
  DeviceAllocation chunk_buf, partials, pointer_table;
  std::vector<DeviceAllocation> uniform_bufs, row_bufs;  // per pass
  std::vector<std::vector<double>> uniform_host;         // per pass, alive until finish()
  double moved = 0;  // bytes the host step's passes moved so far (StepResult::moved_bytes)
  std::vector<std::vector<double>> version_elements;  // Executor::version_elements()
  double elements = 0;                                // of every tensor of the tensor set
  std::vector<int64_t> row_host;                      // arena devices' rows, as uploaded
  // Where each buffer of each tensor is: in place (the caller's device memory, or host memory
  // on the CPU) or in the executor's arena.
  enum class Where : uint8_t { in_place, arena };
  std::vector<Where> where;  // [t * B + b]
  // Each buffer of each tensor in the table: an address (pointer devices) or a byte offset into
  // its arena (arena devices), as last uploaded [t * B + b].
  std::vector<uint64_t> values;
  std::vector<uint64_t> values_sent;           // pointer devices: the table as last written
  std::vector<int64_t> offsets;                // arena devices: element offsets [t * B + b]
  std::vector<bool> host_arena, device_arena;  // per buffer: tensors staged from host / device
  uint64_t bound = 0;                          // OptimizerState::bindings as last bound
  std::vector<DeviceMemory> arena_arg;         // arena devices: each buffer's memory object
  std::vector<bool> uploaded;                  // per buffer: the device holds the host's data
  std::vector<uint8_t> staging;
  uint64_t copied = 0;  // this step's bytes between the caller's memory and the arenas
  // A pass's launches: one over every chunk with whole buffers, or, on arena devices with a
  // binding limit (DeviceDescription::max_binding), one per window of consecutive chunks whose
  // bytes of every buffer fit in a binding (one window where all do), each buffer bound from
  // where they start. The chunk table and partials are bound from the window's first chunk,
  // and the window's rows hold the tensors' offsets from its bindings: the kernels are the
  // same.
  struct Window {
    size_t first = 0, count = 0;      // chunks [first, first + count)
    std::vector<uint64_t> at, bytes;  // per buffer: the binding's byte offset and extent
  };
  std::vector<Window> windows;
  size_t row_stride = 0;  // bytes of one window's rows in a pass's row buffer
  // Whether passes launch per window, each argument bound from an offset (else once, whole).
  bool windowed() const { return desc.max_binding > 0 && !windows.empty(); }

  // The device step.
  std::optional<DeviceStepHost> step_host;
  DeviceAllocation hypers, ctl, tinfo, vals, fold_rows, first;
  std::vector<double> hypers_sent;  // what `hypers` holds once the queue gets there
  bool can_skip = false;            // the plan has a skip_if
  bool queued_any = false;          // a step returned before the device ran it
  std::vector<std::pair<uint32_t, DeviceMemory>> hyper_sources;  // (hyper, f64 on the device)
  // A sharded device step: the all-reduce buffer and the layout's tables.
  std::shared_ptr<const DeviceShard> shard;
  DeviceAllocation shard_buf, shard_owner, shard_first, shard_tensor_of;
  std::unique_ptr<Graph> graph;

  bool device_step() const { return options.step != StepMode::host; }
  int64_t global_tensors() const { return static_cast<int64_t>(shard->first.size()) - 1; }
  // The all-reduce's length for pass k: per-tensor reductions a slot per piece, all-tensor ones
  // as many, or one per process (by process).
  size_t shard_slots(size_t k) const {
    const size_t S = shard->owner.size(),
                 A = shard->processes > 0 ? static_cast<size_t>(shard->processes) : S;
    return plan::shard_slots_before(plan, k, plan.passes[k].reductions.size()).start(A, S);
  }
  bool arenas_model() const { return desc.addressing == Addressing::arenas; }

  void forget() {
    graph.reset();
    arenas.clear();
    chunk_buf.reset(), partials.reset(), pointer_table.reset();
    uniform_bufs.clear(), row_bufs.clear(), uniform_host.clear();
    hypers.reset(), ctl.reset(), tinfo.reset(), vals.reset(), fold_rows.reset(), first.reset();
    hypers_sent.clear();
    shard_buf.reset(), shard_owner.reset(), shard_first.reset(), shard_tensor_of.reset();
    row_host.clear(), values.clear(), offsets.clear(), where.clear(), arena_arg.clear();
    values_sent.clear();
    windows.clear();
    row_stride = 0;
    uploaded.assign(B, false);
    if (step_host) step_host->forget();
    built = false;
    tensors = {};
    table = {};
  }

  // The plan's kernels with vec=1 in place of the launch's vector width and its vector-only
  // options (vec_fallback): the same chunks, tables and arenas, every binding then aligned
  // enough. A graph of the old kernels is captured again.
  Status scalar_kernels() {
    ExecutorOptions scalar = options;
    scalar.launch = scalar.launch.scalar();
    auto m = dev.load(plan, module_spec(scalar), cache);
    if (!m) return m.error();
    retired.push_back(std::move(module));
    module = std::move(*m);
    if (graph) retired_graphs.push_back(std::move(graph));
    options = scalar;
    return Status::Ok();
  }
  // The kernels `o` asks for.
  static ModuleSpec module_spec(const ExecutorOptions& o) {
    return {o.launch, o.step != StepMode::host, o.cpu_threads, o.cpu_unroll};
  }

  Status build(const OptimizerState& s);
  Status bind(OptimizerState& s);
  Status upload_rows();
  Status transfer_in(OptimizerState& s);
  Status transfer_out(OptimizerState& s, bool state_too);
  std::vector<KernelArg> pass_args(size_t k, size_t window) const;
  Status launch_pass(size_t k);
  bool chunk_bytes(size_t c, size_t b, uint64_t& lo, uint64_t& hi) const;
  Status plan_windows(const OptimizerState& s);
  Expected<std::vector<std::vector<double>>> run_pass_host(size_t k, HostProgram& host,
                                                           OptimizerState& s);
  Status enqueue_device_step();
  Expected<StepResult> run_device_step(OptimizerState& s);
  Status write_hypers(const OptimizerState& s);
  bool queue_only() const;
};

Executor::~Executor() {
  // Steps it queued and did not wait for may still read its tables and kernels: they go only
  // once the queue has run them.
  if (impl_ && impl_->queued_any) (void)impl_->dev.finish();
}

namespace {
// Writes each run of 8-byte entries for which `changed(i)` holds, from `values` to the same
// places at `base`, as one queued write (Device::write_queued): a table that mostly stays as it
// was costs a write or two per step and no wait.
template <class Changed>
Status write_changed_runs(Device& dev, DeviceMemory base, const void* values, size_t n,
                          Changed changed) {
  const auto* bytes = static_cast<const uint8_t*>(values);
  for (size_t i = 0; i < n;) {
    if (!changed(i)) {
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < n && changed(j)) ++j;
    OPTJIT_TRY(dev.write_queued(base.at(i * 8), bytes + i * 8, (j - i) * 8));
    i = j;
  }
  return Status::Ok();
}

// The table entry of a tensor's quantization scales when it is too small to have any.
constexpr uint64_t kNoScales = ~uint64_t{0} - 1;
}  // namespace

Expected<std::unique_ptr<Executor>> Executor::create(const plan::Plan& plan,
                                                     std::shared_ptr<Device> device,
                                                     ExecutorOptions options,
                                                     cache::KernelCache* cache) {
  const DeviceDescription& d = device->description();
  OPTJIT_TRY(options.launch.validate());
  // OpenMP fails (or hangs) on absurd thread counts; nobody needs more than this.
  constexpr int kMaxThreads = 1024;
  if (options.cpu_threads < 0 || options.cpu_threads > kMaxThreads)
    return make_error("{} threads is not between 1 and {} (0 means all cores)", options.cpu_threads,
                      kMaxThreads);
  if (options.step != StepMode::host && !d.device_step)
    return make_error(
        "the {} device runs the scalar program on the host (step mode host), not "
        "{}",
        d.kind, to_string(options.step));
  if (options.step == StepMode::graph && !d.graphs)
    return make_error("the {} device cannot capture graphs; use step mode device", d.kind);
  if (d.max_group > 0 && static_cast<size_t>(options.launch.block) > d.max_group && d.kind != "cpu")
    return make_error("work-group size {} exceeds the device's {}", options.launch.block,
                      d.max_group);
  if (options.step != StepMode::host && d.gpu && d.max_group > 0 &&
      d.max_group < static_cast<size_t>(codegen::kCombineLanes))
    return make_error("the device step needs work-groups of {} and '{}' allows {}",
                      codegen::kCombineLanes, d.name, d.max_group);
  std::unique_ptr<Executor> e(new Executor());
  e->device_ = std::move(device);
  e->impl_ = std::make_unique<Impl>(plan, *e->device_, options);
  Impl& m = *e->impl_;
  m.cache = cache;
  auto module = m.dev.load(plan, Impl::module_spec(options), cache);
  if (!module) return module.error();
  m.module = std::move(*module);
  m.B = plan.buffers.size();
  m.P = plan.passes.size();
  for (const auto& b : plan.buffers) m.es.push_back(size_bytes(b.storage));
  m.quantized = std::any_of(plan.buffers.begin(), plan.buffers.end(),
                            [](const ir::BufferDecl& b) { return b.quant != ir::Quant::none; });
  m.written = visible_writes(plan);
  for (const auto& pass : plan.passes) {
    m.max_reductions = std::max(m.max_reductions, pass.reductions.size());
    bool group = true;
    for (auto v : pass.uniforms) group &= plan.program.at(v).rank != Rank::tensor;
    m.per_group.push_back(group && options.step == StepMode::host);
  }
  m.uploaded.assign(m.B, false);
  if (options.step != StepMode::host) m.step_host.emplace(codegen::device_step_layout(plan));
  for (const ir::Inst& in : plan.program.insts) m.can_skip |= in.op == ir::Op::SkipIf;
  return e;
}

const ExecutorOptions& Executor::options() const { return impl_->options; }
const std::string& Executor::vector_fallback() const { return impl_->fallback; }
double Executor::compile_seconds() const { return impl_->module->compile_seconds(); }
bool Executor::kernels_from_cache() const { return impl_->module->from_cache(); }

void Executor::set_shard(std::shared_ptr<const DeviceShard> shard) {
  impl_->shard = std::move(shard);
  impl_->forget();  // the tables are built again, with the shard's, at the next step
}

void Executor::state_changed() {
  impl_->uploaded.assign(impl_->B, false);
  if (impl_->step_host) impl_->step_host->forget();
}

// The tables of one tensor set: chunks, per-pass uniform rows, and the device step's buffers.
// All or nothing: on a failure (out of device memory) nothing is kept, and the next step
// starts again.
Status Executor::Impl::build(const OptimizerState& s) {
  forget();
  auto make = [&]() -> Status {
    tensors = TensorSet::of(s);
    elements = 0;
    for (auto n : tensors.numels) elements += static_cast<double>(n);
    // A chunk of a quantized tensor starts on a quantization block (the kernels quantize whole
    // blocks), so chunks are whole blocks.
    int64_t chunk = options.launch.chunk_elements;
    if (quantized) chunk = (chunk + ir::kQuantBlock - 1) / ir::kQuantBlock * ir::kQuantBlock;
    table = ChunkTable::build(tensors.numels, chunk,
                              desc.host_memory ? 1 : codegen::kArenaAlignElements);
    const size_t T = tensors.numels.size(), G = tensors.group_count;
    arenas.resize(B);
    auto alloc = [&](DeviceAllocation& a, size_t bytes, const char* what) -> Status {
      auto r = runtime::allocate(dev, bytes, what);
      if (!r) return r.error();
      a = std::move(*r);
      return Status::Ok();
    };
    OPTJIT_TRY(alloc(chunk_buf, table.chunks.size() * sizeof(codegen::Chunk),
                     "allocating the chunk table"));
    OPTJIT_TRY(dev.write(chunk_buf.memory(), table.chunks.data(),
                         table.chunks.size() * sizeof(codegen::Chunk)));
    const size_t per_chunk = step_host ? step_host->layout().partials_per_chunk : max_reductions;
    OPTJIT_TRY(alloc(partials, table.chunks.size() * per_chunk * 8, "allocating partials"));
    if (!arenas_model()) OPTJIT_TRY(alloc(pointer_table, T * B * 8, "allocating the tensor table"));
    uniform_host.resize(P);
    for (size_t k = 0; k < P; ++k) {
      const size_t U = std::max<size_t>(plan.passes[k].uniforms.size(), 1);
      const size_t rows_of_uniforms = per_group[k] ? G : T;
      uniform_bufs.emplace_back();
      row_bufs.emplace_back();
      OPTJIT_TRY(alloc(uniform_bufs[k], rows_of_uniforms * U * 8, "allocating uniforms"));
      if (!arenas_model()) OPTJIT_TRY(alloc(row_bufs[k], T * 2 * 8, "allocating the tensor table"));
    }
    if (step_host) {
      const codegen::DeviceStepLayout& layout = step_host->layout();
      const std::vector<double> info = DeviceStepHost::tensor_info(plan, s);
      std::vector<int64_t> firsts(table.first.begin(), table.first.end());
      OPTJIT_TRY(alloc(hypers, G * layout.hypers * 8, "allocating hyperparameters"));
      OPTJIT_TRY(alloc(ctl, layout.ctl_size(G) * 8, "allocating the step's control block"));
      OPTJIT_TRY(alloc(tinfo, info.size() * 8, "allocating the tensor table"));
      OPTJIT_TRY(dev.write(tinfo.memory(), info.data(), info.size() * 8));
      OPTJIT_TRY(alloc(vals, layout.vals_size(G, T) * 8, "allocating the scalar program's values"));
      // Sharded, the folds run over every global tensor.
      const size_t rows = shard ? std::max(T, shard->first.size() - 1) : T;
      OPTJIT_TRY(alloc(fold_rows, layout.fold_rows * rows * 8, "allocating reduction rows"));
      if (shard) {
        if (shard->tensor_of.size() != T)
          return make_error("the sharded step's layout has {} local tensors, the step {}",
                            shard->tensor_of.size(), T);
        auto table_of = [&](DeviceAllocation& a, const std::vector<int64_t>& v,
                            const char* what) -> Status {
          OPTJIT_TRY(alloc(a, v.size() * 8, what));
          return dev.write(a.memory(), v.data(), v.size() * 8);
        };
        OPTJIT_TRY(table_of(shard_owner, shard->owner, "allocating the shard layout"));
        OPTJIT_TRY(table_of(shard_first, shard->first, "allocating the shard layout"));
        OPTJIT_TRY(table_of(shard_tensor_of, shard->tensor_of, "allocating the shard layout"));
        size_t most = 1;
        for (size_t k = 0; k < P; ++k) most = std::max(most, shard_slots(k));
        OPTJIT_TRY(alloc(shard_buf, most * 8, "allocating the sharded step's all-reduce buffer"));
      }
      OPTJIT_TRY(alloc(first, firsts.size() * 8, "allocating the chunk index"));
      OPTJIT_TRY(dev.write(first.memory(), firsts.data(), firsts.size() * 8));
    }
    built = true;
    return Status::Ok();
  };
  if (Status st = make(); !st) {
    forget();
    return st;
  }
  return Status::Ok();
}

// Decides where every buffer of every tensor is this step, allocates the arenas that needs,
// and uploads the tensor table when it changed (gradients may move between steps). One pass
// over the tensors into reused arrays: with 10,000 tensors this runs every step.
Status Executor::Impl::bind(OptimizerState& s) {
  const size_t T = s.tensors.size();
  size_t vec = desc.vector_aligned ? static_cast<size_t>(options.launch.vec) : 1;
  // Staged trips (GpuLaunch::stage) copy a quantized pass's inputs 16 bytes at a time: every
  // buffer but the scales (copied 4 bytes at a time, their element size) needs 16.
  size_t staged = desc.vector_aligned && quantized && options.launch.stage > 0 ? 16 : 1;
  const bool arenas_dev = arenas_model();
  // Arena devices: a buffer is used in place only when every tensor's is in one memory object
  // (a framework's flat buffer); else it goes through the executor's arena.
  std::vector<DeviceMemory> args(B);
  std::vector<bool> common(B, arenas_dev);
  if (arenas_dev)
    for (size_t b = 0; b < B; ++b) {
      for (size_t t = 0; t < T && common[b]; ++t) {
        const DeviceMemory d = s.tensors[t].device[b];
        if (s.tensors[t].numel == 0) continue;
        if (!d || (args[b] && d.handle != args[b].handle)) common[b] = false;
        if (d) args[b] = {d.handle, 0};
      }
      if (!args[b]) common[b] = false;  // no tensor has any: nothing to use in place
      if (!common[b]) args[b] = {};
    }
  const bool first = where.size() != T * B;
  if (first) where.assign(T * B, Where::arena), values.assign(T * B, ~uint64_t{0});
  std::vector<bool> placement_changed(B, first), value_changed(B, first);
  host_arena.assign(B, false);
  device_arena.assign(B, false);
  for (size_t t = 0; t < T; ++t) {
    const TensorState& ts = s.tensors[t];
    for (size_t b = 0; b < B; ++b) {
      const DeviceMemory d = ts.device[b];
      // A tensor too small to quantize has no scales: the kernels see a null pointer (an
      // offset of -1 on arena devices) and take the plain f32 path. Nothing is copied.
      const bool no_scales = plan.buffers[b].per_block && !holds_codes(plan, b - 1, ts);
      // An empty tensor has nothing to move (torch gives one no memory): it stays where it is,
      // else it alone would stage a buffer through the host and make queued steps wait.
      const bool in_place =
          ts.numel == 0 || no_scales || (arenas_dev ? common[b] : (d || desc.host_memory));
      const Where w = in_place ? Where::in_place : Where::arena;
      const size_t i = t * B + b;
      if (where[i] != w) where[i] = w, placement_changed[b] = true;
      uint64_t v;
      if (!in_place) {
        if (ts.numel > 0 && !d && ts.owned[b].empty() && !ts.external[b])
          return make_error("tensor '{}' has no {} (neither host nor device memory)", ts.name,
                            plan.buffers[b].name);
        (d ? device_arena : host_arena)[b] = true;
        // Where the arena holds it (filled in below if the arena does not exist yet).
        v = !arenas[b]   ? ~uint64_t{0}
            : arenas_dev ? static_cast<uint64_t>(table.base[t]) * es[b]
                         : dev.address(arenas[b].memory()) + table.base[t] * es[b];
      } else if (no_scales) {
        v = arenas_dev ? kNoScales : 0;
      } else {
        v = arenas_dev ? d.offset : d ? dev.address(d) : reinterpret_cast<uint64_t>(ts.data(b));
      }
      if (v == values[i]) continue;
      values[i] = v;
      value_changed[b] = true;
      if (!in_place || ts.numel == 0 || no_scales) continue;
      const size_t by_vec = es[b] * (arenas_dev ? 1 : vec);
      size_t need = std::max(by_vec, arenas_dev || plan.buffers[b].per_block ? 1 : staged);
      if (v % need == 0) continue;
      // What asks for the alignment: the vector width, or the staged copies beyond it.
      const std::string who = need > by_vec ? fmt::format("stage={}", options.launch.stage)
                                            : fmt::format("vec={}", options.launch.vec);
      auto misaligned = [&] {
        return fmt::format("tensor '{}': its {} at {:#x} is not aligned to {} bytes", ts.name,
                           plan.buffers[b].name, v, need);
      };
      if (need > es[b] && options.vec_fallback) {
        fallback = fmt::format(
            "{}, which {} (tuned or the device's default) needs: the step runs with vec=1 "
            "instead",
            misaligned(), who);
        OPTJIT_TRY(scalar_kernels());
        vec = 1, staged = 1, need = es[b];
        if (v % need == 0) continue;
      }
      return make_error("{}, which {} needs; bind aligned memory{}", misaligned(),
                        need > es[b] ? who : "its element type",
                        need > es[b] ? " or use a launch with vec=1" : "");
    }
  }
  // Arenas for what is not in place; a buffer whose placement changed is uploaded again.
  bool table_changed = first;
  for (size_t b = 0; b < B; ++b) {
    if (placement_changed[b]) uploaded[b] = false;
    if ((host_arena[b] || device_arena[b]) && !arenas[b]) {
      auto a = runtime::allocate(dev, static_cast<size_t>(table.total) * es[b],
                                 "allocating optimizer state on the device");
      if (!a) return a.error();
      arenas[b] = std::move(*a);
      uploaded[b] = false;
    }
    if (!args[b] && arenas[b]) args[b] = arenas[b].memory();
    // Tensors in the arena: their table entry is where the arena holds them.
    if (placement_changed[b] || value_changed[b]) {
      table_changed = true;
      for (size_t t = 0; t < T; ++t)
        if (where[t * B + b] == Where::arena)
          values[t * B + b] = arenas_dev ? static_cast<uint64_t>(table.base[t]) * es[b]
                                         : dev.address(arenas[b].memory()) + table.base[t] * es[b];
    }
  }
  if (arena_arg != args) arena_arg = std::move(args), table_changed = true;
  if (!table_changed) return Status::Ok();
  if (arenas_dev) {
    offsets.resize(T * B);
    for (size_t i = 0; i < T * B; ++i)
      offsets[i] = values[i] == kNoScales ? -1 : static_cast<int64_t>(values[i] / es[i % B]);
    OPTJIT_TRY(plan_windows(s));
    return upload_rows();
  }
  if (options.queued_steps && values_sent.size() == values.size()) {
    // Only the entries that changed (new gradient memory), queued: a queued step stays queued.
    if (Status st = write_changed_runs(dev, pointer_table.memory(), values.data(), values.size(),
                                       [&](size_t i) { return values[i] != values_sent[i]; });
        !st) {
      values_sent.clear();
      return st;
    }
  } else {
    OPTJIT_TRY(dev.write(pointer_table.memory(), values.data(), values.size() * 8));
  }
  values_sent = values;
  if (row_host.empty()) OPTJIT_TRY(upload_rows());
  return Status::Ok();
}

// Each pass's rows: pointer devices {the tensor's pointer row, its uniform row} (fixed for a
// tensor set); arena devices {every buffer's element offset, then the uniform row's}.
Status Executor::Impl::upload_rows() {
  const size_t T = tensors.numels.size();
  for (size_t k = 0; k < P; ++k) {
    const size_t U = std::max<size_t>(plan.passes[k].uniforms.size(), 1);
    auto row_of = [&](size_t t) { return per_group[k] ? tensors.groups[t] : t; };
    if (arenas_model()) {
      // A region of rows per window, each tensor's offsets counted from the window's bindings.
      const size_t per = row_stride / 8, W = windows.size();
      if (!row_bufs[k] || row_bufs[k].bytes() < W * row_stride) {
        auto r = runtime::allocate(dev, W * row_stride, "allocating the tensor table");
        if (!r) return r.error();
        row_bufs[k] = std::move(*r);
      }
      row_host.assign(W * per, 0);
      for (size_t w = 0; w < W; ++w)
        for (size_t t = 0; t < T; ++t) {
          int64_t* row = row_host.data() + w * per + t * (B + 1);
          for (size_t b = 0; b < B; ++b) {
            const int64_t o = offsets[t * B + b];
            row[b] = o < 0 ? o : o - static_cast<int64_t>(windows[w].at[b] / es[b]);
          }
          row[B] = static_cast<int64_t>(row_of(t) * U);
        }
    } else {
      row_host.assign(2 * T, 0);
      const uint64_t table_at = dev.address(pointer_table.memory()),
                     uniforms_at = dev.address(uniform_bufs[k].memory());
      for (size_t t = 0; t < T; ++t) {
        row_host[2 * t] = static_cast<int64_t>(table_at + t * B * 8);
        row_host[2 * t + 1] = static_cast<int64_t>(uniforms_at + row_of(t) * U * 8);
      }
    }
    OPTJIT_TRY(dev.write(row_bufs[k].memory(), row_host.data(), row_host.size() * 8));
  }
  return Status::Ok();
}

// Host to device before a step: host buffers that need it (everything the first time, then the
// gradients, and the parameters with host_params), and the caller's device memory that could
// not be used in place.
Status Executor::Impl::transfer_in(OptimizerState& s) {
  const size_t T = s.tensors.size();
  for (size_t b = 0; b < B; ++b) {
    if (!arenas[b]) continue;
    if (host_arena[b] &&
        uploads_before_step(plan, b, !uploaded[b], options.resident_grads, options.host_params)) {
      staging.assign(static_cast<size_t>(table.total) * es[b], 0);
      for (size_t t = 0; t < T; ++t)
        if (where[t * B + b] == Where::arena && !s.tensors[t].device[b] && s.tensors[t].numel > 0)
          std::memcpy(staging.data() + table.base[t] * es[b], s.tensors[t].data(b),
                      buffer_bytes(plan, b, s.tensors[t]));
      OPTJIT_TRY(dev.write(arenas[b].memory(), staging.data(), staging.size()));
      copied += staging.size();
    }
    for (size_t t = 0; t < T && device_arena[b]; ++t)
      if (where[t * B + b] == Where::arena && s.tensors[t].device[b] && s.tensors[t].numel > 0) {
        OPTJIT_TRY(dev.copy(arenas[b].memory().at(table.base[t] * es[b]), s.tensors[t].device[b],
                            buffer_bytes(plan, b, s.tensors[t])));
        copied += buffer_bytes(plan, b, s.tensors[t]);
      }
    uploaded[b] = true;
  }
  return Status::Ok();
}

// Device to host (and to the caller's device memory that was not used in place) after a step:
// what it wrote, as copy_back says; with `state_too`, every state buffer.
Status Executor::Impl::transfer_out(OptimizerState& s, bool state_too) {
  const size_t T = s.tensors.size();
  for (size_t b = 0; b < B; ++b) {
    if (!arenas[b] || !uploaded[b]) continue;
    const ir::BufferRole role = plan.buffers[b].role;
    const bool visible = role == ir::BufferRole::param || role == ir::BufferRole::state;
    if (!visible) continue;
    if (!state_too) {
      if (!written[b]) continue;
      for (size_t t = 0; t < T && device_arena[b]; ++t)
        if (where[t * B + b] == Where::arena && s.tensors[t].device[b] && s.tensors[t].numel > 0) {
          OPTJIT_TRY(dev.copy(s.tensors[t].device[b], arenas[b].memory().at(table.base[t] * es[b]),
                              buffer_bytes(plan, b, s.tensors[t])));
          copied += buffer_bytes(plan, b, s.tensors[t]);
        }
    }
    using CopyBack = ExecutorOptions::CopyBack;
    const bool wanted = state_too || options.copy_back == CopyBack::written ||
                        (options.copy_back == CopyBack::params && role == ir::BufferRole::param);
    if (!wanted || !host_arena[b]) continue;
    staging.resize(static_cast<size_t>(table.total) * es[b]);
    OPTJIT_TRY(dev.read(staging.data(), arenas[b].memory(), staging.size()));
    copied += staging.size();
    for (size_t t = 0; t < T; ++t)
      if (where[t * B + b] == Where::arena && !s.tensors[t].device[b] && s.tensors[t].numel > 0)
        std::memcpy(s.tensors[t].data(b), staging.data() + table.base[t] * es[b],
                    buffer_bytes(plan, b, s.tensors[t]));
  }
  return Status::Ok();
}

// The bytes of buffer b's memory argument that chunk c reads or writes (arena devices), as
// the kernels address them (codegen/c_lang.cpp): elements; a quantized buffer's codes at its
// tensor's region (bits per element); per-block scales, from the tensor's first. False for
// none (an empty chunk, a tensor without scales, a buffer without memory).
bool Executor::Impl::chunk_bytes(size_t c, size_t b, uint64_t& lo, uint64_t& hi) const {
  const codegen::Chunk& ch = table.chunks[c];
  const size_t t = static_cast<size_t>(ch.tensor);
  const int64_t o = offsets[t * B + b];
  if (ch.length == 0 || o < 0 || !arena_arg[b]) return false;
  const ir::BufferDecl& d = plan.buffers[b];
  const auto s = static_cast<uint64_t>(ch.offset), e = static_cast<uint64_t>(ch.offset + ch.length);
  const uint64_t base = static_cast<uint64_t>(o) * es[b];
  if (d.per_block) {
    // From the tensor's first scale: the kernels tell a tensor without scales by a negative
    // offset, so a window's offsets of scales stay >= 0.
    const auto blk = static_cast<uint64_t>(ir::quant_block(plan.buffers));
    lo = base, hi = base + (e + blk - 1) / blk * es[b];
  } else if (d.quant != ir::Quant::none && b + 1 < B && offsets[t * B + b + 1] >= 0) {
    const auto bits = static_cast<uint64_t>(ir::info(d.quant).bits);
    lo = base + s * bits / 8, hi = (base + (e * bits + 7) / 8 + 3) / 4 * 4;  // written by words
  } else {
    lo = base + s * es[b], hi = base + e * es[b];
  }
  return true;
}

// The windows of this tensor set's chunks (Impl::windows), from the offsets bind() set.
Status Executor::Impl::plan_windows(const OptimizerState& s) {
  const size_t n = table.chunks.size(), T = tensors.numels.size();
  const uint64_t limit = desc.max_binding, align = desc.binding_alignment;
  windows.clear();
  auto whole = [&] {
    windows.push_back(Window{0, n, std::vector<uint64_t>(B, 0), std::vector<uint64_t>(B, 0)});
  };
  row_stride = (T * (B + 1) * 8 + align - 1) / align * align;
  if (limit == 0 || n == 0) return whole(), Status::Ok();
  // A window starts at a chunk whose table entry (24 bytes) and partials (each pass's own
  // count per chunk) are aligned.
  auto aligned = [&](size_t step) {
    if (step * sizeof(codegen::Chunk) % align != 0) return false;
    for (const auto& pass : plan.passes)
      if (step * pass.reductions.size() * 8 % align != 0) return false;
    return true;
  };
  size_t step = 1;
  while (!aligned(step)) step *= 2;
  std::vector<uint64_t> lo(B), hi(B);
  auto reset = [&] {
    std::fill(lo.begin(), lo.end(), ~uint64_t{0}), std::fill(hi.begin(), hi.end(), 0);
  };
  // Adds chunk c's bytes of every buffer to [lo, hi) while they fit from the aligned start;
  // false where one does not (close() starts again from the window's chunks).
  auto extend = [&](size_t c) {
    for (size_t b = 0; b < B; ++b) {
      uint64_t l, h;
      if (!chunk_bytes(c, b, l, h)) continue;
      const uint64_t nl = std::min(lo[b], l), nh = std::max(hi[b], h);
      if (nh - nl / align * align > limit) return false;
      lo[b] = nl, hi[b] = nh;
    }
    return true;
  };
  auto close = [&](size_t first, size_t end) {
    Window w{first, end - first, std::vector<uint64_t>(B, 0), std::vector<uint64_t>(B, 16)};
    reset();
    for (size_t c = first; c < end; ++c) extend(c);
    for (size_t b = 0; b < B; ++b)
      if (hi[b] > 0) w.at[b] = lo[b] / align * align, w.bytes[b] = hi[b] - w.at[b];
    windows.push_back(std::move(w));
  };
  // Even where everything fits in one window, only the bytes the chunks use are bound: a
  // caller's buffer may be larger than a binding.
  for (size_t first = 0; first < n;) {
    reset();
    size_t c = first, legal = first;  // a window may end where the next may start
    while (c < n && extend(c))
      if (++c % step == 0 || c == n) legal = c;
    if (legal == first) {
      const codegen::Chunk& ch = table.chunks[c];
      return make_error(
          "tensor '{}': {} chunks of {} elements from element {} span more than the {} bytes "
          "'{}' binds to a kernel; use a smaller chunk (--launch chunk=N)",
          s.tensors[static_cast<size_t>(ch.tensor)].name, step, ch.length, ch.offset, limit,
          desc.name);
    }
    close(first, legal);
    first = legal;
  }
  return Status::Ok();
}

std::vector<KernelArg> Executor::Impl::pass_args(size_t k, size_t window) const {
  const bool whole = !windowed();
  static const Window kNone;
  const Window& w = whole ? kNone : windows[window];
  std::vector<KernelArg> args;
  if (arenas_model()) {
    for (size_t b = 0; b < B; ++b)
      args.push_back(whole || !arena_arg[b] ? KernelArg::mem(arena_arg[b])
                                            : KernelArg::mem(arena_arg[b].at(w.at[b]), w.bytes[b]));
    args.push_back(KernelArg::mem(uniform_bufs[k].memory()));
    args.push_back(whole
                       ? KernelArg::mem(row_bufs[k].memory())
                       : KernelArg::mem(row_bufs[k].memory().at(window * row_stride), row_stride));
  } else {
    args.push_back(KernelArg::mem(row_bufs[k].memory()));
  }
  const size_t n = whole ? table.chunks.size() : w.count;
  const size_t first = whole ? 0 : w.first;
  args.push_back(whole ? KernelArg::mem(chunk_buf.memory())
                       : KernelArg::mem(chunk_buf.memory().at(first * sizeof(codegen::Chunk)),
                                        n * sizeof(codegen::Chunk)));
  args.push_back(KernelArg::i64(static_cast<int64_t>(n)));
  // Reduction r of chunk c is at partials[c * R + r], R the pass's reductions.
  const size_t R = plan.passes[k].reductions.size();
  args.push_back(whole || R == 0 ? KernelArg::mem(partials.memory())
                                 : KernelArg::mem(partials.memory().at(first * R * 8), n * R * 8));
  if (device_step()) args.push_back(KernelArg::mem(ctl.memory()));
  return args;
}

// A pass's launches, one per window.
Status Executor::Impl::launch_pass(size_t k) {
  for (size_t w = 0; w < std::max<size_t>(windows.size(), 1); ++w) {
    const auto args = pass_args(k, w);
    const auto n = static_cast<int64_t>(windowed() ? windows[w].count : table.chunks.size());
    OPTJIT_TRY(module->launch({KernelId::pass, static_cast<uint32_t>(k)},
                              static_cast<size_t>(options.launch.grid(n, desc.compute_units)),
                              static_cast<size_t>(options.launch.block), args));
  }
  return Status::Ok();
}

Expected<std::vector<std::vector<double>>> Executor::Impl::run_pass_host(size_t k,
                                                                         HostProgram& host,
                                                                         OptimizerState& s) {
  const plan::Pass& pass = plan.passes[k];
  const size_t U = std::max<size_t>(pass.uniforms.size(), 1), R = pass.reductions.size();
  std::vector<double>& u = uniform_host[k];
  if (per_group[k]) {
    // One row per group when the uniforms are all per-step scalars (the common case), so
    // 10,000 tensors do not copy them 10,000 times.
    u.assign(s.groups.size() * U, 0.0);
    std::vector<bool> done(s.groups.size(), false);
    std::vector<double> row;
    for (size_t t = 0; t < s.tensors.size() && !pass.uniforms.empty(); ++t) {
      const uint32_t g = s.tensors[t].group;
      if (done[g]) continue;
      host.uniforms(k, t, row);
      std::copy(row.begin(), row.end(), u.begin() + static_cast<std::ptrdiff_t>(g * U));
      done[g] = true;
    }
  } else {
    u = host.uniform_table(k, U);
  }
  OPTJIT_TRY(dev.write_async(uniform_bufs[k].memory(), u.data(), u.size() * 8));
  // What the pass moves (StepResult::moved_bytes, version_elements()): without versions its
  // bytes over every element; with versions each tensor's, chosen from the uniforms the kernels
  // read (bit g of the version is guard g): a loop over the tensors only for such passes.
  if (version_elements.empty())
    for (const auto& p : plan.passes)
      version_elements.emplace_back(std::max<size_t>(p.versions.size(), 1), 0.0);
  if (pass.versions.empty()) {
    moved += (pass.bytes_read + pass.bytes_written) * elements;
    version_elements[k][0] += elements;
  }
  for (size_t t = 0; t < s.tensors.size() && !pass.versions.empty(); ++t) {
    const size_t row = per_group[k] ? s.tensors[t].group : t;
    size_t which = 0;
    for (size_t g = 0; g < pass.guards.size(); ++g)
      if (u[row * U + pass.guards[g]] != 0) which |= size_t{1} << g;
    const auto n = static_cast<double>(s.tensors[t].numel);
    moved += (pass.versions[which].bytes_read + pass.versions[which].bytes_written) * n;
    version_elements[k][which] += n;
  }
  OPTJIT_TRY(launch_pass(k));
  const int64_t n = static_cast<int64_t>(table.chunks.size());
  if (R == 0) return std::vector<std::vector<double>>{};
  std::vector<double> got(static_cast<size_t>(n) * R);
  OPTJIT_TRY(dev.read(got.data(), partials.memory(), got.size() * 8));
  return combine_partials(plan, pass, table, got.data());
}

// Every launch of one device step, in order (also what a graph records).
Status Executor::Impl::enqueue_device_step() {
  const codegen::DeviceStepLayout& layout = step_host->layout();
  const int64_t T = static_cast<int64_t>(tensors.numels.size()),
                G = static_cast<int64_t>(tensors.group_count);
  // One work-group per combine: the lanes' work-items on a GPU, one work-item on a CPU device
  // (the order, and so the bits, are the same for any group size).
  const size_t lanes = desc.gpu ? static_cast<size_t>(codegen::kCombineLanes) : 1;
  const auto mem = [](const DeviceAllocation& a) { return KernelArg::mem(a.memory()); };
  for (size_t k = 0; k <= P; ++k) {
    const uint32_t k32 = static_cast<uint32_t>(k);
    const DeviceAllocation& uni = k < P ? uniform_bufs[k] : vals;  // the last writes none
    const KernelArg seg[] = {mem(hypers), mem(ctl),          mem(tinfo),       mem(vals),
                             mem(uni),    KernelArg::i64(T), KernelArg::i64(G)};
    OPTJIT_TRY(module->launch({KernelId::segment, k32},
                              groups_for(static_cast<size_t>(std::max(T, G)), kSegmentGroup),
                              kSegmentGroup, seg));
    if (k == P) break;
    OPTJIT_TRY(launch_pass(k));
    if (layout.combines[k]) {
      const KernelArg c[] = {mem(partials),  mem(first),        mem(vals),
                             mem(fold_rows), KernelArg::i64(T), KernelArg::i64(G)};
      OPTJIT_TRY(module->launch({KernelId::combine, k32},
                                static_cast<size_t>(std::max<int64_t>(T, 1)), lanes, c));
    }
    // By process, this process folds its own tensors before the all-reduce; by tensor (and
    // unsharded) the fold runs after it, over every global tensor.
    const bool by_process = shard && shard->processes > 0;
    auto fold = [&](int64_t rows) -> Status {
      if (!layout.folds[k]) return Status::Ok();
      const KernelArg f[] = {mem(fold_rows), mem(vals), KernelArg::i64(rows), KernelArg::i64(G)};
      return module->launch({KernelId::fold, k32}, 1, lanes, f);
    };
    if (by_process) OPTJIT_TRY(fold(T));
    if (layout.combines[k] && shard) {
      const int64_t S = static_cast<int64_t>(shard->owner.size()), Tg = global_tensors(),
                    Pn = shard->processes;
      const KernelArg out[] = {mem(vals),         mem(fold_rows),     mem(shard_buf),
                               mem(shard_owner),  KernelArg::i64(T),  KernelArg::i64(G),
                               KernelArg::i64(S), KernelArg::i64(Pn), KernelArg::i64(shard->rank)};
      OPTJIT_TRY(module->launch({KernelId::shard_out, k32}, 1, lanes, out));
      OPTJIT_TRY(shard->allreduce(dev, shard_buf.memory(), shard_slots(k)));
      const KernelArg in[] = {
          mem(shard_buf),       mem(vals),         mem(fold_rows),    mem(shard_first),
          mem(shard_tensor_of), KernelArg::i64(T), KernelArg::i64(G), KernelArg::i64(S),
          KernelArg::i64(Tg),   KernelArg::i64(Pn)};
      OPTJIT_TRY(module->launch({KernelId::shard_in, k32}, 1, lanes, in));
    }
    if (!by_process) OPTJIT_TRY(fold(shard ? global_tensors() : T));
  }
  const KernelArg c[] = {mem(ctl), KernelArg::i64(G)};
  return module->launch({KernelId::commit, 0}, 1, 1, c);
}

// The hyperparameters that changed since the last step (a scheduler's lr), each run of them as
// one queued write: nothing waits for the device, and most steps write one value per group.
Status Executor::Impl::write_hypers(const OptimizerState& s) {
  std::vector<double> want = step_host->hypers(s);
  const size_t H = step_host->layout().hypers;
  std::vector<bool> sourced;  // slots copied on the device instead (set_hyper_sources)
  if (!hyper_sources.empty()) {
    sourced.assign(want.size(), false);
    for (const auto& [h, src] : hyper_sources)
      for (size_t g = 0; g < s.groups.size(); ++g) sourced[g * H + h] = true;
  }
  auto changed = [&](size_t i) {  // bitwise, so a NaN is itself
    if (!sourced.empty() && sourced[i]) return false;
    return i >= hypers_sent.size() || std::memcmp(&want[i], &hypers_sent[i], 8) != 0;
  };
  if (Status st = write_changed_runs(dev, hypers.memory(), want.data(), want.size(), changed);
      !st) {
    hypers_sent.clear();
    return st;
  }
  for (const auto& [h, src] : hyper_sources)
    for (size_t g = 0; g < s.groups.size(); ++g)
      if (Status st = dev.copy(hypers.memory().at((g * H + h) * 8), src, 8); !st) {
        hypers_sent.clear();
        return st;
      }
  hypers_sent = std::move(want);
  return Status::Ok();
}

// Whether this step may return once queued (ExecutorOptions::queued_steps): nothing it reads
// or writes is host memory, except state the executor keeps on the device between steps
// (uploaded once, read back by sync_to_host).
bool Executor::Impl::queue_only() const {
  if (!options.queued_steps || (can_skip && !options.defer_skips)) return false;
  for (size_t b = 0; b < B; ++b)
    if (host_arena[b] && (plan.buffers[b].role != ir::BufferRole::state ||
                          options.copy_back == ExecutorOptions::CopyBack::written))
      return false;
  return true;
}

Expected<StepResult> Executor::Impl::run_device_step(OptimizerState& s) {
  if (auto ctl_values = step_host->ctl_to_write(s)) {
    OPTJIT_TRY(dev.write(ctl.memory(), ctl_values->data(), ctl_values->size() * 8));
    step_host->wrote(std::move(*ctl_values));
  }
  OPTJIT_TRY(write_hypers(s));
  if (options.step == StepMode::graph) {
    // The kernels' arguments are addresses fixed for this tensor set (the values behind them
    // change, the addresses do not), so the graph stays valid until the tensors change.
    if (!graph) {
      auto g = dev.capture([&] { return enqueue_device_step(); });
      if (!g) return g.error();
      graph = std::move(*g);
    }
    OPTJIT_TRY(graph->replay());
  } else {
    OPTJIT_TRY(enqueue_device_step());
  }
  if (queue_only()) {
    OPTJIT_TRY(transfer_out(s, false));  // device to device only: queued
    step_host->queued(s, can_skip);
    queued_any = true;
    StepResult r;
    r.queued = can_skip;
    return r;
  }
  const size_t ctl_bytes = step_host->layout().ctl_size(s.groups.size()) * 8;
  if (Status st = dev.read(step_host->read_back(s), ctl.memory(), ctl_bytes); !st) {
    step_host->forget();
    return st.error();
  }
  if (step_host->skipped()) return StepResult{true};
  OPTJIT_TRY(transfer_out(s, false));
  step_host->commit(s);
  return StepResult{false};
}

Status Executor::prepare(OptimizerState& s) {
  Impl& m = *impl_;
  // A tracked state whose epoch is unchanged has the same tensors (a change to them comes with
  // a new epoch), so only untracked or changed states are compared with the tensor set.
  const bool same = m.built && s.bindings.value() != 0 && s.bindings.value() == m.bound;
  if (!same && (!m.built || !m.tensors.matches(s))) {
    OPTJIT_TRY(settle(s));  // the control block goes with the old tables
    OPTJIT_TRY(m.build(s));
    m.bound = 0;
  }
  // The bindings are read again only when they may have changed.
  if (s.bindings.value() == 0 || s.bindings.value() != m.bound) {
    if (Status st = m.bind(s); !st) {
      m.forget();
      return st;
    }
    m.bound = s.bindings.value();
  }
  m.copied = 0;
  m.moved = 0;
  return m.transfer_in(s);
}

Expected<std::vector<std::vector<double>>> Executor::run_pass(size_t k, HostProgram& host,
                                                              OptimizerState& s) {
  if (impl_->device_step())
    return make_error("run_pass() is the host step's; this executor steps on the device");
  return impl_->run_pass_host(k, host, s);
}

Status Executor::finish(OptimizerState& s) {
  OPTJIT_TRY(impl_->dev.finish());
  return impl_->transfer_out(s, false);
}

Expected<StepResult> Executor::step(OptimizerState& s) {
  Impl& m = *impl_;
  OPTJIT_TRY(prepare(s));
  auto r = m.device_step() ? m.run_device_step(s)
                           : drive_step(
                                 m.plan, s,
                                 [&](size_t k, HostProgram& host) -> Status {
                                   auto partial = m.run_pass_host(k, host, s);
                                   if (!partial) return partial.error();
                                   if (!partial->empty()) host.finish_reductions(k, *partial);
                                   return Status::Ok();
                                 },
                                 [&] { return finish(s); });
  if (r) {
    r->copied_bytes = m.copied;
    if (!m.device_step()) r->moved_bytes = m.moved;
  }
  return r;
}

uint64_t Executor::copied_bytes() const { return impl_->copied; }
double Executor::moved_bytes() const { return impl_->moved; }
const std::vector<std::vector<double>>& Executor::version_elements() const {
  return impl_->version_elements;
}

Status Executor::settle(OptimizerState& s) {
  Impl& m = *impl_;
  if (!m.step_host || !m.step_host->stale()) return Status::Ok();
  const size_t ctl_bytes = m.step_host->layout().ctl_size(s.groups.size()) * 8;
  if (Status st = m.dev.read(m.step_host->read_back(s), m.ctl.memory(), ctl_bytes); !st) {
    m.step_host->forget();
    return st;
  }
  m.step_host->commit(s);
  return Status::Ok();
}

bool Executor::count_stale() const { return impl_->step_host && impl_->step_host->count_stale(); }

bool Executor::last_skipped() const {
  return impl_->step_host && impl_->step_host->seen() && impl_->step_host->skipped();
}

void Executor::set_hyper_sources(std::vector<std::pair<uint32_t, DeviceMemory>> sources) {
  impl_->hyper_sources = std::move(sources);
  impl_->hypers_sent.clear();  // every slot again, sourced or not
}

const std::vector<std::pair<uint32_t, DeviceMemory>>& Executor::hyper_sources() const {
  return impl_->hyper_sources;
}

DeviceMemory Executor::skip_flag() const {
  if (!impl_->step_host || !impl_->ctl) return {};
  return impl_->ctl.memory().at(2 * 8);  // ctl[2]: the last step was skipped
}

DeviceMemory Executor::scalar_state_memory(uint32_t group, uint32_t k) const {
  if (!impl_->step_host || !impl_->ctl) return {};
  const size_t S = impl_->step_host->layout().states;
  return impl_->ctl.memory().at((codegen::DeviceStepLayout::kCtlHeader + group * S + k) * 8);
}

Status Executor::sync_to_host(OptimizerState& s) {
  Impl& m = *impl_;
  OPTJIT_TRY(settle(s));
  if (!m.built || !m.tensors.matches(s) || m.where.empty()) return Status::Ok();
  OPTJIT_TRY(m.dev.finish());
  return m.transfer_out(s, true);
}

}  // namespace optjit::runtime
