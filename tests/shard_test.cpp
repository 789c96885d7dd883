// Sharded steps over MPI (api/communicator.h): run by mpiexec on 1, 2 and 4 processes (ctest
// entries shard_test.np1, .np2, .np4). Every process builds the same model; each steps its pieces
// with the communicator, and the unsharded step over the whole model (in the same process,
// without a communicator) is the oracle: whole tensors per process are the same bits, split
// tensors equal to float64 rounding, and in float32 no less accurate against a float64 run.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "api/optimizer.h"

namespace optjit {
namespace {

std::shared_ptr<Communicator> comm() {
  static std::shared_ptr<Communicator> c = [] {
    auto m = mpi_communicator();
    if (!m) {
      ADD_FAILURE() << m.error().message;
      return std::shared_ptr<Communicator>();
    }
    return *m;
  }();
  return c;
}

// MPI, counting what each all-reduce sums.
class Counting final : public Communicator {
 public:
  int rank() const override { return comm()->rank(); }
  int size() const override { return comm()->size(); }
  std::string name() const override { return "mpi"; }
  Status allreduce_sum(std::span<double> data) override {
    sizes.push_back(data.size());
    return comm()->allreduce_sum(data);
  }
  std::vector<size_t> sizes;
};

// The model: tensors of several sizes (one with fewer elements than there are processes).
const std::vector<GlobalTensor> kTensors = {
    {"w0", 64 * 300}, {"w1", 5000}, {"w2", 300}, {"b", 3}, {"w3", 4096}};

double init_value(size_t t, int64_t e) {
  return std::sin(0.37 * static_cast<double>(e) + static_cast<double>(t)) * 0.5;
}
double grad_value(size_t t, int64_t e, int step) {
  return std::cos(0.11 * static_cast<double>(e) * (1 + static_cast<double>(t)) + step) *
         std::exp(-0.0003 * static_cast<double>(e % 5000)) * (t == 3 ? 10.0 : 1.0);
}

// What a process holds: per global tensor, elements [first, first + count) (count 0: nothing).
struct Layout {
  std::vector<int64_t> first, count;
};
Layout whole_tensors(int P, int rank) {  // ZeRO-1 by tensor: tensor t on process t % P
  Layout l;
  for (size_t t = 0; t < kTensors.size(); ++t) {
    const bool mine = static_cast<int>(t) % P == rank;
    l.first.push_back(0);
    l.count.push_back(mine ? kTensors[t].numel : 0);
  }
  return l;
}
Layout slices(int P, int rank) {  // every tensor split in P contiguous pieces (FSDP-like)
  Layout l;
  for (const auto& t : kTensors) {
    const int64_t a = t.numel * rank / P, b = t.numel * (rank + 1) / P;
    l.first.push_back(a);
    l.count.push_back(b - a);
  }
  return l;
}
Layout block_slices(int P, int rank) {  // pieces cut at multiples of 256 elements
  Layout l;
  for (const auto& t : kTensors) {
    const int64_t blocks = (t.numel + 255) / 256;
    const int64_t a = std::min(t.numel, blocks * rank / P * 256),
                  b = std::min(t.numel, blocks * (rank + 1) / P * 256);
    l.first.push_back(a);
    l.count.push_back(b - a);
  }
  return l;
}
Layout everything() {
  Layout l;
  for (const auto& t : kTensors) l.first.push_back(0), l.count.push_back(t.numel);
  return l;
}

// Parameters of dtype T for the pieces of `l`, stepped `steps` times; returns every held value
// (tensor by tensor, as f64). sharded: with the communicator. inf_at: a gradient element set to
// Inf at this step on (tensor, element), if that element is held here.
struct Result {
  std::vector<std::vector<double>> values;  // per global tensor: the held piece
  std::vector<bool> skipped;
  std::string error;
  runtime::TensorFile state;   // export_state() after the last step
  std::vector<DType> exp_avg;  // per global tensor: how its exp_avg is stored
  std::string step_mode;       // Optimizer::step_mode()
};
template <typename T>
Result run(const char* pipeline, const Layout& l, bool sharded, int steps, Backend backend,
           std::vector<runtime::GroupSpec> groups = {},
           std::tuple<int, size_t, int64_t> inf_at = {-1, 0, 0},
           std::optional<bool> device_step = false, ShardOrder order = ShardOrder::by_tensor,
           std::shared_ptr<Communicator> through = nullptr,
           const std::vector<GlobalTensor>& tensors = kTensors) {
  Result out;
  const DType dt = std::is_same_v<T, double> ? DType::f64 : DType::f32;
  std::vector<std::vector<T>> p(kTensors.size()), g(kTensors.size());
  std::vector<Param> params;
  ShardOptions sh;
  sh.comm = through ? through : comm();
  sh.tensors = tensors;
  sh.order = order;
  for (size_t t = 0; t < kTensors.size(); ++t) {
    for (int64_t e = 0; e < l.count[t]; ++e)
      p[t].push_back(static_cast<T>(init_value(t, l.first[t] + e)));
    g[t].resize(p[t].size());
  }
  // A process's empty piece is still a parameter (FSDP2 gives a tensor smaller than the
  // process count empty shards): it contributes nothing and is stepped as nothing.
  for (size_t t = 0; t < kTensors.size(); ++t) {
    params.push_back({kTensors[t].name, p[t].data(), dt, {l.count[t]}});
    sh.offsets.push_back(l.first[t]);
  }
  OptimizerOptions o;
  o.backend = backend;
  o.cache.reset();
  o.groups = std::move(groups);
  if (backend != Backend::cpu && backend != Backend::reference) o.device_step = device_step;
  if (sharded) o.shard = sh;
  auto opt = Optimizer::create(pipeline, params, o);
  if (!opt) {
    out.error = opt.error().message;
    return out;
  }
  out.step_mode = (*opt)->step_mode();
  for (int s = 0; s < steps; ++s) {
    std::vector<const void*> gp;
    for (size_t t = 0; t < kTensors.size(); ++t) {
      for (int64_t e = 0; e < l.count[t]; ++e) {
        g[t][e] = static_cast<T>(grad_value(t, l.first[t] + e, s));
        auto [at, tt, ee] = inf_at;
        if (s >= at && at >= 0 && t == tt && l.first[t] + e == ee)
          g[t][e] = std::numeric_limits<T>::infinity();
      }
      gp.push_back(g[t].data());
    }
    auto r = (*opt)->step(gp);
    if (!r) {
      out.error = r.error().message;
      return out;
    }
    out.skipped.push_back(r->skipped);
  }
  for (size_t t = 0; t < kTensors.size(); ++t) {
    out.values.emplace_back(p[t].begin(), p[t].end());
    auto storage = (*opt)->state_storage(t, "exp_avg");
    out.exp_avg.push_back(storage ? *storage : DType::f64);
  }
  auto st = (*opt)->export_state();
  if (!st) out.error = st.error().message;
  out.state = std::move(*st);
  return out;
}

// The unsharded values of this process's pieces.
std::vector<std::vector<double>> piece_of(const Result& whole, const Layout& l) {
  std::vector<std::vector<double>> out;
  for (size_t t = 0; t < kTensors.size(); ++t)
    out.emplace_back(whole.values[t].begin() + l.first[t],
                     whole.values[t].begin() + l.first[t] + l.count[t]);
  return out;
}

double max_diff(const std::vector<std::vector<double>>& a,
                const std::vector<std::vector<double>>& b, bool relative = false) {
  double worst = 0;
  for (size_t t = 0; t < a.size(); ++t)
    for (size_t e = 0; e < a[t].size(); ++e) {
      double d = std::fabs(a[t][e] - b[t][e]);
      if (relative) d /= std::max(1e-30, std::fabs(b[t][e]));
      worst = std::max(worst, d);
    }
  return worst;
}

int P() { return comm() ? comm()->size() : 1; }
int me() { return comm() ? comm()->rank() : 0; }

const char* kClipAdamW = "chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-2, weight_decay=0.1))";
const char* kInfClipAdamW =
    "chain(clip_grad_norm(max_norm=0.5, norm_type=inf), adamw(lr=1e-2, weight_decay=0.1))";
const char* kLamb = "lamb(lr=1e-2, weight_decay=0.01)";

// Whole tensors per process: the reductions fold the same per-tensor partials in the same order
// as the unsharded step, so every bit is the same, in f32 and f64.
TEST(Shard, WholeTensorsPerProcessStepTheUnshardedBits) {
  ASSERT_TRUE(comm());
  for (const char* pipeline : {kClipAdamW, kInfClipAdamW, kLamb}) {
    const Layout l = whole_tensors(P(), me());
    const Result whole = run<float>(pipeline, everything(), false, 5, Backend::cpu);
    const Result mine = run<float>(pipeline, l, true, 5, Backend::cpu);
    ASSERT_EQ(mine.error, "");
    EXPECT_EQ(mine.values, piece_of(whole, l)) << pipeline;
  }
}

// Tensors split across processes: per-tensor partials are sums of per-piece sums. float64 to
// 1e-12; float32 no less accurate against a float64 run than the unsharded float32 step; the
// inf-norm (a max, exact in any order) the same bits.
TEST(Shard, SplitTensorsMatchTheUnshardedStep) {
  ASSERT_TRUE(comm());
  const Layout l = slices(P(), me());
  for (const char* pipeline : {kClipAdamW, kLamb, kInfClipAdamW}) {
    const Result ref = run<double>(pipeline, everything(), false, 5, Backend::cpu);
    const Result mine64 = run<double>(pipeline, l, true, 5, Backend::cpu);
    ASSERT_EQ(mine64.error, "");
    EXPECT_LE(max_diff(mine64.values, piece_of(ref, l)), 1e-12) << pipeline;
    const Result whole32 = run<float>(pipeline, everything(), false, 5, Backend::cpu);
    const Result mine32 = run<float>(pipeline, l, true, 5, Backend::cpu);
    ASSERT_EQ(mine32.error, "");
    const double err_sharded = max_diff(mine32.values, piece_of(ref, l));
    const double err_whole = max_diff(piece_of(whole32, l), piece_of(ref, l));
    EXPECT_LE(err_sharded, std::max(1.25 * err_whole, 1e-7)) << pipeline;
    if (pipeline == kInfClipAdamW) {
      EXPECT_EQ(mine32.values, piece_of(whole32, l));
    }
  }
}

// The device step, sharded, by tensor and by process: each pass's partials are all-reduced on
// the device between the combine and fold kernels (here on OpenCL, through the host, as any
// communicator without a device path does; NCCL does the same on the stream). The same bits as the
// sharded host step, for split and whole tensors, f32 and f64, with the skip of an Inf on one
// process.
TEST(Shard, TheDeviceStepAllReducesOnTheDeviceAsTheHostStepDoes) {
  ASSERT_TRUE(comm());
  const char* scaler = "chain(grad_scaler(scale=1024), adamw(lr=1e-2))";
  for (ShardOrder order : {ShardOrder::by_tensor, ShardOrder::by_process})
    for (const Layout& l : {slices(P(), me()), whole_tensors(P(), me())})
      for (const char* pipeline : {kClipAdamW, kLamb, kInfClipAdamW, scaler}) {
        SCOPED_TRACE(std::string(pipeline) +
                     (order == ShardOrder::by_process ? ", by process" : ", by tensor"));
        // An Inf in the last element of w1 (on the last process) from step 3, for the scaler.
        const std::tuple<int, size_t, int64_t>
            none = {-1, 0, 0},
            inf = pipeline == scaler ? std::tuple<int, size_t, int64_t>{2, 1, kTensors[1].numel - 1}
                                     : none;
        const Result host =
            run<float>(pipeline, l, true, 4, Backend::opencl, {}, inf, false, order);
        const Result dev = run<float>(pipeline, l, true, 4, Backend::opencl, {}, inf, true, order);
        ASSERT_EQ(dev.error, "");
        EXPECT_EQ(dev.values, host.values);
        EXPECT_EQ(dev.skipped, host.skipped);
        if (pipeline == scaler) {
          EXPECT_EQ(dev.skipped, (std::vector<bool>{false, false, true, true}));
        }
        const Result host64 =
            run<double>(pipeline, l, true, 3, Backend::opencl, {}, none, false, order);
        const Result dev64 =
            run<double>(pipeline, l, true, 3, Backend::opencl, {}, none, true, order);
        ASSERT_EQ(dev64.error, "");
        EXPECT_EQ(dev64.values, host64.values);
      }
  // And against the unsharded step: float64 to 1e-12.
  const Layout l = slices(P(), me());
  const Result ref = run<double>(kLamb, everything(), false, 3, Backend::cpu);
  const Result dev = run<double>(kLamb, l, true, 3, Backend::opencl, {}, {-1, 0, 0}, true);
  EXPECT_LE(max_diff(dev.values, piece_of(ref, l)), 1e-12);
}

// MPI, saying whether its device all-reduce only enqueues (as torch's NCCL through
// optjit.torch does) and counting the device all-reduces.
class Enqueuing final : public Communicator {
 public:
  explicit Enqueuing(bool enqueues) : enqueues_(enqueues) {}
  int rank() const override { return comm()->rank(); }
  int size() const override { return comm()->size(); }
  std::string name() const override { return "mpi, enqueuing"; }
  Status allreduce_sum(std::span<double> data) override { return comm()->allreduce_sum(data); }
  Status allreduce_sum_device(runtime::Device& device, runtime::DeviceMemory data,
                              size_t count) override {
    ++device_calls;
    return Communicator::allreduce_sum_device(device, data, count);
  }
  bool enqueues() const override { return enqueues_; }
  int device_calls = 0;

