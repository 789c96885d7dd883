#include "ir/types.h"

#include <algorithm>

#include <bit>
#include <cmath>
#include <limits>

namespace optjit {

std::string_view to_string(DType t) {
  switch (t) {
    case DType::f64:
      return "f64";
    case DType::f32:
      return "f32";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::i64:
      return "i64";
    case DType::b1:
      return "b1";
    case DType::u8:
      return "u8";
    case DType::u16:
      return "u16";
  }
  return "?";
}

std::string_view to_string(Rank r) {
  switch (r) {
    case Rank::scalar:
      return "scalar";
    case Rank::tensor:
      return "tensor";
    case Rank::element:
      return "element";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view s) {
  for (DType t : kAllDTypes)
    if (to_string(t) == s) return t;
  return std::nullopt;
}

size_t size_bytes(DType t) {
  switch (t) {
    case DType::f64:
    case DType::i64:
      return 8;
    case DType::f32:
      return 4;
    case DType::f16:
    case DType::bf16:
    case DType::u16:
      return 2;
    case DType::b1:
    case DType::u8:
      return 1;
  }
  return 0;
}

bool is_float(DType t) {
  return t == DType::f64 || t == DType::f32 || t == DType::f16 || t == DType::bf16;
}

DType compute_type(DType storage) { return storage == DType::f64 ? DType::f64 : DType::f32; }

namespace {

// Round a finite double to a binary format with `mant` explicit mantissa bits and minimum
// normal exponent `emin` (subnormals included); values past `max_finite` overflow to infinity
// as IEEE round-to-nearest does. Scaling by powers of two is exact, so one nearbyint rounds
// correctly (no double rounding through f32).
double round_binary(double x, int mant, int emin, double max_finite) {
  if (!std::isfinite(x) || x == 0) return x;
  int e;
  std::frexp(x, &e);  // x = f * 2^e, 0.5 <= |f| < 1
  int exp = std::max(e - 1, emin);
  double quantum = std::ldexp(1.0, exp - mant);
  double r = std::nearbyint(x / quantum) * quantum;
  // Halfway between max_finite and the next power of two rounds to infinity.
  double limit = max_finite + std::ldexp(1.0, std::ilogb(max_finite) - mant - 1);
  if (std::fabs(r) > max_finite || std::fabs(x) >= limit)
    return std::copysign(std::numeric_limits<double>::infinity(), x);
  return r;
}

constexpr double kF16Max = 65504.0;
constexpr double kBF16Max = 3.3895313892515355e38;

uint16_t encode(double x, int mant, int ebits, double max_finite) {
  const int bias = (1 << (ebits - 1)) - 1;
  uint16_t sign = std::signbit(x) ? uint16_t(1u << (mant + ebits)) : 0;
  uint16_t exp_all = uint16_t(((1u << ebits) - 1) << mant);
  if (std::isnan(x)) return uint16_t(sign | exp_all | (1u << (mant - 1)));
  double r = round_binary(x, mant, 1 - bias, max_finite);
  if (std::isinf(r)) return uint16_t(sign | exp_all);
  double a = std::fabs(r);
  if (a == 0) return sign;
  int e;
  double f = std::frexp(a, &e);  // a = f * 2^e
  int biased = e - 1 + bias;
  if (biased <= 0) {  // subnormal: a = m * 2^(1-bias-mant)
    auto m = uint16_t(std::ldexp(a, bias - 1 + mant));
    return uint16_t(sign | m);
  }
  auto m = uint16_t(std::ldexp(f * 2 - 1, mant));
  return uint16_t(sign | (biased << mant) | m);
}

double decode(uint16_t bits, int mant, int ebits) {
  const int bias = (1 << (ebits - 1)) - 1;
  bool neg = bits >> (mant + ebits);
  int e = (bits >> mant) & ((1 << ebits) - 1);
  int m = bits & ((1 << mant) - 1);
  double v;
  if (e == 0)
    v = std::ldexp(double(m), 1 - bias - mant);
  else if (e == (1 << ebits) - 1)
    v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else
    v = std::ldexp(1.0 + std::ldexp(double(m), -mant), e - bias);
  return neg ? -v : v;
}

}  // namespace

uint16_t f16_bits(double x) { return encode(x, 10, 5, kF16Max); }
double f16_value(uint16_t b) { return decode(b, 10, 5); }
uint16_t bf16_bits(double x) { return encode(x, 7, 8, kBF16Max); }
double bf16_value(uint16_t b) { return decode(b, 7, 8); }

double round_to(DType t, double x) {
  switch (t) {
    case DType::f64:
      return x;
    case DType::f32:
      return static_cast<double>(static_cast<float>(x));
    case DType::f16:
      return round_binary(x, 10, -14, kF16Max);
    case DType::bf16:
      return round_binary(x, 7, -126, kBF16Max);
    case DType::i64:  // an integer has no -0: trunc(-0.5) is -0.0, and + 0.0 makes it 0
      return std::isfinite(x) ? std::clamp(std::trunc(x), -kI64Limit, kI64Limit) + 0.0 : 0.0;
    case DType::b1:
      return x != 0 ? 1.0 : 0.0;
    case DType::u8:
      return std::isnan(x) ? 0.0 : std::clamp(std::trunc(x), 0.0, 255.0);
    case DType::u16:
      return std::isnan(x) ? 0.0 : std::clamp(std::trunc(x), 0.0, 65535.0);
  }
  return x;
}

Expected<int64_t> element_count(const std::vector<int64_t>& shape, std::string_view what,
                                int64_t already) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return make_error("{} has a negative size ({})", what, d);
    if (d != 0 && n > kMaxElements / d)
      return make_error("{} has more than {} elements, optjit's limit", what, kMaxElements);
    n *= d;
  }
  if (n > kMaxElements - already)
    return make_error("{} takes the tensors past {} elements, optjit's limit", what, kMaxElements);
  return n;
}

}  // namespace optjit
