// The chunk table every backend launches over, and the fixed-order combining of per-chunk
// reduction partials into per-tensor results (so results never depend on scheduling).
#pragma once

#include <vector>

#include "codegen/kernel_abi.h"
#include "ir/plan.h"
#include "runtime/state.h"

namespace optjit::runtime {

struct ChunkTable {
  std::vector<codegen::Chunk> chunks;  // (tensor, offset, length); every tensor has at least one
  std::vector<size_t> first;           // per tensor, its first chunk; plus one past the end
  std::vector<int64_t> base;           // per tensor, its first element in an arena of all tensors
  std::vector<int64_t> numels;
  int64_t total = 0;  // arena elements, padding included

  /// Tensors start at multiples of `align` elements in the arena (padding between them).
  static ChunkTable build(const std::vector<int64_t>& numels, int64_t chunk_elements,
                          int64_t align = 1);
};

/// The CPU's split of a chunk table over its threads: thread t runs chunks [starts[t],
/// starts[t + 1]), contiguous ranges of about equal work (elements plus 64 a chunk, the cost of
/// starting one). With `fixed`, `threads` ranges as asked; without, up to `threads`, one for
/// each kMinWorkPerThread of work, so a small step runs on the caller's thread alone. Never more
/// ranges than chunks, none empty; one (empty) where there are no chunks.
std::vector<int64_t> thread_ranges(const codegen::Chunk* chunks, int64_t n, int threads,
                                   bool fixed);

/// The work each thread of an automatic count gets at least. Waking a thread and joining it
/// costs 1-2 us on an idle 2-core machine (`optjit bench 'adamw()' --numel 4096 --threads 2`,
/// the second thread with no chunk: 3 us, one thread 2 us), and more where the cores run other
/// work (a thread the scheduler has not run yet holds up the pass: 8192 elements in chunks of
/// 1024 took 8 us on two threads with a core busy, 5 on one; idle, 4 on two). AdamW in cache
/// takes 0.42 ns an element on a core; torch's grain for elementwise loops is 32768.
inline constexpr int64_t kMinWorkPerThread = 16384;

/// The tensors a device backend's buffers were built for: element counts, each tensor's group,
/// and the group count. A step on other tensors rebuilds the buffers.
struct TensorSet {
  std::vector<int64_t> numels;
  std::vector<uint32_t> groups;
  size_t group_count = 0;

  static TensorSet of(const OptimizerState& s);
  bool matches(const OptimizerState& s) const;  // without building one
};

/// partial[r][t]: reduction r of `pass` over tensor t, from chunk partials laid out as
/// partials[c * R + r], combined in the fixed order of codegen::kCombineLanes.
std::vector<std::vector<double>> combine_partials(const plan::Plan& plan, const plan::Pass& pass,
                                                  const ChunkTable& table, const double* partials);

/// One buffer of every tensor as a device arena (tensor t at element table.base[t]), and back.
void pack_arena(const ChunkTable& table, const OptimizerState& s, size_t buffer, size_t elem_bytes,
                std::vector<uint8_t>& out);
void unpack_arena(const ChunkTable& table, OptimizerState& s, size_t buffer, size_t elem_bytes,
                  const uint8_t* in);

/// Whether a device backend copies buffer b to the device before a step: everything the first
/// time, then the gradients each step unless they stay resident on the device, and the
/// parameters each step where the host's copy is the truth (the Optimizer API's caller's memory).
inline bool uploads_before_step(const plan::Plan& plan, size_t b, bool first, bool resident_grads,
                                bool host_params = false) {
  const ir::BufferRole role = plan.buffers[b].role;
  return first || (role == ir::BufferRole::grad && !resident_grads) ||
         (role == ir::BufferRole::param && host_params);
}

/// The buffers a step writes that its caller sees (scratch excluded).
std::vector<bool> visible_writes(const plan::Plan& plan);

}  // namespace optjit::runtime
