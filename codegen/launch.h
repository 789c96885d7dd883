// Launch parameters of the GPU-style backends (CUDA and OpenCL): what the autotuner searches and
// what the kernel cache stores as a decision. block, items, vec and shared_tables change the
// emitted code; grid and chunk only the launch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "ir/error.h"

namespace optjit::codegen {

struct GpuLaunch {
  int block = 256;  // threads per block (work-items per work-group); a power of two, <= 1024
  int items = 1;    // vectors each thread has in flight per loop trip (1..8); CUDA's
                    // quantized path: quantization blocks each warp steps per trip
  int vec = 1;      // elements per vector load and store (1, 2, 4 or 8); CUDA's quantized
                    // path: contiguous elements per lane (where vec divides block / 32)
  int groups_per_unit = 8;           // grid cap: at most this many blocks per SM / compute unit
  int64_t chunk_elements = 1 << 16;  // a tensor is cut into chunks of at most this many elements
  /// CUDA: the code tables of quantized state (ir/quant.h: maps, lookup tables, thresholds)
  /// copied into each block's shared memory at the kernel's start, instead of read through the
  /// cache from global memory. A warp reads them at 32 scattered entries: from global memory
  /// that costs a cache wavefront per line touched, from shared memory one cycle per bank
  /// conflict. "tables=shared" in text; absent means global.
  bool shared_tables = false;
  /// CUDA's quantized path: each warp issues its next trip's loads before computing this one
  /// (software pipelining, the next trip's values held in registers), so that memory latency
  /// overlaps the computation, one element a lane at a time (vec does not apply to the
  /// quantized path then). "prefetch=1" in text; absent means 0.
  bool prefetch = false;
  /// CUDA's quantized path in vectors (vec > 1): each warp computes a trip's values twice,
  /// once for the blocks' absmax and once to store them and their codes, instead of holding
  /// them in registers across the absmax exchange. The second sweep's loads come from the
  /// cache; the registers saved buy occupancy. "recompute=1" in text; absent means 0.
  bool recompute = false;
  /// CUDA's quantized path in vectors (vec > 1): each vector's elements computed side by side,
  /// statement by statement, with f32 divisions and square roots as the instructions ptxas
  /// writes for div.rn and sqrt.rn without their branches (the same bits where no operand is
  /// near an exponent limit; elsewhere the vector is computed again as before), so that ptxas
  /// can overlap the elements' latencies: without it each division and square root ends a
  /// stretch of code that no other element's instructions enter. "interleave=1" in text; absent
  /// means 0.
  bool interleave = false;
  /// CUDA's quantized path: at each trip, the warp asks the L2 cache to fetch the bytes its
  /// trip this many trips ahead will load (prefetch.global.L2, a line a lane: no registers
  /// held, nothing waited for), so that more of the memory's latency is in flight than the
  /// warp's registers hold. "ahead=N" (0..8) in text; absent means 0.
  int ahead = 0;
  /// CUDA's quantized path in vectors (vec > 1): each warp copies the inputs of its trips this
  /// many trips ahead into shared memory with asynchronous copies (cp.async, sm_80 and later;
  /// plain copies before), a ring of that many trips a warp, and reads a trip's inputs from
  /// there once they have arrived: the bytes in flight are no longer bounded by the registers
  /// of the warps an SM holds. A trip past its chunk's end is read from global memory as
  /// before. "stage=N" (0..4) in text; absent means 0.
  int stage = 0;
  /// CUDA: the threads per SM that each kernel's launch bound asks ptxas to fit
  /// (__launch_bounds__(block, resident / block)), which caps its registers at 65536 / resident
  /// a thread: 512 (128 registers) by default, 768 (80), 1024 (64). More resident threads hide
  /// more latency, fewer registers may spill. "resident=768" in text; absent means 512.
  int resident = kDefaultResident;
  static constexpr int kDefaultResident = 512;

  /// The launch parameters used before any tuning. GPUs: blocks of 256 threads, one element per
  /// thread per trip. CPU devices (PoCL): one work-item per work-group, so each work-item
  /// streams through contiguous chunks that the device's compiler vectorizes (on this project's
  /// 2-core machine clip+AdamW then runs at 0.96 of clEnqueueCopyBuffer's bandwidth, against
  /// 0.13 with blocks of 256).
  static GpuLaunch device_default(bool gpu);

  /// "block=256,items=1,vec=1,grid=8,chunk=65536" (",tables=shared", ",prefetch=1",
  /// ",recompute=1", ",interleave=1", ",ahead=N", ",stage=N" and ",resident=N" after it when
  /// set): the cache's form of a decision.
  std::string to_string() const;
  static std::optional<GpuLaunch> parse(const std::string& s);
  /// What a user writes: any subset of block, items, vec, grid, chunk, tables (global or
  /// shared), prefetch (0 or 1), recompute (0 or 1), interleave (0 or 1), ahead, stage and
  /// resident as "name=value" pairs separated by commas ("vec=4,items=2"); the rest keep their
  /// defaults. Errors name the problem.
  static Expected<GpuLaunch> from_text(const std::string& s, const GpuLaunch& base);
  static Expected<GpuLaunch> from_text(const std::string& s) { return from_text(s, GpuLaunch{}); }
  /// The part that changes the emitted code, for kernel cache keys: "block=256,items=1,vec=1"
  /// (",tables=shared", ",prefetch=1", ",recompute=1", ",interleave=1", ",ahead=N",
  /// ",stage=N" and ",resident=N" after it when set).
  std::string code_variant() const;
  /// ",tables=shared", ",prefetch=1", ",recompute=1", ",interleave=1", ",ahead=N",
  /// ",stage=N" and ",resident=N", each where set (the end of both forms).
  std::string options_suffix() const;
  /// This launch with vec=1 and without the options that need vectors (recompute, interleave,
  /// stage): what a step falls back to on memory not aligned for the vectors.
  GpuLaunch scalar() const;
  /// A clear error for parameters no kernel can use.
  Status validate() const;
  /// Blocks to launch for `chunks` chunks on a device with `units` SMs or compute units.
  int64_t grid(int64_t chunks, int units) const;

  bool operator==(const GpuLaunch&) const = default;
};

/// The CPU's launch parameters: what its autotuner searches and the cache stores
/// ("threads=2,chunk=65536,unroll=0").
struct CpuLaunch {
  int threads = 0;                   // 0: OpenMP's default (all cores)
  int64_t chunk_elements = 1 << 16;  // a tensor is cut into chunks of at most this many elements
  int unroll = 0;  // vector iterations interleaved per element-loop trip; 0: LLVM's choice
  bool operator==(const CpuLaunch&) const = default;
};

/// Every tensor starts at a multiple of this many elements in a device arena, so vector loads of
/// up to 8 elements of any type are aligned (for 8-byte types, to 64 bytes).
inline constexpr int64_t kArenaAlignElements = 16;

}  // namespace optjit::codegen
