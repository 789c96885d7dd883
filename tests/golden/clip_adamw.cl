// optjit: 2 passes, 32 bytes per parameter, block 256, items 1, vector 1
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#pragma OPENCL FP_CONTRACT OFF
#define OPTJIT_F32_BITS(x) as_uint(x)
#define OPTJIT_F64_BITS(x) as_ulong(x)
#define OPTJIT_BITS_F32(x) as_float(x)
#define OPTJIT_BITS_F64(x) as_double(x)
#define OPTJIT_BF16_TO_F32(x) OPTJIT_BITS_F32((uint)(x) << 16)
#define OPTJIT_BF16_BITS(v) ((v) != (v) ? (uint)((OPTJIT_F32_BITS(v) >> 16) | 0x40u) : (uint)((OPTJIT_F32_BITS(v) + 0x7fffu + ((OPTJIT_F32_BITS(v) >> 16) & 1u)) >> 16))

__kernel void optjit_pass_0(__global float* restrict b0, __global float* restrict b1, __global float* restrict b2, __global float* restrict b3, __global const double* restrict uniforms, __global const long* restrict rows,
    __global const long* restrict chunks, const long nchunks, __global double* restrict partials) {
  __local double red0[256];
  for (long c = get_group_id(0); c < nchunks; c += get_num_groups(0)) {
    const long t = chunks[3 * c], off = chunks[3 * c + 1], len = chunks[3 * c + 2];
    __global const long* row = rows + 5 * t;
    __global const double* u = uniforms + row[4];
    __global float* p1 = b1 + row[1] + off;
    double acc0 = 0;
    for (long i0 = get_local_id(0); i0 < len; i0 += 256) {
      const float L1_0 = p1[i0];
      {
        const float v0 = L1_0;
        acc0 += (double)v0 * (double)v0;
      }
    }
    const int l = (int)get_local_id(0);
    red0[l] = acc0;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int w = 128; w > 0; w >>= 1) {
      if (l < w) {
        red0[l] += red0[l + w];
      }
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (l == 0) {
      partials[c * 1 + 0] = red0[0];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
}

__kernel void optjit_pass_1(__global float* restrict b0, __global float* restrict b1, __global float* restrict b2, __global float* restrict b3, __global const double* restrict uniforms, __global const long* restrict rows,
    __global const long* restrict chunks, const long nchunks, __global double* restrict partials) {
  for (long c = get_group_id(0); c < nchunks; c += get_num_groups(0)) {
    const long t = chunks[3 * c], off = chunks[3 * c + 1], len = chunks[3 * c + 2];
    __global const long* row = rows + 5 * t;
    __global const double* u = uniforms + row[4];
    __global float* p0 = b0 + row[0] + off;
    __global float* p1 = b1 + row[1] + off;
    __global float* p2 = b2 + row[2] + off;
    __global float* p3 = b3 + row[3] + off;
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
    for (long i0 = get_local_id(0); i0 < len; i0 += 256) {
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
        const float v12 = fma(u3, v10, v5);
        const float v14 = fma(u4, v10, v2);
        const float v16 = u5 ? v14 : v12;
        const float v18 = v3 * u6;
        const float v20 = u7 * v5;
        const float v21 = fma(v20, v5, v18);
        const float v22 = sqrt(v21);
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
