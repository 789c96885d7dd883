// What a program's arithmetic says about the range of its values, for checks that need a value
// never to be negative (a state in an unsigned quantized format, whose map has no negative
// values).
#pragma once

#include <functional>
#include <limits>
#include <optional>
#include <vector>

#include "ir/error.h"
#include "ir/program.h"

namespace optjit::ir {

/// The real numbers [lo, hi] (ends included; NaN is not tracked).
struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool operator==(const Range&) const = default;
};

/// What is known of a value v: the range it lies in, and v = k * base with k in a range that
/// does not cross 0 (base is v itself, k = 1, when nothing better is known). The factor keeps
/// a square visible: (c * g) * g with c >= 0 is >= 0 for any g, which ranges alone cannot see.
struct ValueFacts {
  Range range;
  Range k{1, 1};
  ValueId base = kNoValue;
};

/// One entry per instruction of p (effects get the default). Hyperparameters lie in their
/// allowed intervals, or in hyper_ranges[h] where given (one per hyperparameter); loads of the
/// buffers marked in `nonnegative_loads` (by buffer index) are >= 0 (the caller proves that, by
/// induction over the steps); other loads, scalar states and uniforms may be anything. Bounds
/// are computed in f64, rounded to nearest as the program itself computes; a sign is never
/// wrong for that, as rounding keeps signs.
std::vector<ValueFacts> value_facts(const Program& p, const std::vector<bool>& nonnegative_loads,
                                    const std::vector<Range>* hyper_ranges = nullptr);

/// A state in a format that holds no negative values (q8u, q4u) that may be negative, and why.
struct NegativeState {
  uint32_t buffer = 0;
  ValueId value = kNoValue;  // its new value that may be negative; kNoValue: its start
  /// Hyperparameters whose allowed values let it be negative: with these at their given values
  /// (and the others anywhere allowed) it is proved >= 0. Empty where the hyperparameters
  /// do not matter (it is made of values of either sign: the gradients, a first moment).
  std::vector<uint32_t> hypers;
};

/// Every state buffer stored in a format that holds no negative values (q8u, q4u) starts >= 0
/// and is stored >= 0, for every allowed hyperparameter value: by induction over the steps,
/// each such buffer's load assumed >= 0. Else the first that may not be.
std::optional<NegativeState> find_negative_state(const Program& p);

/// find_negative_state's finding as an error naming the buffer, its format, the instruction and
/// the hyperparameters; `boundable(h)` says whether the user can narrow hyperparameter h's
/// allowed values (a custom transform's declaration, IR text; not a built-in's, which are its
/// peer's), and if so the error says to.
Error negative_state_error(const Program& p, const NegativeState& n,
                           const std::function<bool(const HyperDecl&)>& boundable);

/// find_negative_state as a Status (every hyperparameter boundable: IR text).
Status check_nonnegative_states(const Program& p);

}  // namespace optjit::ir
