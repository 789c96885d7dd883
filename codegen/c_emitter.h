// Plan -> CUDA C or OpenCL C from one emitter. The languages differ only in the options below
// (qualifiers, index spelling, type names, math names, half conversions, how a kernel finds a
// tensor's buffers); everything else, the walk over the pass body included, is shared.
#pragma once

#include <string>
#include <vector>

#include "codegen/launch.h"
#include "ir/error.h"
#include "ir/plan.h"

namespace optjit::codegen {

enum class CLanguage { cuda, opencl, wgsl };

/// How WGSL kernels divide and take square roots of f32 (WGSL allows 2.5 ulp): with the
/// adapter's own operators, where they round correctly; or correcting the adapter's result from
/// an exact residual x - q * y, computed by one fused multiply-add where the adapter's `fma` is
/// fused, else by Dekker's product. WebgpuDevice picks the first, in this order, that a probe
/// of 65,536 divisions and roots on the adapter finds exact.
enum class F32Division { hardware, fma, dekker };
const char* to_string(F32Division d);

struct CEmitOptions {
  CLanguage language = CLanguage::opencl;
  /// The kernels are written for its block size (a launch must use it), items per thread and
  /// vector width (tensors and chunks must start aligned to it); the grid cap and chunk size
  /// only matter at launch.
  GpuLaunch launch;
  /// The whole step on the device: the scalar program between passes (learning rate, bias
  /// corrections, the clip coefficient, skip_if) and the combining of reduction partials run
  /// as kernels too, reading the step count, hyperparameters and scalar states from device
  /// memory, so a step is a fixed sequence of launches with no host round trip (capturable in
  /// a CUDA graph). Pass kernels then take a trailing `ctl` argument and do nothing while the
  /// step is being skipped. See DeviceStepLayout for the extra kernels.
  bool device_step = false;
  /// WGSL's division and square root (the C languages are compiled to round correctly).
  F32Division division = F32Division::dekker;
};

/// The device-step kernels (CEmitOptions::device_step), launched in this order each step:
///   optjit_segment_0, optjit_pass_0, [optjit_combine_0, [optjit_fold_0]], optjit_segment_1, ...,
///   optjit_segment_P, optjit_commit
/// with arguments (all doubles unless said, G groups, T tensors, "long" is 64-bit):
///   segment_k(hypers[G*H], ctl, tinfo[4T], vals, uniforms[T*U_k], long T, long G)
///             tinfo: per tensor its group, numel, first (runtime::TensorState) and which
///             buffers hold codes (bits; runtime::holds_codes)
///             one thread per max(T, G): thread i evaluates group i's scalars (and its skip_if
///             and scalar-state stores), and tensor i's values and pass k's uniform row
///   combine_k(partials[nchunks*R], long first[T+1], vals, fold_rows, long T, long G)
///             one work-group of kCombineLanes threads per tensor: its chunks' partials in the
///             fixed lane order (kernel_abi.h), as the host does
///   fold_k(fold_rows, vals, long T, long G)   one work-group of kCombineLanes threads: the
///             tensors in the same order, into every group
///   commit(ctl, long G)   one thread: if the step was not skipped, the pending scalar states
///             become the states and the step count goes up; then the skip flag is cleared
struct DeviceStepLayout {
  size_t hypers = 0, states = 0;              // per group
  size_t scalar_slots = 0, tensor_slots = 0;  // scalar-program values per group, per tensor
  size_t fold_rows = 0;                       // most all-tensor reductions in one pass
  size_t partials_per_chunk = 0;              // most reductions in one pass
  std::vector<bool> combines, folds;          // per pass: any reduction, any all-tensor one
  /// ctl: [0] completed steps, [1] this step is being skipped, [2] the last step was skipped,
  /// then G*S scalar states, then the G*S pending ones this step will commit.
  static constexpr size_t kCtlHeader = 3;
  size_t ctl_size(size_t groups) const { return kCtlHeader + 2 * groups * states; }
  /// vals: group g's scalar slot s at g*scalar_slots + s; tensor t's slot s after all groups'.
  size_t vals_size(size_t groups, size_t tensors) const {
    return groups * scalar_slots + tensors * tensor_slots;
  }
};
DeviceStepLayout device_step_layout(const plan::Plan& plan);

/// One kernel `optjit_pass_<k>` per pass. Kernel arguments:
///   CUDA:   (const OptjitRow* rows, const long long* chunks, long long nchunks, double* partials)
///           with OptjitRow { void* const* buffers; const double* uniforms; } per tensor.
///   OpenCL: (global T0* b0, ..., global const double* uniforms, global const long* rows,
///            global const long* chunks, long nchunks, global double* partials)
///           with rows[(B+1)t + b] = the tensor's first element in buffer b's arena and
///           rows[(B+1)t + B] = its uniform row, B = the plan's buffer count. (OpenCL 1.2 has
///           no pointers in buffers; per-buffer offsets let a caller's own buffers be arenas.)
/// chunks holds (tensor, offset, length) triples. Each work-group takes chunks
/// group, group + groups, ...; within a chunk each thread takes `items` vectors of `vec` elements
/// a block apart per loop trip (the tail that is not a whole vector goes element by element);
/// reductions go to partials[c * R + r] through a fixed-order tree
/// in local memory, so results do not depend on scheduling.
Expected<std::string> emit_c(const plan::Plan& plan, CEmitOptions options);

/// A WGSL kernel `optjit_probe` (work-groups of 64) over a storage buffer of f32 pairs (x, y)
/// (binding 0) and the kernels' integer arguments, all 0 (binding 1, a uniform vec4<i32>): each
/// pair becomes (x / y, sqrt(x)) as kernels emitted with `division` compute them (the adapter's
/// own results through the same hook, OPTJIT_WGSL_INEXACT_ULPS).
std::string wgsl_rounding_probe(F32Division division);

/// The constant tables of a plan's block-quantized formats (maps, thresholds, lookup tables), in
/// the order the kernels use them. C kernels hold them as constant arrays; WGSL ones read them
/// from one storage buffer, their concatenation, that the WebGPU module binds after the integer
/// arguments (binding B + 5 for B buffers): WGSL compilers copy a constant array to private
/// memory on every dynamic index, which made a 2,668-entry lookup table take minutes per step.
struct ConstantTable {
  std::string name;
  std::vector<uint32_t> values;
};
std::vector<ConstantTable> constant_tables(const plan::Plan& plan);

/// The kernel-cache variant of emitted source: the launch shape plus a hash of the source
/// itself, so a change to the emitter can never load a stale binary, bumped version or not.
std::string source_variant(const std::string& language, const GpuLaunch& launch,
                           const std::string& source);

}  // namespace optjit::codegen
