#include "runtime/cpu_backend.h"

#include <omp.h>

namespace optjit::runtime {

Expected<std::unique_ptr<CpuBackend>> CpuBackend::create(const plan::Plan& plan, CpuOptions options,
                                                         cache::KernelCache* cache) {
  if (options.chunk_elements < 1) return make_error("chunk size must be at least 1 element");
  auto kernels = codegen::CpuKernels::compile(plan, cache, options.unroll);
  if (!kernels) return kernels.error();
  std::unique_ptr<CpuBackend> b(new CpuBackend(plan, options));
  b->kernels_ = std::move(*kernels);
  b->threads_ = options.threads > 0 ? options.threads : omp_get_max_threads();
  return b;
}

void CpuBackend::prepare(const OptimizerState& s) {
  std::vector<int64_t> numels;
  for (const auto& t : s.tensors) numels.push_back(t.numel);
  if (numels == table_.numels && !table_.chunks.empty()) return;
  table_ = ChunkTable::build(numels, options_.chunk_elements);
  const auto& chunks = table_.chunks;
  const int64_t total = table_.total;
  // Contiguous chunk ranges with about equal elements per thread (plus a small per-chunk cost).
  const int64_t n = static_cast<int64_t>(chunks.size());
  const double per_thread = static_cast<double>(total + 64 * n) / threads_;
  thread_start_.assign(1, 0);
  double acc = 0;
  for (int64_t c = 0; c < n; ++c) {
    acc += static_cast<double>(chunks[c].length + 64);
    if (acc >= per_thread * static_cast<double>(thread_start_.size()) &&
        static_cast<int>(thread_start_.size()) < threads_)
      thread_start_.push_back(c + 1);
  }
  while (static_cast<int>(thread_start_.size()) <= threads_) thread_start_.push_back(n);
  thread_start_.back() = n;
}

void CpuBackend::run_pass(size_t k, OptimizerState& s, HostProgram& host) {
  const plan::Pass& pass = plan_.passes[k];
  const size_t T = s.tensors.size(), B = plan_.buffers.size(), U = pass.uniforms.size();
  const size_t R = pass.reductions.size(), G = s.groups.size();
  pointers_.resize(T * B);
  rows_.resize(T);
  // Uniforms: one row per group when they are all per-step scalars (the common case), so
  // 10,000 tensors do not copy them 10,000 times; one row per tensor otherwise.
  bool per_tensor = false;
  for (auto v : pass.uniforms) per_tensor |= plan_.program.at(v).rank == Rank::tensor;
  const size_t stride = std::max<size_t>(U, 1);
  std::vector<double> u;
  if (per_tensor) {
    uniforms_ = host.uniform_table(k, stride);
  } else {
    uniforms_.resize(G * stride);
    std::vector<bool> done(G, false);
    for (size_t t = 0; t < T && U > 0; ++t) {
      uint32_t g = s.tensors[t].group;
      if (done[g]) continue;
      host.uniforms(k, t, u);
      std::copy(u.begin(), u.end(), uniforms_.begin() + static_cast<std::ptrdiff_t>(g * stride));
      done[g] = true;
    }
  }
  for (size_t t = 0; t < T; ++t) {
    for (size_t b = 0; b < B; ++b) pointers_[t * B + b] = s.tensors[t].data(b);
    size_t row = per_tensor ? t : s.tensors[t].group;
    rows_[t] = {pointers_.data() + t * B, uniforms_.data() + row * stride};
  }
  partials_.assign(table_.chunks.size() * R, 0.0);
  codegen::PassFn fn = kernels_->pass(k);
  const int used = static_cast<int>(thread_start_.size()) - 1;
#pragma omp parallel num_threads(used)
  {
    int t = omp_get_thread_num();
    if (thread_start_[t] < thread_start_[t + 1])
      fn(rows_.data(), table_.chunks.data(), thread_start_[t], thread_start_[t + 1],
         partials_.data());
  }
  if (R == 0) return;
  // Chunks in order within a tensor, then tensors in order: independent of the threads.
  auto partial = combine_partials(plan_, pass, table_, partials_.data());
  host.finish_reductions(k, partial);
}

StepResult CpuBackend::step(OptimizerState& s) {
  prepare(s);
  return drive_step(plan_, s,
                    [&](size_t k, HostProgram& host) {
                      run_pass(k, s, host);
                      return Status::Ok();
                    })
      .value();
}

}  // namespace optjit::runtime
