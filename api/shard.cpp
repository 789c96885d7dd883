#include "api/shard.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "runtime/device.h"
#include "runtime/executor.h"
#include "runtime/reference.h"

namespace optjit::detail {

namespace {

// A 64-bit fingerprint as three doubles of at most 22 bits each (exact in a sum of one).
void put_fingerprint(uint64_t f, double* out) {
  for (int k = 0; k < 3; ++k) out[k] = static_cast<double>((f >> (22 * k)) & ((1u << 22) - 1));
}

}  // namespace

Expected<ShardLayout> ShardLayout::agree(const ShardOptions& shard,
                                         const std::vector<std::string>& names,
                                         const std::vector<int64_t>& numels, uint64_t fingerprint) {
  Communicator& comm = *shard.comm;
  const int P = comm.size(), me = comm.rank();
  const size_t T = shard.tensors.size();
  ShardLayout L;
  L.comm_ = shard.comm;
  // This process's own checks. A failure still takes part in the all-reduce below (the other
  // processes would wait for it forever), flagged, and every process returns an error.
  std::string mine;
  std::map<std::string, size_t, std::less<>> index;
  for (size_t t = 0; t < T; ++t) {
    if (!index.emplace(shard.tensors[t].name, t).second && mine.empty())
      mine = fmt::format("the global tensor table names '{}' twice", shard.tensors[t].name);
    L.numel_.push_back(shard.tensors[t].numel);
  }
  if (!shard.offsets.empty() && shard.offsets.size() != names.size() && mine.empty())
    mine = fmt::format("{} shard offsets for {} parameters", shard.offsets.size(), names.size());
  // Layout: [P x 3 fingerprint][P error flags][T x P x 2: offset + 1, numel of this rank's piece]
  std::vector<double> buf(static_cast<size_t>(P) * 4 + T * static_cast<size_t>(P) * 2, 0.0);
  double* fp = buf.data();
  double* flag = fp + 3 * P;
  double* piece = flag + P;
  put_fingerprint(fingerprint, fp + 3 * me);
  L.tensor_of_.assign(names.size(), 0);
  std::vector<bool> held(T, false);
  for (size_t i = 0; i < names.size() && mine.empty(); ++i) {
    auto it = index.find(names[i]);
    if (it == index.end()) {
      mine = fmt::format("parameter '{}' is not in the global tensor table", names[i]);
      break;
    }
    const size_t t = it->second;
    const int64_t off = shard.offsets.empty() ? 0 : shard.offsets[i];
    if (held[t]) {
      mine = fmt::format("two local parameters are pieces of tensor '{}'", names[i]);
      break;
    }
    if (off < 0 || numels[i] < 0 || off + numels[i] > L.numel_[t]) {
      mine = fmt::format("parameter '{}' holds elements [{}, {}) of a tensor of {}", names[i], off,
                         off + numels[i], L.numel_[t]);
      break;
    }
    held[t] = true;
    L.tensor_of_[i] = t;
    piece[(t * P + me) * 2] = static_cast<double>(off) + 1;
    piece[(t * P + me) * 2 + 1] = static_cast<double>(numels[i]);
  }
  if (!mine.empty()) flag[me] = 1;
  OPTJIT_TRY(comm.allreduce_sum(buf));
  if (!mine.empty()) return make_error("sharded step (rank {} of {}): {}", me, P, mine);
  for (int r = 0; r < P; ++r)
    if (flag[r] != 0)
      return make_error("sharded step: rank {} rejected the shard layout (its error says why)", r);
  for (int r = 0; r < P; ++r)
    if (!std::equal(fp + 3 * r, fp + 3 * r + 3, fp + 3 * me))
      return make_error(
          "sharded step: rank {}'s plan differs from rank {}'s (a different pipeline, parameter "
          "groups, global tensor table or process count); every process must step the same "
          "optimizer",
          r, me);
  // The pieces of each tensor, in offset order, must cover it exactly.
  for (size_t t = 0; t < T; ++t) {
    L.first_.push_back(L.pieces_.size());
    std::vector<Piece> ps;
    for (int r = 0; r < P; ++r) {
      const double o = piece[(t * P + r) * 2], n = piece[(t * P + r) * 2 + 1];
      if (o > 0 && n > 0) ps.push_back({static_cast<int64_t>(o) - 1, r});
    }
    std::sort(ps.begin(), ps.end(),
              [](const Piece& a, const Piece& b) { return a.offset < b.offset; });
    int64_t next = 0;
    for (const Piece& p : ps) {
      const int64_t n = static_cast<int64_t>(piece[(t * P + p.rank) * 2 + 1]);
      if (p.offset != next)
        return make_error(
            "sharded step: tensor '{}': {} (elements from {} on rank {})", shard.tensors[t].name,
            p.offset > next ? fmt::format("elements [{}, {}) are on no process", next, p.offset)
                            : fmt::format("elements from {} are on two processes", p.offset),
            p.offset, p.rank);
      next = p.offset + n;
      L.pieces_.push_back(p);
    }
    if (next != L.numel_[t] && !ps.empty())  // a tensor no process steps (no gradient) is fine
      return make_error("sharded step: tensor '{}': elements [{}, {}) are on no process",
                        shard.tensors[t].name, next, L.numel_[t]);
  }
  L.first_.push_back(L.pieces_.size());
  L.order_ = shard.order;
  L.me_ = me;
  L.processes_ = P;
  L.split_slot_.assign(L.pieces_.size(), -1);
  for (size_t t = 0; t < T; ++t)
    if (L.first_[t + 1] - L.first_[t] > 1)
      for (size_t s = L.first_[t]; s < L.first_[t + 1]; ++s)
        L.split_slot_[s] = static_cast<long>(L.split_pieces_++);
  L.slot_of_.assign(names.size(), -1);
  for (size_t i = 0; i < names.size(); ++i)
    for (size_t s = L.first_[L.tensor_of_[i]]; s < L.first_[L.tensor_of_[i] + 1]; ++s)
      if (L.pieces_[s].rank == me) L.slot_of_[i] = static_cast<long>(s);
  return L;
}

runtime::DeviceShard ShardLayout::device_shard() const {
  runtime::DeviceShard d;
  if (order_ == ShardOrder::by_process) {
    // Per-tensor slots for split tensors' pieces only (numbered in tensor, then offset order).
    d.processes = processes_;
    d.rank = me_;
    d.owner.assign(split_pieces_, -1);
    for (size_t i = 0; i < slot_of_.size(); ++i)
      if (slot_of_[i] >= 0 && split_slot_[static_cast<size_t>(slot_of_[i])] >= 0)
        d.owner[static_cast<size_t>(split_slot_[static_cast<size_t>(slot_of_[i])])] =
            static_cast<int64_t>(i);
    int64_t next = 0;
    for (size_t t = 0; t < numel_.size(); ++t) {
      d.first.push_back(next);
      if (first_[t + 1] - first_[t] > 1) next += static_cast<int64_t>(first_[t + 1] - first_[t]);
    }
    d.first.push_back(next);
  } else {
    d.owner.assign(pieces_.size(), -1);
    for (size_t i = 0; i < slot_of_.size(); ++i)
      if (slot_of_[i] >= 0) d.owner[static_cast<size_t>(slot_of_[i])] = static_cast<int64_t>(i);
    d.first.assign(first_.begin(), first_.end());
  }
  d.tensor_of.assign(tensor_of_.begin(), tensor_of_.end());
  d.allreduce = [comm = comm_](runtime::Device& dev, runtime::DeviceMemory data, size_t count) {
    return comm->allreduce_sum_device(dev, data, count);
  };
  return d;
}

Expected<std::vector<std::vector<double>>> ShardLayout::complete_by_process(
    const std::vector<ir::Op>& ops, const std::vector<bool>& all_tensors,
    const std::vector<std::vector<double>>& local) const {
  const size_t R = ops.size(), P = static_cast<size_t>(processes_), T = numel_.size();
  std::vector<size_t> at(R + 1, 0);  // reduction r's slots start at at[r] (plan::ShardSlots)
  for (size_t r = 0; r <= R; ++r)
    at[r] = plan::shard_slots_before(all_tensors, r).start(P, split_pieces_);
  std::vector<double> buf(at[R], 0.0);
  for (size_t r = 0; r < R; ++r) {
    if (all_tensors[r]) {  // this process's tensors, in the lane order the unsharded step folds
      buf[at[r] + static_cast<size_t>(me_)] =
          runtime::combine_range(ops[r], local[r].size(), [&](size_t i) { return local[r][i]; });
      continue;
    }
    for (size_t i = 0; i < slot_of_.size(); ++i)
      if (slot_of_[i] >= 0 && split_slot_[static_cast<size_t>(slot_of_[i])] >= 0)
        buf[at[r] + static_cast<size_t>(split_slot_[static_cast<size_t>(slot_of_[i])])] =
            local[r][i];
  }
  OPTJIT_TRY(comm_->allreduce_sum(buf));
  std::vector<std::vector<double>> out(R, std::vector<double>(T));
  for (size_t r = 0; r < R; ++r) {
    const double identity = runtime::reduce_identity(ops[r]);
    std::fill(out[r].begin(), out[r].end(), identity);
    if (all_tensors[r]) {  // the processes in rank order
      double v = buf[at[r]];
      for (size_t k = 1; k < P; ++k) v = runtime::combine_two(ops[r], v, buf[at[r] + k]);
      if (T > 0) out[r][0] = v;
      continue;
    }
    for (size_t i = 0; i < slot_of_.size(); ++i)  // whole tensors: this process's own value
      if (slot_of_[i] >= 0 && split_slot_[static_cast<size_t>(slot_of_[i])] < 0)
        out[r][tensor_of_[i]] = local[r][i];
    for (size_t t = 0; t < T; ++t) {  // split ones: their pieces in offset order
      if (first_[t + 1] - first_[t] < 2) continue;
      double v = buf[at[r] + static_cast<size_t>(split_slot_[first_[t]])];
      for (size_t s = first_[t] + 1; s < first_[t + 1]; ++s)
        v = runtime::combine_two(ops[r], v, buf[at[r] + static_cast<size_t>(split_slot_[s])]);
      out[r][t] = v;
    }
  }
  return out;
}

Expected<std::vector<std::vector<double>>> ShardLayout::complete(
    const std::vector<ir::Op>& ops, const std::vector<bool>& all_tensors,
    const std::vector<std::vector<double>>& local) const {
  if (order_ == ShardOrder::by_process) return complete_by_process(ops, all_tensors, local);
  // By tensor every reduction has a slot per piece (plan::ShardSlots with A = S).
  const size_t R = ops.size(), S = pieces_.size();
  auto at = [&](size_t r) { return plan::shard_slots_before(all_tensors, r).start(S, S); };
  std::vector<double> buf(at(R), 0.0);
  for (size_t r = 0; r < R; ++r)
    for (size_t i = 0; i < slot_of_.size(); ++i)
      if (slot_of_[i] >= 0) buf[at(r) + static_cast<size_t>(slot_of_[i])] = local[r][i];
  OPTJIT_TRY(comm_->allreduce_sum(buf));
  std::vector<std::vector<double>> out(R, std::vector<double>(numel_.size()));
  for (size_t r = 0; r < R; ++r)
    for (size_t t = 0; t < numel_.size(); ++t) {
      const size_t a = first_[t], b = first_[t + 1];
      if (a == b) {
        out[r][t] = runtime::reduce_identity(ops[r]);
        continue;
      }
      double v = buf[at(r) + a];  // the first piece as it is: a whole tensor keeps its bits
      for (size_t s = a + 1; s < b; ++s) v = runtime::combine_two(ops[r], v, buf[at(r) + s]);
      out[r][t] = v;
    }
  return out;
}

}  // namespace optjit::detail

