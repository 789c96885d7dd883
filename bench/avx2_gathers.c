// What an AVX2 gather costs on this CPU, against scalar lookups
// (bench/results/cpu-2026-11-28-zen3.md): a 32-bit gather of 8 lanes from the 64 KiB lookup table
// (indices that depend on the last gather, and 4 independent chains) and from the 1 KiB map, and 8
// scalar byte lookups.
//   gcc -O2 -mavx2 -mfma bench/avx2_gathers.c -o /tmp/avx2_gathers && /tmp/avx2_gathers
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
static double now() {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
int main() {
  static uint8_t lut[65536 + 3];
  static float map[256];
  for (int i = 0; i < 65539; i++) lut[i] = i * 7;
  for (int i = 0; i < 256; i++) map[i] = i * 0.5f;
  __m256i acc = _mm256_setzero_si256();
  __m256 accf = _mm256_setzero_ps();
  __m256i idx = _mm256_setr_epi32(1, 300, 7000, 20000, 33000, 41000, 52000, 65000);
  __m256i step = _mm256_set1_epi32(97), mask = _mm256_set1_epi32(65535);
  long N = 100000000;
  double t0 = now();
  for (long i = 0; i < N; i++) {
    idx = _mm256_and_si256(_mm256_add_epi32(idx, step), mask);
    acc = _mm256_add_epi32(acc, _mm256_i32gather_epi32((const int*)lut, idx, 1));
  }
  double t1 = now();
  __m256i c = _mm256_setr_epi32(1, 30, 70, 200, 33, 41, 52, 250);
  __m256i s8 = _mm256_set1_epi32(3), m8 = _mm256_set1_epi32(255);
  for (long i = 0; i < N; i++) {
    c = _mm256_and_si256(_mm256_add_epi32(c, s8), m8);
    accf = _mm256_add_ps(accf, _mm256_i32gather_ps(map, c, 4));
  }
  double t2 = now();
  // independent gathers (throughput): 4 chains
  __m256i i0 = idx, i1 = _mm256_add_epi32(idx, step), i2 = _mm256_add_epi32(i1, step),
          i3 = _mm256_add_epi32(i2, step);
  __m256i a0 = acc, a1 = acc, a2 = acc, a3 = acc;
  for (long i = 0; i < N / 4; i++) {
    a0 = _mm256_add_epi32(a0, _mm256_i32gather_epi32((const int*)lut, i0, 1));
    a1 = _mm256_add_epi32(a1, _mm256_i32gather_epi32((const int*)lut, i1, 1));
    a2 = _mm256_add_epi32(a2, _mm256_i32gather_epi32((const int*)lut, i2, 1));
    a3 = _mm256_add_epi32(a3, _mm256_i32gather_epi32((const int*)lut, i3, 1));
    i0 = _mm256_and_si256(_mm256_add_epi32(i0, step), mask);
    i1 = _mm256_and_si256(_mm256_add_epi32(i1, step), mask);
    i2 = _mm256_and_si256(_mm256_add_epi32(i2, step), mask);
    i3 = _mm256_and_si256(_mm256_add_epi32(i3, step), mask);
  }
  double t3 = now();
  // scalar byte lookups: 8 per iteration
  uint32_t sacc = 0;
  uint32_t j[8] = {1, 300, 7000, 20000, 33000, 41000, 52000, 65000};
  for (long i = 0; i < N; i++) {
    for (int k = 0; k < 8; k++) {
      j[k] = (j[k] + 97) & 65535;
      sacc += lut[j[k]];
    }
  }
  double t4 = now();
  int out[8];
  _mm256_storeu_si256((__m256i*)out,
                      _mm256_add_epi32(_mm256_add_epi32(a0, a1), _mm256_add_epi32(a2, a3)));
  float of[8];
  _mm256_storeu_ps(of, accf);
  printf(
      "lut gather dependent-index: %.2f ns/gather\nmap gather: %.2f ns/gather\nlut gather 4 indep: "
      "%.2f ns/gather\nscalar 8 lookups: %.2f ns/8\n(%d %f %u)\n",
      (t1 - t0) / N * 1e9, (t2 - t1) / N * 1e9, (t3 - t2) / N * 1e9, (t4 - t3) / N * 1e9, out[0],
      of[0], sacc);
}
