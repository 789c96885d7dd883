// Algorithm: one forward walk. Each instruction's operands must precede it; its type is checked
// against the op's kind (ops.def); its rank must equal the rank derived from its operands.
#include "ir/verify.h"

#include <cmath>
#include <vector>

#include "ir/sign.h"

namespace optjit::ir {

namespace {

bool is_numeric(DType t) { return t != DType::b1; }

// Whether x is a value of type t, as a literal in a backend's code holds it: an i64 a whole
// number within kI64Limit, a b1 0 or 1, a float type's finite values within its range.
bool is_value_of(DType t, double x) {
  if (t == DType::i64 || t == DType::b1) return round_to(t, x) == x;
  return !std::isfinite(x) || std::isfinite(round_to(t, x));
}
// The values of i64 or b1, for the errors that is_value_of answers.
const char* integer_values(DType t) {
  return t == DType::b1 ? "0 or 1" : "a whole number from -2^53 to 2^53";
}

Status check_inst(const Program& p, size_t n, const Inst& in) {
  const OpInfo& oi = info(in.op);
  auto fail = [&](std::string what) { return make_error("IR %{} ({}): {}", n, oi.text, what); };
  Rank max_rank = Rank::scalar;
  for (int k = 0; k < 3; ++k) {
    if (k >= oi.arity) {
      if (in.args[k] != kNoValue) return fail("has more operands than the op takes");
      continue;
    }
    if (index(in.args[k]) >= n) return fail(fmt::format("operand {} is not defined before use", k));
    const Inst& a = p.insts[index(in.args[k])];
    if (!has_result(a.op)) return fail(fmt::format("operand {} has no value", k));
    max_rank = std::max(max_rank, a.rank);
  }
  auto arg = [&](int k) -> const Inst& { return p.insts[index(in.args[k])]; };
  auto same_types = [&]() {
    for (int k = 1; k < oi.arity; ++k)
      if (arg(k).type != arg(0).type) return false;
    return true;
  };
  // u8 and u16 hold codes and integers in memory; the backends compute in f32, f64, i64 and
  // b1 only (a u16 state loads as f32), so no value has those types.
  if (has_result(in.op) && (in.type == DType::u8 || in.type == DType::u16))
    return fail(fmt::format("{} is a storage type: values are f64, f32, f16, bf16, i64 or b1",
                            to_string(in.type)));
  switch (oi.kind) {
    case OpKind::leaf:
      switch (in.op) {
        case Op::Hyper:
          if (in.attr >= p.hypers.size()) return fail("hyperparameter index out of range");
          if (in.type != DType::f64) return fail("hyperparameters are f64");
          break;
        case Op::Load:
          if (in.attr >= p.buffers.size()) return fail("buffer index out of range");
          if (!is_float(in.type)) return fail("loads produce a float type");
          if (p.buffers[in.attr].per_block)
            return fail("a per_block buffer is read by its quantized buffer's loads");
          break;
        case Op::Const:
          // (The reference keeps an f32 constant's digits, as the exact oracle, but one past
          // f32's range is Inf in a kernel.)
          if (is_value_of(in.type, in.imm)) break;
          if (in.type == DType::i64 || in.type == DType::b1)
            return fail(fmt::format("{} {} constant is {}, not {}",
                                    in.type == DType::i64 ? "an" : "a", to_string(in.type),
                                    integer_values(in.type), in.imm));
          return fail(fmt::format("{} is past {}'s largest value", in.imm, to_string(in.type)));
        case Op::SLoad:
          if (in.attr >= p.states.size()) return fail("state index out of range");
          if (in.type != p.states[in.attr].type) return fail("type differs from the state's");
          break;
        case Op::Uniform:
          return fail("uniform appears only in planned pass bodies");
        case Op::Step:
        case Op::Numel:
        case Op::First:
          if (in.type != DType::i64) return fail("counts are i64");
          break;
        case Op::HoldsCodes:
          if (in.attr >= p.buffers.size()) return fail("buffer index out of range");
          // The device step's tensor table holds each tensor's answers as bits of an f64.
          if (in.attr >= kHoldsCodesBuffers)
            return fail(
                fmt::format("holds_codes names a buffer past the first {}", kHoldsCodesBuffers));
          if (in.type != DType::b1) return fail("holds_codes is a b1");
          break;
        default:
          break;
      }
      break;
    case OpKind::math:
      if (in.op == Op::SRound) {
        if (!is_float(arg(0).type) || arg(0).rank != Rank::element)
          return fail("sround rounds a float element value");
        if (arg(1).type != DType::f64 || arg(1).rank == Rank::element)
          return fail("sround's key is an f64 scalar");
        if (arg(2).type != DType::f64 || arg(2).rank == Rank::element)
          return fail("sround's first element is an f64 tensor value");
        if (in.type != arg(0).type) return fail("result type differs from the operand's");
        if (in.attr >= p.buffers.size()) return fail("sround's stream is not a buffer");
        break;
      }
      if ((in.op == Op::Hi16 || in.op == Op::Lo16 || in.op == Op::Join16) && in.type != DType::f32)
        return fail("hi16, lo16 and join16 work on f32 bit patterns");
      if (!is_numeric(in.type)) return fail("arithmetic on b1");
      if (!same_types()) return fail("operand types differ (insert a cast)");
      if (arg(0).type != in.type) return fail("result type differs from the operands'");
      if (!is_float(in.type) && in.op != Op::Neg && in.op != Op::Abs && in.op != Op::Add &&
          in.op != Op::Sub && in.op != Op::Mul && in.op != Op::Min && in.op != Op::Max)
        return fail(fmt::format("needs a float operand, got {}", to_string(in.type)));
      break;
    case OpKind::logic:
      if (in.type != DType::b1 || arg(0).type != DType::b1 || !same_types())
        return fail("logic ops take and give b1");
      break;
    case OpKind::compare:
      if (in.type != DType::b1) return fail("comparisons give b1");
      if (!same_types()) return fail("operand types differ (insert a cast)");
      if (in.op == Op::IsFinite && !is_float(arg(0).type)) return fail("needs a float operand");
      break;
    case OpKind::select:
      if (arg(0).type != DType::b1) return fail("the condition must be b1");
      if (arg(1).type != arg(2).type || arg(1).type != in.type)
        return fail("both choices and the result must have one type");
      break;
    case OpKind::cast:
      break;
    case OpKind::reduce:
      if (in.attr > 1) return fail("unknown reduction scope");
      if (arg(0).rank != Rank::element) return fail("reduces an element-rank value");
      if (!is_float(arg(0).type)) return fail("reduces a float value");
      if (in.type != (in.op == Op::AnyNonFinite ? DType::b1 : DType::f64))
        return fail("sum/sumsq/maxabs give f64, anynonfinite gives b1");
      break;
    case OpKind::effect:
      switch (in.op) {
        case Op::Store:
          if (in.attr >= p.buffers.size()) return fail("buffer index out of range");
          if (p.buffers[in.attr].role == BufferRole::grad) return fail("the gradient is read-only");
          if (p.buffers[in.attr].per_block)
            return fail("a per_block buffer is written by its quantized buffer's store");
          if (arg(0).rank != Rank::element) return fail("stores an element-rank value");
          if (!is_float(arg(0).type)) return fail("stores a float value");
          break;
        case Op::SStore:
          if (in.attr >= p.states.size()) return fail("state index out of range");
          if (arg(0).rank != Rank::scalar) return fail("scalar state takes a scalar-rank value");
          if (arg(0).type != p.states[in.attr].type) return fail("type differs from the state's");
          break;
        case Op::SkipIf:
          if (arg(0).type != DType::b1 || arg(0).rank != Rank::scalar)
            return fail("the condition must be a b1 scalar");
          break;
        default:
          break;
      }
      break;
  }
  if (in.rank != result_rank(in.op, in.attr, max_rank))
    return fail(fmt::format("rank {} should be {}", to_string(in.rank),
                            to_string(result_rank(in.op, in.attr, max_rank))));
  return Status::Ok();
}

}  // namespace

Status verify(const Program& p) {
  int params = 0, grads = 0;
  for (const auto& b : p.buffers) {
    params += b.role == BufferRole::param;
    grads += b.role == BufferRole::grad;
    if (b.role == BufferRole::scratch)
      return make_error("IR: scratch buffer '{}' (only the planner makes them)", b.name);
    // u16 state holds integers (master_weights(low16=true): an f32 master's low 16 bits).
    if (!is_float(b.storage) && !(b.storage == DType::u16 && b.role == BufferRole::state))
      return make_error("IR: buffer '{}' has non-float storage", b.name);
    if (b.init.hyper && *b.init.hyper >= p.hypers.size())
      return make_error("IR: buffer '{}' is initialised from an unknown hyperparameter", b.name);
  }
  // The formats of one program quantize the same tensors (the kernels choose per tensor).
  const QuantInfo* rule = nullptr;
  for (const auto& b : p.buffers) {
    if (b.quant == Quant::none) continue;
    const QuantInfo& q = info(b.quant);
    if (rule && (rule->min_elements != q.min_elements || rule->whole_blocks != q.whole_blocks ||
                 rule->block != q.block))
      return make_error(
          "IR: quantized formats {} and {} quantize different tensors or blocks "
          "(bitsandbytes' and torchao's rules, 256 or 128 elements); use one family in a "
          "pipeline",
          rule->name, q.name);
    rule = &q;
  }
  // A quantized state is followed by its per-block scales, and scales follow nothing else.
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    const BufferDecl& b = p.buffers[i];
    const bool scales_next = i + 1 < p.buffers.size() && p.buffers[i + 1].per_block;
    if (b.quant != Quant::none &&
        (b.role != BufferRole::state || b.per_block || b.storage != DType::f32 || !scales_next))
      return make_error(
          "IR: quantized buffer '{}' must be an f32 state followed by its per_block scales",
          b.name);
    if (b.per_block && (i == 0 || p.buffers[i - 1].quant == Quant::none || b.storage != DType::f32))
      return make_error("IR: per_block buffer '{}' must be f32 and follow a quantized buffer",
                        b.name);
  }
  if (params != 1 || grads != 1)
    return make_error("IR: needs exactly one param and one grad buffer (has {} and {})", params,
                      grads);
  for (const auto& s : p.states) {
    if (s.init.hyper && *s.init.hyper >= p.hypers.size())
      return make_error("IR: state '{}' is initialised from an unknown hyperparameter", s.name);
    // (From a hyperparameter, any value: an i64 or b1 state's loads convert it, as a cast.)
    if (s.init.hyper || is_value_of(s.type, s.init.value) || is_float(s.type)) continue;
    return make_error("IR: {} state '{}' starts at {}, not {}", to_string(s.type), s.name,
                      s.init.value, integer_values(s.type));
  }
  std::vector<int> buffer_stores(p.buffers.size()), state_stores(p.states.size());
  for (size_t n = 0; n < p.insts.size(); ++n) {
    const Inst& in = p.insts[n];
    OPTJIT_TRY(check_inst(p, n, in));
    if (in.op == Op::Store && ++buffer_stores[in.attr] > 1)
      return make_error("IR %{}: buffer '{}' is stored twice", n, p.buffers[in.attr].name);
    if (in.op == Op::SStore && ++state_stores[in.attr] > 1)
      return make_error("IR %{}: state '{}' is stored twice", n, p.states[in.attr].name);
  }
  if (Status s = check_nonnegative_states(p); !s) return make_error("IR: {}", s.error().message);
  return Status::Ok();
}

}  // namespace optjit::ir
