// Deterministic stochastic rounding to bf16, defined once for every backend.
//
// sround(x, key, element, stream): x rounded to f32 (nearest even), then its bits plus 16
// random bits, truncated to the top 16 (a bf16 value, returned as f32), as torchao's
// bf16_stochastic_round does with torch.randint. Rounding away from zero happens with a
// probability equal to the distance from the value below, so the result is unbiased. NaN and
// Inf are returned as they are.
//
// The random bits are a pure function of (key, element, stream): key = seed * 2^32 + step (the
// host computes it), element = the element's index among all the optimizer's parameter
// elements in parameter order (its tensor's `first`, an IR leaf the host supplies, plus its
// index in the tensor), stream = the buffer being stored. A sharded step's pieces take their
// `first` from the global tensor table, so they draw the unsharded step's bits. Results
// depend on nothing else: not threads, chunks, launch shapes, the backend, how parameters are
// split by dtype or across processes, and a resumed run draws what an uninterrupted one would.
// Mixing: two rounds of SplitMix64's finalizer (Steele, Lea, Flood 2014), the first per
// (key, stream) and so hoisted out of the element loop, the second per element.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace optjit::ir {

inline constexpr uint64_t kSrMul1 = 0xbf58476d1ce4e5b9ull, kSrMul2 = 0x94d049bb133111ebull;

constexpr uint64_t sr_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * kSrMul1;
  z = (z ^ (z >> 27)) * kSrMul2;
  return z ^ (z >> 31);
}

/// The per-(key, stream) half, constant over a tensor's elements.
constexpr uint64_t sr_stream(uint64_t key, uint32_t stream) {
  return sr_mix(key ^ (static_cast<uint64_t>(stream) << 56));
}

/// 16 random bits for one element (its index among all the parameter elements).
constexpr uint32_t sr_bits(uint64_t stream_state, uint64_t element) {
  return static_cast<uint32_t>(sr_mix(stream_state + element)) & 0xffffu;
}

/// The key or a tensor's first element as the IR carries it (an f64, a whole number below
/// 2^53), truncated; anything else (negative, 2^53 and above, Inf, NaN) is 0, on every
/// backend (a C or LLVM conversion past 2^64 is undefined).
inline uint64_t sr_key(double key) {
  return key >= 0 && key < 0x1p53 ? static_cast<uint64_t>(key) : 0;
}

inline float sround_bf16(float f, uint32_t random16) {
  if (!std::isfinite(f)) return f;
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits = (bits + random16) & 0xffff0000u;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

/// sround(x, key, element, stream) as above, from the values the IR carries: the key, the
/// tensor's first element (f64) and the element's index in its tensor.
inline float sround_element(double x, double key, double first, uint32_t stream, int64_t index) {
  return sround_bf16(static_cast<float>(x), sr_bits(sr_stream(sr_key(key), stream),
                                                    sr_key(first) + static_cast<uint64_t>(index)));
}

}  // namespace optjit::ir
