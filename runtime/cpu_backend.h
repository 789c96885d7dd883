// The CPU backend: JIT'd passes over the tensor and chunk tables, spread over threads.
#pragma once

#include <memory>
#include <vector>

#include "codegen/cpu_jit.h"
#include "runtime/chunks.h"
#include "runtime/reference.h"

namespace optjit::runtime {

struct CpuOptions {
  int threads = 0;                   // 0: OpenMP's default (all cores)
  int64_t chunk_elements = 1 << 16;  // a tensor is cut into chunks of at most this many elements
  int unroll = 0;  // vector iterations interleaved per element-loop trip; 0: LLVM's choice
};

class CpuBackend {
 public:
  static Expected<std::unique_ptr<CpuBackend>> create(const plan::Plan& plan,
                                                      CpuOptions options = {},
                                                      cache::KernelCache* cache = nullptr);
  bool kernels_from_cache() const { return kernels_->from_cache(); }
  /// One optimizer step on `s` (gradients already in, or pointed to by, the grad buffers).
  StepResult step(OptimizerState& s);
  double compile_seconds() const { return kernels_->compile_seconds(); }
  int threads() const { return threads_; }
  const CpuOptions& options() const { return options_; }

 private:
  CpuBackend(const plan::Plan& plan, CpuOptions o) : plan_(plan), options_(o) {}
  void prepare(const OptimizerState& s);
  void run_pass(size_t k, OptimizerState& s, HostProgram& host);

  const plan::Plan& plan_;
  CpuOptions options_;
  int threads_ = 1;
  std::unique_ptr<codegen::CpuKernels> kernels_;
  // Rebuilt when the tensor set changes.
  ChunkTable table_;
  std::vector<int64_t> thread_start_;  // chunk ranges per thread, balanced by elements
  // Rebuilt each pass (pointers change when gradients live in the caller's memory).
  std::vector<uint8_t*> pointers_;
  std::vector<double> uniforms_;
  std::vector<codegen::TensorRow> rows_;
  std::vector<double> partials_;
};

}  // namespace optjit::runtime
