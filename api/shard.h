// Internal: the sharded step's layout and its one all-reduce per pass (api/communicator.h).
#pragma once

#include <cstdint>
#include <vector>

#include "api/communicator.h"
#include "ir/program.h"
#include "runtime/executor.h"

namespace optjit::detail {

/// What each process holds of each global tensor, agreed by every process at the first step.
class ShardLayout {
 public:
  /// This process's pieces: per local parameter its global tensor's name, first element and
  /// element count. Collective: every process of the communicator calls it with its own pieces
  /// and its plan's fingerprint; an error on any process is an error on every process.
  static Expected<ShardLayout> agree(const ShardOptions& shard,
                                     const std::vector<std::string>& names,
                                     const std::vector<int64_t>& numels, uint64_t fingerprint);

  /// Completes reductions over every process: local[r][i] is reduction r's partial over local
  /// parameter i (ops[r] its op); returns [r][global tensor]: each tensor's value over all its
  /// pieces (the reduction's identity for a tensor of no elements). One all-reduce.
  /// `all_tensors[r]`: reduction r is over all tensors. With ShardOrder::by_process such a
  /// reduction's result is its value followed by identities (one per global tensor, so that a
  /// fold of them gives the value).
  Expected<std::vector<std::vector<double>>> complete(
      const std::vector<ir::Op>& ops, const std::vector<bool>& all_tensors,
      const std::vector<std::vector<double>>& local) const;

  /// The same layout for the device step (runtime::DeviceShard), all-reducing through the
  /// communicator's allreduce_sum_device.
  runtime::DeviceShard device_shard() const;

  /// The global tensor local parameter i is a piece of.
  size_t tensor_of(size_t i) const { return tensor_of_[i]; }

 private:
  struct Piece {  // one process's elements of one tensor, from `offset`
    int64_t offset;
    int rank;
  };
  std::shared_ptr<Communicator> comm_;
  std::vector<int64_t> numel_;     // per global tensor
  std::vector<Piece> pieces_;      // by tensor, then offset: the slots of each reduction
  std::vector<size_t> first_;      // per global tensor: its first piece (pieces_.size() + 1 = end)
  std::vector<size_t> tensor_of_;  // per local parameter
  std::vector<long> slot_of_;      // per local parameter: its piece, -1 when it is empty
  ShardOrder order_ = ShardOrder::by_tensor;
  int me_ = 0, processes_ = 1;
  std::vector<long> split_slot_;  // by_process: per piece, its slot among split tensors' pieces
  size_t split_pieces_ = 0;

  Expected<std::vector<std::vector<double>>> complete_by_process(
      const std::vector<ir::Op>& ops, const std::vector<bool>& all_tensors,
      const std::vector<std::vector<double>>& local) const;
};

}  // namespace optjit::detail
