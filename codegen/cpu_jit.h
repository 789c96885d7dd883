// Compiles a plan for the CPU: LLVM IR from the emitter, the O3 pipeline for the target,
// and ORC's LLJIT. One JIT'd function per pass.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "codegen/kernel_abi.h"
#include "ir/error.h"
#include "ir/plan.h"

namespace optjit::cache {
class KernelCache;
}

namespace optjit::codegen {

/// A CPU to compile for: the host by default; tests pin one (e.g. "haswell") to check the code.
struct CpuTarget {
  std::string triple, cpu, features;
  /// This machine's CPU and features, with OPTJIT_CPU_FEATURES's changes after them (see
  /// check_cpu_feature_changes: code for the host is compiled only once that passes).
  static CpuTarget host();
  /// The host's triple and that CPU's own features; an error for a CPU LLVM does not know.
  static Expected<CpuTarget> named(const std::string& cpu);
  /// The exact fingerprint: what must match for compiled code to be reused.
  std::string exact() const;
  std::string exact_id() const;  // XXH3 of exact(), 16 hex digits
};

/// OPTJIT_CPU_FEATURES (e.g. "-avx512bw,-avx512vbmi": compile for a CPU without them),
/// checked: comma-separated entries, each '+' or '-' and a feature LLVM knows for the host's
/// triple, and no '+' of an instruction set this CPU lacks (its kernels would stop the process
/// with an illegal instruction). Ok when unset.
Status check_cpu_feature_changes();

/// The LLVM IR of a plan, as built (optimized = false) or after O3 for the target.
Expected<std::string> emit_cpu_ir(const plan::Plan& plan, bool optimized,
                                  const CpuTarget& target = CpuTarget::host(), int interleave = 0);

/// The machine code the JIT runs for a plan, as assembly text (the same module and target
/// machine as the object code CpuKernels loads).
Expected<std::string> emit_cpu_asm(const plan::Plan& plan,
                                   const CpuTarget& target = CpuTarget::host(), int interleave = 0);

class CpuKernels {
 public:
  /// Compiles the plan's passes, or with a cache loads the object code a previous process
  /// stored (no IR, no optimization, no code generation). A strict cache makes a miss an error.
  /// `interleave`: see emit_llvm.
  static Expected<std::unique_ptr<CpuKernels>> compile(const plan::Plan& plan,
                                                       cache::KernelCache* cache = nullptr,
                                                       int interleave = 0);
  ~CpuKernels();
  PassFn pass(size_t k) const { return passes_[k]; }
  double compile_seconds() const { return seconds_; }
  bool from_cache() const { return from_cache_; }

 private:
  CpuKernels() = default;
  std::vector<PassFn> passes_;
  double seconds_ = 0;
  bool from_cache_ = false;
};

/// The LLVM version optjit was built with, e.g. "15.0.6".
std::string llvm_version();

}  // namespace optjit::codegen
