// optjit._optjit: the C++ optimizer (api/optimizer.h) over DLPack arrays. Any array that speaks
// DLPack (NumPy, PyTorch, JAX, CuPy) is used where it lives: host arrays on the CPU, CUDA arrays
// on the GPU through their device address and the caller's stream. Nothing is copied; an array
// that is not contiguous, or on a device optjit cannot use, is an error. The PyTorch optimizer
// (optjit/torch.py) is a thin layer over this.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "api/optimizer.h"
#include "ir/builtins.h"
#include "ir/compile.h"
#include "runtime/cuda_api.h"
#include "runtime/device.h"

namespace nb = nanobind;

namespace optjit::python {

namespace {

/// Every error from C++ reaches Python as optjit.Error with the same one-line message.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
/// A value out of its bounds (a hyperparameter torch's constructor would refuse): also a
/// ValueError in Python, where torch raises one.
struct InvalidValue : Error {
  using Error::Error;
};

[[noreturn]] void raise(const std::string& message) {
  if (message.find(ir::kInvalidMarker) != std::string::npos) throw InvalidValue(message);
  throw Error(message);
}

template <typename T>
T take(Expected<T> e) {
  if (!e) raise(e.error().message);
  return std::move(*e);
}
void check(const Status& s) {
  if (!s) raise(s.error().message);
}

using Array = nb::ndarray<nb::ro>;

// Whether array `a` holds elements of type `d` (the DLPack code and width of each DType).
bool has_dtype(const Array& a, DType d) {
  using Code = nb::dlpack::dtype_code;
  const auto t = a.dtype();
  auto is = [&](Code c, int bits) {
    return t.lanes == 1 && t.code == uint8_t(c) && t.bits == bits;
  };
  switch (d) {
    case DType::f64:
      return is(Code::Float, 64);
    case DType::f32:
      return is(Code::Float, 32);
    case DType::f16:
      return is(Code::Float, 16);
    case DType::bf16:
      return is(Code::Bfloat, 16);
    case DType::u8:
      return is(Code::UInt, 8);
    case DType::u16:
      return is(Code::UInt, 16);
    case DType::i64:
      return is(Code::Int, 64);
    case DType::b1:
      return is(Code::Bool, 8);
  }
  return false;
}

std::string dtype_text(const Array& a);

DType dtype_of(const Array& a, const std::string& what) {
  for (DType d : {DType::f32, DType::f64, DType::f16, DType::bf16})
    if (has_dtype(a, d)) return d;
  throw Error(
      fmt::format("{} is {}, which optjit cannot step; use float32, float64, float16 or "
                  "bfloat16",
                  what, dtype_text(a)));
}

// The array's element type as an error names it ("float32", "int64"; DLPack's codes).
std::string dtype_text(const Array& a) {
  static const char* const names[] = {"int",    "uint",    "float", "opaque",
                                      "bfloat", "complex", "bool"};
  const auto t = a.dtype();
  const char* n = t.code < std::size(names) ? names[t.code] : "code ";
  return fmt::format("{}{}{}", n, t.code < std::size(names) ? "" : std::to_string(t.code), t.bits);
}

std::string shape_text(const std::vector<int64_t>& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

// An array optjit reads (a gradient); else an error naming `what` and why.
template <class What>
Array readable_array(nb::handle obj, const What& what) {
  Array a;
  if (nb::try_cast(obj, a, /*convert=*/false)) return a;
  // An array that cannot be exported says why (NumPy: "DLPack only supports native byte
  // order"); its own words name the problem better than "not an array".
  if (nb::hasattr(obj, "__dlpack__")) {
    try {
      obj.attr("__dlpack__")();
    } catch (nb::python_error& e) {
      throw Error(
          fmt::format("{} cannot be read as an array: {}", what(), nb::str(e.value()).c_str()));
    }
  }
  throw Error(
      fmt::format("{} is not an array (NumPy, PyTorch, CuPy, ... : DLPack or the buffer "
                  "protocol), but a {}",
                  what(), nb::type_name(obj.type()).c_str()));
}

// An array optjit writes in place (a parameter, a state): any array, but not a read-only one
// (np.frombuffer over bytes, a broadcast view), whose memory optjit must not change.
template <class What>
Array writable_array(nb::handle obj, const What& what) {
  // JAX's (and TensorFlow's) arrays are immutable, yet export their memory through DLPack
  // without DLPack 1.0's read-only flag: written in place, every array that shares the buffer
  // (and any compiled function that captured it) would change under JAX.
  if (const std::string mod = nb::cast<std::string>(obj.type().attr("__module__"));
      mod.starts_with("jax") || mod.starts_with("tensorflow"))
    throw Error(fmt::format(
        "{} is a {} array, which is immutable: optjit updates parameters and states in place; "
        "step writable copies (numpy.array(x), or torch tensors) and convert them back",
        what(), mod.starts_with("jax") ? "JAX" : "TensorFlow"));
  // One import as writable (each import calls the object's __dlpack__: for torch, a few
  // microseconds, which a model of many tensors pays per tensor); the read-only import only to
  // tell a read-only array from what is not an array at all.
  if (nb::ndarray<> w; nb::try_cast(obj, w, /*convert=*/false)) return Array(w);
  readable_array(obj, what);  // (throws if it is no array at all)
  throw Error(fmt::format("{} is read-only: optjit updates it in place", what()));
}

DType dtype_named(const std::string& name) {
  auto t = parse_dtype(name);
  if (!t || !is_float(*t))
    throw Error(fmt::format("'{}' is not a float type (f32, f64, f16, bf16)", name));
  return *t;
}

std::vector<int64_t> shape_of(const Array& a) {
  std::vector<int64_t> s;
  for (size_t i = 0; i < a.ndim(); ++i) s.push_back(static_cast<int64_t>(a.shape(i)));
  return s;
}

// The array's strides (in elements) with those of dimensions of size 1 as 0: two arrays of one
// shape hold their elements in the same memory order exactly when these are equal.
std::vector<int64_t> layout_of(const Array& a) {
  std::vector<int64_t> s(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) s[i] = a.shape(i) == 1 ? 0 : a.stride(i);
  return s;
}

// Whether the array's elements fill its memory with no gap and no overlap, in some order of
// its dimensions (row-major, or torch's channels_last, or Fortran's): an elementwise step runs
// over it in memory order.
bool dense(const Array& a) {
  int64_t expect = 1;
  bool row_major = true;
  for (size_t i = a.ndim(); i-- > 0 && row_major;) {
    row_major = a.shape(i) == 1 || a.stride(i) == expect;
    expect *= static_cast<int64_t>(a.shape(i));
  }
  if (row_major || a.size() == 0) return true;
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of dimensions of size > 1
  for (size_t i = 0; i < a.ndim(); ++i)
    if (a.shape(i) != 1) dims.emplace_back(a.stride(i), static_cast<int64_t>(a.shape(i)));
  std::sort(dims.begin(), dims.end());
  expect = 1;
  for (const auto& [stride, size] : dims) {
    if (stride != expect) return false;
    expect *= size;
  }
  return true;
}

// Dense (in any order of its dimensions), or it cannot be stepped in place.
// `what()` names the array in an error; it is called only then (gradients arrive every step).
template <class What>
void check_contiguous(const Array& a, const What& what) {
  if (!dense(a)) {
    bool backwards = false;
    for (size_t i = 0; i < a.ndim(); ++i) backwards |= a.shape(i) > 1 && a.stride(i) < 0;
    throw Error(fmt::format(
        "{} is not contiguous ({}); optjit steps arrays in place and does not copy them (call "
        ".contiguous() first)",
        what(),
        backwards ? "a reversed view: its elements run backwards in memory"
                  : "a slice or an expanded view: its elements do not fill its memory"));
  }
}

// Where an array lives, as the optimizer takes it.
struct Place {
  void* host = nullptr;
  DeviceMemory device;
  int device_type = 1;  // DLPack: 1 CPU, 2 CUDA
  int device_id = 0;
};

// `dense`: the caller has checked that already (a gradient, every step).
template <class What>
Place place_of(const Array& a, const What& what, bool dense = false) {
  if (!dense) check_contiguous(a, what);
  Place p;
  p.device_type = a.device_type();
  p.device_id = a.device_id();
  auto* data = const_cast<void*>(a.data());
  if (p.device_type == nb::device::cpu::value) {
    p.host = data;
  } else if (p.device_type == nb::device::cuda::value) {
    p.device = cuda_memory(reinterpret_cast<uint64_t>(data));
  } else {
    throw Error(
        fmt::format("{} is on a device optjit cannot use (DLPack device type {}); it "
                    "steps CPU and CUDA arrays",
                    what(), p.device_type));
  }
  return p;
}

ir::Quant quant_named(const std::string& name) {
  auto q = ir::parse_quant(name);
  if (!q) throw Error(fmt::format("unknown quantized format '{}' ({})", name, ir::quant_names()));
  return *q;
}

// What a Python exception raised inside a callback says, on one line: its type and message
// (nanobind's what() appends the whole traceback, which made a dead peer's error a page).
std::string exception_text(const std::exception& e) {
  if (const auto* py = dynamic_cast<const nb::python_error*>(&e)) {
    nb::gil_scoped_acquire gil;
    return fmt::format("{}: {}", nb::type_name(py->type()).c_str(), nb::str(py->value()).c_str());
  }
  return e.what();
}

// A communicator over Python callables (optjit.torch passes ones that call
// torch.distributed.all_reduce on its process group): allreduce_sum hands `fn` the buffer as a
// float64 NumPy array to sum in place; a sharded device step on CUDA hands `device_fn` (where
// given) the buffer's CUDA address and length, to sum in place on the current stream (NCCL
// through torch: no host round trip).
class PyCommunicator final : public Communicator {
 public:
  PyCommunicator(nb::object fn, nb::object device_fn, int rank, int size, std::string name)
      : fn_(std::move(fn)),
        device_fn_(std::move(device_fn)),
        rank_(rank),
        size_(size),
        name_(std::move(name)) {}
  ~PyCommunicator() override {
    nb::gil_scoped_acquire gil;
    fn_.reset();
    device_fn_.reset();
  }
  Status allreduce_sum_device(runtime::Device& device, DeviceMemory data, size_t count) override {
    if (!device_fn_.is_valid() || device_fn_.is_none() || device.description().kind != "cuda")
      return Communicator::allreduce_sum_device(device, data, count);
    nb::gil_scoped_acquire gil;
    try {
      device_fn_(device.address(data), count);
    } catch (const std::exception& e) {
      return make_error("{}: all-reduce of {} values on the device failed on rank {} of {}: {}",
                        name_, count, rank_, size_, exception_text(e));
    }
    return Status::Ok();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return name_; }
  // With device_fn (a NCCL process group), the device all-reduce is torch's NCCL on the current
  // stream, which only enqueues: the sharded step stays on the device. (Not capturable: torch's
  // collective runs on torch's stream, not on the one a graph of the step is captured on.)
  bool enqueues() const override { return device_fn_.is_valid() && !device_fn_.is_none(); }
  Status allreduce_sum(std::span<double> data) override {
    nb::gil_scoped_acquire gil;  // the step runs with the GIL released
    try {
      size_t shape[1] = {data.size()};
      nb::ndarray<nb::numpy, double, nb::ndim<1>> view(data.data(), 1, shape, nb::handle());
      fn_(nb::cast(view, nb::rv_policy::reference));  // the buffer itself, not a copy
    } catch (const std::exception& e) {
      return make_error("{}: all-reduce of {} values failed on rank {} of {}: {}", name_,
                        data.size(), rank_, size_, exception_text(e));
    }
    return Status::Ok();
  }

 private:
  nb::object fn_, device_fn_;
  int rank_, size_;
  std::string name_;
};

// The CUDA driver's handle of the legacy default stream, as a queue (runtime/cuda_api.h).
const uintptr_t kCuStreamLegacy = reinterpret_cast<uintptr_t>(runtime::cuda::kStreamLegacy);

// group_of as the Python API takes it: empty (every parameter in group 0) or one group index
// per parameter (a shorter list left the rest in group 0, silently; a negative index made the
// optimizer match groups by name patterns that the Python API has none of).
void check_group_of(const std::vector<int>& group_of, size_t params) {
  if (!group_of.empty() && group_of.size() != params)
    throw Error(
        fmt::format("group_of: {} entries for {} parameters (one group index each, or "
                    "none: all in group 0)",
                    group_of.size(), params));
  for (size_t i = 0; i < group_of.size(); ++i)
    if (group_of[i] < 0)
      throw Error(fmt::format("group_of[{}] is {}: a group index is 0 (the default) or more", i,
                              group_of[i]));
}

// A str, or a path as open() takes one (os.PathLike, bytes), as a str; anything else is an
// error naming `what`.
std::string str_or_path(nb::handle h, const char* what) {
  if (nb::isinstance<nb::str>(h)) return nb::cast<std::string>(h);
  if (nb::isinstance<nb::bytes>(h) || nb::hasattr(h, "__fspath__"))
    return nb::cast<std::string>(nb::module_::import_("os").attr("fsdecode")(h));
  throw Error(
      fmt::format("{} is a str or an os.PathLike, not {}", what, nb::type_name(h.type()).c_str()));
}

// A pipeline argument: its text, or the path of a file that holds it (as the CLI takes it).
std::string pipeline_text(nb::handle pipeline) {
  return take(read_pipeline_text(str_or_path(pipeline, "pipeline")));
}

class Engine {
 public:
  Engine(nb::handle pipeline, const std::vector<std::string>& names,
         const std::vector<nb::object>& param_objects, const std::vector<int>& group_of,
         size_t groups, const std::string& backend, int device, uintptr_t queue,
         std::optional<std::string> grad_dtype, bool cache, std::optional<bool> device_step,
         bool cuda_graph, const std::string& param_rounding, nb::object shard,
         const std::vector<std::optional<bool>>& quantize) {
    if (names.size() != param_objects.size()) throw Error("names and params differ in length");
    check_group_of(group_of, names.size());
    if (!quantize.empty() && quantize.size() != names.size())
      throw Error(
          fmt::format("quantize: {} entries for {} parameters", quantize.size(), names.size()));
    std::vector<Array> params;
    for (size_t i = 0; i < param_objects.size(); ++i)
      params.push_back(writable_array(param_objects[i],
                                      [&] { return fmt::format("parameter '{}'", names[i]); }));
    std::vector<Param> ps;
    int device_type = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      const std::string what = fmt::format("parameter '{}'", names[i]);
      Place p = place_of(params[i], [&] { return what; });
      if (device_type && p.device_type != device_type)
        throw Error(
            fmt::format("parameter '{}' is on another device than '{}'; one optimizer "
                        "steps arrays on one device",
                        names[i], names[0]));
      device_type = p.device_type;
      ps.push_back({names[i], p.host, dtype_of(params[i], what), shape_of(params[i]),
                    group_of.empty() ? 0 : group_of[i], p.device,
                    quantize.empty() ? std::nullopt : quantize[i]});
    }
    specs_ = specs(ps, grad_dtype, &params);
    // CUDA arrays with no stream named: the legacy default stream (CU_STREAM_LEGACY), where
    // DLPack hands arrays over when no stream is named and where frameworks queue their work
    // by default. optjit's own stream would be unordered with the work that wrote them.
    const bool cuda = device_type == nb::device::cuda::value;
    OptimizerOptions o = options(backend == "auto" ? (cuda ? "cuda" : "cpu") : backend, device,
                                 queue == 0 && cuda ? kCuStreamLegacy : queue, grad_dtype, cache,
                                 param_rounding, groups);
    o.device_step = device_step;
    // On the caller's stream even a step that may be skipped (a GradScaler's) is only queued:
    // step() returns None, and the step count and skip flag stay on the device.
    o.defer_skips = queue != 0;
    o.cuda_graph = cuda_graph;
    if (!shard.is_none()) o.shard = shard_options(shard);
    opt_ = take(Optimizer::create(pipeline_text(pipeline), std::move(ps), std::move(o)));
    params_ = std::move(params);
    warn_new();
  }

  /// Parameters in device memory that speaks no DLPack (wgpu-py's buffers; any WGPUBuffer,
  /// cl_mem or CUDA address), each a (handle, byte offset) with its dtype and shape, on the
  /// caller's device or queue `queue` (a WGPUDevice, a cl_command_queue, a CUstream).
  static Engine on_device(nb::handle pipeline, const std::vector<std::string>& names,
                          const std::vector<std::pair<uint64_t, uint64_t>>& memory,
                          const std::vector<std::string>& dtypes,
                          const std::vector<std::vector<int64_t>>& shapes,
                          const std::vector<int>& group_of, size_t groups,
                          const std::string& backend, int device, uintptr_t queue,
                          std::optional<std::string> grad_dtype, bool cache,
                          const std::string& param_rounding) {
    if (names.size() != memory.size() || names.size() != dtypes.size() ||
        names.size() != shapes.size())
      throw Error("names, memory, dtypes and shapes differ in length");
    check_group_of(group_of, names.size());
    std::vector<Param> ps;
    for (size_t i = 0; i < names.size(); ++i)
      ps.push_back({.name = names[i],
                    .dtype = dtype_named(dtypes[i]),
                    .shape = shapes[i],
                    .group = group_of.empty() ? 0 : group_of[i],
                    .device = device_memory(
                        memory[i], [&] { return fmt::format("parameter '{}'", names[i]); })});
    OptimizerOptions o = options(backend, device, queue, grad_dtype, cache, param_rounding, groups);
    std::vector<Spec> s = specs(ps, grad_dtype);
    Engine e(take(Optimizer::create(pipeline_text(pipeline), std::move(ps), std::move(o))),
             std::move(s));
    e.warn_new();
    return e;
  }
  /// One step with gradients in device memory, each a (handle, byte offset).
  std::optional<bool> step_device(const std::vector<std::pair<uint64_t, uint64_t>>& grads) {
    std::vector<DeviceMemory> device;
    for (size_t i = 0; i < grads.size(); ++i)
      device.push_back(
          device_memory(grads[i], [&] { return fmt::format("the gradient of parameter {}", i); }));
    return run_step(nullptr, &device);
  }

  /// One step; each gradient is an array (host or device, like its parameter). Returns whether a
  /// skip_if (grad_scaler on Inf/NaN) skipped it.
  std::optional<bool> step(const std::vector<Array>& grads) {
    Gradients g = gradients(grads, "step");
    return g.on_device() ? run_step(nullptr, &g.device) : run_step(&g.host, nullptr);
  }

  void bind_state(size_t param, const std::string& buffer, nb::handle obj, bool adopt) {
    const std::string what =
        fmt::format("state '{}' of parameter '{}'", buffer, spec(param, "bind_state").name);
    const Array a = writable_array(obj, [&] { return what; });
    Place p = place_of(a, [&] { return what; });
    const Locked opt = this->opt();
    const DType want = take(opt->state_storage(param, buffer));
    const int64_t n = take(opt->state_elements(param, buffer));
    if (!has_dtype(a, want))
      throw Error(
          fmt::format("{} is {} {}: it must be {}", what, "a", dtype_text(a), to_string(want)));
    if (static_cast<int64_t>(a.size()) != n)
      throw Error(fmt::format("{} has {} elements: it must have {}", what, a.size(), n));
    // A state of the parameter's shape pairs with it in memory order; any other (a flat one,
    // quantization scales) is read in row-major order.
    if (const Spec& s = spec(param, "bind_state"); shape_of(a) == s.shape)
      check_layout(
          a, s, [&] { return what; }, ".contiguous(memory_format=...) makes one");
    else if (layout_of(a) != row_major_layout(shape_of(a)))
      throw Error(
          fmt::format("{} is not row-major: a state of another shape than its parameter "
                      "is read in row-major order",
                      what));
    check(p.host ? opt->bind_state(param, buffer, p.host, adopt)
                 : opt->bind_state(param, buffer, p.device, adopt));
    states_.insert_or_assign({param, buffer}, a);
  }
  void rebind_param(size_t param, nb::handle obj) {
    rebind_params({{param, nb::borrow<nb::object>(obj)}});
  }
  // Several at once, all or nothing: parameters may trade memory (a.data, b.data = b.data,
  // a.data), which one at a time overlaps on the way.
  void rebind_params(const std::vector<std::pair<size_t, nb::object>>& changes) {
    std::vector<Array> arrays;
    std::vector<Optimizer::Rebinding> rebind;
    for (const auto& [param, obj] : changes) {
      const Spec& s = spec(param, "rebind_param");
      const std::string what = fmt::format("parameter '{}'", s.name);
      const Array a = writable_array(obj, [&] { return what; });
      Place p = place_of(a, [&] { return what; });
      if (!has_dtype(a, s.dtype))
        throw Error(fmt::format("{} cannot be rebound to a {} array: it is {}", what, dtype_text(a),
                                to_string(s.dtype)));
      if (shape_of(a) != s.shape)
        throw Error(
            fmt::format("{} cannot be rebound to an array of shape {}: its shape is {} (a "
                        "new shape needs a new optimizer)",
                        what, shape_text(shape_of(a)), shape_text(s.shape)));
      check_layout(
          a, s, [&] { return what + "'s new array"; },
          "a parameter in a new layout needs a new optimizer, which can adopt the "
          "state: optjit.torch builds one");
      arrays.push_back(a);
      rebind.push_back({param, p.host, p.device});
    }
    const Locked opt = this->opt();
    check(opt->rebind_params(rebind));
    for (size_t i = 0; i < changes.size(); ++i) params_[changes[i].first] = arrays[i];
  }
  void set_hyper(const std::string& name, const std::vector<double>& values,
                 std::optional<uint32_t> group) {
    check(opt()->set_hyper(name, values, group));
  }
  double hyper(const std::string& name, uint32_t group) const {
    return take(opt()->hyper(name, group));
  }
  double scalar_state(const std::string& name, uint32_t group) const {
    return take(opt()->scalar_state(name, group));
  }
  void set_scalar_state(const std::string& name, double v, std::optional<uint32_t> group) {
    check(opt()->set_scalar_state(name, v, group));
  }
  void set_step_count(int64_t s) { check(opt()->set_step_count(s)); }
  void initialize_state() { check(opt()->initialize_state()); }
  nb::dict tune(const std::vector<Array>& grads, double budget_seconds, int max_candidates) {
    Gradients g = gradients(grads, "tune");
    autotune::TuneOptions t;
    t.budget_seconds = budget_seconds;
    t.max_candidates = max_candidates;
    t.progress = false;
    autotune::TuneResult r;
    {
      nb::gil_scoped_release release;  // tuning takes seconds
      Stepping stepping(*this);
      auto tuned = g.on_device() ? opt_->tune(g.device, t) : opt_->tune(g.host, t);
      if (!tuned) throw Error(tuned.error().message);
      r = std::move(*tuned);
    }
    warn_new();
    nb::dict d;
    d["winner"] = r.winner;
    d["default_seconds"] = r.default_seconds;
    d["tuned_seconds"] = r.tuned_seconds;
    d["from_cache"] = r.from_cache;
    d["measured"] = r.measured.size();
    return d;
  }

  // The optimizer, one caller at a time. step() and tune() run without the GIL (other Python
  // threads go on meanwhile), so a second thread could step the same optimizer, or set its
  // hyperparameters or bind its state, in the middle of a step: its state, step count and
  // scalars raced. Every call holds this lock while it uses the optimizer, so concurrent calls
  // run one after another. The lock is always awaited with the GIL released: a thread holding
  // it may need the GIL (a torch.distributed communicator calls Python inside the step).
  struct Sync {
    std::mutex mu;
    std::atomic<std::thread::id> stepping{};  // the thread in step() or tune(), if any
  };
  class Locked {
   public:
    Locked(const Engine& e) : lock_(e.sync_->mu, std::try_to_lock), opt_(*e.opt_) {
      // Inside this thread's own step (a communicator's Python callback calling the engine):
      // waiting for the lock would wait for itself.
      if (!lock_.owns_lock() && e.sync_->stepping == std::this_thread::get_id())
        throw Error("this engine was called from inside its own step (from its all-reduce)");
      if (!lock_.owns_lock()) {
        nb::gil_scoped_release release;
        lock_.lock();
      }
    }
    Optimizer* operator->() const { return &opt_; }

   private:
    std::unique_lock<std::mutex> lock_;
    Optimizer& opt_;
  };
  Locked opt() const { return Locked(*this); }
  // The lock for a step or a tuning (taken with the GIL released), and the thread in it.
  struct Stepping {
    explicit Stepping(Engine& e) : sync_(*e.sync_), lock_(sync_.mu) {
      sync_.stepping = std::this_thread::get_id();
    }
    ~Stepping() { sync_.stepping = std::thread::id(); }
    Sync& sync_;
    std::lock_guard<std::mutex> lock_;
  };

  /// step()'s and tune()'s gradients as arrays (nanobind's conversion); else an error saying
  /// why, where nanobind would list the signatures: not a list, a count that is not the
  /// parameters', or the first gradient that is not an array.
  std::vector<Array> gradient_arrays(nb::handle grads, const char* who) const {
    if (std::vector<Array> g; nb::try_cast(grads, g)) return g;
    if (!nb::isinstance<nb::sequence>(grads) || nb::isinstance<nb::str>(grads))
      throw Error(
          fmt::format("{}() takes a list of gradient arrays (one per parameter, in "
                      "order), not {}",
                      who, nb::type_name(grads.type()).c_str()));
    check_count(nb::len(grads), who);
    for (size_t i = 0; i < specs_.size(); ++i)
      readable_array(grads[i],
                     [&] { return fmt::format("the gradient of parameter '{}'", specs_[i].name); });
    throw Error(fmt::format("{}() could not read its gradients", who));
  }

 private:
  // What each parameter's arrays must be: the parameter's dtype and shape, its gradient's dtype.
  struct Spec {
    std::string name;
    DType dtype, grad;
    std::vector<int64_t> shape;
    std::vector<int64_t> layout;  // layout_of the parameter's array (empty: row-major)
  };
  static std::vector<Spec> specs(const std::vector<Param>& ps,
                                 const std::optional<std::string>& grad_dtype,
                                 const std::vector<Array>* arrays = nullptr) {
    std::vector<Spec> out;
    for (size_t i = 0; i < ps.size(); ++i) {
      const Param& p = ps[i];
      out.push_back({p.name, p.dtype, grad_dtype ? dtype_named(*grad_dtype) : p.dtype, p.shape,
                     arrays ? layout_of((*arrays)[i]) : std::vector<int64_t>{}});
    }
    return out;
  }
  // Whether `a` (of the parameter's shape) holds its elements in the parameter's memory order.
  static bool same_layout(const Array& a, const Spec& s) {
    if (s.layout.empty()) return layout_of(a) == row_major_layout(s.shape);
    for (size_t d = 0; d < s.layout.size(); ++d)
      if (a.shape(d) != 1 && a.stride(d) != s.layout[d]) return false;
    return true;
  }
  static std::vector<int64_t> row_major_layout(const std::vector<int64_t>& shape) {
    std::vector<int64_t> s(shape.size());
    int64_t stride = 1;
    for (size_t i = shape.size(); i-- > 0;) {
      s[i] = shape[i] == 1 ? 0 : stride;
      stride *= shape[i];
    }
    return s;
  }
  // `remedy`: what the caller can do, which depends on what the array is.
  template <class What>
  static void check_layout(const Array& a, const Spec& s, const What& what,
                           std::string_view remedy) {
    if (!same_layout(a, s))
      throw Error(fmt::format(
          "{} holds its elements in another memory order than parameter '{}' (strides {} "
          "against {}): an elementwise step pairs them in memory ({})",
          what(), s.name, shape_text(layout_of(a)),
          shape_text(s.layout.empty() ? row_major_layout(s.shape) : s.layout), remedy));
  }
  const Spec& spec(size_t param, const char* what) const {
    if (param >= specs_.size())
      throw Error(fmt::format("{}: no parameter {} (there are {})", what, param, specs_.size()));
    return specs_[param];
  }
  Engine(std::unique_ptr<Optimizer> opt, std::vector<Spec> specs)
      : params_(specs.size()), opt_(std::move(opt)), specs_(std::move(specs)) {}
  // Gradient arrays as the optimizer takes them: host addresses, or device memory.
  struct Gradients {
    std::vector<const void*> host;
    std::vector<DeviceMemory> device;
    bool on_device() const { return !device.empty() && device[0]; }
  };
  // Each gradient's dtype and shape are its parameter's (or grad_dtype's): anything else would
  // be read past its end or as other numbers. The count first: one array where a list of them
  // was meant is a sequence of its rows to nanobind.
  void check_count(size_t n, const char* who) const {
    if (n != specs_.size())
      throw Error(
          fmt::format("{}() got {} gradients for {} parameters (a list of arrays, one per "
                      "parameter in order)",
                      who, n, specs_.size()));
  }
  Gradients gradients(const std::vector<Array>& grads, const char* who) const {
    check_count(grads.size(), who);
    Gradients g;
    g.host.reserve(grads.size());
    g.device.reserve(grads.size());
    for (size_t i = 0; i < grads.size(); ++i) {
      const Array& a = grads[i];
      const Spec& s = specs_[i];
      bool same = a.ndim() == s.shape.size();
      for (size_t d = 0; same && d < s.shape.size(); ++d)
        same = static_cast<int64_t>(a.shape(d)) == s.shape[d];
      if (!same)
        throw Error(
            fmt::format("the gradient of parameter '{}' has shape {}: the parameter's "
                        "is {}",
                        s.name, shape_text(shape_of(a)), shape_text(s.shape)));
      if (!has_dtype(a, s.grad))
        throw Error(fmt::format("the gradient of parameter '{}' is {}: it must be {}", s.name,
                                dtype_text(a), to_string(s.grad)));
      auto what = [&] { return fmt::format("the gradient of parameter '{}'", s.name); };
      check_contiguous(a, what);
      check_layout(a, s, what,
                   "torch gives a parameter's gradient its layout; .contiguous(memory_format=...) "
                   "makes one");
      Place p = place_of(
          a, [&] { return fmt::format("the gradient of parameter {}", i); }, true);
      g.host.push_back(p.host);
      g.device.push_back(p.device);
    }
    return g;
  }
  // One step with host or device gradients; whether a skip_if skipped it.
  // Whether a skip_if skipped the step; nothing when the step was only queued and could have
  // been (OptimizerOptions::defer_skips): last_step_skipped() waits for it.
  std::optional<bool> run_step(const std::vector<const void*>* host,
                               const std::vector<DeviceMemory>* device) {
    runtime::StepResult r;
    {
      nb::gil_scoped_release release;  // a step may take a while; other threads may run
      Stepping stepping(*this);
      auto s = host ? opt_->step(*host) : opt_->step_device(*device);
      if (!s) throw Error(s.error().message);
      r = *s;
    }
    warn_new();  // a step can warn too (memory not aligned for a tuned vector width)
    if (r.queued) return std::nullopt;
    return r.skipped;
  }
  // A (handle, byte offset) pair as device memory; `what()` names it if the handle is null
  // (formatted only then: gradients arrive every step).
  template <class What>
  static DeviceMemory device_memory(const std::pair<uint64_t, uint64_t>& m, What what) {
    if (!m.first) throw Error(what() + ": a null device handle");
    return {m.first, m.second};
  }
  // shard=(all_reduce, rank, size, name, [(name, numel[, quantize])...], [offset per
  // parameter][, order[, all_reduce_device]]), as optjit.torch builds it.
  static ShardOptions shard_options(nb::handle shard) {
    try {
      auto t = nb::cast<nb::tuple>(shard);
      if (t.size() < 6 || t.size() > 8)
        throw Error(
            "shard: expected (all_reduce, rank, size, name, tensors, offsets[, order[, "
            "all_reduce_device]])");
      ShardOptions sh;
      sh.comm = std::make_shared<PyCommunicator>(
          nb::borrow(t[0]), t.size() == 8 ? nb::borrow(t[7]) : nb::none(), nb::cast<int>(t[1]),
          nb::cast<int>(t[2]), nb::cast<std::string>(t[3]));
      for (nb::handle e : nb::cast<nb::sequence>(t[4])) {
        auto entry = nb::cast<nb::tuple>(e);
        if (entry.size() != 2 && entry.size() != 3)
          throw Error("shard: each tensor is (name, numel) or (name, numel, quantize)");
        sh.tensors.push_back({nb::cast<std::string>(entry[0]), nb::cast<int64_t>(entry[1]),
                              entry.size() == 3 ? nb::cast<bool>(entry[2]) : true});
      }
      sh.offsets = nb::cast<std::vector<int64_t>>(t[5]);
      if (t.size() >= 7) {
        const auto order = nb::cast<std::string>(t[6]);
        if (order != "by_tensor" && order != "by_process")
          throw Error(fmt::format("shard_order: '{}' is not by_tensor or by_process", order));
        sh.order = order == "by_process" ? ShardOrder::by_process : ShardOrder::by_tensor;
      }
      return sh;
    } catch (const nb::cast_error&) {  // was "RuntimeError: std::bad_cast"
      throw Error(
          "shard: expected (all_reduce, rank: int, size: int, name: str, [(name, numel[, "
          "quantize]), ...], [offset, ...][, order: str[, all_reduce_device]])");
    }
  }
  static OptimizerOptions options(const std::string& backend, int device, uintptr_t queue,
                                  const std::optional<std::string>& grad_dtype, bool cache,
                                  const std::string& param_rounding, size_t groups) {
    OptimizerOptions o;
    o.backend = Backend(backend);
    o.device = device;
    o.queue = reinterpret_cast<void*>(queue);
    if (grad_dtype) o.grad_dtype = dtype_named(*grad_dtype);
    if (!cache) o.cache.reset();
    if (param_rounding != "nearest" && param_rounding != "stochastic")
      throw Error(fmt::format("param_rounding: '{}' is not nearest or stochastic", param_rounding));
    o.stochastic_param_rounding = param_rounding == "stochastic";
    if (groups == 0) throw Error("groups: 0; the default group is one, so at least 1");
    o.groups.resize(groups - 1);
    return o;
  }
  // The arrays the optimizer reads and writes between calls: the parameters and the bound
  // states, held (an ndarray holds its producer's memory) for as long as the optimizer may touch
  // them, so an array the caller drops is not freed under it. Declared before opt_, so the
  // optimizer is destroyed first. Engine::on_device's raw handles are the caller's to keep.
  std::vector<Array> params_;
  std::map<std::pair<size_t, std::string>, Array> states_;
  std::unique_ptr<Optimizer> opt_;
  // opt(), Stepping: one call at a time (behind a pointer: nanobind moves an Engine returned
  // by value)
  std::unique_ptr<Sync> sync_ = std::make_unique<Sync>();
  std::vector<Spec> specs_;
  size_t warned_ = 0;  // the optimizer's warnings already given to Python

  // The optimizer's warnings not yet given to Python, as Python warnings (RuntimeWarning,
  // "optjit: ..."): a kernel cache that could not be opened, or that rejected or could not
  // store a kernel, is worth knowing where the kernels were meant to come from a warm cache;
  // a step that ran with vec=1 on unaligned memory, where the speed went.
  void warn_new() {
    const auto& w = opt_->warnings();
    while (warned_ < w.size())
      if (PyErr_WarnEx(PyExc_RuntimeWarning, ("optjit: " + w[warned_++]).c_str(), 1) != 0)
        throw nb::python_error();  // warnings are errors here (-W error)
  }
};

}  // namespace

NB_MODULE(_optjit, m) {
  m.doc() = "optjit: optimizer pipelines compiled to fused kernels (the C++ core)";
  m.def(
      "quant_map",
      [](const std::string& name) {
        const std::span<const float> map = ir::info(quant_named(name)).map;
        return std::vector<float>(map.begin(), map.end());
      },
      nb::arg("name"),
      "the values a quantized format's codes stand for (before scaling): 256, or 16 for 4-bit");
  m.def(
      "quant_unsigned", [](const std::string& name) { return ir::unsigned_map(quant_named(name)); },
      nb::arg("name"),
      "whether a quantized format's map holds no negative value (q8u, q4u): its states are "
      "proved never negative");
  m.def(
      "quant_block", [](const std::string& name) { return ir::info(quant_named(name)).block; },
      nb::arg("name"), "the elements per scale (block) of a quantized format");
  m.def(
      "quant_formats",
      [] {
        std::vector<std::string> names;
        for (ir::Quant q : ir::quant_formats()) names.emplace_back(ir::to_string(q));
        return names;
      },
      "every quantized format's name, in the table's order");
  m.def(
      "dequantize",
      [](const std::string& name, nb::ndarray<const uint8_t, nb::c_contig, nb::device::cpu> codes,
         nb::ndarray<const float, nb::c_contig, nb::device::cpu> scales, int64_t numel) {
        const ir::Quant q = quant_named(name);
        if (q == ir::Quant::none || numel < 0 ||
            static_cast<int64_t>(codes.size()) != ir::code_bytes(q, numel) ||
            static_cast<int64_t>(scales.size()) != ir::scale_count(q, numel))
          throw Error(
              fmt::format("dequantize: {} codes and {} scales are not a '{}' state of {} "
                          "elements",
                          codes.size(), scales.size(), name, numel));
        std::vector<float> out(static_cast<size_t>(numel));
        ir::dequantize(q, codes.data(), scales.data(), numel, out.data());
        return nb::bytes(out.data(), out.size() * 4);
      },
      nb::arg("name"), nb::arg("codes"), nb::arg("scales"), nb::arg("numel"),
      "float32 values of a quantized state (codes as `quantize` gives them, one scale per "
      "block): each code's value in the format's map times its block's scale");
  m.def(
      "quant_sizes",
      [](const std::string& name, int64_t numel) {
        const ir::Quant q = quant_named(name);
        return std::make_pair(ir::code_bytes(q, numel), ir::scale_count(q, numel));
      },
      nb::arg("name"), nb::arg("numel"),
      "(code bytes, scales) of a quantized state of `numel` elements in format `name`");
  m.def(
      "quantize",
      [](const std::string& name, nb::ndarray<const float, nb::c_contig, nb::device::cpu> values) {
        const ir::Quant q = quant_named(name);
        const auto n = static_cast<int64_t>(values.size());
        if (ir::info(q).whole_blocks && n % ir::info(q).block != 0)
          throw Error(fmt::format("format '{}' quantizes whole blocks of {} values; got {}", name,
                                  ir::info(q).block, n));
        std::vector<uint8_t> codes(static_cast<size_t>(ir::code_bytes(q, n)));
        std::vector<float> scales(static_cast<size_t>(ir::scale_count(q, n)));
        ir::quantize(q, values.data(), n, codes.data(), scales.data());
        return std::make_pair(nb::bytes(codes.data(), codes.size()),
                              nb::bytes(scales.data(), scales.size() * 4));
      },
      nb::arg("name"), nb::arg("values"),
      "float32 values as a quantized state: (codes, per-block scales), as the cpu backend "
      "stores them (4-bit codes two to a byte, the even element in the high nibble)");
  auto error = nb::exception<Error>(m, "Error", PyExc_RuntimeError);
  // optjit.InvalidValue(Error, ValueError): nanobind's exception<> takes one base.
  PyObject* bases = PyTuple_Pack(2, error.ptr(), PyExc_ValueError);
  PyObject* invalid = PyErr_NewException("optjit._optjit.InvalidValue", bases, nullptr);
  Py_DECREF(bases);
  m.attr("InvalidValue") = nb::steal(invalid);
  // The handle that names the legacy default CUDA stream as a queue (0 is "the engine's own").
  m.attr("CU_STREAM_LEGACY") = kCuStreamLegacy;
  nb::register_exception_translator(
      [](const std::exception_ptr& p, void* type) {
        try {
          std::rethrow_exception(p);
        } catch (const InvalidValue& e) {
          PyErr_SetString(static_cast<PyObject*>(type), e.what());
        }
      },
      invalid);

  nb::class_<Engine>(m, "Engine")
      .def(nb::init<nb::handle, const std::vector<std::string>&, const std::vector<nb::object>&,
                    const std::vector<int>&, size_t, const std::string&, int, uintptr_t,
                    std::optional<std::string>, bool, std::optional<bool>, bool, const std::string&,
                    nb::object, const std::vector<std::optional<bool>>&>(),
           nb::arg("pipeline").none(), nb::arg("names"), nb::arg("params"),
           nb::arg("group_of") = std::vector<int>{}, nb::arg("groups") = 1,
           nb::arg("backend") = "auto", nb::arg("device") = -1, nb::arg("queue") = 0,
           nb::arg("grad_dtype") = nb::none(), nb::arg("cache") = true,
           nb::arg("device_step") = nb::none(), nb::arg("cuda_graph") = false,
           nb::arg("param_rounding") = "nearest", nb::arg("shard") = nb::none(),
           nb::arg("quantize") = std::vector<std::optional<bool>>{},
           "quantize: per parameter, whether its quantized states are quantized (None: as the "
           "format decides by its size; False: f32; True: also below the format's minimum)")
      .def_static("on_device", &Engine::on_device, nb::arg("pipeline").none(), nb::arg("names"),
                  nb::arg("memory"), nb::arg("dtypes"), nb::arg("shapes"),
                  nb::arg("group_of") = std::vector<int>{}, nb::arg("groups") = 1,
                  nb::arg("backend") = "webgpu", nb::arg("device") = -1, nb::arg("queue") = 0,
                  nb::arg("grad_dtype") = nb::none(), nb::arg("cache") = true,
                  nb::arg("param_rounding") = "nearest",
                  "An optimizer over parameters in device memory given as (handle, byte offset) "
                  "pairs (wgpu-py buffers: optjit.webgpu)")
      // step, set_hyper and tune take any object and convert it themselves (nanobind's
      // conversions, as a typed argument's), so that what they cannot convert is named, where
      // nanobind would list the signatures.
      .def(
          "step",
          [](Engine& e, nb::handle grads) { return e.step(e.gradient_arrays(grads, "step")); },
          nb::arg("grads").none())
      .def("step_device", &Engine::step_device, nb::arg("grads"),
           "One step with gradients in device memory, (handle, byte offset) pairs")
      .def("bind_state", &Engine::bind_state, nb::arg("param"), nb::arg("buffer"), nb::arg("array"),
           nb::arg("adopt") = false)
      .def("rebind_param", &Engine::rebind_param, nb::arg("param"), nb::arg("array"))
      .def("rebind_params", &Engine::rebind_params, nb::arg("changes"),
           "Rebinds several parameters at once: a list of (index, array), checked as a whole "
           "(parameters may trade memory).")
      .def(
          "set_hyper",  // (a list of numbers, or one number for a one-value hyperparameter)
          [](Engine& e, const std::string& name, nb::handle values, std::optional<uint32_t> group) {
            if (std::vector<double> v; nb::try_cast(values, v)) return e.set_hyper(name, v, group);
            if (double v; !nb::isinstance<nb::str>(values) && nb::try_cast(values, v))
              return e.set_hyper(name, {v}, group);
            throw Error(
                fmt::format("set_hyper('{}'): values is a number or a list of numbers "
                            "(betas: two), not {}",
                            name, nb::repr(values).c_str()));
          },
          nb::arg("name"), nb::arg("values").none(), nb::arg("group") = nb::none())
      .def("hyper", &Engine::hyper, nb::arg("name"), nb::arg("group") = 0)
      .def("scalar_state", &Engine::scalar_state, nb::arg("name"), nb::arg("group") = 0)
      .def("set_scalar_state", &Engine::set_scalar_state, nb::arg("name"), nb::arg("value"),
           nb::arg("group") = nb::none())
      .def("set_step_count", &Engine::set_step_count)
      .def("initialize_state", &Engine::initialize_state,
           "Every state at its initial value under the current hyperparameters (Rprop's step "
           "sizes and ASGD's eta from each group's lr), the step count 0")
      .def(
          "set_hyper_source",
          [](Engine& e, const std::string& name, std::optional<Array> value) {
            DeviceMemory m;
            if (value) {
              Place p = place_of(*value, [&] { return fmt::format("the source of '{}'", name); });
              if (!p.device || value->dtype() != nb::dtype<double>() || value->size() != 1)
                throw Error(
                    fmt::format("set_hyper_source: '{}' takes one float64 in device "
                                "memory (a CUDA tensor)",
                                name));
              m = p.device;
            }
            check(e.opt()->set_hyper_source(name, m));
          },
          nb::arg("name"), nb::arg("value").none(),
          "Hyperparameter `name` read at each step from one float64 in device memory (a CUDA "
          "tensor kept current on the stream: a GradScaler's scale); None: the host's value")
      .def("last_step_skipped", [](Engine& e) { return take(e.opt()->last_step_skipped()); })
      .def(
          "skip_flag",
          [](const Engine& e) {
            const DeviceMemory m = take(e.opt()->skip_flag());
            return m.handle + m.offset;
          },
          "The CUDA address of one float64: 1 when the last device step was skipped, else 0")
      .def(
          "scalar_state_address",
          [](const Engine& e, const std::string& name, uint32_t group) {
            const DeviceMemory m = take(e.opt()->scalar_state_memory(name, group));
            return m.handle + m.offset;
          },
          nb::arg("name"), nb::arg("group") = 0,
          "The CUDA address of one float64: scalar state `name` of `group` as the last device "
          "step committed it (written on the queue: copy it on the stream, no host round trip)")
      .def(
          "tune",
          [](Engine& e, nb::handle grads, nb::handle budget, nb::handle candidates) {
            std::vector<Array> g = e.gradient_arrays(grads, "tune");
            double b;
            int c;
            if (nb::try_cast(budget, b) && nb::try_cast(candidates, c)) return e.tune(g, b, c);
            throw Error(
                "tune() takes budget_seconds as a number of seconds and max_candidates as a "
                "whole number");
          },
          nb::arg("grads").none(), nb::arg("budget_seconds") = 10.0, nb::arg("max_candidates") = 24)
      .def("sync_state", [](Engine& e) { check(e.opt()->sync_state()); })
      .def(
          "save",
          [](const Engine& e, nb::handle p) {
            check(e.opt()->save(str_or_path(p, "save(): path")));
          },
          nb::arg("path").none())
      .def(
          "load",
          [](Engine& e, nb::handle p) { check(e.opt()->load(str_or_path(p, "load(): path"))); },
          nb::arg("path").none())
      .def_prop_ro("step_count", [](const Engine& e) { return e.opt()->step_count(); })
      .def_prop_ro("state_buffers", [](const Engine& e) { return e.opt()->state_buffers(); })
      .def(
          "state_storage",
          [](const Engine& e, size_t param, const std::string& name) {
            return std::string(to_string(take(e.opt()->state_storage(param, name))));
          },
          nb::arg("param"), nb::arg("name"))
      .def(
          "state_quant",
          [](const Engine& e, const std::string& name) {
            const auto& plan = e.opt()->plan();
            auto b = plan.program.find_buffer(name);
            return b ? std::string(ir::to_string(plan.buffers[*b].quant)) : std::string("none");
          },
          nb::arg("name"))
      .def(
          "state_elements",
          [](const Engine& e, size_t param, const std::string& name) {
            return take(e.opt()->state_elements(param, name));
          },
          nb::arg("param"), nb::arg("name"))
      .def_prop_ro("scalar_states", [](const Engine& e) { return e.opt()->scalar_states(); })
      .def_prop_ro("hyperparameters", [](const Engine& e) { return e.opt()->hyperparameters(); })
      .def_prop_ro("reduces_over_all_tensors",
                   [](const Engine& e) { return e.opt()->reduces_over_all_tensors(); })
      .def_prop_ro("plan", [](const Engine& e) { return plan::describe(e.opt()->plan(), false); })
      .def_prop_ro("bytes_per_param",
                   [](const Engine& e) { return e.opt()->plan().bytes_per_param(); })
      .def_prop_ro("passes", [](const Engine& e) { return e.opt()->plan().passes.size(); })
      .def_prop_ro("programs", [](const Engine& e) { return e.opt()->programs(); })
      .def_prop_ro("backend", [](const Engine& e) { return e.opt()->backend().name(); })
      .def_prop_ro("device_name", [](const Engine& e) { return e.opt()->device_name(); })
      .def_prop_ro("step_mode", [](const Engine& e) { return std::string(e.opt()->step_mode()); })
      .def_prop_ro("kernels_from_cache",
                   [](const Engine& e) { return e.opt()->kernels_from_cache(); })
      .def_prop_ro("launch_from_tuning",
                   [](const Engine& e) { return e.opt()->launch_from_tuning(); })
      .def_prop_ro("warnings", [](const Engine& e) { return e.opt()->warnings(); });

  m.def(
      "webgpu_library", [] { return take(runtime::webgpu_library()); },
      "The path of the wgpu-native library the webgpu backend loads ($OPTJIT_WGPU_LIBRARY, else "
      "the wgpu package's at build time, else the loader's): a caller's device must come from "
      "the same one.");
  m.def(
      "backends",
      [] {
        std::vector<std::string> names = {"auto", "reference"};
        for (const auto& k : runtime::device_kinds()) names.push_back(k.name);
        return names;
      },
      "The backends an optimizer may name: 'auto', 'reference' (the float64 interpreter) and "
      "each kind of device (cpu, opencl, cuda, webgpu).");
  m.def(
      "plan",
      [](nb::handle pipeline, const std::string& dtype) {
        DType t = dtype_named(dtype);
        return plan::describe(take(compile_pipeline(pipeline_text(pipeline), {t, t, t})), true);
      },
      nb::arg("pipeline").none(), nb::arg("dtype") = "f32",
      "The plan of a pipeline (its text, or a file that holds it), as `optjit plan` prints it.");
  m.def(
      "scalar_states",
      [](nb::handle pipeline, const std::string& dtype) {
        DType t = dtype_named(dtype);
        std::vector<std::string> names;
        for (const auto& st :
             take(compile_pipeline(pipeline_text(pipeline), {t, t, t})).program.states)
          names.push_back(st.name);
        return names;
      },
      nb::arg("pipeline").none(), nb::arg("dtype") = "f32",
      "The names of a pipeline's scalar states (one value per param group, as NAdam's "
      "mu_product or ASGD's eta) for parameters of `dtype`, as Engine.scalar_states, without "
      "building an engine.");
  m.def("pipeline_text", &pipeline_text, nb::arg("pipeline").none(),
        "A pipeline's text: the text itself, or the text of the file it names (str or "
        "os.PathLike), read as optjit reads pipeline files.");
}

}  // namespace optjit::python
