// The IR's text form: print and parse round-trip exactly; the structural hash keys the cache.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ir/error.h"
#include "ir/program.h"

namespace optjit::ir {

struct PrintOptions {
  bool values = true;  // hyperparameter defaults and initial values (runtime data, not structure)
  bool ranks = true;   // a trailing "; rank" comment on each value (ignored by the parser)
};

std::string print(const Program& p, PrintOptions opts = {});
/// Parses print()'s output (or hand-written IR of the same form); the result is verified.
Expected<Program> parse_ir(std::string_view text);

/// XXH3-64 of the program's structure: everything but the runtime values of hyperparameters
/// and initial states. Stable across processes, machines and library versions of optjit that
/// keep the text form.
uint64_t structural_hash(const Program& p);

}  // namespace optjit::ir
