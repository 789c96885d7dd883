// Queued device steps on the caller's queue (OptimizerOptions::queue, defer_skips), for any
// device backend: the caller's queue is held shut while steps are queued, which must return,
// and the results once it opens are checked bit for bit against the same optimizer stepping
// host memory and waiting. The backend's test supplies the gate (an OpenCL user event, a CUDA
// host function that blocks).
#pragma once

#include <chrono>
#include <cmath>
#include <functional>
#include <future>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "api/optimizer.h"
#include "runtime/device.h"

namespace optjit::testing {

/// Holds the device's queue shut from close() (nothing queued after it runs) until open().
struct QueueGate {
  std::function<void()> close, open;
};

// The same optimizer twice over the same starting tensors: `queued` steps the caller's device
// memory on the caller's queue (as a framework would), `waits` steps host memory on its own
// queue and waits for each step; `grads[k]` and `device_grads[k]` are step k's gradients.
struct QueuedTwins {
  runtime::Device& dev;
  std::vector<runtime::DeviceAllocation> blocks;
  std::vector<std::vector<float>> host_params;
  std::vector<std::vector<std::vector<float>>> grads;  // [step][tensor]
  std::vector<std::vector<DeviceMemory>> device_grads;
  std::vector<Param> caller, own;
  std::unique_ptr<Optimizer> queued, waits;

