// The reference backend: a float64 interpreter that runs a plan pass by pass over host
// buffers. It is the oracle every other backend is checked against.
#pragma once

#include <algorithm>
#include <functional>

#include "codegen/kernel_abi.h"
#include "ir/plan.h"
#include "runtime/state.h"

namespace optjit::runtime {

/// Host values of the scalar/tensor program between passes, shared by every backend: the
/// runtime evaluates these in float64 on the host and hands each pass its uniforms.
class HostProgram {
 public:
  HostProgram(const plan::Plan& plan, const OptimizerState& s);
  /// Evaluates host segment k; returns true when a skip_if fired.
  bool run_segment(size_t k);
  /// The uniforms of pass k for tensor t.
  void uniforms(size_t k, size_t t, std::vector<double>& out) const;
  /// All tensors' uniforms of pass k, one row of `stride` values per tensor.
  std::vector<double> uniform_table(size_t k, size_t stride) const;
  /// Records pass k's reduction results: partial[r][t] for reduction slot r, tensor t.
  void finish_reductions(size_t k, const std::vector<std::vector<double>>& partial);
  /// Scalar-state values to commit if the step is not skipped (group, state, value).
  const std::vector<std::tuple<uint32_t, uint32_t, double>>& pending_states() const {
    return pending_;
  }

 private:
  double& slot(ir::ValueId v, size_t group, size_t tensor);
  double get(ir::ValueId v, size_t group, size_t tensor) const;
  const plan::Plan& plan_;
  const OptimizerState& s_;
  std::vector<uint32_t> slot_;  // value -> index among the scalar or among the tensor values
  size_t n_scalar_ = 0, n_tensor_ = 0;
  std::vector<double> scalar_;  // [group * n_scalar + slot]
  std::vector<double> tensor_;  // [tensor * n_tensor + slot]
  std::vector<std::tuple<uint32_t, uint32_t, double>> pending_;
};

/// The step every backend takes: for each pass k, host segment k then `run_pass(k, host)`;
/// then `finish` (e.g. copying results back from a device); then the scalar states and the
/// step count are committed. A skip_if that fires returns before anything is committed.
Expected<StepResult> drive_step(const plan::Plan& plan, OptimizerState& s,
                                const std::function<Status(size_t, HostProgram&)>& run_pass,
                                const std::function<Status()>& finish = {});

/// Combines per-tensor partial results of a reduction over all tensors, in the fixed order of
/// codegen::kCombineLanes.
double combine(ir::Op op, const std::vector<double>& partials);
double combine_two(ir::Op op, double acc, double partial);
/// Combines at(0), ..., at(n - 1) in the order of codegen::kCombineLanes (what the device
/// step's combine and fold kernels compute, bit for bit).
template <class At>
double combine_range(ir::Op op, size_t n, At at);
/// Identity and accumulation of each reduction, shared by the backends.
double reduce_identity(ir::Op op);
double reduce_step(ir::Op op, double acc, double x);

template <class At>
double combine_range(ir::Op op, size_t n, At at) {
  constexpr size_t W = static_cast<size_t>(codegen::kCombineLanes);
  const double identity = reduce_identity(op);
  if (n == 0) return identity;
  const size_t run = (n + W - 1) / W, lanes = (n + run - 1) / run;
  double lane[W];
  for (size_t j = 0; j < lanes; ++j) {
    double acc = identity;
    for (size_t i = j * run, end = std::min(n, i + run); i < end; ++i)
      acc = combine_two(op, acc, at(i));
    lane[j] = acc;
  }
  for (size_t s = 1; s < lanes; s *= 2)
    for (size_t j = 0; j + s < lanes; j += 2 * s) lane[j] = combine_two(op, lane[j], lane[j + s]);
  return lane[0];
}

class ReferenceBackend {
 public:
  explicit ReferenceBackend(const plan::Plan& plan) : plan_(plan) {}
  /// One optimizer step on `s` (gradients already in the grad buffers).
  StepResult step(OptimizerState& s) const;
  /// Pass k alone, with `host`'s uniforms: the per-tensor partials of its reductions (for a
  /// step over several programs whose reductions combine; step() is drive_step over these).
  std::vector<std::vector<double>> run_pass(size_t k, OptimizerState& s, HostProgram& host) const;

 private:
  const plan::Plan& plan_;
};

}  // namespace optjit::runtime
