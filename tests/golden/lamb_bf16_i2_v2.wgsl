// optjit: 2 passes, 22 bytes per parameter, block 256, items 2, vector 2
@group(0) @binding(0) var<storage, read_write> b0: array<atomic<u32>>;
fn optjit_ld_b0(e: i32) -> u32 {
  return (atomicLoad(&b0[e >> 1u]) >> (16u * u32(e & 1))) & 0xffffu;
}
fn optjit_st_b0(e: i32, v: u32) {
  let sh = 16u * u32(e & 1);
  atomicAnd(&b0[e >> 1u], ~(0xffffu << sh));
  atomicOr(&b0[e >> 1u], (v & 0xffffu) << sh);
}
@group(0) @binding(1) var<storage, read_write> b1: array<atomic<u32>>;
fn optjit_ld_b1(e: i32) -> u32 {
  return (atomicLoad(&b1[e >> 1u]) >> (16u * u32(e & 1))) & 0xffffu;
}
fn optjit_st_b1(e: i32, v: u32) {
  let sh = 16u * u32(e & 1);
  atomicAnd(&b1[e >> 1u], ~(0xffffu << sh));
  atomicOr(&b1[e >> 1u], (v & 0xffffu) << sh);
}
@group(0) @binding(2) var<storage, read_write> b2: array<atomic<u32>>;
fn optjit_ld_b2(e: i32) -> u32 {
  return (atomicLoad(&b2[e >> 1u]) >> (16u * u32(e & 1))) & 0xffffu;
}
fn optjit_st_b2(e: i32, v: u32) {
  let sh = 16u * u32(e & 1);
  atomicAnd(&b2[e >> 1u], ~(0xffffu << sh));
  atomicOr(&b2[e >> 1u], (v & 0xffffu) << sh);
}
@group(0) @binding(3) var<storage, read_write> b3: array<atomic<u32>>;
fn optjit_ld_b3(e: i32) -> u32 {
  return (atomicLoad(&b3[e >> 1u]) >> (16u * u32(e & 1))) & 0xffffu;
}
fn optjit_st_b3(e: i32, v: u32) {
  let sh = 16u * u32(e & 1);
  atomicAnd(&b3[e >> 1u], ~(0xffffu << sh));
  atomicOr(&b3[e >> 1u], (v & 0xffffu) << sh);
}
@group(0) @binding(4) var<storage, read> uniforms: array<vec2<u32>>;
@group(0) @binding(5) var<storage, read> rows: array<vec2<i32>>;
@group(0) @binding(6) var<storage, read> chunks: array<vec2<i32>>;
@group(0) @binding(7) var<storage, read_write> partials: array<vec2<u32>>;
@group(0) @binding(8) var<uniform> args: vec4<i32>;
fn OPTJIT_F32_BITS(x: f32) -> u32 { return bitcast<u32>(x); }
fn OPTJIT_BITS_F32(x: u32) -> f32 { return bitcast<f32>(x); }
fn isnan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn isfinite(x: f32) -> bool { return (bitcast<u32>(x) & 0x7f800000u) != 0x7f800000u; }
// An f64 bit pattern (low word, high word) to the nearest f32, ties to even.
fn optjit_f64_to_f32(v: vec2<u32>) -> f32 {
  let sign = v.y & 0x80000000u;
  let e = i32((v.y >> 20u) & 0x7ffu);
  let sh = (v.y & 0xfffffu) | 0x100000u;
  let sl = v.x;
  if (e == 0x7ff) {
    if (((v.y & 0xfffffu) | v.x) != 0u) { return bitcast<f32>(sign | 0x7fc00000u); }
    return bitcast<f32>(sign | 0x7f800000u);
  }
  if (e == 0) { return bitcast<f32>(sign); }  // f64 subnormals are far below f32's range
  let fe = e - 1023 + 127;
  if (fe >= 255) { return bitcast<f32>(sign | 0x7f800000u); }
  // The 53-bit significand sh:sl keeps its top 24 bits (fewer for f32 subnormals).
  var s = 29;
  if (fe < 1) { s = 29 + 1 - fe; }
  if (s > 63) { return bitcast<f32>(sign); }
  var q: u32; var rh: u32; var rl: u32; var hh: u32; var hl: u32;
  if (s < 32) {
    q = (sh << u32(32 - s)) | (sl >> u32(s));
    rh = 0u; rl = sl & ((1u << u32(s)) - 1u); hh = 0u; hl = 1u << u32(s - 1);
  } else if (s == 32) {
    q = sh; rh = 0u; rl = sl; hh = 0u; hl = 0x80000000u;
  } else {
    q = sh >> u32(s - 32);
    rh = sh & ((1u << u32(s - 32)) - 1u); rl = sl; hh = 1u << u32(s - 33); hl = 0u;
  }
  let above = rh > hh || (rh == hh && rl > hl);
  let tie = rh == hh && rl == hl;
  var up = 0u;
  if (above || (tie && (q & 1u) == 1u)) { up = 1u; }
  if (fe < 1) { return bitcast<f32>(sign | (q + up)); }
  return bitcast<f32>(sign | ((u32(fe - 1) << 23u) + q + up));
}
// An f32 as the f64 bit pattern (low word, high word), exactly.
fn optjit_f32_to_f64(x: f32) -> vec2<u32> {
  let b = bitcast<u32>(x);
  let sign = b & 0x80000000u;
  var e = i32((b >> 23u) & 0xffu);
  var m = b & 0x7fffffu;
  if (e == 255) { return vec2<u32>(m << 29u, sign | 0x7ff00000u | (m >> 3u)); }
  if (e == 0) {
    if (m == 0u) { return vec2<u32>(0u, sign); }
    e = 1;
    loop {
      if ((m & 0x800000u) != 0u) { break; }
      m = m << 1u;
      e = e - 1;
    }
    m = m & 0x7fffffu;
  }
  return vec2<u32>(m << 29u, sign | (u32(e - 127 + 1023) << 20u) | (m >> 3u));
}
fn OPTJIT_BF16_TO_F32(x: u32) -> f32 { return bitcast<f32>(x << 16u); }
fn OPTJIT_BF16_BITS(v: f32) -> u32 {
  let b = bitcast<u32>(v);
  if (isnan(v)) { return (b >> 16u) | 0x40u; }
  return (b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u;
}
fn OPTJIT_F16_TO_F32(h: u32) -> f32 {
  let s = (h & 0x8000u) << 16u;
  let e = (h >> 10u) & 0x1fu;
  let m = h & 0x3ffu;
  if (e == 0x1fu) { return bitcast<f32>(s | 0x7f800000u | (m << 13u)); }
  if (e == 0u) { return bitcast<f32>(s | bitcast<u32>(f32(m) * 0x1p-24f)); }
  return bitcast<f32>(s | ((e + 112u) << 23u) | (m << 13u));
}
fn OPTJIT_F32_TO_F16(v: f32) -> u32 {
  let b = bitcast<u32>(v);
  let s = (b >> 16u) & 0x8000u;
  let a = b & 0x7fffffffu;
  if (a > 0x7f800000u) { return s | 0x7e00u | ((a >> 13u) & 0x3ffu); }
  if (a >= 0x477ff000u) { return s | 0x7c00u; }
  var q: u32;
  var r: u32;
  var half: u32;
  if (a < 0x38800000u) {
    if (a < 0x33000000u) { return s; }
    let shift = 126u - (a >> 23u);
    let m = (a & 0x7fffffu) | 0x800000u;
    q = m >> shift;
    r = m & ((1u << shift) - 1u);
    half = 1u << (shift - 1u);
  } else {
    let x = a - 0x38000000u;
    q = x >> 13u;
    r = x & 0x1fffu;
    half = 0x1000u;
  }
  if (r > half || (r == half && (q & 1u) == 1u)) { q = q + 1u; }
  return s | q;
}
fn optjit_hw(x: f32) -> f32 { return x; }
fn optjit_opaque(x: f32) -> f32 { return bitcast<f32>(bitcast<u32>(x) ^ u32(args.w)); }
fn optjit_mul(a: f32, b: f32) -> f32 { return optjit_opaque(a * b); }
fn optjit_sub(a: f32, b: f32) -> f32 { return optjit_opaque(a - b); }
fn optjit_add(a: f32, b: f32) -> f32 { return optjit_opaque(a + b); }
fn optjit_exponent(x: f32) -> u32 { return (bitcast<u32>(x) >> 23u) & 255u; }
fn optjit_halves(a: f32) -> vec2<f32> {
  let c = optjit_mul(4097.0f, a);
  let hi = optjit_sub(c, optjit_sub(c, a));
  return vec2<f32>(hi, optjit_sub(a, hi));
}
// The rounding error of s = a + b, exactly.
fn optjit_sum_error(a: f32, b: f32, s: f32) -> f32 {
  let bb = optjit_sub(s, a);
  return optjit_add(optjit_sub(a, optjit_sub(s, bb)), optjit_sub(b, bb));
}
fn optjit_fma(a: f32, b: f32, c: f32) -> f32 {
  let p = optjit_mul(a, b);
  let s = optjit_add(c, p);
  let ep = optjit_exponent(p);
  let ea = optjit_exponent(a);
  let eb = optjit_exponent(b);
  if (ea == 0u || ea > 240u || eb == 0u || eb > 240u || ep < 49u || ep > 252u ||
      optjit_exponent(c) > 252u || optjit_exponent(s) == 255u) { return s; }
  let ah = optjit_halves(a);
  let bh = optjit_halves(b);
  let e = optjit_add(optjit_add(optjit_add(optjit_sub(optjit_mul(ah.x, bh.x), p),
                                           optjit_mul(ah.x, bh.y)),
                                optjit_mul(ah.y, bh.x)),
                     optjit_mul(ah.y, bh.y));
  let t = optjit_sum_error(c, p, s);
  let v0 = optjit_add(t, e);
  let ve = optjit_sum_error(t, e, v0);
  var v = v0;
  if (ve != 0.0f && (bitcast<u32>(v0) & 1u) == 0u) {
    let up = (ve > 0.0f) == (v0 > 0.0f);
    v = bitcast<f32>(select(bitcast<u32>(v0) - 1u, bitcast<u32>(v0) + 1u, up));
  }
  return optjit_add(s, v);
}
fn optjit_split(a: f32) -> vec2<f32> {
  let c = optjit_mul(4097.0f, a);
  let hi = optjit_sub(c, optjit_sub(c, a));
  return vec2<f32>(hi, optjit_sub(a, hi));
}
fn optjit_residual(x: f32, y: f32, ys: vec2<f32>, q: f32) -> f32 {
  let p = optjit_mul(q, y);
  let qs = optjit_split(q);
  let e = optjit_add(optjit_add(optjit_add(optjit_sub(optjit_mul(qs.x, ys.x), p),
                                           optjit_mul(qs.x, ys.y)),
                                optjit_mul(qs.y, ys.x)),
                     optjit_mul(qs.y, ys.y));
  return optjit_sub(optjit_sub(x, p), e);
}
// The gaps above q (its ulp) and below it (half that at a power of two).
fn optjit_ulp(q: f32) -> f32 { return bitcast<f32>((bitcast<u32>(q) & 0x7f800000u) - (23u << 23u)); }
fn optjit_ulp_below(q: f32) -> f32 {
  return select(optjit_ulp(q), optjit_mul(optjit_ulp(q), 0.5f), (bitcast<u32>(q) & 0x7fffffu) == 0u);
}
fn optjit_div(a: f32, b: f32) -> f32 {
  let q0 = optjit_hw(a / b);
  let ua = bitcast<u32>(a);
  let ub = bitcast<u32>(b);
  let ea = i32((ua >> 23u) & 255u);
  let eb = i32((ub >> 23u) & 255u);
  if (ea == 0 || ea == 255 || eb == 0 || eb == 255) { return q0; }
  let x = bitcast<f32>((ua & 0x7fffffu) | 0x3f800000u);
  let y = bitcast<f32>((ub & 0x7fffffu) | 0x3f800000u);
  let ys = optjit_split(y);
  var q = optjit_opaque(optjit_hw(x / y));
  q = optjit_add(q, optjit_mul(optjit_residual(x, y, ys, q), optjit_opaque(optjit_hw(1.0f / y))));
  // Within an ulp now, so the residual is exact: the true quotient is q + r / y, never halfway.
  let r = optjit_residual(x, y, ys, q);
  if (r > optjit_mul(optjit_mul(y, optjit_ulp(q)), 0.5f)) {
    q = bitcast<f32>(bitcast<u32>(q) + 1u);
  } else if (-r > optjit_mul(optjit_mul(y, optjit_ulp_below(q)), 0.5f)) {
    q = bitcast<f32>(bitcast<u32>(q) - 1u);
  }
  let e = ea - eb + i32((bitcast<u32>(q) >> 23u) & 255u);
  if (e <= 0 || e >= 255) { return q0; }
  return bitcast<f32>(((ua ^ ub) & 0x80000000u) | (u32(e) << 23u) | (bitcast<u32>(q) & 0x7fffffu));
}
fn optjit_sqrt(v: f32) -> f32 {
  let s0 = optjit_hw(sqrt(v));
  let u = bitcast<u32>(v);
  let e = i32((u >> 23u) & 255u);
  if (e == 0 || e == 255 || (u >> 31u) != 0u) { return s0; }
  let odd = (e - 127) & 1;
  let x = bitcast<f32>((u & 0x7fffffu) | (u32(127 + odd) << 23u));
  var s = optjit_opaque(optjit_hw(sqrt(x)));
  s = optjit_add(s, optjit_mul(optjit_residual(x, s, optjit_split(s), s),
                               optjit_opaque(optjit_hw(0.5f / s))));
  // x - s * s, exact, and a multiple of ulp(s)^2: above (s + ulp / 2)^2 when over s * ulp, below
  // (s - gap / 2)^2 when at or under -s * gap.
  let r = optjit_residual(x, s, optjit_split(s), s);
  if (r > optjit_mul(s, optjit_ulp(s))) {
    s = bitcast<f32>(bitcast<u32>(s) + 1u);
  } else if (-r >= optjit_mul(s, optjit_ulp_below(s))) {
    s = bitcast<f32>(bitcast<u32>(s) - 1u);
  }
  return bitcast<f32>(u32(i32(bitcast<u32>(s)) + (((e - 127 - odd) / 2) << 23u)));
}

var<workgroup> red0_0: array<f32, 256>;
var<workgroup> red1_0: array<f32, 256>;
@compute @workgroup_size(256)
fn optjit_pass_0(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>) {
  let nchunks: i32 = args.x;
  for (var c: i32 = i32(wg.x); c < nchunks; c += i32(nwg.x)) {
    let t: i32 = chunks[3 * c].x; let off: i32 = chunks[3 * c + 1].x; let len: i32 = chunks[3 * c + 2].x;
    let row: i32 = 5 * t;
    let ub: i32 = rows[row + 4].x;
    let p0: i32 = rows[row + 0].x + off;
    let p1: i32 = rows[row + 1].x + off;
    let p2: i32 = rows[row + 2].x + off;
    let p3: i32 = rows[row + 3].x + off;
    let u_0: f32 = optjit_f64_to_f32(uniforms[ub + 0]);
    let u_1: f32 = optjit_f64_to_f32(uniforms[ub + 1]);
    let u_2: f32 = optjit_f64_to_f32(uniforms[ub + 2]);
    let u_3: f32 = optjit_f64_to_f32(uniforms[ub + 3]);
    let u_4: f32 = optjit_f64_to_f32(uniforms[ub + 4]);
    let u_5: f32 = optjit_f64_to_f32(uniforms[ub + 5]);
    let u_6: bool = (optjit_f64_to_f32(uniforms[ub + 6]) != 0);
    var acc0: f32 = 0;
    var acc1: f32 = 0;
    let nv: i32 = len / 2;
    for (var i0: i32 = i32(lid.x); i0 < nv; i0 += 512) {
      let L0_0: vec2<u32> = vec2<u32>(optjit_ld_b0(p0 + (i0) * 2 + 0), optjit_ld_b0(p0 + (i0) * 2 + 1));
      let L1_0: vec2<u32> = vec2<u32>(optjit_ld_b1(p1 + (i0) * 2 + 0), optjit_ld_b1(p1 + (i0) * 2 + 1));
      let L2_0: vec2<u32> = vec2<u32>(optjit_ld_b2(p2 + (i0) * 2 + 0), optjit_ld_b2(p2 + (i0) * 2 + 1));
      let L3_0: vec2<u32> = vec2<u32>(optjit_ld_b3(p3 + (i0) * 2 + 0), optjit_ld_b3(p3 + (i0) * 2 + 1));
      let i1: i32 = i0 + 256;
      var L0_1: vec2<u32>;
      var L1_1: vec2<u32>;
      var L2_1: vec2<u32>;
      var L3_1: vec2<u32>;
      if (i1 < nv) {
        L0_1 = vec2<u32>(optjit_ld_b0(p0 + (i1) * 2 + 0), optjit_ld_b0(p0 + (i1) * 2 + 1));
        L1_1 = vec2<u32>(optjit_ld_b1(p1 + (i1) * 2 + 0), optjit_ld_b1(p1 + (i1) * 2 + 1));
        L2_1 = vec2<u32>(optjit_ld_b2(p2 + (i1) * 2 + 0), optjit_ld_b2(p2 + (i1) * 2 + 1));
        L3_1 = vec2<u32>(optjit_ld_b3(p3 + (i1) * 2 + 0), optjit_ld_b3(p3 + (i1) * 2 + 1));
      }
      {
        {
          let v0: f32 = OPTJIT_BF16_TO_F32(L0_0[0]);
          let v1: f32 = OPTJIT_BF16_TO_F32(L1_0[0]);
          let v2: f32 = OPTJIT_BF16_TO_F32(L2_0[0]);
          let v3: f32 = OPTJIT_BF16_TO_F32(L3_0[0]);
          let v5: f32 = optjit_mul(v2, u_0);
          let v7: f32 = optjit_fma(v1, u_1, v5);
          let v9: f32 = optjit_mul(v3, u_2);
          let v11: f32 = optjit_mul(u_3, v1);
          let v12: f32 = optjit_fma(v11, v1, v9);
          acc0 += f32(v0) * f32(v0);
          let v14: f32 = optjit_sqrt(v12);
          let v16: f32 = v14 + u_4;
          let v17: f32 = optjit_div(v7, v16);
          let v19: f32 = optjit_fma(v0, u_5, v17);
          let v21: f32 = select(v17, v19, u_6);
          acc1 += f32(v21) * f32(v21);
        }
        {
          let v0: f32 = OPTJIT_BF16_TO_F32(L0_0[1]);
          let v1: f32 = OPTJIT_BF16_TO_F32(L1_0[1]);
          let v2: f32 = OPTJIT_BF16_TO_F32(L2_0[1]);
          let v3: f32 = OPTJIT_BF16_TO_F32(L3_0[1]);
          let v5: f32 = optjit_mul(v2, u_0);
          let v7: f32 = optjit_fma(v1, u_1, v5);
          let v9: f32 = optjit_mul(v3, u_2);
          let v11: f32 = optjit_mul(u_3, v1);
          let v12: f32 = optjit_fma(v11, v1, v9);
          acc0 += f32(v0) * f32(v0);
          let v14: f32 = optjit_sqrt(v12);
          let v16: f32 = v14 + u_4;
          let v17: f32 = optjit_div(v7, v16);
          let v19: f32 = optjit_fma(v0, u_5, v17);
          let v21: f32 = select(v17, v19, u_6);
          acc1 += f32(v21) * f32(v21);
        }
      }
      if (i1 < nv) {
        {
          let v0: f32 = OPTJIT_BF16_TO_F32(L0_1[0]);
          let v1: f32 = OPTJIT_BF16_TO_F32(L1_1[0]);
          let v2: f32 = OPTJIT_BF16_TO_F32(L2_1[0]);
          let v3: f32 = OPTJIT_BF16_TO_F32(L3_1[0]);
          let v5: f32 = optjit_mul(v2, u_0);
          let v7: f32 = optjit_fma(v1, u_1, v5);
          let v9: f32 = optjit_mul(v3, u_2);
          let v11: f32 = optjit_mul(u_3, v1);
          let v12: f32 = optjit_fma(v11, v1, v9);
          acc0 += f32(v0) * f32(v0);
          let v14: f32 = optjit_sqrt(v12);
          let v16: f32 = v14 + u_4;
          let v17: f32 = optjit_div(v7, v16);
          let v19: f32 = optjit_fma(v0, u_5, v17);
          let v21: f32 = select(v17, v19, u_6);
          acc1 += f32(v21) * f32(v21);
        }
        {
          let v0: f32 = OPTJIT_BF16_TO_F32(L0_1[1]);
          let v1: f32 = OPTJIT_BF16_TO_F32(L1_1[1]);
          let v2: f32 = OPTJIT_BF16_TO_F32(L2_1[1]);
          let v3: f32 = OPTJIT_BF16_TO_F32(L3_1[1]);
          let v5: f32 = optjit_mul(v2, u_0);
          let v7: f32 = optjit_fma(v1, u_1, v5);
          let v9: f32 = optjit_mul(v3, u_2);
          let v11: f32 = optjit_mul(u_3, v1);
          let v12: f32 = optjit_fma(v11, v1, v9);
          acc0 += f32(v0) * f32(v0);
          let v14: f32 = optjit_sqrt(v12);
          let v16: f32 = v14 + u_4;
          let v17: f32 = optjit_div(v7, v16);
          let v19: f32 = optjit_fma(v0, u_5, v17);
          let v21: f32 = select(v17, v19, u_6);
          acc1 += f32(v21) * f32(v21);
        }
      }
    }
    for (var i0: i32 = nv * 2 + i32(lid.x); i0 < len; i0 += 256) {
      let L0_0: u32 = optjit_ld_b0(p0 + i0);
      let L1_0: u32 = optjit_ld_b1(p1 + i0);
      let L2_0: u32 = optjit_ld_b2(p2 + i0);
      let L3_0: u32 = optjit_ld_b3(p3 + i0);
      {
        let v0: f32 = OPTJIT_BF16_TO_F32(L0_0);
        let v1: f32 = OPTJIT_BF16_TO_F32(L1_0);
        let v2: f32 = OPTJIT_BF16_TO_F32(L2_0);
        let v3: f32 = OPTJIT_BF16_TO_F32(L3_0);
        let v5: f32 = optjit_mul(v2, u_0);
        let v7: f32 = optjit_fma(v1, u_1, v5);
        let v9: f32 = optjit_mul(v3, u_2);
        let v11: f32 = optjit_mul(u_3, v1);
        let v12: f32 = optjit_fma(v11, v1, v9);
        acc0 += f32(v0) * f32(v0);
        let v14: f32 = optjit_sqrt(v12);
        let v16: f32 = v14 + u_4;
        let v17: f32 = optjit_div(v7, v16);
        let v19: f32 = optjit_fma(v0, u_5, v17);
        let v21: f32 = select(v17, v19, u_6);
        acc1 += f32(v21) * f32(v21);
      }
    }
    let l: i32 = i32(i32(lid.x));
    red0_0[l] = acc0;
    red1_0[l] = acc1;
    workgroupBarrier();
    for (var w: i32 = 128; w > 0; w >>= 1) {
      if (l < w) {
        red0_0[l] += red0_0[l + w];
        red1_0[l] += red1_0[l + w];
      }
      workgroupBarrier();
    }
    if (l == 0) {
      partials[c * 2 + 0] = optjit_f32_to_f64(red0_0[0]);
      partials[c * 2 + 1] = optjit_f32_to_f64(red1_0[0]);
    }
    workgroupBarrier();
  }
}

@compute @workgroup_size(256)
fn optjit_pass_1(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>) {
  let nchunks: i32 = args.x;
  for (var c: i32 = i32(wg.x); c < nchunks; c += i32(nwg.x)) {
    let t: i32 = chunks[3 * c].x; let off: i32 = chunks[3 * c + 1].x; let len: i32 = chunks[3 * c + 2].x;
    let row: i32 = 5 * t;
    let ub: i32 = rows[row + 4].x;
    let p0: i32 = rows[row + 0].x + off;
    let p1: i32 = rows[row + 1].x + off;
    let p2: i32 = rows[row + 2].x + off;
    let p3: i32 = rows[row + 3].x + off;
    let u_0: f32 = optjit_f64_to_f32(uniforms[ub + 0]);
    let u_1: f32 = optjit_f64_to_f32(uniforms[ub + 1]);
    let u_2: f32 = optjit_f64_to_f32(uniforms[ub + 2]);
    let u_3: f32 = optjit_f64_to_f32(uniforms[ub + 3]);
    let u_4: f32 = optjit_f64_to_f32(uniforms[ub + 4]);
    let u_5: f32 = optjit_f64_to_f32(uniforms[ub + 5]);
    let u_6: bool = (optjit_f64_to_f32(uniforms[ub + 6]) != 0);
    let u_7: f32 = optjit_f64_to_f32(uniforms[ub + 7]);
    let nv: i32 = len / 2;
    for (var i0: i32 = i32(lid.x); i0 < nv; i0 += 512) {
      let L0_0: vec2<u32> = vec2<u32>(optjit_ld_b0(p0 + (i0) * 2 + 0), optjit_ld_b0(p0 + (i0) * 2 + 1));
      let L1_0: vec2<u32> = vec2<u32>(optjit_ld_b1(p1 + (i0) * 2 + 0), optjit_ld_b1(p1 + (i0) * 2 + 1));
      let L2_0: vec2<u32> = vec2<u32>(optjit_ld_b2(p2 + (i0) * 2 + 0), optjit_ld_b2(p2 + (i0) * 2 + 1));
      let L3_0: vec2<u32> = vec2<u32>(optjit_ld_b3(p3 + (i0) * 2 + 0), optjit_ld_b3(p3 + (i0) * 2 + 1));
      let i1: i32 = i0 + 256;
      var L0_1: vec2<u32>;
      var L1_1: vec2<u32>;
      var L2_1: vec2<u32>;
      var L3_1: vec2<u32>;
      if (i1 < nv) {
        L0_1 = vec2<u32>(optjit_ld_b0(p0 + (i1) * 2 + 0), optjit_ld_b0(p0 + (i1) * 2 + 1));
        L1_1 = vec2<u32>(optjit_ld_b1(p1 + (i1) * 2 + 0), optjit_ld_b1(p1 + (i1) * 2 + 1));
        L2_1 = vec2<u32>(optjit_ld_b2(p2 + (i1) * 2 + 0), optjit_ld_b2(p2 + (i1) * 2 + 1));
        L3_1 = vec2<u32>(optjit_ld_b3(p3 + (i1) * 2 + 0), optjit_ld_b3(p3 + (i1) * 2 + 1));
      }
      {
        var S0: vec2<u32>;
        var S2: vec2<u32>;
        var S3: vec2<u32>;
        {
          let v0: f32 = OPTJIT_BF16_TO_F32(L0_0[0]);
          let v1: f32 = OPTJIT_BF16_TO_F32(L1_0[0]);
          let v2: f32 = OPTJIT_BF16_TO_F32(L2_0[0]);
          let v3: f32 = OPTJIT_BF16_TO_F32(L3_0[0]);
          let v5: f32 = optjit_mul(v2, u_0);
          let v7: f32 = optjit_fma(v1, u_1, v5);
          let v9: f32 = optjit_mul(v3, u_2);
          let v11: f32 = optjit_mul(u_3, v1);
          let v12: f32 = optjit_fma(v11, v1, v9);
          let v13: f32 = optjit_sqrt(v12);
          let v15: f32 = v13 + u_4;
          let v16: f32 = optjit_div(v7, v15);
          let v18: f32 = optjit_fma(v0, u_5, v16);
          let v20: f32 = select(v16, v18, u_6);
          let v22: f32 = optjit_fma(v20, u_7, v0);
          S2[0] = u32(OPTJIT_BF16_BITS(v7));
          S3[0] = u32(OPTJIT_BF16_BITS(v12));
          S0[0] = u32(OPTJIT_BF16_BITS(v22));
        }
        {
          let v0: f32 = OPTJIT_BF16_TO_F32(L0_0[1]);
          let v1: f32 = OPTJIT_BF16_TO_F32(L1_0[1]);
          let v2: f32 = OPTJIT_BF16_TO_F32(L2_0[1]);
          let v3: f32 = OPTJIT_BF16_TO_F32(L3_0[1]);
          let v5: f32 = optjit_mul(v2, u_0);
          let v7: f32 = optjit_fma(v1, u_1, v5);
          let v9: f32 = optjit_mul(v3, u_2);
          let v11: f32 = optjit_mul(u_3, v1);
          let v12: f32 = optjit_fma(v11, v1, v9);
          let v13: f32 = optjit_sqrt(v12);
          let v15: f32 = v13 + u_4;
          let v16: f32 = optjit_div(v7, v15);
          let v18: f32 = optjit_fma(v0, u_5, v16);
          let v20: f32 = select(v16, v18, u_6);
          let v22: f32 = optjit_fma(v20, u_7, v0);
          S2[1] = u32(OPTJIT_BF16_BITS(v7));
          S3[1] = u32(OPTJIT_BF16_BITS(v12));
          S0[1] = u32(OPTJIT_BF16_BITS(v22));
        }
        if (((p0 + (i0) * 2 + 0) & 1) == 0) { atomicStore(&b0[(p0 + (i0) * 2 + 0) >> 1u], (S0[0] & 0xffffu) | (S0[1] << 16u)); } else { optjit_st_b0(p0 + (i0) * 2 + 0, S0[0]); optjit_st_b0(p0 + (i0) * 2 + 1, S0[1]); }
        if (((p2 + (i0) * 2 + 0) & 1) == 0) { atomicStore(&b2[(p2 + (i0) * 2 + 0) >> 1u], (S2[0] & 0xffffu) | (S2[1] << 16u)); } else { optjit_st_b2(p2 + (i0) * 2 + 0, S2[0]); optjit_st_b2(p2 + (i0) * 2 + 1, S2[1]); }
        if (((p3 + (i0) * 2 + 0) & 1) == 0) { atomicStore(&b3[(p3 + (i0) * 2 + 0) >> 1u], (S3[0] & 0xffffu) | (S3[1] << 16u)); } else { optjit_st_b3(p3 + (i0) * 2 + 0, S3[0]); optjit_st_b3(p3 + (i0) * 2 + 1, S3[1]); }
      }
      if (i1 < nv) {
        var S0: vec2<u32>;
        var S2: vec2<u32>;
        var S3: vec2<u32>;
        {
          let v0: f32 = OPTJIT_BF16_TO_F32(L0_1[0]);
          let v1: f32 = OPTJIT_BF16_TO_F32(L1_1[0]);
          let v2: f32 = OPTJIT_BF16_TO_F32(L2_1[0]);
          let v3: f32 = OPTJIT_BF16_TO_F32(L3_1[0]);
          let v5: f32 = optjit_mul(v2, u_0);
          let v7: f32 = optjit_fma(v1, u_1, v5);
          let v9: f32 = optjit_mul(v3, u_2);
          let v11: f32 = optjit_mul(u_3, v1);
          let v12: f32 = optjit_fma(v11, v1, v9);
          let v13: f32 = optjit_sqrt(v12);
          let v15: f32 = v13 + u_4;
          let v16: f32 = optjit_div(v7, v15);
          let v18: f32 = optjit_fma(v0, u_5, v16);
          let v20: f32 = select(v16, v18, u_6);
          let v22: f32 = optjit_fma(v20, u_7, v0);
          S2[0] = u32(OPTJIT_BF16_BITS(v7));
          S3[0] = u32(OPTJIT_BF16_BITS(v12));
          S0[0] = u32(OPTJIT_BF16_BITS(v22));
        }
        {
          let v0: f32 = OPTJIT_BF16_TO_F32(L0_1[1]);
          let v1: f32 = OPTJIT_BF16_TO_F32(L1_1[1]);
          let v2: f32 = OPTJIT_BF16_TO_F32(L2_1[1]);
          let v3: f32 = OPTJIT_BF16_TO_F32(L3_1[1]);
          let v5: f32 = optjit_mul(v2, u_0);
          let v7: f32 = optjit_fma(v1, u_1, v5);
          let v9: f32 = optjit_mul(v3, u_2);
          let v11: f32 = optjit_mul(u_3, v1);
          let v12: f32 = optjit_fma(v11, v1, v9);
          let v13: f32 = optjit_sqrt(v12);
          let v15: f32 = v13 + u_4;
          let v16: f32 = optjit_div(v7, v15);
          let v18: f32 = optjit_fma(v0, u_5, v16);
          let v20: f32 = select(v16, v18, u_6);
          let v22: f32 = optjit_fma(v20, u_7, v0);
          S2[1] = u32(OPTJIT_BF16_BITS(v7));
          S3[1] = u32(OPTJIT_BF16_BITS(v12));
          S0[1] = u32(OPTJIT_BF16_BITS(v22));
        }
        if (((p0 + (i1) * 2 + 0) & 1) == 0) { atomicStore(&b0[(p0 + (i1) * 2 + 0) >> 1u], (S0[0] & 0xffffu) | (S0[1] << 16u)); } else { optjit_st_b0(p0 + (i1) * 2 + 0, S0[0]); optjit_st_b0(p0 + (i1) * 2 + 1, S0[1]); }
        if (((p2 + (i1) * 2 + 0) & 1) == 0) { atomicStore(&b2[(p2 + (i1) * 2 + 0) >> 1u], (S2[0] & 0xffffu) | (S2[1] << 16u)); } else { optjit_st_b2(p2 + (i1) * 2 + 0, S2[0]); optjit_st_b2(p2 + (i1) * 2 + 1, S2[1]); }
        if (((p3 + (i1) * 2 + 0) & 1) == 0) { atomicStore(&b3[(p3 + (i1) * 2 + 0) >> 1u], (S3[0] & 0xffffu) | (S3[1] << 16u)); } else { optjit_st_b3(p3 + (i1) * 2 + 0, S3[0]); optjit_st_b3(p3 + (i1) * 2 + 1, S3[1]); }
      }
    }
    for (var i0: i32 = nv * 2 + i32(lid.x); i0 < len; i0 += 256) {
      let L0_0: u32 = optjit_ld_b0(p0 + i0);
      let L1_0: u32 = optjit_ld_b1(p1 + i0);
      let L2_0: u32 = optjit_ld_b2(p2 + i0);
      let L3_0: u32 = optjit_ld_b3(p3 + i0);
      {
        var S0: u32;
        var S2: u32;
        var S3: u32;
        let v0: f32 = OPTJIT_BF16_TO_F32(L0_0);
        let v1: f32 = OPTJIT_BF16_TO_F32(L1_0);
        let v2: f32 = OPTJIT_BF16_TO_F32(L2_0);
        let v3: f32 = OPTJIT_BF16_TO_F32(L3_0);
        let v5: f32 = optjit_mul(v2, u_0);
        let v7: f32 = optjit_fma(v1, u_1, v5);
        let v9: f32 = optjit_mul(v3, u_2);
        let v11: f32 = optjit_mul(u_3, v1);
        let v12: f32 = optjit_fma(v11, v1, v9);
        let v13: f32 = optjit_sqrt(v12);
        let v15: f32 = v13 + u_4;
        let v16: f32 = optjit_div(v7, v15);
        let v18: f32 = optjit_fma(v0, u_5, v16);
        let v20: f32 = select(v16, v18, u_6);
        let v22: f32 = optjit_fma(v20, u_7, v0);
        S2 = u32(OPTJIT_BF16_BITS(v7));
        S3 = u32(OPTJIT_BF16_BITS(v12));
        S0 = u32(OPTJIT_BF16_BITS(v22));
        optjit_st_b0(p0 + i0, S0);
        optjit_st_b2(p2 + i0, S2);
        optjit_st_b3(p3 + i0, S3);
      }
    }
  }
}
