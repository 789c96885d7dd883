// optjit::Optimizer: the API a framework calls, over the framework's own memory.
#include "api/optimizer.h"

#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <random>

#include <gtest/gtest.h>

#include "autotune/cpu_tuner.h"
#include "caller_memory.h"
#include "examples.h"
#include "queued_steps.h"
#include "runtime/device.h"

namespace optjit {
namespace {

struct Model {
  std::vector<float> w = std::vector<float>(1000), b = std::vector<float>(10);
  std::vector<float> gw = std::vector<float>(1000), gb = std::vector<float>(10);
  Model() {
    for (size_t i = 0; i < w.size(); ++i) w[i] = 0.01f * static_cast<float>(i % 13) - 0.05f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = 0.1f * static_cast<float>(i);
  }
  void grads(int step) {
    for (size_t i = 0; i < gw.size(); ++i)
      gw[i] = std::sin(0.1f * static_cast<float>(i) + static_cast<float>(step));
    for (size_t i = 0; i < gb.size(); ++i)
      gb[i] = std::cos(0.3f * static_cast<float>(i) + static_cast<float>(step));
  }
  std::vector<Param> params(int bias_group = -1) {
    return {{"w", w.data(), DType::f32, {100, 10}}, {"b", b.data(), DType::f32, {10}, bias_group}};
  }
  std::vector<const void*> grad_ptrs() const { return {gw.data(), gb.data()}; }
};

const char* kPipeline = "chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-2, weight_decay=0.1))";

// Options for `backend` with no kernel cache: what each test compiles is its own.
OptimizerOptions uncached(Backend backend) {
  OptimizerOptions o;
  o.backend = backend;
  o.cache.reset();
  return o;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("optjit_opt_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

// The reference interpreter over the same kind of memory: what a backend's steps are checked
// against.
auto reference(const std::string& pipeline, std::vector<Param> params) {
  OptimizerOptions options;
  options.backend = Backend::reference;
  return Optimizer::create(pipeline, std::move(params), options);
}

TEST(Optimizer, UpdatesTheCallersMemoryLikeTheReference) {
  Model a, b;
  auto cpu = Optimizer::create(kPipeline, a.params());
  auto ref = reference(kPipeline, b.params());
  ASSERT_TRUE(cpu && ref) << (cpu ? ref.error().message : cpu.error().message);
  EXPECT_EQ((*cpu)->plan().bytes_per_param(), 32u);
  for (int step = 0; step < 5; ++step) {
    a.grads(step);
    b.grads(step);
    ASSERT_TRUE((*cpu)->step(a.grad_ptrs()));
    ASSERT_TRUE((*ref)->step(b.grad_ptrs()));
  }
  EXPECT_EQ((*cpu)->step_count(), 5);
  for (size_t i = 0; i < a.w.size(); ++i) ASSERT_NEAR(a.w[i], b.w[i], 2e-6) << i;
  for (size_t i = 0; i < a.b.size(); ++i) ASSERT_NEAR(a.b[i], b.b[i], 2e-6) << i;
  EXPECT_NE(a.w[3], Model().w[3]);  // it really moved
}

// What `child` returns when run in a forked process, or nothing if it did not finish within
// 30 s (the child is then killed): a fork that hangs fails the test instead of the suite.
std::optional<std::string> in_fork(const std::function<std::string()>& child) {
  int fds[2];
  if (::pipe(fds) != 0) return std::nullopt;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    const std::string out = child();
    for (size_t at = 0; at < out.size();) {
      const ssize_t n = ::write(fds[1], out.data() + at, out.size() - at);
      if (n <= 0) break;
      at += static_cast<size_t>(n);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  bool done = false;
  while (!done && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n <= 0)
      done = true;
    else
      out.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  if (!done) ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  if (!done) return std::nullopt;
  return out;
}

// Python's multiprocessing forks by default on Linux. libgomp's thread team does not survive
// fork(): a child stepping after its parent had stepped on two threads waited forever, as did
// one using the parent's OpenCL device (PoCL's threads are gone too). The CPU step runs in the
// fork, with its parent's numbers; an OpenCL device is an error there, opened or inherited.
// Which version of a pass each step ran (plan::Pass::versions), as a benchmark reads it:
// Lookahead syncing every 3rd step over 7 steps is a first step that syncs (1), steps that
// neither start nor sync (2, 3, 5, 6) and later syncs (4, 7), each over all 1010 elements.
TEST(Optimizer, CountsTheElementsEachPassVersionStepped) {
  const std::string pipeline =
      testing::example_transforms("lookahead.opt") + "chain(adamw(lr=1e-2), lookahead(k=3))";
  Model a;
  auto cpu = Optimizer::create(pipeline, a.params(), uncached(Backend::cpu));
  ASSERT_TRUE(cpu) << cpu.error().message;
  EXPECT_TRUE((*cpu)->version_elements().empty()) << "nothing stepped yet";
  double moved = 0;
  for (int step = 0; step < 7; ++step) {
    a.grads(step);
    auto r = (*cpu)->step(a.grad_ptrs());
    ASSERT_TRUE(r) << r.error().message;
    moved += r->moved_bytes;
  }
  const auto elements = (*cpu)->version_elements();
  ASSERT_EQ(elements.size(), 1u);
  ASSERT_EQ(elements[0].size(), 4u);
  std::vector<double> ran;
  for (double e : elements[0])
    if (e > 0) ran.push_back(e);
  std::sort(ran.begin(), ran.end());
  EXPECT_EQ(ran, (std::vector<double>{1010, 2 * 1010, 4 * 1010}));
  EXPECT_EQ(moved, 1010.0 * (32 + 2 * 36 + 4 * 28));  // the first step reads no slow weights
}

TEST(Optimizer, AForkStepsOnTheCpuAndIsToldItCannotUseItsParentsDevice) {
  Model a, b;
  OptimizerOptions two;
  two.cpu.threads = 2;  // a team of threads in the parent, whatever the machine
  two.cpu.chunk_elements = 256;
  two.cache.reset();
  auto cpu = Optimizer::create(kPipeline, a.params(), two);
  auto ref = reference(kPipeline, b.params());
  ASSERT_TRUE(cpu && ref);
  a.grads(0);
  b.grads(0);
  ASSERT_TRUE((*cpu)->step(a.grad_ptrs()));
  ASSERT_TRUE((*ref)->step(b.grad_ptrs()));
  auto stepped = in_fork([&] {
    a.grads(1);
    auto r = (*cpu)->step(a.grad_ptrs());
    if (!r) return r.error().message;
    return std::string(reinterpret_cast<const char*>(a.w.data()), a.w.size() * sizeof(float));
  });
  ASSERT_TRUE(stepped) << "a forked process's CPU step hung";
  ASSERT_EQ(stepped->size(), a.w.size() * sizeof(float)) << *stepped;
  b.grads(1);
  ASSERT_TRUE((*ref)->step(b.grad_ptrs()));
  std::vector<float> w(a.w.size());
  std::memcpy(w.data(), stepped->data(), stepped->size());
  for (size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(w[i], b.w[i], 2e-6) << i;
  EXPECT_NE(w, a.w);  // the fork stepped; the parent did not

  Model c;
  OptimizerOptions ocl_options = uncached(Backend::opencl);
  auto ocl = Optimizer::create(kPipeline, c.params(), ocl_options);
  ASSERT_TRUE(ocl) << ocl.error().message;
  c.grads(0);
  ASSERT_TRUE((*ocl)->step(c.grad_ptrs()));
  auto refused = in_fork([&] {
    auto r = (*ocl)->step(c.grad_ptrs());
    Model d;
    auto fresh = Optimizer::create(kPipeline, d.params(), ocl_options);
    return (r ? std::string("stepped") : r.error().message) + "\n" +
           (fresh ? std::string("opened") : fresh.error().message);
  });
  ASSERT_TRUE(refused) << "a forked process hung on its parent's OpenCL device";
  const std::string parent = std::to_string(::getpid());
  EXPECT_NE(refused->find("this optimizer's opencl device was opened by process " + parent +
                          ", and this process ("),
            std::string::npos)
      << *refused;
  EXPECT_NE(refused->find("\ncannot open a device of kind 'opencl' in process "), std::string::npos)
      << *refused;
  EXPECT_TRUE((*ocl)->step(c.grad_ptrs()));  // the parent's device is unharmed
}

// A framework's process starts warm from the kernel cache: the second optimizer compiles
// nothing, uses the stored tuning decision, and computes the same bytes. A strict cache that
// misses is an error; a cache that cannot be opened is a warning.
TEST(Optimizer, StartsWarmFromTheKernelCacheAndUsesItsTuning) {
  const std::string dir = temp_path("cache");
  std::filesystem::remove_all(dir);
  OptimizerOptions options;
  options.cache = cache::CacheOptions{dir};
  Model a, b;
  auto cold = Optimizer::create(kPipeline, a.params(), options);
  ASSERT_TRUE(cold) << cold.error().message;
  EXPECT_FALSE((*cold)->kernels_from_cache());
  EXPECT_FALSE((*cold)->launch_from_tuning());
  // A decision stored by `optjit tune` (here by hand) for this pipeline, CPU and size.
  {
    auto kc = cache::KernelCache::open({dir});
    ASSERT_TRUE(kc);
    auto target = autotune::cpu_target((*cold)->plan(), 1010);
    ASSERT_TRUE((*kc)->put_decision(target.program, autotune::size_bucket(target.elements),
                                    target.performance, "threads=1,chunk=64,unroll=2"));
  }
  auto warm = Optimizer::create(kPipeline, b.params(), options);
  ASSERT_TRUE(warm) << warm.error().message;
  EXPECT_TRUE((*warm)->launch_from_tuning());
  EXPECT_EQ(autotune::to_string((*warm)->launch()), "threads=1,chunk=64,unroll=2");
  // The tuned kernels (unroll 2) were not compiled yet; a third optimizer finds them too.
  Model c;
  auto warmer = Optimizer::create(kPipeline, c.params(), options);
  ASSERT_TRUE(warmer);
  EXPECT_TRUE((*warmer)->kernels_from_cache());
  for (int step = 0; step < 3; ++step) {
    a.grads(step);
    c.grads(step);
    ASSERT_TRUE((*cold)->step(a.grad_ptrs()));
    ASSERT_TRUE((*warmer)->step(c.grad_ptrs()));
  }
  for (size_t i = 0; i < a.w.size(); ++i) ASSERT_NEAR(a.w[i], c.w[i], 1e-6) << i;
  // Strict: a pipeline the cache has never seen is an error, not a compile.
  OptimizerOptions strict = options;
  strict.cache->strict = true;
  Model d;
  auto miss = Optimizer::create("sgd(lr=0.1)", d.params(), strict);
  ASSERT_FALSE(miss);
  EXPECT_NE(miss.error().message.find("kernel cache miss in strict mode"), std::string::npos)
      << miss.error().message;
  // A cache directory that cannot be created: a warning, and the optimizer works.
  std::ofstream(temp_path("file")) << "x";
  OptimizerOptions broken;
  broken.cache = cache::CacheOptions{temp_path("file") + "/sub"};
  Model e;
  auto works = Optimizer::create(kPipeline, e.params(), broken);
  ASSERT_TRUE(works) << works.error().message;
  ASSERT_EQ((*works)->warnings().size(), 1u);
  EXPECT_NE((*works)->warnings()[0].find("running without the kernel cache"), std::string::npos)
      << (*works)->warnings()[0];
  std::filesystem::remove(temp_path("file"));
  std::filesystem::remove_all(dir);
}

// A framework tunes in process on its own tensors: nothing it owns changes, the winner is in
// use afterwards and stored, and the steps that follow match an untuned optimizer's.
TEST(Optimizer, TunesOnTheCallersTensorsWithoutChangingThem) {
  const std::string dir = temp_path("tune");
  std::filesystem::remove_all(dir);
  OptimizerOptions options;
  options.cache = cache::CacheOptions{dir};
  Model a, b;
  auto tuned = Optimizer::create(kPipeline, a.params(), options);
  auto plain = Optimizer::create(kPipeline, b.params(), OptimizerOptions{.cache = std::nullopt});
  ASSERT_TRUE(tuned && plain);
  a.grads(0);
  b.grads(0);
  ASSERT_TRUE((*tuned)->step(a.grad_ptrs()));  // some state to keep
  ASSERT_TRUE((*plain)->step(b.grad_ptrs()));
  const std::vector<float> w_before = a.w, b_before = a.b;
  const std::string saved = temp_path("before.st"), after = temp_path("after.st");
  ASSERT_TRUE((*tuned)->save(saved));
  autotune::TuneOptions topts;
  topts.seconds_per_candidate = 0.01;
  topts.progress = false;
  a.grads(1);
  auto r = (*tuned)->tune(a.grad_ptrs(), topts);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_GE(r->measured.size(), 2u);
  EXPECT_EQ(a.w, w_before);
  EXPECT_EQ(a.b, b_before);
  EXPECT_EQ((*tuned)->step_count(), 1);
  ASSERT_TRUE((*tuned)->save(after));
  std::ifstream x(saved, std::ios::binary), y(after, std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(x), {}),
            std::string(std::istreambuf_iterator<char>(y), {}));
  EXPECT_TRUE((*tuned)->launch_from_tuning());
  EXPECT_EQ(autotune::to_string((*tuned)->launch()), r->winner);
  for (int step = 1; step < 4; ++step) {
    a.grads(step);
    b.grads(step);
    ASSERT_TRUE((*tuned)->step(a.grad_ptrs()));
    ASSERT_TRUE((*plain)->step(b.grad_ptrs()));
  }
  for (size_t i = 0; i < a.w.size(); ++i) ASSERT_NEAR(a.w[i], b.w[i], 1e-6) << i;
  // Stored: a new optimizer over the same shapes starts with the decision.
  Model c;
  auto next = Optimizer::create(kPipeline, c.params(), options);
  ASSERT_TRUE(next);
  EXPECT_EQ(autotune::to_string((*next)->launch()), r->winner);
  auto wrong = (*tuned)->tune({a.gw.data()}, topts);
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error().message, "tune() got 1 gradients for 2 parameters");
  std::filesystem::remove(saved);
  std::filesystem::remove(after);
  std::filesystem::remove_all(dir);
}

TEST(Optimizer, HyperparametersChangeBetweenStepsWithoutRecompiling) {
  Model m;
  auto opt = Optimizer::create("sgd(lr=0.1)", m.params());
  ASSERT_TRUE(opt);
  EXPECT_EQ(*(*opt)->hyper("lr"), 0.1);
  ASSERT_TRUE((*opt)->set_hyper("lr", 0.0));
  m.grads(0);
  std::vector<float> before = m.w;
  ASSERT_TRUE((*opt)->step(m.grad_ptrs()));
  EXPECT_EQ(m.w, before);  // lr 0: nothing moves
  ASSERT_TRUE((*opt)->set_hyper("sgd.lr", 0.5));
  ASSERT_TRUE((*opt)->step(m.grad_ptrs()));
  EXPECT_FLOAT_EQ(m.w[1], before[1] - 0.5f * m.gw[1]);
  auto bad = (*opt)->set_hyper("momentum", 0.9);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message,
            "no hyperparameter 'momentum' (this pipeline has: sgd.weight_decay, sgd.lr)");
  auto adam = Optimizer::create("adam()", m.params());
  ASSERT_TRUE(adam);
  auto tuple = (*adam)->hyper("betas");
  ASSERT_FALSE(tuple);
  EXPECT_EQ(tuple.error().message, "'betas' is a tuple; ask for one element, e.g. betas.0");
  ASSERT_TRUE((*adam)->set_hyper("betas", std::vector<double>{0.8, 0.9}));
  EXPECT_EQ(*(*adam)->hyper("betas.1"), 0.9);
  // One value for a tuple set every element (betas = 0.95 both betas, where the caller meant
  // one): now an error, and nothing changes; one element by its name still works.
  auto one = (*adam)->set_hyper("betas", 0.95);
  ASSERT_FALSE(one);
  EXPECT_EQ(one.error().message,
            "hyperparameter 'betas' has 2 elements (adam.betas.0, adam.betas.1): give 2 values, "
            "or set one by its name ('adam.betas.0')");
  EXPECT_EQ(*(*adam)->hyper("betas.0"), 0.8);
  EXPECT_EQ(*(*adam)->hyper("betas.1"), 0.9);
  ASSERT_TRUE((*adam)->set_hyper("betas.0", 0.95));
  EXPECT_EQ(*(*adam)->hyper("betas.0"), 0.95);
  EXPECT_EQ(*(*adam)->hyper("betas.1"), 0.9);
  auto two = (*adam)->set_hyper("lr", std::vector<double>{0.1, 0.2});
  ASSERT_FALSE(two);
  EXPECT_EQ(two.error().message, "hyperparameter 'lr' takes 1 value, got 2");
  OptimizerOptions grouped;
  grouped.groups = {{{"b"}, {{"betas", 0.5}}}};
  auto group = Optimizer::create("adam()", m.params(), grouped);
  ASSERT_FALSE(group);
  EXPECT_EQ(group.error().message,
            "parameter group 1: hyperparameter 'betas' has 2 elements (adam.betas.0, "
            "adam.betas.1): give 2 values, or set one by its name ('adam.betas.0')");
}

TEST(Optimizer, ExplicitGroupsHaveTheirOwnHyperparameters) {
  Model m;
  OptimizerOptions options;
  options.groups = {{{}, {{"lr", 0.0}}}};  // group 1: frozen
  auto opt = Optimizer::create(kPipeline, m.params(/*bias_group=*/1), options);
  ASSERT_TRUE(opt) << opt.error().message;
  EXPECT_EQ((*opt)->group_of(1), 1u);
  std::vector<float> b0 = m.b, w0 = m.w;
  m.grads(0);
  ASSERT_TRUE((*opt)->step(m.grad_ptrs()));
  EXPECT_EQ(m.b, b0);
  EXPECT_NE(m.w, w0);
  auto bad = Optimizer::create(kPipeline, m.params(/*bias_group=*/3), options);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message,
            "parameter 'b' is in group 3, but the groups are 0 (the default) to 1");
}

// initialize_state(): the state a framework's optimizer makes at its first step, under the
// hyperparameters as they are then (a warmup scheduler's lr, a group's own): Rprop's step sizes
// are each group's lr, in the optimizer's memory and in memory bound with bind_state alike;
// ASGD's eta is each group's lr; the step count 0. (optjit.torch calls it before binding state,
// which otherwise started from the pipeline text's lr.)
// State is made when it is needed (a step, a checkpoint) or written where the caller binds it,
// not at creation (the state of a model the caller binds all of was allocated, zeroed and
// dropped). Whenever it is made, it is the state as it started: under the hyperparameters at
// creation (or the last initialize_state), not those set since.
TEST(Optimizer, DeferredStateStartsAsItWouldHaveAtCreation) {
  Model m;
  auto opt = Optimizer::create("rprop(lr=0.01)", m.params());
  ASSERT_TRUE(opt) << opt.error().message;
  Optimizer& o = **opt;
  ASSERT_TRUE(o.set_hyper("lr", 0.5));
  std::vector<float> sizes(10, -1.0f);  // b's step sizes, bound before anything made them
  ASSERT_TRUE(o.bind_state(1, "step_size", sizes.data(), /*adopt=*/false));
  for (float s : sizes) EXPECT_EQ(s, 0.01f);
  auto first = o.export_state();  // w's, made for the checkpoint
  ASSERT_TRUE(first) << first.error().message;
  const runtime::HostTensor* w_sizes = first->find("w.step_size");
  ASSERT_TRUE(w_sizes);
  for (int64_t i = 0; i < w_sizes->numel(); ++i) ASSERT_EQ(w_sizes->get(i), 0.01f);
  ASSERT_TRUE(o.initialize_state());  // now under lr 0.5
  for (float s : sizes) EXPECT_EQ(s, 0.5f);
  auto again = o.export_state();
  ASSERT_TRUE(again);
  for (int64_t i = 0; i < again->find("w.step_size")->numel(); ++i)
    ASSERT_EQ(again->find("w.step_size")->get(i), 0.5f);
  // A step of an optimizer whose state was made at its first step is the eager one's.
  Model a, b;
  auto lazy = Optimizer::create("rprop(lr=0.01)", a.params());
  auto eager = Optimizer::create("rprop(lr=0.01)", b.params());
  ASSERT_TRUE(lazy && eager);
  ASSERT_TRUE((*eager)->export_state());  // its state made now, at creation's lr
  ASSERT_TRUE((*lazy)->set_hyper("lr", 0.5));
  ASSERT_TRUE((*eager)->set_hyper("lr", 0.5));
  for (int step = 0; step < 3; ++step) {
    a.grads(step), b.grads(step);
    ASSERT_TRUE((*lazy)->step(a.grad_ptrs()));
    ASSERT_TRUE((*eager)->step(b.grad_ptrs()));
  }
  EXPECT_EQ(a.w, b.w);
  EXPECT_EQ(a.b, b.b);
}

TEST(Optimizer, InitializeStateFollowsTheCurrentHyperparameters) {
  Model m;
  OptimizerOptions options;
  options.groups = {{{}, {}}};  // b in group 1
  auto opt = Optimizer::create("rprop(lr=0.01)", m.params(/*bias_group=*/1), options);
  ASSERT_TRUE(opt) << opt.error().message;
  Optimizer& o = **opt;
  std::vector<float> sizes(10, -1.0f);  // b's step sizes, in the caller's memory
  ASSERT_TRUE(o.bind_state(1, "step_size", sizes.data(), /*adopt=*/false));
  m.grads(0);
  ASSERT_TRUE(o.step(m.grad_ptrs()));
  ASSERT_TRUE(o.set_hyper("lr", {0.05}, 0));
  ASSERT_TRUE(o.set_hyper("lr", {0.2}, 1));
  ASSERT_TRUE(o.initialize_state());
  EXPECT_EQ(o.step_count(), 0);
  for (float s : sizes) EXPECT_EQ(s, 0.2f);
  auto st = o.export_state();
  ASSERT_TRUE(st) << st.error().message;
  auto values = [&](const char* name) {
    const runtime::HostTensor* t = st->find(name);
    EXPECT_TRUE(t) << name;
    std::vector<float> v(t ? static_cast<size_t>(t->numel()) : 0);
    if (t) std::memcpy(v.data(), t->data.data(), v.size() * 4);
    return v;
  };
  for (float s : values("w.step_size")) ASSERT_EQ(s, 0.05f);
  for (float p : values("w.prev")) ASSERT_EQ(p, 0.0f);
  for (float p : values("b.prev")) ASSERT_EQ(p, 0.0f);
  // A step from there is the first step of an optimizer made with those learning rates.
  Model fresh;
  OptimizerOptions with_lr = options;
  with_lr.groups = {{{}, {{"lr", 0.2}}}};
  auto twin = Optimizer::create("rprop(lr=0.05)", fresh.params(1), with_lr);
  ASSERT_TRUE(twin);
  fresh.w = m.w, fresh.b = m.b;
  m.grads(1), fresh.grads(1);
  ASSERT_TRUE(o.step(m.grad_ptrs()));
  ASSERT_TRUE((*twin)->step(fresh.grad_ptrs()));
  EXPECT_EQ(m.w, fresh.w);
  EXPECT_EQ(m.b, fresh.b);

  auto asgd = Optimizer::create("asgd(lr=0.01)", m.params(1), options);
  ASSERT_TRUE(asgd);
  ASSERT_TRUE((*asgd)->step(m.grad_ptrs()));
  ASSERT_TRUE((*asgd)->set_hyper("lr", {0.3}, 1));
  ASSERT_TRUE((*asgd)->initialize_state());
  EXPECT_EQ(*(*asgd)->scalar_state("eta", 0), 0.01);
  EXPECT_EQ(*(*asgd)->scalar_state("eta", 1), 0.3);
  EXPECT_EQ(*(*asgd)->scalar_state("mu", 1), 1.0);
}

// A checkpoint keys a parameter by its name, its states by "<name>.<state>" and the step count
// by "step". Names that are another's key made save() fail after training ("tensor 'w.exp_avg'
// is given twice"), or, for a parameter named "step", write a file without the step count that
// load() refused: refused at creation now. Names that only look alike save and load.
TEST(Optimizer, ParameterNamesNeverClashWithCheckpointKeys) {
  std::vector<float> a(5000, 1.0f), b(5000, 1.0f), g(5000, 0.5f);
  auto create = [&](const std::string& pipeline, std::string first, std::string second) {
    return Optimizer::create(
        pipeline, {{first, a.data(), DType::f32, {5000}}, {second, b.data(), DType::f32, {5000}}});
  };
  const std::string adamw = "adamw(lr=1e-2)";
  const std::string q8 = "adamw(lr=1e-2, state_format=\"8bit\")";
  for (auto [pipeline, first, second, want] : std::vector<std::array<std::string, 4>>{
           {adamw, "w", "w.exp_avg",
            "parameter 'w.exp_avg' has the name checkpoints give the state 'exp_avg' of "
            "parameter 'w': give one of them another name"},
           {adamw, "layer.w.exp_avg_sq", "layer.w",
            "parameter 'layer.w.exp_avg_sq' has the name checkpoints give the state 'exp_avg_sq' "
            "of parameter 'layer.w': give one of them another name"},
           {"nadam(lr=1e-2)", "w", "w.mu_product",
            "parameter 'w.mu_product' has the name checkpoints give the state 'mu_product' of "
            "parameter 'w': give one of them another name"},
           {q8, "w", "w.exp_avg.absmax",
            "parameter 'w.exp_avg.absmax' has the name checkpoints give the state "
            "'exp_avg.absmax' of parameter 'w': give one of them another name"},
           {adamw, "w", "step",
            "a parameter is named 'step', the name checkpoints give the step count: give it "
            "another name"},
       }) {
    auto o = create(pipeline, first, second);
    ASSERT_FALSE(o) << first << ", " << second;
    EXPECT_EQ(o.error().message, want);
  }
  // Alike but no one's key: a state this pipeline does not keep, a stem that is no parameter,
  // a name that only ends in a state's name, one with "step" inside it.
  for (auto [pipeline, first, second] : std::vector<std::array<std::string, 3>>{
           {adamw, "w", "w.momentum_buffer"},
           {adamw, "w.exp_avg", "v"},
           {q8, "w", "wexp_avg"},
           {adamw, "step.w", "w.step"},
       }) {
    auto x = create(pipeline, first, second);
    ASSERT_TRUE(x) << first << ", " << second << ": " << x.error().message;
    for (int i = 0; i < 2; ++i) ASSERT_TRUE((*x)->step({g.data(), g.data()}));
    const std::string path = temp_path("names.safetensors");
    ASSERT_TRUE((*x)->save(path)) << first << ", " << second;
    auto y = create(pipeline, first, second);
    ASSERT_TRUE(y);
    ASSERT_TRUE((*y)->load(path)) << first << ", " << second;
    EXPECT_EQ((*y)->step_count(), 2);
    std::filesystem::remove(path);
  }
}

TEST(Optimizer, SaveAndLoadResumeExactly) {
  Model a, b;
  auto x = Optimizer::create(kPipeline, a.params());
  auto y = Optimizer::create(kPipeline, b.params());
  ASSERT_TRUE(x && y);
  for (int step = 0; step < 3; ++step) {
    a.grads(step);
    ASSERT_TRUE((*x)->step(a.grad_ptrs()));
  }
  const std::string path = temp_path("state.safetensors");
  ASSERT_TRUE((*x)->save(path));
  b.w = a.w;
  b.b = a.b;
  ASSERT_TRUE((*y)->load(path));
  EXPECT_EQ((*y)->step_count(), 3);
  for (int step = 3; step < 6; ++step) {
    a.grads(step);
    b.grads(step);
    ASSERT_TRUE((*x)->step(a.grad_ptrs()));
    ASSERT_TRUE((*y)->step(b.grad_ptrs()));
  }
  EXPECT_EQ(a.w, b.w);
  EXPECT_EQ(a.b, b.b);
  // A corrupt file is an error and leaves the state as it was.
  std::ofstream(path, std::ios::trunc) << "garbage";
  auto r = (*y)->load(path);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("not a valid safetensors file"), std::string::npos);
  EXPECT_EQ((*y)->step_count(), 6);
  std::filesystem::remove(path);
}

// A step count that is not a whole number of steps (NaN, a fraction, beyond what f64 counts
// exactly) is refused, and the state stays as it was: NaN used to become INT64_MIN and 2.5
// silently 2.
TEST(Optimizer, LoadRefusesAStepCountThatIsNotAWholeNumber) {
  Model a;
  auto x = Optimizer::create(kPipeline, a.params());
  ASSERT_TRUE(x);
  for (int step = 0; step < 2; ++step) {
    a.grads(step);
    ASSERT_TRUE((*x)->step(a.grad_ptrs()));
  }
  auto saved = (*x)->export_state();
  ASSERT_TRUE(saved);
  for (double bad :
       {std::nan(""), 2.5, -1.0, 1e300, 0x1p60, 0x1p53, std::numeric_limits<double>::infinity()}) {
    runtime::TensorFile f = *saved;
    runtime::HostTensor* step = nullptr;
    for (auto& t : f.tensors)
      if (t.name == "step") step = &t;
    ASSERT_NE(step, nullptr);
    *step = runtime::HostTensor::zeros("step", DType::f64, {});
    step->set(0, bad);
    auto r = (*x)->import_state(f);
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().message.find("state file's 'step' is "), std::string::npos)
        << r.error().message;
    EXPECT_NE(r.error().message.find("not a whole number of steps from 0 to 2^53"),
              std::string::npos)
        << r.error().message;
    EXPECT_EQ((*x)->step_count(), 2);
  }
  runtime::TensorFile f = *saved;  // a whole number in f64 is a step count
  for (auto& t : f.tensors)
    if (t.name == "step") t = runtime::HostTensor::zeros("step", DType::f64, {}), t.set(0, 7.0);
  ASSERT_TRUE((*x)->import_state(f));
  EXPECT_EQ((*x)->step_count(), 7);
  // So is one set directly: below 2^53, so that the next step's number (an i64 value of the
  // scalar program, within kI64Limit) is exact. 2^60 was taken.
  for (int64_t bad : {int64_t{1} << 53, int64_t{1} << 60}) {
    auto r = (*x)->set_step_count(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().message,
              fmt::format("a step count is a whole number from 0 to 2^53, not {}", bad));
    EXPECT_EQ((*x)->step_count(), 7);
  }
  ASSERT_TRUE((*x)->set_step_count((int64_t{1} << 53) - 1));
  EXPECT_EQ((*x)->step_count(), (int64_t{1} << 53) - 1);
}

