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
/// pass's reduction count); they are combined in one fixed order (kCombineLanes), so results
/// do not depend on how chunks were spread over threads.
using PassFn = void (*)(const TensorRow* rows, const Chunk* chunks, int64_t begin, int64_t end,
                        double* partials);

/// The one order in which every backend combines a run of n partials (a tensor's chunks, then
/// the tensors of an all-tensor reduction): kCombineLanes lanes, lane j taking the contiguous
/// run [j*L, min((j+1)*L, n)) with L = ceil(n / kCombineLanes), in order from the identity; then
/// the lanes pairwise, as a tree (lane j += lane j+s for j a multiple of 2s, s = 1, 2, 4, ...).
/// A device runs it as one work-group of kCombineLanes threads, the host in a loop
/// (runtime::combine_range), and both get the same bits. Lanes past the last run hold the
/// identity, which combines with any lane value exactly, so the host may skip them.
inline constexpr int64_t kCombineLanes = 256;

}  // namespace optjit::codegen
