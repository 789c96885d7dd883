// Plan -> CUDA C or OpenCL C from one emitter. The languages differ only in the options below
// (qualifiers, index spelling, type names, math names, half conversions, how a kernel finds a
// tensor's buffers); everything else, the walk over the pass body included, is shared.
#pragma once

#include <string>

#include "codegen/launch.h"
#include "ir/error.h"
#include "ir/plan.h"

namespace optjit::codegen {

enum class CLanguage { cuda, opencl };

struct CEmitOptions {
  CLanguage language = CLanguage::opencl;
  /// The kernels are written for its block size (a launch must use it), items per thread and
  /// vector width (tensors and chunks must start aligned to it); the grid cap and chunk size
  /// only matter at launch.
  GpuLaunch launch;
};

/// One kernel `optjit_pass_<k>` per pass. Kernel arguments:
///   CUDA:   (const OptjitRow* rows, const long long* chunks, long long nchunks, double* partials)
///           with OptjitRow { void* const* buffers; const double* uniforms; } per tensor.
///   OpenCL: (global T0* b0, ..., global const double* uniforms, global const long* rows,
///            global const long* chunks, long nchunks, global double* partials)
///           with rows[2t] = the tensor's first element in every buffer arena and
///           rows[2t+1] = its uniform row. (OpenCL 1.2 has no pointers in buffers.)
/// chunks holds (tensor, offset, length) triples. Each work-group takes chunks
/// group, group + groups, ...; within a chunk each thread takes `items` vectors of `vec` elements
/// a block apart per loop trip (the tail that is not a whole vector goes element by element);
/// reductions go to partials[c * R + r] through a fixed-order tree
/// in local memory, so results do not depend on scheduling.
Expected<std::string> emit_c(const plan::Plan& plan, CEmitOptions options);

/// The kernel-cache variant of emitted source: the launch shape plus a hash of the source
/// itself, so a change to the emitter can never load a stale binary, bumped version or not.
std::string source_variant(const std::string& language, const GpuLaunch& launch,
                           const std::string& source);

}  // namespace optjit::codegen
