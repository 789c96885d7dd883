// Block-quantized storage: a buffer stored as one code per element (8 bits, or 4 bits two to a
// byte) and one f32 scale per block of elements (256, or 128 for torchao's 4-bit), as
// bitsandbytes and torchao store low-bit optimizer state. Every format is one row of a table
// (its map, its code width, its block, and what its quantizer needs); the IR, the planner, the
// reference and the backends ask the table, not the format.
//
// The 8-bit quantizer is bitsandbytes' (csrc/cpu_ops.cpp, quantize_cpu_impl), so optjit's codes
// are its codes bit for bit:
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
//
// The 4-bit quantizer is torchao's (optim/quant_utils.py, quantize_4bit_with_qmap; its AdamW4bit
// with block 128): scale = max(absmax, 1e-12); y = x / scale; c = the last code whose value is
// <= y (0 below the first); c + 1 when y - map[c] >= (map[c + 1] - map[c]) * 0.5, all in f32.
// That is monotone in y, so the backends compute it as the number of thresholds t[c] <= y,
// where t[c] is the least f32 that rounds to c + 1 or above (found once, from the rule itself).
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace optjit::ir {

enum class Quant : uint8_t {
  none,
  q8,   // bitsandbytes' signed dynamic map ("dynamic"): first moments, any sign
  q8u,  // its unsigned dynamic map ("udynamic"): second moments, never negative
  f8,   // fp8 e4m3fn codes scaled so the block's absmax is 448, as torchao's AdamWFp8
  q4,   // 4-bit, torchao's signed dynamic map (create_dynamic_map(True, 3, 4)), block 128
  q4u,  // 4-bit, torchao's unsigned linear map (1/16 .. 1, no zero), block 128
  // The same two in blocks of 256: torchao's AdamW4bit(block_size=256), as transformers'
  // Trainer makes "adamw_torch_4bit".
  q4_b256,
  q4u_b256,
};

/// The largest block: every format's block divides it, and chunks of quantized tensors start
/// on multiples of it, so every chunk holds whole blocks of any format.
inline constexpr int64_t kQuantBlock = 256;
inline constexpr int64_t kQuantMinElements = 4096;  // smaller tensors keep f32 (bitsandbytes)
inline constexpr int kQuantLutSize = 65536;

/// The lookup table in a form small enough for a GPU's constant memory: cells are taken 32 at
/// a time ("buckets"), and a bucket in which the code steps at most once, by one, is one entry;
/// the buckets around 0, where the map is denser than the cells, keep one entry per cell. Each
/// entry is an offset that the cell's index turns into its code with one add and one shift:
///   b = i / 32;  j = b + clamp(i - b, 31 near_lo, 31 near_hi) - 31 near_lo;
///   code = (entry[j] + i) / 32    (u32 arithmetic, wrapping)
/// so that j = b below the dense buckets, i - 31 near_lo (one entry per cell) inside them, and
/// b + 31 (near_hi - near_lo) above. A bucket's entry is 32 base + (32 - s) - 32 b, where base
/// is its first cell's code and s its cell where the code steps (32: none); a dense cell's is
/// 32 code - i. code(i) == lut[i] for every cell (checked when the table is built).
struct CompactLut {
  uint32_t near_lo = 0, near_hi = 0;  // the bucket range kept cell by cell
  std::vector<uint32_t> entries;
  uint32_t lo() const { return 31 * near_lo; }  // the clamp's bounds
  uint32_t hi() const { return 31 * near_hi; }
  uint32_t index(uint32_t i) const {
    const uint32_t b = i >> 5;
    return b + std::min(std::max(i - b, lo()), hi()) - lo();
  }
  uint8_t code(uint32_t i) const { return static_cast<uint8_t>((entries[index(i)] + i) >> 5); }
};

/// How a format turns a block into codes. All dequantize as map[code] * scale.
///  - table (bitsandbytes): scale = absmax; code = lut[index(x * (1 / absmax))], 0 when
///    absmax is 0;
///  - fp8 (torchao): scale = max(absmax, 1e-12) / 448; code = the e4m3fn bits of x / scale,
///    rounded to nearest even (f8_code), so map is the e4m3fn values;
///  - nearest (torchao's 4-bit): scale = max(absmax, 1e-12); code = the number of thresholds
///    <= x / scale (see the file comment).
enum class QuantKind : uint8_t { table, fp8, nearest };

struct QuantInfo {
  std::string_view name;
  std::string_view description;
  QuantKind kind;
  std::span<const float> map;                       // code -> value before scaling (2^bits)
  const std::array<uint8_t, 65536>* lut = nullptr;  // table: table index -> code
  const CompactLut* compact = nullptr;  // table: the same, small (the GPU kernels' form)
  std::span<const float> thresholds;    // nearest: 2^bits - 1 ascending f32 thresholds
  int bits = 8;                         // 8, or 4: element 2k in byte k's high nibble
  int64_t block = kQuantBlock;          // elements per scale (divides kQuantBlock)
  /// Which tensors are quantized (the others keep f32 state): bitsandbytes' min_8bit_size,
  /// and torchao's, which also wants whole blocks.
  int64_t min_elements = 0;
  bool whole_blocks = false;
};
const QuantInfo& info(Quant q);
std::string_view to_string(Quant q);
std::optional<Quant> parse_quant(std::string_view s);
/// Every quantized format (not none), in the table's order.
std::vector<Quant> quant_formats();
/// Every format's name, for messages: "q8, q8u, f8, q4, q4u, q4_b256, q4u_b256".
std::string quant_names();

/// Whether map[c] == (c + 1) * map[0] exactly for every code (the product in f32): the kernels
/// compute such a map's values (torchao's unsigned 4-bit map, (c + 1) / 16) instead of reading
/// them.
bool linear_map(std::span<const float> map);
/// Whether a nearest format's map is linear with a power-of-two step m and its thresholds are
/// the midpoints (k + 1.5) * m. Then its code (nearest_code, the count of thresholds <= y) is
/// linear_code(y, m, 2^bits - 1), which the kernels compute instead of searching the thresholds.
bool linear_thresholds(const QuantInfo& q);
/// The count of thresholds (k + 1.5) * m <= y, k < top: z = y / m - 0.5 is exact (m a power of
/// two) wherever the clamps do not decide, and the count is trunc(z) clamped to [0, top]; NaN
/// gives 0, as every compare with it is false.
inline uint8_t linear_code(float y, float m, int top) {
  const float z = y * (1.0f / m) - 0.5f;
  return z >= static_cast<float>(top) ? static_cast<uint8_t>(top)
         : z >= 0.0f                  ? static_cast<uint8_t>(z)
                                      : 0;
}

/// Bytes a quantized buffer of format q takes per element (its code), and its scales.
inline double code_bytes_per_element(Quant q);
inline double scale_bytes_per_element(Quant q);

/// Whether q's map holds no negative value (q8u, q4u, q4u_b256): a state stored in it must never
/// be negative (ir/sign.h proves it; a checkpoint's negative value is refused).
bool unsigned_map(Quant q);
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
/// A quantized tensor's scales (one per block) and the bytes of its codes.
inline int64_t scale_count(Quant q, int64_t numel);
inline int64_t code_bytes(Quant q, int64_t numel);
/// Element e's code in a tensor's codes, and n codes stored from element e0 (even for 4-bit).
inline uint8_t code_at(Quant q, const uint8_t* codes, int64_t e);
inline void put_codes(Quant q, uint8_t* codes, int64_t e0, const uint8_t* c, int64_t n);

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
/// torchao's 4-bit rounding of y (already divided by its scale) in f64: the reference's.
uint8_t nearest_code_exact(Quant q, double y);
/// The same in f32, as every backend computes it: the number of thresholds <= y.
inline uint8_t nearest_code(Quant q, float y) {
  int c = 0;
  for (float t : info(q).thresholds) c += y >= t ? 1 : 0;
  return static_cast<uint8_t>(c);
}

inline float quant_scale(Quant q, float absmax) {
  const QuantKind k = info(q).kind;
  if (k == QuantKind::table) return absmax;
  const float s = absmax <= 1e-12f ? 1e-12f : absmax;  // torchao's clip(1e-12); NaN stays
  return k == QuantKind::fp8 ? s / 448.0f : s;
}

inline double code_bytes_per_element(Quant q) { return info(q).bits / 8.0; }
inline double scale_bytes_per_element(Quant q) { return 4.0 / static_cast<double>(info(q).block); }
inline int64_t scale_count(Quant q, int64_t numel) {
  const int64_t b = info(q).block;
  return (numel + b - 1) / b;
}
inline int64_t code_bytes(Quant q, int64_t numel) {
  return info(q).bits == 4 ? (numel + 1) / 2 : numel;
}
inline uint8_t code_at(Quant q, const uint8_t* codes, int64_t e) {
  if (info(q).bits == 8) return codes[e];
  return static_cast<uint8_t>((codes[e >> 1] >> ((e & 1) != 0 ? 0 : 4)) & 15);
}
inline void put_codes(Quant q, uint8_t* codes, int64_t e0, const uint8_t* c, int64_t n) {
  if (info(q).bits == 8) {
    for (int64_t j = 0; j < n; ++j) codes[e0 + j] = c[j];
    return;
  }
  for (int64_t j = 0; j < n; j += 2)
    codes[(e0 + j) >> 1] = static_cast<uint8_t>((c[j] << 4) | (j + 1 < n ? c[j + 1] : 0));
}

/// Quantizes n (at most the format's block) values into codes, one per byte, and returns the
/// block's scale (its absmax for table formats). A NaN makes the absmax NaN (bitsandbytes passes
/// over it), so the whole block reads back as NaN and a NaN is never hidden in a code. `T` is float
/// for the float32 backends' arithmetic and double for the reference, which computes y in double
/// from the absmax as stored (f32).
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
  if (const QuantKind kind = info(q).kind; kind != QuantKind::table) {  // codes of x / scale
    const float scale = quant_scale(q, absmax);
    const bool fp8 = kind == QuantKind::fp8;
    for (int64_t j = 0; j < n; ++j) {
      if constexpr (sizeof(T) == 4) {
        const float y = x[j] / scale;
        codes[j] = fp8 ? f8_code(y) : nearest_code(q, y);
      } else {
        const double y = x[j] / static_cast<double>(scale);
        codes[j] = fp8 ? f8_code_exact(y) : nearest_code_exact(q, y);
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

/// n values from element e0 (a multiple of the format's block) of a tensor: their codes
/// (code_bytes) and one scale per block, as the backends store them. `T` as quantize_block's.
template <typename T>
void quantize(Quant q, const T* x, int64_t n, uint8_t* codes, float* scales, int64_t e0 = 0) {
  const int64_t b = info(q).block;
  uint8_t c[kQuantBlock];
  for (int64_t k = 0; k < n; k += b) {
    const int64_t m = n - k < b ? n - k : b;
    scales[(e0 + k) / b] = quantize_block(q, x + k, m, c);
    put_codes(q, codes, e0 + k, c, m);
  }
}

inline float dequantize(Quant q, uint8_t code, float absmax) { return info(q).map[code] * absmax; }
/// The values of a tensor's n elements from their codes (code_bytes) and scales (one per
/// block): each code's map value times its block's scale.
inline void dequantize(Quant q, const uint8_t* codes, const float* scales, int64_t n, float* out) {
  const int64_t b = info(q).block;
  for (int64_t e = 0; e < n; ++e) out[e] = dequantize(q, code_at(q, codes, e), scales[e / b]);
}

}  // namespace optjit::ir
