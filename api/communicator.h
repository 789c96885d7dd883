// Sharded steps: the seam between optjit's step and a communication library. A data-parallel
// job shards the optimizer state (ZeRO-1/2, FSDP2): each process steps only its pieces of the
// parameters. The step's elementwise work is local; its reductions are not: the gradient norm of
// a clip, the found-inf flag of a grad scaler, LAMB's per-tensor norms of tensors split across
// processes. The planner knows every reduction of every pass; a sharded step completes them with
// one all-reduce per pass (per "level"), of every reduction's partials in one buffer, and goes on.
//
// Determinism. Every slot of that buffer is written by exactly one process (its partial for one
// piece of one tensor; the others contribute 0), so the sum is exact and the same whatever order
// or algorithm the library uses. Each process then folds the pieces of each tensor in offset order
// and the tensors in the global table's order, as the unsharded step folds its tensors: with whole
// tensors per process (ZeRO-1 by tensor) the sharded step is bit-identical to the unsharded one;
// with split tensors the per-tensor values are sums of per-piece sums (equal to float64 rounding),
// and the same bits on every run with the same processes and layout.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ir/error.h"
#include "ir/plan.h"
#include "runtime/device_memory.h"

namespace optjit::runtime {
class Device;
}

namespace optjit {

/// A group of processes that sum arrays of doubles together. Every process of the group calls
/// allreduce_sum at the same point with the same count (optjit's sharded step guarantees that
/// when every process steps together).
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "mpi", "torch.distributed (gloo)", ...: for messages.
  virtual std::string name() const = 0;
  /// data[i] = the sum of data[i] over every process, in place. A failure of the library (a dead
  /// peer, a timeout) is an error naming it, never a hang beyond the library's own timeout.
  virtual Status allreduce_sum(std::span<double> data) = 0;
  /// The same on `count` doubles in `device`'s memory, ordered on the device's queue: the
  /// sharded device step's seam (each pass's partials stay on the device). This default goes
  /// through the host (read, allreduce_sum, write back: the queue is drained each time); NCCL
  /// runs on the stream with no host synchronisation.
  virtual Status allreduce_sum_device(runtime::Device& device, runtime::DeviceMemory data,
                                      size_t count);
  /// Whether allreduce_sum_device only enqueues work on the device's queue (no host
  /// synchronisation): then a sharded step on a device steps there unless told otherwise
  /// (OptimizerOptions::device_step), as an unsharded one does. torch's NCCL through
  /// optjit.torch enqueues; what capturable() says, it says too.
  virtual bool enqueues() const { return capturable(); }
  /// Whether a CUDA graph can capture a sharded device step over it (NCCL on optjit's stream).
  virtual bool capturable() const { return false; }
};

/// MPI_COMM_WORLD (duplicated, with errors returned rather than fatal), initialising MPI if the
/// program has not (then finalised at exit). An error when this build has no MPI.
Expected<std::shared_ptr<Communicator>> mpi_communicator();
bool have_mpi();

/// NCCL over the caller's communicator (an ncclComm_t: its own, or the one under torch's
/// ProcessGroupNCCL), all-reducing on `cuda_stream` (a CUstream: give the optimizer the same as
/// OptimizerOptions::queue), so a sharded device step has no host synchronisation and a CUDA
/// graph can capture it. Not owned. NCCL is loaded at run time ($OPTJIT_NCCL, else
/// libnccl.so.2); an error says when it or the CUDA driver is missing.
Expected<std::shared_ptr<Communicator>> nccl_communicator(void* nccl_comm, void* cuda_stream);
/// NCCL's bootstrap for callers with their own way to share it (a torch store, a file): rank 0
/// makes the id, every rank passes it to nccl_communicator_init (collective; one GPU per rank).
using NcclId = std::array<char, 128>;
Expected<NcclId> nccl_unique_id();
Expected<std::shared_ptr<Communicator>> nccl_communicator_init(int ranks, int rank,
                                                               const NcclId& id, int cuda_device,
                                                               void* cuda_stream);
