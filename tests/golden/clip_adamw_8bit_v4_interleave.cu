// optjit: 2 passes, 20.0625 bytes per parameter, block 256, items 1, vector 4
#define OPTJIT_F32_BITS(x) __float_as_uint(x)
#define OPTJIT_F64_BITS(x) ((unsigned long long)__double_as_longlong(x))
#define OPTJIT_BITS_F32(x) __uint_as_float(x)
#define OPTJIT_BITS_F64(x) __longlong_as_double((long long)(x))
__device__ __forceinline__ float optjit_f16_to_f32(unsigned short h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ unsigned short optjit_f32_to_f16(float f) { unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
#define OPTJIT_F16_TO_F32(x) optjit_f16_to_f32(x)
#define OPTJIT_F32_TO_F16(v) optjit_f32_to_f16(v)
struct OptjitRow { void* const* buffers; const double* uniforms; };
struct __align__(16) optjit_f32x4 { float v[4]; };
__device__ __forceinline__ bool optjit_fdiv_range(float x) {
  return (__float_as_uint(x) & 0x7fffffffu) - 0x21800000u <= 0x3c7fffffu;
}
__device__ __forceinline__ float optjit_fdiv(float a, float b, bool& ok) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(b));
  y = __fmaf_rn(y, __fmaf_rn(-b, y, 1.0f), y);
  const float q = __fmul_rn(a, y);
  ok = ok & optjit_fdiv_range(b) & (optjit_fdiv_range(a) | (a == 0.0f));
  return a == 0.0f ? q : __fmaf_rn(__fmaf_rn(-b, q, a), y, q);
}
__device__ __forceinline__ float optjit_fdiv_by(float a, float b, bool& ok) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(b));
  y = __fmaf_rn(y, __fmaf_rn(-b, y, 1.0f), y);
  const float q = __fmul_rn(a, y);
  ok = ok & optjit_fdiv_range(b);
  return __fmaf_rn(__fmaf_rn(-b, q, a), y, q);
}
__device__ __forceinline__ float optjit_fsqrt(float x, bool& ok) {
  float r;
  asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  const float s = __fmul_rn(x, r);
  ok = ok & (__float_as_uint(x) - 0x0d000000u <= 0x6f7fffffu);
  return __fmaf_rn(__fmaf_rn(-s, s, x), __fmul_rn(r, 0.5f), s);
}
#define OPTJIT_BF16_TO_F32(x) OPTJIT_BITS_F32((unsigned int)(x) << 16)
#define OPTJIT_BF16_BITS(v) ((v) != (v) ? (unsigned int)((OPTJIT_F32_BITS(v) >> 16) | 0x40u) : (unsigned int)((OPTJIT_F32_BITS(v) + 0x7fffu + ((OPTJIT_F32_BITS(v) >> 16) & 1u)) >> 16))
__device__ const unsigned int optjit_map_q8[256] = {
  0xbf7e3333u, 0xbf7a999au, 0xbf770000u, 0xbf736666u, 0xbf6fcccdu, 0xbf6c3333u, 0xbf68999au, 0xbf650000u,
  0xbf616666u, 0xbf5dcccdu, 0xbf5a3333u, 0xbf56999au, 0xbf530000u, 0xbf4f6666u, 0xbf4bcccdu, 0xbf483333u,
  0xbf44999au, 0xbf410000u, 0xbf3d6666u, 0xbf39cccdu, 0xbf363334u, 0xbf32999au, 0xbf2f0000u, 0xbf2b6666u,
  0xbf27cccdu, 0xbf243334u, 0xbf20999au, 0xbf1d0000u, 0xbf196666u, 0xbf15cccdu, 0xbf123334u, 0xbf0e999au,
  0xbf0b0000u, 0xbf076666u, 0xbf03ccccu, 0xbf003333u, 0xbef93332u, 0xbef20000u, 0xbeeaccccu, 0xbee3999au,
  0xbedc6666u, 0xbed53333u, 0xbece0000u, 0xbec6ccccu, 0xbebf999au, 0xbeb86666u, 0xbeb13333u, 0xbeaa0000u,
  0xbea2ccccu, 0xbe9b999au, 0xbe946666u, 0xbe8d3334u, 0xbe860000u, 0xbe7d9999u, 0xbe6f3333u, 0xbe60cccdu,
  0xbe526666u, 0xbe440000u, 0xbe35999au, 0xbe273333u, 0xbe18cccdu, 0xbe0a6666u, 0xbdf80000u, 0xbddb3334u,
  0xbdc9eb85u, 0xbdc428f7u, 0xbdbe6667u, 0xbdb8a3d7u, 0xbdb2e148u, 0xbdad1eb8u, 0xbda75c2au, 0xbda1999au,
  0xbd9bd70au, 0xbd96147bu, 0xbd9051ebu, 0xbd8a8f5du, 0xbd84cccdu, 0xbd7e147bu, 0xbd728f5du, 0xbd670a3du,
  0xbd5b851fu, 0xbd500000u, 0xbd447ae1u, 0xbd38f5c3u, 0xbd2d70a3u, 0xbd21eb85u, 0xbd166667u, 0xbd0ae148u,
  0xbcfeb852u, 0xbce7ae15u, 0xbcd0a3d7u, 0xbcb9999au, 0xbca28f5du, 0xbc8b851fu, 0xbc68f5c3u, 0xbc3ae148u,
  0xbc1f3b64u, 0xbc160418u, 0xbc0ccccdu, 0xbc039581u, 0xbbf4bc6au, 0xbbe24dd3u, 0xbbcfdf3bu, 0xbbbd70a4u,
  0xbbab020du, 0xbb989374u, 0xbb8624ddu, 0xbb676c8au, 0xbb428f5cu, 0xbb1db22du, 0xbaf1a9fcu, 0xbaa7ef9du,
  0xba7765ffu, 0xba59e83eu, 0xba3c6a80u, 0xba1eecc1u, 0xba016f01u, 0xb9c7e283u, 0xb98ce705u, 0xb923d70bu,
  0xb8ba1f4bu, 0xb88aefb3u, 0xb8378034u, 0xb7b24206u, 0xb70205ffu, 0xb65a1a94u, 0xb513a3b7u, 0x00000000u,
  0x3513a3b7u, 0x365a1a94u, 0x370205ffu, 0x37b24206u, 0x38378034u, 0x388aefb3u, 0x38ba1f4bu, 0x3923d70bu,
  0x398ce705u, 0x39c7e283u, 0x3a016f01u, 0x3a1eecc1u, 0x3a3c6a80u, 0x3a59e83eu, 0x3a7765ffu, 0x3aa7ef9du,
  0x3af1a9fcu, 0x3b1db22du, 0x3b428f5cu, 0x3b676c8au, 0x3b8624ddu, 0x3b989374u, 0x3bab020du, 0x3bbd70a4u,
  0x3bcfdf3bu, 0x3be24dd3u, 0x3bf4bc6au, 0x3c039581u, 0x3c0ccccdu, 0x3c160418u, 0x3c1f3b64u, 0x3c3ae148u,
  0x3c68f5c3u, 0x3c8b851fu, 0x3ca28f5du, 0x3cb9999au, 0x3cd0a3d7u, 0x3ce7ae15u, 0x3cfeb852u, 0x3d0ae148u,
  0x3d166667u, 0x3d21eb85u, 0x3d2d70a3u, 0x3d38f5c3u, 0x3d447ae1u, 0x3d500000u, 0x3d5b851fu, 0x3d670a3du,
  0x3d728f5du, 0x3d7e147bu, 0x3d84cccdu, 0x3d8a8f5du, 0x3d9051ebu, 0x3d96147bu, 0x3d9bd70au, 0x3da1999au,
  0x3da75c2au, 0x3dad1eb8u, 0x3db2e148u, 0x3db8a3d7u, 0x3dbe6667u, 0x3dc428f7u, 0x3dc9eb85u, 0x3ddb3334u,
  0x3df80000u, 0x3e0a6666u, 0x3e18cccdu, 0x3e273333u, 0x3e35999au, 0x3e440000u, 0x3e526666u, 0x3e60cccdu,
  0x3e6f3333u, 0x3e7d9999u, 0x3e860000u, 0x3e8d3334u, 0x3e946666u, 0x3e9b999au, 0x3ea2ccccu, 0x3eaa0000u,
  0x3eb13333u, 0x3eb86666u, 0x3ebf999au, 0x3ec6ccccu, 0x3ece0000u, 0x3ed53333u, 0x3edc6666u, 0x3ee3999au,
  0x3eeaccccu, 0x3ef20000u, 0x3ef93332u, 0x3f003333u, 0x3f03ccccu, 0x3f076666u, 0x3f0b0000u, 0x3f0e999au,
  0x3f123334u, 0x3f15cccdu, 0x3f196666u, 0x3f1d0000u, 0x3f20999au, 0x3f243334u, 0x3f27cccdu, 0x3f2b6666u,
  0x3f2f0000u, 0x3f32999au, 0x3f363334u, 0x3f39cccdu, 0x3f3d6666u, 0x3f410000u, 0x3f44999au, 0x3f483333u,
  0x3f4bcccdu, 0x3f4f6666u, 0x3f530000u, 0x3f56999au, 0x3f5a3333u, 0x3f5dcccdu, 0x3f616666u, 0x3f650000u,
  0x3f68999au, 0x3f6c3333u, 0x3f6fcccdu, 0x3f736666u, 0x3f770000u, 0x3f7a999au, 0x3f7e3333u, 0x3f800000u,
};
__device__ const unsigned int optjit_lut_q8[2668] = {
  0x00000000u, 0xffffffe0u, 0xffffffc0u, 0xffffffa0u, 0xffffff80u, 0xffffff60u, 0xffffff40u, 0xffffff20u,
  0xffffff00u, 0xfffffee0u, 0xfffffec0u, 0xfffffea0u, 0xfffffe80u, 0xfffffe60u, 0xfffffe53u, 0xfffffe40u,
  0xfffffe20u, 0xfffffe00u, 0xfffffde0u, 0xfffffdc0u, 0xfffffda0u, 0xfffffd80u, 0xfffffd60u, 0xfffffd40u,
  0xfffffd20u, 0xfffffd00u, 0xfffffce0u, 0xfffffcc0u, 0xfffffca6u, 0xfffffca0u, 0xfffffc80u, 0xfffffc60u,
  0xfffffc40u, 0xfffffc20u, 0xfffffc00u, 0xfffffbe0u, 0xfffffbc0u, 0xfffffba0u, 0xfffffb80u, 0xfffffb60u,
  0xfffffb40u, 0xfffffb20u, 0xfffffb00u, 0xfffffaf9u, 0xfffffae0u, 0xfffffac0u, 0xfffffaa0u, 0xfffffa80u,
  0xfffffa60u, 0xfffffa40u, 0xfffffa20u, 0xfffffa00u, 0xfffff9e0u, 0xfffff9c0u, 0xfffff9a0u, 0xfffff980u,
  0xfffff960u, 0xfffff94cu, 0xfffff940u, 0xfffff920u, 0xfffff900u, 0xfffff8e0u, 0xfffff8c0u, 0xfffff8a0u,
  0xfffff880u, 0xfffff860u, 0xfffff840u, 0xfffff820u, 0xfffff800u, 0xfffff7e0u, 0xfffff7c0u, 0xfffff7a0u,
  0xfffff7a0u, 0xfffff780u, 0xfffff760u, 0xfffff740u, 0xfffff720u, 0xfffff700u, 0xfffff6e0u, 0xfffff6c0u,
  0xfffff6a0u, 0xfffff680u, 0xfffff660u, 0xfffff640u, 0xfffff620u, 0xfffff600u, 0xfffff5f3u, 0xfffff5e0u,
  0xfffff5c0u, 0xfffff5a0u, 0xfffff580u, 0xfffff560u, 0xfffff540u, 0xfffff520u, 0xfffff500u, 0xfffff4e0u,
  0xfffff4c0u, 0xfffff4a0u, 0xfffff480u, 0xfffff460u, 0xfffff446u, 0xfffff440u, 0xfffff420u, 0xfffff400u,
  0xfffff3e0u, 0xfffff3c0u, 0xfffff3a0u, 0xfffff380u, 0xfffff360u, 0xfffff340u, 0xfffff320u, 0xfffff300u,
  0xfffff2e0u, 0xfffff2c0u, 0xfffff2a0u, 0xfffff299u, 0xfffff280u, 0xfffff260u, 0xfffff240u, 0xfffff220u,
  0xfffff200u, 0xfffff1e0u, 0xfffff1c0u, 0xfffff1a0u, 0xfffff180u, 0xfffff160u, 0xfffff140u, 0xfffff120u,
  0xfffff100u, 0xfffff0ecu, 0xfffff0e0u, 0xfffff0c0u, 0xfffff0a0u, 0xfffff080u, 0xfffff060u, 0xfffff040u,
  0xfffff020u, 0xfffff000u, 0xffffefe0u, 0xffffefc0u, 0xffffefa0u, 0xffffef80u, 0xffffef60u, 0xffffef40u,
  0xffffef40u, 0xffffef20u, 0xffffef00u, 0xffffeee0u, 0xffffeec0u, 0xffffeea0u, 0xffffee80u, 0xffffee60u,
  0xffffee40u, 0xffffee20u, 0xffffee00u, 0xffffede0u, 0xffffedc0u, 0xffffeda0u, 0xffffed93u, 0xffffed80u,
  0xffffed60u, 0xffffed40u, 0xffffed20u, 0xffffed00u, 0xffffece0u, 0xffffecc0u, 0xffffeca0u, 0xffffec80u,
  0xffffec60u, 0xffffec40u, 0xffffec20u, 0xffffec00u, 0xffffebe6u, 0xffffebe0u, 0xffffebc0u, 0xffffeba0u,
  0xffffeb80u, 0xffffeb60u, 0xffffeb40u, 0xffffeb20u, 0xffffeb00u, 0xffffeae0u, 0xffffeac0u, 0xffffeaa0u,
  0xffffea80u, 0xffffea60u, 0xffffea40u, 0xffffea39u, 0xffffea20u, 0xffffea00u, 0xffffe9e0u, 0xffffe9c0u,
  0xffffe9a0u, 0xffffe980u, 0xffffe960u, 0xffffe940u, 0xffffe920u, 0xffffe900u, 0xffffe8e0u, 0xffffe8c0u,
  0xffffe8a0u, 0xffffe88cu, 0xffffe880u, 0xffffe860u, 0xffffe840u, 0xffffe820u, 0xffffe800u, 0xffffe7e0u,
  0xffffe7c0u, 0xffffe7a0u, 0xffffe780u, 0xffffe760u, 0xffffe740u, 0xffffe720u, 0xffffe700u, 0xffffe6e0u,
  0xffffe6e0u, 0xffffe6c0u, 0xffffe6a0u, 0xffffe680u, 0xffffe660u, 0xffffe640u, 0xffffe620u, 0xffffe600u,
  0xffffe5e0u, 0xffffe5c0u, 0xffffe5a0u, 0xffffe580u, 0xffffe560u, 0xffffe540u, 0xffffe533u, 0xffffe520u,
  0xffffe500u, 0xffffe4e0u, 0xffffe4c0u, 0xffffe4a0u, 0xffffe480u, 0xffffe460u, 0xffffe440u, 0xffffe420u,
  0xffffe400u, 0xffffe3e0u, 0xffffe3c0u, 0xffffe3a0u, 0xffffe386u, 0xffffe380u, 0xffffe360u, 0xffffe340u,
  0xffffe320u, 0xffffe300u, 0xffffe2e0u, 0xffffe2c0u, 0xffffe2a0u, 0xffffe280u, 0xffffe260u, 0xffffe240u,
  0xffffe220u, 0xffffe200u, 0xffffe1e0u, 0xffffe1d9u, 0xffffe1c0u, 0xffffe1a0u, 0xffffe180u, 0xffffe160u,
  0xffffe140u, 0xffffe120u, 0xffffe100u, 0xffffe0e0u, 0xffffe0c0u, 0xffffe0a0u, 0xffffe080u, 0xffffe060u,
  0xffffe040u, 0xffffe02cu, 0xffffe020u, 0xffffe000u, 0xffffdfe0u, 0xffffdfc0u, 0xffffdfa0u, 0xffffdf80u,
  0xffffdf60u, 0xffffdf40u, 0xffffdf20u, 0xffffdf00u, 0xffffdee0u, 0xffffdec0u, 0xffffdea0u, 0xffffde80u,
  0xffffde80u, 0xffffde60u, 0xffffde40u, 0xffffde20u, 0xffffde00u, 0xffffdde0u, 0xffffddc0u, 0xffffdda0u,
  0xffffdd80u, 0xffffdd60u, 0xffffdd40u, 0xffffdd20u, 0xffffdd00u, 0xffffdce0u, 0xffffdcd3u, 0xffffdcc0u,
  0xffffdca0u, 0xffffdc80u, 0xffffdc60u, 0xffffdc40u, 0xffffdc20u, 0xffffdc00u, 0xffffdbe0u, 0xffffdbc0u,
  0xffffdba0u, 0xffffdb80u, 0xffffdb60u, 0xffffdb40u, 0xffffdb26u, 0xffffdb20u, 0xffffdb00u, 0xffffdae0u,
  0xffffdac0u, 0xffffdaa0u, 0xffffda80u, 0xffffda60u, 0xffffda40u, 0xffffda20u, 0xffffda00u, 0xffffd9e0u,
  0xffffd9c0u, 0xffffd9a0u, 0xffffd980u, 0xffffd979u, 0xffffd960u, 0xffffd940u, 0xffffd920u, 0xffffd900u,
  0xffffd8e0u, 0xffffd8c0u, 0xffffd8a0u, 0xffffd880u, 0xffffd860u, 0xffffd840u, 0xffffd820u, 0xffffd800u,
  0xffffd7e0u, 0xffffd7ccu, 0xffffd7c0u, 0xffffd7a0u, 0xffffd780u, 0xffffd760u, 0xffffd740u, 0xffffd720u,
  0xffffd700u, 0xffffd6e0u, 0xffffd6c0u, 0xffffd6a0u, 0xffffd680u, 0xffffd660u, 0xffffd640u, 0xffffd620u,
  0xffffd620u, 0xffffd600u, 0xffffd5e0u, 0xffffd5c0u, 0xffffd5a0u, 0xffffd580u, 0xffffd560u, 0xffffd540u,
  0xffffd520u, 0xffffd500u, 0xffffd4e0u, 0xffffd4c0u, 0xffffd4a0u, 0xffffd480u, 0xffffd473u, 0xffffd460u,
  0xffffd440u, 0xffffd420u, 0xffffd400u, 0xffffd3e0u, 0xffffd3c0u, 0xffffd3a0u, 0xffffd380u, 0xffffd360u,
  0xffffd340u, 0xffffd320u, 0xffffd300u, 0xffffd2e0u, 0xffffd2c6u, 0xffffd2c0u, 0xffffd2a0u, 0xffffd280u,
  0xffffd260u, 0xffffd240u, 0xffffd220u, 0xffffd200u, 0xffffd1e0u, 0xffffd1c0u, 0xffffd1a0u, 0xffffd180u,
  0xffffd160u, 0xffffd140u, 0xffffd120u, 0xffffd119u, 0xffffd100u, 0xffffd0e0u, 0xffffd0c0u, 0xffffd0a0u,
  0xffffd080u, 0xffffd060u, 0xffffd040u, 0xffffd020u, 0xffffd000u, 0xffffcfe0u, 0xffffcfc0u, 0xffffcfa0u,
  0xffffcf80u, 0xffffcf6du, 0xffffcf60u, 0xffffcf40u, 0xffffcf20u, 0xffffcf00u, 0xffffcee0u, 0xffffcec0u,
  0xffffcea0u, 0xffffce80u, 0xffffce60u, 0xffffce40u, 0xffffce20u, 0xffffce00u, 0xffffcde0u, 0xffffcdc0u,
  0xffffcdc0u, 0xffffcda0u, 0xffffcd80u, 0xffffcd60u, 0xffffcd40u, 0xffffcd20u, 0xffffcd00u, 0xffffcce0u,
  0xffffccc0u, 0xffffcca0u, 0xffffcc80u, 0xffffcc60u, 0xffffcc40u, 0xffffcc20u, 0xffffcc13u, 0xffffcc00u,
  0xffffcbe0u, 0xffffcbc0u, 0xffffcba0u, 0xffffcb80u, 0xffffcb60u, 0xffffcb40u, 0xffffcb20u, 0xffffcb00u,
  0xffffcae0u, 0xffffcac0u, 0xffffcaa0u, 0xffffca80u, 0xffffca66u, 0xffffca60u, 0xffffca40u, 0xffffca20u,
  0xffffca00u, 0xffffc9e0u, 0xffffc9c0u, 0xffffc9a0u, 0xffffc980u, 0xffffc960u, 0xffffc940u, 0xffffc920u,
  0xffffc900u, 0xffffc8e0u, 0xffffc8c0u, 0xffffc8b9u, 0xffffc8a0u, 0xffffc880u, 0xffffc860u, 0xffffc840u,
  0xffffc820u, 0xffffc800u, 0xffffc7e0u, 0xffffc7c0u, 0xffffc7a0u, 0xffffc780u, 0xffffc760u, 0xffffc740u,
  0xffffc720u, 0xffffc70du, 0xffffc700u, 0xffffc6e0u, 0xffffc6c0u, 0xffffc6a0u, 0xffffc680u, 0xffffc660u,
  0xffffc640u, 0xffffc620u, 0xffffc600u, 0xffffc5e0u, 0xffffc5c0u, 0xffffc5a0u, 0xffffc580u, 0xffffc560u,
  0xffffc560u, 0xffffc540u, 0xffffc520u, 0xffffc500u, 0xffffc4e0u, 0xffffc4c0u, 0xffffc4a0u, 0xffffc480u,
  0xffffc460u, 0xffffc440u, 0xffffc420u, 0xffffc400u, 0xffffc3e0u, 0xffffc3c0u, 0xffffc3b3u, 0xffffc3a0u,
  0xffffc380u, 0xffffc360u, 0xffffc340u, 0xffffc320u, 0xffffc300u, 0xffffc2e0u, 0xffffc2c0u, 0xffffc2a0u,
  0xffffc280u, 0xffffc260u, 0xffffc240u, 0xffffc220u, 0xffffc206u, 0xffffc200u, 0xffffc1e0u, 0xffffc1c0u,
  0xffffc1a0u, 0xffffc180u, 0xffffc160u, 0xffffc140u, 0xffffc120u, 0xffffc100u, 0xffffc0e0u, 0xffffc0c0u,
  0xffffc0a0u, 0xffffc080u, 0xffffc060u, 0xffffc059u, 0xffffc040u, 0xffffc020u, 0xffffc000u, 0xffffbfe0u,
  0xffffbfc0u, 0xffffbfa0u, 0xffffbf80u, 0xffffbf60u, 0xffffbf40u, 0xffffbf20u, 0xffffbf00u, 0xffffbee0u,
  0xffffbec0u, 0xffffbeadu, 0xffffbea0u, 0xffffbe80u, 0xffffbe60u, 0xffffbe40u, 0xffffbe20u, 0xffffbe00u,
  0xffffbde0u, 0xffffbdc0u, 0xffffbda0u, 0xffffbd80u, 0xffffbd60u, 0xffffbd40u, 0xffffbd20u, 0xffffbd00u,
  0xffffbd00u, 0xffffbce0u, 0xffffbcc0u, 0xffffbca0u, 0xffffbc80u, 0xffffbc60u, 0xffffbc40u, 0xffffbc20u,
  0xffffbc00u, 0xffffbbe0u, 0xffffbbc0u, 0xffffbba0u, 0xffffbb80u, 0xffffbb60u, 0xffffbb53u, 0xffffbb40u,
  0xffffbb20u, 0xffffbb00u, 0xffffbae0u, 0xffffbac0u, 0xffffbaa0u, 0xffffba80u, 0xffffba60u, 0xffffba40u,
  0xffffba20u, 0xffffba00u, 0xffffb9e0u, 0xffffb9c0u, 0xffffb9a6u, 0xffffb9a0u, 0xffffb980u, 0xffffb960u,
  0xffffb940u, 0xffffb920u, 0xffffb900u, 0xffffb8e0u, 0xffffb8c0u, 0xffffb8a0u, 0xffffb880u, 0xffffb860u,
  0xffffb840u, 0xffffb820u, 0xffffb800u, 0xffffb7f9u, 0xffffb7e0u, 0xffffb7c0u, 0xffffb7a0u, 0xffffb780u,
  0xffffb760u, 0xffffb740u, 0xffffb720u, 0xffffb700u, 0xffffb6e0u, 0xffffb6c0u, 0xffffb6a0u, 0xffffb680u,
  0xffffb660u, 0xffffb64du, 0xffffb640u, 0xffffb620u, 0xffffb600u, 0xffffb5e0u, 0xffffb5c0u, 0xffffb5a0u,
  0xffffb580u, 0xffffb560u, 0xffffb540u, 0xffffb520u, 0xffffb500u, 0xffffb4e0u, 0xffffb4c0u, 0xffffb4a0u,
  0xffffb4a0u, 0xffffb480u, 0xffffb460u, 0xffffb440u, 0xffffb420u, 0xffffb400u, 0xffffb3e0u, 0xffffb3c0u,
  0xffffb3a0u, 0xffffb380u, 0xffffb360u, 0xffffb340u, 0xffffb320u, 0xffffb300u, 0xffffb2f3u, 0xffffb2e0u,
  0xffffb2c0u, 0xffffb2a0u, 0xffffb280u, 0xffffb260u, 0xffffb240u, 0xffffb220u, 0xffffb200u, 0xffffb1e0u,
  0xffffb1c0u, 0xffffb1a0u, 0xffffb180u, 0xffffb160u, 0xffffb146u, 0xffffb140u, 0xffffb120u, 0xffffb100u,
  0xffffb0e0u, 0xffffb0c0u, 0xffffb0a0u, 0xffffb080u, 0xffffb060u, 0xffffb040u, 0xffffb020u, 0xffffb000u,
  0xffffafe0u, 0xffffafc0u, 0xffffafa0u, 0xffffaf99u, 0xffffaf80u, 0xffffaf60u, 0xffffaf40u, 0xffffaf20u,
  0xffffaf00u, 0xffffaee0u, 0xffffaec0u, 0xffffaea0u, 0xffffae80u, 0xffffae60u, 0xffffae40u, 0xffffae20u,
  0xffffae00u, 0xffffadedu, 0xffffade0u, 0xffffadc0u, 0xffffada0u, 0xffffad80u, 0xffffad60u, 0xffffad40u,
  0xffffad20u, 0xffffad00u, 0xfffface0u, 0xffffacc0u, 0xffffaca0u, 0xffffac80u, 0xffffac60u, 0xffffac40u,
  0xffffac40u, 0xffffac20u, 0xffffac00u, 0xffffabe0u, 0xffffabc0u, 0xffffaba0u, 0xffffab80u, 0xffffab60u,
  0xffffab40u, 0xffffab20u, 0xffffab00u, 0xffffaae0u, 0xffffaac0u, 0xffffaaa0u, 0xffffaa93u, 0xffffaa80u,
  0xffffaa60u, 0xffffaa40u, 0xffffaa20u, 0xffffaa00u, 0xffffa9e0u, 0xffffa9c0u, 0xffffa9a0u, 0xffffa980u,
  0xffffa960u, 0xffffa940u, 0xffffa920u, 0xffffa900u, 0xffffa8e6u, 0xffffa8e0u, 0xffffa8c0u, 0xffffa8a0u,
  0xffffa880u, 0xffffa860u, 0xffffa840u, 0xffffa820u, 0xffffa800u, 0xffffa7e0u, 0xffffa7c0u, 0xffffa7a0u,
  0xffffa780u, 0xffffa760u, 0xffffa740u, 0xffffa739u, 0xffffa720u, 0xffffa700u, 0xffffa6e0u, 0xffffa6c0u,
  0xffffa6a0u, 0xffffa680u, 0xffffa660u, 0xffffa640u, 0xffffa620u, 0xffffa600u, 0xffffa5e0u, 0xffffa5c0u,
  0xffffa5a0u, 0xffffa58du, 0xffffa580u, 0xffffa560u, 0xffffa540u, 0xffffa520u, 0xffffa500u, 0xffffa4e0u,
  0xffffa4c0u, 0xffffa4a0u, 0xffffa480u, 0xffffa460u, 0xffffa440u, 0xffffa420u, 0xffffa400u, 0xffffa3e0u,
  0xffffa3e0u, 0xffffa3c0u, 0xffffa3a0u, 0xffffa380u, 0xffffa360u, 0xffffa340u, 0xffffa320u, 0xffffa300u,
  0xffffa2e0u, 0xffffa2c0u, 0xffffa2a0u, 0xffffa280u, 0xffffa260u, 0xffffa240u, 0xffffa233u, 0xffffa220u,
  0xffffa200u, 0xffffa1e0u, 0xffffa1c0u, 0xffffa1a0u, 0xffffa180u, 0xffffa160u, 0xffffa140u, 0xffffa120u,
  0xffffa100u, 0xffffa0e0u, 0xffffa0c0u, 0xffffa0a0u, 0xffffa086u, 0xffffa080u, 0xffffa060u, 0xffffa040u,
  0xffffa020u, 0xffffa000u, 0xffff9fe0u, 0xffff9fc0u, 0xffff9fa0u, 0xffff9f80u, 0xffff9f60u, 0xffff9f40u,
  0xffff9f20u, 0xffff9f00u, 0xffff9ee0u, 0xffff9edau, 0xffff9ec0u, 0xffff9ea0u, 0xffff9e80u, 0xffff9e60u,
  0xffff9e40u, 0xffff9e20u, 0xffff9e00u, 0xffff9de0u, 0xffff9dc0u, 0xffff9da0u, 0xffff9d80u, 0xffff9d60u,
  0xffff9d40u, 0xffff9d2du, 0xffff9d20u, 0xffff9d00u, 0xffff9ce0u, 0xffff9cc0u, 0xffff9ca0u, 0xffff9c80u,
  0xffff9c60u, 0xffff9c40u, 0xffff9c20u, 0xffff9c00u, 0xffff9be0u, 0xffff9bc0u, 0xffff9ba0u, 0xffff9b80u,
  0xffff9b80u, 0xffff9b60u, 0xffff9b40u, 0xffff9b20u, 0xffff9b00u, 0xffff9ae0u, 0xffff9ac0u, 0xffff9aa0u,
  0xffff9a80u, 0xffff9a60u, 0xffff9a40u, 0xffff9a20u, 0xffff9a00u, 0xffff99e0u, 0xffff99d3u, 0xffff99c0u,
  0xffff99a0u, 0xffff9980u, 0xffff9960u, 0xffff9940u, 0xffff9920u, 0xffff9900u, 0xffff98e0u, 0xffff98c0u,
  0xffff98a0u, 0xffff9880u, 0xffff9860u, 0xffff9840u, 0xffff9826u, 0xffff9820u, 0xffff9800u, 0xffff97e0u,
  0xffff97c0u, 0xffff97a0u, 0xffff9780u, 0xffff9760u, 0xffff9740u, 0xffff9720u, 0xffff9700u, 0xffff96e0u,
  0xffff96c0u, 0xffff96a0u, 0xffff9680u, 0xffff967au, 0xffff9660u, 0xffff9640u, 0xffff9620u, 0xffff9600u,
  0xffff95e0u, 0xffff95c0u, 0xffff95a0u, 0xffff9580u, 0xffff9560u, 0xffff9540u, 0xffff9529u, 0xffff9520u,
  0xffff9500u, 0xffff94e0u, 0xffff94c0u, 0xffff94a0u, 0xffff9491u, 0xffff9480u, 0xffff9460u, 0xffff9454u,
  0xffff9440u, 0xffff9420u, 0xffff9418u, 0xffff9400u, 0xffff93e0u, 0xffff93dcu, 0xffff93c0u, 0xffff93a0u,
  0xffff93a0u, 0xffff9380u, 0xffff9364u, 0xffff9360u, 0xffff9340u, 0xffff9328u, 0xffff9320u, 0xffff9300u,
  0xffff92ebu, 0xffff92e0u, 0xffff92c0u, 0xffff92afu, 0xffff92a0u, 0xffff9280u, 0xffff9273u, 0xffff9260u,
  0xffff9240u, 0xffff9237u, 0xffff9220u, 0xffff9200u, 0xffff91fbu, 0xffff91e0u, 0xffff91c0u, 0xffff91bfu,
  0xffff91a0u, 0xffff9183u, 0xffff9180u, 0xffff9160u, 0xffff9146u, 0xffff9140u, 0xffff9120u, 0xffff910au,
  0xffff9100u, 0xffff90e0u, 0xffff90ceu, 0xffff90c0u, 0xffff90a0u, 0xffff9092u, 0xffff9080u, 0xffff9060u,
  0xffff9056u, 0xffff9040u, 0xffff9020u, 0xffff901au, 0xffff9000u, 0xffff8fe0u, 0xffff8fddu, 0xffff8fc0u,
  0xffff8fa1u, 0xffff8fa0u, 0xffff8f80u, 0xffff8f65u, 0xffff8f60u, 0xffff8f40u, 0xffff8f29u, 0xffff8f20u,
  0xffff8f00u, 0xffff8eedu, 0xffff8ee0u, 0xffff8ec0u, 0xffff8eb1u, 0xffff8ea0u, 0xffff8e80u, 0xffff8e74u,
  0xffff8e60u, 0xffff8e40u, 0xffff8e38u, 0xffff8e20u, 0xffff8e00u, 0xffff8dfcu, 0xffff8de0u, 0xffff8dc0u,
  0xffff8dc0u, 0xffff8da0u, 0xffff8d84u, 0xffff8d80u, 0xffff8d60u, 0xffff8d5au, 0xffff8d40u, 0xffff8d3fu,
  0xffff8d3eu, 0xffff8d3du, 0xffff8d3cu, 0xffff8d3bu, 0xffff8d3au, 0xffff8d39u, 0xffff8d38u, 0xffff8d37u,
  0xffff8d36u, 0xffff8d55u, 0xffff8d54u, 0xffff8d53u, 0xffff8d52u, 0xffff8d51u, 0xffff8d50u, 0xffff8d4fu,
  0xffff8d4eu, 0xffff8d4du, 0xffff8d4cu, 0xffff8d4bu, 0xffff8d4au, 0xffff8d49u, 0xffff8d48u, 0xffff8d47u,
  0xffff8d46u, 0xffff8d45u, 0xffff8d44u, 0xffff8d63u, 0xffff8d62u, 0xffff8d61u, 0xffff8d60u, 0xffff8d5fu,
  0xffff8d5eu, 0xffff8d5du, 0xffff8d5cu, 0xffff8d5bu, 0xffff8d5au, 0xffff8d59u, 0xffff8d58u, 0xffff8d57u,
  0xffff8d56u, 0xffff8d55u, 0xffff8d54u, 0xffff8d53u, 0xffff8d52u, 0xffff8d51u, 0xffff8d70u, 0xffff8d6fu,
  0xffff8d6eu, 0xffff8d6du, 0xffff8d6cu, 0xffff8d6bu, 0xffff8d6au, 0xffff8d69u, 0xffff8d68u, 0xffff8d67u,
  0xffff8d66u, 0xffff8d65u, 0xffff8d64u, 0xffff8d63u, 0xffff8d62u, 0xffff8d61u, 0xffff8d60u, 0xffff8d5fu,
  0xffff8d7eu, 0xffff8d7du, 0xffff8d7cu, 0xffff8d7bu, 0xffff8d7au, 0xffff8d79u, 0xffff8d78u, 0xffff8d77u,
  0xffff8d76u, 0xffff8d75u, 0xffff8d74u, 0xffff8d73u, 0xffff8d72u, 0xffff8d71u, 0xffff8d70u, 0xffff8d6fu,
  0xffff8d6eu, 0xffff8d6du, 0xffff8d8cu, 0xffff8d8bu, 0xffff8d8au, 0xffff8d89u, 0xffff8d88u, 0xffff8d87u,
  0xffff8d86u, 0xffff8d85u, 0xffff8d84u, 0xffff8d83u, 0xffff8d82u, 0xffff8d81u, 0xffff8d80u, 0xffff8d7fu,
  0xffff8d7eu, 0xffff8d7du, 0xffff8d7cu, 0xffff8d7bu, 0xffff8d7au, 0xffff8d99u, 0xffff8d98u, 0xffff8d97u,
  0xffff8d96u, 0xffff8d95u, 0xffff8d94u, 0xffff8d93u, 0xffff8d92u, 0xffff8d91u, 0xffff8d90u, 0xffff8d8fu,
  0xffff8d8eu, 0xffff8d8du, 0xffff8d8cu, 0xffff8d8bu, 0xffff8d8au, 0xffff8d89u, 0xffff8d88u, 0xffff8da7u,
  0xffff8da6u, 0xffff8da5u, 0xffff8da4u, 0xffff8da3u, 0xffff8da2u, 0xffff8da1u, 0xffff8da0u, 0xffff8d9fu,
  0xffff8d9eu, 0xffff8d9du, 0xffff8d9cu, 0xffff8d9bu, 0xffff8d9au, 0xffff8d99u, 0xffff8d98u, 0xffff8d97u,
  0xffff8d96u, 0xffff8d95u, 0xffff8db4u, 0xffff8db3u, 0xffff8db2u, 0xffff8db1u, 0xffff8db0u, 0xffff8dafu,
  0xffff8daeu, 0xffff8dadu, 0xffff8dacu, 0xffff8dabu, 0xffff8daau, 0xffff8da9u, 0xffff8da8u, 0xffff8da7u,
  0xffff8da6u, 0xffff8da5u, 0xffff8da4u, 0xffff8da3u, 0xffff8dc2u, 0xffff8dc1u, 0xffff8dc0u, 0xffff8dbfu,
  0xffff8dbeu, 0xffff8dbdu, 0xffff8dbcu, 0xffff8dbbu, 0xffff8dbau, 0xffff8db9u, 0xffff8db8u, 0xffff8db7u,
  0xffff8db6u, 0xffff8db5u, 0xffff8db4u, 0xffff8db3u, 0xffff8db2u, 0xffff8db1u, 0xffff8db0u, 0xffff8dcfu,
  0xffff8dceu, 0xffff8dcdu, 0xffff8dccu, 0xffff8dcbu, 0xffff8dcau, 0xffff8dc9u, 0xffff8dc8u, 0xffff8dc7u,
  0xffff8dc6u, 0xffff8dc5u, 0xffff8dc4u, 0xffff8dc3u, 0xffff8dc2u, 0xffff8dc1u, 0xffff8dc0u, 0xffff8dbfu,
  0xffff8dbeu, 0xffff8dddu, 0xffff8ddcu, 0xffff8ddbu, 0xffff8ddau, 0xffff8dd9u, 0xffff8dd8u, 0xffff8dd7u,
  0xffff8dd6u, 0xffff8dd5u, 0xffff8dd4u, 0xffff8dd3u, 0xffff8dd2u, 0xffff8dd1u, 0xffff8dd0u, 0xffff8dcfu,
  0xffff8dceu, 0xffff8dcdu, 0xffff8dccu, 0xffff8dcbu, 0xffff8deau, 0xffff8de9u, 0xffff8de8u, 0xffff8de7u,
  0xffff8de6u, 0xffff8de5u, 0xffff8de4u, 0xffff8de3u, 0xffff8de2u, 0xffff8de1u, 0xffff8de0u, 0xffff8ddfu,
  0xffff8ddeu, 0xffff8dddu, 0xffff8ddcu, 0xffff8ddbu, 0xffff8ddau, 0xffff8dd9u, 0xffff8df8u, 0xffff8df7u,
  0xffff8df6u, 0xffff8df5u, 0xffff8df4u, 0xffff8df3u, 0xffff8df2u, 0xffff8df1u, 0xffff8df0u, 0xffff8defu,
  0xffff8deeu, 0xffff8dedu, 0xffff8decu, 0xffff8debu, 0xffff8deau, 0xffff8de9u, 0xffff8de8u, 0xffff8de7u,
  0xffff8e06u, 0xffff8e05u, 0xffff8e04u, 0xffff8e03u, 0xffff8e02u, 0xffff8e01u, 0xffff8e00u, 0xffff8dffu,
  0xffff8dfeu, 0xffff8dfdu, 0xffff8dfcu, 0xffff8dfbu, 0xffff8dfau, 0xffff8df9u, 0xffff8df8u, 0xffff8df7u,
  0xffff8df6u, 0xffff8df5u, 0xffff8df4u, 0xffff8e13u, 0xffff8e12u, 0xffff8e11u, 0xffff8e10u, 0xffff8e0fu,
  0xffff8e0eu, 0xffff8e0du, 0xffff8e0cu, 0xffff8e0bu, 0xffff8e0au, 0xffff8e09u, 0xffff8e08u, 0xffff8e07u,
  0xffff8e06u, 0xffff8e05u, 0xffff8e24u, 0xffff8e23u, 0xffff8e22u, 0xffff8e21u, 0xffff8e20u, 0xffff8e1fu,
  0xffff8e1eu, 0xffff8e3du, 0xffff8e3cu, 0xffff8e3bu, 0xffff8e3au, 0xffff8e59u, 0xffff8e58u, 0xffff8e57u,
  0xffff8e76u, 0xffff8e75u, 0xffff8e74u, 0xffff8e73u, 0xffff8e92u, 0xffff8e91u, 0xffff8e90u, 0xffff8e8fu,
  0xffff8eaeu, 0xffff8eadu, 0xffff8eacu, 0xffff8ecbu, 0xffff8ecau, 0xffff8ec9u, 0xffff8ec8u, 0xffff8ee7u,
  0xffff8ee6u, 0xffff8ee5u, 0xffff8f04u, 0xffff8f23u, 0xffff8f42u, 0xffff8f61u, 0xffff9060u, 0xffff907fu,
  0xffff909eu, 0xffff90bdu, 0xffff90dcu, 0xffff90dbu, 0xffff90dau, 0xffff90f9u, 0xffff90f8u, 0xffff90f7u,
  0xffff90f6u, 0xffff9115u, 0xffff9114u, 0xffff9113u, 0xffff9132u, 0xffff9131u, 0xffff9130u, 0xffff912fu,
  0xffff914eu, 0xffff914du, 0xffff914cu, 0xffff914bu, 0xffff916au, 0xffff9169u, 0xffff9168u, 0xffff9187u,
  0xffff9186u, 0xffff9185u, 0xffff9184u, 0xffff91a3u, 0xffff91a2u, 0xffff91a1u, 0xffff91a0u, 0xffff919fu,
  0xffff919eu, 0xffff919du, 0xffff91bcu, 0xffff91bbu, 0xffff91bau, 0xffff91b9u, 0xffff91b8u, 0xffff91b7u,
  0xffff91b6u, 0xffff91b5u, 0xffff91b4u, 0xffff91b3u, 0xffff91b2u, 0xffff91b1u, 0xffff91b0u, 0xffff91afu,
  0xffff91aeu, 0xffff91cdu, 0xffff91ccu, 0xffff91cbu, 0xffff91cau, 0xffff91c9u, 0xffff91c8u, 0xffff91c7u,
  0xffff91c6u, 0xffff91c5u, 0xffff91c4u, 0xffff91c3u, 0xffff91c2u, 0xffff91c1u, 0xffff91c0u, 0xffff91bfu,
  0xffff91beu, 0xffff91bdu, 0xffff91bcu, 0xffff91bbu, 0xffff91dau, 0xffff91d9u, 0xffff91d8u, 0xffff91d7u,
  0xffff91d6u, 0xffff91d5u, 0xffff91d4u, 0xffff91d3u, 0xffff91d2u, 0xffff91d1u, 0xffff91d0u, 0xffff91cfu,
  0xffff91ceu, 0xffff91cdu, 0xffff91ccu, 0xffff91cbu, 0xffff91cau, 0xffff91c9u, 0xffff91e8u, 0xffff91e7u,
  0xffff91e6u, 0xffff91e5u, 0xffff91e4u, 0xffff91e3u, 0xffff91e2u, 0xffff91e1u, 0xffff91e0u, 0xffff91dfu,
  0xffff91deu, 0xffff91ddu, 0xffff91dcu, 0xffff91dbu, 0xffff91dau, 0xffff91d9u, 0xffff91d8u, 0xffff91d7u,
  0xffff91f6u, 0xffff91f5u, 0xffff91f4u, 0xffff91f3u, 0xffff91f2u, 0xffff91f1u, 0xffff91f0u, 0xffff91efu,
  0xffff91eeu, 0xffff91edu, 0xffff91ecu, 0xffff91ebu, 0xffff91eau, 0xffff91e9u, 0xffff91e8u, 0xffff91e7u,
  0xffff91e6u, 0xffff91e5u, 0xffff91e4u, 0xffff9203u, 0xffff9202u, 0xffff9201u, 0xffff9200u, 0xffff91ffu,
  0xffff91feu, 0xffff91fdu, 0xffff91fcu, 0xffff91fbu, 0xffff91fau, 0xffff91f9u, 0xffff91f8u, 0xffff91f7u,
  0xffff91f6u, 0xffff91f5u, 0xffff91f4u, 0xffff91f3u, 0xffff91f2u, 0xffff9211u, 0xffff9210u, 0xffff920fu,
  0xffff920eu, 0xffff920du, 0xffff920cu, 0xffff920bu, 0xffff920au, 0xffff9209u, 0xffff9208u, 0xffff9207u,
  0xffff9206u, 0xffff9205u, 0xffff9204u, 0xffff9203u, 0xffff9202u, 0xffff9201u, 0xffff9200u, 0xffff91ffu,
  0xffff921eu, 0xffff921du, 0xffff921cu, 0xffff921bu, 0xffff921au, 0xffff9219u, 0xffff9218u, 0xffff9217u,
  0xffff9216u, 0xffff9215u, 0xffff9214u, 0xffff9213u, 0xffff9212u, 0xffff9211u, 0xffff9210u, 0xffff920fu,
  0xffff920eu, 0xffff920du, 0xffff922cu, 0xffff922bu, 0xffff922au, 0xffff9229u, 0xffff9228u, 0xffff9227u,
  0xffff9226u, 0xffff9225u, 0xffff9224u, 0xffff9223u, 0xffff9222u, 0xffff9221u, 0xffff9220u, 0xffff921fu,
  0xffff921eu, 0xffff921du, 0xffff921cu, 0xffff921bu, 0xffff921au, 0xffff9239u, 0xffff9238u, 0xffff9237u,
  0xffff9236u, 0xffff9235u, 0xffff9234u, 0xffff9233u, 0xffff9232u, 0xffff9231u, 0xffff9230u, 0xffff922fu,
  0xffff922eu, 0xffff922du, 0xffff922cu, 0xffff922bu, 0xffff922au, 0xffff9229u, 0xffff9228u, 0xffff9247u,
  0xffff9246u, 0xffff9245u, 0xffff9244u, 0xffff9243u, 0xffff9242u, 0xffff9241u, 0xffff9240u, 0xffff923fu,
  0xffff923eu, 0xffff923du, 0xffff923cu, 0xffff923bu, 0xffff923au, 0xffff9239u, 0xffff9238u, 0xffff9237u,
  0xffff9236u, 0xffff9235u, 0xffff9254u, 0xffff9253u, 0xffff9252u, 0xffff9251u, 0xffff9250u, 0xffff924fu,
  0xffff924eu, 0xffff924du, 0xffff924cu, 0xffff924bu, 0xffff924au, 0xffff9249u, 0xffff9248u, 0xffff9247u,
  0xffff9246u, 0xffff9245u, 0xffff9244u, 0xffff9243u, 0xffff9262u, 0xffff9261u, 0xffff9260u, 0xffff925fu,
  0xffff925eu, 0xffff925du, 0xffff925cu, 0xffff925bu, 0xffff925au, 0xffff9259u, 0xffff9258u, 0xffff9257u,
  0xffff9256u, 0xffff9255u, 0xffff9254u, 0xffff9253u, 0xffff9252u, 0xffff9251u, 0xffff9270u, 0xffff926fu,
  0xffff926eu, 0xffff926du, 0xffff926cu, 0xffff926bu, 0xffff926au, 0xffff9269u, 0xffff9268u, 0xffff9267u,
  0xffff9266u, 0xffff9265u, 0xffff9264u, 0xffff9263u, 0xffff9262u, 0xffff9261u, 0xffff9260u, 0xffff925fu,
  0xffff925eu, 0xffff927du, 0xffff927cu, 0xffff927bu, 0xffff927au, 0xffff9279u, 0xffff9278u, 0xffff9277u,
  0xffff9276u, 0xffff9275u, 0xffff9274u, 0xffff9273u, 0xffff9272u, 0xffff9271u, 0xffff9270u, 0xffff926fu,
  0xffff926eu, 0xffff926du, 0xffff926cu, 0xffff928bu, 0xffff928au, 0xffff9289u, 0xffff9288u, 0xffff9287u,
  0xffff9286u, 0xffff9285u, 0xffff9284u, 0xffff9283u, 0xffff9282u, 0xffff9281u, 0xffff9286u, 0xffff9280u,
  0xffff9260u, 0xffff925cu, 0xffff9240u, 0xffff9220u, 0xffff9220u, 0xffff9200u, 0xffff91e4u, 0xffff91e0u,
  0xffff91c0u, 0xffff91a8u, 0xffff91a0u, 0xffff9180u, 0xffff916cu, 0xffff9160u, 0xffff9140u, 0xffff912fu,
  0xffff9120u, 0xffff9100u, 0xffff90f3u, 0xffff90e0u, 0xffff90c0u, 0xffff90b7u, 0xffff90a0u, 0xffff9080u,
  0xffff907bu, 0xffff9060u, 0xffff9040u, 0xffff903fu, 0xffff9020u, 0xffff9003u, 0xffff9000u, 0xffff8fe0u,
  0xffff8fc6u, 0xffff8fc0u, 0xffff8fa0u, 0xffff8f8au, 0xffff8f80u, 0xffff8f60u, 0xffff8f4eu, 0xffff8f40u,
  0xffff8f20u, 0xffff8f12u, 0xffff8f00u, 0xffff8ee0u, 0xffff8ed6u, 0xffff8ec0u, 0xffff8ea0u, 0xffff8e9au,
  0xffff8e80u, 0xffff8e60u, 0xffff8e5du, 0xffff8e40u, 0xffff8e21u, 0xffff8e20u, 0xffff8e00u, 0xffff8de5u,
  0xffff8de0u, 0xffff8dc0u, 0xffff8da9u, 0xffff8da0u, 0xffff8d80u, 0xffff8d6du, 0xffff8d60u, 0xffff8d40u,
  0xffff8d31u, 0xffff8d20u, 0xffff8d00u, 0xffff8cf5u, 0xffff8ce0u, 0xffff8cc0u, 0xffff8cb8u, 0xffff8ca0u,
  0xffff8c80u, 0xffff8c7cu, 0xffff8c60u, 0xffff8c40u, 0xffff8c40u, 0xffff8c20u, 0xffff8c04u, 0xffff8c00u,
  0xffff8be0u, 0xffff8bc8u, 0xffff8bc0u, 0xffff8ba0u, 0xffff8b8cu, 0xffff8b80u, 0xffff8b60u, 0xffff8b4fu,
  0xffff8b40u, 0xffff8b20u, 0xffff8b00u, 0xffff8ae0u, 0xffff8ac0u, 0xffff8ab7u, 0xffff8aa0u, 0xffff8a80u,
  0xffff8a60u, 0xffff8a40u, 0xffff8a20u, 0xffff8a00u, 0xffff89e0u, 0xffff89c0u, 0xffff89a0u, 0xffff8980u,
  0xffff8966u, 0xffff8960u, 0xffff8940u, 0xffff8920u, 0xffff8900u, 0xffff88e0u, 0xffff88c0u, 0xffff88a0u,
  0xffff8880u, 0xffff8860u, 0xffff8840u, 0xffff8820u, 0xffff8800u, 0xffff87e0u, 0xffff87c0u, 0xffff87bau,
  0xffff87a0u, 0xffff8780u, 0xffff8760u, 0xffff8740u, 0xffff8720u, 0xffff8700u, 0xffff86e0u, 0xffff86c0u,
  0xffff86a0u, 0xffff8680u, 0xffff8660u, 0xffff8640u, 0xffff8620u, 0xffff860du, 0xffff8600u, 0xffff85e0u,
  0xffff85c0u, 0xffff85a0u, 0xffff8580u, 0xffff8560u, 0xffff8540u, 0xffff8520u, 0xffff8500u, 0xffff84e0u,
  0xffff84c0u, 0xffff84a0u, 0xffff8480u, 0xffff8460u, 0xffff8460u, 0xffff8440u, 0xffff8420u, 0xffff8400u,
  0xffff83e0u, 0xffff83c0u, 0xffff83a0u, 0xffff8380u, 0xffff8360u, 0xffff8340u, 0xffff8320u, 0xffff8300u,
  0xffff82e0u, 0xffff82c0u, 0xffff82b3u, 0xffff82a0u, 0xffff8280u, 0xffff8260u, 0xffff8240u, 0xffff8220u,
  0xffff8200u, 0xffff81e0u, 0xffff81c0u, 0xffff81a0u, 0xffff8180u, 0xffff8160u, 0xffff8140u, 0xffff8120u,
  0xffff8106u, 0xffff8100u, 0xffff80e0u, 0xffff80c0u, 0xffff80a0u, 0xffff8080u, 0xffff8060u, 0xffff8040u,
  0xffff8020u, 0xffff8000u, 0xffff7fe0u, 0xffff7fc0u, 0xffff7fa0u, 0xffff7f80u, 0xffff7f60u, 0xffff7f5au,
  0xffff7f40u, 0xffff7f20u, 0xffff7f00u, 0xffff7ee0u, 0xffff7ec0u, 0xffff7ea0u, 0xffff7e80u, 0xffff7e60u,
  0xffff7e40u, 0xffff7e20u, 0xffff7e00u, 0xffff7de0u, 0xffff7dc0u, 0xffff7dadu, 0xffff7da0u, 0xffff7d80u,
  0xffff7d60u, 0xffff7d40u, 0xffff7d20u, 0xffff7d00u, 0xffff7ce0u, 0xffff7cc0u, 0xffff7ca0u, 0xffff7c80u,
  0xffff7c60u, 0xffff7c40u, 0xffff7c20u, 0xffff7c00u, 0xffff7c00u, 0xffff7be0u, 0xffff7bc0u, 0xffff7ba0u,
  0xffff7b80u, 0xffff7b60u, 0xffff7b40u, 0xffff7b20u, 0xffff7b00u, 0xffff7ae0u, 0xffff7ac0u, 0xffff7aa0u,
  0xffff7a80u, 0xffff7a60u, 0xffff7a53u, 0xffff7a40u, 0xffff7a20u, 0xffff7a00u, 0xffff79e0u, 0xffff79c0u,
  0xffff79a0u, 0xffff7980u, 0xffff7960u, 0xffff7940u, 0xffff7920u, 0xffff7900u, 0xffff78e0u, 0xffff78c0u,
  0xffff78a7u, 0xffff78a0u, 0xffff7880u, 0xffff7860u, 0xffff7840u, 0xffff7820u, 0xffff7800u, 0xffff77e0u,
  0xffff77c0u, 0xffff77a0u, 0xffff7780u, 0xffff7760u, 0xffff7740u, 0xffff7720u, 0xffff7700u, 0xffff76fau,
  0xffff76e0u, 0xffff76c0u, 0xffff76a0u, 0xffff7680u, 0xffff7660u, 0xffff7640u, 0xffff7620u, 0xffff7600u,
  0xffff75e0u, 0xffff75c0u, 0xffff75a0u, 0xffff7580u, 0xffff7560u, 0xffff754du, 0xffff7540u, 0xffff7520u,
  0xffff7500u, 0xffff74e0u, 0xffff74c0u, 0xffff74a0u, 0xffff7480u, 0xffff7460u, 0xffff7440u, 0xffff7420u,
  0xffff7400u, 0xffff73e0u, 0xffff73c0u, 0xffff73a0u, 0xffff73a0u, 0xffff7380u, 0xffff7360u, 0xffff7340u,
  0xffff7320u, 0xffff7300u, 0xffff72e0u, 0xffff72c0u, 0xffff72a0u, 0xffff7280u, 0xffff7260u, 0xffff7240u,
  0xffff7220u, 0xffff7200u, 0xffff71f3u, 0xffff71e0u, 0xffff71c0u, 0xffff71a0u, 0xffff7180u, 0xffff7160u,
  0xffff7140u, 0xffff7120u, 0xffff7100u, 0xffff70e0u, 0xffff70c0u, 0xffff70a0u, 0xffff7080u, 0xffff7060u,
  0xffff7047u, 0xffff7040u, 0xffff7020u, 0xffff7000u, 0xffff6fe0u, 0xffff6fc0u, 0xffff6fa0u, 0xffff6f80u,
  0xffff6f60u, 0xffff6f40u, 0xffff6f20u, 0xffff6f00u, 0xffff6ee0u, 0xffff6ec0u, 0xffff6ea0u, 0xffff6e9au,
  0xffff6e80u, 0xffff6e60u, 0xffff6e40u, 0xffff6e20u, 0xffff6e00u, 0xffff6de0u, 0xffff6dc0u, 0xffff6da0u,
  0xffff6d80u, 0xffff6d60u, 0xffff6d40u, 0xffff6d20u, 0xffff6d00u, 0xffff6cedu, 0xffff6ce0u, 0xffff6cc0u,
  0xffff6ca0u, 0xffff6c80u, 0xffff6c60u, 0xffff6c40u, 0xffff6c20u, 0xffff6c00u, 0xffff6be0u, 0xffff6bc0u,
  0xffff6ba0u, 0xffff6b80u, 0xffff6b60u, 0xffff6b40u, 0xffff6b40u, 0xffff6b20u, 0xffff6b00u, 0xffff6ae0u,
  0xffff6ac0u, 0xffff6aa0u, 0xffff6a80u, 0xffff6a60u, 0xffff6a40u, 0xffff6a20u, 0xffff6a00u, 0xffff69e0u,
  0xffff69c0u, 0xffff69a0u, 0xffff6993u, 0xffff6980u, 0xffff6960u, 0xffff6940u, 0xffff6920u, 0xffff6900u,
  0xffff68e0u, 0xffff68c0u, 0xffff68a0u, 0xffff6880u, 0xffff6860u, 0xffff6840u, 0xffff6820u, 0xffff6800u,
  0xffff67e7u, 0xffff67e0u, 0xffff67c0u, 0xffff67a0u, 0xffff6780u, 0xffff6760u, 0xffff6740u, 0xffff6720u,
  0xffff6700u, 0xffff66e0u, 0xffff66c0u, 0xffff66a0u, 0xffff6680u, 0xffff6660u, 0xffff6640u, 0xffff663au,
  0xffff6620u, 0xffff6600u, 0xffff65e0u, 0xffff65c0u, 0xffff65a0u, 0xffff6580u, 0xffff6560u, 0xffff6540u,
  0xffff6520u, 0xffff6500u, 0xffff64e0u, 0xffff64c0u, 0xffff64a0u, 0xffff648du, 0xffff6480u, 0xffff6460u,
  0xffff6440u, 0xffff6420u, 0xffff6400u, 0xffff63e0u, 0xffff63c0u, 0xffff63a0u, 0xffff6380u, 0xffff6360u,
  0xffff6340u, 0xffff6320u, 0xffff6300u, 0xffff62e0u, 0xffff62e0u, 0xffff62c0u, 0xffff62a0u, 0xffff6280u,
  0xffff6260u, 0xffff6240u, 0xffff6220u, 0xffff6200u, 0xffff61e0u, 0xffff61c0u, 0xffff61a0u, 0xffff6180u,
  0xffff6160u, 0xffff6140u, 0xffff6133u, 0xffff6120u, 0xffff6100u, 0xffff60e0u, 0xffff60c0u, 0xffff60a0u,
  0xffff6080u, 0xffff6060u, 0xffff6040u, 0xffff6020u, 0xffff6000u, 0xffff5fe0u, 0xffff5fc0u, 0xffff5fa0u,
  0xffff5f87u, 0xffff5f80u, 0xffff5f60u, 0xffff5f40u, 0xffff5f20u, 0xffff5f00u, 0xffff5ee0u, 0xffff5ec0u,
  0xffff5ea0u, 0xffff5e80u, 0xffff5e60u, 0xffff5e40u, 0xffff5e20u, 0xffff5e00u, 0xffff5de0u, 0xffff5ddau,
  0xffff5dc0u, 0xffff5da0u, 0xffff5d80u, 0xffff5d60u, 0xffff5d40u, 0xffff5d20u, 0xffff5d00u, 0xffff5ce0u,
  0xffff5cc0u, 0xffff5ca0u, 0xffff5c80u, 0xffff5c60u, 0xffff5c40u, 0xffff5c2du, 0xffff5c20u, 0xffff5c00u,
  0xffff5be0u, 0xffff5bc0u, 0xffff5ba0u, 0xffff5b80u, 0xffff5b60u, 0xffff5b40u, 0xffff5b20u, 0xffff5b00u,
  0xffff5ae0u, 0xffff5ac0u, 0xffff5aa0u, 0xffff5a80u, 0xffff5a80u, 0xffff5a60u, 0xffff5a40u, 0xffff5a20u,
  0xffff5a00u, 0xffff59e0u, 0xffff59c0u, 0xffff59a0u, 0xffff5980u, 0xffff5960u, 0xffff5940u, 0xffff5920u,
  0xffff5900u, 0xffff58e0u, 0xffff58d3u, 0xffff58c0u, 0xffff58a0u, 0xffff5880u, 0xffff5860u, 0xffff5840u,
  0xffff5820u, 0xffff5800u, 0xffff57e0u, 0xffff57c0u, 0xffff57a0u, 0xffff5780u, 0xffff5760u, 0xffff5740u,
  0xffff5727u, 0xffff5720u, 0xffff5700u, 0xffff56e0u, 0xffff56c0u, 0xffff56a0u, 0xffff5680u, 0xffff5660u,
  0xffff5640u, 0xffff5620u, 0xffff5600u, 0xffff55e0u, 0xffff55c0u, 0xffff55a0u, 0xffff5580u, 0xffff557au,
  0xffff5560u, 0xffff5540u, 0xffff5520u, 0xffff5500u, 0xffff54e0u, 0xffff54c0u, 0xffff54a0u, 0xffff5480u,
  0xffff5460u, 0xffff5440u, 0xffff5420u, 0xffff5400u, 0xffff53e0u, 0xffff53cdu, 0xffff53c0u, 0xffff53a0u,
  0xffff5380u, 0xffff5360u, 0xffff5340u, 0xffff5320u, 0xffff5300u, 0xffff52e0u, 0xffff52c0u, 0xffff52a0u,
  0xffff5280u, 0xffff5260u, 0xffff5240u, 0xffff5220u, 0xffff5220u, 0xffff5200u, 0xffff51e0u, 0xffff51c0u,
  0xffff51a0u, 0xffff5180u, 0xffff5160u, 0xffff5140u, 0xffff5120u, 0xffff5100u, 0xffff50e0u, 0xffff50c0u,
  0xffff50a0u, 0xffff5080u, 0xffff5073u, 0xffff5060u, 0xffff5040u, 0xffff5020u, 0xffff5000u, 0xffff4fe0u,
  0xffff4fc0u, 0xffff4fa0u, 0xffff4f80u, 0xffff4f60u, 0xffff4f40u, 0xffff4f20u, 0xffff4f00u, 0xffff4ee0u,
  0xffff4ec7u, 0xffff4ec0u, 0xffff4ea0u, 0xffff4e80u, 0xffff4e60u, 0xffff4e40u, 0xffff4e20u, 0xffff4e00u,
  0xffff4de0u, 0xffff4dc0u, 0xffff4da0u, 0xffff4d80u, 0xffff4d60u, 0xffff4d40u, 0xffff4d20u, 0xffff4d1au,
  0xffff4d00u, 0xffff4ce0u, 0xffff4cc0u, 0xffff4ca0u, 0xffff4c80u, 0xffff4c60u, 0xffff4c40u, 0xffff4c20u,
  0xffff4c00u, 0xffff4be0u, 0xffff4bc0u, 0xffff4ba0u, 0xffff4b80u, 0xffff4b6du, 0xffff4b60u, 0xffff4b40u,
  0xffff4b20u, 0xffff4b00u, 0xffff4ae0u, 0xffff4ac0u, 0xffff4aa0u, 0xffff4a80u, 0xffff4a60u, 0xffff4a40u,
  0xffff4a20u, 0xffff4a00u, 0xffff49e0u, 0xffff49c0u, 0xffff49c0u, 0xffff49a0u, 0xffff4980u, 0xffff4960u,
  0xffff4940u, 0xffff4920u, 0xffff4900u, 0xffff48e0u, 0xffff48c0u, 0xffff48a0u, 0xffff4880u, 0xffff4860u,
  0xffff4840u, 0xffff4820u, 0xffff4814u, 0xffff4800u, 0xffff47e0u, 0xffff47c0u, 0xffff47a0u, 0xffff4780u,
  0xffff4760u, 0xffff4740u, 0xffff4720u, 0xffff4700u, 0xffff46e0u, 0xffff46c0u, 0xffff46a0u, 0xffff4680u,
  0xffff4667u, 0xffff4660u, 0xffff4640u, 0xffff4620u, 0xffff4600u, 0xffff45e0u, 0xffff45c0u, 0xffff45a0u,
  0xffff4580u, 0xffff4560u, 0xffff4540u, 0xffff4520u, 0xffff4500u, 0xffff44e0u, 0xffff44c0u, 0xffff44bau,
  0xffff44a0u, 0xffff4480u, 0xffff4460u, 0xffff4440u, 0xffff4420u, 0xffff4400u, 0xffff43e0u, 0xffff43c0u,
  0xffff43a0u, 0xffff4380u, 0xffff4360u, 0xffff4340u, 0xffff4320u, 0xffff430du, 0xffff4300u, 0xffff42e0u,
  0xffff42c0u, 0xffff42a0u, 0xffff4280u, 0xffff4260u, 0xffff4240u, 0xffff4220u, 0xffff4200u, 0xffff41e0u,
  0xffff41c0u, 0xffff41a0u, 0xffff4180u, 0xffff4160u, 0xffff4160u, 0xffff4140u, 0xffff4120u, 0xffff4100u,
  0xffff40e0u, 0xffff40c0u, 0xffff40a0u, 0xffff4080u, 0xffff4060u, 0xffff4040u, 0xffff4020u, 0xffff4000u,
  0xffff3fe0u, 0xffff3fc0u, 0xffff3fb4u, 0xffff3fa0u, 0xffff3f80u, 0xffff3f60u, 0xffff3f40u, 0xffff3f20u,
  0xffff3f00u, 0xffff3ee0u, 0xffff3ec0u, 0xffff3ea0u, 0xffff3e80u, 0xffff3e60u, 0xffff3e40u, 0xffff3e20u,
  0xffff3e07u, 0xffff3e00u, 0xffff3de0u, 0xffff3dc0u, 0xffff3da0u, 0xffff3d80u, 0xffff3d60u, 0xffff3d40u,
  0xffff3d20u, 0xffff3d00u, 0xffff3ce0u, 0xffff3cc0u, 0xffff3ca0u, 0xffff3c80u, 0xffff3c60u, 0xffff3c5au,
  0xffff3c40u, 0xffff3c20u, 0xffff3c00u, 0xffff3be0u, 0xffff3bc0u, 0xffff3ba0u, 0xffff3b80u, 0xffff3b60u,
  0xffff3b40u, 0xffff3b20u, 0xffff3b00u, 0xffff3ae0u, 0xffff3ac0u, 0xffff3aadu, 0xffff3aa0u, 0xffff3a80u,
  0xffff3a60u, 0xffff3a40u, 0xffff3a20u, 0xffff3a00u, 0xffff39e0u, 0xffff39c0u, 0xffff39a0u, 0xffff3980u,
  0xffff3960u, 0xffff3940u, 0xffff3920u, 0xffff3900u, 0xffff3900u, 0xffff38e0u, 0xffff38c0u, 0xffff38a0u,
  0xffff3880u, 0xffff3860u, 0xffff3840u, 0xffff3820u, 0xffff3800u, 0xffff37e0u, 0xffff37c0u, 0xffff37a0u,
  0xffff3780u, 0xffff3760u, 0xffff3754u, 0xffff3740u, 0xffff3720u, 0xffff3700u, 0xffff36e0u, 0xffff36c0u,
  0xffff36a0u, 0xffff3680u, 0xffff3660u, 0xffff3640u, 0xffff3620u, 0xffff3600u, 0xffff35e0u, 0xffff35c0u,
  0xffff35a7u, 0xffff35a0u, 0xffff3580u, 0xffff3560u, 0xffff3540u, 0xffff3520u, 0xffff3500u, 0xffff34e0u,
  0xffff34c0u, 0xffff34a0u, 0xffff3480u, 0xffff3460u, 0xffff3440u, 0xffff3420u, 0xffff3400u, 0xffff33fau,
  0xffff33e0u, 0xffff33c0u, 0xffff33a0u, 0xffff3380u, 0xffff3360u, 0xffff3340u, 0xffff3320u, 0xffff3300u,
  0xffff32e0u, 0xffff32c0u, 0xffff32a0u, 0xffff3280u, 0xffff3260u, 0xffff324du, 0xffff3240u, 0xffff3220u,
  0xffff3200u, 0xffff31e0u, 0xffff31c0u, 0xffff31a0u, 0xffff3180u, 0xffff3160u, 0xffff3140u, 0xffff3120u,
  0xffff3100u, 0xffff30e0u, 0xffff30c0u, 0xffff30a0u, 0xffff30a0u, 0xffff3080u, 0xffff3060u, 0xffff3040u,
  0xffff3020u, 0xffff3000u, 0xffff2fe0u, 0xffff2fc0u, 0xffff2fa0u, 0xffff2f80u, 0xffff2f60u, 0xffff2f40u,
  0xffff2f20u, 0xffff2f00u, 0xffff2ef4u, 0xffff2ee0u, 0xffff2ec0u, 0xffff2ea0u, 0xffff2e80u, 0xffff2e60u,
  0xffff2e40u, 0xffff2e20u, 0xffff2e00u, 0xffff2de0u, 0xffff2dc0u, 0xffff2da0u, 0xffff2d80u, 0xffff2d60u,
  0xffff2d47u, 0xffff2d40u, 0xffff2d20u, 0xffff2d00u, 0xffff2ce0u, 0xffff2cc0u, 0xffff2ca0u, 0xffff2c80u,
  0xffff2c60u, 0xffff2c40u, 0xffff2c20u, 0xffff2c00u, 0xffff2be0u, 0xffff2bc0u, 0xffff2ba0u, 0xffff2b9au,
  0xffff2b80u, 0xffff2b60u, 0xffff2b40u, 0xffff2b20u, 0xffff2b00u, 0xffff2ae0u, 0xffff2ac0u, 0xffff2aa0u,
  0xffff2a80u, 0xffff2a60u, 0xffff2a40u, 0xffff2a20u, 0xffff2a00u, 0xffff29edu, 0xffff29e0u, 0xffff29c0u,
  0xffff29a0u, 0xffff2980u, 0xffff2960u, 0xffff2940u, 0xffff2920u, 0xffff2900u, 0xffff28e0u, 0xffff28c0u,
  0xffff28a0u, 0xffff2880u, 0xffff2860u, 0xffff2840u, 0xffff2840u, 0xffff2820u, 0xffff2800u, 0xffff27e0u,
  0xffff27c0u, 0xffff27a0u, 0xffff2780u, 0xffff2760u, 0xffff2740u, 0xffff2720u, 0xffff2700u, 0xffff26e0u,
  0xffff26c0u, 0xffff26a0u, 0xffff2694u, 0xffff2680u, 0xffff2660u, 0xffff2640u, 0xffff2620u, 0xffff2600u,
  0xffff25e0u, 0xffff25c0u, 0xffff25a0u, 0xffff2580u, 0xffff2560u, 0xffff2540u, 0xffff2520u, 0xffff2500u,
  0xffff24e7u, 0xffff24e0u, 0xffff24c0u, 0xffff24a0u, 0xffff2480u, 0xffff2460u, 0xffff2440u, 0xffff2420u,
  0xffff2400u, 0xffff23e0u, 0xffff23c0u, 0xffff23a0u, 0xffff2380u, 0xffff2360u, 0xffff2340u, 0xffff233au,
  0xffff2320u, 0xffff2300u, 0xffff22e0u, 0xffff22c0u, 0xffff22a0u, 0xffff2280u, 0xffff2260u, 0xffff2240u,
  0xffff2220u, 0xffff2200u, 0xffff21e0u, 0xffff21c0u, 0xffff21a0u, 0xffff218du, 0xffff2180u, 0xffff2160u,
  0xffff2140u, 0xffff2120u, 0xffff2100u, 0xffff20e0u, 0xffff20c0u, 0xffff20a0u, 0xffff2080u, 0xffff2060u,
  0xffff2054u, 0xffff2040u, 0xffff2020u, 0xffff2000u,
};
__device__ const unsigned int optjit_map_q8u[256] = {
  0x00000000u, 0x34ae7baau, 0x35500998u, 0x360e9b38u, 0x3692ccf6u, 0x36de4c51u, 0x3714e5d5u, 0x3783126eu,
  0x37e171a0u, 0x381fe868u, 0x384f1800u, 0x387e479au, 0x3896bb99u, 0x38ae5364u, 0x38c5eb31u, 0x3906594bu,
  0x394154cau, 0x397c5049u, 0x399ba5e4u, 0x39b923a2u, 0x39d6a163u, 0x39f41f22u, 0x3a08ce71u, 0x3a178d50u,
  0x3a264c30u, 0x3a350b10u, 0x3a43c9efu, 0x3a5288d0u, 0x3a6147afu, 0x3a70068eu, 0x3a7ec56eu, 0x3a958106u,
  0x3aba5e35u, 0x3adf3b64u, 0x3b020c4au, 0x3b147ae1u, 0x3b26e978u, 0x3b395810u, 0x3b4bc6a7u, 0x3b5e3540u,
  0x3b70a3d7u, 0x3b818937u, 0x3b8ac082u, 0x3b93f7cfu, 0x3b9d2f1au, 0x3ba66666u, 0x3baf9db2u, 0x3bb8d4fdu,
  0x3bc20c4au, 0x3bcb4395u, 0x3bd47ae1u, 0x3bddb22eu, 0x3be6e978u, 0x3bf020c5u, 0x3bf9580fu, 0x3c0147aeu,
  0x3c05e354u, 0x3c0a7ef9u, 0x3c0f1aa0u, 0x3c13b645u, 0x3c1851ebu, 0x3c1ced92u, 0x3c218937u, 0x3c2f5c2au,
  0x3c466667u, 0x3c5d70a3u, 0x3c747ae2u, 0x3c85c28fu, 0x3c9147afu, 0x3c9ccccdu, 0x3ca851ebu, 0x3cb3d70bu,
  0x3cbf5c29u, 0x3ccae147u, 0x3cd66667u, 0x3ce1eb87u, 0x3ced70a3u, 0x3cf8f5c3u, 0x3d023d70u, 0x3d080000u,
  0x3d0dc28fu, 0x3d13851fu, 0x3d1947afu, 0x3d1f0a3du, 0x3d24cccdu, 0x3d2a8f5cu, 0x3d3051ebu, 0x3d36147bu,
  0x3d3bd70au, 0x3d41999au, 0x3d475c28u, 0x3d4d1eb8u, 0x3d52e147u, 0x3d58a3d7u, 0x3d5e6667u, 0x3d6428f7u,
  0x3d69eb87u, 0x3d6fae15u, 0x3d7570a3u, 0x3d7b3333u, 0x3d807ae2u, 0x3d835c2au, 0x3d863d71u, 0x3d891eb8u,
  0x3d8c0000u, 0x3d8ee148u, 0x3d91c290u, 0x3d94a3d7u, 0x3d97851fu, 0x3d9a6667u, 0x3d9d47afu, 0x3da028f6u,
  0x3da30a3eu, 0x3da5eb85u, 0x3da8cccdu, 0x3dabae15u, 0x3dae8f5cu, 0x3db170a4u, 0x3db451ebu, 0x3db73333u,
  0x3dba147bu, 0x3dbcf5c3u, 0x3dbfd70bu, 0x3dc2b852u, 0x3dc5999au, 0x3dc87ae2u, 0x3dcb5c29u, 0x3dd40000u,
  0x3de26666u, 0x3df0cccdu, 0x3dff3333u, 0x3e06ccccu, 0x3e0e0000u, 0x3e153334u, 0x3e1c6666u, 0x3e23999au,
  0x3e2accccu, 0x3e320000u, 0x3e393334u, 0x3e406666u, 0x3e47999au, 0x3e4eccccu, 0x3e560000u, 0x3e5d3334u,
  0x3e646666u, 0x3e6b999au, 0x3e72ccccu, 0x3e7a0000u, 0x3e809999u, 0x3e843333u, 0x3e87cccdu, 0x3e8b6666u,
  0x3e8f0000u, 0x3e92999au, 0x3e963333u, 0x3e99ccccu, 0x3e9d6666u, 0x3ea10000u, 0x3ea4999au, 0x3ea83333u,
  0x3eabccccu, 0x3eaf6666u, 0x3eb30000u, 0x3eb6999au, 0x3eba3333u, 0x3ebdccccu, 0x3ec16666u, 0x3ec50000u,
  0x3ec8999au, 0x3ecc3333u, 0x3ecfccccu, 0x3ed36666u, 0x3ed70000u, 0x3eda999au, 0x3ede3333u, 0x3ee1ccccu,
  0x3ee56666u, 0x3ee90000u, 0x3eec999au, 0x3ef03333u, 0x3ef3ccccu, 0x3ef76666u, 0x3efb0000u, 0x3efe9999u,
  0x3f01199au, 0x3f02e666u, 0x3f04b333u, 0x3f068000u, 0x3f084cccu, 0x3f0a199au, 0x3f0be666u, 0x3f0db334u,
  0x3f0f8000u, 0x3f114ccdu, 0x3f13199au, 0x3f14e666u, 0x3f16b334u, 0x3f188000u, 0x3f1a4ccdu, 0x3f1c199au,
  0x3f1de666u, 0x3f1fb334u, 0x3f218000u, 0x3f234ccdu, 0x3f25199au, 0x3f26e666u, 0x3f28b334u, 0x3f2a8000u,
  0x3f2c4ccdu, 0x3f2e199au, 0x3f2fe666u, 0x3f31b334u, 0x3f338000u, 0x3f354ccdu, 0x3f37199au, 0x3f38e666u,
  0x3f3ab334u, 0x3f3c8000u, 0x3f3e4ccdu, 0x3f40199au, 0x3f41e666u, 0x3f43b334u, 0x3f458000u, 0x3f474cccu,
  0x3f49199au, 0x3f4ae666u, 0x3f4cb334u, 0x3f4e8000u, 0x3f504cccu, 0x3f52199au, 0x3f53e666u, 0x3f55b334u,
  0x3f578000u, 0x3f594cccu, 0x3f5b199au, 0x3f5ce666u, 0x3f5eb334u, 0x3f608000u, 0x3f624cccu, 0x3f64199au,
  0x3f65e666u, 0x3f67b334u, 0x3f698000u, 0x3f6b4cccu, 0x3f6d199au, 0x3f6ee666u, 0x3f70b334u, 0x3f728000u,
  0x3f744cccu, 0x3f76199au, 0x3f77e666u, 0x3f79b334u, 0x3f7b8000u, 0x3f7d4cccu, 0x3f7f199au, 0x3f800000u,
};
__device__ const unsigned int optjit_lut_q8u[2358] = {
  0x00000000u, 0xffffffe0u, 0xffffffc0u, 0xffffffa0u, 0xffffff80u, 0xffffff60u, 0xffffff40u, 0xffffff20u,
  0xffffff00u, 0xfffffee0u, 0xfffffec0u, 0xfffffea0u, 0xfffffe80u, 0xfffffe60u, 0xfffffe40u, 0xfffffe20u,
  0xfffffe00u, 0xfffffde0u, 0xfffffdc0u, 0xfffffda0u, 0xfffffd80u, 0xfffffd60u, 0xfffffd40u, 0xfffffd20u,
  0xfffffd00u, 0xfffffce0u, 0xfffffcc0u, 0xfffffca0u, 0xfffffc80u, 0xfffffc60u, 0xfffffc40u, 0xfffffc20u,
  0xfffffc00u, 0xfffffbe0u, 0xfffffbc0u, 0xfffffba0u, 0xfffffb80u, 0xfffffb60u, 0xfffffb40u, 0xfffffb20u,
  0xfffffb00u, 0xfffffae0u, 0xfffffac0u, 0xfffffaa0u, 0xfffffa80u, 0xfffffa60u, 0xfffffa40u, 0xfffffa20u,
  0xfffffa00u, 0xfffff9e0u, 0xfffff9c0u, 0xfffff9a0u, 0xfffff980u, 0xfffff960u, 0xfffff940u, 0xfffff920u,
  0xfffff900u, 0xfffff8e0u, 0xfffff8c0u, 0xfffff8a0u, 0xfffff880u, 0xfffff860u, 0xfffff840u, 0xfffff820u,
  0xfffff800u, 0xfffff7e0u, 0xfffff7c0u, 0xfffff7a0u, 0xfffff780u, 0xfffff760u, 0xfffff740u, 0xfffff720u,
  0xfffff700u, 0xfffff6e0u, 0xfffff6c0u, 0xfffff6a0u, 0xfffff680u, 0xfffff660u, 0xfffff640u, 0xfffff620u,
  0xfffff600u, 0xfffff5e0u, 0xfffff5c0u, 0xfffff5a0u, 0xfffff580u, 0xfffff560u, 0xfffff540u, 0xfffff520u,
  0xfffff500u, 0xfffff4e0u, 0xfffff4c0u, 0xfffff4a0u, 0xfffff480u, 0xfffff460u, 0xfffff440u, 0xfffff420u,
  0xfffff400u, 0xfffff3e0u, 0xfffff3c0u, 0xfffff3a0u, 0xfffff380u, 0xfffff360u, 0xfffff340u, 0xfffff320u,
  0xfffff300u, 0xfffff2e0u, 0xfffff2c0u, 0xfffff2a0u, 0xfffff280u, 0xfffff260u, 0xfffff240u, 0xfffff220u,
  0xfffff200u, 0xfffff1e0u, 0xfffff1c0u, 0xfffff1a0u, 0xfffff180u, 0xfffff160u, 0xfffff140u, 0xfffff120u,
  0xfffff100u, 0xfffff0e0u, 0xfffff0c0u, 0xfffff0a0u, 0xfffff080u, 0xfffff060u, 0xfffff040u, 0xfffff020u,
  0xfffff000u, 0xffffefe0u, 0xffffefc0u, 0xffffefa0u, 0xffffef80u, 0xffffef60u, 0xffffef40u, 0xffffef20u,
  0xffffef00u, 0xffffeee0u, 0xffffeec0u, 0xffffeea0u, 0xffffee80u, 0xffffee60u, 0xffffee40u, 0xffffee20u,
  0xffffee00u, 0xffffede0u, 0xffffedc0u, 0xffffeda0u, 0xffffed80u, 0xffffed60u, 0xffffed40u, 0xffffed20u,
  0xffffed00u, 0xffffece0u, 0xffffecc0u, 0xffffeca0u, 0xffffec80u, 0xffffec60u, 0xffffec40u, 0xffffec20u,
  0xffffec00u, 0xffffebe0u, 0xffffebc0u, 0xffffeba0u, 0xffffeb80u, 0xffffeb60u, 0xffffeb40u, 0xffffeb20u,
  0xffffeb00u, 0xffffeae0u, 0xffffeac0u, 0xffffeaa0u, 0xffffea80u, 0xffffea60u, 0xffffea40u, 0xffffea20u,
  0xffffea00u, 0xffffe9e0u, 0xffffe9c0u, 0xffffe9a0u, 0xffffe980u, 0xffffe960u, 0xffffe940u, 0xffffe920u,
  0xffffe900u, 0xffffe8e0u, 0xffffe8c0u, 0xffffe8a0u, 0xffffe880u, 0xffffe860u, 0xffffe840u, 0xffffe820u,
  0xffffe800u, 0xffffe7e0u, 0xffffe7c0u, 0xffffe7a0u, 0xffffe780u, 0xffffe760u, 0xffffe740u, 0xffffe720u,
  0xffffe700u, 0xffffe6e0u, 0xffffe6c0u, 0xffffe6a0u, 0xffffe680u, 0xffffe660u, 0xffffe640u, 0xffffe620u,
  0xffffe600u, 0xffffe5e0u, 0xffffe5c0u, 0xffffe5a0u, 0xffffe580u, 0xffffe560u, 0xffffe540u, 0xffffe520u,
  0xffffe500u, 0xffffe4e0u, 0xffffe4c0u, 0xffffe4a0u, 0xffffe480u, 0xffffe460u, 0xffffe440u, 0xffffe420u,
  0xffffe400u, 0xffffe3e0u, 0xffffe3c0u, 0xffffe3a0u, 0xffffe380u, 0xffffe360u, 0xffffe340u, 0xffffe320u,
  0xffffe300u, 0xffffe2e0u, 0xffffe2c0u, 0xffffe2a0u, 0xffffe280u, 0xffffe260u, 0xffffe240u, 0xffffe220u,
  0xffffe200u, 0xffffe1e0u, 0xffffe1c0u, 0xffffe1a0u, 0xffffe180u, 0xffffe160u, 0xffffe140u, 0xffffe120u,
  0xffffe100u, 0xffffe0e0u, 0xffffe0c0u, 0xffffe0a0u, 0xffffe080u, 0xffffe060u, 0xffffe040u, 0xffffe020u,
  0xffffe000u, 0xffffdfe0u, 0xffffdfc0u, 0xffffdfa0u, 0xffffdf80u, 0xffffdf60u, 0xffffdf40u, 0xffffdf20u,
  0xffffdf00u, 0xffffdee0u, 0xffffdec0u, 0xffffdea0u, 0xffffde80u, 0xffffde60u, 0xffffde40u, 0xffffde20u,
  0xffffde00u, 0xffffdde0u, 0xffffddc0u, 0xffffdda0u, 0xffffdd80u, 0xffffdd60u, 0xffffdd40u, 0xffffdd20u,
  0xffffdd00u, 0xffffdce0u, 0xffffdcc0u, 0xffffdca0u, 0xffffdc80u, 0xffffdc60u, 0xffffdc40u, 0xffffdc20u,
  0xffffdc00u, 0xffffdbe0u, 0xffffdbc0u, 0xffffdba0u, 0xffffdb80u, 0xffffdb60u, 0xffffdb40u, 0xffffdb20u,
  0xffffdb00u, 0xffffdae0u, 0xffffdac0u, 0xffffdaa0u, 0xffffda80u, 0xffffda60u, 0xffffda40u, 0xffffda20u,
  0xffffda00u, 0xffffd9e0u, 0xffffd9c0u, 0xffffd9a0u, 0xffffd980u, 0xffffd960u, 0xffffd940u, 0xffffd920u,
  0xffffd900u, 0xffffd8e0u, 0xffffd8c0u, 0xffffd8a0u, 0xffffd880u, 0xffffd860u, 0xffffd840u, 0xffffd820u,
  0xffffd800u, 0xffffd7e0u, 0xffffd7c0u, 0xffffd7a0u, 0xffffd780u, 0xffffd760u, 0xffffd740u, 0xffffd720u,
  0xffffd700u, 0xffffd6e0u, 0xffffd6c0u, 0xffffd6a0u, 0xffffd680u, 0xffffd660u, 0xffffd640u, 0xffffd620u,
  0xffffd600u, 0xffffd5e0u, 0xffffd5c0u, 0xffffd5a0u, 0xffffd580u, 0xffffd560u, 0xffffd540u, 0xffffd520u,
  0xffffd500u, 0xffffd4e0u, 0xffffd4c0u, 0xffffd4a0u, 0xffffd480u, 0xffffd460u, 0xffffd440u, 0xffffd420u,
  0xffffd400u, 0xffffd3e0u, 0xffffd3c0u, 0xffffd3a0u, 0xffffd380u, 0xffffd360u, 0xffffd340u, 0xffffd320u,
  0xffffd300u, 0xffffd2e0u, 0xffffd2c0u, 0xffffd2a0u, 0xffffd280u, 0xffffd260u, 0xffffd240u, 0xffffd220u,
  0xffffd200u, 0xffffd1e0u, 0xffffd1c0u, 0xffffd1a0u, 0xffffd180u, 0xffffd160u, 0xffffd140u, 0xffffd120u,
  0xffffd100u, 0xffffd0e0u, 0xffffd0c0u, 0xffffd0a0u, 0xffffd080u, 0xffffd060u, 0xffffd040u, 0xffffd020u,
  0xffffd000u, 0xffffcfe0u, 0xffffcfc0u, 0xffffcfa0u, 0xffffcf80u, 0xffffcf60u, 0xffffcf40u, 0xffffcf20u,
  0xffffcf00u, 0xffffcee0u, 0xffffcec0u, 0xffffcea0u, 0xffffce80u, 0xffffce60u, 0xffffce40u, 0xffffce20u,
  0xffffce00u, 0xffffcde0u, 0xffffcdc0u, 0xffffcda0u, 0xffffcd80u, 0xffffcd60u, 0xffffcd40u, 0xffffcd20u,
  0xffffcd00u, 0xffffcce0u, 0xffffccc0u, 0xffffcca0u, 0xffffcc80u, 0xffffcc60u, 0xffffcc40u, 0xffffcc20u,
  0xffffcc00u, 0xffffcbe0u, 0xffffcbc0u, 0xffffcba0u, 0xffffcb80u, 0xffffcb60u, 0xffffcb40u, 0xffffcb20u,
  0xffffcb00u, 0xffffcae0u, 0xffffcac0u, 0xffffcaa0u, 0xffffca80u, 0xffffca60u, 0xffffca40u, 0xffffca20u,
  0xffffca00u, 0xffffc9e0u, 0xffffc9c0u, 0xffffc9a0u, 0xffffc980u, 0xffffc960u, 0xffffc940u, 0xffffc920u,
  0xffffc900u, 0xffffc8e0u, 0xffffc8c0u, 0xffffc8a0u, 0xffffc880u, 0xffffc860u, 0xffffc840u, 0xffffc820u,
  0xffffc800u, 0xffffc7e0u, 0xffffc7c0u, 0xffffc7a0u, 0xffffc780u, 0xffffc760u, 0xffffc740u, 0xffffc720u,
  0xffffc700u, 0xffffc6e0u, 0xffffc6c0u, 0xffffc6a0u, 0xffffc680u, 0xffffc660u, 0xffffc640u, 0xffffc620u,
  0xffffc600u, 0xffffc5e0u, 0xffffc5c0u, 0xffffc5a0u, 0xffffc580u, 0xffffc560u, 0xffffc540u, 0xffffc520u,
  0xffffc500u, 0xffffc4e0u, 0xffffc4c0u, 0xffffc4a0u, 0xffffc480u, 0xffffc460u, 0xffffc440u, 0xffffc420u,
  0xffffc400u, 0xffffc3e0u, 0xffffc3c0u, 0xffffc3a0u, 0xffffc380u, 0xffffc360u, 0xffffc340u, 0xffffc320u,
  0xffffc300u, 0xffffc2e0u, 0xffffc2c0u, 0xffffc2a0u, 0xffffc280u, 0xffffc260u, 0xffffc240u, 0xffffc220u,
  0xffffc200u, 0xffffc1e0u, 0xffffc1c0u, 0xffffc1a0u, 0xffffc180u, 0xffffc160u, 0xffffc140u, 0xffffc120u,
  0xffffc100u, 0xffffc0e0u, 0xffffc0c0u, 0xffffc0a0u, 0xffffc080u, 0xffffc060u, 0xffffc040u, 0xffffc020u,
  0xffffc000u, 0xffffbfe0u, 0xffffbfc0u, 0xffffbfa0u, 0xffffbf80u, 0xffffbf60u, 0xffffbf40u, 0xffffbf20u,
  0xffffbf00u, 0xffffbee0u, 0xffffbec0u, 0xffffbea0u, 0xffffbe80u, 0xffffbe60u, 0xffffbe40u, 0xffffbe20u,
  0xffffbe00u, 0xffffbde0u, 0xffffbdc0u, 0xffffbda0u, 0xffffbd80u, 0xffffbd60u, 0xffffbd40u, 0xffffbd20u,
  0xffffbd00u, 0xffffbce0u, 0xffffbcc0u, 0xffffbca0u, 0xffffbc80u, 0xffffbc60u, 0xffffbc40u, 0xffffbc20u,
  0xffffbc00u, 0xffffbbe0u, 0xffffbbc0u, 0xffffbba0u, 0xffffbb80u, 0xffffbb60u, 0xffffbb40u, 0xffffbb20u,
  0xffffbb00u, 0xffffbae0u, 0xffffbac0u, 0xffffbaa0u, 0xffffba80u, 0xffffba60u, 0xffffba40u, 0xffffba20u,
  0xffffba00u, 0xffffb9e0u, 0xffffb9c0u, 0xffffb9a0u, 0xffffb980u, 0xffffb960u, 0xffffb940u, 0xffffb920u,
  0xffffb900u, 0xffffb8e0u, 0xffffb8c0u, 0xffffb8a0u, 0xffffb880u, 0xffffb860u, 0xffffb840u, 0xffffb820u,
  0xffffb800u, 0xffffb7e0u, 0xffffb7c0u, 0xffffb7a0u, 0xffffb780u, 0xffffb760u, 0xffffb740u, 0xffffb720u,
  0xffffb700u, 0xffffb6e0u, 0xffffb6c0u, 0xffffb6a0u, 0xffffb680u, 0xffffb660u, 0xffffb640u, 0xffffb620u,
  0xffffb600u, 0xffffb5e0u, 0xffffb5c0u, 0xffffb5a0u, 0xffffb580u, 0xffffb560u, 0xffffb540u, 0xffffb520u,
  0xffffb500u, 0xffffb4e0u, 0xffffb4c0u, 0xffffb4a0u, 0xffffb480u, 0xffffb460u, 0xffffb440u, 0xffffb420u,
  0xffffb400u, 0xffffb3e0u, 0xffffb3c0u, 0xffffb3a0u, 0xffffb380u, 0xffffb360u, 0xffffb340u, 0xffffb320u,
  0xffffb300u, 0xffffb2e0u, 0xffffb2c0u, 0xffffb2a0u, 0xffffb280u, 0xffffb260u, 0xffffb240u, 0xffffb220u,
  0xffffb200u, 0xffffb1e0u, 0xffffb1c0u, 0xffffb1a0u, 0xffffb180u, 0xffffb160u, 0xffffb140u, 0xffffb120u,
  0xffffb100u, 0xffffb0e0u, 0xffffb0c0u, 0xffffb0a0u, 0xffffb080u, 0xffffb060u, 0xffffb040u, 0xffffb020u,
  0xffffb000u, 0xffffafe0u, 0xffffafc0u, 0xffffafa0u, 0xffffaf80u, 0xffffaf60u, 0xffffaf40u, 0xffffaf20u,
  0xffffaf00u, 0xffffaee0u, 0xffffaec0u, 0xffffaea0u, 0xffffae80u, 0xffffae60u, 0xffffae40u, 0xffffae20u,
  0xffffae00u, 0xffffade0u, 0xffffadc0u, 0xffffada0u, 0xffffad80u, 0xffffad60u, 0xffffad40u, 0xffffad20u,
  0xffffad00u, 0xfffface0u, 0xffffacc0u, 0xffffaca0u, 0xffffac80u, 0xffffac60u, 0xffffac40u, 0xffffac20u,
  0xffffac00u, 0xffffabe0u, 0xffffabc0u, 0xffffaba0u, 0xffffab80u, 0xffffab60u, 0xffffab40u, 0xffffab20u,
  0xffffab00u, 0xffffaae0u, 0xffffaac0u, 0xffffaaa0u, 0xffffaa80u, 0xffffaa60u, 0xffffaa40u, 0xffffaa20u,
  0xffffaa00u, 0xffffa9e0u, 0xffffa9c0u, 0xffffa9a0u, 0xffffa980u, 0xffffa960u, 0xffffa940u, 0xffffa920u,
  0xffffa900u, 0xffffa8e0u, 0xffffa8c0u, 0xffffa8a0u, 0xffffa880u, 0xffffa860u, 0xffffa840u, 0xffffa820u,
  0xffffa800u, 0xffffa7e0u, 0xffffa7c0u, 0xffffa7a0u, 0xffffa780u, 0xffffa760u, 0xffffa740u, 0xffffa720u,
  0xffffa700u, 0xffffa6e0u, 0xffffa6c0u, 0xffffa6a0u, 0xffffa680u, 0xffffa660u, 0xffffa640u, 0xffffa620u,
  0xffffa600u, 0xffffa5e0u, 0xffffa5c0u, 0xffffa5a0u, 0xffffa580u, 0xffffa560u, 0xffffa540u, 0xffffa520u,
  0xffffa500u, 0xffffa4e0u, 0xffffa4c0u, 0xffffa4a0u, 0xffffa480u, 0xffffa460u, 0xffffa440u, 0xffffa420u,
  0xffffa400u, 0xffffa3e0u, 0xffffa3c0u, 0xffffa3a0u, 0xffffa380u, 0xffffa360u, 0xffffa340u, 0xffffa320u,
  0xffffa300u, 0xffffa2e0u, 0xffffa2c0u, 0xffffa2a0u, 0xffffa280u, 0xffffa260u, 0xffffa240u, 0xffffa220u,
  0xffffa200u, 0xffffa1e0u, 0xffffa1c0u, 0xffffa1a0u, 0xffffa180u, 0xffffa160u, 0xffffa140u, 0xffffa120u,
  0xffffa100u, 0xffffa0e0u, 0xffffa0c0u, 0xffffa0a0u, 0xffffa080u, 0xffffa060u, 0xffffa040u, 0xffffa020u,
  0xffffa000u, 0xffff9fe0u, 0xffff9fc0u, 0xffff9fa0u, 0xffff9f80u, 0xffff9f60u, 0xffff9f40u, 0xffff9f20u,
  0xffff9f00u, 0xffff9ee0u, 0xffff9ec0u, 0xffff9ea0u, 0xffff9e80u, 0xffff9e60u, 0xffff9e40u, 0xffff9e20u,
  0xffff9e00u, 0xffff9de0u, 0xffff9dc0u, 0xffff9da0u, 0xffff9d80u, 0xffff9d60u, 0xffff9d40u, 0xffff9d20u,
  0xffff9d00u, 0xffff9ce0u, 0xffff9cc0u, 0xffff9ca0u, 0xffff9c80u, 0xffff9c60u, 0xffff9c40u, 0xffff9c20u,
  0xffff9c00u, 0xffff9be0u, 0xffff9bc0u, 0xffff9ba0u, 0xffff9b80u, 0xffff9b60u, 0xffff9b40u, 0xffff9b20u,
  0xffff9b00u, 0xffff9ae0u, 0xffff9ac0u, 0xffff9aa0u, 0xffff9a80u, 0xffff9a60u, 0xffff9a40u, 0xffff9a20u,
  0xffff9a00u, 0xffff99e0u, 0xffff99c0u, 0xffff99a0u, 0xffff9980u, 0xffff9960u, 0xffff9940u, 0xffff9920u,
  0xffff9900u, 0xffff98e0u, 0xffff98c0u, 0xffff98a0u, 0xffff9880u, 0xffff9860u, 0xffff9840u, 0xffff9820u,
  0xffff9800u, 0xffff97e0u, 0xffff97c0u, 0xffff97a0u, 0xffff9780u, 0xffff9760u, 0xffff9740u, 0xffff9720u,
  0xffff9700u, 0xffff96e0u, 0xffff96c0u, 0xffff96a0u, 0xffff9680u, 0xffff9660u, 0xffff9640u, 0xffff9620u,
  0xffff9600u, 0xffff95e0u, 0xffff95c0u, 0xffff95a0u, 0xffff9580u, 0xffff9560u, 0xffff9540u, 0xffff9520u,
  0xffff9500u, 0xffff94e0u, 0xffff94c0u, 0xffff94a0u, 0xffff9480u, 0xffff9460u, 0xffff9440u, 0xffff9420u,
  0xffff9400u, 0xffff93e0u, 0xffff93c0u, 0xffff93a0u, 0xffff9380u, 0xffff9360u, 0xffff9340u, 0xffff9320u,
  0xffff9300u, 0xffff92e0u, 0xffff92c0u, 0xffff92a0u, 0xffff9280u, 0xffff9260u, 0xffff9240u, 0xffff9220u,
  0xffff9200u, 0xffff91e0u, 0xffff91c0u, 0xffff91a0u, 0xffff9180u, 0xffff9160u, 0xffff9140u, 0xffff9120u,
  0xffff9100u, 0xffff90e0u, 0xffff90c0u, 0xffff90a0u, 0xffff9080u, 0xffff9060u, 0xffff9040u, 0xffff9020u,
  0xffff9000u, 0xffff8fe0u, 0xffff8fc0u, 0xffff8fa0u, 0xffff8f80u, 0xffff8f60u, 0xffff8f40u, 0xffff8f20u,
  0xffff8f00u, 0xffff8ee0u, 0xffff8ec0u, 0xffff8ea0u, 0xffff8e80u, 0xffff8e60u, 0xffff8e40u, 0xffff8e20u,
  0xffff8e00u, 0xffff8de0u, 0xffff8dc0u, 0xffff8da0u, 0xffff8d80u, 0xffff8d60u, 0xffff8d40u, 0xffff8d20u,
  0xffff8d00u, 0xffff8ce0u, 0xffff8cc0u, 0xffff8ca0u, 0xffff8c80u, 0xffff8c60u, 0xffff8c40u, 0xffff8c20u,
  0xffff8c00u, 0xffff8be0u, 0xffff8bc0u, 0xffff8ba0u, 0xffff8b80u, 0xffff8b60u, 0xffff8b40u, 0xffff8b20u,
  0xffff8b00u, 0xffff8ae0u, 0xffff8ac0u, 0xffff8aa0u, 0xffff8a80u, 0xffff8a60u, 0xffff8a40u, 0xffff8a20u,
  0xffff8a00u, 0xffff89e0u, 0xffff89c0u, 0xffff89a0u, 0xffff8980u, 0xffff8960u, 0xffff8940u, 0xffff8920u,
  0xffff8900u, 0xffff88e0u, 0xffff88c0u, 0xffff88a0u, 0xffff8880u, 0xffff8860u, 0xffff8840u, 0xffff8820u,
  0xffff8800u, 0xffff87e0u, 0xffff87c0u, 0xffff87a0u, 0xffff8780u, 0xffff8760u, 0xffff8740u, 0xffff8720u,
  0xffff8700u, 0xffff86e0u, 0xffff86c0u, 0xffff86a0u, 0xffff8680u, 0xffff8660u, 0xffff8640u, 0xffff8620u,
  0xffff8600u, 0xffff85e0u, 0xffff85c0u, 0xffff85a0u, 0xffff8580u, 0xffff8560u, 0xffff8540u, 0xffff8520u,
  0xffff8500u, 0xffff84e0u, 0xffff84c0u, 0xffff84a0u, 0xffff8480u, 0xffff8460u, 0xffff8440u, 0xffff8420u,
  0xffff8400u, 0xffff83e0u, 0xffff83c0u, 0xffff83a0u, 0xffff8380u, 0xffff8360u, 0xffff8340u, 0xffff8320u,
  0xffff8300u, 0xffff82e0u, 0xffff82c0u, 0xffff82a0u, 0xffff8280u, 0xffff8260u, 0xffff8240u, 0xffff8220u,
  0xffff8200u, 0xffff81e0u, 0xffff81c0u, 0xffff81a0u, 0xffff8180u, 0xffff8160u, 0xffff8140u, 0xffff8120u,
  0xffff8100u, 0xffff80e0u, 0xffff80c0u, 0xffff80a0u, 0xffff8080u, 0xffff8060u, 0xffff8040u, 0xffff8020u,
  0xffff80e0u, 0xffff813fu, 0xffff817eu, 0xffff81bdu, 0xffff81dcu, 0xffff81fbu, 0xffff81fau, 0xffff8219u,
  0xffff8218u, 0xffff8237u, 0xffff8236u, 0xffff8255u, 0xffff8274u, 0xffff8273u, 0xffff8292u, 0xffff8291u,
  0xffff82b0u, 0xffff82afu, 0xffff82ceu, 0xffff82cdu, 0xffff82ecu, 0xffff82ebu, 0xffff830au, 0xffff8309u,
  0xffff8328u, 0xffff8347u, 0xffff8346u, 0xffff8365u, 0xffff8364u, 0xffff8383u, 0xffff8382u, 0xffff83a1u,
  0xffff83a0u, 0xffff839fu, 0xffff839eu, 0xffff83bdu, 0xffff83bcu, 0xffff83bbu, 0xffff83bau, 0xffff83b9u,
  0xffff83b8u, 0xffff83b7u, 0xffff83d6u, 0xffff83d5u, 0xffff83d4u, 0xffff83d3u, 0xffff83d2u, 0xffff83d1u,
  0xffff83d0u, 0xffff83cfu, 0xffff83ceu, 0xffff83edu, 0xffff83ecu, 0xffff83ebu, 0xffff83eau, 0xffff83e9u,
  0xffff83e8u, 0xffff83e7u, 0xffff83e6u, 0xffff83e5u, 0xffff8404u, 0xffff8403u, 0xffff8402u, 0xffff8401u,
  0xffff8400u, 0xffff83ffu, 0xffff83feu, 0xffff83fdu, 0xffff83fcu, 0xffff83fbu, 0xffff841au, 0xffff8419u,
  0xffff8418u, 0xffff8417u, 0xffff8416u, 0xffff8415u, 0xffff8414u, 0xffff8413u, 0xffff8412u, 0xffff8431u,
  0xffff8430u, 0xffff842fu, 0xffff842eu, 0xffff842du, 0xffff842cu, 0xffff842bu, 0xffff842au, 0xffff8429u,
  0xffff8448u, 0xffff8447u, 0xffff8446u, 0xffff8445u, 0xffff8444u, 0xffff8443u, 0xffff8442u, 0xffff8441u,
  0xffff8440u, 0xffff845fu, 0xffff845eu, 0xffff845du, 0xffff845cu, 0xffff845bu, 0xffff845au, 0xffff8459u,
  0xffff8458u, 0xffff8457u, 0xffff8476u, 0xffff8475u, 0xffff8474u, 0xffff8473u, 0xffff8472u, 0xffff8471u,
  0xffff8470u, 0xffff846fu, 0xffff846eu, 0xffff846du, 0xffff848cu, 0xffff848bu, 0xffff848au, 0xffff8489u,
  0xffff8488u, 0xffff8487u, 0xffff8486u, 0xffff8485u, 0xffff8484u, 0xffff84a3u, 0xffff84a2u, 0xffff84a1u,
  0xffff84a0u, 0xffff849fu, 0xffff849eu, 0xffff849du, 0xffff849cu, 0xffff849bu, 0xffff84bau, 0xffff84b9u,
  0xffff84b8u, 0xffff84b7u, 0xffff84b6u, 0xffff84b5u, 0xffff84b4u, 0xffff84b3u, 0xffff84b2u, 0xffff84d1u,
  0xffff84d0u, 0xffff84cfu, 0xffff84ceu, 0xffff84cdu, 0xffff84ccu, 0xffff84cbu, 0xffff84cau, 0xffff84c9u,
  0xffff84c8u, 0xffff84e7u, 0xffff84e6u, 0xffff84e5u, 0xffff84e4u, 0xffff84e3u, 0xffff84e2u, 0xffff84e1u,
  0xffff84e0u, 0xffff84dfu, 0xffff84feu, 0xffff84fdu, 0xffff84fcu, 0xffff84fbu, 0xffff84fau, 0xffff84f9u,
  0xffff84f8u, 0xffff84f7u, 0xffff84f6u, 0xffff8515u, 0xffff8514u, 0xffff8513u, 0xffff8512u, 0xffff8511u,
  0xffff8510u, 0xffff850fu, 0xffff850eu, 0xffff850du, 0xffff852cu, 0xffff852bu, 0xffff852au, 0xffff8529u,
  0xffff8528u, 0xffff8527u, 0xffff8526u, 0xffff8525u, 0xffff8524u, 0xffff8543u, 0xffff8542u, 0xffff8541u,
  0xffff8540u, 0xffff853fu, 0xffff853eu, 0xffff853du, 0xffff853cu, 0xffff853bu, 0xffff853au, 0xffff8559u,
  0xffff8558u, 0xffff8557u, 0xffff8556u, 0xffff8555u, 0xffff8554u, 0xffff8553u, 0xffff8552u, 0xffff8551u,
  0xffff8570u, 0xffff856fu, 0xffff856eu, 0xffff856du, 0xffff856cu, 0xffff856bu, 0xffff856au, 0xffff8569u,
  0xffff8568u, 0xffff8587u, 0xffff8586u, 0xffff8585u, 0xffff8584u, 0xffff8583u, 0xffff8582u, 0xffff8581u,
  0xffff8580u, 0xffff857fu, 0xffff859eu, 0xffff859du, 0xffff859cu, 0xffff859bu, 0xffff859au, 0xffff8599u,
  0xffff8598u, 0xffff8597u, 0xffff8596u, 0xffff8595u, 0xffff85b4u, 0xffff85b3u, 0xffff85b2u, 0xffff85b1u,
  0xffff85b0u, 0xffff85afu, 0xffff85aeu, 0xffff85adu, 0xffff85acu, 0xffff85cbu, 0xffff85cau, 0xffff85c9u,
  0xffff85c8u, 0xffff85c7u, 0xffff85c6u, 0xffff85c5u, 0xffff85c4u, 0xffff85c3u, 0xffff85e2u, 0xffff85e1u,
  0xffff85e0u, 0xffff85dfu, 0xffff85deu, 0xffff85ddu, 0xffff85dcu, 0xffff85dbu, 0xffff85dau, 0xffff85f9u,
  0xffff85f8u, 0xffff85f7u, 0xffff85f6u, 0xffff85f5u, 0xffff85f4u, 0xffff85f3u, 0xffff85f2u, 0xffff85f1u,
  0xffff8610u, 0xffff860fu, 0xffff860eu, 0xffff860du, 0xffff860cu, 0xffff860bu, 0xffff860au, 0xffff8609u,
  0xffff8608u, 0xffff8607u, 0xffff8626u, 0xffff8625u, 0xffff8624u, 0xffff8623u, 0xffff8622u, 0xffff8621u,
  0xffff8620u, 0xffff861fu, 0xffff861eu, 0xffff863du, 0xffff863cu, 0xffff863bu, 0xffff863au, 0xffff8639u,
  0xffff8638u, 0xffff8637u, 0xffff8636u, 0xffff8635u, 0xffff8654u, 0xffff8653u, 0xffff8652u, 0xffff8651u,
  0xffff8650u, 0xffff864fu, 0xffff864eu, 0xffff864du, 0xffff864cu, 0xffff866bu, 0xffff866au, 0xffff8669u,
  0xffff8668u, 0xffff8667u, 0xffff8666u, 0xffff8665u, 0xffff8664u, 0xffff8663u, 0xffff8682u, 0xffff8681u,
  0xffff868fu, 0xffff868au, 0xffff8680u, 0xffff867cu, 0xffff866eu, 0xffff8660u, 0xffff8660u, 0xffff8652u,
  0xffff8644u, 0xffff8640u, 0xffff8636u, 0xffff8628u, 0xffff8620u, 0xffff861au, 0xffff860cu, 0xffff8600u,
  0xffff85fdu, 0xffff85efu, 0xffff85e1u, 0xffff85e0u, 0xffff85d3u, 0xffff85c5u, 0xffff85c0u, 0xffff85b7u,
  0xffff85a9u, 0xffff85a0u, 0xffff859bu, 0xffff858du, 0xffff8580u, 0xffff857fu, 0xffff8571u, 0xffff8563u,
  0xffff8560u, 0xffff8554u, 0xffff8546u, 0xffff8540u, 0xffff8538u, 0xffff852au, 0xffff8520u, 0xffff851cu,
  0xffff850eu, 0xffff8500u, 0xffff8500u, 0xffff84f2u, 0xffff84e4u, 0xffff84e0u, 0xffff84d6u, 0xffff84c8u,
  0xffff84c0u, 0xffff84bau, 0xffff84acu, 0xffff84a0u, 0xffff849du, 0xffff848fu, 0xffff8481u, 0xffff8480u,
  0xffff8473u, 0xffff8465u, 0xffff8460u, 0xffff8457u, 0xffff8449u, 0xffff8440u, 0xffff843bu, 0xffff842du,
  0xffff8420u, 0xffff841fu, 0xffff8411u, 0xffff8403u, 0xffff8400u, 0xffff83f5u, 0xffff83e6u, 0xffff83e0u,
  0xffff83d8u, 0xffff83cau, 0xffff83c0u, 0xffff83bcu, 0xffff83aeu, 0xffff83a0u, 0xffff83a0u, 0xffff8392u,
  0xffff8384u, 0xffff8380u, 0xffff8376u, 0xffff8368u, 0xffff8360u, 0xffff835au, 0xffff834cu, 0xffff8340u,
  0xffff833du, 0xffff832fu, 0xffff8321u, 0xffff8320u, 0xffff8300u, 0xffff82e5u, 0xffff82e0u, 0xffff82c0u,
  0xffff82a0u, 0xffff8280u, 0xffff8260u, 0xffff824du, 0xffff8240u, 0xffff8220u, 0xffff8200u, 0xffff81e0u,
  0xffff81c0u, 0xffff81a0u, 0xffff8186u, 0xffff8180u, 0xffff8160u, 0xffff8140u, 0xffff8120u, 0xffff8100u,
  0xffff80e0u, 0xffff80c0u, 0xffff80c0u, 0xffff80a0u, 0xffff8080u, 0xffff8060u, 0xffff8040u, 0xffff8020u,
  0xffff8000u, 0xffff7ffau, 0xffff7fe0u, 0xffff7fc0u, 0xffff7fa0u, 0xffff7f80u, 0xffff7f60u, 0xffff7f40u,
  0xffff7f33u, 0xffff7f20u, 0xffff7f00u, 0xffff7ee0u, 0xffff7ec0u, 0xffff7ea0u, 0xffff7e80u, 0xffff7e6du,
  0xffff7e60u, 0xffff7e40u, 0xffff7e20u, 0xffff7e00u, 0xffff7de0u, 0xffff7dc0u, 0xffff7da6u, 0xffff7da0u,
  0xffff7d80u, 0xffff7d60u, 0xffff7d40u, 0xffff7d20u, 0xffff7d00u, 0xffff7ce0u, 0xffff7ce0u, 0xffff7cc0u,
  0xffff7ca0u, 0xffff7c80u, 0xffff7c60u, 0xffff7c40u, 0xffff7c20u, 0xffff7c1au, 0xffff7c00u, 0xffff7be0u,
  0xffff7bc0u, 0xffff7ba0u, 0xffff7b80u, 0xffff7b60u, 0xffff7b53u, 0xffff7b40u, 0xffff7b20u, 0xffff7b00u,
  0xffff7ae0u, 0xffff7ac0u, 0xffff7aa0u, 0xffff7a8du, 0xffff7a80u, 0xffff7a60u, 0xffff7a40u, 0xffff7a20u,
  0xffff7a00u, 0xffff79e0u, 0xffff79c6u, 0xffff79c0u, 0xffff79a0u, 0xffff7980u, 0xffff7960u, 0xffff7940u,
  0xffff7920u, 0xffff7900u, 0xffff7900u, 0xffff78e0u, 0xffff78c0u, 0xffff78a0u, 0xffff7880u, 0xffff7860u,
  0xffff7840u, 0xffff783au, 0xffff7820u, 0xffff7800u, 0xffff77e0u, 0xffff77c0u, 0xffff77a0u, 0xffff7780u,
  0xffff7773u, 0xffff7760u, 0xffff7740u, 0xffff7720u, 0xffff7700u, 0xffff76e0u, 0xffff76c0u, 0xffff76adu,
  0xffff76a0u, 0xffff7680u, 0xffff7660u, 0xffff7640u, 0xffff7620u, 0xffff7600u, 0xffff75e7u, 0xffff75e0u,
  0xffff75c0u, 0xffff75a0u, 0xffff7580u, 0xffff7560u, 0xffff7540u, 0xffff7520u, 0xffff7520u, 0xffff7500u,
  0xffff74e0u, 0xffff74c0u, 0xffff74a0u, 0xffff7480u, 0xffff7460u, 0xffff745au, 0xffff7440u, 0xffff7420u,
  0xffff7400u, 0xffff73e0u, 0xffff73c0u, 0xffff73a0u, 0xffff7393u, 0xffff7380u, 0xffff7360u, 0xffff7340u,
  0xffff7320u, 0xffff7300u, 0xffff72e0u, 0xffff72cdu, 0xffff72c0u, 0xffff72a0u, 0xffff7280u, 0xffff7260u,
  0xffff7240u, 0xffff7220u, 0xffff7207u, 0xffff7200u, 0xffff71e0u, 0xffff71c0u, 0xffff71a0u, 0xffff7180u,
  0xffff7160u, 0xffff7140u, 0xffff7140u, 0xffff7120u, 0xffff7100u, 0xffff70e0u, 0xffff70c0u, 0xffff70a0u,
  0xffff7080u, 0xffff707au, 0xffff7060u, 0xffff7040u, 0xffff7020u, 0xffff7000u, 0xffff6fe0u, 0xffff6fc0u,
  0xffff6fb3u, 0xffff6fa0u, 0xffff6f80u, 0xffff6f60u, 0xffff6f40u, 0xffff6f20u, 0xffff6f00u, 0xffff6eedu,
  0xffff6ee0u, 0xffff6ec0u, 0xffff6ea0u, 0xffff6e80u, 0xffff6e60u, 0xffff6e40u, 0xffff6e27u, 0xffff6e20u,
  0xffff6e00u, 0xffff6de0u, 0xffff6dc0u, 0xffff6da0u, 0xffff6d80u, 0xffff6d60u, 0xffff6d60u, 0xffff6d40u,
  0xffff6d20u, 0xffff6d00u, 0xffff6ce0u, 0xffff6cc0u, 0xffff6ca0u, 0xffff6c9au, 0xffff6c80u, 0xffff6c60u,
  0xffff6c40u, 0xffff6c20u, 0xffff6c00u, 0xffff6be0u, 0xffff6bd3u, 0xffff6bc0u, 0xffff6ba0u, 0xffff6b80u,
  0xffff6b60u, 0xffff6b40u, 0xffff6b20u, 0xffff6b0du, 0xffff6b00u, 0xffff6ae0u, 0xffff6ac0u, 0xffff6aa0u,
  0xffff6a80u, 0xffff6a60u, 0xffff6a47u, 0xffff6a40u, 0xffff6a20u, 0xffff6a00u, 0xffff69e0u, 0xffff69c0u,
  0xffff69a0u, 0xffff6980u, 0xffff6980u, 0xffff6960u, 0xffff6940u, 0xffff6920u, 0xffff6900u, 0xffff68e0u,
  0xffff68c0u, 0xffff68bau, 0xffff68a0u, 0xffff6880u, 0xffff6860u, 0xffff6840u, 0xffff6820u, 0xffff6800u,
  0xffff67f3u, 0xffff67e0u, 0xffff67c0u, 0xffff67a0u, 0xffff6780u, 0xffff6760u, 0xffff6740u, 0xffff672du,
  0xffff6720u, 0xffff6700u, 0xffff66e0u, 0xffff66c0u, 0xffff66a0u, 0xffff6680u, 0xffff6667u, 0xffff6660u,
  0xffff6640u, 0xffff6620u, 0xffff6600u, 0xffff65e0u, 0xffff65c0u, 0xffff65a0u, 0xffff65a0u, 0xffff6580u,
  0xffff6560u, 0xffff6540u, 0xffff6520u, 0xffff6500u, 0xffff64e0u, 0xffff64dau, 0xffff64c0u, 0xffff64a0u,
  0xffff6480u, 0xffff6460u, 0xffff6440u, 0xffff6420u, 0xffff6413u, 0xffff6400u, 0xffff63e0u, 0xffff63c0u,
  0xffff63a0u, 0xffff6380u, 0xffff6360u, 0xffff634du, 0xffff6340u, 0xffff6320u, 0xffff6300u, 0xffff62e0u,
  0xffff62c0u, 0xffff62a0u, 0xffff6287u, 0xffff6280u, 0xffff6260u, 0xffff6240u, 0xffff6220u, 0xffff6200u,
  0xffff61e0u, 0xffff61c0u, 0xffff61c0u, 0xffff61a0u, 0xffff6180u, 0xffff6160u, 0xffff6140u, 0xffff6120u,
  0xffff6100u, 0xffff60fau, 0xffff60e0u, 0xffff60c0u, 0xffff60a0u, 0xffff6080u, 0xffff6060u, 0xffff6040u,
  0xffff6033u, 0xffff6020u, 0xffff6000u, 0xffff5fe0u, 0xffff5fc0u, 0xffff5fa0u, 0xffff5f80u, 0xffff5f6du,
  0xffff5f60u, 0xffff5f40u, 0xffff5f20u, 0xffff5f00u, 0xffff5ee0u, 0xffff5ec0u, 0xffff5ea7u, 0xffff5ea0u,
  0xffff5e80u, 0xffff5e60u, 0xffff5e40u, 0xffff5e20u, 0xffff5e00u, 0xffff5de0u, 0xffff5de0u, 0xffff5dc0u,
  0xffff5da0u, 0xffff5d80u, 0xffff5d60u, 0xffff5d40u, 0xffff5d20u, 0xffff5d1au, 0xffff5d00u, 0xffff5ce0u,
  0xffff5cc0u, 0xffff5ca0u, 0xffff5c80u, 0xffff5c60u, 0xffff5c53u, 0xffff5c40u, 0xffff5c20u, 0xffff5c00u,
  0xffff5be0u, 0xffff5bc0u, 0xffff5ba0u, 0xffff5b8du, 0xffff5b80u, 0xffff5b60u, 0xffff5b40u, 0xffff5b20u,
  0xffff5b00u, 0xffff5ae0u, 0xffff5ac7u, 0xffff5ac0u, 0xffff5aa0u, 0xffff5a80u, 0xffff5a60u, 0xffff5a40u,
  0xffff5a20u, 0xffff5a00u, 0xffff5a00u, 0xffff59e0u, 0xffff59c0u, 0xffff59a0u, 0xffff5980u, 0xffff5960u,
  0xffff5940u, 0xffff593au, 0xffff5920u, 0xffff5900u, 0xffff58e0u, 0xffff58c0u, 0xffff58a0u, 0xffff5880u,
  0xffff5873u, 0xffff5860u, 0xffff5840u, 0xffff5820u, 0xffff5800u, 0xffff57e0u, 0xffff57c0u, 0xffff57adu,
  0xffff57a0u, 0xffff5780u, 0xffff5760u, 0xffff5740u, 0xffff5720u, 0xffff5700u, 0xffff56e7u, 0xffff56e0u,
  0xffff56c0u, 0xffff56a0u, 0xffff5680u, 0xffff5660u, 0xffff5640u, 0xffff5620u, 0xffff5620u, 0xffff5600u,
  0xffff55e0u, 0xffff55c0u, 0xffff55a0u, 0xffff5580u, 0xffff5560u, 0xffff555au, 0xffff5540u, 0xffff5520u,
  0xffff5500u, 0xffff54e0u, 0xffff54c0u, 0xffff54a0u, 0xffff5493u, 0xffff5480u, 0xffff5460u, 0xffff5440u,
  0xffff5420u, 0xffff5400u, 0xffff53e0u, 0xffff53cdu, 0xffff53c0u, 0xffff53a0u, 0xffff5380u, 0xffff5360u,
  0xffff5340u, 0xffff5320u, 0xffff5307u, 0xffff5300u, 0xffff52e0u, 0xffff52c0u, 0xffff52a0u, 0xffff5280u,
  0xffff5260u, 0xffff5240u, 0xffff5240u, 0xffff5220u, 0xffff5200u, 0xffff51e0u, 0xffff51c0u, 0xffff51a0u,
  0xffff5180u, 0xffff517au, 0xffff5160u, 0xffff5140u, 0xffff5120u, 0xffff5100u, 0xffff50e0u, 0xffff50c0u,
  0xffff50b3u, 0xffff50a0u, 0xffff5080u, 0xffff5060u, 0xffff5040u, 0xffff5020u, 0xffff5000u, 0xffff4fedu,
  0xffff4fe0u, 0xffff4fc0u, 0xffff4fa0u, 0xffff4f80u, 0xffff4f60u, 0xffff4f40u, 0xffff4f27u, 0xffff4f20u,
  0xffff4f00u, 0xffff4ee0u, 0xffff4ec0u, 0xffff4ea0u, 0xffff4e80u, 0xffff4e60u, 0xffff4e60u, 0xffff4e40u,
  0xffff4e20u, 0xffff4e00u, 0xffff4de0u, 0xffff4dc0u, 0xffff4da0u, 0xffff4d9au, 0xffff4d80u, 0xffff4d60u,
  0xffff4d40u, 0xffff4d20u, 0xffff4d00u, 0xffff4ce0u, 0xffff4cd3u, 0xffff4cc0u, 0xffff4ca0u, 0xffff4c80u,
  0xffff4c60u, 0xffff4c40u, 0xffff4c20u, 0xffff4c0du, 0xffff4c00u, 0xffff4be0u, 0xffff4bc0u, 0xffff4ba0u,
  0xffff4b80u, 0xffff4b60u, 0xffff4b47u, 0xffff4b40u, 0xffff4b20u, 0xffff4b00u, 0xffff4ae0u, 0xffff4ac0u,
  0xffff4aa0u, 0xffff4a80u, 0xffff4a80u, 0xffff4a60u, 0xffff4a40u, 0xffff4a20u, 0xffff4a00u, 0xffff49e0u,
  0xffff49c0u, 0xffff49bau, 0xffff49a0u, 0xffff4980u, 0xffff4960u, 0xffff4940u, 0xffff4920u, 0xffff4900u,
  0xffff48f4u, 0xffff48e0u, 0xffff48c0u, 0xffff48a0u, 0xffff4880u, 0xffff4860u, 0xffff4840u, 0xffff482du,
  0xffff4820u, 0xffff4800u, 0xffff47e0u, 0xffff47c0u, 0xffff47a0u, 0xffff4780u, 0xffff4767u, 0xffff4760u,
  0xffff4740u, 0xffff4720u, 0xffff4700u, 0xffff46e0u, 0xffff46c0u, 0xffff46a0u, 0xffff46a0u, 0xffff4680u,
  0xffff4660u, 0xffff4640u, 0xffff4620u, 0xffff4600u, 0xffff45e0u, 0xffff45dau, 0xffff45c0u, 0xffff45a0u,
  0xffff4580u, 0xffff4560u, 0xffff4540u, 0xffff4520u, 0xffff4514u, 0xffff4500u, 0xffff44e0u, 0xffff44c0u,
  0xffff44a0u, 0xffff4480u, 0xffff4460u, 0xffff444du, 0xffff4440u, 0xffff4420u, 0xffff4400u, 0xffff43e0u,
  0xffff43c0u, 0xffff43a0u, 0xffff4387u, 0xffff4380u, 0xffff4360u, 0xffff4340u, 0xffff4320u, 0xffff4300u,
  0xffff42e0u, 0xffff42c0u, 0xffff42c0u, 0xffff42a0u, 0xffff4280u, 0xffff4260u, 0xffff4240u, 0xffff4220u,
  0xffff4200u, 0xffff41fau, 0xffff41e0u, 0xffff41c0u, 0xffff41a0u, 0xffff4180u, 0xffff4160u, 0xffff4140u,
  0xffff4134u, 0xffff4120u, 0xffff4100u, 0xffff40e0u, 0xffff40c0u, 0xffff40a0u, 0xffff4080u, 0xffff406du,
  0xffff4060u, 0xffff4040u, 0xffff4020u, 0xffff4000u, 0xffff3fe0u, 0xffff3fc0u, 0xffff3fa7u, 0xffff3fa0u,
  0xffff3f80u, 0xffff3f60u, 0xffff3f40u, 0xffff3f20u, 0xffff3f00u, 0xffff3ee0u, 0xffff3ee0u, 0xffff3ec0u,
  0xffff3ea0u, 0xffff3e80u, 0xffff3e60u, 0xffff3e40u, 0xffff3e20u, 0xffff3e1au, 0xffff3e00u, 0xffff3de0u,
  0xffff3dc0u, 0xffff3da0u, 0xffff3d80u, 0xffff3d60u, 0xffff3d54u, 0xffff3d40u, 0xffff3d20u, 0xffff3d00u,
  0xffff3ce0u, 0xffff3cc0u, 0xffff3ca0u, 0xffff3c8du, 0xffff3c80u, 0xffff3c60u, 0xffff3c40u, 0xffff3c20u,
  0xffff3c00u, 0xffff3be0u, 0xffff3bc7u, 0xffff3bc0u, 0xffff3ba0u, 0xffff3b80u, 0xffff3b60u, 0xffff3b40u,
  0xffff3b20u, 0xffff3b00u, 0xffff3b00u, 0xffff3ae0u, 0xffff3ac0u, 0xffff3aa0u, 0xffff3a80u, 0xffff3a60u,
  0xffff3a40u, 0xffff3a3au, 0xffff3a20u, 0xffff3a00u, 0xffff39e0u, 0xffff39c0u, 0xffff39a0u, 0xffff3980u,
  0xffff3974u, 0xffff3960u, 0xffff3940u, 0xffff3920u, 0xffff3900u, 0xffff38e0u, 0xffff38c0u, 0xffff38adu,
  0xffff38a0u, 0xffff3880u, 0xffff3860u, 0xffff3840u, 0xffff3820u, 0xffff3800u, 0xffff37e7u, 0xffff37e0u,
  0xffff37c0u, 0xffff37a0u, 0xffff3780u, 0xffff3760u, 0xffff3740u, 0xffff3720u, 0xffff3720u, 0xffff3700u,
  0xffff36e0u, 0xffff36c0u, 0xffff36a0u, 0xffff3680u, 0xffff3660u, 0xffff365au, 0xffff3640u, 0xffff3620u,
  0xffff3600u, 0xffff35e0u, 0xffff35c0u, 0xffff35a0u, 0xffff3594u, 0xffff3580u, 0xffff3560u, 0xffff3540u,
  0xffff3520u, 0xffff3500u, 0xffff34e0u, 0xffff34cdu, 0xffff34c0u, 0xffff34a0u, 0xffff3480u, 0xffff3460u,
  0xffff3440u, 0xffff3420u, 0xffff3407u, 0xffff3400u, 0xffff33e0u, 0xffff33c0u, 0xffff33a0u, 0xffff3380u,
  0xffff3360u, 0xffff3340u, 0xffff3340u, 0xffff3320u, 0xffff3300u, 0xffff32e0u, 0xffff32c0u, 0xffff32a0u,
  0xffff3280u, 0xffff327au, 0xffff3260u, 0xffff3240u, 0xffff3220u, 0xffff3200u, 0xffff31e0u, 0xffff31c0u,
  0xffff31b4u, 0xffff31a0u, 0xffff3180u, 0xffff3160u, 0xffff3140u, 0xffff3120u, 0xffff3100u, 0xffff30edu,
  0xffff30e0u, 0xffff30c0u, 0xffff30a0u, 0xffff3080u, 0xffff3060u, 0xffff3040u, 0xffff3027u, 0xffff3020u,
  0xffff3000u, 0xffff2fe0u, 0xffff2fc0u, 0xffff2fa0u, 0xffff2f80u, 0xffff2f60u, 0xffff2f60u, 0xffff2f40u,
  0xffff2f20u, 0xffff2f00u, 0xffff2ee0u, 0xffff2ec0u, 0xffff2ea0u, 0xffff2e9au, 0xffff2e80u, 0xffff2e60u,
  0xffff2e40u, 0xffff2e20u, 0xffff2e00u, 0xffff2de0u, 0xffff2dd4u, 0xffff2dc0u, 0xffff2da0u, 0xffff2d80u,
  0xffff2d60u, 0xffff2d40u, 0xffff2d20u, 0xffff2d0du, 0xffff2d00u, 0xffff2ce0u, 0xffff2cc0u, 0xffff2ca0u,
  0xffff2c80u, 0xffff2c60u, 0xffff2c47u, 0xffff2c40u, 0xffff2c20u, 0xffff2c00u, 0xffff2be0u, 0xffff2bc0u,
  0xffff2ba0u, 0xffff2b80u, 0xffff2b80u, 0xffff2b60u, 0xffff2b40u, 0xffff2b20u, 0xffff2b00u, 0xffff2ae0u,
  0xffff2ac0u, 0xffff2abau, 0xffff2aa0u, 0xffff2a80u, 0xffff2a60u, 0xffff2a40u, 0xffff2a20u, 0xffff2a00u,
  0xffff29f4u, 0xffff29e0u, 0xffff29c0u, 0xffff29a0u, 0xffff2980u, 0xffff2960u, 0xffff2940u, 0xffff292du,
  0xffff2920u, 0xffff2900u, 0xffff28e0u, 0xffff28c0u, 0xffff28a0u, 0xffff2880u, 0xffff2867u, 0xffff2860u,
  0xffff2840u, 0xffff2820u, 0xffff2800u, 0xffff27e0u, 0xffff27c0u, 0xffff27a0u, 0xffff27a0u, 0xffff2780u,
  0xffff2760u, 0xffff2740u, 0xffff2720u, 0xffff2700u, 0xffff26e0u, 0xffff26dau, 0xffff26c0u, 0xffff26a0u,
  0xffff2680u, 0xffff2660u, 0xffff2640u, 0xffff2620u, 0xffff2614u, 0xffff2600u, 0xffff25e0u, 0xffff25c0u,
  0xffff25a0u, 0xffff2580u, 0xffff2560u, 0xffff254du, 0xffff2540u, 0xffff2520u, 0xffff2500u, 0xffff24e0u,
  0xffff24c0u, 0xffff24a0u, 0xffff2487u, 0xffff2480u, 0xffff2460u, 0xffff2440u, 0xffff2420u, 0xffff2400u,
  0xffff23e0u, 0xffff23c0u, 0xffff23c0u, 0xffff23a0u, 0xffff2380u, 0xffff2360u, 0xffff2340u, 0xffff2320u,
  0xffff2300u, 0xffff22fau, 0xffff22e0u, 0xffff22c0u, 0xffff22a0u, 0xffff2280u, 0xffff2260u, 0xffff2240u,
  0xffff2234u, 0xffff2220u, 0xffff2200u, 0xffff21e0u, 0xffff21c0u, 0xffff21a0u, 0xffff2180u, 0xffff216du,
  0xffff2160u, 0xffff2140u, 0xffff2120u, 0xffff2100u, 0xffff20e0u, 0xffff20c0u, 0xffff20a7u, 0xffff20a0u,
  0xffff2080u, 0xffff2060u, 0xffff2040u, 0xffff2020u, 0xffff201au, 0xffff2000u,
};
__device__ static unsigned int optjit_quantize_q8(float x) {
  const unsigned int i = min(__float2uint_rz((x + 1.0f) * 32767.5f + 0.5f), 65535u);
  const unsigned int b = i >> 5u;
  const unsigned int d = i - b;
  const unsigned int j = (d > 31434u ? (d < 32054u ? d : 32054u) : 31434u) + b - 31434u;
  return (optjit_lut_q8[j] + i) >> 5u;
}
__device__ static unsigned int optjit_quantize_q8u(float x) {
  const unsigned int i = min(__float2uint_rz((x + 1.0f) * 32767.5f + 0.5f), 65535u);
  const unsigned int b = i >> 5u;
  const unsigned int d = i - b;
  const unsigned int j = (d > 31744u ? (d < 32054u ? d : 32054u) : 31744u) + b - 31744u;
  return (optjit_lut_q8u[j] + i) >> 5u;
}