  DeviceMemory on_device(const void* v, size_t bytes) {
    if (bytes == 0) return {};  // an empty tensor has no memory (torch's data_ptr() is 0)
    auto a = runtime::allocate(dev, bytes, "test memory");
    EXPECT_TRUE(a) << a.error().message;
    EXPECT_TRUE(dev.write(a->memory(), v, bytes));
    blocks.push_back(std::move(*a));
    return blocks.back().memory();
  }
  // Tensors of `sizes`, `steps` steps of gradients grad(step, tensor, element), and the two
  // optimizers (`options` for both; the queued one gets the caller's queue).
  void make(const char* pipeline, const std::vector<int64_t>& sizes, int steps,
            const std::function<float(int, size_t, size_t)>& grad, OptimizerOptions options,
            bool defer_skips = false) {
    grads.resize(steps);
    device_grads.resize(steps);
    for (size_t t = 0; t < sizes.size(); ++t) {
      std::vector<float> p(static_cast<size_t>(sizes[t]));
      for (size_t i = 0; i < p.size(); ++i) p[i] = std::sin(0.1f * i + t);
      host_params.push_back(p);
      for (int k = 0; k < steps; ++k) {
        std::vector<float> g(p.size());
        for (size_t i = 0; i < g.size(); ++i) g[i] = grad(k, t, i);
        device_grads[k].push_back(on_device(g.data(), g.size() * 4));
        grads[k].push_back(std::move(g));
      }
      caller.push_back({.name = fmt::format("w{}", t),
                        .dtype = DType::f32,
                        .shape = {sizes[t]},
                        .device = on_device(p.data(), p.size() * 4)});
    }
    for (size_t t = 0; t < sizes.size(); ++t)
      own.push_back({.name = caller[t].name,
                     .data = host_params[t].data(),
                     .dtype = DType::f32,
                     .shape = {sizes[t]}});
    options.device_step = true;
    options.cache.reset();
    auto b = Optimizer::create(pipeline, own, options);
    options.queue = dev.queue();
    options.defer_skips = defer_skips;
    auto a = Optimizer::create(pipeline, caller, options);
    ASSERT_TRUE(a && b) << (a ? b.error().message : a.error().message);
    queued = std::move(*a);
    waits = std::move(*b);
  }
  // Step k of the waiting optimizer.
  Expected<runtime::StepResult> wait_step(int k) {
    std::vector<const void*> g;
    for (const auto& v : grads[k]) g.push_back(v.data());
    return waits->step(g);
  }
  // `queue()` with the caller's queue held shut by `gate`: it must return before the queue runs.
  static void while_shut(const QueueGate& gate, const std::function<std::string()>& queue) {
    gate.close();
    auto steps = std::async(std::launch::async, queue);
    const bool returned = steps.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
    gate.open();
    ASSERT_TRUE(returned) << "the steps waited for the caller's queue";
    ASSERT_EQ(steps.get(), "");
  }
  // Every parameter of the queued optimizer bit for bit the waiting one's.
  void expect_same_params() {
    for (size_t t = 0; t < host_params.size(); ++t) {
      std::vector<float> got(host_params[t].size());
      ASSERT_TRUE(dev.read(got.data(), caller[t].device, got.size() * 4));
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(got[i], host_params[t][i]) << "w" << t << "[" << i << "]";
    }
  }
};

// A device step on the caller's queue over device memory returns once it is queued, as any
// operation on that queue does (after the first, which uploads the tables and the state): here
// the caller's queue is held shut (`gate`) while three steps are queued (each with its own
// learning rate, NAdam's mu_product committed on the device), and only then opened. The
// parameters, state, step count and scalar states are then those of the same optimizer stepping
// host memory on its own queue, which waits.
inline void check_queued_steps(runtime::Device& dev, Backend backend, const QueueGate& gate,
                               bool graph = false) {
  const int kSteps = 4;
  QueuedTwins twins{dev};
  OptimizerOptions options;
  options.backend = backend;
  options.cuda_graph = graph;
  twins.make(
      "chain(clip_grad_norm(max_norm=1.0), nadam(lr=1e-2, weight_decay=0.01))", {3000, 0, 17},
      kSteps, [](int k, size_t t, size_t i) { return std::cos(0.3f * i - k + t) * (1 + k); },
      options);
  if (::testing::Test::HasFatalFailure()) return;
  Optimizer& a = *twins.queued;
  Optimizer& b = *twins.waits;

  auto first = a.step_device(twins.device_grads[0]);
  ASSERT_TRUE(first) << first.error().message;
  int64_t counted = 0;
  QueuedTwins::while_shut(gate, [&]() -> std::string {
    for (int k = 1; k < kSteps; ++k) {
      if (Status st = a.set_hyper("lr", 1e-2 * (k + 1)); !st) return st.error().message;
      auto r = a.step_device(twins.device_grads[k]);
      if (!r) return r.error().message;
      if (r->skipped) return "skipped";
    }
    counted = a.step_count();  // the host counts queued steps
    return "";
  });
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_EQ(counted, kSteps);

  for (int k = 0; k < kSteps; ++k) {
    if (k > 0) {
      ASSERT_TRUE(b.set_hyper("lr", 1e-2 * (k + 1)));
    }
    ASSERT_TRUE(twins.wait_step(k));
  }
  auto compare = [&](const char* when) {
    SCOPED_TRACE(when);
    twins.expect_same_params();
    auto mu_a = a.scalar_state("mu_product"), mu_b = b.scalar_state("mu_product");
    ASSERT_TRUE(mu_a && mu_b);
    EXPECT_EQ(*mu_a, *mu_b);
    EXPECT_NE(*mu_a, 1.0);  // three steps committed it
    auto sa = a.export_state(), sb = b.export_state();
    ASSERT_TRUE(sa && sb);
    for (const auto& ta : sa->tensors) {
      if (ta.name.find('.') == std::string::npos && ta.name != "step") continue;  // parameters
      const auto* tb = sb->find(ta.name);
      ASSERT_TRUE(tb) << ta.name;
      ASSERT_EQ(ta.data, tb->data) << ta.name;
    }
    EXPECT_EQ(a.step_count(), b.step_count());
  };
  compare("after three queued steps");
  // The host changes the scalar state and the step count (a restored checkpoint): the next
  // queued step starts from them.
  for (Optimizer* o : {&a, &b}) {
    ASSERT_TRUE(o->set_scalar_state("mu_product", 0.5));
    ASSERT_TRUE(o->set_step_count(10));
  }
  ASSERT_TRUE(a.step_device(twins.device_grads[0]));
  ASSERT_TRUE(twins.wait_step(0));
  compare("after the host set mu_product and the step count");
  EXPECT_EQ(a.step_count(), 11);
}

// A pipeline that can skip a step (a grad scaler), queued with defer_skips, its scale read from
// the caller's device memory that the caller updates on its queue (as a GradScaler's scale
// tensor): with the caller's queue held shut, four steps are queued (one with an Inf gradient,
// which the device skips), and only then opened. Whether the last step was skipped, the step
// count, the skip flag in device memory and every parameter are then those of the same
// optimizer stepping host memory and waiting for each step.
inline void check_queued_steps_that_may_skip(runtime::Device& dev, Backend backend,
                                             const QueueGate& gate) {
  const std::vector<double> scales = {1024, 2048, 2048, 512, 512};
  const int kSteps = 5, kInf = 2, kLastInf = 4;  // steps 2 and 4 have an Inf gradient
  QueuedTwins twins{dev};
  OptimizerOptions options;
  options.backend = backend;
  twins.make(
      "chain(grad_scaler(scale=1024.0), adamw(lr=1e-2, weight_decay=0.01))", {2000, 9}, kSteps,
      [&](int k, size_t t, size_t i) {
        if ((k == kInf || k == kLastInf) && t == 1 && i == 3) return INFINITY;
        return std::cos(0.3f * i - k + t) * static_cast<float>(scales[k]);
      },
      options, /*defer_skips=*/true);
  if (::testing::Test::HasFatalFailure()) return;
  Optimizer& a = *twins.queued;
  Optimizer& b = *twins.waits;
  const DeviceMemory scale = twins.on_device(&scales[0], 8);
  ASSERT_TRUE(a.set_hyper_source("scale", scale));
  auto set_scale = [&](double v) {  // on the queue, as the caller's framework would
    return dev.write_queued(scale, &v, 8);
  };

  auto first = a.step_device(twins.device_grads[0]);
  ASSERT_TRUE(first) << first.error().message;
  QueuedTwins::while_shut(gate, [&]() -> std::string {
    for (int k = 1; k < kLastInf; ++k) {
      if (!set_scale(scales[k])) return "writing the scale";
      auto r = a.step_device(twins.device_grads[k]);
      if (!r) return r.error().message;
      if (!r->queued || r->skipped) return fmt::format("step {}: not queued", k);
    }
    return "";
  });
  if (::testing::Test::HasFatalFailure()) return;

  std::vector<bool> skipped;
  for (int k = 0; k < kLastInf; ++k) {
    ASSERT_TRUE(b.set_hyper("scale", scales[k]));
    auto r = twins.wait_step(k);
    ASSERT_TRUE(r) << r.error().message;
    skipped.push_back(r->skipped);
  }
  ASSERT_EQ(skipped, (std::vector<bool>{false, false, true, false}));
  EXPECT_EQ(a.step_count(), 3);  // read back from the device: it counted 3 of 4
  EXPECT_EQ(b.step_count(), 3);
  auto last = a.last_step_skipped();
  ASSERT_TRUE(last) << last.error().message;
  EXPECT_FALSE(*last);
  {
    SCOPED_TRACE("after four steps, one skipped");
    twins.expect_same_params();
  }
  // A skipped step at the end: the flag in device memory says so, and the count stays.
  ASSERT_TRUE(set_scale(scales[kLastInf]));
  auto r = a.step_device(twins.device_grads[kLastInf]);
  ASSERT_TRUE(r && r->queued) << (r ? "not queued" : r.error().message);
  EXPECT_EQ(a.step_count(), 3);
  auto flag = a.skip_flag();
  ASSERT_TRUE(flag) << flag.error().message;
  double f = 0;
  ASSERT_TRUE(dev.read(&f, *flag, 8));
  EXPECT_EQ(f, 1.0);
  last = a.last_step_skipped();
  ASSERT_TRUE(last && *last);
  SCOPED_TRACE("after a skipped step");
  twins.expect_same_params();
}

// Scalar states in device memory (scalar_state_memory), as a framework keeps its own copies
// current without a host round trip: ASGD (two scalar states, eta and mu) over two parameter
// groups with their own lr and lambd, queued on the caller's queue while it is held shut, and
// after each step every (group, state) copied on the queue into the caller's memory (a torch
// tensor per state). Once the queue opens, each copy holds the step's value as the same
// optimizer stepping host memory and waiting computes it, bit for bit.
inline void check_scalar_states_in_device_memory(runtime::Device& dev, Backend backend,
                                                 const QueueGate& gate) {
  const int kSteps = 3;
  QueuedTwins twins{dev};
  OptimizerOptions options;
  options.backend = backend;
  options.groups = {{{"w1"}, {{"lr", 0.05}, {"lambd", 0.01}}}};
  twins.make(
      "asgd(lr=1e-2, lambd=1e-3, t0=1.0)", {1000, 40}, kSteps,
      [](int k, size_t t, size_t i) { return std::sin(0.2f * i + k - t); }, options);
  if (::testing::Test::HasFatalFailure()) return;
  Optimizer& a = *twins.queued;
  Optimizer& b = *twins.waits;
  const std::vector<std::string> names = a.scalar_states();
  ASSERT_EQ(names, (std::vector<std::string>{"eta", "mu"}));
  ASSERT_EQ(a.groups(), 2u);
  auto first = a.scalar_state_memory("eta");
  ASSERT_FALSE(first);
  EXPECT_EQ(first.error().message, "scalar_state_memory: no step has run yet");

  // copies[k][g * 2 + j]: state j of group g after step k, in the caller's memory.
  std::vector<std::vector<DeviceMemory>> copies(kSteps);
  const double unset = -1;
  for (auto& c : copies)
    for (size_t n = 0; n < 2 * names.size(); ++n) c.push_back(twins.on_device(&unset, 8));
  auto step_and_copy = [&](int k) -> std::string {
    auto r = a.step_device(twins.device_grads[k]);
    if (!r) return r.error().message;
    for (uint32_t g = 0; g < 2; ++g)
      for (size_t j = 0; j < names.size(); ++j) {
        auto m = a.scalar_state_memory(names[j], g);
        if (!m) return m.error().message;
        if (Status st = dev.copy(copies[k][g * names.size() + j], *m, 8); !st)
          return st.error().message;
      }
    return "";
  };
  ASSERT_EQ(step_and_copy(0), "");
  QueuedTwins::while_shut(gate, [&]() -> std::string {
    for (int k = 1; k < kSteps; ++k)
      if (std::string e = step_and_copy(k); !e.empty()) return e;
    return "";
  });
  if (::testing::Test::HasFatalFailure()) return;
  for (int k = 0; k < kSteps; ++k) {
    ASSERT_TRUE(twins.wait_step(k));
    for (uint32_t g = 0; g < 2; ++g)
      for (size_t j = 0; j < names.size(); ++j) {
        auto want = b.scalar_state(names[j], g);
        ASSERT_TRUE(want) << want.error().message;
        double got = 0;
        ASSERT_TRUE(dev.read(&got, copies[k][g * names.size() + j], 8));
        EXPECT_EQ(got, *want) << names[j] << " of group " << g << " after step " << k;
      }
  }
  twins.expect_same_params();
  auto bad = a.scalar_state_memory("mu_product");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "no scalar state 'mu_product' (this optimizer has: eta, mu)");
  bad = a.scalar_state_memory("eta", 2);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "no parameter group 2");
}

}  // namespace optjit::testing
