// Optimizer state on the host: every tensor's buffers, per-group hyperparameters and scalar
// state, and the step count. Any backend steps this; the reference backend works on it directly.
#pragma once

#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ir/plan.h"
#include "runtime/device_memory.h"
#include "runtime/safetensors.h"

namespace optjit::runtime {

/// Which memory a state's buffers are in, as an epoch: 0 (the default) means untracked, and an
/// executor re-reads every binding (and the tensor set) at every step. Once tracked, whoever
/// changes a TensorState's `external` or `device` binding, or its tensors, calls changed(); a
/// copied or assigned state is in other memory (its own vectors), so it gets a new epoch by
/// itself.
class BindingEpoch {
 public:
  BindingEpoch() = default;
  BindingEpoch(const BindingEpoch& o) : value_(o.value_ ? next() : 0) {}
  BindingEpoch& operator=(const BindingEpoch& o) {
    value_ = o.value_ ? next() : 0;
    return *this;
  }
  void track() { value_ = next(); }
  void changed() {
    if (value_) value_ = next();
  }
  uint64_t value() const { return value_; }

 private:
  static uint64_t next();
  uint64_t value_ = 0;
};

struct StepResult {
  bool skipped = false;  // a skip_if fired (e.g. grad_scaler saw Inf/NaN): nothing was written
  /// Bytes of parameters, gradients and state the step copied between where the caller keeps
  /// them and the device's own arenas (host memory on a GPU; device buffers an arena device
  /// such as OpenCL or WebGPU cannot use in place because the tensors are not one buffer):
  /// 0 when everything was used in place.
  uint64_t copied_bytes = 0;
  /// The step was queued on the caller's queue and not waited for, and it could have been
  /// skipped (OptimizerOptions::defer_skips): `skipped` is not known yet
  /// (Optimizer::last_step_skipped() reads it back).
  bool queued = false;
  /// Bytes the step's passes moved to and from memory for all its tensors, as the version of
  /// each pass each tensor ran moves them (plan::Pass::versions: a Lookahead step that does not
  /// sync leaves the slow weights alone). NaN where the host does not know which versions ran
  /// (the device step computes their conditions on the device).
  double moved_bytes = std::numeric_limits<double>::quiet_NaN();
};

struct TensorState {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  uint32_t group = 0;
  /// What the program sees of the tensor's place in the model (ir ops `numel` and `first`): the
  /// element count of the whole tensor this one is a piece of, and the index of this one's
  /// first element among all the optimizer's parameter elements in parameter order. numel and
  /// the running count unless the optimizer says otherwise (parameters split by dtype into
  /// several programs, pieces of a sharded step): init_state sets them so.
  int64_t whole = 0;
  int64_t first = 0;
  /// Whether the plan's quantized state buffers hold this tensor's state as codes and scales
  /// (else that state is f32 and has no scales): unset, where the format quantizes a tensor of
  /// `whole` elements (ir::quantized_tensor; a sharded piece follows its whole tensor); set, as
  /// the caller chose (Param::quantize, GlobalTensor::quantize).
  std::optional<bool> quantize;
  /// One per Plan::buffers entry, in its storage type: memory the optimizer owns, or (where
  /// `external` is set) the caller's own memory, e.g. a framework's parameter and gradient.
  std::vector<std::vector<uint8_t>> owned;
  std::vector<uint8_t*> external;
  /// One per Plan::buffers entry: where set, the buffer is the caller's memory on the device
  /// the executor runs on (a CUDA address, an OpenCL buffer and offset), used in place; the
  /// host then holds no copy of it (`owned` is empty and `external` null).
  std::vector<DeviceMemory> device;

  uint8_t* data(size_t b) { return external[b] ? external[b] : owned[b].data(); }
  const uint8_t* data(size_t b) const { return external[b] ? external[b] : owned[b].data(); }
  std::vector<uint8_t> bytes(size_t b, DType t) const {
    return bytes(b, static_cast<size_t>(numel) * size_bytes(t));
  }
  std::vector<uint8_t> bytes(size_t b, size_t count) const { return {data(b), data(b) + count}; }
};

struct GroupState {
  std::vector<double> hypers;  // one per Program::hypers
  std::vector<double> states;  // one per Program::states
};

struct OptimizerState {
  std::vector<TensorState> tensors;
  std::vector<GroupState> groups;
  int64_t step = 0;  // completed (not skipped) steps
  /// Deferred state (init_state's defer_state): a state buffer with no memory yet is pending,
  /// and starts from these groups (as they were when the state last started) when materialize()
  /// gives it memory or bind_state() the caller's. `pending` says whether any may be.
  std::vector<GroupState> init_groups;
  bool pending = false;
  /// Changes whenever the memory this state's buffers live in may have changed, so an executor
  /// re-reads the bindings only then (with 10,000 tensors that is worth it).
  BindingEpoch bindings;

