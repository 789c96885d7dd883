// optjit: 2 passes, 12 bytes per parameter, block 256, items 1, vector 1
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#pragma OPENCL FP_CONTRACT OFF
#define OPTJIT_F32_BITS(x) as_uint(x)
#define OPTJIT_F64_BITS(x) as_ulong(x)
#define OPTJIT_BITS_F32(x) as_float(x)
#define OPTJIT_BITS_F64(x) as_double(x)
#define OPTJIT_BF16_TO_F32(x) OPTJIT_BITS_F32((uint)(x) << 16)
#define OPTJIT_BF16_BITS(v) ((v) != (v) ? (uint)((OPTJIT_F32_BITS(v) >> 16) | 0x40u) : (uint)((OPTJIT_F32_BITS(v) + 0x7fffu + ((OPTJIT_F32_BITS(v) >> 16) & 1u)) >> 16))

__kernel void optjit_pass_0(__global ushort* restrict b0, __global ushort* restrict b1, __global ushort* restrict b2, __global const double* restrict uniforms, __global const long* restrict rows,
    __global const long* restrict chunks, const long nchunks, __global double* restrict partials) {
  __local uint red0[256];
  for (long c = get_group_id(0); c < nchunks; c += get_num_groups(0)) {
    const long t = chunks[3 * c], off = chunks[3 * c + 1], len = chunks[3 * c + 2];
    __global const long* row = rows + 4 * t;
    __global const double* u = uniforms + row[3];
    __global ushort* p1 = b1 + row[1] + off;
    const float u0 = (float)u[0];
    uint acc0 = 0;
    for (long i0 = get_local_id(0); i0 < len; i0 += 256) {
      const float L1_0 = vload_half(i0, (__global const half*)p1);
      {
        const float v0 = L1_0;
        const float v2 = v0 * u0;
        acc0 = acc0 > (OPTJIT_F32_BITS(v2) & 0x7fffffffu) ? acc0 : (OPTJIT_F32_BITS(v2) & 0x7fffffffu);
      }
    }
    const int l = (int)get_local_id(0);
    red0[l] = acc0;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int w = 128; w > 0; w >>= 1) {
      if (l < w) {
        red0[l] = red0[l] > red0[l + w] ? red0[l] : red0[l + w];
      }
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (l == 0) {
      partials[c * 1 + 0] = (red0[0] >= 0x7f800000u ? 1.0 : 0.0);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
}

__kernel void optjit_pass_1(__global ushort* restrict b0, __global ushort* restrict b1, __global ushort* restrict b2, __global const double* restrict uniforms, __global const long* restrict rows,
    __global const long* restrict chunks, const long nchunks, __global double* restrict partials) {
  for (long c = get_group_id(0); c < nchunks; c += get_num_groups(0)) {
    const long t = chunks[3 * c], off = chunks[3 * c + 1], len = chunks[3 * c + 2];
    __global const long* row = rows + 4 * t;
    __global const double* u = uniforms + row[3];
    __global ushort* p0 = b0 + row[0] + off;
    __global ushort* p1 = b1 + row[1] + off;
    __global ushort* p2 = b2 + row[2] + off;
    const float u0 = (float)u[0];
    const float u1 = (float)u[1];
    const bool u2 = (u[2] != 0);
    const float u3 = (float)u[3];
    const float u4 = (float)u[4];
    const bool u5 = (u[5] != 0);
    const bool u6 = (u[6] != 0);
    const float u7 = (float)u[7];
    if (!u6) {  // when %28=0: 6 B/param
    for (long i0 = get_local_id(0); i0 < len; i0 += 256) {
      const float L0_0 = vload_half(i0, (__global const half*)p0);
      const float L1_0 = vload_half(i0, (__global const half*)p1);
      {
        float S0;
        const float v0 = L0_0;
        const float v1 = L1_0;
        const float v3 = v1 * u0;
        const float v5 = fma(v0, u1, v3);
        const float v7 = u2 ? v5 : v3;
        const float v9 = fma(v7, u7, v0);
        S0 = v9;
        vstore_half_rte(S0, i0, (__global half*)p0);
      }
    }
    } else {  // when %28=1: 10 B/param
    for (long i0 = get_local_id(0); i0 < len; i0 += 256) {
      const float L0_0 = vload_half(i0, (__global const half*)p0);
      const float L1_0 = vload_half(i0, (__global const half*)p1);
      const float L2_0 = vload_half(i0, (__global const half*)p2);
      {
        float S0;
        float S2;
        const float v0 = L0_0;
        const float v1 = L1_0;
        const float v2 = L2_0;
        const float v4 = v1 * u0;
        const float v6 = fma(v0, u1, v4);
        const float v8 = u2 ? v6 : v4;
        const float v10 = v2 * u3;
        const float v12 = fma(v8, u4, v10);
        const float v14 = u5 ? v8 : v12;
        const float v16 = fma(v14, u7, v0);
        S2 = v14;
        S0 = v16;
        vstore_half_rte(S0, i0, (__global half*)p0);
        vstore_half_rte(S2, i0, (__global half*)p2);
      }
    }
    }
  }
}
