// optjit: 2 passes, 18.125 bytes per parameter, block 256, items 1, vector 1
#define OPTJIT_F32_BITS(x) __float_as_uint(x)
#define OPTJIT_F64_BITS(x) ((unsigned long long)__double_as_longlong(x))
#define OPTJIT_BITS_F32(x) __uint_as_float(x)
#define OPTJIT_BITS_F64(x) __longlong_as_double((long long)(x))
__device__ __forceinline__ float optjit_f16_to_f32(unsigned short h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ unsigned short optjit_f32_to_f16(float f) { unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
#define OPTJIT_F16_TO_F32(x) optjit_f16_to_f32(x)
#define OPTJIT_F32_TO_F16(v) optjit_f32_to_f16(v)
struct OptjitRow { void* const* buffers; const double* uniforms; };
#define OPTJIT_BF16_TO_F32(x) OPTJIT_BITS_F32((unsigned int)(x) << 16)
#define OPTJIT_BF16_BITS(v) ((v) != (v) ? (unsigned int)((OPTJIT_F32_BITS(v) >> 16) | 0x40u) : (unsigned int)((OPTJIT_F32_BITS(v) + 0x7fffu + ((OPTJIT_F32_BITS(v) >> 16) & 1u)) >> 16))
__device__ const unsigned int optjit_map_q4[16] = {
  0xbf633333u, 0xbf29999au, 0xbee00000u, 0xbe599999u, 0xbd9eb852u, 0xbd051eb9u, 0xbbb43958u, 0x00000000u,
  0x3bb43958u, 0x3d051eb9u, 0x3d9eb852u, 0x3e599999u, 0x3ee00000u, 0x3f29999au, 0x3f633333u, 0x3f800000u,
};
__shared__ unsigned int optjit_map_q4_s[16];
__device__ const unsigned int optjit_thr_q4[15] = {
  0xbf466666u, 0xbf0ccccdu, 0xbea66666u, 0xbe147ae1u, 0xbd6147aeu, 0xbc9ba5e4u, 0xbb343958u, 0x3b343958u,
  0x3c9ba5e4u, 0x3d6147afu, 0x3e147ae1u, 0x3ea66667u, 0x3f0ccccdu, 0x3f466667u, 0x3f71999au,
};
__shared__ unsigned int optjit_thr_q4_s[15];
__device__ static unsigned int optjit_quantize_q4(float y) {
  unsigned int c = 0u;
  c += y >= OPTJIT_BITS_F32(optjit_thr_q4_s[c + 7u]) ? 8u : 0u;
  c += y >= OPTJIT_BITS_F32(optjit_thr_q4_s[c + 3u]) ? 4u : 0u;
  c += y >= OPTJIT_BITS_F32(optjit_thr_q4_s[c + 1u]) ? 2u : 0u;
  c += y >= OPTJIT_BITS_F32(optjit_thr_q4_s[c + 0u]) ? 1u : 0u;
  return c;
}
__device__ static unsigned int optjit_quantize_q4u(float y) {
  const float z = (y * 0x1p+4f + -0.5f);
  return z >= 0x1.ep+3f ? 15u : (z >= 0.0f ? (unsigned int)z : 0u);
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
    for (long long i0 = threadIdx.x; i0 < len; i0 += 256) {
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
  for (int k = (int)threadIdx.x; k < 16; k += 256) {
    optjit_map_q4_s[k] = optjit_map_q4[k];
  }
  for (int k = (int)threadIdx.x; k < 15; k += 256) {
    optjit_thr_q4_s[k] = optjit_thr_q4[k];
  }
  __syncthreads();
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
    unsigned char* q2 = (unsigned char*)row.buffers[2] + (off >> 1);
    float* s2 = (float*)row.buffers[3];
    unsigned char* q4 = (unsigned char*)row.buffers[4] + (off >> 1);
    float* s4 = (float*)row.buffers[5];
    if (!(s2 == 0)) {
      const long long lane = (long long)(threadIdx.x & 31u);
      for (long long e0 = (long long)(threadIdx.x >> 5u) * 128; e0 < len; e0 += 1024) {
        const long long n = len - e0 < 128 ? len - e0 : 128;
        const long long blk = ((off + e0) >> 7u);
        const float sc2 = s2[blk];
        const float sc4 = s4[blk];
        const long long i0 = e0 + lane + 0;
        float L0_0;
        float L1_0;
        float L2_0;
        float L4_0;
        if (lane + 0 < n) {
          L0_0 = p0[i0];
          L1_0 = p1[i0];
          L2_0 = OPTJIT_BITS_F32(optjit_map_q4_s[((q2[i0 >> 1] >> ((i0 & 1) != 0 ? 0u : 4u)) & 15u)]) * sc2;
          L4_0 = (float)(((q4[i0 >> 1] >> ((i0 & 1) != 0 ? 0u : 4u)) & 15u) + 1u) * 0x1p-4f * sc4;
        }
        const long long i1 = e0 + lane + 32;
        float L0_1;
        float L1_1;
        float L2_1;
        float L4_1;
        if (lane + 32 < n) {
          L0_1 = p0[i1];
          L1_1 = p1[i1];
          L2_1 = OPTJIT_BITS_F32(optjit_map_q4_s[((q2[i1 >> 1] >> ((i1 & 1) != 0 ? 0u : 4u)) & 15u)]) * sc2;
          L4_1 = (float)(((q4[i1 >> 1] >> ((i1 & 1) != 0 ? 0u : 4u)) & 15u) + 1u) * 0x1p-4f * sc4;
        }
        const long long i2 = e0 + lane + 64;
        float L0_2;
        float L1_2;
        float L2_2;
        float L4_2;
        if (lane + 64 < n) {
          L0_2 = p0[i2];
          L1_2 = p1[i2];
          L2_2 = OPTJIT_BITS_F32(optjit_map_q4_s[((q2[i2 >> 1] >> ((i2 & 1) != 0 ? 0u : 4u)) & 15u)]) * sc2;
          L4_2 = (float)(((q4[i2 >> 1] >> ((i2 & 1) != 0 ? 0u : 4u)) & 15u) + 1u) * 0x1p-4f * sc4;
        }
        const long long i3 = e0 + lane + 96;
        float L0_3;
        float L1_3;
        float L2_3;
        float L4_3;
        if (lane + 96 < n) {
          L0_3 = p0[i3];
          L1_3 = p1[i3];
          L2_3 = OPTJIT_BITS_F32(optjit_map_q4_s[((q2[i3 >> 1] >> ((i3 & 1) != 0 ? 0u : 4u)) & 15u)]) * sc2;
          L4_3 = (float)(((q4[i3 >> 1] >> ((i3 & 1) != 0 ? 0u : 4u)) & 15u) + 1u) * 0x1p-4f * sc4;
        }
        unsigned int am2 = 0u;
        float Q2_0 = 0.0f;
        float Q2_1 = 0.0f;
        float Q2_2 = 0.0f;
        float Q2_3 = 0.0f;
        unsigned int am4 = 0u;
        float Q4_0 = 0.0f;
        float Q4_1 = 0.0f;
        float Q4_2 = 0.0f;
        float Q4_3 = 0.0f;
        if (lane + 0 < n) {
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
          Q2_0 = S2;
          am2 = am2 > (OPTJIT_F32_BITS(S2) & 0x7fffffffu) ? am2 : (OPTJIT_F32_BITS(S2) & 0x7fffffffu);
          Q4_0 = S4;
          am4 = am4 > (OPTJIT_F32_BITS(S4) & 0x7fffffffu) ? am4 : (OPTJIT_F32_BITS(S4) & 0x7fffffffu);
        }
        if (lane + 32 < n) {
          float S0;
          float S2;
          float S4;
          const float v0 = L0_1;
          const float v1 = L1_1;
          const float v2 = L2_1;
          const float v3 = L4_1;
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
          p0[i1] = S0;
          Q2_1 = S2;
          am2 = am2 > (OPTJIT_F32_BITS(S2) & 0x7fffffffu) ? am2 : (OPTJIT_F32_BITS(S2) & 0x7fffffffu);
          Q4_1 = S4;
          am4 = am4 > (OPTJIT_F32_BITS(S4) & 0x7fffffffu) ? am4 : (OPTJIT_F32_BITS(S4) & 0x7fffffffu);
        }
        if (lane + 64 < n) {
          float S0;
          float S2;
          float S4;
          const float v0 = L0_2;
          const float v1 = L1_2;
          const float v2 = L2_2;
          const float v3 = L4_2;
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
          p0[i2] = S0;
          Q2_2 = S2;
          am2 = am2 > (OPTJIT_F32_BITS(S2) & 0x7fffffffu) ? am2 : (OPTJIT_F32_BITS(S2) & 0x7fffffffu);
          Q4_2 = S4;
          am4 = am4 > (OPTJIT_F32_BITS(S4) & 0x7fffffffu) ? am4 : (OPTJIT_F32_BITS(S4) & 0x7fffffffu);
        }
        if (lane + 96 < n) {
          float S0;
          float S2;
          float S4;
          const float v0 = L0_3;
          const float v1 = L1_3;
          const float v2 = L2_3;
          const float v3 = L4_3;
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
          p0[i3] = S0;
          Q2_3 = S2;
          am2 = am2 > (OPTJIT_F32_BITS(S2) & 0x7fffffffu) ? am2 : (OPTJIT_F32_BITS(S2) & 0x7fffffffu);
          Q4_3 = S4;
          am4 = am4 > (OPTJIT_F32_BITS(S4) & 0x7fffffffu) ? am4 : (OPTJIT_F32_BITS(S4) & 0x7fffffffu);
        }
        const unsigned int x2_16 = __shfl_xor_sync(0xffffffffu, am2, 16);
        am2 = am2 > x2_16 ? am2 : x2_16;
        const unsigned int x2_8 = __shfl_xor_sync(0xffffffffu, am2, 8);
        am2 = am2 > x2_8 ? am2 : x2_8;
        const unsigned int x2_4 = __shfl_xor_sync(0xffffffffu, am2, 4);
        am2 = am2 > x2_4 ? am2 : x2_4;
        const unsigned int x2_2 = __shfl_xor_sync(0xffffffffu, am2, 2);
        am2 = am2 > x2_2 ? am2 : x2_2;
        const unsigned int x2_1 = __shfl_xor_sync(0xffffffffu, am2, 1);
        am2 = am2 > x2_1 ? am2 : x2_1;
        const float ab2 = OPTJIT_BITS_F32(am2);
        const float sb2 = (ab2 <= 0x1.197998p-40f ? 0x1.197998p-40f : ab2);
        if (lane == 0) {
          s2[blk] = sb2;
        }
        const unsigned int c2_0 = lane + 0 < n ? optjit_quantize_q4(Q2_0 / sb2) : 0u;
        const unsigned int d2_0 = __shfl_xor_sync(0xffffffffu, c2_0, 1);
        if ((lane & 1) == 0 && lane + 0 < n) {
          q2[i0 >> 1] = (c2_0 << 4u) | d2_0;
        }
        const unsigned int c2_1 = lane + 32 < n ? optjit_quantize_q4(Q2_1 / sb2) : 0u;
        const unsigned int d2_1 = __shfl_xor_sync(0xffffffffu, c2_1, 1);
        if ((lane & 1) == 0 && lane + 32 < n) {
          q2[i1 >> 1] = (c2_1 << 4u) | d2_1;
        }
        const unsigned int c2_2 = lane + 64 < n ? optjit_quantize_q4(Q2_2 / sb2) : 0u;
        const unsigned int d2_2 = __shfl_xor_sync(0xffffffffu, c2_2, 1);
        if ((lane & 1) == 0 && lane + 64 < n) {
          q2[i2 >> 1] = (c2_2 << 4u) | d2_2;
        }
        const unsigned int c2_3 = lane + 96 < n ? optjit_quantize_q4(Q2_3 / sb2) : 0u;
        const unsigned int d2_3 = __shfl_xor_sync(0xffffffffu, c2_3, 1);
        if ((lane & 1) == 0 && lane + 96 < n) {
          q2[i3 >> 1] = (c2_3 << 4u) | d2_3;
        }
        const unsigned int x4_16 = __shfl_xor_sync(0xffffffffu, am4, 16);
        am4 = am4 > x4_16 ? am4 : x4_16;
        const unsigned int x4_8 = __shfl_xor_sync(0xffffffffu, am4, 8);
        am4 = am4 > x4_8 ? am4 : x4_8;
        const unsigned int x4_4 = __shfl_xor_sync(0xffffffffu, am4, 4);
        am4 = am4 > x4_4 ? am4 : x4_4;
        const unsigned int x4_2 = __shfl_xor_sync(0xffffffffu, am4, 2);
        am4 = am4 > x4_2 ? am4 : x4_2;
        const unsigned int x4_1 = __shfl_xor_sync(0xffffffffu, am4, 1);
        am4 = am4 > x4_1 ? am4 : x4_1;
        const float ab4 = OPTJIT_BITS_F32(am4);
        const float sb4 = (ab4 <= 0x1.197998p-40f ? 0x1.197998p-40f : ab4);
        if (lane == 0) {
          s4[blk] = sb4;
        }
        const unsigned int c4_0 = lane + 0 < n ? optjit_quantize_q4u(Q4_0 / sb4) : 0u;
        const unsigned int d4_0 = __shfl_xor_sync(0xffffffffu, c4_0, 1);
        if ((lane & 1) == 0 && lane + 0 < n) {
          q4[i0 >> 1] = (c4_0 << 4u) | d4_0;
        }
        const unsigned int c4_1 = lane + 32 < n ? optjit_quantize_q4u(Q4_1 / sb4) : 0u;
        const unsigned int d4_1 = __shfl_xor_sync(0xffffffffu, c4_1, 1);
        if ((lane & 1) == 0 && lane + 32 < n) {
          q4[i1 >> 1] = (c4_1 << 4u) | d4_1;
        }
        const unsigned int c4_2 = lane + 64 < n ? optjit_quantize_q4u(Q4_2 / sb4) : 0u;
        const unsigned int d4_2 = __shfl_xor_sync(0xffffffffu, c4_2, 1);
        if ((lane & 1) == 0 && lane + 64 < n) {
          q4[i2 >> 1] = (c4_2 << 4u) | d4_2;
        }
        const unsigned int c4_3 = lane + 96 < n ? optjit_quantize_q4u(Q4_3 / sb4) : 0u;
        const unsigned int d4_3 = __shfl_xor_sync(0xffffffffu, c4_3, 1);
        if ((lane & 1) == 0 && lane + 96 < n) {
          q4[i3 >> 1] = (c4_3 << 4u) | d4_3;
        }
      }
    } else {
    for (long long i0 = threadIdx.x; i0 < len; i0 += 256) {
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
