// optjit: 2 passes, 22 bytes per parameter, block 256, items 1, vector 1
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#pragma OPENCL FP_CONTRACT OFF
#define OPTJIT_F32_BITS(x) as_uint(x)
#define OPTJIT_F64_BITS(x) as_ulong(x)
#define OPTJIT_BITS_F32(x) as_float(x)
#define OPTJIT_BITS_F64(x) as_double(x)
#define OPTJIT_BF16_TO_F32(x) OPTJIT_BITS_F32((uint)(x) << 16)
#define OPTJIT_BF16_BITS(v) ((v) != (v) ? (uint)((OPTJIT_F32_BITS(v) >> 16) | 0x40u) : (uint)((OPTJIT_F32_BITS(v) + 0x7fffu + ((OPTJIT_F32_BITS(v) >> 16) & 1u)) >> 16))

__kernel void optjit_pass_0(__global ushort* restrict b0, __global ushort* restrict b1, __global ushort* restrict b2, __global ushort* restrict b3, __global const double* restrict uniforms, __global const long* restrict rows,
    __global const long* restrict chunks, const long nchunks, __global double* restrict partials, __global const double* restrict ctl) {
  if (ctl[1] != 0.0) return;  // a skip_if fired: the step writes nothing
  __local double red0[256];
  __local double red1[256];
  for (long c = get_group_id(0); c < nchunks; c += get_num_groups(0)) {
    const long t = chunks[3 * c], off = chunks[3 * c + 1], len = chunks[3 * c + 2];
    __global const long* row = rows + 5 * t;
    __global const double* u = uniforms + row[4];
    __global ushort* p0 = b0 + row[0] + off;
    __global ushort* p1 = b1 + row[1] + off;
    __global ushort* p2 = b2 + row[2] + off;
    __global ushort* p3 = b3 + row[3] + off;
    const float u0 = (float)u[0];
    const float u1 = (float)u[1];
    const float u2 = (float)u[2];
    const float u3 = (float)u[3];
    const float u4 = (float)u[4];
    const float u5 = (float)u[5];
    const bool u6 = (u[6] != 0);
    double acc0 = 0;
    double acc1 = 0;
    for (long i0 = get_local_id(0); i0 < len; i0 += 256) {
      const ushort L0_0 = p0[i0];
      const ushort L1_0 = p1[i0];
      const ushort L2_0 = p2[i0];
      const ushort L3_0 = p3[i0];
      {
        const float v0 = OPTJIT_BF16_TO_F32(L0_0);
        const float v1 = OPTJIT_BF16_TO_F32(L1_0);
        const float v2 = OPTJIT_BF16_TO_F32(L2_0);
        const float v3 = OPTJIT_BF16_TO_F32(L3_0);
        const float v5 = v2 * u0;
        const float v7 = fma(v1, u1, v5);
        const float v9 = v3 * u2;
        const float v11 = u3 * v1;
        const float v12 = fma(v11, v1, v9);
        acc0 += (double)v0 * (double)v0;
        const float v14 = sqrt(v12);
        const float v16 = v14 + u4;
        const float v17 = v7 / v16;
        const float v19 = fma(v0, u5, v17);
        const float v21 = u6 ? v19 : v17;
        acc1 += (double)v21 * (double)v21;
      }
    }
    const int l = (int)get_local_id(0);
    red0[l] = acc0;
    red1[l] = acc1;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int w = 128; w > 0; w >>= 1) {
      if (l < w) {
        red0[l] += red0[l + w];
        red1[l] += red1[l + w];
      }
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (l == 0) {
      partials[c * 2 + 0] = red0[0];
      partials[c * 2 + 1] = red1[0];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
}

__kernel void optjit_pass_1(__global ushort* restrict b0, __global ushort* restrict b1, __global ushort* restrict b2, __global ushort* restrict b3, __global const double* restrict uniforms, __global const long* restrict rows,
    __global const long* restrict chunks, const long nchunks, __global double* restrict partials, __global const double* restrict ctl) {
  if (ctl[1] != 0.0) return;  // a skip_if fired: the step writes nothing
  for (long c = get_group_id(0); c < nchunks; c += get_num_groups(0)) {
    const long t = chunks[3 * c], off = chunks[3 * c + 1], len = chunks[3 * c + 2];
    __global const long* row = rows + 5 * t;
    __global const double* u = uniforms + row[4];
    __global ushort* p0 = b0 + row[0] + off;
    __global ushort* p1 = b1 + row[1] + off;
    __global ushort* p2 = b2 + row[2] + off;
    __global ushort* p3 = b3 + row[3] + off;
    const float u0 = (float)u[0];
    const float u1 = (float)u[1];
    const float u2 = (float)u[2];
    const float u3 = (float)u[3];
    const float u4 = (float)u[4];
    const float u5 = (float)u[5];
    const bool u6 = (u[6] != 0);
    const float u7 = (float)u[7];
    for (long i0 = get_local_id(0); i0 < len; i0 += 256) {
      const ushort L0_0 = p0[i0];
      const ushort L1_0 = p1[i0];
      const ushort L2_0 = p2[i0];
      const ushort L3_0 = p3[i0];
      {
        ushort S0;
        ushort S2;
        ushort S3;
        const float v0 = OPTJIT_BF16_TO_F32(L0_0);
        const float v1 = OPTJIT_BF16_TO_F32(L1_0);
        const float v2 = OPTJIT_BF16_TO_F32(L2_0);
        const float v3 = OPTJIT_BF16_TO_F32(L3_0);
        const float v5 = v2 * u0;
        const float v7 = fma(v1, u1, v5);
        const float v9 = v3 * u2;
        const float v11 = u3 * v1;
        const float v12 = fma(v11, v1, v9);
        const float v13 = sqrt(v12);
        const float v15 = v13 + u4;
        const float v16 = v7 / v15;
        const float v18 = fma(v0, u5, v16);
        const float v20 = u6 ? v18 : v16;
        const float v22 = fma(v20, u7, v0);
        S2 = (ushort)OPTJIT_BF16_BITS(v7);
        S3 = (ushort)OPTJIT_BF16_BITS(v12);
        S0 = (ushort)OPTJIT_BF16_BITS(v22);
        p0[i0] = S0;
        p2[i0] = S2;
        p3[i0] = S3;
      }
    }
  }
}

double optjit_round_binary(double x, int mant, int emin, double max_finite) {
  if (!isfinite(x) || x == 0.0) return x;
  int e;
  frexp(x, &e);
  const int ex = e - 1 > emin ? e - 1 : emin;
  const double q = ldexp(1.0, ex - mant);
  const double r = rint(x / q) * q;
  const double limit = max_finite + ldexp(1.0, ilogb(max_finite) - mant - 1);
  if (fabs(r) > max_finite || fabs(x) >= limit)
    return copysign(OPTJIT_BITS_F64(0x7ff0000000000000ul), x);
  return r;
}

__kernel void optjit_segment_0(const __global double* hypers, __global double* ctl, const __global double* tinfo, __global double* vals, __global double* uniforms, const long T, const long G) {
  const long i = get_global_id(0);
  if (i < G) {
    const long g = i;
    const double h2 = hypers[g * 6 + 0];
    const double h3 = hypers[g * 6 + 1];
    const double h6 = 0x1p+0 - h2;
    const double h7 = (double)(float)h2;
    vals[g * 20 + 4] = h7;
    const double h9 = (double)(float)h6;
    vals[g * 20 + 5] = h9;
    const double h12 = 0x1p+0 - h3;
    const double h13 = (double)(float)h3;
    vals[g * 20 + 7] = h13;
    const double h15 = (double)(float)h12;
    vals[g * 20 + 8] = h15;
    const double h18 = hypers[g * 6 + 2];
    const double h19 = hypers[g * 6 + 3];
    vals[g * 20 + 10] = h19;
    const double h27 = hypers[g * 6 + 4];
    const double h29 = (double)(float)h27;
    vals[g * 20 + 13] = h29;
    const double h32 = hypers[g * 6 + 5];
    const double h33 = (double)(float)h32;
    vals[g * 20 + 15] = h33;
    const double h35 = ((h32 != 0x0p+0) ? 1.0 : 0.0);
    vals[g * 20 + 16] = h35;
    const double h48 = -h18;
    vals[g * 20 + 17] = h48;
    const double h49 = (double)(float)h48;
    const double h50 = h49;
    vals[g * 20 + 19] = h50;
  }
  if (i < T) {
    const long t = i;
    const long g = (long)tinfo[4 * t];
    const double numel = tinfo[4 * t + 1];
    const double first = tinfo[4 * t + 2];
    const double codes = tinfo[4 * t + 3];
    const double h2 = hypers[g * 6 + 0];
    const double h3 = hypers[g * 6 + 1];
    const double h6 = 0x1p+0 - h2;
    const double h7 = (double)(float)h2;
    const double h9 = (double)(float)h6;
    const double h12 = 0x1p+0 - h3;
    const double h13 = (double)(float)h3;
    const double h15 = (double)(float)h12;
    const double h18 = hypers[g * 6 + 2];
    const double h19 = hypers[g * 6 + 3];
    const double h27 = hypers[g * 6 + 4];
    const double h29 = (double)(float)h27;
    const double h32 = hypers[g * 6 + 5];
    const double h33 = (double)(float)h32;
    const double h35 = ((h32 != 0x0p+0) ? 1.0 : 0.0);
    const double h48 = -h18;
    const double h49 = (double)(float)h48;
    const double h50 = h49;
    uniforms[t * 7 + 0] = h7;
    uniforms[t * 7 + 1] = h9;
    uniforms[t * 7 + 2] = h13;
    uniforms[t * 7 + 3] = h15;
    uniforms[t * 7 + 4] = h29;
    uniforms[t * 7 + 5] = h33;
    uniforms[t * 7 + 6] = h35;
  }
}

__kernel void optjit_combine_0(const __global double* partials, const __global long* first, __global double* vals, __global double* fold_rows, const long T, const long G) {
  __local double lane[256];
  const long t = get_group_id(0), j0 = get_local_id(0), size = get_local_size(0);
  if (t >= T) return;
  const long c0 = first[t], n = first[t + 1] - c0;
    {
      const long run = n > 0 ? (n + 256 - 1) / 256 : 1;
      const long used = (n + run - 1) / run;
      for (long j = j0; j < (used > 0 ? used : 1); j += size) {
        const long i1 = j * run + run < n ? j * run + run : n;
        double acc = 0.0;
        for (long i = j * run; i < i1; ++i) acc = acc + partials[(c0 + i) * 2 + 0];
        lane[j] = acc;
      }
      barrier(CLK_LOCAL_MEM_FENCE);
      for (long s = 1; s < used; s *= 2) {
        for (long j = j0 * 2 * s; j + s < used; j += size * 2 * s)
          lane[j] = lane[j] + lane[j + s];
        barrier(CLK_LOCAL_MEM_FENCE);
      }
    }
  if (j0 == 0) vals[G * 20 + t * 22 + 0] = lane[0];
  barrier(CLK_LOCAL_MEM_FENCE);
    {
      const long run = n > 0 ? (n + 256 - 1) / 256 : 1;
      const long used = (n + run - 1) / run;
      for (long j = j0; j < (used > 0 ? used : 1); j += size) {
        const long i1 = j * run + run < n ? j * run + run : n;
        double acc = 0.0;
        for (long i = j * run; i < i1; ++i) acc = acc + partials[(c0 + i) * 2 + 1];
        lane[j] = acc;
      }
      barrier(CLK_LOCAL_MEM_FENCE);
      for (long s = 1; s < used; s *= 2) {
        for (long j = j0 * 2 * s; j + s < used; j += size * 2 * s)
          lane[j] = lane[j] + lane[j + s];
        barrier(CLK_LOCAL_MEM_FENCE);
      }
    }
  if (j0 == 0) vals[G * 20 + t * 22 + 6] = lane[0];
  barrier(CLK_LOCAL_MEM_FENCE);
}

__kernel void optjit_shard_out_0(const __global double* vals, const __global double* fold_rows, __global double* sbuf, const __global long* owner, const long T, const long G, const long S, const long P, const long rank) {
  const long j0 = get_local_id(0), size = get_local_size(0), A = P > 0 ? P : S;
  for (long slot = j0; slot < S; slot += size) {
    const long t = owner[slot];
    sbuf[(0 * A + 0 * S) + slot] = t < 0 ? 0.0 : vals[G * 20 + t * 22 + 0];
    sbuf[(0 * A + 1 * S) + slot] = t < 0 ? 0.0 : vals[G * 20 + t * 22 + 6];
  }
  for (long slot = j0; P > 0 && slot < P; slot += size) {
    const long g = 0;
  }
}

__kernel void optjit_shard_in_0(const __global double* sbuf, __global double* vals, __global double* fold_rows, const __global long* first, const __global long* tensor_of, const long T, const long G, const long S, const long Tg, const long P) {
  const long j0 = get_local_id(0), size = get_local_size(0), A = P > 0 ? P : S;
  for (long t = j0; t < T; t += size) {
    const long tg = tensor_of[t];
    const long a = first[tg], b = first[tg + 1];
    if (P > 0 && a == b) continue;
    double v = a == b ? 0x0p+0 : sbuf[(0 * A + 0 * S) + a];
    for (long p = a + 1; p < b; ++p) v = v + sbuf[(0 * A + 0 * S) + p];
    vals[G * 20 + t * 22 + 0] = v;
  }
  for (long t = j0; t < T; t += size) {
    const long tg = tensor_of[t];
    const long a = first[tg], b = first[tg + 1];
    if (P > 0 && a == b) continue;
    double v = a == b ? 0x0p+0 : sbuf[(0 * A + 1 * S) + a];
    for (long p = a + 1; p < b; ++p) v = v + sbuf[(0 * A + 1 * S) + p];
    vals[G * 20 + t * 22 + 6] = v;
  }
}

__kernel void optjit_segment_1(const __global double* hypers, __global double* ctl, const __global double* tinfo, __global double* vals, __global double* uniforms, const long T, const long G) {
  const long i = get_global_id(0);
  if (i < G) {
    const long g = i;
  }
  if (i < T) {
    const long t = i;
    const long g = (long)tinfo[4 * t];
    const double numel = tinfo[4 * t + 1];
    const double first = tinfo[4 * t + 2];
    const double codes = tinfo[4 * t + 3];
    const double h22 = sqrt(vals[G * 20 + t * 22 + 0]);
    const double h23 = (double)(float)h22;
    const double h24 = h23;
    const double h25 = (isnan(h24) || isnan(0x0p+0)) ? h24 + 0x0p+0 : (h24 > 0x0p+0 ? h24 : 0x0p+0);
    const double h26 = (isnan(h25) || isnan(vals[g * 20 + 10])) ? h25 + vals[g * 20 + 10] : (h25 < vals[g * 20 + 10] ? h25 : vals[g * 20 + 10]);
    const double h38 = sqrt(vals[G * 20 + t * 22 + 6]);
    const double h39 = (double)(float)h38;
    const double h40 = h39;
    const double h41 = h26 / h40;
    const double h42 = (double)(float)h41;
    const double h43 = h42;
    const double h44 = ((h26 == 0x0p+0) ? 1.0 : 0.0);
    const double h45 = ((h40 == 0x0p+0) ? 1.0 : 0.0);
    const double h46 = ((h44 != 0.0 || h45 != 0.0) ? 1.0 : 0.0);
    const double h47 = (h46 != 0.0 ? 0x1p+0 : h43);
    const double h51 = vals[g * 20 + 19] * h47;
    const double h52 = (double)(float)h51;
    const double h53 = h52;
    const double h54 = (h46 != 0.0 ? vals[g * 20 + 17] : h53);
    const double h55 = (double)(float)h54;
    uniforms[t * 8 + 0] = vals[g * 20 + 4];
    uniforms[t * 8 + 1] = vals[g * 20 + 5];
    uniforms[t * 8 + 2] = vals[g * 20 + 7];
    uniforms[t * 8 + 3] = vals[g * 20 + 8];
    uniforms[t * 8 + 4] = vals[g * 20 + 13];
    uniforms[t * 8 + 5] = vals[g * 20 + 15];
    uniforms[t * 8 + 6] = vals[g * 20 + 16];
    uniforms[t * 8 + 7] = h55;
  }
}

__kernel void optjit_segment_2(const __global double* hypers, __global double* ctl, const __global double* tinfo, __global double* vals, __global double* uniforms, const long T, const long G) {
  const long i = get_global_id(0);
  if (i < G) {
    const long g = i;
  }
  if (i < T) {
    const long t = i;
    const long g = (long)tinfo[4 * t];
    const double numel = tinfo[4 * t + 1];
    const double first = tinfo[4 * t + 2];
    const double codes = tinfo[4 * t + 3];
  }
}

__kernel void optjit_commit(__global double* ctl, const long G) {
  if (get_global_id(0) != 0) return;
  const double skipped = ctl[1];
  if (skipped == 0.0) {
    ctl[0] = ctl[0] + 1.0;
  }
  ctl[2] = skipped;
  ctl[1] = 0.0;
}
