// Each reduction defined once: its identity, how an element enters an accumulator, how two
// partials combine (in C++ for the reference interpreter and the host, and as C text for the
// device-step kernels), so every backend combines the same way. The pass kernels accumulate
// maxima and flags in an integer encoding of the same values (the bits of |x|; bits >= +Inf
// for a non-finite element), which their finish turns back into these doubles.
#pragma once

#include <string>

#include "ir/program.h"

namespace optjit::ir {

struct Reduction {
  Op op;
  double identity;
  double (*accumulate)(double acc, double element);
  double (*combine)(double a, double b);
  /// combine() as a C expression of two doubles, fmt placeholders {0} and {1} (each may be
  /// used more than once, so pass simple operands).
  const char* combine_c;
};

/// The definition of `op` (Sum, SumSq, MaxAbs, AnyNonFinite); an internal error for others.
const Reduction& reduction(Op op);

}  // namespace optjit::ir
