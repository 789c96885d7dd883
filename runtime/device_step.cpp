#include "runtime/device_step.h"

#include <algorithm>
#include <cstring>

namespace optjit::runtime {

namespace {
constexpr size_t kHeader = codegen::DeviceStepLayout::kCtlHeader;
}

std::optional<std::vector<double>> DeviceStepHost::ctl_to_write(const OptimizerState& s) const {
  if (stale_) return std::nullopt;
  const size_t G = s.groups.size(), S = layout_.states;
  std::vector<double> want(layout_.ctl_size(G), 0.0);
  want[0] = static_cast<double>(s.step);
  for (size_t g = 0; g < G; ++g)
    for (size_t j = 0; j < S; ++j) want[kHeader + g * S + j] = s.groups[g].states[j];
  // Bitwise, so a NaN state compares equal to itself.
  if (seen_.size() == want.size() && seen_[0] == want[0] &&
      std::memcmp(seen_.data() + kHeader, want.data() + kHeader, G * S * sizeof(double)) == 0)
    return std::nullopt;
  return want;
}

std::vector<double> DeviceStepHost::hypers(const OptimizerState& s) const {
  std::vector<double> out(s.groups.size() * layout_.hypers);
  for (size_t g = 0; g < s.groups.size(); ++g)
    std::copy(s.groups[g].hypers.begin(), s.groups[g].hypers.end(),
              out.begin() + static_cast<std::ptrdiff_t>(g * layout_.hypers));
  return out;
}

std::vector<double> DeviceStepHost::tensor_info(const plan::Plan& plan, const OptimizerState& s) {
  std::vector<double> info(4 * s.tensors.size());
  const size_t B = std::min<size_t>(plan.buffers.size(), ir::kHoldsCodesBuffers);
  for (size_t t = 0; t < s.tensors.size(); ++t) {
    info[4 * t] = s.tensors[t].group;
    info[4 * t + 1] = static_cast<double>(s.tensors[t].whole);
    info[4 * t + 2] = static_cast<double>(s.tensors[t].first);
    uint64_t codes = 0;  // bit b: buffer b holds codes (holds_codes)
    for (size_t b = 0; b < B; ++b)
      if (holds_codes(plan, b, s.tensors[t])) codes |= uint64_t{1} << b;
    info[4 * t + 3] = static_cast<double>(codes);
  }
  return info;
}

double* DeviceStepHost::read_back(const OptimizerState& s) {
  seen_.assign(layout_.ctl_size(s.groups.size()), 0.0);
  return seen_.data();
}

void DeviceStepHost::commit(OptimizerState& s) {
  stale_ = count_stale_ = false;
  const size_t S = layout_.states;
  s.step = static_cast<int64_t>(seen_[0]);
  for (size_t g = 0; g < s.groups.size(); ++g)
    for (size_t j = 0; j < S; ++j) s.groups[g].states[j] = seen_[kHeader + g * S + j];
}

void DeviceStepHost::queued(OptimizerState& s, bool may_skip) {
  if (may_skip) {
    stale_ = count_stale_ = true;
    return;
  }
  ++s.step;
  if (!seen_.empty()) seen_[0] = static_cast<double>(s.step);
  stale_ = stale_ || (layout_.states > 0 && !s.groups.empty());
}

}  // namespace optjit::runtime
