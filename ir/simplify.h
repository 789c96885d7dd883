#pragma once

#include "ir/program.h"

namespace optjit::ir {

/// Folds constants, applies the algebraic rules below, shares equal subexpressions and drops
/// values nothing uses. Returns a new program; the input is unchanged.
Program simplify(const Program& p);
/// Drops pure instructions that no effect uses, renumbering the rest in order.
Program dce(const Program& p);

}  // namespace optjit::ir
