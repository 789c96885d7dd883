#include "ir/types.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include <gtest/gtest.h>

namespace optjit {
namespace {

// GCC's _Float16 conversion (libgcc soft-fp) rounds correctly from double: an independent oracle.
TEST(Half, EveryBitPatternRoundTrips) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    double v = f16_value(static_cast<uint16_t>(b));
    _Float16 h;
    uint16_t bits = static_cast<uint16_t>(b);
    std::memcpy(&h, &bits, 2);
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(static_cast<double>(h)));
      continue;
    }
    EXPECT_EQ(v, static_cast<double>(h)) << std::hex << b;
    EXPECT_EQ(f16_bits(v), b) << std::hex << b;
  }
}

TEST(Half, RandomDoublesRoundLikeTheCompiler) {
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> exponent(-30, 18);
  std::uniform_real_distribution<double> mant(1, 2);
  for (int i = 0; i < 200000; ++i) {
    double x = std::ldexp(mant(rng), static_cast<int>(exponent(rng))) * (i % 2 ? -1 : 1);
    _Float16 h = static_cast<_Float16>(x);
    uint16_t want;
    std::memcpy(&want, &h, 2);
    ASSERT_EQ(f16_bits(x), want) << x;
    ASSERT_EQ(round_to(DType::f16, x), static_cast<double>(h)) << x;
  }
}

TEST(Half, TiesGoToEvenAndOverflowGoesToInfinity) {
  EXPECT_EQ(round_to(DType::f16, 1.0 + std::ldexp(1.0, -11)), 1.0);  // tie, even mantissa below
  EXPECT_EQ(round_to(DType::f16, 1.0 + 3 * std::ldexp(1.0, -11)), 1.0 + std::ldexp(1.0, -9));
  EXPECT_EQ(round_to(DType::f16, 65504.0), 65504.0);
  EXPECT_EQ(round_to(DType::f16, 65519.0), 65504.0);
  EXPECT_TRUE(std::isinf(round_to(DType::f16, 65520.0)));
  EXPECT_EQ(round_to(DType::f16, std::ldexp(1.0, -25)),
            0.0);  // half the smallest subnormal: tie to 0
  EXPECT_EQ(round_to(DType::f16, std::ldexp(1.5, -25)), std::ldexp(1.0, -24));
}

TEST(BFloat16, EveryBitPatternRoundTrips) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    double v = bf16_value(static_cast<uint16_t>(b));
    // bf16 is the top half of an f32.
    uint32_t f32bits = b << 16;
    float f;
    std::memcpy(&f, &f32bits, 4);
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(f));
      continue;
    }
    EXPECT_EQ(v, static_cast<double>(f)) << std::hex << b;
    EXPECT_EQ(bf16_bits(v), b) << std::hex << b;
  }
}

TEST(BFloat16, RoundsToNearestEvenFromFloat) {
  // From an f32 value, round-to-nearest-even on the top 16 bits is the usual definition.
  std::mt19937 rng(2);
  for (int i = 0; i < 200000; ++i) {
    uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, 4);
    if (!std::isfinite(f)) continue;
    uint32_t lsb = (bits >> 16) & 1;
    uint32_t rounded = bits + 0x7fff + lsb;
    uint16_t want = static_cast<uint16_t>(rounded >> 16);
    ASSERT_EQ(bf16_bits(f), want) << f;
  }
}

TEST(Types, RoundToFloatAndIntegers) {
  EXPECT_EQ(round_to(DType::f32, 0.1), static_cast<double>(0.1f));
  EXPECT_EQ(round_to(DType::f64, 0.1), 0.1);
  EXPECT_EQ(round_to(DType::i64, -2.7), -2.0);
  EXPECT_FALSE(std::signbit(round_to(DType::i64, -0.5)));  // an integer has no -0
  EXPECT_EQ(round_to(DType::i64, std::nan("")), 0.0);
  EXPECT_EQ(round_to(DType::i64, -HUGE_VAL), 0.0);
  EXPECT_EQ(round_to(DType::b1, 0.5), 1.0);
  EXPECT_TRUE(std::isnan(round_to(DType::f16, std::nan(""))));
  EXPECT_EQ(compute_type(DType::bf16), DType::f32);
  EXPECT_EQ(compute_type(DType::f64), DType::f64);
  EXPECT_EQ(parse_dtype("bf16"), DType::bf16);
  EXPECT_FALSE(parse_dtype("f8"));
}

}  // namespace
}  // namespace optjit
