// The host's side of a device step (codegen::DeviceStepLayout), shared by the CUDA and OpenCL
// backends: the control block it writes when the host's step count or scalar states differ from
// the device's, the tables it uploads, and how the control block read back after a step updates
// the host's state. A step that is queued and not read back (ExecutorOptions::queued_steps)
// leaves the device's scalar states the truth until they are read back.
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
  /// on the first step or after the host changed it (a restored checkpoint). While stale(),
  /// nothing: the host must read the device's back before it changes its own.
  std::optional<std::vector<double>> ctl_to_write(const OptimizerState& s) const;
  /// After the control block ctl_to_write gave was written to the device.
  void wrote(std::vector<double> ctl) {
    seen_ = std::move(ctl);
    stale_ = count_stale_ = false;
  }
  /// Every group's hyperparameters, group after group (written before every step).
  std::vector<double> hypers(const OptimizerState& s) const;
  /// Per tensor (group, the whole tensor's element count, its first element: TensorState::whole
  /// and first, and which of the first ir::kHoldsCodesBuffers buffers hold codes, as the bits
  /// of an integer: holds_codes), as the segment kernels read them.
  static std::vector<double> tensor_info(const plan::Plan& plan, const OptimizerState& s);

  /// Where to read the control block back into after a step, sized for `s`.
  double* read_back(const OptimizerState& s);
  /// After read_back's buffer is filled: whether the step was skipped.
  bool skipped() const { return seen_[2] != 0; }
  /// Whether a control block was written or read back since the last forget().
  bool seen() const { return !seen_.empty(); }
  /// Applies the step count and scalar states the device committed.
  void commit(OptimizerState& s);
  /// A step was queued and its control block not read back. One that could not be skipped
  /// (no skip_if) the host counts; the scalar states it committed (and, if it could be
  /// skipped, the step count) are the device's until read back and commit()ted.
  void queued(OptimizerState& s, bool may_skip);
  /// Whether the device holds a step count or scalar states the host has not read back.
  bool stale() const { return stale_; }
  /// Whether that includes the step count (queued steps that could be skipped).
  bool count_stale() const { return count_stale_; }
  /// Forgets what the device holds (the next step writes the control block).
  void forget() {
    seen_.clear();
    stale_ = count_stale_ = false;
  }

 private:
  codegen::DeviceStepLayout layout_;
  std::vector<double> seen_;  // the control block as last written or read back
  bool stale_ = false, count_stale_ = false;
};

}  // namespace optjit::runtime
