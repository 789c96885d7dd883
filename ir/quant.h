// Block-quantized storage: a buffer stored as one 8-bit code per element and one f32 scale per
// block of kQuantBlock elements, as bitsandbytes stores 8-bit optimizer state. Every format is
// one row of a table (its map and the lookup table its quantizer uses); the IR, the planner, the
// reference and the backends ask the table, not the format.
//
// The quantizer is bitsandbytes' (csrc/cpu_ops.cpp, quantize_cpu_impl), so optjit's codes are
// its codes bit for bit:
//   absmax = max |x| over the block (f32); all codes 0 when it is 0;
//   y = clamp(x * (1 / absmax), -1, 1); i = (uint16)((y + 1) * 0.5 * 65535 + 0.5);
//   code = lut[i], where lut[i] is the map entry nearest to -1 + 2i/65535 (each midpoint of two
//   neighbours goes to the lower one).
// The lookup is exact to 2/65535: for |y| under about 1e-4 it may pick a code a few entries
// from the nearest (the map is denser there than the table); that is bitsandbytes' behaviour
// on the CPU, kept on purpose. Dequantizing is map[code] * absmax.
//
// Tensors under kQuantMinElements elements keep their state in f32, as bitsandbytes'
// min_8bit_size does: their scale buffer is empty and the kernels take the plain path.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>
#include <vector>

