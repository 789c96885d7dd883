#include "autotune/cpu_tuner.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>

#include "cache/kernel_cache.h"
#include "ir/text.h"
#include "runtime/devices.h"

namespace optjit::autotune {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int64_t total_elements(const runtime::OptimizerState& s) {
  int64_t n = 0;
  for (const auto& t : s.tensors) n += t.numel;
  return n;
}

std::string performance_fingerprint() { return runtime::cpu_device().performance; }

std::string program_id(const plan::Plan& plan) {
  return fmt::format("{:016x}", ir::structural_hash(plan.program));
}

}  // namespace

std::string to_string(const runtime::CpuOptions& c) {
  return fmt::format("threads={},chunk={}", c.threads, c.chunk_elements);
}

std::optional<runtime::CpuOptions> parse_cpu_config(const std::string& s) {
  runtime::CpuOptions c;
  long long threads = 0, chunk = 0;
  if (std::sscanf(s.c_str(), "threads=%lld,chunk=%lld", &threads, &chunk) != 2 || threads < 1 ||
      chunk < 1)
    return std::nullopt;
  c.threads = static_cast<int>(threads);
  c.chunk_elements = chunk;
  return c;
}

int64_t size_bucket(int64_t elements) {
  int64_t b = 0;
  while ((int64_t{1} << (b + 1)) <= std::max<int64_t>(elements, 1)) ++b;
  return b;
}

std::vector<runtime::CpuOptions> cpu_candidates(int max_threads, int64_t elements) {
  std::vector<runtime::CpuOptions> out;
  std::set<std::pair<int, int64_t>> seen;
  std::vector<int> threads;
  for (int t = max_threads; t >= 1; t /= 2) threads.push_back(t);
  const int64_t chunks[] = {1 << 16, 1 << 14, 1 << 18, 1 << 12, 1 << 20};
  for (int64_t ch : chunks)
    for (int t : threads) {
      // Chunks larger than the whole set behave alike: keep the first of them.
      int64_t effective = std::min<int64_t>(ch, std::max<int64_t>(elements, 1));
      if (!seen.insert({t, effective}).second) continue;
      out.push_back({t, ch});
    }
  return out;
}

Expected<TuneResult> tune_cpu(const plan::Plan& plan, runtime::OptimizerState& state,
                              cache::KernelCache* cache, TuneOptions options) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string program = program_id(plan), perf = performance_fingerprint();
  const int64_t bucket = size_bucket(total_elements(state));
  TuneResult r;
  if (cache) {
    bool exact = false;
    if (auto d = cache->get_decision(program, bucket, perf, &exact))
      if (auto c = parse_cpu_config(*d)) {
        r.winner = *c;
        r.from_cache = true;
        r.exact_device = exact;
        r.tuning_seconds = seconds_since(t0);
        return r;
      }
  }
  const runtime::OptimizerState snapshot = state;  // a step mutates its inputs
  auto candidates = cpu_candidates(omp_get_max_threads(), total_elements(state));
  size_t best = 0;
  for (size_t i = 0; i < candidates.size() && static_cast<int>(i) < options.max_candidates; ++i) {
    if (i > 0 && seconds_since(t0) > options.budget_seconds) break;
    auto backend = runtime::CpuBackend::create(plan, candidates[i], cache);
    if (!backend) return backend.error();
    (*backend)->step(state);  // warm up: pages, caches, threads
    std::vector<double> times;
    const auto c0 = std::chrono::steady_clock::now();
    while (times.size() < 3 ||
           (seconds_since(c0) < options.seconds_per_candidate && times.size() < 200)) {
      auto s0 = std::chrono::steady_clock::now();
      (*backend)->step(state);
      times.push_back(seconds_since(s0));
    }
    state = snapshot;
    std::sort(times.begin(), times.end());
    Measurement m{to_string(candidates[i]), times[times.size() / 2], 0,
                  static_cast<int>(times.size())};
    // Noise: the spread between the quartiles, relative to the median.
    m.noise = (times[times.size() * 3 / 4] - times[times.size() / 4]) / m.seconds;
    r.measured.push_back(m);
    if (cache)
      (void)cache->put_measurement(program, bucket, perf, m.config, m.seconds, m.repetitions);
    const Measurement& incumbent = r.measured[best];
    const double margin = std::max({0.03, incumbent.noise, m.noise});
    if (m.seconds < incumbent.seconds * (1 - margin)) best = r.measured.size() - 1;
    if (options.progress)
      std::fprintf(stderr, "tune %2zu/%zu %-28s %9.3f ms  noise %4.1f%%%s\n", i + 1,
                   candidates.size(), m.config.c_str(), 1e3 * m.seconds, 100 * m.noise,
                   best + 1 == r.measured.size() ? "  <- best" : "");
  }
  r.winner = candidates[best];
  r.default_seconds = r.measured[0].seconds;
  r.tuned_seconds = r.measured[best].seconds;
  if (cache) {
    (void)cache->put_decision(program, bucket, perf, to_string(r.winner));
    // Another process may have decided first: every process then uses the same decision.
    if (auto d = cache->get_decision(program, bucket, perf))
      if (auto c = parse_cpu_config(*d)) r.winner = *c;
  }
  r.tuning_seconds = seconds_since(t0);
  return r;
}

runtime::CpuOptions cpu_config_for(const plan::Plan& plan, const runtime::OptimizerState& state,
                                   cache::KernelCache* cache) {
  if (cache)
    if (auto d = cache->get_decision(program_id(plan), size_bucket(total_elements(state)),
                                     performance_fingerprint()))
      if (auto c = parse_cpu_config(*d)) return *c;
  return {};
}

}  // namespace optjit::autotune
