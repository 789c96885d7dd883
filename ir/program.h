// The IR: a flat SSA program over typed, ranked values. See ops.def for the ops.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ir/quant.h"
#include "ir/types.h"

namespace optjit::ir {

enum class Op : uint8_t {
#define OPTJIT_OP(name, text, arity, kind, synopsis) name,
#include "ir/ops.def"
};

enum class OpKind : uint8_t { leaf, math, logic, compare, select, cast, reduce, effect };

struct OpInfo {
  std::string_view text;
  int arity;
  OpKind kind;
  std::string_view synopsis;
};
const OpInfo& info(Op op);
std::optional<Op> parse_op(std::string_view text);

/// Index of an instruction (and of the value it defines) in Program::insts.
enum class ValueId : uint32_t {};
inline constexpr ValueId kNoValue{UINT32_MAX};
inline uint32_t index(ValueId v) { return static_cast<uint32_t>(v); }

/// Reduction scope, the attr of a reduce op.
enum class Scope : uint32_t { all = 0, tensor = 1 };

/// Numbers in a program are the same when equal or both NaN (a NaN constant, or the NaN that
/// marks a state with no value yet, is the same program on both sides of a round trip).
inline bool same_number(double a, double b) { return a == b || (a != a && b != b); }

struct Inst {
  Op op{};
  DType type = DType::f64;   // result type (unused for effects)
  Rank rank = Rank::scalar;  // derived from the operands and the op
  uint32_t attr = 0;         // hyper / buffer / state index, or reduction scope
  double imm = 0;            // Const only
  std::array<ValueId, 3> args{kNoValue, kNoValue, kNoValue};

  bool operator==(const Inst& o) const {
    return op == o.op && type == o.type && rank == o.rank && attr == o.attr &&
           same_number(imm, o.imm) && args == o.args;
  }
};

/// Where a state's first value comes from: a constant or a hyperparameter's value at creation.
struct Init {
  double value = 0;
  std::optional<uint32_t> hyper;  // index into Program::hypers
  bool operator==(const Init& o) const { return same_number(value, o.value) && hyper == o.hyper; }
};

/// A range of real numbers, each end open or closed; inf ends are allowed ([0, inf]).
struct Interval {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;
  bool contains(double x) const {
    return (lo_open ? x > lo : x >= lo) && (hi_open ? x < hi : x <= hi);  // false for NaN
  }
  bool operator==(const Interval&) const = default;
};
/// "[0, inf]", "(0, 1) or (1, inf]".
std::string to_string(const std::vector<Interval>& allowed);

struct HyperDecl {
  std::string name;
  double value = 0;  // default; the runtime may set another before any step
  /// Where the value may lie: in one of `allowed` (empty: anywhere, NaN included), as the
  /// constructor of the optimizer it follows checks it (torch.optim.Adam: 0 <= lr). `rule`
  /// names it in messages ("the learning rate").
  std::vector<Interval> allowed;
  bool whole = false;  // a count of steps (torch takes an int there)
  std::string rule;
  /// The step's scheduler epoch (t - 1 at step t) may not pass this value: torch's OneCycleLR
  /// raises there ("Tried to step N times"), and so does the step.
  bool step_limit = false;
  bool operator==(const HyperDecl& o) const {
    return name == o.name && same_number(value, o.value) && allowed == o.allowed &&
           whole == o.whole && rule == o.rule && step_limit == o.step_limit;
  }
};

/// Empty when `value` is allowed for `h`; else a message naming the hyperparameter, the value
/// and the rule: "adamw.lr = -1 is invalid: the learning rate must be in [0, inf]".
std::string check_hyper(const HyperDecl& h, double value);
/// What every such message holds (the Python module raises them as ValueError, like torch).
inline constexpr std::string_view kInvalidMarker = " is invalid: ";

enum class BufferRole : uint8_t { param, grad, state, scratch };  // scratch: made by the planner
std::string_view to_string(BufferRole r);

/// A per-element buffer, one per parameter tensor.
struct BufferDecl {
  std::string name;
  BufferRole role = BufferRole::state;
  DType storage = DType::f32;  // quantized: the type its values are loaded as (f32)
  Init init;                   // state buffers only
  /// A block-quantized state (ir/quant.h): one code per element, and the buffer right after it
  /// holds one scale per block (`per_block`). Loads dequantize; a store quantizes the block.
  Quant quant = Quant::none;
  /// A quantized buffer's scales: one element per block of the tensor's elements, never
  /// loaded or stored by an instruction; its storage is f32.
  bool per_block = false;
  bool operator==(const BufferDecl&) const = default;
};

/// Bytes one parameter element costs in buffers[i]: its storage, a quantized buffer's code, or
/// its share of a per-block scale.
double element_bytes(const std::vector<BufferDecl>& buffers, size_t i);
/// The block of a program's quantized buffers (the verifier makes them share one): the
/// kernels' unit of work on a quantized tensor. kQuantBlock when nothing is quantized.
int64_t quant_block(const std::vector<BufferDecl>& buffers);
/// holds_codes (Op::HoldsCodes) names one of a program's first kHoldsCodesBuffers buffers: the
/// device step's tensor table keeps each tensor's answers for them as the bits of an f64.
inline constexpr uint32_t kHoldsCodesBuffers = 52;

/// A value carried from step to step, one per parameter group (e.g. NAdam's mu_product).
struct StateDecl {
  std::string name;
  DType type = DType::f64;
  Init init;
  bool operator==(const StateDecl&) const = default;
};

/// A whole optimizer step. Values are immutable once built; passes return new programs.
struct Program {
  std::vector<HyperDecl> hypers;
  std::vector<BufferDecl> buffers;
  std::vector<StateDecl> states;
  std::vector<Inst> insts;