// The same optimizer on an OpenCL device (PoCL here), with the scalar program on the host and
// on the device: each step matches the CPU optimizer, a learning rate set between steps and
// parameters the caller changes between steps are honoured, and save/load resumes on the device.
TEST(Optimizer, RunsOnOpenclLikeOnTheCpu) {
  for (bool device_step : {false, true}) {
    SCOPED_TRACE(device_step ? "device step" : "host step");
    Model a, b;
    OptimizerOptions options;
    options.backend = Backend::opencl;
    options.device_step = device_step;
    options.cache.reset();
    auto ocl = Optimizer::create(kPipeline, a.params(), options);
    auto cpu = Optimizer::create(kPipeline, b.params());
    ASSERT_TRUE(ocl && cpu) << (ocl ? cpu.error().message : ocl.error().message);
    EXPECT_EQ((*ocl)->backend(), Backend::opencl);
    EXPECT_FALSE((*ocl)->device_name().empty());
    auto both = [&](int step) {
      a.grads(step);
      b.grads(step);
      auto r = (*ocl)->step(a.grad_ptrs());
      ASSERT_TRUE(r) << r.error().message;
      ASSERT_TRUE((*cpu)->step(b.grad_ptrs()));
      for (size_t i = 0; i < a.w.size(); ++i) ASSERT_NEAR(a.w[i], b.w[i], 2e-6) << i;
      for (size_t i = 0; i < a.b.size(); ++i) ASSERT_NEAR(a.b[i], b.b[i], 2e-6) << i;
    };
    both(0);
    both(1);
    ASSERT_TRUE((*ocl)->set_hyper("lr", 0.05));
    ASSERT_TRUE((*cpu)->set_hyper("lr", 0.05));
    both(2);
    a.w[7] = b.w[7] = 3.0f;  // the framework changes a parameter (e.g. re-initializes a row)
    both(3);
    EXPECT_EQ((*ocl)->step_count(), 4);
    const std::string path = temp_path(device_step ? "ocl_dev.safetensors" : "ocl.safetensors");
    ASSERT_TRUE((*cpu)->save(path));
    both(4);
    // Back to the state after step 4 on both: the device's copy must be replaced.
    ASSERT_TRUE((*ocl)->load(path));
    ASSERT_TRUE((*cpu)->load(path));
    EXPECT_EQ((*ocl)->step_count(), 4);
    both(5);
    EXPECT_EQ((*ocl)->step_count(), 5);
    std::filesystem::remove(path);
  }
}

