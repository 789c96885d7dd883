#include "runtime/chunks.h"

#include <algorithm>
#include <cstring>

#include "runtime/reference.h"

namespace optjit::runtime {

ChunkTable ChunkTable::build(const std::vector<int64_t>& numels, int64_t chunk_elements,
                             int64_t align) {
  ChunkTable t;
  t.numels = numels;
  for (size_t i = 0; i < numels.size(); ++i) {
    t.total = (t.total + align - 1) / align * align;
    t.base.push_back(t.total);
    t.first.push_back(t.chunks.size());
    int64_t off = 0;
    do {
      int64_t len = std::min(chunk_elements, numels[i] - off);
      t.chunks.push_back({static_cast<int64_t>(i), off, len});
      off += len;
    } while (off < numels[i]);
    t.total += numels[i];
  }
  t.first.push_back(t.chunks.size());
  return t;
}

TensorSet TensorSet::of(const OptimizerState& s) {
  TensorSet set;
  for (const auto& t : s.tensors) set.numels.push_back(t.numel), set.groups.push_back(t.group);
  set.group_count = s.groups.size();
  return set;
}

bool TensorSet::matches(const OptimizerState& s) const {
  if (s.tensors.size() != numels.size() || s.groups.size() != group_count) return false;
  for (size_t t = 0; t < numels.size(); ++t)
    if (s.tensors[t].numel != numels[t] || s.tensors[t].group != groups[t]) return false;
  return true;
}

std::vector<std::vector<double>> combine_partials(const plan::Plan& plan, const plan::Pass& pass,
                                                  const ChunkTable& table, const double* partials) {
  const size_t R = pass.reductions.size(), T = table.numels.size();
  std::vector<std::vector<double>> out(R, std::vector<double>(T));
  for (size_t r = 0; r < R; ++r) {
    ir::Op op = plan.program.at(pass.reductions[r]).op;
    for (size_t t = 0; t < T; ++t) {
      const double* p = partials + table.first[t] * R + r;
      out[r][t] = combine_range(op, table.first[t + 1] - table.first[t],
                                [&](size_t c) { return p[c * R]; });
    }
  }
  return out;
}

void pack_arena(const ChunkTable& table, const OptimizerState& s, size_t buffer, size_t elem_bytes,
                std::vector<uint8_t>& out) {
  out.resize(static_cast<size_t>(table.total) * elem_bytes);
  for (size_t t = 0; t < table.numels.size(); ++t)
    if (table.numels[t] > 0)
      std::memcpy(out.data() + table.base[t] * elem_bytes, s.tensors[t].data(buffer),
                  table.numels[t] * elem_bytes);
}

void unpack_arena(const ChunkTable& table, OptimizerState& s, size_t buffer, size_t elem_bytes,
                  const uint8_t* in) {
  for (size_t t = 0; t < table.numels.size(); ++t)
    if (table.numels[t] > 0)
      std::memcpy(s.tensors[t].data(buffer), in + table.base[t] * elem_bytes,
                  table.numels[t] * elem_bytes);
}

std::vector<bool> visible_writes(const plan::Plan& plan) {
  std::vector<bool> written(plan.buffers.size(), false);
  for (const auto& pass : plan.passes)
    for (uint32_t w : pass.writes) written[w] = plan.buffers[w].role != ir::BufferRole::scratch;
  return written;
}

std::vector<int64_t> thread_ranges(const codegen::Chunk* chunks, int64_t n, int threads,
                                   bool fixed) {
  constexpr int64_t kChunkCost = 64;
  int64_t total = 0;
  for (int64_t c = 0; c < n; ++c) total += chunks[c].length + kChunkCost;
  int64_t used = std::max<int64_t>(1, std::min<int64_t>(threads, n));
  if (!fixed) used = std::min(used, std::max<int64_t>(1, total / kMinWorkPerThread));
  // Range k starts at the first chunk whose middle lies past k shares of the work.
  const double share = static_cast<double>(total) / static_cast<double>(used);
  std::vector<int64_t> starts{0};
  double before = 0;
  for (int64_t c = 0; c < n; ++c) {
    const double w = static_cast<double>(chunks[c].length + kChunkCost);
    if (c > starts.back() && static_cast<int64_t>(starts.size()) < used &&
        before + w / 2 >= share * static_cast<double>(starts.size()))
      starts.push_back(c);
    before += w;
  }
  starts.push_back(n);
  return starts;
}

}  // namespace optjit::runtime
