// Throughput of the AVX-512 instructions the 8-bit quantizer is made of, alone and in pairs, on
// this CPU: which execution ports they share bounds how fast the quantized CPU step can be
// (#12). Not built by CMake (x86-64 with AVX-512 VBMI only):
//   gcc -O2 -march=native bench/x86_ports.c -o /tmp/x86_ports && /tmp/x86_ports
// Each line runs 24 independent instructions per loop trip (no dependency between them), so
// it reports reciprocal throughput in cycles per instruction; the clock is estimated from a
// chain of dependent integer adds (one per cycle), so run it on an otherwise idle machine.
#include <stdio.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

#define R(op, r) op " %%zmm30, %%zmm31, %%zmm" #r "\n"
#define OPS(a, b)                                                                              \
  R(a, 0) R(b, 1) R(a, 2) R(b, 3) R(a, 4) R(b, 5) R(a, 6) R(b, 7) R(a, 8) R(b, 9) R(a, 10)      \
  R(b, 11) R(a, 12) R(b, 13) R(a, 14) R(b, 15) R(a, 16) R(b, 17) R(a, 18) R(b, 19) R(a, 20)    \
  R(b, 21) R(a, 22) R(b, 23)
#define CLOBBER                                                                                \
  "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",      \
      "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", \
      "xmm21", "xmm22", "xmm23"
#define BENCH(name, a, b)                                                           \
  {                                                                                 \
    const long n = 20000000;                                                        \
    double t0 = now();                                                              \
    for (long i = 0; i < n; ++i) __asm__ volatile(OPS(a, b)::: CLOBBER);            \
    printf("%-22s %.3f cycles per instruction\n", name, (now() - t0) / (n * 24.0) * ghz * 1e9); \
  }

int main(void) {
  long x = 0;
  const long n = 400000000;
  double t0 = now();
  for (long i = 0; i < n; ++i) __asm__ volatile("add $1, %0\n add $1, %0\n add $1, %0\n add $1, %0" : "+r"(x));
  const double ghz = n * 4.0 / (now() - t0) / 1e9;
  printf("clock about %.2f GHz\n", ghz);
  __asm__ volatile("vpxord %%zmm30, %%zmm30, %%zmm30\n vpxord %%zmm31, %%zmm31, %%zmm31" ::: "xmm30", "xmm31");
  BENCH("vpermt2b", "vpermt2b", "vpermt2b")
  BENCH("vpermb", "vpermb", "vpermb")
  BENCH("vmulps", "vmulps", "vmulps")
  BENCH("vaddps", "vaddps", "vaddps")
  BENCH("vmaxps", "vmaxps", "vmaxps")
  BENCH("vpaddb", "vpaddb", "vpaddb")
  BENCH("vpermb + vmulps", "vpermb", "vmulps")
  BENCH("vpermb + vaddps", "vpermb", "vaddps")
  BENCH("vpermt2b + vpaddb", "vpermt2b", "vpaddb")
  BENCH("vmulps + vaddps", "vmulps", "vaddps")
  BENCH("vmulps + vpaddb", "vmulps", "vpaddb")
  return 0;
}
