// An optimizer whose parameters, gradients and every state buffer are the caller's memory, as a
// framework keeps them: host pointers on the CPU, device memory (and the caller's queue) on a
// GPU. Each step is checked against the float64 reference on host memory, and every byte around
// each tensor (guard bytes) must be as the caller left it.
#pragma once

#include <cstring>
#include <functional>

#include <gtest/gtest.h>

#include "api/optimizer.h"
#include "runtime/device.h"

namespace optjit::testing {

/// The caller's memory on the optimizer's device: how to allocate, write and read it, and the
/// queue the optimizer should share. For the CPU, `alloc` returns host addresses.
struct CallerMemory {
  Backend backend = Backend::cpu;
  std::function<Expected<DeviceMemory>(size_t bytes)> alloc;
  std::function<Status(DeviceMemory dst, const void* src, size_t bytes)> write;
  std::function<Status(void* dst, DeviceMemory src, size_t bytes)> read;
  void* queue = nullptr;
  /// One allocation per buffer holding every tensor (a framework's flat buffer), or one
  /// allocation per tensor and buffer.
  bool flat = false;
};

/// The caller's memory on a device the caller opened itself (its own context and queue, as a
/// framework's), in `blocks`.
inline CallerMemory device_memory(runtime::Device& dev, Backend backend, bool flat,
                                  std::vector<runtime::DeviceAllocation>& blocks) {
  CallerMemory m;
  m.backend = backend;
  m.flat = flat;
  m.queue = dev.queue();
  m.alloc = [&dev, &blocks](size_t bytes) -> Expected<DeviceMemory> {
    auto a = runtime::allocate(dev, bytes, "test memory");
    if (!a) return a.error();
    blocks.push_back(std::move(*a));
    return blocks.back().memory();
  };
  m.write = [&dev](DeviceMemory d, const void* src, size_t n) { return dev.write(d, src, n); };
  m.read = [&dev](void* dst, DeviceMemory d, size_t n) { return dev.read(dst, d, n); };
  return m;
}

inline void check_caller_owned_memory(const CallerMemory& m) {
  constexpr size_t kGuard = 256;
  constexpr uint8_t kPattern = 0xA5;
  const char* pipeline = "chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-2, weight_decay=0.1))";
  const std::vector<int64_t> sizes = {1000, 10, 37};
  const size_t T = sizes.size();
  const bool host = m.backend == Backend::cpu;
  // One region of caller memory: an allocation, and where in it each tensor starts.
  struct Region {
    DeviceMemory base;
    size_t bytes = 0;
    std::vector<size_t> at;  // byte offset of each tensor's data
  };
  // The buffers: param, grad, then the state buffers by name; each a region (flat) or T regions.
  auto make = [&](std::vector<Region>& out) {
    auto layout = [&](std::vector<int64_t> of) {
      Region r;
      size_t at = kGuard;
      for (int64_t n : of) {
        r.at.push_back(at);
        at += (static_cast<size_t>(n) * 4 + kGuard + 255) / 256 * 256;
      }
      r.bytes = at + kGuard;
      auto a = m.alloc(r.bytes);
      EXPECT_TRUE(a) << a.error().message;
      if (!a) return;
      r.base = *a;
      std::vector<uint8_t> fill(r.bytes, kPattern);
      EXPECT_TRUE(m.write(r.base, fill.data(), fill.size()));
      out.push_back(r);
    };
    if (m.flat) {
      layout(sizes);
    } else {
      for (int64_t n : sizes) layout({n});
    }
  };
  auto where = [&](const std::vector<Region>& regions, size_t t) {
    const Region& r = m.flat ? regions[0] : regions[t];
    return r.base.at(r.at[m.flat ? t : 0]);
  };
  auto values = [&](int64_t n, double a, double b) {
    std::vector<float> v(static_cast<size_t>(n));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(a * std::sin(b * (i + 1)));
    return v;
  };

  std::vector<Region> param_mem, grad_mem;
  make(param_mem);
  make(grad_mem);
  ASSERT_FALSE(param_mem.empty() || grad_mem.empty());
  std::vector<std::vector<float>> ref_params, ref_grads(T);
  std::vector<Param> caller, reference;
  for (size_t t = 0; t < T; ++t) {
    ref_params.push_back(values(sizes[t], 0.5, 0.3 + t));
    ASSERT_TRUE(m.write(where(param_mem, t), ref_params[t].data(), ref_params[t].size() * 4));
    const DeviceMemory d = where(param_mem, t);
    Param p{fmt::format("w{}", t), nullptr, DType::f32, {sizes[t]}};
    if (host)
      p.data = reinterpret_cast<void*>(d.handle + d.offset);
    else
      p.device = d;
    caller.push_back(p);
    reference.push_back({p.name, ref_params[t].data(), DType::f32, {sizes[t]}});
  }
  OptimizerOptions options;
  options.backend = m.backend;
  options.queue = m.queue;
  options.cache.reset();
  auto opt = Optimizer::create(pipeline, caller, options);
  ASSERT_TRUE(opt) << opt.error().message;
  OptimizerOptions ref_options;
  ref_options.backend = Backend::reference;
  auto ref = Optimizer::create(pipeline, reference, ref_options);
  ASSERT_TRUE(ref) << ref.error().message;
  // Every state buffer in the caller's memory too.
  std::vector<std::string> states;
  for (const auto& b : (*opt)->plan().buffers)
    if (b.role == ir::BufferRole::state) states.push_back(b.name);
  ASSERT_EQ(states, (std::vector<std::string>{"exp_avg", "exp_avg_sq"}));
  std::vector<std::vector<Region>> state_mem(states.size());
  for (size_t k = 0; k < states.size(); ++k) {
    make(state_mem[k]);
    for (size_t t = 0; t < T; ++t) {
      const DeviceMemory d = where(state_mem[k], t);
      const Status st =
          host ? (*opt)->bind_state(t, states[k], reinterpret_cast<void*>(d.handle + d.offset))
               : (*opt)->bind_state(t, states[k], d);
      ASSERT_TRUE(st) << st.error().message;
    }
  }
  auto read_floats = [&](DeviceMemory d, int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    EXPECT_TRUE(m.read(v.data(), d, v.size() * 4));
    return v;
  };
  auto guards_intact = [&](const std::vector<Region>& regions, const char* what) {
    for (size_t r = 0; r < regions.size(); ++r) {
      std::vector<uint8_t> bytes(regions[r].bytes);
      ASSERT_TRUE(m.read(bytes.data(), regions[r].base, bytes.size()));
      std::vector<bool> inside(bytes.size(), false);
      for (size_t t = 0; t < regions[r].at.size(); ++t) {
        const int64_t n = sizes[m.flat ? t : r];
        for (size_t i = 0; i < static_cast<size_t>(n) * 4; ++i) inside[regions[r].at[t] + i] = true;
      }
      size_t changed = 0;
      for (size_t i = 0; i < bytes.size(); ++i) changed += !inside[i] && bytes[i] != kPattern;
      EXPECT_EQ(changed, 0u) << what << " region " << r << ": bytes outside the tensors changed";
    }
  };
  for (int step = 0; step < 4; ++step) {
    SCOPED_TRACE(fmt::format("step {}", step + 1));
    if (step == 2) {
      // Midway, every state moves to new memory of the caller's, its values carried there
      // (bind_state without adopt reads the buffer's current values from where it is).
      for (size_t k = 0; k < states.size(); ++k) {
        std::vector<Region> moved;
        make(moved);
        for (size_t t = 0; t < T; ++t) {
          const DeviceMemory d = where(moved, t);
          const Status st =
              host ? (*opt)->bind_state(t, states[k], reinterpret_cast<void*>(d.handle + d.offset))
                   : (*opt)->bind_state(t, states[k], d);
          ASSERT_TRUE(st) << st.error().message;
        }
        state_mem[k] = std::move(moved);
      }
    }
    std::vector<const void*> host_grads;
    std::vector<DeviceMemory> device_grads;
    for (size_t t = 0; t < T; ++t) {
      ref_grads[t] = values(sizes[t], 1.0 + step, 0.7 + 0.1 * step + t);
      ASSERT_TRUE(m.write(where(grad_mem, t), ref_grads[t].data(), ref_grads[t].size() * 4));
      const DeviceMemory d = where(grad_mem, t);
      host_grads.push_back(reinterpret_cast<const void*>(d.handle + d.offset));
      device_grads.push_back(d);
    }
    std::vector<const void*> ref_ptrs;
    for (auto& g : ref_grads) ref_ptrs.push_back(g.data());
    auto r = host ? (*opt)->step(host_grads) : (*opt)->step_device(device_grads);
    ASSERT_TRUE(r) << r.error().message;
    ASSERT_TRUE((*ref)->step(ref_ptrs));
    auto expected = (*ref)->export_state();
    ASSERT_TRUE(expected);
    for (size_t t = 0; t < T; ++t) {
      const auto got = read_floats(where(param_mem, t), sizes[t]);
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], ref_params[t][i], 2e-6 * std::max(1.0f, std::fabs(ref_params[t][i])))
            << "w" << t << "[" << i << "]";
      for (size_t k = 0; k < states.size(); ++k) {
        const auto st = read_floats(where(state_mem[k], t), sizes[t]);
        const auto* want = expected->find(fmt::format("w{}.{}", t, states[k]));
        ASSERT_TRUE(want);
        for (size_t i = 0; i < st.size(); ++i)
          ASSERT_NEAR(st[i], want->get(static_cast<int64_t>(i)),
                      2e-6 * std::max(1e-3, std::fabs(want->get(static_cast<int64_t>(i)))))
              << "w" << t << "." << states[k] << "[" << i << "]";
      }
    }
    guards_intact(param_mem, "params");
    guards_intact(grad_mem, "grads");
    for (size_t k = 0; k < states.size(); ++k) guards_intact(state_mem[k], states[k].c_str());
  }
  EXPECT_EQ((*opt)->step_count(), 4);
  // A checkpoint reads the caller's state; loading one writes it back there.
  auto saved = (*opt)->export_state();
  ASSERT_TRUE(saved) << saved.error().message;
  const auto* avg = saved->find("w1.exp_avg");
  ASSERT_TRUE(avg);
  EXPECT_EQ(avg->get(3), read_floats(where(state_mem[0], 1), sizes[1])[3]);
  std::vector<float> zeros(static_cast<size_t>(sizes[1]), 0.0f);
  ASSERT_TRUE(m.write(where(state_mem[0], 1), zeros.data(), zeros.size() * 4));
  ASSERT_TRUE((*opt)->import_state(*saved));
  EXPECT_EQ(read_floats(where(state_mem[0], 1), sizes[1])[3], avg->get(3));
  for (size_t k = 0; k < states.size(); ++k) guards_intact(state_mem[k], states[k].c_str());
}

}  // namespace optjit::testing
