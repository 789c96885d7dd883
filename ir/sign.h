// What a program's arithmetic says about the range of its values, for checks that need a value
// never to be negative (a state in an unsigned quantized format, whose map has no negative
// values).
#pragma once

#include <limits>
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
/// allowed intervals; loads of the buffers marked in `nonnegative_loads` (by buffer index) are
/// >= 0 (the caller proves that, by induction over the steps); other loads, scalar states and
/// uniforms may be anything. Bounds are computed in f64, rounded to nearest as the program
/// itself computes; a sign is never wrong for that, as rounding keeps signs.
std::vector<ValueFacts> value_facts(const Program& p, const std::vector<bool>& nonnegative_loads);

/// Every state buffer stored in a format that holds no negative values (q8u, q4u) starts >= 0
/// and is stored >= 0, for every allowed hyperparameter value: by induction over the steps,
/// each such buffer's load assumed >= 0. Else an error naming the buffer, its format and the
/// instruction whose value may be negative.
Status check_nonnegative_states(const Program& p);

}  // namespace optjit::ir
