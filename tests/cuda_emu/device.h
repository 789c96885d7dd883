// The CUDA emulator's device side (tests/cuda_emu/README.md): what a kernel source that optjit
// emits for NVRTC needs in order to compile as host C++ and run on the CPU, one CUDA thread per
// fiber. The emulator's NVRTC (nvrtc.cpp) includes this ahead of the source and appends
// OPTJIT_EMU_KERNEL(name) for each kernel; its driver (driver.cpp) loads the result and calls
// optjit_emu_run_<name>. What runs the threads (device_runtime.cpp) is built once, into
// libcuda_emu_device.so, which each module links: here are only its declarations, so a module
// compiles its kernels and little else.
//
// Execution model, as the CUDA programming guide states it for what optjit's kernels use:
//  - blocks run one after another; a block's threads are fibers on the calling thread, switched
//    only where CUDA threads synchronise (__syncthreads, __syncwarp, __shfl_xor_sync) or exit, so
//    shared memory (`__shared__`, here `static`) belongs to the one block running;
//  - __syncthreads waits for every thread of the block that has not exited (exited threads
//    count as arrived, as on Volta and later);
//  - __shfl_xor_sync waits for every lane of its warp that has not exited, and reads the lane
//    `lane ^ mask`; a partial mask, or reading a lane that did not take part in that exchange
//    (it exited before, or does not exist), is an error (undefined on a GPU);
//  - a block in which every live thread waits and none can go on is a deadlock: the launch
//    fails with a message naming where its threads wait, instead of hanging.
// Arithmetic is the host's IEEE f32/f64 with no contraction (NVRTC's --fmad=false,
// --prec-div=true, --prec-sqrt=true); libm's transcendentals stand in for CUDA's.
#pragma once

#include <math.h>
#if defined(__F16C__)
#include <immintrin.h>
#endif

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <tuple>
#include <type_traits>
#include <utility>

namespace optjit_emu {

struct Dim {
  unsigned int x = 1, y = 1, z = 1;
};

// The running thread's and block's coordinates.
const Dim& thread_idx();
const Dim& block_idx();
const Dim& block_dim();
const Dim& grid_dim();
void syncthreads();
void syncwarp(unsigned int mask);
// The warp exchange of up to 8 bytes: this lane's bits out, lane ^ lane_mask's bits in.
unsigned long long shfl_xor_bits(unsigned int mask, unsigned long long bits, int lane_mask);
void cp_async(void* to, const void* from, size_t bytes);
void cp_commit();
void cp_wait(int newest);
// A launch of a kernel over a grid: each block in turn, each thread a fiber calling body(args).
// Returns null, or what went wrong.
const char* run_grid(void (*body)(void*), void* args, Dim grid, Dim threads);

template <class T>
T shfl_xor(unsigned int mask, T value, int lane_mask) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>);
  unsigned long long bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  bits = shfl_xor_bits(mask, bits, lane_mask);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

// A kernel's arguments, copied from cuLaunchKernel's array of pointers when it is called (as the
// driver does), in memory from malloc that the driver frees (they are pointers and numbers, so
// nothing needs destroying, and a captured graph may outlive the module).
template <class... A, size_t... I>
void* pack_args(void (*)(A...), void** params, std::index_sequence<I...>) {
  using Args = std::tuple<std::decay_t<A>...>;
  static_assert(std::is_trivially_destructible_v<Args>);
  void* memory = std::malloc(sizeof(Args));
  if (!memory) return nullptr;
  new (memory) Args(*static_cast<std::decay_t<A>*>(params[I])...);
  return memory;
}
template <class... A>
void* pack(void (*kernel)(A...), void** params) {
  return pack_args(kernel, params, std::index_sequence_for<A...>{});
}
template <class... A>
void apply_packed(void (*kernel)(A...), void* packed) {
  std::apply(kernel, *static_cast<std::tuple<std::decay_t<A>...>*>(packed));
}

}  // namespace optjit_emu

// CUDA C's keywords and built-ins, as host C++.
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __shared__ static
#define __constant__
#define __align__(n) alignas(n)
#define threadIdx (::optjit_emu::thread_idx())
#define blockIdx (::optjit_emu::block_idx())
#define blockDim (::optjit_emu::block_dim())
#define gridDim (::optjit_emu::grid_dim())