  int64_t elements() const {  // parameter elements in all tensors
    int64_t n = 0;
    for (const auto& t : tensors) n += t.numel;
    return n;
  }
};

/// Bytes buffer b of a tensor of `numel` elements takes: numel elements of its storage, or for a
/// quantized buffer its codes (ir::code_bytes) and one f32 scale per block in the buffer after it;
/// tensors a format does not quantize (ir::quantized_tensor) keep it in f32 and no scales.
size_t buffer_bytes(const plan::Plan& plan, size_t b, const TensorState& t);
/// Whether tensor t's choice to keep quantized state (TensorState::quantize) is one every
/// quantized buffer's format can keep: a format of whole blocks refuses a tensor not made of
/// them, naming it.
Status check_quantize(const plan::Plan& plan, const TensorState& t);
/// Whether buffer b of tensor t holds codes (else values in its storage).
bool holds_codes(const plan::Plan& plan, size_t b, const TensorState& t);
/// The element type buffer b of tensor t is stored as: u8 codes, or its storage.
DType stored_type(const plan::Plan& plan, size_t b, const TensorState& t);
/// The shape buffer b of tensor t is saved with: the parameter's, or for 4-bit codes (two to
/// a byte) the flat byte count.
std::vector<int64_t> state_shape(const plan::Plan& plan, size_t b, const TensorState& t);

/// A parameter group: the tensors whose names match any pattern ('*' and '?' globs), with
/// hyperparameter overrides (names as in set_hyper). Tensors no group matches are in group 0.
/// One override is not a hyperparameter: kQuantizeState (0 or 1) chooses whether the group's
/// tensors keep their quantized states quantized (TensorState::quantize; Param::quantize, where
/// set, wins).
inline constexpr std::string_view kQuantizeState = "quantize_state";
struct GroupSpec {
  std::vector<std::string> patterns;
  std::map<std::string, double> overrides;
};

bool glob_match(std::string_view pattern, std::string_view name);

/// The program's hyperparameters that `name` denotes: a full name ("adamw.lr"), or the last
/// components of names ("lr", "betas" for betas.0 and betas.1, "base_lr"). Errors list the names.
Expected<std::vector<uint32_t>> match_hyper(const ir::Program& p, std::string_view name);

/// Sets a hyperparameter (every element of a tuple gets its own of `values`, in order: one value
/// for a tuple is an error) in one group or, without `group`, in every group. Nothing is set
/// unless all of it can be.
Status set_hyper(const ir::Program& p, OptimizerState& s, std::string_view name,
                 const std::vector<double>& values, std::optional<uint32_t> group = {});
/// What set_hyper would set, every check passed: the hyperparameters' indices, or why not.
/// Changes nothing (an optimizer checks each of its programs before it sets any, then sets
/// them with apply_hyper).
Expected<std::vector<uint32_t>> check_set_hyper(const ir::Program& p, const OptimizerState& s,
                                                std::string_view name,
                                                const std::vector<double>& values,
                                                std::optional<uint32_t> group = {});
/// Sets the hyperparameters check_set_hyper returned to `values`, in `group` or every group.
void apply_hyper(OptimizerState& s, const std::vector<uint32_t>& hypers,
                 const std::vector<double>& values, std::optional<uint32_t> group = {});

/// State buffer `b` of tensor t at its initial value under `group`'s hyperparameters (Rprop's
/// step sizes from lr; codes and scales of a quantized buffer), into `out` (buffer_bytes(plan, b,
/// t) bytes).
void initial_state(const plan::Plan& plan, size_t b, const TensorState& t, const GroupState& group,
                   uint8_t* out);
/// `group`'s scalar states at their initial values under its hyperparameters (ASGD's eta).
void initial_scalar_states(const ir::Program& p, GroupState& group);

/// Creates state for `params` (their dtype must be the plan's param storage). Group 0 is the
/// default group; group k+1 is groups[k]. State buffers and scalar states take their initial
/// values, from a hyperparameter where the program says so.
/// `group_of`, when given, assigns each parameter's group explicitly (-1: by patterns).
/// `defer_state`: state buffers get no memory yet (pending); the caller binds its own, or
/// materialize() allocates them. A parameter given without its bytes is the caller's memory.
/// `quantize_of`, when given, is each parameter's own TensorState::quantize (Param::quantize),
/// which wins over its group's kQuantizeState.
Expected<OptimizerState> init_state(const plan::Plan& plan, const std::vector<HostTensor>& params,
                                    const std::vector<GroupSpec>& groups,
                                    const std::vector<int>& group_of = {}, bool defer_state = false,
                                    const std::vector<std::optional<bool>>& quantize_of = {});
/// Whether state buffer b of tensor t is pending: it has bytes but no memory yet.
bool pending(const plan::Plan& plan, size_t b, const TensorState& t);
/// Memory for every pending state buffer, at its initial value under s.init_groups; whether any
/// was made (the bindings changed then). An error names a buffer that does not fit in memory.
Expected<bool> materialize(const plan::Plan& plan, OptimizerState& s);

/// Copies gradients into the grad buffers, converting to the grad storage type. Shapes must match.
Status set_grads(const plan::Plan& plan, OptimizerState& s,
                 const std::vector<const HostTensor*>& grads);

/// The updated parameters under their names, each state buffer as `name.<buffer>`, each scalar
/// state as a 0-d f64 `name.<state>`, and the step count as a 0-d i64 `step`.
TensorFile export_state(const plan::Plan& plan, const OptimizerState& s);
/// The parameters in a file: all its tensors, or for a file written by export_state only the
/// parameters it lists (so an output can be given back as --params).
std::vector<HostTensor> parameters_of(TensorFile f);
/// Resumes from export_state's output: state buffers, scalar states and the step count.
Status import_state(const plan::Plan& plan, OptimizerState& s, const TensorFile& f);

}  // namespace optjit::runtime
