// Autotuning the CPU backend's launch parameters (threads, chunk size, unroll) on real buffers.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "autotune/tuner.h"
#include "ir/plan.h"
#include "runtime/executor.h"

namespace optjit::autotune {

/// A CPU configuration as stored in the cache: "threads=2,chunk=65536,unroll=0".
std::string to_string(const codegen::CpuLaunch& c);
/// Also reads the form without unroll that optjit 0.1 stored (unroll 0).
std::optional<codegen::CpuLaunch> parse_cpu_config(const std::string& s);

/// Stage 1: threads x chunk size in a fixed order, the default (all threads, 65536) first.
std::vector<codegen::CpuLaunch> cpu_candidates(int max_threads, int64_t elements);
/// Stage 2: the unroll (vector interleave) counts tried with the best threads and chunk size.
inline constexpr int kCpuUnrolls[] = {0, 1, 2, 4};

/// What a CPU tuning result is keyed by: this plan on this machine's CPU at this size.
TuneTarget cpu_target(const plan::Plan& plan, int64_t elements);

/// Tunes on `state` (restored after every candidate); see autotune::tune. Buffers the state
/// only points to (a framework's parameters) are not in the snapshot: `restore_external` puts
/// them back.
Expected<TuneResult> tune_cpu(const plan::Plan& plan, runtime::OptimizerState& state,
                              cache::KernelCache* cache, TuneOptions options = {},
                              const std::function<void()>& restore_external = {});

/// The configuration to use for a plan on this machine: the cache's decision, else the default.
codegen::CpuLaunch cpu_config_for(const plan::Plan& plan, const runtime::OptimizerState& state,
                                   cache::KernelCache* cache);

}  // namespace optjit::autotune
