// Throughput of the AVX-512 instructions the 8-bit quantizer and AdamW's arithmetic are made of,
// alone and in pairs, on this CPU: which execution ports they share, and the divider, bound how
// fast the quantized CPU step can be (#12; bench/results/cpu-2026-11-26.md). Not built by CMake
// (x86-64 with AVX-512 VBMI only):
//   gcc -O2 -march=native bench/x86_ports.c -o /tmp/x86_ports && /tmp/x86_ports
// Each line runs 24 independent instructions per loop trip (no dependency between them), so
// it reports reciprocal throughput in cycles per instruction; the clock is estimated from a
// chain of dependent integer multiplies (three cycles each), so run it on an otherwise idle
// machine.
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
// Unary instructions (vsqrtps): source zmm30.
#define R1(op, r) op " %%zmm30, %%zmm" #r "\n"
#define OPS1(a)                                                                                \
  R1(a, 0) R1(a, 1) R1(a, 2) R1(a, 3) R1(a, 4) R1(a, 5) R1(a, 6) R1(a, 7) R1(a, 8) R1(a, 9)     \
  R1(a, 10) R1(a, 11) R1(a, 12) R1(a, 13) R1(a, 14) R1(a, 15) R1(a, 16) R1(a, 17) R1(a, 18)    \
  R1(a, 19) R1(a, 20) R1(a, 21) R1(a, 22) R1(a, 23)
#define CLOBBER                                                                                \
  "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",      \
      "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", \
      "xmm21", "xmm22", "xmm23"
#define TIME(name, n, code)                                                         \
  {                                                                                 \
    double t0 = now();                                                              \
    for (long i = 0; i < n; ++i) __asm__ volatile(code::: CLOBBER);                 \
    printf("%-22s %.3f cycles per instruction\n", name, (now() - t0) / (n * 24.0) * ghz * 1e9); \
  }
#define BENCH(name, a, b) TIME(name, 20000000, OPS(a, b))

int main(void) {
  long x = 3;
  const long n = 100000000;
  double t0 = now();
  // Dependent multiplies: 3 cycles each on every x86-64 core of the last decade (a chain of
  // adds ran 3.5 a cycle on this Intel Xeon, whose renamer folds add-immediates, and printed
  // 8.26 GHz).
  for (long i = 0; i < n; ++i)
    __asm__ volatile("imul %0, %0\n imul %0, %0\n imul %0, %0\n imul %0, %0" : "+r"(x));
  const double ghz = n * 4.0 * 3.0 / (now() - t0) / 1e9;
  printf("clock about %.2f GHz\n", ghz);
  // 1.0f in every lane: the divider's speed may depend on its operands (zeros are fast).
  const float one = 1.0f;
  __asm__ volatile("vbroadcastss %0, %%zmm30\n vbroadcastss %0, %%zmm31" ::"m"(one) : "xmm30", "xmm31");
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
  // The divider: AdamW's square root and two divisions per element (torch's formulas, each
  // correctly rounded).
  BENCH("vdivps", "vdivps", "vdivps")
  TIME("vsqrtps", 2000000, OPS1("vsqrtps"))
  return 0;
}
