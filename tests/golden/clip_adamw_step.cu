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
    const long long* __restrict__ chunks, const long long nchunks, double* __restrict__ partials, const double* __restrict__ ctl) {
  if (ctl[1] != 0.0) return;  // a skip_if fired: the step writes nothing
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
    const long long* __restrict__ chunks, const long long nchunks, double* __restrict__ partials, const double* __restrict__ ctl) {
  if (ctl[1] != 0.0) return;  // a skip_if fired: the step writes nothing
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

__device__ static double optjit_round_binary(double x, int mant, int emin, double max_finite) {
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

extern "C" __global__ void optjit_segment_0(const double* hypers, double* ctl, const double* tinfo, double* vals, double* uniforms, const long long T, const long long G) {
  const long long i = (blockIdx.x * (long long)blockDim.x + threadIdx.x);
  if (i < G) {
    const long long g = i;
    const double h6 = hypers[g * 6 + 0];
    vals[g * 42 + 4] = h6;
    const double h12 = hypers[g * 6 + 1];
    const double h13 = hypers[g * 6 + 2];
    const double h14 = h13 * h12;
    const double h15 = 0x1p+0 - h14;
    const double h16 = (double)(float)h15;
    vals[g * 42 + 13] = h16;
    const double h19 = ((h12 != 0x0p+0) ? 1.0 : 0.0);
    vals[g * 42 + 15] = h19;
    const double h21 = hypers[g * 6 + 3];
    const double h22 = hypers[g * 6 + 4];
    const double h23 = (ctl[0] + 1.0);
    const double h24 = h23;
    const double h25 = 0x1p+0 - h21;
    const double h27 = (double)(float)h25;
    vals[g * 42 + 21] = h27;
    const double h30 = h27 - 0x1p+0;
    vals[g * 42 + 23] = h30;
    const double h33 = fabs(h27);
    const double h35 = ((h33 < 0x1p-1) ? 1.0 : 0.0);
    vals[g * 42 + 26] = h35;
    const double h38 = 0x1p+0 - h22;
    const double h39 = (double)(float)h22;
    vals[g * 42 + 28] = h39;
    const double h41 = (double)(float)h38;
    vals[g * 42 + 29] = h41;
    const double h44 = pow(h21, h24);
    const double h45 = 0x1p+0 - h44;
    const double h46 = pow(h22, h24);
    const double h47 = 0x1p+0 - h46;
    const double h48 = h13 / h45;
    const double h50 = pow(h47, 0x1p-1);
    const double h51 = hypers[g * 6 + 5];
    const double h53 = (double)(float)h50;
    vals[g * 42 + 38] = h53;
    const double h55 = (double)(float)h51;
    vals[g * 42 + 39] = h55;
    const double h57 = -h48;
    const double h58 = (double)(float)h57;
    vals[g * 42 + 41] = h58;
  }
  if (i < T) {
    const long long t = i;
    const long long g = (long long)tinfo[4 * t];
    const double numel = tinfo[4 * t + 1];
    const double first = tinfo[4 * t + 2];
    const double codes = tinfo[4 * t + 3];
    const double h6 = hypers[g * 6 + 0];
    const double h12 = hypers[g * 6 + 1];
    const double h13 = hypers[g * 6 + 2];
    const double h14 = h13 * h12;
    const double h15 = 0x1p+0 - h14;
    const double h16 = (double)(float)h15;
    const double h19 = ((h12 != 0x0p+0) ? 1.0 : 0.0);
    const double h21 = hypers[g * 6 + 3];
    const double h22 = hypers[g * 6 + 4];
    const double h23 = (ctl[0] + 1.0);
    const double h24 = h23;
    const double h25 = 0x1p+0 - h21;
    const double h27 = (double)(float)h25;
    const double h30 = h27 - 0x1p+0;
    const double h33 = fabs(h27);
    const double h35 = ((h33 < 0x1p-1) ? 1.0 : 0.0);
    const double h38 = 0x1p+0 - h22;
    const double h39 = (double)(float)h22;
    const double h41 = (double)(float)h38;
    const double h44 = pow(h21, h24);
    const double h45 = 0x1p+0 - h44;
    const double h46 = pow(h22, h24);
    const double h47 = 0x1p+0 - h46;
    const double h48 = h13 / h45;
    const double h50 = pow(h47, 0x1p-1);
    const double h51 = hypers[g * 6 + 5];
    const double h53 = (double)(float)h50;
    const double h55 = (double)(float)h51;
    const double h57 = -h48;
    const double h58 = (double)(float)h57;
  }
}

extern "C" __global__ void optjit_combine_0(const double* partials, const long long* first, double* vals, double* fold_rows, const long long T, const long long G) {
  __shared__ double lane[256];
  const long long t = blockIdx.x, j0 = threadIdx.x, size = blockDim.x;
  if (t >= T) return;
  const long long c0 = first[t], n = first[t + 1] - c0;
    {
      const long long run = n > 0 ? (n + 256 - 1) / 256 : 1;
      const long long used = (n + run - 1) / run;
      for (long long j = j0; j < (used > 0 ? used : 1); j += size) {
        const long long i1 = j * run + run < n ? j * run + run : n;
        double acc = 0.0;
        for (long long i = j * run; i < i1; ++i) acc = acc + partials[(c0 + i) * 1 + 0];
        lane[j] = acc;
      }
      __syncthreads();
      for (long long s = 1; s < used; s *= 2) {
        for (long long j = j0 * 2 * s; j + s < used; j += size * 2 * s)
          lane[j] = lane[j] + lane[j + s];
        __syncthreads();
      }
    }
  if (j0 == 0) fold_rows[0 * T + t] = lane[0];
  __syncthreads();
}

extern "C" __global__ void optjit_shard_out_0(const double* vals, const double* fold_rows, double* sbuf, const long long* owner, const long long T, const long long G, const long long S, const long long P, const long long rank) {
  const long long j0 = threadIdx.x, size = blockDim.x, A = P > 0 ? P : S;
  for (long long slot = j0; slot < S; slot += size) {
    const long long t = owner[slot];
    if (P == 0) sbuf[(0 * A + 0 * S) + slot] = t < 0 ? 0.0 : fold_rows[0 * T + t];
  }
  for (long long slot = j0; P > 0 && slot < P; slot += size) {
    const long long g = 0;
    sbuf[(0 * A + 0 * S) + slot] = slot == rank ? vals[g * 42 + 0] : 0.0;
  }
}

extern "C" __global__ void optjit_shard_in_0(const double* sbuf, double* vals, double* fold_rows, const long long* first, const long long* tensor_of, const long long T, const long long G, const long long S, const long long Tg, const long long P) {
  const long long j0 = threadIdx.x, size = blockDim.x, A = P > 0 ? P : S;
  if (P > 0) {
    if (j0 == 0) {
      double v = sbuf[(0 * A + 0 * S)];
      for (long long p = 1; p < P; ++p) v = v + sbuf[(0 * A + 0 * S) + p];
      for (long long g = 0; g < G; ++g) vals[g * 42 + 0] = v;
    }
  } else {
    for (long long tg = j0; tg < Tg; tg += size) {
      const long long a = first[tg], b = first[tg + 1];
      double v = a == b ? 0x0p+0 : sbuf[(0 * A + 0 * S) + a];
      for (long long p = a + 1; p < b; ++p) v = v + sbuf[(0 * A + 0 * S) + p];
      fold_rows[0 * Tg + tg] = v;
    }
  }
}

extern "C" __global__ void optjit_fold_0(const double* fold_rows, double* vals, const long long T, const long long G) {
  __shared__ double lane[256];
  const long long j0 = threadIdx.x, size = blockDim.x;
    {
      const long long run = T > 0 ? (T + 256 - 1) / 256 : 1;
      const long long used = (T + run - 1) / run;
      for (long long j = j0; j < (used > 0 ? used : 1); j += size) {
        const long long i1 = j * run + run < T ? j * run + run : T;
        double acc = 0.0;
        for (long long i = j * run; i < i1; ++i) acc = acc + fold_rows[0 * T + i];
        lane[j] = acc;
      }
      __syncthreads();
      for (long long s = 1; s < used; s *= 2) {
        for (long long j = j0 * 2 * s; j + s < used; j += size * 2 * s)
          lane[j] = lane[j] + lane[j + s];
        __syncthreads();
      }
    }
  for (long long g = j0; g < G; g += size) vals[g * 42 + 0] = lane[0];
  __syncthreads();
}

extern "C" __global__ void optjit_segment_1(const double* hypers, double* ctl, const double* tinfo, double* vals, double* uniforms, const long long T, const long long G) {
  const long long i = (blockIdx.x * (long long)blockDim.x + threadIdx.x);
  if (i < G) {
    const long long g = i;
    const double h3 = sqrt(vals[g * 42 + 0]);
    const double h5 = h3 + 0x1.0c6f7a0b5ed8dp-20;
    const double h7 = vals[g * 42 + 4] / h5;
    const double h9 = (isnan(h7) || isnan(0x1p+0)) ? h7 + 0x1p+0 : (h7 < 0x1p+0 ? h7 : 0x1p+0);
    const double h10 = (double)(float)h9;
  }
  if (i < T) {
    const long long t = i;
    const long long g = (long long)tinfo[4 * t];
    const double numel = tinfo[4 * t + 1];
    const double first = tinfo[4 * t + 2];
    const double codes = tinfo[4 * t + 3];
    const double h3 = sqrt(vals[g * 42 + 0]);
    const double h5 = h3 + 0x1.0c6f7a0b5ed8dp-20;
    const double h7 = vals[g * 42 + 4] / h5;
    const double h9 = (isnan(h7) || isnan(0x1p+0)) ? h7 + 0x1p+0 : (h7 < 0x1p+0 ? h7 : 0x1p+0);
    const double h10 = (double)(float)h9;
    uniforms[t * 11 + 0] = h10;
    uniforms[t * 11 + 1] = vals[g * 42 + 13];
    uniforms[t * 11 + 2] = vals[g * 42 + 15];
    uniforms[t * 11 + 3] = vals[g * 42 + 23];
    uniforms[t * 11 + 4] = vals[g * 42 + 21];
    uniforms[t * 11 + 5] = vals[g * 42 + 26];
    uniforms[t * 11 + 6] = vals[g * 42 + 28];
    uniforms[t * 11 + 7] = vals[g * 42 + 29];
    uniforms[t * 11 + 8] = vals[g * 42 + 38];
    uniforms[t * 11 + 9] = vals[g * 42 + 39];
    uniforms[t * 11 + 10] = vals[g * 42 + 41];
  }
}

extern "C" __global__ void optjit_segment_2(const double* hypers, double* ctl, const double* tinfo, double* vals, double* uniforms, const long long T, const long long G) {
  const long long i = (blockIdx.x * (long long)blockDim.x + threadIdx.x);
  if (i < G) {
    const long long g = i;
  }
  if (i < T) {
    const long long t = i;
    const long long g = (long long)tinfo[4 * t];
    const double numel = tinfo[4 * t + 1];
    const double first = tinfo[4 * t + 2];
    const double codes = tinfo[4 * t + 3];
  }
}

extern "C" __global__ void optjit_commit(double* ctl, const long long G) {
  if ((blockIdx.x * (long long)blockDim.x + threadIdx.x) != 0) return;
  const double skipped = ctl[1];
  if (skipped == 0.0) {
    ctl[0] = ctl[0] + 1.0;
  }
  ctl[2] = skipped;
  ctl[1] = 0.0;
}