namespace optjit::ir {

enum class Quant : uint8_t {
  none,
  q8,   // bitsandbytes' signed dynamic map ("dynamic"): first moments, any sign
  q8u,  // its unsigned dynamic map ("udynamic"): second moments, never negative
  f8,   // fp8 e4m3fn codes scaled so the block's absmax is 448, as torchao's AdamWFp8
};

inline constexpr int64_t kQuantBlock = 256;         // elements per scale
inline constexpr int64_t kQuantMinElements = 4096;  // smaller tensors keep f32 (bitsandbytes)
inline constexpr int kQuantLutSize = 65536;

/// The lookup table in a form small enough for a GPU's constant memory: cells are taken 32 at
/// a time ("buckets"), and a bucket in which the code steps at most once, by one, is one entry:
/// base code | (cell of the step << 8), 32 meaning none. The buckets around 0, where the map is
/// denser than the cells, keep one entry per cell. For cell i, with b = i / 32:
///   j = b < near_lo ? b : b < near_hi ? near_lo + (i - 32 near_lo)
///                                     : near_lo + 32 (near_hi - near_lo) + (b - near_hi)
///   code = (entry[j] & 255) + ((i % 32) >= (entry[j] >> 8))
/// and code == lut[i] for every cell (checked when the table is built).
struct CompactLut {
  uint32_t near_lo = 0, near_hi = 0;  // the bucket range kept cell by cell
  std::vector<uint16_t> entries;
  uint8_t code(uint32_t i) const {
    const uint32_t b = i >> 5;
    const uint32_t j = b < near_lo   ? b
                       : b < near_hi ? near_lo + (i - 32 * near_lo)
                                     : near_lo + 32 * (near_hi - near_lo) + (b - near_hi);
    const uint16_t e = entries[j];
    return static_cast<uint8_t>((e & 255) + ((i & 31) >= (e >> 8u) ? 1 : 0));
  }
};

/// How a format turns a block into codes. Both dequantize as map[code] * scale.
///  - table (bitsandbytes): scale = absmax; code = lut[index(x * (1 / absmax))], 0 when
///    absmax is 0;
///  - fp8 (torchao): scale = max(absmax, 1e-12) / 448; code = the e4m3fn bits of x / scale,
///    rounded to nearest even (f8_code), so map is the e4m3fn values.
enum class QuantKind : uint8_t { table, fp8 };

struct QuantInfo {
  std::string_view name;
  std::string_view description;
  QuantKind kind;
  const std::array<float, 256>* map;      // code -> value before scaling
  const std::array<uint8_t, 65536>* lut;  // table: table index -> code
  const CompactLut* compact;              // table: the same, small (the GPU kernels' form)
  /// Which tensors are quantized (the others keep f32 state): bitsandbytes' min_8bit_size,
  /// and torchao's, which also wants whole blocks.
  int64_t min_elements;
  bool whole_blocks;
};
const QuantInfo& info(Quant q);
std::string_view to_string(Quant q);
std::optional<Quant> parse_quant(std::string_view s);

/// Bytes a quantized buffer takes per element (its code), and its scale buffer per element.
inline constexpr double kQuantCodeBytes = 1.0;
inline constexpr double kQuantScaleBytes = 4.0 / static_cast<double>(kQuantBlock);

/// Whether a tensor of `numel` elements stores its buffers of format q quantized (else in f32).
/// The formats of one program share this rule (the verifier checks it).
bool quantized_tensor(Quant q, int64_t numel);

/// torch's float -> float8_e4m3fn conversion (round to nearest even; NaN at and above 464,
/// where torch gives NaN too; the sign kept), as bits.
inline uint8_t f8_code(float x) {
  uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t sign = bits & 0x80000000u;
  bits ^= sign;
  uint8_t r;
  if (bits >= 0x43e80000u) {  // 464 and above, Inf and NaN
    r = 0x7f;
  } else if (bits < 0x3c800000u) {      // below 2^-6: a subnormal code, by a float add
    const uint32_t magic = 141u << 23;  // 2^14: adds round x to a multiple of 2^-9
    const float sum = std::bit_cast<float>(bits) + std::bit_cast<float>(magic);
    r = static_cast<uint8_t>(std::bit_cast<uint32_t>(sum) - magic);
  } else {
    const uint32_t odd = (bits >> 20) & 1u;
    bits += (static_cast<uint32_t>(7 - 127) << 23) + 0x7ffffu + odd;
    r = static_cast<uint8_t>(bits >> 20);
  }
  return static_cast<uint8_t>(r | (sign >> 24));
}

/// A format's scale for a block whose largest |x| is `absmax` (NaN stays NaN).
inline float quant_scale(Quant q, float absmax);
inline int64_t quant_blocks(int64_t numel) { return (numel + kQuantBlock - 1) / kQuantBlock; }

/// The lookup-table index of x already divided by its block's absmax (see the file comment).
/// NaN (a block whose absmax is NaN or Inf) takes index 0, as -1 does.
inline uint16_t quant_lut_index(float y) {
  y = y >= -1.0f ? (y > 1.0f ? 1.0f : y) : -1.0f;
  const float t = (y + 1.0f) * 0.5f;
  const float u = t * 65535.0f;
  return static_cast<uint16_t>(u + 0.5f);
}

/// The e4m3fn code nearest to a double (the reference's f64 arithmetic), ties to even.
uint8_t f8_code_exact(double y);

inline float quant_scale(Quant q, float absmax) {
  if (info(q).kind == QuantKind::fp8) return (absmax <= 1e-12f ? 1e-12f : absmax) / 448.0f;
  return absmax;
}

/// Quantizes n (at most kQuantBlock) values into codes and returns the block's scale (its
/// absmax for table formats). A NaN makes the absmax NaN (bitsandbytes passes over it), so the
/// whole block reads back as NaN and a NaN is never hidden in a code. `T` is float for the float32
/// backends' arithmetic and double for the reference, which computes y in double from the absmax as
/// stored (f32).
template <typename T>
float quantize_block(Quant q, const T* x, int64_t n, uint8_t* codes) {  // returns the scale
  T m = 0;
  bool nan = false;
  for (int64_t j = 0; j < n; ++j) {
    const T a = x[j] < 0 ? -x[j] : x[j];
    nan |= a != a;
    m = a > m ? a : m;
  }
  const float absmax = nan ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(m);
  if (info(q).kind == QuantKind::fp8) {
    const float scale = quant_scale(q, absmax);
    for (int64_t j = 0; j < n; ++j) {
      if constexpr (sizeof(T) == 4) {
        codes[j] = f8_code(x[j] / scale);
      } else {
        codes[j] = f8_code_exact(x[j] / static_cast<double>(scale));
      }
    }
    return scale;
  }
  if (absmax == 0.0f) {
    for (int64_t j = 0; j < n; ++j) codes[j] = 0;
    return absmax;
  }
  const auto& lut = *info(q).lut;
  if constexpr (sizeof(T) == 4) {
    const float inv = 1.0f / absmax;
    for (int64_t j = 0; j < n; ++j) codes[j] = lut[quant_lut_index(x[j] * inv)];
  } else {
    const double inv = 1.0 / static_cast<double>(absmax);
    for (int64_t j = 0; j < n; ++j) {
      double y = x[j] * inv;
      y = y >= -1.0 ? (y > 1.0 ? 1.0 : y) : -1.0;
      codes[j] = lut[static_cast<uint16_t>((y + 1.0) * 0.5 * 65535.0 + 0.5)];
    }
  }
  return absmax;
}

/// A whole tensor of n values: codes[i] and one scale per block, as the backends store it.
inline void quantize(Quant q, const float* x, int64_t n, uint8_t* codes, float* scales) {
  for (int64_t e0 = 0; e0 < n; e0 += kQuantBlock)
    scales[e0 / kQuantBlock] =
        quantize_block(q, x + e0, n - e0 < kQuantBlock ? n - e0 : kQuantBlock, codes + e0);
}

inline float dequantize(Quant q, uint8_t code, float absmax) {
  return (*info(q).map)[code] * absmax;
}

}  // namespace optjit::ir
