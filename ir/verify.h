#pragma once

#include "ir/error.h"
#include "ir/program.h"

namespace optjit::ir {

/// Checks that a program is well formed: operands defined before use, types that fit each op,
/// ranks that match, declarations in range, at most one store per buffer and state, exactly
/// one param and one grad buffer, and no state stored in an unsigned format (q8u, q4u) that
/// may be negative (ir/sign.h). The message names the instruction (%N) and the problem.
Status verify(const Program& p);

}  // namespace optjit::ir
