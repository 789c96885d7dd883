// optjit: 2 passes, 18.125 bytes per parameter, block 256, items 1, vector 1
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#pragma OPENCL FP_CONTRACT OFF
#define OPTJIT_F32_BITS(x) as_uint(x)
#define OPTJIT_F64_BITS(x) as_ulong(x)
#define OPTJIT_BITS_F32(x) as_float(x)
#define OPTJIT_BITS_F64(x) as_double(x)
#define OPTJIT_BF16_TO_F32(x) OPTJIT_BITS_F32((uint)(x) << 16)
#define OPTJIT_BF16_BITS(v) ((v) != (v) ? (uint)((OPTJIT_F32_BITS(v) >> 16) | 0x40u) : (uint)((OPTJIT_F32_BITS(v) + 0x7fffu + ((OPTJIT_F32_BITS(v) >> 16) & 1u)) >> 16))
__constant uint optjit_map_q4[16] = {
  0xbf633333u, 0xbf29999au, 0xbee00000u, 0xbe599999u, 0xbd9eb852u, 0xbd051eb9u, 0xbbb43958u, 0x00000000u,
  0x3bb43958u, 0x3d051eb9u, 0x3d9eb852u, 0x3e599999u, 0x3ee00000u, 0x3f29999au, 0x3f633333u, 0x3f800000u,
};
__constant uint optjit_thr_q4[15] = {
  0xbf466666u, 0xbf0ccccdu, 0xbea66666u, 0xbe147ae1u, 0xbd6147aeu, 0xbc9ba5e4u, 0xbb343958u, 0x3b343958u,
  0x3c9ba5e4u, 0x3d6147afu, 0x3e147ae1u, 0x3ea66667u, 0x3f0ccccdu, 0x3f466667u, 0x3f71999au,
};
uint optjit_quantize_q4(float y) {
  uint c = 0u;
  c += y >= OPTJIT_BITS_F32(optjit_thr_q4[c + 7u]) ? 8u : 0u;
  c += y >= OPTJIT_BITS_F32(optjit_thr_q4[c + 3u]) ? 4u : 0u;
  c += y >= OPTJIT_BITS_F32(optjit_thr_q4[c + 1u]) ? 2u : 0u;
  c += y >= OPTJIT_BITS_F32(optjit_thr_q4[c + 0u]) ? 1u : 0u;
  return c;
}
uint optjit_quantize_q4u(float y) {
  const float z = (y * 0x1p+4f + -0.5f);
  return z >= 0x1.ep+3f ? 15u : (z >= 0.0f ? (uint)z : 0u);
}

