#include "ir/reductions.h"

#include <cmath>

#include "ir/error.h"
#include "ir/eval.h"

namespace optjit::ir {

namespace {

const Reduction kReductions[] = {
    {Op::Sum, 0.0, [](double acc, double x) { return acc + x; },
     [](double a, double b) { return a + b; }, "{0} + {1}"},
    {Op::SumSq, 0.0, [](double acc, double x) { return acc + x * x; },
     [](double a, double b) { return a + b; }, "{0} + {1}"},
    // NaN wins, as torch's max propagates it; otherwise the larger magnitude.
    {Op::MaxAbs, 0.0, [](double acc, double x) { return nan_aware_max(acc, std::fabs(x)); },
     [](double a, double b) { return nan_aware_max(a, b); },
     "((isnan({0}) || isnan({1})) ? {0} + {1} : ({0} > {1} ? {0} : {1}))"},
    {Op::AnyNonFinite, 0.0,
     [](double acc, double x) { return (acc != 0 || !std::isfinite(x)) ? 1.0 : 0.0; },
     [](double a, double b) { return (a != 0 || b != 0) ? 1.0 : 0.0; },
     "(({0} != 0.0 || {1} != 0.0) ? 1.0 : 0.0)"},
};

}  // namespace

const Reduction& reduction(Op op) {
  for (const auto& r : kReductions)
    if (r.op == op) return r;
  OPTJIT_CHECK(false && "not a reduction");
  return kReductions[0];
}

}  // namespace optjit::ir