extern "C" __global__ void __launch_bounds__(256, 2) optjit_pass_0(const OptjitRow* __restrict__ rows,
    const long long* __restrict__ chunks, const long long nchunks, double* __restrict__ partials) {
  __shared__ double red0[256];
  for (long long c = blockIdx.x; c < nchunks; c += gridDim.x) {
    const long long t = chunks[3 * c], off = chunks[3 * c + 1], len = chunks[3 * c + 2];
    const OptjitRow row = rows[t];
    const double* u = row.uniforms;
    float* p1 = (float*)row.buffers[1] + off;
    double acc0 = 0;
    const long long nv = len / 4;
    for (long long i0 = threadIdx.x; i0 < nv; i0 += 256) {
      const optjit_f32x4 L1_0 = ((const optjit_f32x4*)p1)[i0];
      {
        {
          const float v0 = L1_0.v[0];
          acc0 += (double)v0 * (double)v0;
        }
        {
          const float v0 = L1_0.v[1];
          acc0 += (double)v0 * (double)v0;
        }
        {
          const float v0 = L1_0.v[2];
          acc0 += (double)v0 * (double)v0;
        }
        {
          const float v0 = L1_0.v[3];
          acc0 += (double)v0 * (double)v0;
        }
      }
    }
    for (long long i0 = nv * 4 + threadIdx.x; i0 < len; i0 += 256) {
      const float L1_0 = p1[i0];
      {
        const float v0 = L1_0;
        acc0 += (double)v0 * (double)v0;
      }
    }
    const int l = (int)threadIdx.x;
    red0[l] = acc0;
    __syncthreads();
    for (int w = 128; w > 0; w >>= 1) {
      if (l < w) {
        red0[l] += red0[l + w];
      }
      __syncthreads();
    }
    if (l == 0) {
      partials[c * 1 + 0] = red0[0];
    }
    __syncthreads();
  }
}

