#include "autotune/tuner.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>

#include "cache/kernel_cache.h"
#include "ir/text.h"

namespace optjit::autotune {

namespace {

using Clock = std::function<double()>;

// Times `step` for about `seconds` (at least 3 and at most 200 repetitions) after one warm-up
// step (first uploads, page faults, thread start-up).
Expected<Measurement> measure(const std::string& config, const StepFn& step, double seconds,
                              const Clock& now) {
  OPTJIT_TRY(step());
  std::vector<double> times;
  const double c0 = now();
  while (times.size() < 3 || (now() - c0 < seconds && times.size() < 200)) {
    const double s0 = now();
    OPTJIT_TRY(step());
    times.push_back(now() - s0);
  }
  std::sort(times.begin(), times.end());
  Measurement m{config, times[times.size() / 2], 0, static_cast<int>(times.size())};
  m.noise = (times[times.size() * 3 / 4] - times[times.size() / 4]) / m.seconds;
  return m;
}

}  // namespace

int64_t size_bucket(int64_t elements) {
  int64_t b = 0;
  while ((int64_t{1} << (b + 1)) <= std::max<int64_t>(elements, 1)) ++b;
  return b;
}

std::string program_id(const plan::Plan& plan) {
  return fmt::format("{:016x}", ir::structural_hash(plan.program));
}

std::optional<std::string> stored_decision(const TuneTarget& target, cache::KernelCache* cache,
                                           bool* exact) {
  if (!cache) return std::nullopt;
  return cache->get_decision(target.program, size_bucket(target.elements), target.performance,
                             exact);
}

Expected<TuneResult> tune(const TuneTarget& target, const SearchSpace& space, const MakeStep& make,
                          const std::function<void()>& restore, cache::KernelCache* cache,
                          const TuneOptions& options) {
  const Clock now = options.clock ? options.clock : [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  const double t0 = now();
  auto seconds_since = [&](double t) { return now() - t; };
  const int64_t bucket = size_bucket(target.elements);
  TuneResult r;
  bool exact = false;
  auto usable = [&](const std::optional<std::string>& d) {
    return d && (!space.valid || space.valid(*d));
  };
  const std::optional<std::string> stored = stored_decision(target, cache, &exact);
  // A stored decision this space cannot read, for this very device, is replaced below.
  const bool replace = stored && exact && !usable(stored);
  if (auto d = stored; usable(d)) {
    r.winner = *d;
    r.from_cache = true;
    r.exact_device = exact;
    r.tuning_seconds = seconds_since(t0);
    return r;
  }
  std::set<std::string> seen;
  size_t best = 0;
  bool out_of_budget = false;
  // Measures one candidate; false when the budget is spent.
  auto run = [&](const std::string& config, const std::string& label) -> Status {
    if (!seen.insert(config).second) return Status::Ok();
    const bool is_default = r.measured.empty();
    if (!is_default && (seconds_since(t0) > options.budget_seconds ||
                        static_cast<int>(r.measured.size()) >= options.max_candidates)) {
      out_of_budget = true;
      return Status::Ok();
    }
    if (!is_default && space.prune)
      if (auto why = space.prune(config)) {
        r.skipped.push_back({config, *why});
        if (options.progress)
          std::fprintf(stderr, "tune %-9s %-44s pruned: %s\n", label.c_str(), config.c_str(),
                       why->c_str());
        return Status::Ok();
      }
    auto step = make(config);
    Expected<Measurement> m = step ? measure(config, *step, options.seconds_per_candidate, now)
                                   : Expected<Measurement>(step.error());
    restore();  // a step mutates its inputs
    if (!m) {
      // The default must run: nothing else can be compared with it.
      if (is_default)
        return make_error("the default configuration {} failed: {}", config, m.error().message);
      r.skipped.push_back({config, m.error().message});
      if (options.progress)
        std::fprintf(stderr, "tune %-9s %-44s failed: %s\n", label.c_str(), config.c_str(),
                     m.error().message.c_str());
      return Status::Ok();
    }
    r.measured.push_back(*m);
    if (cache)
      (void)cache->put_measurement(target.program, bucket, target.performance, m->config,
                                   m->seconds, m->repetitions);
    const Measurement& incumbent = r.measured[best];
    const double margin = std::max({0.03, incumbent.noise, m->noise});
    if (m->seconds < incumbent.seconds * (1 - margin)) best = r.measured.size() - 1;
    if (options.progress)
      std::fprintf(stderr, "tune %-9s %-44s %9.3f ms  noise %4.1f%%%s\n", label.c_str(),
                   config.c_str(), 1e3 * m->seconds, 100 * m->noise,
                   best + 1 == r.measured.size() ? "  <- best" : "");
    return Status::Ok();
  };
  OPTJIT_TRY(run(space.default_config, "default"));
  for (size_t s = 0; s < space.stages.size() && !out_of_budget; ++s) {
    const std::vector<std::string> candidates = space.stages[s](r.measured[best].config);
    for (size_t i = 0; i < candidates.size() && !out_of_budget; ++i)
      OPTJIT_TRY(run(candidates[i], fmt::format("{}:{}/{}", s + 1, i + 1, candidates.size())));
  }
  r.winner = r.measured[best].config;
  r.default_seconds = r.measured[0].seconds;
  r.tuned_seconds = r.measured[best].seconds;
  if (!cache) {
    r.not_stored = "there is no kernel cache";
  } else {
    if (Status s =
            cache->put_decision(target.program, bucket, target.performance, r.winner, replace);
        !s) {
      r.not_stored = s.error().message;
      cache->warn(s.error().message + "; the tuning decision is not stored");
    }
    // Another process may have decided first: every process then uses the same decision.
    if (auto d = cache->get_decision(target.program, bucket, target.performance); usable(d))
      r.winner = *d;
    for (const auto& m : r.measured)
      if (m.config == r.winner) r.tuned_seconds = m.seconds;
  }
  r.tuning_seconds = seconds_since(t0);
  return r;
}

}  // namespace optjit::autotune