  const Inst& at(ValueId v) const { return insts[index(v)]; }
  std::optional<uint32_t> find_hyper(std::string_view name) const;
  std::optional<uint32_t> find_buffer(std::string_view name) const;
  std::optional<uint32_t> find_state(std::string_view name) const;
  /// The buffer with role param (grad); every lowered pipeline has exactly one of each.
  uint32_t param_buffer() const;
  uint32_t grad_buffer() const;

  bool operator==(const Program&) const = default;
};

/// Builds a Program. Pure instructions are hash-consed: building the same (op, type, attr,
/// imm, operands) twice returns the same value, so common subexpressions are shared for free.
class Builder {
 public:
  Builder() = default;
  explicit Builder(Program declarations_only);

  uint32_t add_hyper(std::string name, double value);
  void set_hyper_bounds(uint32_t index, std::vector<Interval> allowed, bool whole, std::string rule,
                        bool step_limit = false);
  uint32_t add_buffer(BufferDecl decl);
  uint32_t add_state(StateDecl decl);
  const Program& program() const { return p_; }

  /// Appends (or finds) an instruction. The rank is computed here; types are checked by verify.
  ValueId emit(Op op, DType type, std::array<ValueId, 3> args = {kNoValue, kNoValue, kNoValue},
               uint32_t attr = 0, double imm = 0);
  ValueId constant(double v, DType type = DType::f64) { return emit(Op::Const, type, {}, 0, v); }

  Program finish() &&;

 private:
  struct KeyHash {
    size_t operator()(const Inst& i) const;
  };
  struct KeyEq {  // bitwise on imm, so 0.0 and -0.0 (and NaN payloads) stay distinct
    bool operator()(const Inst& a, const Inst& b) const;
  };
  Program p_;
  std::unordered_map<Inst, ValueId, KeyHash, KeyEq> interned_;
};

/// Rank of a value computed by `op` from operands of the given ranks.
Rank result_rank(Op op, uint32_t attr, Rank max_operand_rank);
bool has_result(Op op);
bool is_pure(Op op);

}  // namespace optjit::ir
