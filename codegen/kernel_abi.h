// What a compiled pass sees, on every backend: a tensor table and a chunk table. Nothing in a
// kernel depends on tensor shapes or counts, so a new model or learning rate never recompiles.
#pragma once

#include <cstdint>

namespace optjit::codegen {

/// One row per tensor: where each plan buffer's elements start, and this pass's uniforms
/// (the per-tensor values the host computed before the pass, as doubles).
struct TensorRow {
  uint8_t* const* buffers;  // one pointer per Plan::buffers entry
  const double* uniforms;   // one per Pass::uniforms entry
};

/// A contiguous piece of one tensor: the unit of parallel work and of reduction partials.
struct Chunk {
  int64_t tensor;
  int64_t offset;  // in elements
  int64_t length;  // in elements
};

/// Runs chunks [begin, end). Reduction r of chunk c goes to partials[c * R + r] (R = the
/// pass's reduction count); the host combines chunks in order, so results do not depend on
/// how chunks were spread over threads.
using PassFn = void (*)(const TensorRow* rows, const Chunk* chunks, int64_t begin, int64_t end,
                        double* partials);

}  // namespace optjit::codegen