 private:
  bool enqueues_;
};

// Unless told otherwise, a sharded step on a device steps there when its communicator only
// enqueues (NCCL; torch's NCCL through optjit.torch, which was stepped on the host and so
// waited for the GPU every step), else on the host; the same bits either way.
TEST(Shard, ACommunicatorThatOnlyEnqueuesStepsOnTheDevice) {
  ASSERT_TRUE(comm());
  const Layout l = slices(P(), me());
  const Result want = run<float>(kLamb, l, true, 3, Backend::opencl);
  ASSERT_EQ(want.error, "");
  for (bool enqueues : {false, true}) {
    SCOPED_TRACE(enqueues ? "enqueues" : "synchronises");
    auto c = std::make_shared<Enqueuing>(enqueues);
    const Result got = run<float>(kLamb, l, true, 3, Backend::opencl, {}, {-1, 0, 0}, std::nullopt,
                                  ShardOrder::by_tensor, c);
    ASSERT_EQ(got.error, "");
    EXPECT_EQ(got.step_mode, enqueues ? "device" : "host");
    EXPECT_EQ(c->device_calls > 0, enqueues);
    EXPECT_EQ(got.values, want.values);
  }
}

// The bytes of `name` in a state file, elements [first, first + count) of `size` each.
std::vector<uint8_t> state_bytes(const runtime::TensorFile& f, const std::string& name,
                                 int64_t first, int64_t count, size_t size) {
  const runtime::HostTensor* t = f.find(name);
  if (!t) return {};
  return {t->data.begin() + static_cast<std::ptrdiff_t>(first * size),
          t->data.begin() + static_cast<std::ptrdiff_t>((first + count) * size)};
}

// Quantized state follows the whole tensor: whether a tensor is quantized is decided by its
// whole size (w1's 5,000 elements are, though its pieces on 2 processes have fewer than the
// 4,096 a tensor needs), and pieces cut at block boundaries hold the whole tensor's blocks, so
// the sharded step is the unsharded one bit for bit: parameters, codes and scales.
TEST(Shard, QuantizedStateFollowsTheWholeTensor) {
  ASSERT_TRUE(comm());
  const Layout l = block_slices(P(), me());
  for (const char* format : {"8bit", "4bit", "f8"}) {
    SCOPED_TRACE(format);
    const std::string pipeline =
        fmt::format("adamw(lr=1e-2, weight_decay=0.1, state_format=\"{}\")", format);
    const Result whole = run<float>(pipeline.c_str(), everything(), false, 5, Backend::cpu);
    const Result mine = run<float>(pipeline.c_str(), l, true, 5, Backend::cpu);
    ASSERT_EQ(whole.error, "");
    ASSERT_EQ(mine.error, "");
    EXPECT_EQ(mine.values, piece_of(whole, l));
    EXPECT_EQ(mine.exp_avg, whole.exp_avg);
    // The same on OpenCL, the host step and the device step (its arenas and tensor tables
    // follow the same decision).
    for (bool device_step : {false, true}) {
      const Result ocl =
          run<float>(pipeline.c_str(), l, true, 5, Backend::opencl, {}, {-1, 0, 0}, device_step);
      ASSERT_EQ(ocl.error, "");
      EXPECT_EQ(ocl.values, mine.values) << "device_step " << device_step;
    }
    const int64_t block = std::string(format) == "4bit" ? 128 : 256;
    for (size_t t = 0; t < kTensors.size(); ++t) {
      if (whole.exp_avg[t] != DType::u8 || l.count[t] == 0) continue;
      const std::string name = kTensors[t].name + ".exp_avg";
      const size_t per_byte = std::string(format) == "4bit" ? 2 : 1;  // 4-bit: two codes a byte
      EXPECT_EQ(state_bytes(mine.state, name, 0, l.count[t] / per_byte, 1),
                state_bytes(whole.state, name, l.first[t] / per_byte, l.count[t] / per_byte, 1))
          << name;
      const int64_t blocks = (l.count[t] + block - 1) / block;
      EXPECT_EQ(state_bytes(mine.state, name + ".absmax", 0, blocks, 4),
                state_bytes(whole.state, name + ".absmax", l.first[t] / block, blocks, 4))
          << name;
    }
  }
  // 8-bit: w0, w1 and w3 quantized, w2 and b (under 4,096 elements) not, on every process.
  const Result q = run<float>("adamw(state_format=\"8bit\")", l, true, 1, Backend::cpu);
  EXPECT_EQ(q.exp_avg,
            (std::vector<DType>{DType::u8, DType::u8, DType::f32, DType::f32, DType::u8}));
}

// A piece that cuts a quantization block is an error naming it (its blocks would not be the
// whole tensor's); GlobalTensor::quantize = false keeps such a tensor's state in f32 instead,
// which steps as the unsharded f32 state does.
TEST(Shard, PiecesThatCutQuantizationBlocksAreErrorsOrUnquantized) {
  ASSERT_TRUE(comm());
  if (P() < 2) return;  // one process holds whole tensors: nothing is cut
  const char* q8 = "adamw(lr=1e-2, weight_decay=0.1, state_format=\"8bit\")";
  const Layout l = slices(P(), me());  // w0 (19,200 elements) cut at multiples of 19,200 / P
  const Result cut = run<float>(q8, l, true, 1, Backend::cpu);
  EXPECT_NE(cut.error.find(fmt::format("sharded step: the piece of 'w0' (elements [{}, {}) of "
                                       "19200) cuts the 256-element blocks its state 'exp_avg' "
                                       "is quantized in",
                                       l.first[0], l.first[0] + l.count[0])),
            std::string::npos)
      << cut.error;
  std::vector<GlobalTensor> unquantized = kTensors;
  for (auto& t : unquantized) t.quantize = false;
  const std::tuple<int, size_t, int64_t> none = {-1, 0, 0};
  const Result f32 = run<float>(q8, l, true, 4, Backend::cpu, {}, none, false,
                                ShardOrder::by_tensor, nullptr, unquantized);
  ASSERT_EQ(f32.error, "");
  EXPECT_EQ(f32.exp_avg, std::vector<DType>(kTensors.size(), DType::f32));
  const Result plain =
      run<float>("adamw(lr=1e-2, weight_decay=0.1)", everything(), false, 4, Backend::cpu);
  EXPECT_EQ(f32.values, piece_of(plain, l));
  // Every process must say the same of each tensor: a tensor quantized on one and not on
  // another is a plan mismatch.
  std::vector<GlobalTensor> mixed = kTensors;
  mixed[2].quantize = me() != 0;
  const Result differ = run<float>(q8, block_slices(P(), me()), true, 1, Backend::cpu, {}, none,
                                   false, ShardOrder::by_tensor, nullptr, mixed);
  EXPECT_NE(differ.error.find("plan differs from rank"), std::string::npos) << differ.error;
}

// NCCL needs a GPU: without one (this machine) it is a clear error on every process, before
// any collective call (so none waits for the others).
TEST(Shard, NcclWithoutAGpuIsAClearError) {
  ASSERT_TRUE(comm());
  auto n = nccl_communicator_mpi(0, nullptr);
  ASSERT_FALSE(n);
  EXPECT_TRUE(n.error().message.find("CUDA driver") != std::string::npos ||
              n.error().message.find("no NCCL library") != std::string::npos)
      << n.error().message;
}

// ShardOrder::by_process: all-tensor reductions all-reduce one value per process (its pieces
// folded in local order, the processes then in rank order), per-tensor ones only the pieces of
// split tensors. Float64 to 1e-12 of the unsharded step, float32 no less accurate than it, the
// inf-norm (a max) its bits, a skip on every process, run to run the same bits; and the
// all-reduce is P values for clip + AdamW where by_tensor sends one per piece.
TEST(Shard, ByProcessOrderAllReducesOneValuePerProcess) {
  ASSERT_TRUE(comm());
  const auto by_process = ShardOrder::by_process;
  const std::tuple<int, size_t, int64_t> none = {-1, 0, 0};
  for (const Layout& l : {slices(P(), me()), whole_tensors(P(), me())})
    for (const char* pipeline : {kClipAdamW, kLamb, kInfClipAdamW}) {
      SCOPED_TRACE(pipeline);
      const Result ref = run<double>(pipeline, everything(), false, 4, Backend::cpu);
      const Result mine64 =
          run<double>(pipeline, l, true, 4, Backend::cpu, {}, none, false, by_process);
      ASSERT_EQ(mine64.error, "");
      EXPECT_LE(max_diff(mine64.values, piece_of(ref, l)), 1e-12);
      const Result whole32 = run<float>(pipeline, everything(), false, 4, Backend::cpu);
      const Result a = run<float>(pipeline, l, true, 4, Backend::cpu, {}, none, false, by_process);
      const Result b = run<float>(pipeline, l, true, 4, Backend::cpu, {}, none, false, by_process);
      EXPECT_EQ(a.values, b.values);  // run to run
      const double err = max_diff(a.values, piece_of(ref, l));
      const double err_whole = max_diff(piece_of(whole32, l), piece_of(ref, l));
      EXPECT_LE(err, std::max(1.25 * err_whole, 1e-7));
      if (pipeline == kInfClipAdamW) {
        EXPECT_EQ(a.values, piece_of(whole32, l));
      }
    }
  const char* scaler = "chain(grad_scaler(scale=1024), adamw(lr=1e-2))";
  const Result skip = run<float>(scaler, slices(P(), me()), true, 4, Backend::cpu, {},
                                 {2, 1, kTensors[1].numel - 1}, false, by_process);
  EXPECT_EQ(skip.skipped, (std::vector<bool>{false, false, true, true}));
  // What is all-reduced per step (after the layout check): clip + AdamW's one norm.
  for (auto order : {ShardOrder::by_tensor, by_process}) {
    auto counting = std::make_shared<Counting>();
    const Layout l = slices(P(), me());
    ASSERT_EQ(
        run<float>(kClipAdamW, l, true, 2, Backend::cpu, {}, none, false, order, counting).error,
        "");
    ASSERT_EQ(counting->sizes.size(), 3u);  // the layout, then one per step
    size_t pieces = 0;
    for (const GlobalTensor& t : kTensors)
      pieces += static_cast<size_t>(std::min<int64_t>(t.numel, P()));
    EXPECT_EQ(counting->sizes[1], order == by_process ? static_cast<size_t>(P()) : pieces);
  }
}

// The reference backend (float64 interpreter) shards the same way.
TEST(Shard, TheReferenceBackendShardsToo) {
  ASSERT_TRUE(comm());
  const Layout l = slices(P(), me());
  const Result ref = run<double>(kLamb, everything(), false, 3, Backend::reference);
  const Result mine = run<double>(kLamb, l, true, 3, Backend::reference);
  ASSERT_EQ(mine.error, "");
  EXPECT_LE(max_diff(mine.values, piece_of(ref, l)), 1e-12);
}

// An Inf in one process's piece only: every process skips, parameters unchanged bit for bit.
TEST(Shard, AnInfOnOneProcessSkipsTheStepOnEvery) {
  ASSERT_TRUE(comm());
  const char* pipeline = "chain(grad_scaler(scale=1024), adamw(lr=1e-2))";
  const Layout l = slices(P(), me());
  const int64_t e = kTensors[1].numel - 1;  // the last element of w1: on the last process
  const Result whole = run<float>(pipeline, everything(), false, 4, Backend::cpu, {}, {2, 1, e});
  const Result mine = run<float>(pipeline, l, true, 4, Backend::cpu, {}, {2, 1, e});
  ASSERT_EQ(mine.error, "");
  EXPECT_EQ(mine.skipped, (std::vector<bool>{false, false, true, true}));
  EXPECT_EQ(mine.skipped, whole.skipped);
  const Result before = run<float>(pipeline, l, true, 2, Backend::cpu);
  EXPECT_EQ(mine.values, before.values);  // the skipped steps left every parameter as it was
  EXPECT_LE(max_diff(mine.values, piece_of(whole, l), true), 1e-6);
}

// Parameter groups with their own hyperparameters, and a custom transform with a global norm,
// a skip_if and a scalar state.
TEST(Shard, GroupsAndCustomTransformsWithGlobalReductions) {
  ASSERT_TRUE(comm());
  const Layout l = slices(P(), me());
  std::vector<runtime::GroupSpec> groups = {{{"w1", "b"}, {{"lr", 0.1}}}};
  const Result ref = run<double>(kClipAdamW, everything(), false, 4, Backend::cpu, groups);
  const Result mine = run<double>(kClipAdamW, l, true, 4, Backend::cpu, groups);
  ASSERT_EQ(mine.error, "");
  EXPECT_LE(max_diff(mine.values, piece_of(ref, l)), 1e-12);
  const char* custom = R"(
    transform normalized(lr=0.01, threshold=10) {
      scalar big_steps = 0
      let n = norm(grad)
      skip_if any_nonfinite(grad)
      big_steps = big_steps + (n > threshold ? 1 : 0)
      param = param - lr * grad / (n + 1e-12)
    }
    normalized(lr=0.5))";
  const Result cref = run<double>(custom, everything(), false, 3, Backend::cpu);
  const Result cmine = run<double>(custom, l, true, 3, Backend::cpu);
  ASSERT_EQ(cmine.error, "");
  EXPECT_LE(max_diff(cmine.values, piece_of(cref, l)), 1e-12);
}

// A piece knows where it sits in the whole model: `numel` is its whole tensor's element count,
// and stochastic rounding draws the random bits of the element's place in the global tensor
// table (ir/stochastic_round.h). So a step with no global reduction gives the unsharded step's
// bits on any layout, whole tensors on other processes than their index, slices of tensors,
// on the host step and on the device step.
TEST(Shard, PiecesRoundAndCountAsTheWholeModel) {
  ASSERT_TRUE(comm());
  const char* sr = "adamw(lr=1e-2, weight_decay=0.1, state_format=\"bf16_sr\")";
  const char* by_numel = R"(
    transform by_numel(lr=0.01) {
      param = param - lr * grad * sqrt(numel) / 64
    }
    by_numel())";
  for (const char* pipeline : {sr, by_numel})
    for (const Layout& l : {whole_tensors(P(), me()), slices(P(), me())}) {
      SCOPED_TRACE(pipeline);
      const Result whole = run<float>(pipeline, everything(), false, 4, Backend::cpu);
      const Result mine = run<float>(pipeline, l, true, 4, Backend::cpu);
      ASSERT_EQ(mine.error, "");
      EXPECT_EQ(mine.values, piece_of(whole, l));
      const Result dev = run<float>(pipeline, l, true, 4, Backend::opencl, {}, {-1, 0, 0}, true);
      ASSERT_EQ(dev.error, "");
      EXPECT_EQ(dev.values, piece_of(whole, l));
    }
}

