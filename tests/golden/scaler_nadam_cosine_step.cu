// optjit: 2 passes, 16 bytes per parameter, block 256, items 1, vector 1
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
  __shared__ unsigned int red0[256];
  for (long long c = blockIdx.x; c < nchunks; c += gridDim.x) {
    const long long t = chunks[3 * c], off = chunks[3 * c + 1], len = chunks[3 * c + 2];
    const OptjitRow row = rows[t];
    const double* u = row.uniforms;
    unsigned short* p1 = (unsigned short*)row.buffers[1] + off;
    const float u0 = (float)u[0];
    unsigned int acc0 = 0;
    for (long long i0 = threadIdx.x; i0 < len; i0 += 256) {
      const unsigned short L1_0 = p1[i0];
      {
        const float v0 = OPTJIT_F16_TO_F32(L1_0);
        const float v2 = v0 * u0;
        acc0 = acc0 > (OPTJIT_F32_BITS(v2) & 0x7fffffffu) ? acc0 : (OPTJIT_F32_BITS(v2) & 0x7fffffffu);
      }
    }
    const int l = (int)threadIdx.x;
    red0[l] = acc0;
    __syncthreads();
    for (int w = 128; w > 0; w >>= 1) {
      if (l < w) {
        red0[l] = red0[l] > red0[l + w] ? red0[l] : red0[l + w];
      }
      __syncthreads();
    }
    if (l == 0) {
      partials[c * 1 + 0] = (red0[0] >= 0x7f800000u ? 1.0 : 0.0);
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
    unsigned short* p0 = (unsigned short*)row.buffers[0] + off;
    unsigned short* p1 = (unsigned short*)row.buffers[1] + off;
    unsigned short* p2 = (unsigned short*)row.buffers[2] + off;
    unsigned short* p3 = (unsigned short*)row.buffers[3] + off;
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
    const float u11 = (float)u[11];
    for (long long i0 = threadIdx.x; i0 < len; i0 += 256) {
      const unsigned short L0_0 = p0[i0];
      const unsigned short L1_0 = p1[i0];
      const unsigned short L2_0 = p2[i0];
      const unsigned short L3_0 = p3[i0];
      {
        unsigned short S0;
        unsigned short S2;
        unsigned short S3;
        const float v0 = OPTJIT_F16_TO_F32(L0_0);
        const float v1 = OPTJIT_F16_TO_F32(L1_0);
        const float v2 = OPTJIT_F16_TO_F32(L2_0);
        const float v3 = OPTJIT_F16_TO_F32(L3_0);
        const float v5 = v1 * u0;
        const float v7 = fmaf(v0, u1, v5);
        const float v9 = u2 ? v7 : v5;
        const float v10 = v9 - v2;
        const float v12 = fmaf(u3, v10, v9);
        const float v14 = fmaf(u4, v10, v2);
        const float v16 = u5 ? v14 : v12;
        const float v18 = v3 * u6;
        const float v20 = u7 * v9;
        const float v21 = fmaf(v20, v9, v18);
        const float v23 = v21 / u8;
        const float v24 = sqrtf(v23);
        const float v26 = v24 + u9;
        const float v28 = u10 * v9;
        const float v29 = v28 / v26;
        const float v30 = v0 + v29;
        const float v32 = u11 * v16;
        const float v33 = v32 / v26;
        const float v34 = v30 + v33;
        S2 = OPTJIT_F32_TO_F16(v16);
        S3 = OPTJIT_F32_TO_F16(v21);
        S0 = OPTJIT_F32_TO_F16(v34);
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
    for (int j = 0; j < 1; ++j) ctl[3 + G * 1 + g * 1 + j] = ctl[3 + g * 1 + j];
    const double h2 = hypers[g * 9 + 0];
    const double h4 = 0x1p+0 / h2;
    const double h5 = (double)(float)h4;
    const double h6 = h5;
    const double h7 = (double)(float)h6;
    vals[g * 77 + 5] = h7;
    const double h10 = (ctl[0] + 1.0);
    const double h11 = h10;
    const double h12 = hypers[g * 9 + 1];
    const double h13 = hypers[g * 9 + 2];
    const double h14 = hypers[g * 9 + 3];
    const double h15 = hypers[g * 9 + 4];
    const double h16 = h11 - 0x1p+0;
    const double h18 = 0x1.921fb54442d18p+1 * h16;
    const double h19 = h18 / h15;
    const double h20 = cos(h19);
    const double h21 = 0x1p+0 + h20;
    const double h22 = hypers[g * 9 + 5];
    const double h23 = h22 - h14;
    const double h24 = h23 * h21;
    const double h26 = h24 / 0x1p+1;
    const double h27 = h14 + h26;
    const double h28 = hypers[g * 9 + 6];
    const double h29 = pow(h13, h11);
    const double h30 = 0x1p+0 - h29;
    const double h31 = hypers[g * 9 + 7];
    const double h32 = (double)(float)h31;
    vals[g * 77 + 29] = h32;
    const double h35 = ((h31 != 0x0p+0) ? 1.0 : 0.0);
    vals[g * 77 + 31] = h35;
    const double h37 = h11 * h28;
    const double h39 = pow(0x1.eb851eb851eb8p-1, h37);
    const double h41 = 0x1p-1 * h39;
    const double h42 = 0x1p+0 - h41;
    const double h43 = h12 * h42;
    const double h44 = h11 + 0x1p+0;
    const double h45 = h44 * h28;
    const double h46 = pow(0x1.eb851eb851eb8p-1, h45);
    const double h47 = 0x1p-1 * h46;
    const double h48 = 0x1p+0 - h47;
    const double h49 = h12 * h48;
    const double h50 = (double)(float)h43;
    const double h51 = h50;
    const double h52 = ctl[3 + g * 1 + 0];
    const double h53 = h52 * h51;
    const double h54 = (double)(float)h53;
    const double h55 = h54;
    vals[g * 77 + 50] = h55;
    const double h56 = 0x1p+0 - h12;
    const double h58 = (double)(float)h56;
    vals[g * 77 + 52] = h58;
    const double h61 = h58 - 0x1p+0;
    vals[g * 77 + 54] = h61;
    const double h64 = fabs(h58);
    const double h66 = ((h64 < 0x1p-1) ? 1.0 : 0.0);
    vals[g * 77 + 57] = h66;
    const double h69 = 0x1p+0 - h13;
    const double h70 = (double)(float)h13;
    vals[g * 77 + 59] = h70;
    const double h72 = (double)(float)h69;
    vals[g * 77 + 60] = h72;
    const double h75 = hypers[g * 9 + 8];
    const double h76 = (double)(float)h30;
    vals[g * 77 + 62] = h76;
    const double h79 = (double)(float)h75;
    vals[g * 77 + 63] = h79;
    const double h81 = h55 * h49;
    const double h82 = 0x1p+0 - h55;
    const double h83 = 0x1p+0 - h43;
    const double h84 = -h27;
    const double h85 = h84 * h83;
    const double h86 = h85 / h82;
    const double h87 = (double)(float)h86;
    vals[g * 77 + 70] = h87;
    const double h91 = 0x1p+0 - h81;
    const double h92 = h84 * h49;
    const double h93 = h92 / h91;
    const double h94 = (double)(float)h93;
    vals[g * 77 + 74] = h94;
  }
  if (i < T) {
    const long long t = i;
    const long long g = (long long)tinfo[4 * t];
    const double numel = tinfo[4 * t + 1];
    const double first = tinfo[4 * t + 2];
    const double codes = tinfo[4 * t + 3];
    const double h2 = hypers[g * 9 + 0];
    const double h4 = 0x1p+0 / h2;
    const double h5 = (double)(float)h4;
    const double h6 = h5;
    const double h7 = (double)(float)h6;
    const double h10 = (ctl[0] + 1.0);
    const double h11 = h10;
    const double h12 = hypers[g * 9 + 1];
    const double h13 = hypers[g * 9 + 2];
    const double h14 = hypers[g * 9 + 3];
    const double h15 = hypers[g * 9 + 4];
    const double h16 = h11 - 0x1p+0;
    const double h18 = 0x1.921fb54442d18p+1 * h16;
    const double h19 = h18 / h15;
    const double h20 = cos(h19);
    const double h21 = 0x1p+0 + h20;
    const double h22 = hypers[g * 9 + 5];
    const double h23 = h22 - h14;
    const double h24 = h23 * h21;
    const double h26 = h24 / 0x1p+1;
    const double h27 = h14 + h26;
    const double h28 = hypers[g * 9 + 6];
    const double h29 = pow(h13, h11);
    const double h30 = 0x1p+0 - h29;
    const double h31 = hypers[g * 9 + 7];
    const double h32 = (double)(float)h31;
    const double h35 = ((h31 != 0x0p+0) ? 1.0 : 0.0);
    const double h37 = h11 * h28;
    const double h39 = pow(0x1.eb851eb851eb8p-1, h37);
    const double h41 = 0x1p-1 * h39;
    const double h42 = 0x1p+0 - h41;
    const double h43 = h12 * h42;
    const double h44 = h11 + 0x1p+0;
    const double h45 = h44 * h28;
    const double h46 = pow(0x1.eb851eb851eb8p-1, h45);
    const double h47 = 0x1p-1 * h46;
    const double h48 = 0x1p+0 - h47;
    const double h49 = h12 * h48;
    const double h50 = (double)(float)h43;
    const double h51 = h50;
    const double h52 = ctl[3 + g * 1 + 0];
    const double h53 = h52 * h51;
    const double h54 = (double)(float)h53;
    const double h55 = h54;
    const double h56 = 0x1p+0 - h12;
    const double h58 = (double)(float)h56;
    const double h61 = h58 - 0x1p+0;
    const double h64 = fabs(h58);
    const double h66 = ((h64 < 0x1p-1) ? 1.0 : 0.0);
    const double h69 = 0x1p+0 - h13;
    const double h70 = (double)(float)h13;
    const double h72 = (double)(float)h69;
    const double h75 = hypers[g * 9 + 8];
    const double h76 = (double)(float)h30;
    const double h79 = (double)(float)h75;
    const double h81 = h55 * h49;
    const double h82 = 0x1p+0 - h55;
    const double h83 = 0x1p+0 - h43;
    const double h84 = -h27;
    const double h85 = h84 * h83;
    const double h86 = h85 / h82;
    const double h87 = (double)(float)h86;
    const double h91 = 0x1p+0 - h81;
    const double h92 = h84 * h49;
    const double h93 = h92 / h91;
    const double h94 = (double)(float)h93;
    uniforms[t * 1 + 0] = h7;
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
        for (long long i = j * run; i < i1; ++i) acc = ((acc != 0.0 || partials[(c0 + i) * 1 + 0] != 0.0) ? 1.0 : 0.0);
        lane[j] = acc;
      }
      __syncthreads();
      for (long long s = 1; s < used; s *= 2) {
        for (long long j = j0 * 2 * s; j + s < used; j += size * 2 * s)
          lane[j] = ((lane[j] != 0.0 || lane[j + s] != 0.0) ? 1.0 : 0.0);
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
    sbuf[(0 * A + 0 * S) + slot] = slot == rank ? vals[g * 77 + 6] : 0.0;
  }
}

extern "C" __global__ void optjit_shard_in_0(const double* sbuf, double* vals, double* fold_rows, const long long* first, const long long* tensor_of, const long long T, const long long G, const long long S, const long long Tg, const long long P) {
  const long long j0 = threadIdx.x, size = blockDim.x, A = P > 0 ? P : S;
  if (P > 0) {
    if (j0 == 0) {
      double v = sbuf[(0 * A + 0 * S)];
      for (long long p = 1; p < P; ++p) v = ((v != 0.0 || sbuf[(0 * A + 0 * S) + p] != 0.0) ? 1.0 : 0.0);
      for (long long g = 0; g < G; ++g) vals[g * 77 + 6] = v;
    }
  } else {
    for (long long tg = j0; tg < Tg; tg += size) {
      const long long a = first[tg], b = first[tg + 1];
      double v = a == b ? 0x0p+0 : sbuf[(0 * A + 0 * S) + a];
      for (long long p = a + 1; p < b; ++p) v = ((v != 0.0 || sbuf[(0 * A + 0 * S) + p] != 0.0) ? 1.0 : 0.0);
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
        for (long long i = j * run; i < i1; ++i) acc = ((acc != 0.0 || fold_rows[0 * T + i] != 0.0) ? 1.0 : 0.0);
        lane[j] = acc;
      }
      __syncthreads();
      for (long long s = 1; s < used; s *= 2) {
        for (long long j = j0 * 2 * s; j + s < used; j += size * 2 * s)
          lane[j] = ((lane[j] != 0.0 || lane[j + s] != 0.0) ? 1.0 : 0.0);
        __syncthreads();
      }
    }
  for (long long g = j0; g < G; g += size) vals[g * 77 + 6] = lane[0];
  __syncthreads();
}

extern "C" __global__ void optjit_segment_1(const double* hypers, double* ctl, const double* tinfo, double* vals, double* uniforms, const long long T, const long long G) {
  const long long i = (blockIdx.x * (long long)blockDim.x + threadIdx.x);
  if (i < G) {
    const long long g = i;
    if (vals[g * 77 + 6] != 0.0) ctl[1] = 1.0;
  }
  if (i < T) {
    const long long t = i;
    const long long g = (long long)tinfo[4 * t];
    const double numel = tinfo[4 * t + 1];
    const double first = tinfo[4 * t + 2];
    const double codes = tinfo[4 * t + 3];
    uniforms[t * 12 + 0] = vals[g * 77 + 5];
    uniforms[t * 12 + 1] = vals[g * 77 + 29];
    uniforms[t * 12 + 2] = vals[g * 77 + 31];
    uniforms[t * 12 + 3] = vals[g * 77 + 54];
    uniforms[t * 12 + 4] = vals[g * 77 + 52];
    uniforms[t * 12 + 5] = vals[g * 77 + 57];
    uniforms[t * 12 + 6] = vals[g * 77 + 59];
    uniforms[t * 12 + 7] = vals[g * 77 + 60];
    uniforms[t * 12 + 8] = vals[g * 77 + 62];
    uniforms[t * 12 + 9] = vals[g * 77 + 63];
    uniforms[t * 12 + 10] = vals[g * 77 + 70];
    uniforms[t * 12 + 11] = vals[g * 77 + 74];
  }
}

extern "C" __global__ void optjit_segment_2(const double* hypers, double* ctl, const double* tinfo, double* vals, double* uniforms, const long long T, const long long G) {
  const long long i = (blockIdx.x * (long long)blockDim.x + threadIdx.x);
  if (i < G) {
    const long long g = i;
    ctl[3 + G * 1 + g * 1 + 0] = vals[g * 77 + 50];
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
    for (long long j = 0; j < G * 1; ++j) ctl[3 + j] = ctl[3 + G * 1 + j];
    ctl[0] = ctl[0] + 1.0;
  }
  ctl[2] = skipped;
  ctl[1] = 0.0;
}
