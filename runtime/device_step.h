// The host's side of a device step (codegen::DeviceStepLayout), shared by the CUDA and OpenCL
// backends: the control block it writes when the host's step count or scalar states differ from
// the device's, the tables it uploads, and how the control block read back after a step updates
// the host's state.
#pragma once

#include <optional>
#include <vector>

#include "codegen/c_emitter.h"
#include "runtime/reference.h"

namespace optjit::runtime {

class DeviceStepHost {
 public:
  explicit DeviceStepHost(codegen::DeviceStepLayout layout) : layout_(std::move(layout)) {}
  const codegen::DeviceStepLayout& layout() const { return layout_; }

  /// The control block for `s` (step count, clear flags, scalar states), or nothing when the
  /// device's already holds them: it is the truth between steps, and the host's differs only
  /// on the first step or after the host changed it (a restored checkpoint).
  std::optional<std::vector<double>> ctl_to_write(const OptimizerState& s) const;
  /// Every group's hyperparameters, group after group (written before every step).
  std::vector<double> hypers(const OptimizerState& s) const;
  /// Per tensor (group, the whole tensor's element count, its first element: TensorState::whole
  /// and first), as the segment kernels read them.
  static std::vector<double> tensor_info(const OptimizerState& s);

  /// Where to read the control block back into after a step, sized for `s`.
  double* read_back(const OptimizerState& s);
  /// After read_back's buffer is filled: whether the step was skipped.
  bool skipped() const { return seen_[2] != 0; }
  /// Applies the step count and scalar states the device committed.
  void commit(OptimizerState& s) const;
  /// Forgets what the device holds (the next step writes the control block).
  void forget() { seen_.clear(); }

 private:
  codegen::DeviceStepLayout layout_;
  std::vector<double> seen_;  // the control block as last read back
};

}  // namespace optjit::runtime