TEST(Optimizer, DeviceBackendsThatCannotRunAreClearErrors) {
  Model m;
  OptimizerOptions cuda = uncached(Backend::cuda);
  auto c = Optimizer::create(kPipeline, m.params(), cuda);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().message,
            "no CUDA driver on this machine (libcuda.so.1 not found), so no NVIDIA GPU can be "
            "used; optjit compile --backend cuda still builds cubins");
  OptimizerOptions graph;
  graph.backend = Backend::opencl;
  graph.cuda_graph = true;
  auto g = Optimizer::create(kPipeline, m.params(), graph);
  ASSERT_FALSE(g);
  EXPECT_EQ(g.error().message, "cuda_graph needs the cuda backend, not opencl");
  OptimizerOptions on_cpu;
  on_cpu.device_step = true;
  auto d = Optimizer::create(kPipeline, m.params(), on_cpu);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().message, "device_step needs the cuda or opencl backend, not cpu");
  // auto: no CUDA and PoCL is a CPU device here, so the CPU backend.
  OptimizerOptions best = uncached(Backend::automatic);
  auto a = Optimizer::create(kPipeline, m.params(), best);
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_EQ((*a)->backend(), Backend::cpu);
  OptimizerOptions ocl = uncached(Backend::opencl);
  auto o = Optimizer::create(kPipeline, m.params(), ocl);
  ASSERT_TRUE(o) << o.error().message;
  m.grads(0);
  std::vector<Param> on_device = m.params();
  on_device[0].device = DeviceMemory{0x1000, 0};
  on_device[0].data = nullptr;
  auto dp = Optimizer::create(kPipeline, on_device);
  ASSERT_FALSE(dp);
  EXPECT_EQ(dp.error().message,
            "parameter 'w' is in device memory, which the cpu backend cannot use");
}

