// optjit's code-generation version: part of every exact fingerprint (compiled kernels are
// reused only under the same one), bumped whenever emitted code may change for the same IR.
#pragma once

namespace optjit::codegen {

inline constexpr int kCodegenVersion = 14;

}  // namespace optjit::codegen