/// For a job started with mpirun: one process per GPU, NCCL's unique id sent from rank 0 over
/// MPI, the communicator owned (destroyed with the returned object). Needs a build with MPI.
Expected<std::shared_ptr<Communicator>> nccl_communicator_mpi(int cuda_device, void* cuda_stream);
bool have_nccl();

/// A tensor of the whole model, as every process knows it.
struct GlobalTensor {
  std::string name;
  int64_t numel = 0;
  /// Whether its quantized states (state_format "8bit", "4bit", "fp8") are quantized where the
  /// format quantizes a tensor of `numel` elements. A piece of a quantized tensor must start at
  /// a multiple of the format's block (256 elements; 128 for 4-bit) and end at one or at the
  /// tensor's end, so that its blocks are the whole tensor's and the sharded step is the
  /// unsharded one; false keeps the tensor's state in f32 (as a tensor too small to quantize),
  /// for pieces cut anywhere.
  bool quantize = true;
};

/// OptimizerOptions::shard: this process holds pieces of the model's tensors. Each local Param
/// names its global tensor (Param::name) and holds elements [offset, offset + numel) of it (its
/// shape is the piece's). Every process gives the same `tensors`, in the same order: the order the
/// unsharded step would take them in. A process holds at most one piece of a tensor; the pieces
/// of each tensor cover it exactly (checked at the first step, on every process together).
/// How a sharded step's all-reduce is laid out, and so its order of summation (both exact: every
/// slot has one writer, so the library's order does not matter; both bitwise reproducible for a
/// fixed process count and layout).
enum class ShardOrder {
  /// One slot per piece of every tensor for every reduction; every process folds each tensor's
  /// pieces in offset order, then the tensors in the global table's order, as the unsharded step
  /// does: bit-identical to it for whole tensors per process. All-reduces 8 bytes per reduction
  /// per piece: with FSDP2's layout (every tensor on every process) that grows as tensors x
  /// processes (6 MB per step for 723 tensors on 1024 processes).
  by_tensor,
  /// All-tensor reductions (a clip's norm, found-inf): one slot per process, holding the fold of
  /// its own pieces in local order; the processes' values are then folded in rank order. Per-tensor
  /// reductions: slots only for the pieces of tensors split across processes. 8 bytes per
  /// process per all-tensor reduction (8 KB on 1024 processes), but not the unsharded step's bits.
  by_process,
};

struct ShardOptions {
  std::shared_ptr<Communicator> comm;
  std::vector<GlobalTensor> tensors;
  /// Per local parameter, its first element in its global tensor. Empty: every local parameter
  /// is a whole tensor (ZeRO-1 by tensor).
  std::vector<int64_t> offsets;
  ShardOrder order = ShardOrder::by_tensor;
};

/// Sharding on paper (`optjit plan --params N --processes P`): how pieces of the model's tensors
/// are spread, and what each process keeps, moves and all-reduces per step.
enum class ShardKind {
  by_tensor,  // whole tensors per process (ZeRO-1 by tensor): T pieces
  flat,       // one flat buffer cut in P contiguous shards (ZeRO, FSDP1): at most T + P - 1 pieces
  dim0,       // every tensor cut on dimension 0 across all processes (FSDP2): T x P pieces
};
struct ShardCost {
  double params_per_process = 0;
  double state_bytes = 0;      // per process: the plan's state bytes per parameter (codes, scales)
  double bytes_moved = 0;      // per process per step: the plan's bytes per parameter
  int allreduces = 0;          // per step: one per pass with reductions
  double allreduce_bytes = 0;  // per step: 8 bytes per reduction per piece, summed over passes
};
ShardCost shard_cost(const plan::Plan& plan, double params, int64_t tensors, int64_t processes,
                     ShardKind kind, ShardOrder order = ShardOrder::by_tensor);

}  // namespace optjit