// tune() tunes whatever device the optimizer runs on: on OpenCL the launch shape, on the very
// tensors, which are as before afterwards; the winner is used from then on.
TEST(Optimizer, TunesOnOpenclToo) {
  Model a, b;
  OptimizerOptions ocl = uncached(Backend::opencl);
  auto o = Optimizer::create(kPipeline, a.params(), ocl);
  auto cpu = Optimizer::create(kPipeline, b.params());
  ASSERT_TRUE(o && cpu);
  a.grads(0);
  b.grads(0);
  const Model before = a;
  autotune::TuneOptions topts;
  topts.seconds_per_candidate = 0.01;
  topts.max_candidates = 4;
  topts.progress = false;
  auto t = (*o)->tune(a.grad_ptrs(), topts);
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_EQ(t->measured.size(), 4u);
  EXPECT_EQ(a.w, before.w);
  EXPECT_EQ((*o)->step_count(), 0);
  EXPECT_EQ((*o)->gpu_launch().to_string(), t->winner);
  EXPECT_TRUE((*o)->launch_from_tuning());
  ASSERT_TRUE((*o)->step(a.grad_ptrs()));
  ASSERT_TRUE((*cpu)->step(b.grad_ptrs()));
  for (size_t i = 0; i < a.w.size(); ++i) ASSERT_NEAR(a.w[i], b.w[i], 2e-6) << i;
}

