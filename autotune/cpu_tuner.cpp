#include "autotune/cpu_tuner.h"

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <set>

#include "runtime/devices.h"
#include "runtime/executor.h"

namespace optjit::autotune {

std::string to_string(const codegen::CpuLaunch& c) {
  return fmt::format("threads={},chunk={},unroll={}", c.threads, c.chunk_elements, c.unroll);
}

std::optional<codegen::CpuLaunch> parse_cpu_config(const std::string& s) {
  codegen::CpuLaunch c;
  long long threads = 0, chunk = 0;
  int unroll = 0, used = 0;
  const int n = std::sscanf(s.c_str(), "threads=%lld,chunk=%lld%n,unroll=%d%n", &threads, &chunk,
                            &used, &unroll, &used);
  if (n < 2 || used != static_cast<int>(s.size()) || threads < 1 || chunk < 1 || unroll < 0 ||
      unroll > 16)
    return std::nullopt;
  c.threads = static_cast<int>(threads);
  c.chunk_elements = chunk;
  c.unroll = unroll;
  return c;
}

std::vector<codegen::CpuLaunch> cpu_candidates(int max_threads, int64_t elements) {
  std::vector<codegen::CpuLaunch> out;
  std::set<std::pair<int, int64_t>> seen;
  std::vector<int> threads;
  for (int t = max_threads; t >= 1; t /= 2) threads.push_back(t);
  const int64_t chunks[] = {1 << 16, 1 << 14, 1 << 18, 1 << 12, 1 << 20};
  for (int64_t ch : chunks)
    for (int t : threads) {
      // Chunks larger than the whole set behave alike: keep the first of them.
      int64_t effective = std::min<int64_t>(ch, std::max<int64_t>(elements, 1));
      if (!seen.insert({t, effective}).second) continue;
      out.push_back({t, ch, 0});
    }
  return out;
}

TuneTarget cpu_target(const plan::Plan& plan, int64_t elements) {
  return {program_id(plan), runtime::cpu_device().performance, elements};
}

Expected<TuneResult> tune_cpu(const plan::Plan& plan, runtime::OptimizerState& state,
                              cache::KernelCache* cache, TuneOptions options,
                              const std::function<void()>& restore_external) {
  const TuneTarget target = cpu_target(plan, state.elements());
  const auto candidates = cpu_candidates(omp_get_max_threads(), target.elements);
  SearchSpace space;
  space.default_config = to_string(candidates[0]);
  space.valid = [](const std::string& c) { return parse_cpu_config(c).has_value(); };
  space.stages.push_back([candidates](const std::string&) {
    std::vector<std::string> out;
    for (const auto& c : candidates) out.push_back(to_string(c));
    return out;
  });
  space.stages.push_back([](const std::string& best) {
    std::vector<std::string> out;
    codegen::CpuLaunch c = parse_cpu_config(best).value();
    for (int u : kCpuUnrolls) {
      c.unroll = u;
      out.push_back(to_string(c));
    }
    return out;
  });
  const runtime::OptimizerState snapshot = state;  // a step mutates its inputs
  auto device = runtime::open_device({.kind = "cpu"});
  if (!device) return device.error();
  std::unique_ptr<runtime::Executor> executor;
  MakeStep make = [&](const std::string& config) -> Expected<StepFn> {
    auto c = parse_cpu_config(config);
    if (!c) return make_error("not a CPU configuration: {}", config);
    executor.reset();
    auto e = runtime::Executor::create(plan, *device, runtime::ExecutorOptions::of(*c), cache);
    if (!e) return e.error();
    executor = std::move(*e);
    return StepFn([&]() -> Status {
      auto r = executor->step(state);
      return r ? Status::Ok() : Status(r.error());
    });
  };
  auto restore = [&] {
    state = snapshot;
    if (restore_external) restore_external();
  };
  return tune(target, space, make, restore, cache, options);
}

codegen::CpuLaunch cpu_config_for(const plan::Plan& plan, const runtime::OptimizerState& state,
                                   cache::KernelCache* cache) {
  if (auto d = stored_decision(cpu_target(plan, state.elements()), cache))
    if (auto c = parse_cpu_config(*d)) return *c;
  return {};
}

}  // namespace optjit::autotune
