// Autotuning the CPU backend's launch parameters (threads, chunk size) on real buffers.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ir/plan.h"
#include "runtime/cpu_backend.h"

namespace optjit::cache {
class KernelCache;
}

namespace optjit::autotune {

/// A CPU configuration as stored in the cache: "threads=2,chunk=65536".
std::string to_string(const runtime::CpuOptions& c);
std::optional<runtime::CpuOptions> parse_cpu_config(const std::string& s);

/// Tuning results are kept per power-of-two bucket of the total element count.
int64_t size_bucket(int64_t elements);

struct Measurement {
  std::string config;
  double seconds = 0;  // median step time
  double noise = 0;    // relative spread of the repetitions
  int repetitions = 0;
};

struct TuneOptions {
  double budget_seconds = 10;  // stop trying candidates after this long
  int max_candidates = 24;
  double seconds_per_candidate = 0.2;  // time each candidate for about this long
  bool progress = true;                // a line per candidate on stderr
};

struct TuneResult {
  std::vector<Measurement> measured;  // in the fixed candidate order; [0] is the default
  runtime::CpuOptions winner;
  double default_seconds = 0, tuned_seconds = 0, tuning_seconds = 0;
  bool from_cache = false;   // a stored decision was used; nothing was measured
  bool exact_device = true;  // false: the decision came from the nearest device
};

/// The candidates in their fixed order (the default configuration first).
std::vector<runtime::CpuOptions> cpu_candidates(int max_threads, int64_t elements);

/// Tunes on `state` (restored after every candidate). Winner: the fastest candidate that beats
/// the best so far by more than the measured noise (at least 3%); ties go to the earlier one, so
/// the default stays unless something is clearly faster. With a cache, a stored decision is used
/// as it is, and a new one is stored with every measurement.
Expected<TuneResult> tune_cpu(const plan::Plan& plan, runtime::OptimizerState& state,
                              cache::KernelCache* cache, TuneOptions options = {});

/// The configuration to use for a plan on this machine: the cache's decision, else the default.
runtime::CpuOptions cpu_config_for(const plan::Plan& plan, const runtime::OptimizerState& state,
                                   cache::KernelCache* cache);

}  // namespace optjit::autotune