// Parameters of several dtypes are one optimizer: one program per dtype, and the all-tensor
// reduction (the clipping norm) over all of them, as one program over every tensor would
// compute it. Checked against the float64 reference on the same IR, and against torch's
// formula for clipped SGD computed here.
TEST(Optimizer, MixedDtypesStepAsOne) {
  const std::vector<std::pair<DType, int64_t>> tensors = {
      {DType::f32, 300}, {DType::bf16, 40}, {DType::f16, 25}, {DType::f32, 7}};
  struct Mem {
    std::vector<std::vector<uint8_t>> params, grads;
  };
  auto make = [&](Mem& mem) {
    std::vector<Param> ps;
    for (size_t i = 0; i < tensors.size(); ++i) {
      auto [t, n] = tensors[i];
      runtime::HostTensor p = runtime::HostTensor::zeros("p", t, {n});
      for (int64_t e = 0; e < n; ++e) p.set(e, 0.25 * std::sin(0.3 * e + i));
      mem.params.push_back(p.data);
      mem.grads.emplace_back(static_cast<size_t>(n) * size_bytes(t));
      ps.push_back({fmt::format("p{}", i), mem.params.back().data(), t, {n}});
    }
    return ps;
  };
  auto grads = [&](Mem& mem, int step) {
    std::vector<const void*> out;
    for (size_t i = 0; i < tensors.size(); ++i) {
      auto [t, n] = tensors[i];
      for (int64_t e = 0; e < n; ++e)
        runtime::store_element(mem.grads[i].data(), t, e, (1 + step) * std::cos(0.7 * e + 3.0 * i));
      out.push_back(mem.grads[i].data());
    }
    return out;
  };
  for (const char* pipeline : {"chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-2))",
                               "chain(clip_grad_norm(max_norm=1.0), sgd(lr=0.1))"}) {
    for (Backend backend : {Backend::cpu, Backend::opencl}) {
      SCOPED_TRACE(fmt::format("{} on {}", pipeline, to_string(backend)));
      Mem a, r;
      OptimizerOptions options = uncached(backend);
      auto opt = Optimizer::create(pipeline, make(a), options);
      ASSERT_TRUE(opt) << opt.error().message;
      EXPECT_EQ((*opt)->programs(), 3u);
      EXPECT_EQ((*opt)->step_mode(), "host");
      auto ref = reference(pipeline, make(r));
      ASSERT_TRUE(ref) << ref.error().message;
      for (int step = 0; step < 3; ++step) {
        // Torch's clipped SGD, from the parameters before the step (sgd only).
        std::vector<std::vector<double>> want;
        double norm = 0;
        auto g = grads(a, step);
        (void)grads(r, step);
        for (size_t i = 0; i < tensors.size(); ++i)
          for (int64_t e = 0; e < tensors[i].second; ++e) {
            const double x = runtime::load_element(a.grads[i].data(), tensors[i].first, e);
            norm += x * x;
          }
        const double coef = std::min(1.0, 1.0 / (std::sqrt(norm) + 1e-6));
        for (size_t i = 0; i < tensors.size(); ++i) {
          want.emplace_back();
          for (int64_t e = 0; e < tensors[i].second; ++e)
            want.back().push_back(
                runtime::load_element(a.params[i].data(), tensors[i].first, e) -
                0.1 * coef * runtime::load_element(a.grads[i].data(), tensors[i].first, e));
        }
        ASSERT_TRUE((*opt)->step(g));
        std::vector<const void*> rg;
        for (auto& x : r.grads) rg.push_back(x.data());
        ASSERT_TRUE((*ref)->step(rg));
        for (size_t i = 0; i < tensors.size(); ++i) {
          auto [t, n] = tensors[i];
          const double tol = t == DType::f32 ? 2e-6 : t == DType::bf16 ? 8e-3 : 1e-3;
          for (int64_t e = 0; e < n; ++e) {
            const double got = runtime::load_element(a.params[i].data(), t, e);
            const double oracle = runtime::load_element(r.params[i].data(), t, e);
            ASSERT_NEAR(got, oracle, tol * std::max(1.0, std::fabs(oracle)))
                << "p" << i << "[" << e << "] vs reference";
            if (std::string(pipeline).find("sgd") != std::string::npos) {
              ASSERT_NEAR(got, want[i][e], tol * std::max(1.0, std::fabs(want[i][e])))
                  << "p" << i << "[" << e << "] vs torch's formula";
            }
          }
        }
      }
      EXPECT_EQ((*opt)->step_count(), 3);
      // One checkpoint for all dtypes, and back.
      auto saved = (*opt)->export_state();
      ASSERT_TRUE(saved) << saved.error().message;
      EXPECT_TRUE(saved->find("p1") && saved->find("p2") && saved->find("step"));
      ASSERT_TRUE((*opt)->import_state(*saved));
    }
  }
  // The scalar program stays on the host for mixed dtypes: asking for the device step says so.
  Mem c;
  OptimizerOptions on_device;
  on_device.backend = Backend::opencl;
  on_device.device_step = true;
  auto d = Optimizer::create("adamw()", make(c), on_device);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().message,
            "parameters of several dtypes step with the scalar program on the host; device_step "
            "and cuda_graph need parameters of one dtype");
}

// A framework that reallocates a parameter points the optimizer at the new memory: the next step
// reads and updates it there, and never touches the old memory again.
TEST(Optimizer, ParametersCanBeReboundBetweenSteps) {
  for (Backend backend : {Backend::cpu, Backend::opencl}) {
    SCOPED_TRACE(to_string(backend));
    Model a, b;
    OptimizerOptions options = uncached(backend);
    auto opt = Optimizer::create(kPipeline, a.params(), options);
    auto ref = reference(kPipeline, b.params());
    ASSERT_TRUE(opt && ref);
    a.grads(0), b.grads(0);
    ASSERT_TRUE((*opt)->step(a.grad_ptrs()));
    ASSERT_TRUE((*ref)->step(b.grad_ptrs()));
    std::vector<float> moved = a.w;
    ASSERT_TRUE((*opt)->rebind_param(0, moved.data()));
    std::fill(a.w.begin(), a.w.end(), 7.0f);  // the old memory, reused by the framework
    a.grads(1), b.grads(1);
    ASSERT_TRUE((*opt)->step(a.grad_ptrs()));
    ASSERT_TRUE((*ref)->step(b.grad_ptrs()));
    for (size_t i = 0; i < moved.size(); ++i) ASSERT_NEAR(moved[i], b.w[i], 2e-6) << i;
    for (float x : a.w) ASSERT_EQ(x, 7.0f);
    EXPECT_EQ((*opt)->rebind_param(0, static_cast<void*>(nullptr)).error().message,
              "rebind_param: null memory for 'w'");
  }
}

