// The planner: splits a program into the fewest passes over memory and says what each moves.
#pragma once

#include <string>
#include <vector>

#include "ir/error.h"
#include "ir/program.h"

namespace optjit::plan {

/// A pass's body with some per-tensor conditions known (Pass::guards): what a tensor for which
/// they hold moves, where a select on them left buffers unread or stored unchanged.
struct PassVersion {
  std::vector<bool> when;  // the value of each of the pass's guards
  ir::Program body;        // the pass body with them as constants, simplified
  std::vector<uint32_t> reads, writes;
  double bytes_read = 0, bytes_written = 0;
};

/// One sweep over every element of every tensor.
struct Pass {
  /// Element code: loads, stores, math, `uniform k` (per-tensor values computed on the host
  /// before the pass) and reductions. Its buffers are Plan::buffers; it reads each buffer's
  /// contents at the time of the pass (loads come before stores).
  ir::Program body;
  std::vector<ir::ValueId> uniforms;  // program value for each uniform slot
  std::vector<ir::ValueId>
      reductions;  // program reduce value for each reduce in the body, in order
  std::vector<uint32_t> reads, writes;       // buffer indices
  double bytes_read = 0, bytes_written = 0;  // per parameter element (quantized: fractions)
  /// Boolean uniform slots whose values decide which buffers the pass moves (Lookahead's sync
  /// step, a state written only at the first step): the kernels run versions[i] on a tensor
  /// whose guard g has the value of bit g of i, so a step moves only what it changes. Empty
  /// (no versions) when no condition saves bytes. At most kMaxGuards.
  std::vector<uint32_t> guards;
  std::vector<PassVersion> versions;
};

/// Versions double per guard; the kernels hold all of them.
inline constexpr size_t kMaxGuards = 3;
/// A pass with more boolean uniforms than this gets no versions: choosing guards costs a
/// rewrite of the pass per candidate and guard (real passes have a handful of candidates).
inline constexpr size_t kMaxGuardCandidates = 64;

/// How a value needed after the pass that can first compute it gets there.
enum class Carry { recompute, forward, scratch };

struct CarryNote {
  ir::ValueId value;
  int from_pass, to_pass;
  Carry how;
  uint32_t buffer;  // forward / scratch: the buffer carrying it
};

/// A store placed in a later pass than the first that has its value: `pass` reads the
/// buffer's old value (for instance to compute the new one again, where the buffer would give
/// it back rounded or as codes; see the planner's step 3).
struct StoreNote {
  uint32_t buffer;
  ir::ValueId value;  // the value stored
  int earliest, pass;
};

struct Plan {
  ir::Program program;                  // the (simplified) program this plan runs
  std::vector<ir::BufferDecl> buffers;  // program buffers, then scratch buffers
  /// host[k]: scalar- and tensor-rank values (and skip_if guards) evaluated before pass k;
  /// host[passes.size()] runs after the last pass and holds the scalar-state stores.
  std::vector<std::vector<ir::ValueId>> host;
  std::vector<Pass> passes;
  std::vector<CarryNote> carries;
  std::vector<StoreNote> delayed_stores;

  double bytes_per_param() const;
};

/// A sharded step's all-reduce buffer for one pass (api/communicator.h), defined once for the
/// host's step, the device step's kernels and the buffer's size: the pass's reductions in
/// order, each per-tensor one S slots (its pieces) and each all-tensor one A slots (by tensor S,
/// by process one per process). A reduction's slots start at all * A + per * S, counting the
/// reductions of each kind before it; before the end of the pass, that is the buffer's length.
struct ShardSlots {
  size_t all = 0, per = 0;
  size_t start(size_t A, size_t S) const { return all * A + per * S; }
};
/// all_tensor[i]: reduction i is over all tensors. r = all_tensor.size(): the whole buffer.
ShardSlots shard_slots_before(const std::vector<bool>& all_tensor, size_t r);
/// The same for pass k's reductions.
ShardSlots shard_slots_before(const Plan& plan, size_t k, size_t r);

/// Limits that keep planning and compiling time near-linear in the program: a pipeline beyond
/// them is a one-line error, not minutes of work. Real pipelines have 1 to 4 passes (one per
/// level of global reductions, e.g. a chain of two clips has 3) and a handful of buffers.
inline constexpr int kMaxPasses = 64;
inline constexpr size_t kMaxBuffers = 256;  // parameters, gradients and state
/// Instructions of the simplified program (20,000 one-line statements compile in 1.8 s) and
/// values a pass takes from the host, each live through its loop (1,200 of them, 400 chained
/// SGDs, took 2.9 s to compile; 2,700 took 16 s, 60,000 over 5 minutes). The largest chains of
/// built-ins have a few hundred instructions and under a hundred such values.
inline constexpr size_t kMaxInstructions = 32768;
inline constexpr size_t kMaxUniforms = 1024;

/// Plans a verified program (it is simplified first).
Expected<Plan> make_plan(const ir::Program& program);

/// The IR, then each pass with what it reads and writes and its bytes per parameter.
std::string describe(const Plan& plan, bool with_bodies = true);

}  // namespace optjit::plan
