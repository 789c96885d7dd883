// The meaning of each pure op on doubles: used by the reference backend and constant folding.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "ir/program.h"

namespace optjit::ir {

inline double nan_aware_min(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  return a < b ? a : b;
}
inline double nan_aware_max(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  return a > b ? a : b;
}

/// Evaluates a pure non-leaf, non-reduce op in float64 (bools are 0/1). Only Cast rounds:
/// the reference backend is the exact oracle, so other ops do not round to their type. i64's
/// add, sub and mul saturate at kI64Limit (round_to): exact below it, where a double is.
inline double eval_op(Op op, DType type, double a, double b = 0, double c = 0) {
  if (type == DType::i64 && (op == Op::Add || op == Op::Sub || op == Op::Mul))
    return round_to(DType::i64, op == Op::Add ? a + b : op == Op::Sub ? a - b : a * b);
  switch (op) {
    case Op::Neg:
      return -a;
    case Op::Abs:
      return std::fabs(a);
    case Op::Sign:
      return std::isnan(a) ? a : double((a > 0) - (a < 0));
    case Op::Sqrt:
      return std::sqrt(a);
    case Op::Rsqrt:
      return 1.0 / std::sqrt(a);
    case Op::Exp:
      return std::exp(a);
    case Op::Log:
      return std::log(a);
    case Op::Floor:
      return std::floor(a);
    case Op::Cos:
      return std::cos(a);
    case Op::Hi16:
    case Op::Lo16:
    case Op::Join16: {
      // On the f32 patterns (the reference rounds the value to f32 first, as an f32 store would).
      uint32_t bits = std::bit_cast<uint32_t>(static_cast<float>(a));
      if (op == Op::Lo16) return static_cast<double>(bits & 0xffffu);
      bits &= 0xffff0000u;
      // b's low half as a u16's value (round_to: truncated, saturated, NaN 0).
      if (op == Op::Join16) bits |= static_cast<uint32_t>(round_to(DType::u16, b));
      return std::bit_cast<float>(bits);
    }
    case Op::Add:
      return a + b;
    case Op::Sub:
      return a - b;
    case Op::Mul:
      return a * b;
    case Op::Div:
      return a / b;
    case Op::Pow:
      return std::pow(a, b);
    case Op::Min:
      return nan_aware_min(a, b);
    case Op::Max:
      return nan_aware_max(a, b);
    case Op::Fma:
      return std::fma(a, b, c);
    case Op::Not:
      return a == 0;
    case Op::And:
      return a != 0 && b != 0;
    case Op::Or:
      return a != 0 || b != 0;
    case Op::IsFinite:
      return std::isfinite(a);
    case Op::Lt:
      return a < b;
    case Op::Le:
      return a <= b;
    case Op::Gt:
      return a > b;
    case Op::Ge:
      return a >= b;
    case Op::Eq:
      return a == b;
    case Op::Ne:
      return a != b;
    case Op::Select:
      return a != 0 ? b : c;
    case Op::Cast:
      return round_to(type, a);
    default:
      break;
  }
  return std::numeric_limits<double>::quiet_NaN();
}

}  // namespace optjit::ir