// Parameters that trade memory (a framework swapping two tensors' storage) are rebound at once:
// one at a time the first would overlap the second's old memory. All or nothing: a batch that
// leaves two parameters on one memory changes nothing.
TEST(Optimizer, ParametersThatTradeMemoryAreReboundTogether) {
  std::vector<float> x(64, 1.0f), y(64, 2.0f), g(64, 0.5f), spare(64, 3.0f);
  std::vector<Param> ps{{"x", x.data(), DType::f32, {64}}, {"y", y.data(), DType::f32, {64}}};
  OptimizerOptions o;
  o.cache.reset();
  auto opt = Optimizer::create("sgd(lr=1.0)", ps, o);
  ASSERT_TRUE(opt);
  using R = Optimizer::Rebinding;
  EXPECT_EQ((*opt)->rebind_param(0, y.data()).error().message,
            "rebind_param: 'x' would overlap 'y'");
  const std::vector<R> overlapping{{0, spare.data(), {}}, {1, spare.data(), {}}};
  EXPECT_EQ((*opt)->rebind_params(overlapping).error().message,
            "rebind_param: 'x' would overlap 'y'");
  // Device memory on the CPU backend names the backends that take it.
  const std::vector<R> on_device{{0, nullptr, DeviceMemory{1, 0}}};
  EXPECT_EQ((*opt)->rebind_params(on_device).error().message,
            "rebind_param: 'x' in device memory needs a GPU backend (cuda, opencl, webgpu), not "
            "cpu");
  const std::vector<R> swap{{0, y.data(), {}}, {1, x.data(), {}}};
  ASSERT_TRUE((*opt)->rebind_params(swap));
  ASSERT_TRUE((*opt)->step({g.data(), g.data()}));
  EXPECT_EQ(x[0], 0.5f);  // "y" now lives in x: 1 - 0.5; "x" in y: 2 - 0.5
  EXPECT_EQ(y[0], 1.5f);
  EXPECT_EQ(spare[0], 3.0f);  // the refused batch bound nothing
  const std::vector<R> bad{{0, spare.data(), {}}, {5, x.data(), {}}};
  EXPECT_EQ((*opt)->rebind_params(bad).error().message, "rebind_param: no parameter 5");
  ASSERT_TRUE((*opt)->step({g.data(), g.data()}));
  EXPECT_EQ(spare[0], 3.0f);
  EXPECT_EQ(x[0], 0.0f);
}

// A tuple's values go to its elements in order, whatever order the program declares them in
// (rprop's step_sizes were once swapped: min became max).
TEST(Optimizer, TupleHyperparametersTakeTheirValuesInElementOrder) {
  Model m;
  auto opt = Optimizer::create("rprop(lr=0.01)", m.params());
  ASSERT_TRUE(opt);
  for (const char* name : {"step_sizes", "etas"}) {
    ASSERT_TRUE((*opt)->set_hyper(name, std::vector<double>{0.25, 7.0}));
    EXPECT_EQ((*opt)->hyper(std::string(name) + ".0").value(), 0.25) << name;
    EXPECT_EQ((*opt)->hyper(std::string(name) + ".1").value(), 7.0) << name;
  }
}

// The caller's memory for everything (parameters, gradients, state), on the CPU: host memory,
// in one flat buffer per role or one allocation per tensor.
TEST(Optimizer, CallerOwnedMemoryOnTheCpu) {
  for (bool flat : {false, true}) {
    SCOPED_TRACE(flat ? "flat" : "separate");
    std::vector<std::unique_ptr<uint8_t[]>> blocks;
    testing::CallerMemory m;
    m.backend = Backend::cpu;
    m.flat = flat;
    m.alloc = [&](size_t bytes) -> Expected<DeviceMemory> {
      blocks.emplace_back(new uint8_t[bytes]);
      return DeviceMemory{reinterpret_cast<uint64_t>(blocks.back().get()), 0};
    };
    m.write = [](DeviceMemory d, const void* src, size_t n) {
      std::memcpy(reinterpret_cast<void*>(d.handle + d.offset), src, n);
      return Status::Ok();
    };
    m.read = [](void* dst, DeviceMemory d, size_t n) {
      std::memcpy(dst, reinterpret_cast<const void*>(d.handle + d.offset), n);
      return Status::Ok();
    };
    testing::check_caller_owned_memory(m);
  }
}

// On OpenCL: the caller's buffers and queue. One buffer per role holding every tensor is used in
// place; one buffer per tensor goes through the executor's arena with copies on the device.
TEST(Optimizer, CallerOwnedMemoryOnOpencl) {
  auto dev = runtime::open_device({.kind = "opencl"});  // the caller's context and queue
  ASSERT_TRUE(dev) << dev.error().message;
  for (bool flat : {true, false}) {
    SCOPED_TRACE(flat ? "flat" : "separate");
    std::vector<runtime::DeviceAllocation> blocks;
    testing::check_caller_owned_memory(
        testing::device_memory(**dev, Backend::opencl, flat, blocks));
  }
}

// The caller's OpenCL buffers are what they must be before anything runs: kernels index what
// the tensor table says, unchecked, so a buffer that was too small was written past its end,
// and a handle that was no buffer (Engine.on_device's numbers) was a segmentation fault.
TEST(Optimizer, TheCallersOpenclBuffersAreCheckedBeforeUse) {
  auto dev = runtime::open_device({.kind = "opencl"});  // the caller's context and queue
  ASSERT_TRUE(dev) << dev.error().message;
  auto other = runtime::open_device({.kind = "opencl"});  // another context
  ASSERT_TRUE(other) << other.error().message;
  std::vector<runtime::DeviceAllocation> blocks;
  auto buffer = [&](runtime::Device& d, size_t bytes) {
    auto a = runtime::allocate(d, bytes, "test memory");
    EXPECT_TRUE(a) << a.error().message;
    blocks.push_back(std::move(*a));
    return blocks.back().memory();
  };
  OptimizerOptions o;
  o.backend = Backend::opencl;
  o.queue = (*dev)->queue();
  o.cache.reset();
  auto make = [&](DeviceMemory w) {
    return Optimizer::create("sgd(lr=0.1)",
                             {{.name = "w", .dtype = DType::f32, .shape = {300}, .device = w}}, o);
  };
  const DeviceMemory fits = buffer(**dev, 1200), grad = buffer(**dev, 1200);
  const std::vector<std::pair<DeviceMemory, std::string>> refused = {
      {buffer(**dev, 64), "1200 bytes at offset 0 pass the end of its OpenCL buffer of 64 bytes"},
      {DeviceMemory{fits.handle, 4},
       "1200 bytes at offset 4 pass the end of its OpenCL buffer of 1200 bytes"},
      {buffer(**other, 1200),
       "the OpenCL buffer belongs to another context than the optimizer's queue (give the "
       "optimizer that context's queue)"},
      {DeviceMemory{8, 0}, "buffer 0x8 is not the address of a cl_mem"},
  };
  for (const auto& [memory, message] : refused) {
    auto opt = make(memory);
    ASSERT_FALSE(opt) << message;
    EXPECT_EQ(opt.error().message, "parameter 'w': " + message);
  }
  auto opt = make(fits);
  ASSERT_TRUE(opt) << opt.error().message;
  ASSERT_TRUE((*opt)->step_device({grad}));
  for (const auto& [memory, message] : refused) {
    auto r = (*opt)->step_device({memory});
    ASSERT_FALSE(r) << message;
    EXPECT_EQ(r.error().message, "the gradient of 'w': " + message);
  }
  ASSERT_TRUE((*opt)->step_device({grad}));
  EXPECT_EQ((*opt)->step_count(), 2);
}

// Queued steps on the caller's OpenCL queue, held shut by a user event (tests/queued_steps.h).
struct OpenclGate {
  runtime::Device& dev;
  cl_event event = nullptr;
  testing::QueueGate gate() {
    return {[this] {
              auto queue = static_cast<cl_command_queue>(dev.queue());
              cl_context ctx = nullptr;
              ASSERT_EQ(clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof ctx, &ctx, nullptr),
                        CL_SUCCESS);
              cl_int e = CL_SUCCESS;
              event = clCreateUserEvent(ctx, &e);
              ASSERT_EQ(e, CL_SUCCESS);
              ASSERT_EQ(clEnqueueBarrierWithWaitList(queue, 1, &event, nullptr), CL_SUCCESS);
            },
            [this] {
              ASSERT_EQ(clSetUserEventStatus(event, CL_COMPLETE), CL_SUCCESS);
              clReleaseEvent(event);
            }};
  }
};

TEST(Optimizer, QueuedStepsOnTheCallersQueueDoNotWaitForIt) {
  auto dev = runtime::open_device({.kind = "opencl"});  // the caller's context and queue
  ASSERT_TRUE(dev) << dev.error().message;
  OpenclGate gate{**dev};
  testing::check_queued_steps(**dev, Backend::opencl, gate.gate());
}

TEST(Optimizer, QueuedStepsThatMaySkipAreCountedOnTheDevice) {
  auto dev = runtime::open_device({.kind = "opencl"});
  ASSERT_TRUE(dev) << dev.error().message;
  OpenclGate gate{**dev};
  testing::check_queued_steps_that_may_skip(**dev, Backend::opencl, gate.gate());
}

TEST(Optimizer, ScalarStatesInDeviceMemoryFollowQueuedSteps) {
  auto dev = runtime::open_device({.kind = "opencl"});
  ASSERT_TRUE(dev) << dev.error().message;
  OpenclGate gate{**dev};
  testing::check_scalar_states_in_device_memory(**dev, Backend::opencl, gate.gate());
}