extern "C" __global__ void __launch_bounds__(256, 2) optjit_pass_1(const OptjitRow* __restrict__ rows,
    const long long* __restrict__ chunks, const long long nchunks, double* __restrict__ partials) {
  for (long long c = blockIdx.x; c < nchunks; c += gridDim.x) {
    const long long t = chunks[3 * c], off = chunks[3 * c + 1], len = chunks[3 * c + 2];
    const OptjitRow row = rows[t];
    const double* u = row.uniforms;
    float* p0 = (float*)row.buffers[0] + off;
    float* p1 = (float*)row.buffers[1] + off;
    float* p2 = (float*)row.buffers[2] + off;
    float* p4 = (float*)row.buffers[4] + off;
    const float u0 = (float)u[0];
    const float u1 = (float)u[1];
    const bool u2 = (u[2] != 0);
    const float u3 = (float)u[3];
    const float u4 = (float)u[4];
    const bool u5 = (u[5] != 0);
    const float u6 = (float)u[6];
    const float u7 = (float)u[7];
    const float u8 = (float)u[8];
    const float u9 = (float)u[9];
    const float u10 = (float)u[10];
    unsigned char* q2 = (unsigned char*)row.buffers[2] + off;
    float* s2 = (float*)row.buffers[3];
    unsigned char* q4 = (unsigned char*)row.buffers[4] + off;
    float* s4 = (float*)row.buffers[5];
    if (!(s2 == 0)) {
      const long long lane = (long long)(threadIdx.x & 31u);
      for (long long e0 = (long long)(threadIdx.x >> 5u) * 256; e0 < len; e0 += 2048) {
        const long long n = len - e0 < 256 ? len - e0 : 256;
        const long long blk = ((off + e0) >> 8u);
        const float sc2 = s2[blk];
        const float sc4 = s4[blk];
        const long long i0 = e0 + 0 + lane * 4 + 0;
        const long long r0 = n - (lane * 4 + 0);
        optjit_f32x4 L0_0;
        optjit_f32x4 L1_0;
        optjit_f32x4 L2_0;
        optjit_f32x4 L4_0;
        if (r0 >= 4) {
          L0_0 = ((const optjit_f32x4*)p0)[(i0 >> 2)];
          L1_0 = ((const optjit_f32x4*)p1)[(i0 >> 2)];
          const unsigned int W2_0_0 = ((unsigned int)*(const unsigned int*)(q2 + (i0)));
          L2_0.v[0] = OPTJIT_BITS_F32(optjit_map_q8[__byte_perm(W2_0_0, 0u, 0x4440u)]) * sc2;
          L2_0.v[1] = OPTJIT_BITS_F32(optjit_map_q8[__byte_perm(W2_0_0, 0u, 0x4441u)]) * sc2;
          L2_0.v[2] = OPTJIT_BITS_F32(optjit_map_q8[__byte_perm(W2_0_0, 0u, 0x4442u)]) * sc2;
          L2_0.v[3] = OPTJIT_BITS_F32(optjit_map_q8[__byte_perm(W2_0_0, 0u, 0x4443u)]) * sc2;
          const unsigned int W4_0_0 = ((unsigned int)*(const unsigned int*)(q4 + (i0)));
          L4_0.v[0] = OPTJIT_BITS_F32(optjit_map_q8u[__byte_perm(W4_0_0, 0u, 0x4440u)]) * sc4;
          L4_0.v[1] = OPTJIT_BITS_F32(optjit_map_q8u[__byte_perm(W4_0_0, 0u, 0x4441u)]) * sc4;
          L4_0.v[2] = OPTJIT_BITS_F32(optjit_map_q8u[__byte_perm(W4_0_0, 0u, 0x4442u)]) * sc4;
          L4_0.v[3] = OPTJIT_BITS_F32(optjit_map_q8u[__byte_perm(W4_0_0, 0u, 0x4443u)]) * sc4;
        } else if (r0 > 0) {
          L0_0.v[0] = p0[i0];
          L0_0.v[1] = r0 > 1 ? p0[i0 + 1] : 0;
          L0_0.v[2] = r0 > 2 ? p0[i0 + 2] : 0;
          L0_0.v[3] = r0 > 3 ? p0[i0 + 3] : 0;
          L1_0.v[0] = p1[i0];
          L1_0.v[1] = r0 > 1 ? p1[i0 + 1] : 0;
          L1_0.v[2] = r0 > 2 ? p1[i0 + 2] : 0;
          L1_0.v[3] = r0 > 3 ? p1[i0 + 3] : 0;
          L2_0.v[0] = OPTJIT_BITS_F32(optjit_map_q8[q2[i0]]) * sc2;
          L2_0.v[1] = r0 > 1 ? OPTJIT_BITS_F32(optjit_map_q8[q2[i0 + 1]]) * sc2 : 0.0f;
          L2_0.v[2] = r0 > 2 ? OPTJIT_BITS_F32(optjit_map_q8[q2[i0 + 2]]) * sc2 : 0.0f;
          L2_0.v[3] = r0 > 3 ? OPTJIT_BITS_F32(optjit_map_q8[q2[i0 + 3]]) * sc2 : 0.0f;
          L4_0.v[0] = OPTJIT_BITS_F32(optjit_map_q8u[q4[i0]]) * sc4;
          L4_0.v[1] = r0 > 1 ? OPTJIT_BITS_F32(optjit_map_q8u[q4[i0 + 1]]) * sc4 : 0.0f;
          L4_0.v[2] = r0 > 2 ? OPTJIT_BITS_F32(optjit_map_q8u[q4[i0 + 2]]) * sc4 : 0.0f;
          L4_0.v[3] = r0 > 3 ? OPTJIT_BITS_F32(optjit_map_q8u[q4[i0 + 3]]) * sc4 : 0.0f;
        }
        const long long i1 = e0 + 0 + lane * 4 + 128;
        const long long r1 = n - (lane * 4 + 128);
        optjit_f32x4 L0_1;
        optjit_f32x4 L1_1;
        optjit_f32x4 L2_1;
        optjit_f32x4 L4_1;
        if (r1 >= 4) {
          L0_1 = ((const optjit_f32x4*)p0)[(i1 >> 2)];
          L1_1 = ((const optjit_f32x4*)p1)[(i1 >> 2)];
          const unsigned int W2_1_0 = ((unsigned int)*(const unsigned int*)(q2 + (i1)));
          L2_1.v[0] = OPTJIT_BITS_F32(optjit_map_q8[__byte_perm(W2_1_0, 0u, 0x4440u)]) * sc2;
          L2_1.v[1] = OPTJIT_BITS_F32(optjit_map_q8[__byte_perm(W2_1_0, 0u, 0x4441u)]) * sc2;
          L2_1.v[2] = OPTJIT_BITS_F32(optjit_map_q8[__byte_perm(W2_1_0, 0u, 0x4442u)]) * sc2;
          L2_1.v[3] = OPTJIT_BITS_F32(optjit_map_q8[__byte_perm(W2_1_0, 0u, 0x4443u)]) * sc2;
          const unsigned int W4_1_0 = ((unsigned int)*(const unsigned int*)(q4 + (i1)));
          L4_1.v[0] = OPTJIT_BITS_F32(optjit_map_q8u[__byte_perm(W4_1_0, 0u, 0x4440u)]) * sc4;
          L4_1.v[1] = OPTJIT_BITS_F32(optjit_map_q8u[__byte_perm(W4_1_0, 0u, 0x4441u)]) * sc4;
          L4_1.v[2] = OPTJIT_BITS_F32(optjit_map_q8u[__byte_perm(W4_1_0, 0u, 0x4442u)]) * sc4;
          L4_1.v[3] = OPTJIT_BITS_F32(optjit_map_q8u[__byte_perm(W4_1_0, 0u, 0x4443u)]) * sc4;
        } else if (r1 > 0) {
          L0_1.v[0] = p0[i1];
          L0_1.v[1] = r1 > 1 ? p0[i1 + 1] : 0;
          L0_1.v[2] = r1 > 2 ? p0[i1 + 2] : 0;
          L0_1.v[3] = r1 > 3 ? p0[i1 + 3] : 0;
          L1_1.v[0] = p1[i1];
          L1_1.v[1] = r1 > 1 ? p1[i1 + 1] : 0;
          L1_1.v[2] = r1 > 2 ? p1[i1 + 2] : 0;
          L1_1.v[3] = r1 > 3 ? p1[i1 + 3] : 0;
          L2_1.v[0] = OPTJIT_BITS_F32(optjit_map_q8[q2[i1]]) * sc2;
          L2_1.v[1] = r1 > 1 ? OPTJIT_BITS_F32(optjit_map_q8[q2[i1 + 1]]) * sc2 : 0.0f;
          L2_1.v[2] = r1 > 2 ? OPTJIT_BITS_F32(optjit_map_q8[q2[i1 + 2]]) * sc2 : 0.0f;
          L2_1.v[3] = r1 > 3 ? OPTJIT_BITS_F32(optjit_map_q8[q2[i1 + 3]]) * sc2 : 0.0f;
          L4_1.v[0] = OPTJIT_BITS_F32(optjit_map_q8u[q4[i1]]) * sc4;
          L4_1.v[1] = r1 > 1 ? OPTJIT_BITS_F32(optjit_map_q8u[q4[i1 + 1]]) * sc4 : 0.0f;
          L4_1.v[2] = r1 > 2 ? OPTJIT_BITS_F32(optjit_map_q8u[q4[i1 + 2]]) * sc4 : 0.0f;
          L4_1.v[3] = r1 > 3 ? OPTJIT_BITS_F32(optjit_map_q8u[q4[i1 + 3]]) * sc4 : 0.0f;
        }
        unsigned int am2 = 0u;
        optjit_f32x4 Q2_0;
        optjit_f32x4 Q2_1;
        unsigned int am4 = 0u;
        optjit_f32x4 Q4_0;
        optjit_f32x4 Q4_1;
        if (r0 > 0) {
          optjit_f32x4 S0;
          optjit_f32x4 S2;
          optjit_f32x4 S4;
          bool done = false;
          if (r0 >= 4) {
            bool ok = true;
            const float v0_0 = L0_0.v[0];
            const float v0_1 = L0_0.v[1];
            const float v0_2 = L0_0.v[2];
            const float v0_3 = L0_0.v[3];
            const float v1_0 = L1_0.v[0];
            const float v1_1 = L1_0.v[1];
            const float v1_2 = L1_0.v[2];
            const float v1_3 = L1_0.v[3];
            const float v2_0 = L2_0.v[0];
            const float v2_1 = L2_0.v[1];
            const float v2_2 = L2_0.v[2];
            const float v2_3 = L2_0.v[3];
            const float v3_0 = L4_0.v[0];
            const float v3_1 = L4_0.v[1];
            const float v3_2 = L4_0.v[2];
            const float v3_3 = L4_0.v[3];
            const float v5_0 = v1_0 * u0;
            const float v5_1 = v1_1 * u0;
            const float v5_2 = v1_2 * u0;
            const float v5_3 = v1_3 * u0;
            const float v7_0 = v0_0 * u1;
            const float v7_1 = v0_1 * u1;
            const float v7_2 = v0_2 * u1;
            const float v7_3 = v0_3 * u1;
            const float v9_0 = u2 ? v7_0 : v0_0;
            const float v9_1 = u2 ? v7_1 : v0_1;
            const float v9_2 = u2 ? v7_2 : v0_2;
            const float v9_3 = u2 ? v7_3 : v0_3;
            const float v10_0 = v5_0 - v2_0;
            const float v10_1 = v5_1 - v2_1;
            const float v10_2 = v5_2 - v2_2;
            const float v10_3 = v5_3 - v2_3;
            const float v12_0 = fmaf(u3, v10_0, v5_0);
            const float v12_1 = fmaf(u3, v10_1, v5_1);
            const float v12_2 = fmaf(u3, v10_2, v5_2);
            const float v12_3 = fmaf(u3, v10_3, v5_3);
            const float v14_0 = fmaf(u4, v10_0, v2_0);
            const float v14_1 = fmaf(u4, v10_1, v2_1);
            const float v14_2 = fmaf(u4, v10_2, v2_2);
            const float v14_3 = fmaf(u4, v10_3, v2_3);
            const float v16_0 = u5 ? v14_0 : v12_0;
            const float v16_1 = u5 ? v14_1 : v12_1;
            const float v16_2 = u5 ? v14_2 : v12_2;
            const float v16_3 = u5 ? v14_3 : v12_3;
            const float v18_0 = v3_0 * u6;
            const float v18_1 = v3_1 * u6;
            const float v18_2 = v3_2 * u6;
            const float v18_3 = v3_3 * u6;
            const float v20_0 = u7 * v5_0;
            const float v20_1 = u7 * v5_1;
            const float v20_2 = u7 * v5_2;
            const float v20_3 = u7 * v5_3;
            const float v21_0 = fmaf(v20_0, v5_0, v18_0);
            const float v21_1 = fmaf(v20_1, v5_1, v18_1);
            const float v21_2 = fmaf(v20_2, v5_2, v18_2);
            const float v21_3 = fmaf(v20_3, v5_3, v18_3);
            const float v22_0 = optjit_fsqrt(v21_0, ok);
            const float v22_1 = optjit_fsqrt(v21_1, ok);
            const float v22_2 = optjit_fsqrt(v21_2, ok);
            const float v22_3 = optjit_fsqrt(v21_3, ok);
            const float v24_0 = optjit_fdiv_by(v22_0, u8, ok);
            const float v24_1 = optjit_fdiv_by(v22_1, u8, ok);
            const float v24_2 = optjit_fdiv_by(v22_2, u8, ok);
            const float v24_3 = optjit_fdiv_by(v22_3, u8, ok);
            const float v26_0 = v24_0 + u9;
            const float v26_1 = v24_1 + u9;
            const float v26_2 = v24_2 + u9;
            const float v26_3 = v24_3 + u9;
            const float v28_0 = u10 * v16_0;
            const float v28_1 = u10 * v16_1;
            const float v28_2 = u10 * v16_2;
            const float v28_3 = u10 * v16_3;
            const float v29_0 = optjit_fdiv(v28_0, v26_0, ok);
            const float v29_1 = optjit_fdiv(v28_1, v26_1, ok);
            const float v29_2 = optjit_fdiv(v28_2, v26_2, ok);
            const float v29_3 = optjit_fdiv(v28_3, v26_3, ok);
            const float v30_0 = v9_0 + v29_0;
            const float v30_1 = v9_1 + v29_1;
            const float v30_2 = v9_2 + v29_2;
            const float v30_3 = v9_3 + v29_3;
            S2.v[0] = v16_0;
            S2.v[1] = v16_1;
            S2.v[2] = v16_2;
            S2.v[3] = v16_3;
            S4.v[0] = v21_0;
            S4.v[1] = v21_1;
            S4.v[2] = v21_2;
            S4.v[3] = v21_3;
            S0.v[0] = v30_0;
            S0.v[1] = v30_1;
            S0.v[2] = v30_2;
            S0.v[3] = v30_3;
            Q2_0.v[0] = S2.v[0];
            Q4_0.v[0] = S4.v[0];
            Q2_0.v[1] = S2.v[1];
            Q4_0.v[1] = S4.v[1];
            Q2_0.v[2] = S2.v[2];
            Q4_0.v[2] = S4.v[2];
            Q2_0.v[3] = S2.v[3];
            Q4_0.v[3] = S4.v[3];
            if (ok) {
              am2 = am2 > (OPTJIT_F32_BITS(S2.v[0]) & 0x7fffffffu) ? am2 : (OPTJIT_F32_BITS(S2.v[0]) & 0x7fffffffu);
              am4 = am4 > (OPTJIT_F32_BITS(S4.v[0]) & 0x7fffffffu) ? am4 : (OPTJIT_F32_BITS(S4.v[0]) & 0x7fffffffu);
              am2 = am2 > (OPTJIT_F32_BITS(S2.v[1]) & 0x7fffffffu) ? am2 : (OPTJIT_F32_BITS(S2.v[1]) & 0x7fffffffu);
              am4 = am4 > (OPTJIT_F32_BITS(S4.v[1]) & 0x7fffffffu) ? am4 : (OPTJIT_F32_BITS(S4.v[1]) & 0x7fffffffu);
              am2 = am2 > (OPTJIT_F32_BITS(S2.v[2]) & 0x7fffffffu) ? am2 : (OPTJIT_F32_BITS(S2.v[2]) & 0x7fffffffu);
              am4 = am4 > (OPTJIT_F32_BITS(S4.v[2]) & 0x7fffffffu) ? am4 : (OPTJIT_F32_BITS(S4.v[2]) & 0x7fffffffu);
              am2 = am2 > (OPTJIT_F32_BITS(S2.v[3]) & 0x7fffffffu) ? am2 : (OPTJIT_F32_BITS(S2.v[3]) & 0x7fffffffu);
              am4 = am4 > (OPTJIT_F32_BITS(S4.v[3]) & 0x7fffffffu) ? am4 : (OPTJIT_F32_BITS(S4.v[3]) & 0x7fffffffu);
              done = true;
            }
          }
          if (!done) {
            {
              const float v0 = L0_0.v[0];
              const float v1 = L1_0.v[0];
              const float v2 = L2_0.v[0];
              const float v3 = L4_0.v[0];
              const float v5 = v1 * u0;
              const float v7 = v0 * u1;
              const float v9 = u2 ? v7 : v0;
              const float v10 = v5 - v2;
              const float v12 = fmaf(u3, v10, v5);
              const float v14 = fmaf(u4, v10, v2);
              const float v16 = u5 ? v14 : v12;
              const float v18 = v3 * u6;
              const float v20 = u7 * v5;
              const float v21 = fmaf(v20, v5, v18);
              const float v22 = sqrtf(v21);
              const float v24 = v22 / u8;
              const float v26 = v24 + u9;
              const float v28 = u10 * v16;
              const float v29 = v28 / v26;
              const float v30 = v9 + v29;
              S2.v[0] = v16;
              S4.v[0] = v21;
              S0.v[0] = v30;
              Q2_0.v[0] = S2.v[0];
              am2 = am2 > (OPTJIT_F32_BITS(S2.v[0]) & 0x7fffffffu) ? am2 : (OPTJIT_F32_BITS(S2.v[0]) & 0x7fffffffu);
              Q4_0.v[0] = S4.v[0];
              am4 = am4 > (OPTJIT_F32_BITS(S4.v[0]) & 0x7fffffffu) ? am4 : (OPTJIT_F32_BITS(S4.v[0]) & 0x7fffffffu);
            }
            if (r0 > 1) {
              const float v0 = L0_0.v[1];
              const float v1 = L1_0.v[1];
              const float v2 = L2_0.v[1];
              const float v3 = L4_0.v[1];
              const float v5 = v1 * u0;
              const float v7 = v0 * u1;
              const float v9 = u2 ? v7 : v0;
              const float v10 = v5 - v2;
              const float v12 = fmaf(u3, v10, v5);
              const float v14 = fmaf(u4, v10, v2);
              const float v16 = u5 ? v14 : v12;
              const float v18 = v3 * u6;
              const float v20 = u7 * v5;
              const float v21 = fmaf(v20, v5, v18);
              const float v22 = sqrtf(v21);
              const float v24 = v22 / u8;
              const float v26 = v24 + u9;
              const float v28 = u10 * v16;
              const float v29 = v28 / v26;
              const float v30 = v9 + v29;
              S2.v[1] = v16;
              S4.v[1] = v21;
              S0.v[1] = v30;
              Q2_0.v[1] = S2.v[1];
              am2 = am2 > (OPTJIT_F32_BITS(S2.v[1]) & 0x7fffffffu) ? am2 : (OPTJIT_F32_BITS(S2.v[1]) & 0x7fffffffu);
              Q4_0.v[1] = S4.v[1];
              am4 = am4 > (OPTJIT_F32_BITS(S4.v[1]) & 0x7fffffffu) ? am4 : (OPTJIT_F32_BITS(S4.v[1]) & 0x7fffffffu);
            }
            if (r0 > 2) {
              const float v0 = L0_0.v[2];
              const float v1 = L1_0.v[2];
              const float v2 = L2_0.v[2];
              const float v3 = L4_0.v[2];
              const float v5 = v1 * u0;
              const float v7 = v0 * u1;
              const float v9 = u2 ? v7 : v0;
              const float v10 = v5 - v2;
              const float v12 = fmaf(u3, v10, v5);
              const float v14 = fmaf(u4, v10, v2);
              const float v16 = u5 ? v14 : v12;
              const float v18 = v3 * u6;
              const float v20 = u7 * v5;
              const float v21 = fmaf(v20, v5, v18);
              const float v22 = sqrtf(v21);
              const float v24 = v22 / u8;
              const float v26 = v24 + u9;
              const float v28 = u10 * v16;
              const float v29 = v28 / v26;
              const float v30 = v9 + v29;
              S2.v[2] = v16;
              S4.v[2] = v21;
              S0.v[2] = v30;
              Q2_0.v[2] = S2.v[2];
              am2 = am2 > (OPTJIT_F32_BITS(S2.v[2]) & 0x7fffffffu) ? am2 : (OPTJIT_F32_BITS(S2.v[2]) & 0x7fffffffu);
              Q4_0.v[2] = S4.v[2];
              am4 = am4 > (OPTJIT_F32_BITS(S4.v[2]) & 0x7fffffffu) ? am4 : (OPTJIT_F32_BITS(S4.v[2]) & 0x7fffffffu);
            }
            if (r0 > 3) {
              const float v0 = L0_0.v[3];
              const float v1 = L1_0.v[3];
              const float v2 = L2_0.v[3];
              const float v3 = L4_0.v[3];
              const float v5 = v1 * u0;
              const float v7 = v0 * u1;
              const float v9 = u2 ? v7 : v0;
              const float v10 = v5 - v2;
              const float v12 = fmaf(u3, v10, v5);
              const float v14 = fmaf(u4, v10, v2);
              const float v16 = u5 ? v14 : v12;
              const float v18 = v3 * u6;
              const float v20 = u7 * v5;
              const float v21 = fmaf(v20, v5, v18);
              const float v22 = sqrtf(v21);
              const float v24 = v22 / u8;
              const float v26 = v24 + u9;
              const float v28 = u10 * v16;
              const float v29 = v28 / v26;
              const float v30 = v9 + v29;
              S2.v[3] = v16;
              S4.v[3] = v21;
              S0.v[3] = v30;
              Q2_0.v[3] = S2.v[3];
              am2 = am2 > (OPTJIT_F32_BITS(S2.v[3]) & 0x7fffffffu) ? am2 : (OPTJIT_F32_BITS(S2.v[3]) & 0x7fffffffu);
              Q4_0.v[3] = S4.v[3];
              am4 = am4 > (OPTJIT_F32_BITS(S4.v[3]) & 0x7fffffffu) ? am4 : (OPTJIT_F32_BITS(S4.v[3]) & 0x7fffffffu);
            }
          }
          if (r0 >= 4) {
            ((optjit_f32x4*)p0)[(i0 >> 2)] = S0;
          } else {
            p0[i0] = S0.v[0];
            if (r0 > 1) p0[i0 + 1] = S0.v[1];
            if (r0 > 2) p0[i0 + 2] = S0.v[2];
            if (r0 > 3) p0[i0 + 3] = S0.v[3];
          }
        }
        if (r1 > 0) {
          optjit_f32x4 S0;
          optjit_f32x4 S2;
          optjit_f32x4 S4;
          bool done = false;
          if (r1 >= 4) {
            bool ok = true;
            const float v0_0 = L0_1.v[0];
            const float v0_1 = L0_1.v[1];
            const float v0_2 = L0_1.v[2];
            const float v0_3 = L0_1.v[3];
            const float v1_0 = L1_1.v[0];
            const float v1_1 = L1_1.v[1];
            const float v1_2 = L1_1.v[2];
            const float v1_3 = L1_1.v[3];
            const float v2_0 = L2_1.v[0];
            const float v2_1 = L2_1.v[1];
            const float v2_2 = L2_1.v[2];
            const float v2_3 = L2_1.v[3];
            const float v3_0 = L4_1.v[0];
            const float v3_1 = L4_1.v[1];
            const float v3_2 = L4_1.v[2];
            const float v3_3 = L4_1.v[3];
            const float v5_0 = v1_0 * u0;
            const float v5_1 = v1_1 * u0;
            const float v5_2 = v1_2 * u0;
            const float v5_3 = v1_3 * u0;
            const float v7_0 = v0_0 * u1;
            const float v7_1 = v0_1 * u1;
            const float v7_2 = v0_2 * u1;
            const float v7_3 = v0_3 * u1;
            const float v9_0 = u2 ? v7_0 : v0_0;
            const float v9_1 = u2 ? v7_1 : v0_1;
            const float v9_2 = u2 ? v7_2 : v0_2;
            const float v9_3 = u2 ? v7_3 : v0_3;
            const float v10_0 = v5_0 - v2_0;
            const float v10_1 = v5_1 - v2_1;
            const float v10_2 = v5_2 - v2_2;
            const float v10_3 = v5_3 - v2_3;
            const float v12_0 = fmaf(u3, v10_0, v5_0);
            const float v12_1 = fmaf(u3, v10_1, v5_1);
            const float v12_2 = fmaf(u3, v10_2, v5_2);
            const float v12_3 = fmaf(u3, v10_3, v5_3);
            const float v14_0 = fmaf(u4, v10_0, v2_0);
            const float v14_1 = fmaf(u4, v10_1, v2_1);
            const float v14_2 = fmaf(u4, v10_2, v2_2);
            const float v14_3 = fmaf(u4, v10_3, v2_3);
            const float v16_0 = u5 ? v14_0 : v12_0;
            const float v16_1 = u5 ? v14_1 : v12_1;
            const float v16_2 = u5 ? v14_2 : v12_2;
            const float v16_3 = u5 ? v14_3 : v12_3;
            const float v18_0 = v3_0 * u6;
            const float v18_1 = v3_1 * u6;
            const float v18_2 = v3_2 * u6;
            const float v18_3 = v3_3 * u6;
            const float v20_0 = u7 * v5_0;
            const float v20_1 = u7 * v5_1;
            const float v20_2 = u7 * v5_2;
            const float v20_3 = u7 * v5_3;
            const float v21_0 = fmaf(v20_0, v5_0, v18_0);
            const float v21_1 = fmaf(v20_1, v5_1, v18_1);
            const float v21_2 = fmaf(v20_2, v5_2, v18_2);
            const float v21_3 = fmaf(v20_3, v5_3, v18_3);
            const float v22_0 = optjit_fsqrt(v21_0, ok);
            const float v22_1 = optjit_fsqrt(v21_1, ok);
            const float v22_2 = optjit_fsqrt(v21_2, ok);
            const float v22_3 = optjit_fsqrt(v21_3, ok);
            const float v24_0 = optjit_fdiv_by(v22_0, u8, ok);
            const float v24_1 = optjit_fdiv_by(v22_1, u8, ok);
            const float v24_2 = optjit_fdiv_by(v22_2, u8, ok);
            const float v24_3 = optjit_fdiv_by(v22_3, u8, ok);
            const float v26_0 = v24_0 + u9;
            const float v26_1 = v24_1 + u9;
            const float v26_2 = v24_2 + u9;
            const float v26_3 = v24_3 + u9;
            const float v28_0 = u10 * v16_0;
            const float v28_1 = u10 * v16_1;
            const float v28_2 = u10 * v16_2;
            const float v28_3 = u10 * v16_3;
            const float v29_0 = optjit_fdiv(v28_0, v26_0, ok);
            const float v29_1 = optjit_fdiv(v28_1, v26_1, ok);
            const float v29_2 = optjit_fdiv(v28_2, v26_2, ok);
            const float v29_3 = optjit_fdiv(v28_3, v26_3, ok);
            const float v30_0 = v9_0 + v29_0;
            const float v30_1 = v9_1 + v29_1;
            const float v30_2 = v9_2 + v29_2;
            const float v30_3 = v9_3 + v29_3;
            S2.v[0] = v16_0;
            S2.v[1] = v16_1;
            S2.v[2] = v16_2;
            S2.v[3] = v16_3;
            S4.v[0] = v21_0;
            S4.v[1] = v21_1;
            S4.v[2] = v21_2;
            S4.v[3] = v21_3;
            S0.v[0] = v30_0;
            S0.v[1] = v30_1;
            S0.v[2] = v30_2;
            S0.v[3] = v30_3;
            Q2_1.v[0] = S2.v[0];
            Q4_1.v[0] = S4.v[0];
            Q2_1.v[1] = S2.v[1];
            Q4_1.v[1] = S4.v[1];
            Q2_1.v[2] = S2.v[2];
            Q4_1.v[2] = S4.v[2];
            Q2_1.v[3] = S2.v[3];
            Q4_1.v[3] = S4.v[3];
            if (ok) {
              am2 = am2 > (OPTJIT_F32_BITS(S2.v[0]) & 0x7fffffffu) ? am2 : (OPTJIT_F32_BITS(S2.v[0]) & 0x7fffffffu);
              am4 = am4 > (OPTJIT_F32_BITS(S4.v[0]) & 0x7fffffffu) ? am4 : (OPTJIT_F32_BITS(S4.v[0]) & 0x7fffffffu);
              am2 = am2 > (OPTJIT_F32_BITS(S2.v[1]) & 0x7fffffffu) ? am2 : (OPTJIT_F32_BITS(S2.v[1]) & 0x7fffffffu);
              am4 = am4 > (OPTJIT_F32_BITS(S4.v[1]) & 0x7fffffffu) ? am4 : (OPTJIT_F32_BITS(S4.v[1]) & 0x7fffffffu);
              am2 = am2 > (OPTJIT_F32_BITS(S2.v[2]) & 0x7fffffffu) ? am2 : (OPTJIT_F32_BITS(S2.v[2]) & 0x7fffffffu);
              am4 = am4 > (OPTJIT_F32_BITS(S4.v[2]) & 0x7fffffffu) ? am4 : (OPTJIT_F32_BITS(S4.v[2]) & 0x7fffffffu);
              am2 = am2 > (OPTJIT_F32_BITS(S2.v[3]) & 0x7fffffffu) ? am2 : (OPTJIT_F32_BITS(S2.v[3]) & 0x7fffffffu);
              am4 = am4 > (OPTJIT_F32_BITS(S4.v[3]) & 0x7fffffffu) ? am4 : (OPTJIT_F32_BITS(S4.v[3]) & 0x7fffffffu);
              done = true;
            }
          }
          if (!done) {
            {
              const float v0 = L0_1.v[0];
              const float v1 = L1_1.v[0];
              const float v2 = L2_1.v[0];
              const float v3 = L4_1.v[0];
              const float v5 = v1 * u0;
              const float v7 = v0 * u1;
              const float v9 = u2 ? v7 : v0;
              const float v10 = v5 - v2;
              const float v12 = fmaf(u3, v10, v5);
              const float v14 = fmaf(u4, v10, v2);
              const float v16 = u5 ? v14 : v12;
              const float v18 = v3 * u6;
              const float v20 = u7 * v5;
              const float v21 = fmaf(v20, v5, v18);
              const float v22 = sqrtf(v21);
              const float v24 = v22 / u8;
              const float v26 = v24 + u9;
              const float v28 = u10 * v16;
              const float v29 = v28 / v26;
              const float v30 = v9 + v29;
              S2.v[0] = v16;
              S4.v[0] = v21;
              S0.v[0] = v30;
              Q2_1.v[0] = S2.v[0];
              am2 = am2 > (OPTJIT_F32_BITS(S2.v[0]) & 0x7fffffffu) ? am2 : (OPTJIT_F32_BITS(S2.v[0]) & 0x7fffffffu);
              Q4_1.v[0] = S4.v[0];
              am4 = am4 > (OPTJIT_F32_BITS(S4.v[0]) & 0x7fffffffu) ? am4 : (OPTJIT_F32_BITS(S4.v[0]) & 0x7fffffffu);
            }
            if (r1 > 1) {
              const float v0 = L0_1.v[1];
              const float v1 = L1_1.v[1];
              const float v2 = L2_1.v[1];
              const float v3 = L4_1.v[1];
              const float v5 = v1 * u0;
              const float v7 = v0 * u1;
              const float v9 = u2 ? v7 : v0;
              const float v10 = v5 - v2;
              const float v12 = fmaf(u3, v10, v5);
              const float v14 = fmaf(u4, v10, v2);
              const float v16 = u5 ? v14 : v12;
              const float v18 = v3 * u6;
              const float v20 = u7 * v5;
              const float v21 = fmaf(v20, v5, v18);
              const float v22 = sqrtf(v21);
              const float v24 = v22 / u8;
              const float v26 = v24 + u9;
              const float v28 = u10 * v16;
              const float v29 = v28 / v26;
              const float v30 = v9 + v29;
              S2.v[1] = v16;
              S4.v[1] = v21;
              S0.v[1] = v30;
              Q2_1.v[1] = S2.v[1];
              am2 = am2 > (OPTJIT_F32_BITS(S2.v[1]) & 0x7fffffffu) ? am2 : (OPTJIT_F32_BITS(S2.v[1]) & 0x7fffffffu);
              Q4_1.v[1] = S4.v[1];
              am4 = am4 > (OPTJIT_F32_BITS(S4.v[1]) & 0x7fffffffu) ? am4 : (OPTJIT_F32_BITS(S4.v[1]) & 0x7fffffffu);
            }
            if (r1 > 2) {
              const float v0 = L0_1.v[2];
              const float v1 = L1_1.v[2];
              const float v2 = L2_1.v[2];
              const float v3 = L4_1.v[2];
              const float v5 = v1 * u0;
              const float v7 = v0 * u1;
              const float v9 = u2 ? v7 : v0;
              const float v10 = v5 - v2;
              const float v12 = fmaf(u3, v10, v5);
              const float v14 = fmaf(u4, v10, v2);
              const float v16 = u5 ? v14 : v12;
              const float v18 = v3 * u6;
              const float v20 = u7 * v5;
              const float v21 = fmaf(v20, v5, v18);
              const float v22 = sqrtf(v21);
              const float v24 = v22 / u8;
              const float v26 = v24 + u9;
              const float v28 = u10 * v16;
              const float v29 = v28 / v26;
              const float v30 = v9 + v29;
              S2.v[2] = v16;
              S4.v[2] = v21;
              S0.v[2] = v30;
              Q2_1.v[2] = S2.v[2];
              am2 = am2 > (OPTJIT_F32_BITS(S2.v[2]) & 0x7fffffffu) ? am2 : (OPTJIT_F32_BITS(S2.v[2]) & 0x7fffffffu);
              Q4_1.v[2] = S4.v[2];
              am4 = am4 > (OPTJIT_F32_BITS(S4.v[2]) & 0x7fffffffu) ? am4 : (OPTJIT_F32_BITS(S4.v[2]) & 0x7fffffffu);
            }
            if (r1 > 3) {
              const float v0 = L0_1.v[3];
              const float v1 = L1_1.v[3];
              const float v2 = L2_1.v[3];
              const float v3 = L4_1.v[3];
              const float v5 = v1 * u0;
              const float v7 = v0 * u1;
              const float v9 = u2 ? v7 : v0;
              const float v10 = v5 - v2;
              const float v12 = fmaf(u3, v10, v5);
              const float v14 = fmaf(u4, v10, v2);
              const float v16 = u5 ? v14 : v12;
              const float v18 = v3 * u6;
              const float v20 = u7 * v5;
              const float v21 = fmaf(v20, v5, v18);
              const float v22 = sqrtf(v21);
              const float v24 = v22 / u8;
              const float v26 = v24 + u9;
              const float v28 = u10 * v16;
              const float v29 = v28 / v26;
              const float v30 = v9 + v29;
              S2.v[3] = v16;
              S4.v[3] = v21;
              S0.v[3] = v30;
              Q2_1.v[3] = S2.v[3];
              am2 = am2 > (OPTJIT_F32_BITS(S2.v[3]) & 0x7fffffffu) ? am2 : (OPTJIT_F32_BITS(S2.v[3]) & 0x7fffffffu);
              Q4_1.v[3] = S4.v[3];
              am4 = am4 > (OPTJIT_F32_BITS(S4.v[3]) & 0x7fffffffu) ? am4 : (OPTJIT_F32_BITS(S4.v[3]) & 0x7fffffffu);
            }
          }
          if (r1 >= 4) {
            ((optjit_f32x4*)p0)[(i1 >> 2)] = S0;
          } else {
            p0[i1] = S0.v[0];
            if (r1 > 1) p0[i1 + 1] = S0.v[1];
            if (r1 > 2) p0[i1 + 2] = S0.v[2];
            if (r1 > 3) p0[i1 + 3] = S0.v[3];
          }
        }
        const unsigned int x2_16 = __shfl_xor_sync(0xffffffffu, am2, 16);
        am2 = am2 > x2_16 ? am2 : x2_16;
        const unsigned int x4_16 = __shfl_xor_sync(0xffffffffu, am4, 16);
        am4 = am4 > x4_16 ? am4 : x4_16;
        const unsigned int x2_8 = __shfl_xor_sync(0xffffffffu, am2, 8);
        am2 = am2 > x2_8 ? am2 : x2_8;
        const unsigned int x4_8 = __shfl_xor_sync(0xffffffffu, am4, 8);
        am4 = am4 > x4_8 ? am4 : x4_8;
        const unsigned int x2_4 = __shfl_xor_sync(0xffffffffu, am2, 4);
        am2 = am2 > x2_4 ? am2 : x2_4;
        const unsigned int x4_4 = __shfl_xor_sync(0xffffffffu, am4, 4);
        am4 = am4 > x4_4 ? am4 : x4_4;
        const unsigned int x2_2 = __shfl_xor_sync(0xffffffffu, am2, 2);
        am2 = am2 > x2_2 ? am2 : x2_2;
        const unsigned int x4_2 = __shfl_xor_sync(0xffffffffu, am4, 2);
        am4 = am4 > x4_2 ? am4 : x4_2;
        const unsigned int x2_1 = __shfl_xor_sync(0xffffffffu, am2, 1);
        am2 = am2 > x2_1 ? am2 : x2_1;
        const unsigned int x4_1 = __shfl_xor_sync(0xffffffffu, am4, 1);
        am4 = am4 > x4_1 ? am4 : x4_1;
        const float ab2 = OPTJIT_BITS_F32(am2);
        const float sb2 = ab2;
        const float rsb2 = 1.0f / sb2;
        if (lane == 0) {
          s2[blk] = sb2;
        }
        const float ab4 = OPTJIT_BITS_F32(am4);
        const float sb4 = ab4;
        const float rsb4 = 1.0f / sb4;
        if (lane == 0) {
          s4[blk] = sb4;
        }
        if (r0 >= 4) {
          const unsigned int c2_0_0 = optjit_quantize_q8(Q2_0.v[0] * rsb2);
          const unsigned int c2_0_1 = optjit_quantize_q8(Q2_0.v[1] * rsb2);
          const unsigned int c2_0_2 = optjit_quantize_q8(Q2_0.v[2] * rsb2);
          const unsigned int c2_0_3 = optjit_quantize_q8(Q2_0.v[3] * rsb2);
          *(unsigned int*)(q2 + (i0)) = (unsigned int)(c2_0_0 | (c2_0_1 << 8u) | (c2_0_2 << 16u) | (c2_0_3 << 24u));
        } else if (r0 > 0) {
          q2[i0] = optjit_quantize_q8(Q2_0.v[0] * rsb2);
          if (r0 > 1) q2[i0 + 1] = optjit_quantize_q8(Q2_0.v[1] * rsb2);
          if (r0 > 2) q2[i0 + 2] = optjit_quantize_q8(Q2_0.v[2] * rsb2);
          if (r0 > 3) q2[i0 + 3] = optjit_quantize_q8(Q2_0.v[3] * rsb2);
        }
        if (r1 >= 4) {
          const unsigned int c2_1_0 = optjit_quantize_q8(Q2_1.v[0] * rsb2);
          const unsigned int c2_1_1 = optjit_quantize_q8(Q2_1.v[1] * rsb2);
          const unsigned int c2_1_2 = optjit_quantize_q8(Q2_1.v[2] * rsb2);
          const unsigned int c2_1_3 = optjit_quantize_q8(Q2_1.v[3] * rsb2);
          *(unsigned int*)(q2 + (i1)) = (unsigned int)(c2_1_0 | (c2_1_1 << 8u) | (c2_1_2 << 16u) | (c2_1_3 << 24u));
        } else if (r1 > 0) {
          q2[i1] = optjit_quantize_q8(Q2_1.v[0] * rsb2);
          if (r1 > 1) q2[i1 + 1] = optjit_quantize_q8(Q2_1.v[1] * rsb2);
          if (r1 > 2) q2[i1 + 2] = optjit_quantize_q8(Q2_1.v[2] * rsb2);
          if (r1 > 3) q2[i1 + 3] = optjit_quantize_q8(Q2_1.v[3] * rsb2);
        }
        if (r0 >= 4) {
          const unsigned int c4_0_0 = optjit_quantize_q8u(Q4_0.v[0] * rsb4);
          const unsigned int c4_0_1 = optjit_quantize_q8u(Q4_0.v[1] * rsb4);
          const unsigned int c4_0_2 = optjit_quantize_q8u(Q4_0.v[2] * rsb4);
          const unsigned int c4_0_3 = optjit_quantize_q8u(Q4_0.v[3] * rsb4);
          *(unsigned int*)(q4 + (i0)) = (unsigned int)(c4_0_0 | (c4_0_1 << 8u) | (c4_0_2 << 16u) | (c4_0_3 << 24u));
        } else if (r0 > 0) {
          q4[i0] = optjit_quantize_q8u(Q4_0.v[0] * rsb4);
          if (r0 > 1) q4[i0 + 1] = optjit_quantize_q8u(Q4_0.v[1] * rsb4);
          if (r0 > 2) q4[i0 + 2] = optjit_quantize_q8u(Q4_0.v[2] * rsb4);
          if (r0 > 3) q4[i0 + 3] = optjit_quantize_q8u(Q4_0.v[3] * rsb4);
        }
        if (r1 >= 4) {
          const unsigned int c4_1_0 = optjit_quantize_q8u(Q4_1.v[0] * rsb4);
          const unsigned int c4_1_1 = optjit_quantize_q8u(Q4_1.v[1] * rsb4);
          const unsigned int c4_1_2 = optjit_quantize_q8u(Q4_1.v[2] * rsb4);
          const unsigned int c4_1_3 = optjit_quantize_q8u(Q4_1.v[3] * rsb4);
          *(unsigned int*)(q4 + (i1)) = (unsigned int)(c4_1_0 | (c4_1_1 << 8u) | (c4_1_2 << 16u) | (c4_1_3 << 24u));
        } else if (r1 > 0) {
          q4[i1] = optjit_quantize_q8u(Q4_1.v[0] * rsb4);
          if (r1 > 1) q4[i1 + 1] = optjit_quantize_q8u(Q4_1.v[1] * rsb4);
          if (r1 > 2) q4[i1 + 2] = optjit_quantize_q8u(Q4_1.v[2] * rsb4);
          if (r1 > 3) q4[i1 + 3] = optjit_quantize_q8u(Q4_1.v[3] * rsb4);
        }
      }
    } else {
    const long long nv = len / 4;
    for (long long i0 = threadIdx.x; i0 < nv; i0 += 256) {
      const optjit_f32x4 L0_0 = ((const optjit_f32x4*)p0)[i0];
      const optjit_f32x4 L1_0 = ((const optjit_f32x4*)p1)[i0];
      const optjit_f32x4 L2_0 = ((const optjit_f32x4*)p2)[i0];
      const optjit_f32x4 L4_0 = ((const optjit_f32x4*)p4)[i0];
      {
        optjit_f32x4 S0;
        optjit_f32x4 S2;
        optjit_f32x4 S4;
        {
          const float v0 = L0_0.v[0];
          const float v1 = L1_0.v[0];
          const float v2 = L2_0.v[0];
          const float v3 = L4_0.v[0];
          const float v5 = v1 * u0;
          const float v7 = v0 * u1;
          const float v9 = u2 ? v7 : v0;
          const float v10 = v5 - v2;
          const float v12 = fmaf(u3, v10, v5);
          const float v14 = fmaf(u4, v10, v2);
          const float v16 = u5 ? v14 : v12;
          const float v18 = v3 * u6;
          const float v20 = u7 * v5;
          const float v21 = fmaf(v20, v5, v18);
          const float v22 = sqrtf(v21);
          const float v24 = v22 / u8;
          const float v26 = v24 + u9;
          const float v28 = u10 * v16;
          const float v29 = v28 / v26;
          const float v30 = v9 + v29;
          S2.v[0] = v16;
          S4.v[0] = v21;
          S0.v[0] = v30;
        }
        {
          const float v0 = L0_0.v[1];
          const float v1 = L1_0.v[1];
          const float v2 = L2_0.v[1];
          const float v3 = L4_0.v[1];
          const float v5 = v1 * u0;
          const float v7 = v0 * u1;
          const float v9 = u2 ? v7 : v0;
          const float v10 = v5 - v2;
          const float v12 = fmaf(u3, v10, v5);
          const float v14 = fmaf(u4, v10, v2);
          const float v16 = u5 ? v14 : v12;
          const float v18 = v3 * u6;
          const float v20 = u7 * v5;
          const float v21 = fmaf(v20, v5, v18);
          const float v22 = sqrtf(v21);
          const float v24 = v22 / u8;
          const float v26 = v24 + u9;
          const float v28 = u10 * v16;
          const float v29 = v28 / v26;
          const float v30 = v9 + v29;
          S2.v[1] = v16;
          S4.v[1] = v21;
          S0.v[1] = v30;
        }
        {
          const float v0 = L0_0.v[2];
          const float v1 = L1_0.v[2];
          const float v2 = L2_0.v[2];
          const float v3 = L4_0.v[2];
          const float v5 = v1 * u0;
          const float v7 = v0 * u1;
          const float v9 = u2 ? v7 : v0;
          const float v10 = v5 - v2;
          const float v12 = fmaf(u3, v10, v5);
          const float v14 = fmaf(u4, v10, v2);
          const float v16 = u5 ? v14 : v12;
          const float v18 = v3 * u6;
          const float v20 = u7 * v5;
          const float v21 = fmaf(v20, v5, v18);
          const float v22 = sqrtf(v21);
          const float v24 = v22 / u8;
          const float v26 = v24 + u9;
          const float v28 = u10 * v16;
          const float v29 = v28 / v26;
          const float v30 = v9 + v29;
          S2.v[2] = v16;
          S4.v[2] = v21;
          S0.v[2] = v30;
        }
        {
          const float v0 = L0_0.v[3];
          const float v1 = L1_0.v[3];
          const float v2 = L2_0.v[3];
          const float v3 = L4_0.v[3];
          const float v5 = v1 * u0;
          const float v7 = v0 * u1;
          const float v9 = u2 ? v7 : v0;
          const float v10 = v5 - v2;
          const float v12 = fmaf(u3, v10, v5);
          const float v14 = fmaf(u4, v10, v2);
          const float v16 = u5 ? v14 : v12;
          const float v18 = v3 * u6;
          const float v20 = u7 * v5;
          const float v21 = fmaf(v20, v5, v18);
          const float v22 = sqrtf(v21);
          const float v24 = v22 / u8;
          const float v26 = v24 + u9;
          const float v28 = u10 * v16;
          const float v29 = v28 / v26;
          const float v30 = v9 + v29;
          S2.v[3] = v16;
          S4.v[3] = v21;
          S0.v[3] = v30;
        }
        ((optjit_f32x4*)p0)[i0] = S0;
        ((optjit_f32x4*)p2)[i0] = S2;
        ((optjit_f32x4*)p4)[i0] = S4;
      }
    }
    for (long long i0 = nv * 4 + threadIdx.x; i0 < len; i0 += 256) {
      const float L0_0 = p0[i0];
      const float L1_0 = p1[i0];
      const float L2_0 = p2[i0];
      const float L4_0 = p4[i0];
      {
        float S0;
        float S2;
        float S4;
        const float v0 = L0_0;
        const float v1 = L1_0;
        const float v2 = L2_0;
        const float v3 = L4_0;
        const float v5 = v1 * u0;
        const float v7 = v0 * u1;
        const float v9 = u2 ? v7 : v0;
        const float v10 = v5 - v2;
        const float v12 = fmaf(u3, v10, v5);
        const float v14 = fmaf(u4, v10, v2);
        const float v16 = u5 ? v14 : v12;
        const float v18 = v3 * u6;
        const float v20 = u7 * v5;
        const float v21 = fmaf(v20, v5, v18);
        const float v22 = sqrtf(v21);
        const float v24 = v22 / u8;
        const float v26 = v24 + u9;
        const float v28 = u10 * v16;
        const float v29 = v28 / v26;
        const float v30 = v9 + v29;
        S2 = v16;
        S4 = v21;
        S0 = v30;
        p0[i0] = S0;
        p2[i0] = S2;
        p4[i0] = S4;
      }
    }
    }
  }
}
