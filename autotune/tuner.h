// The search loop every backend's tuner shares: candidates in stages, each timed on real
// buffers with the state restored afterwards, a noise-guarded deterministic winner, and the
// kernel cache's measurements and decisions. Backends supply the candidates, the pruning and a
// way to build a step for a configuration (cpu_tuner.h, gpu_tuner.h).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ir/error.h"
#include "ir/plan.h"

namespace optjit::cache {
class KernelCache;
}

namespace optjit::autotune {

/// Tuning results are kept per power-of-two bucket of the total element count.
int64_t size_bucket(int64_t elements);
/// A plan's key in tuning tables: its program's structural hash, 16 hex digits.
std::string program_id(const plan::Plan& plan);

struct Measurement {
  std::string config;
  double seconds = 0;  // median step time
  double noise = 0;    // relative spread of the repetitions (interquartile range / median)
  int repetitions = 0;
};

struct Skipped {
  std::string config, reason;  // pruned before running (occupancy, spills, limits) or failed
};

struct TuneOptions {
  double budget_seconds = 10;          // stop trying candidates after this long
  int max_candidates = 24;             // measured candidates, the default included
  double seconds_per_candidate = 0.2;  // time each candidate for about this long
  bool progress = true;                // a line per candidate on stderr
  /// Seconds on a monotonic clock; empty: std::chrono::steady_clock. Tests give a fake one.
  std::function<double()> clock;
};

struct TuneResult {
  std::vector<Measurement> measured;  // in the order run; [0] is the default
  std::vector<Skipped> skipped;
  std::string winner;
  double default_seconds = 0, tuned_seconds = 0, tuning_seconds = 0;
  bool from_cache = false;   // a stored decision was used; nothing was measured
  bool exact_device = true;  // false: the decision came from the nearest device
  std::string not_stored;    // why a new decision is not in the kernel cache (empty: it is)
};

/// What is tuned: one program on one device for one size bucket.
struct TuneTarget {
  std::string program;      // the program's structural hash, 16 hex digits
  std::string performance;  // the device's performance fingerprint ("cpu|...", "cuda|sm_90|...")
  int64_t elements = 0;     // parameter elements in all tensors
};

/// Runs one optimizer step with the configuration it was built for.
using StepFn = std::function<Status()>;
/// Builds a step for a configuration; an error skips the candidate (it is reported).
using MakeStep = std::function<Expected<StepFn>(const std::string& config)>;
/// Candidates of one stage, given the best configuration so far. Stages refine one group of
/// parameters at a time (e.g. the kernel's shape, then the grid, then the chunk size).
using Stage = std::function<std::vector<std::string>(const std::string& best)>;
/// Why a candidate need not run (e.g. too little occupancy), or nothing.
using Prune = std::function<std::optional<std::string>(const std::string& config)>;

struct SearchSpace {
  std::string default_config;  // measured first; it stays unless something is clearly faster
  std::vector<Stage> stages;
  Prune prune;  // may be empty
  /// Whether a stored decision is a configuration of this space (one another optjit version
  /// wrote may not be); an invalid one is ignored and the search runs. Empty: all are valid.
  std::function<bool(const std::string&)> valid;
};

/// With a cache holding a decision for `target` (or the nearest device of its backend), that
/// decision is returned unmeasured. Otherwise candidates are measured in stage order, each on a
/// state `restore` puts back; the winner is the fastest that beats the best so far by more than
/// the noise of both (at least 3%), ties going to the earlier one, so the result is never slower
/// than the default by more than noise. The decision (first stored wins across processes) and
/// every measurement go to the cache.
Expected<TuneResult> tune(const TuneTarget& target, const SearchSpace& space, const MakeStep& make,
                          const std::function<void()>& restore, cache::KernelCache* cache,
                          const TuneOptions& options);

/// The stored decision for `target`, if any (`exact` says whether it is this very device's).
std::optional<std::string> stored_decision(const TuneTarget& target, cache::KernelCache* cache,
                                           bool* exact = nullptr);

}  // namespace optjit::autotune
