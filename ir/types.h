// Element types, value ranks and the number formats the reference backend rounds to.
#pragma once

#include "ir/error.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace optjit {

/// u8 and u16 are storage only (quantized codes, the low half of an f32 master, checkpoint
/// files): no IR value has them; a load gives the integer as a float.
enum class DType : uint8_t { f64, f32, f16, bf16, i64, b1, u8, u16 };
inline constexpr DType kAllDTypes[] = {DType::f64, DType::f32, DType::f16, DType::bf16,
                                       DType::i64, DType::b1,  DType::u8,  DType::u16};

/// How often a value is computed: once per step (per parameter group), per tensor, per element.
enum class Rank : uint8_t { scalar, tensor, element };

std::string_view to_string(DType t);
std::string_view to_string(Rank r);
std::optional<DType> parse_dtype(std::string_view s);

/// The most elements optjit takes in one tensor set (2^48, far above any memory; its bytes at
/// 8 per element still fit in 64 bits with room for products).
inline constexpr int64_t kMaxElements = int64_t{1} << 48;
/// The elements of `shape`, checked: no negative size, no overflow, at most kMaxElements (in
/// all the tensors together when `already` counts the others). `what` names it in the error.
Expected<int64_t> element_count(const std::vector<int64_t>& shape, std::string_view what,
                                int64_t already = 0);

size_t size_bytes(DType t);
bool is_float(DType t);
/// The arithmetic type for a storage type, like PyTorch's opmath_t: f64 stays f64, others f32.
DType compute_type(DType storage);

/// The i64 values: whole numbers from -2^53 to 2^53, each exact in the double that the reference
/// and the scalar programs compute with (every count optjit makes is one: steps below 2^53,
/// elements at most 2^48). Conversions to i64 and i64 add, sub and mul saturate here, on every
/// backend (a kernel's int64 arithmetic past 2^53 would part from the doubles, and past 2^63
/// wrap, or be undefined in C).
inline constexpr double kI64Limit = 0x1p53;

/// `x` rounded (to nearest, ties to even) to the nearest value of type `t`, returned as a double.
/// Integers round toward zero like a C cast and saturate where C's cast is undefined: i64 at
/// -kI64Limit and kI64Limit (2^53), Inf and NaN to 0; u8 and u16 at 0 and their largest value,
/// Inf too, NaN to 0 (LLVM's fptoui.sat). b1 is x != 0. Every backend's conversions give these
/// values.
double round_to(DType t, double x);

// Bit conversions for half formats (round to nearest even, NaN preserved).
uint16_t f16_bits(double x);
double f16_value(uint16_t bits);
uint16_t bf16_bits(double x);
double bf16_value(uint16_t bits);

}  // namespace optjit