__kernel void optjit_pass_0(__global float* restrict b0, __global float* restrict b1, __global float* restrict b2, __global float* restrict b3, __global float* restrict b4, __global float* restrict b5, __global const double* restrict uniforms, __global const long* restrict rows,
    __global const long* restrict chunks, const long nchunks, __global double* restrict partials) {
  __local double red0[256];
  for (long c = get_group_id(0); c < nchunks; c += get_num_groups(0)) {
    const long t = chunks[3 * c], off = chunks[3 * c + 1], len = chunks[3 * c + 2];
    __global const long* row = rows + 7 * t;
    __global const double* u = uniforms + row[6];
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

__kernel void optjit_pass_1(__global float* restrict b0, __global float* restrict b1, __global float* restrict b2, __global float* restrict b3, __global float* restrict b4, __global float* restrict b5, __global const double* restrict uniforms, __global const long* restrict rows,
    __global const long* restrict chunks, const long nchunks, __global double* restrict partials) {
  __local float qv2[128];
  __local float qv4[128];
  __local uint qm[256];
  for (long c = get_group_id(0); c < nchunks; c += get_num_groups(0)) {
    const long t = chunks[3 * c], off = chunks[3 * c + 1], len = chunks[3 * c + 2];
    __global const long* row = rows + 7 * t;
    __global const double* u = uniforms + row[6];
    __global float* p0 = b0 + row[0] + off;
    __global float* p1 = b1 + row[1] + off;
    __global float* p2 = b2 + row[2] + off;
    __global float* p4 = b4 + row[4] + off;
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
    __global uchar* q2 = (__global uchar*)(b2 + row[2]) + (off >> 1);
    __global float* s2 = b3 + (row[3] < 0 ? 0 : row[3]);
    __global uchar* q4 = (__global uchar*)(b4 + row[4]) + (off >> 1);
    __global float* s4 = b5 + (row[5] < 0 ? 0 : row[5]);
    if (!(row[3] < 0)) {
      for (long e0 = 0; e0 < len; e0 += 128) {
        const long n = len - e0 < 128 ? len - e0 : 128;
        const long blk = ((off + e0) >> 7u);
        const float sc2 = s2[blk];
        const float sc4 = s4[blk];
        uint am2 = 0u;
        uint am4 = 0u;
        for (long j = get_local_id(0); j < n; j += 256) {
          const long i0 = e0 + j;
          const float L0_0 = p0[i0];
          const float L1_0 = p1[i0];
          const float L2_0 = OPTJIT_BITS_F32(optjit_map_q4[((q2[i0 >> 1] >> ((i0 & 1) != 0 ? 0u : 4u)) & 15u)]) * sc2;
          const float L4_0 = (float)(((q4[i0 >> 1] >> ((i0 & 1) != 0 ? 0u : 4u)) & 15u) + 1u) * 0x1p-4f * sc4;
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
            S4 = v21;
            S0 = v30;
            p0[i0] = S0;
            qv2[j] = S2;
            am2 = am2 > (OPTJIT_F32_BITS(S2) & 0x7fffffffu) ? am2 : (OPTJIT_F32_BITS(S2) & 0x7fffffffu);
            qv4[j] = S4;
            am4 = am4 > (OPTJIT_F32_BITS(S4) & 0x7fffffffu) ? am4 : (OPTJIT_F32_BITS(S4) & 0x7fffffffu);
          }
        }
        qm[get_local_id(0)] = am2;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int w = 128; w > 0; w >>= 1u) {
          if ((int)get_local_id(0) < w) {
            qm[get_local_id(0)] = qm[get_local_id(0)] > qm[get_local_id(0) + w] ? qm[get_local_id(0)] : qm[get_local_id(0) + w];
          }
          barrier(CLK_LOCAL_MEM_FENCE);
        }
        const float ab2 = OPTJIT_BITS_F32(qm[0]);
        barrier(CLK_LOCAL_MEM_FENCE);
        const float sb2 = (ab2 <= 0x1.197998p-40f ? 0x1.197998p-40f : ab2);
        if (get_local_id(0) == 0) {
          s2[blk] = sb2;
        }
        for (long j = 2 * get_local_id(0); j < n; j += 512) {
          q2[(e0 + j) >> 1] = (optjit_quantize_q4(qv2[j] / sb2) << 4u) | optjit_quantize_q4(qv2[j + 1] / sb2);
        }
        qm[get_local_id(0)] = am4;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int w = 128; w > 0; w >>= 1u) {
          if ((int)get_local_id(0) < w) {
            qm[get_local_id(0)] = qm[get_local_id(0)] > qm[get_local_id(0) + w] ? qm[get_local_id(0)] : qm[get_local_id(0) + w];
          }
          barrier(CLK_LOCAL_MEM_FENCE);
        }
        const float ab4 = OPTJIT_BITS_F32(qm[0]);
        barrier(CLK_LOCAL_MEM_FENCE);
        const float sb4 = (ab4 <= 0x1.197998p-40f ? 0x1.197998p-40f : ab4);
        if (get_local_id(0) == 0) {
          s4[blk] = sb4;
        }
        for (long j = 2 * get_local_id(0); j < n; j += 512) {
          q4[(e0 + j) >> 1] = (optjit_quantize_q4u(qv4[j] / sb4) << 4u) | optjit_quantize_q4u(qv4[j + 1] / sb4);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
      }
    } else {
    for (long i0 = get_local_id(0); i0 < len; i0 += 256) {
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