// tune() on the caller's device memory (a framework's GPU tensors): parameters and state bound
// there are saved in device copies and restored after every candidate, so they are as before;
// the tuned optimizer then steps as an untuned one does.
TEST(Optimizer, TunesTheCallersDeviceMemory) {
  auto dev = runtime::open_device({.kind = "opencl"});
  ASSERT_TRUE(dev) << dev.error().message;
  const std::vector<int64_t> sizes = {5000, 33};
  std::vector<runtime::DeviceAllocation> blocks;
  auto on_device = [&](const std::vector<float>& v) {
    auto a = runtime::allocate(**dev, v.size() * 4, "test memory");
    EXPECT_TRUE(a) << a.error().message;
    EXPECT_TRUE((*dev)->write(a->memory(), v.data(), v.size() * 4));
    blocks.push_back(std::move(*a));
    return blocks.back().memory();
  };
  auto read = [&](DeviceMemory m, size_t n) {
    std::vector<float> v(n);
    EXPECT_TRUE((*dev)->read(v.data(), m, n * 4));
    return v;
  };
  OptimizerOptions o;
  o.backend = Backend::opencl;
  o.queue = (*dev)->queue();
  o.cache.reset();
  std::vector<Optimizer*> opts;
  std::vector<std::unique_ptr<Optimizer>> held;
  std::vector<std::vector<DeviceMemory>> params(2), grads(2), states(2);
  for (int k = 0; k < 2; ++k) {
    std::vector<Param> ps;
    for (size_t t = 0; t < sizes.size(); ++t) {
      std::vector<float> p(static_cast<size_t>(sizes[t])), g(p.size());
      for (size_t i = 0; i < p.size(); ++i)
        p[i] = std::sin(0.2f * i + t), g[i] = std::cos(0.5f * i - t);
      params[k].push_back(on_device(p));
      grads[k].push_back(on_device(g));
      ps.push_back({.name = fmt::format("w{}", t),
                    .dtype = DType::f32,
                    .shape = {sizes[t]},
                    .device = params[k].back()});
    }
    auto made = Optimizer::create(kPipeline, ps, o);
    ASSERT_TRUE(made) << made.error().message;
    for (size_t t = 0; t < sizes.size(); ++t)
      for (const char* name : {"exp_avg", "exp_avg_sq"}) {
        states[k].push_back(on_device(std::vector<float>(static_cast<size_t>(sizes[t]))));
        ASSERT_TRUE((*made)->bind_state(t, name, states[k].back()));
      }
    held.push_back(std::move(*made));
    ASSERT_TRUE(held.back()->step_device(grads[k]));
  }
  std::vector<std::vector<float>> before;
  for (size_t t = 0; t < sizes.size(); ++t) before.push_back(read(params[0][t], sizes[t]));
  for (size_t i = 0; i < states[0].size(); ++i) before.push_back(read(states[0][i], sizes[i / 2]));
  autotune::TuneOptions topts;
  topts.seconds_per_candidate = 0.01;
  topts.max_candidates = 4;
  topts.progress = false;
  auto r = held[0]->tune(grads[0], topts);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->measured.size(), 4u);
  EXPECT_EQ(held[0]->gpu_launch().to_string(), r->winner);
  EXPECT_EQ(held[0]->step_count(), 1);
  size_t k = 0;
  for (size_t t = 0; t < sizes.size(); ++t, ++k)
    EXPECT_EQ(read(params[0][t], sizes[t]), before[k]) << "w" << t << " changed";
  for (size_t i = 0; i < states[0].size(); ++i, ++k)
    EXPECT_EQ(read(states[0][i], sizes[i / 2]), before[k]) << "state " << i << " changed";
  for (int j = 0; j < 2; ++j) ASSERT_TRUE(held[j]->step_device(grads[j]));
  for (size_t t = 0; t < sizes.size(); ++t) {
    const auto a = read(params[0][t], sizes[t]), b = read(params[1][t], sizes[t]);
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_NEAR(a[i], b[i], 1e-6) << "w" << t << "[" << i << "]";
  }
}

// Overlapping parameters are found among many (by sorting, not by every pair): against every
// pair checked by hand, on random spans in one buffer, overlapping or not (some reaching back
// over several others); the two named overlap.
TEST(Optimizer, OverlappingParametersAreFoundAmongMany) {
  std::vector<float> memory(20000);
  std::mt19937 rng(7);
  int overlapping_cases = 0;
  for (int round = 0; round < 300; ++round) {
    const int count = 2 + static_cast<int>(rng() % 40);
    std::vector<Param> ps;
    std::vector<std::pair<int64_t, int64_t>> spans;  // [begin, end) in floats
    int64_t at = 0;
    for (int i = 0; i < count; ++i) {
      const int64_t n = 1 + static_cast<int64_t>(rng() % 60);
      // Mostly disjoint, in shuffled order; sometimes one reaches back over earlier ones.
      int64_t begin = at;
      if (rng() % 25 == 0) begin = std::max<int64_t>(0, at - static_cast<int64_t>(rng() % 200));
      at = std::max(at, begin + n) + static_cast<int64_t>(rng() % 3);
      spans.push_back({begin, begin + n});
    }
    std::shuffle(spans.begin(), spans.end(), rng);
    for (int i = 0; i < count; ++i)
      ps.push_back({fmt::format("p{}", i),
                    memory.data() + spans[i].first,
                    DType::f32,
                    {spans[i].second - spans[i].first}});
    bool any = false;
    for (int i = 0; i < count; ++i)
      for (int j = 0; j < i; ++j)
        any |= spans[i].first < spans[j].second && spans[j].first < spans[i].second;
    overlapping_cases += any;
    auto o = Optimizer::create("sgd(lr=0.1)", ps);
    ASSERT_EQ(!o, any) << "round " << round;
    if (!any) continue;
    int a = -1, b = -1;
    ASSERT_EQ(std::sscanf(o.error().message.c_str(), "parameters 'p%d' and 'p%d' overlap in memory",
                          &a, &b),
              2)
        << o.error().message;
    ASSERT_LT(a, b);
    EXPECT_TRUE(spans[a].first < spans[b].second && spans[b].first < spans[a].second)
        << "round " << round << ": " << o.error().message;
  }
  EXPECT_GT(overlapping_cases, 50);
  EXPECT_LT(overlapping_cases, 250);
}

TEST(Optimizer, RejectsBadInputWithClearErrors) {
  Model m;
  auto opt = Optimizer::create(kPipeline, m.params());
  ASSERT_TRUE(opt);
  auto few = (*opt)->step({m.gw.data()});
  ASSERT_FALSE(few);
  EXPECT_EQ(few.error().message, "step() got 1 gradients for 2 parameters");
  auto alias = (*opt)->step({m.w.data(), m.gb.data()});
  ASSERT_FALSE(alias);
  EXPECT_EQ(alias.error().message, "the gradient of 'w' overlaps its parameter");
  auto null = (*opt)->step({nullptr, m.gb.data()});
  ASSERT_FALSE(null);
  EXPECT_EQ(null.error().message, "the gradient of 'w' is null");
  std::vector<Param> overlapping = {{"a", m.w.data(), DType::f32, {100}},
                                    {"b", m.w.data() + 50, DType::f32, {100}}};
  auto o = Optimizer::create(kPipeline, overlapping);
  ASSERT_FALSE(o);
  EXPECT_EQ(o.error().message, "parameters 'a' and 'b' overlap in memory");
  // Names key the state in checkpoints: a second 'w' made a file that load() then refused.
  std::vector<Param> same_name = {{"w", m.w.data(), DType::f32, {10}},
                                  {"w", m.b.data(), DType::f32, {5}}};
  auto dup = Optimizer::create(kPipeline, same_name);
  ASSERT_FALSE(dup);
  EXPECT_EQ(dup.error().message,
            "parameters 0 and 1 are both named 'w': each parameter needs its own name (it keys "
            "its state in checkpoints)");
  std::vector<Param> ints = {{"a", m.w.data(), DType::f32, {10}},
                             {"b", m.b.data(), DType::i64, {5}}};
  auto mx = Optimizer::create(kPipeline, ints);
  ASSERT_FALSE(mx);
  EXPECT_EQ(mx.error().message, "parameter 'b' is i64, not a float type");
  auto text = Optimizer::create("adamw(lr=)", m.params());
  ASSERT_FALSE(text);
  EXPECT_EQ(text.error().message,
            "pipeline: line 1, column 10: expected a number, a tuple, true/false, a string or a "
            "call, found ')'");
  EXPECT_FALSE(Optimizer::create(kPipeline, {}));
  OptimizerOptions many;
  many.cpu.threads = 100000;  // crashed inside OpenMP before the bound
  auto threads = Optimizer::create(kPipeline, m.params(), many);
  ASSERT_FALSE(threads);
  EXPECT_EQ(threads.error().message,
            "100000 threads is not between 1 and 1024 (0 means all cores)");
}

}  // namespace
}  // namespace optjit

