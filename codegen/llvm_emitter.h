// Plan -> LLVM IR, built with IRBuilder: one function `optjit_pass_<k>` per pass (see
// kernel_abi.h).
#pragma once

#include <string>

#include "ir/error.h"
#include "ir/plan.h"

namespace llvm {
class Module;
}

namespace optjit::codegen {

/// Adds one function per pass of `plan` to `m`. `cpu` and `features` are set on each function
/// so the vectorizer's cost model sees the target. An op the emitter does not know fails.
/// `interleave` > 0 asks the vectorizer to interleave that many vector iterations of each
/// element loop (the CPU's unroll knob); 0 leaves it to LLVM's cost model.
Status emit_llvm(const plan::Plan& plan, llvm::Module& m, const std::string& cpu,
                 const std::string& features, int interleave = 0);

inline std::string pass_symbol(size_t k) { return "optjit_pass_" + std::to_string(k); }

}  // namespace optjit::codegen