inline void __syncthreads() { optjit_emu::syncthreads(); }
inline void __threadfence() {}
inline void __syncwarp(unsigned int mask = 0xffffffffu) { optjit_emu::syncwarp(mask); }
// The asynchronous copies optjit's preamble writes as inline asm (GpuLaunch::stage); the
// emulator's NVRTC puts these calls in their place.
inline void optjit_emu_cp_async(void* to, const void* from, size_t bytes) {
  optjit_emu::cp_async(to, from, bytes);
}
inline void optjit_emu_cp_commit() { optjit_emu::cp_commit(); }
inline void optjit_emu_cp_wait(int newest) { optjit_emu::cp_wait(newest); }
template <class T>
T __shfl_xor_sync(unsigned int mask, T value, int lane_mask) {
  return optjit_emu::shfl_xor(mask, value, lane_mask);
}
inline unsigned int __float_as_uint(float x) { return std::bit_cast<unsigned int>(x); }
inline float __uint_as_float(unsigned int x) { return std::bit_cast<float>(x); }
// PRMT: byte n of the result is byte (s >> 4n) & 7 of the eight bytes y:x (x lowest).
inline unsigned int __byte_perm(unsigned int x, unsigned int y, unsigned int s) {
  const unsigned long long xy = (static_cast<unsigned long long>(y) << 32) | x;
  unsigned int r = 0;
  for (int n = 0; n < 4; ++n)
    r |= static_cast<unsigned int>((xy >> (8 * ((s >> (4 * n)) & 7u))) & 255u) << (8 * n);
  return r;
}
// cvt.rzi.u32.f32: toward zero, saturating (negative values and -inf to 0, +inf and beyond
// to 0xffffffff), NaN to 0; and CUDA's min for unsigned operands.
inline unsigned int __float2uint_rz(float x) {
  if (!(x > 0.0f)) return 0u;  // NaN too
  return x >= 4294967296.0f ? 0xffffffffu : static_cast<unsigned int>(x);
}
inline unsigned int min(unsigned int a, unsigned int b) { return a < b ? a : b; }
inline long long __double_as_longlong(double x) { return std::bit_cast<long long>(x); }
inline double __longlong_as_double(long long x) { return std::bit_cast<double>(x); }
// The PTX conversions optjit's preamble writes as inline asm (cvt.f32.f16, cvt.rn.f16.f32); the
// emulator's NVRTC puts these calls in their place.
// clang 14 has no _Float16 on x86; F16C's conversions are the same (round to nearest even).
#if defined(__F16C__)
inline float optjit_emu_f16_to_f32(unsigned short h) { return _cvtsh_ss(h); }
inline unsigned short optjit_emu_f32_to_f16(float f) {
  return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}
#else
inline float optjit_emu_f16_to_f32(unsigned short h) {
  return static_cast<float>(std::bit_cast<_Float16>(h));
}
inline unsigned short optjit_emu_f32_to_f16(float f) {
  return std::bit_cast<unsigned short>(static_cast<_Float16>(f));
}
#endif
// The arithmetic optjit's branch-free division and square root write (GpuLaunch::interleave),
// and the approximations they start from (rcp.approx, rsqrt.approx), here correctly rounded:
// with those, both sequences round correctly (ptxas's own on a GPU, with MUFU's approximations).
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float optjit_emu_rcp(float b) { return static_cast<float>(1.0 / static_cast<double>(b)); }
inline float optjit_emu_rsqrt(float x) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(x)));
}
// prefetch.global.L2, a hint with no result: there is no cache to fill, so it reads the byte,
// and a kernel that asks for a line outside every allocation stops as one that touches it.
inline void optjit_emu_prefetch(const void* a) { (void)*static_cast<const volatile char*>(a); }

// Appended by the emulator's NVRTC after the source, once per kernel.
#define OPTJIT_EMU_KERNEL(name)                                                                 \
  extern "C" void* optjit_emu_pack_##name(void** params) {                                      \
    return ::optjit_emu::pack(name, params);                                                    \
  }                                                                                             \
  extern "C" const char* optjit_emu_run_##name(void* packed, unsigned gx, unsigned gy,          \
                                               unsigned gz, unsigned bx, unsigned by,           \
                                               unsigned bz) {                                   \
    return ::optjit_emu::run_grid([](void* p) { ::optjit_emu::apply_packed(name, p); }, packed, \
                                  {gx, gy, gz}, {bx, by, bz});                                  \
  }