namespace optjit {
namespace {

// bf16_sr: deterministic stochastic rounding is unbiased. A million copies of a value between
// two bf16 neighbours are stored; their mean must be the value within 6 standard errors, and
// the share rounded up must be the value's position between the neighbours. Round to nearest
// (plain bf16) misses the same bound by orders of magnitude, which shows the test can fail.
TEST(StateFormat, StochasticRoundingIsUnbiasedAndDeterministic) {
  const int64_t n = 1 << 20;
  const std::vector<float> values = {1.00234375f, -3.3f, 1.7e-3f, 12345.678f};
  auto run = [&](const std::string& format, int threads) {
    std::vector<std::vector<float>> params(values.size(), std::vector<float>(n, 0.0f));
    std::vector<std::vector<float>> grads;
    std::vector<Param> ps;
    std::vector<const void*> gs;
    for (size_t k = 0; k < values.size(); ++k) {
      grads.emplace_back(n, values[k]);
      ps.push_back({"w" + std::to_string(k), params[k].data(), DType::f32, {n}});
    }
    for (auto& g : grads) gs.push_back(g.data());
    OptimizerOptions o;
    o.cpu.threads = threads;
    auto opt = Optimizer::create(
        "transform keep() {\n  state m = 0\n  m = grad\n}\nkeep(state_format=\"" + format + "\")",
        ps, o);
    EXPECT_TRUE(opt) << opt.error().message;
    EXPECT_TRUE((*opt)->step(gs));
    auto st = (*opt)->export_state();
    EXPECT_TRUE(st);
    std::vector<runtime::HostTensor> out;
    for (size_t k = 0; k < values.size(); ++k)
      out.push_back(*st->find("w" + std::to_string(k) + ".m"));
    return out;
  };
  auto within = [&](const std::vector<runtime::HostTensor>& m, std::string* why) {
    for (size_t k = 0; k < values.size(); ++k) {
      const double x = values[k];
      // The bf16 neighbours of x and its position between them.
      uint32_t bits;
      std::memcpy(&bits, &values[k], 4);
      uint32_t down_bits = bits & 0xffff0000u, up_bits = down_bits + 0x10000u;
      float down, up;
      std::memcpy(&down, &down_bits, 4);
      std::memcpy(&up, &up_bits, 4);
      const double p = (x - down) / (double(up) - down);
      double sum = 0;
      int64_t ups = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double v = m[k].get(i);
        if (v != down && v != up) {
          *why = fmt::format("{}: element {} is {}, not a neighbour", x, i, v);
          return false;
        }
        sum += v;
        ups += v == up;
      }
      const double sigma = std::sqrt(p * (1 - p) / n);
      const double mean_error = std::fabs(sum / n - x) / std::fabs(double(up) - down);
      if (mean_error > 6 * sigma || std::fabs(double(ups) / n - p) > 6 * sigma) {
        *why = fmt::format("{}: mean off by {} ulp, {} rounded up (expected {} ± {})", x,
                           mean_error, double(ups) / n, p, 6 * sigma);
        return false;
      }
    }
    return true;
  };
  std::string why;
  auto sr = run("bf16_sr", 2);
  EXPECT_TRUE(within(sr, &why)) << why;
  auto nearest = run("bf16", 2);
  EXPECT_FALSE(within(nearest, &why)) << "round to nearest passed the unbiasedness bound";
  // The same bits with one thread (other chunks, other order).
  auto one = run("bf16_sr", 1);
  for (size_t k = 0; k < values.size(); ++k) EXPECT_EQ(one[k].data, sr[k].data) << k;
}

// bf16_sr keys each element by its place among all the parameters (ir/stochastic_round.h), not
// by its place in the program that steps it: with parameters split by dtype into programs, the
// last f32 tensor draws the bits it draws when every parameter is f32 (where its program index
// differs), on every backend. Alone, as the first parameter, it draws other bits.
TEST(StateFormat, StochasticRoundingKeysElementsByTheirPlaceInTheModel) {
  const char* pipeline = "adamw(lr=1e-2, state_format=\"bf16_sr\")";
  auto run = [&](const std::vector<std::pair<DType, int64_t>>& tensors, Backend backend) {
    std::vector<std::vector<uint8_t>> params, grads;
    std::vector<Param> ps;
    for (size_t i = 0; i < tensors.size(); ++i) {
      auto [t, n] = tensors[i];
      params.emplace_back(static_cast<size_t>(n) * size_bytes(t));
      grads.emplace_back(params.back().size());
      for (int64_t e = 0; e < n; ++e) {
        runtime::store_element(params[i].data(), t, e, 0.25 * std::sin(0.3 * e));
        runtime::store_element(grads[i].data(), t, e, 1e-3 * std::cos(0.7 * e));
      }
      ps.push_back({fmt::format("p{}", i), params[i].data(), t, {n}});
    }
    OptimizerOptions o = uncached(backend);
    auto opt = Optimizer::create(pipeline, ps, o);
    EXPECT_TRUE(opt) << opt.error().message;
    std::vector<const void*> gs;
    for (auto& g : grads) gs.push_back(g.data());
    for (int s = 0; s < 3; ++s) EXPECT_TRUE((*opt)->step(gs));
    auto st = (*opt)->export_state();
    EXPECT_TRUE(st);
    return st->find(fmt::format("p{}.exp_avg_sq", tensors.size() - 1))->data;
  };
  const auto all_f32 = run({{DType::f32, 300}, {DType::f32, 40}, {DType::f32, 700}}, Backend::cpu);
  for (Backend backend : {Backend::cpu, Backend::opencl}) {
    SCOPED_TRACE(to_string(backend));
    EXPECT_EQ(run({{DType::f32, 300}, {DType::bf16, 40}, {DType::f32, 700}}, backend), all_f32);
  }
  EXPECT_NE(run({{DType::f32, 700}}, Backend::cpu), all_f32);
}

}  // namespace
}  // namespace optjit

namespace optjit {
namespace {

// torch keeps NAdam's mu_product and ASGD's eta and mu in 0-dim tensors of its scalar dtype
// (f32 unless torch's default dtype is f64), float64 parameters or not: scalar_dtype says
// which, "auto" guessing it from the parameters. On every backend that steps on the host's
// scalar program (the CPU, the reference), an f32 one holds only f32 values.
TEST(Optimizer, ScalarStatesAreKeptInTheScalarDtypeTorchKeepsThemIn) {
  for (Backend backend : {Backend::cpu, Backend::reference})
    for (const char* transform : {"nadam(lr=0.02", "asgd(lr=0.02, t0=1"}) {
      std::map<std::string, std::vector<double>> seen;  // per scalar_dtype: every state's value
      for (const char* dtype : {"f32", "f64", "auto"}) {
        std::vector<double> w(300, 0.5), g(300);
        auto o = Optimizer::create(fmt::format("{}, scalar_dtype=\"{}\")", transform, dtype),
                                   {{"w", w.data(), DType::f64, {300}}}, uncached(backend));
        ASSERT_TRUE(o) << o.error().message;
        for (int step = 1; step <= 5; ++step) {
          for (size_t i = 0; i < g.size(); ++i) g[i] = std::sin(0.37 * i + step);
          ASSERT_TRUE((*o)->step({g.data()}));
          for (const std::string& name : (*o)->scalar_states()) {
            auto v = (*o)->scalar_state(name);
            ASSERT_TRUE(v);
            seen[dtype].push_back(*v);
          }
        }
        seen[dtype].push_back(w[7]);
      }
      SCOPED_TRACE(std::string(transform) + " on " + std::string(to_string(backend)));
      size_t wide = 0;  // f64 values no f32 holds
      for (size_t k = 0; k + 1 < seen["f32"].size(); ++k) {
        EXPECT_EQ(seen["f32"][k], static_cast<double>(static_cast<float>(seen["f32"][k])));
        wide += seen["f64"][k] != static_cast<double>(static_cast<float>(seen["f64"][k]));
      }
      EXPECT_GT(wide, 3u);                                // (f64 keeps them unrounded)
      EXPECT_EQ(seen["auto"], seen["f64"]);               // f64 parameters: auto is f64
      EXPECT_NE(seen["f32"].back(), seen["f64"].back());  // and the steps follow them
    }
  auto bad = Optimizer::create("asgd(scalar_dtype=\"f16\")", {{"w", nullptr, DType::f32, {0}}});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message,
            "pipeline: line 1, column 1: transform 'asgd': 'scalar_dtype' must be one of "
            "\"auto\", \"f32\", \"f64\", got \"f16\"");
}

}  // namespace
}  // namespace optjit