namespace optjit {

Status Communicator::allreduce_sum_device(runtime::Device& device, runtime::DeviceMemory data,
                                          size_t count) {
  std::vector<double> host(count);
  OPTJIT_TRY(device.read(host.data(), data, count * sizeof(double)));
  OPTJIT_TRY(allreduce_sum(host));
  return device.write(data, host.data(), count * sizeof(double));
}

ShardCost shard_cost(const plan::Plan& plan, double params, int64_t tensors, int64_t processes,
                     ShardKind kind, ShardOrder order) {
  ShardCost c;
  const double P = static_cast<double>(processes), T = static_cast<double>(tensors);
  c.params_per_process = params / P;
  double state = 0;
  for (size_t b = 0; b < plan.buffers.size(); ++b)
    if (plan.buffers[b].role == ir::BufferRole::state) state += ir::element_bytes(plan.buffers, b);
  c.state_bytes = state * c.params_per_process;
  c.bytes_moved = plan.bytes_per_param() * c.params_per_process;
  const double pieces = kind == ShardKind::by_tensor ? T
                        : kind == ShardKind::flat    ? T + P - 1
                                                     : T * P;
  // by_process: pieces of tensors split across processes (flat: at most P - 1 tensors cross a
  // shard boundary, in two pieces each).
  const double split = kind == ShardKind::by_tensor ? 0
                       : kind == ShardKind::flat    ? std::min(T, P - 1) * 2
                                                    : (P > 1 ? T * P : 0);
  // The all-reduce buffer's slots (plan::ShardSlots): S per per-tensor reduction, A per
  // all-tensor one.
  const bool by_tensor = order == ShardOrder::by_tensor;
  const double S = by_tensor ? pieces : split, A = by_tensor ? pieces : P;
  for (size_t k = 0; k < plan.passes.size(); ++k) {
    if (plan.passes[k].reductions.empty()) continue;
    ++c.allreduces;
    const plan::ShardSlots n = plan::shard_slots_before(plan, k, plan.passes[k].reductions.size());
    c.allreduce_bytes += 8.0 * (static_cast<double>(n.all) * A + static_cast<double>(n.per) * S);
  }
  return c;
}

}  // namespace optjit