// Different pipelines on different processes, and pieces that do not cover a tensor: a clear
// error on every process at the first step, not a hang or wrong numbers.
TEST(Shard, MismatchedPlansAndLayoutsAreErrorsOnEveryProcess) {
  ASSERT_TRUE(comm());
  if (P() < 2) return;  // needs a peer: the np2 and np4 runs check it
  const Result mixed =
      run<float>(me() == 0 ? kClipAdamW : kLamb, slices(P(), me()), true, 1, Backend::cpu);
  EXPECT_NE(mixed.error.find("plan differs from rank"), std::string::npos) << mixed.error;
  Layout gap = slices(P(), me());
  if (me() == 0) gap.count[0] -= 1;  // element w0[n/P - 1] is on no process
  const Result holes = run<float>(kClipAdamW, gap, true, 1, Backend::cpu);
  EXPECT_NE(holes.error.find("tensor 'w0': elements ["), std::string::npos) << holes.error;
  EXPECT_NE(holes.error.find(") are on no process"), std::string::npos) << holes.error;
}

}  // namespace
}  // namespace optjit

// --die: the last process exits in the middle of its second step's work (a crashed peer); the
// others must not hang: ctest's shard_test.dead_peer expects mpiexec to end the job, naming it.
int die_mid_step() {
  using namespace optjit;
  const Layout l = slices(P(), me());
  std::vector<float> p(static_cast<size_t>(l.count[0]), 1.0f), g(p.size(), 0.5f);
  ShardOptions sh{comm(), {kTensors[0]}, {l.first[0]}};
  OptimizerOptions o;
  o.cache.reset();
  o.shard = sh;
  auto opt = Optimizer::create(kClipAdamW, {{"w0", p.data(), DType::f32, {l.count[0]}}}, o);
  if (!opt) return 2;
  for (int s = 0; s < 3; ++s) {
    if (s == 1 && me() == P() - 1) std::_Exit(3);
    auto r = (*opt)->step({g.data()});
    if (!r) {
      std::fprintf(stderr, "rank %d: %s\n", me(), r.error().message.c_str());
      return 4;
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (!optjit::comm()) return 1;
  if (argc > 1 && std::string(argv[1]) == "--die") return die_mid_step();
  return RUN_ALL_TESTS();  // every process runs every test (with --gtest_brief=1: failures only)
}
