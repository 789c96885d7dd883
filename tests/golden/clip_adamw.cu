// optjit: 2 passes, 32 bytes per parameter, block 256, items 1, vector 1
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
  for (long long c = blockIdx.x; c < nchunks; c += gridDim.x) {
    const long long t = chunks[3 * c], off = chunks[3 * c + 1], len = chunks[3 * c + 2];
    const OptjitRow row = rows[t];
    const double* u = row.uniforms;
    float* p0 = (float*)row.buffers[0] + off;
    float* p1 = (float*)row.buffers[1] + off;
    float* p2 = (float*)row.buffers[2] + off;
    float* p3 = (float*)row.buffers[3] + off;
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
    for (long long i0 = threadIdx.x; i0 < len; i0 += 256) {
      const float L0_0 = p0[i0];
      const float L1_0 = p1[i0];
      const float L2_0 = p2[i0];
      const float L3_0 = p3[i0];
      {
        float S0;
        float S2;
        float S3;
        const float v0 = L0_0;
        const float v1 = L1_0;
        const float v2 = L2_0;
        const float v3 = L3_0;
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
        S3 = v21;
        S0 = v30;
        p0[i0] = S0;
        p2[i0] = S2;
        p3[i0] = S3;
      }
    }
  }
}
