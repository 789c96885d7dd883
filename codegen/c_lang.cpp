// The C-family languages: CUDA C and OpenCL C as entries of the table in c_lang.h.
#include "codegen/c_lang.h"

#include <algorithm>
#include <cstdlib>

#include "ir/quant.h"
#include "ir/stochastic_round.h"

namespace optjit::codegen::detail {

std::string Lang::value_type(DType t) const {
  switch (t) {
    case DType::f64:
      return "double";
    case DType::i64:
      return i64();
    case DType::b1:
      return "bool";
    default:
      return "float";
  }
}

std::string Lang::let(const std::string& type, const std::string& name,
                      const std::string& e) const {
  return fmt::format("const {} {} = {};", type, name, e);
}
std::string Lang::var(const std::string& type, const std::string& name,
                      const std::string& init) const {
  return init.empty() ? fmt::format("{} {};", type, name)
                      : fmt::format("{} {} = {};", type, name, init);
}
std::string Lang::for_head(const std::string& type, const std::string& v, const std::string& init,
                           const std::string& cond, const std::string& step) const {
  return fmt::format("for ({} {} = {}; {}; {})", type, v, init, cond, step);
}
std::string Lang::cast(const std::string& type, const std::string& x) const {
  return fmt::format("({}){}", type, x);
}
std::string Lang::select(const std::string& c, const std::string& t, const std::string& f) const {
  return fmt::format("{} ? {} : {}", c, t, f);
}
std::string Lang::unit_clamp(const std::string& x) const {
  const std::string in_range = "(" + select(compare(">", x, "1.0f", DType::f32), "1.0f", x) + ")";
  return select(compare(">=", x, "-1.0f", DType::f32), in_range, "-1.0f");
}
std::string Lang::u16_of(const std::string& x, DType t) const {
  const std::string zero = literal(0.0, t), top = literal(65535.0, t);
  const std::string in_range = "(" + select(compare(">", x, top, t), top, x) + ")";
  return cast(u32(), "(" + select(compare(">=", x, zero, t), in_range, zero) + ")");
}
std::string Lang::i64_of(const std::string& x, DType t) const {
  const std::string limit = literal(kI64Limit, t), top = literal(kI64Limit, DType::i64);
  const std::string low =
      "(" + select(compare("<", x, "-" + limit, t), "-" + top, cast(i64(), x)) + ")";
  const std::string in_range = "(" + select(compare(">", x, limit, t), top, low) + ")";
  return "(" + select(fmt::format("isfinite({})", x), in_range, cast(i64(), "0")) + ")";
}
std::string Lang::i64_arithmetic(const std::string& a, char op, const std::string& b) const {
  const std::string d = value_type(DType::f64), limit = literal(kI64Limit, DType::f64);
  return cast(i64(), fmt::format("fmin(fmax({} {} {}, -{}), {})", cast(d, a), op, cast(d, b), limit,
                                 limit));
}
std::string Lang::lut_cell(const std::string& x) const {
  return cast(u32(), "(" + add(mul(add(unit_clamp(x), "1.0f"), "32767.5f"), "0.5f") + ")");
}
std::string Lang::const_table(const std::string& name, const std::vector<uint32_t>& values,
                              size_t) const {
  std::string v;
  for (size_t k = 0; k < values.size(); ++k)
    v += fmt::format("{}0x{:08x}u,", k % 8 == 0 ? "\n  " : " ", values[k]);
  return fmt::format("{}{} {}[{}] = {{{}\n}};\n", constant(), u32(), name, values.size(), v);
}
std::string Lang::shared(const std::string& type, const std::string& name, size_t n) const {
  return fmt::format("{}{} {}[{}];", local(), type, name, n);
}
std::string Lang::group_max_u32(const std::string& shared, const std::string& value,
                                int group) const {
  const std::string lid = local_id();
  return fmt::format(
      "        {0}[{1}] = {2};\n        {3};\n"
      "        {4} {{\n"
      "          if ({6} < w) {{\n            {0}[{1}] = {5};\n          }}\n"
      "          {3};\n        }}\n",
      shared, lid, value, barrier(),
      for_head(i32(), "w", std::to_string(group / 2), "w > 0", "w >>= 1u"),
      select(fmt::format("{0}[{1}] > {0}[{1} + w]", shared, lid),
             fmt::format("{}[{}]", shared, lid), fmt::format("{}[{} + w]", shared, lid)),
      cast(i32(), lid));
}

std::string Lang::chunk_fields() const {
  return fmt::format(
      "const {0} t = chunks[3 * c], off = chunks[3 * c + 1], len = chunks[3 * c + 2];", i64());
}
std::string Lang::bf16_helpers() const {
  // bf16: the top half of an f32, rounded to nearest even; NaN stays a quiet NaN.
  return fmt::format("#define OPTJIT_BF16_TO_F32(x) OPTJIT_BITS_F32(({})(x) << 16)\n", u32()) +
         fmt::format(
             "#define OPTJIT_BF16_BITS(v) ((v) != (v) ? ({0})((OPTJIT_F32_BITS(v) >> 16) | 0x40u) "
             ": ({0})((OPTJIT_F32_BITS(v) + 0x7fffu + ((OPTJIT_F32_BITS(v) >> 16) & 1u)) >> 16))\n",
             u32());
}
std::string Lang::rounding_helpers(bool f64_odd, bool /*f16*/) const {
  if (!f64_odd) return {};
  // Toward zero, then the last bit set where that was inexact (NaN stays NaN): rounding it to
  // nearest even at 8 or 11 bits is the f64's own rounding there (f32 keeps 13 bits more).
  return fmt::format(
      "{0}float optjit_f32_odd(double d) {{\n"
      "  const float t = (float)d;\n"
      "  const double back = (double)t;\n"
      "  {1} b = OPTJIT_F32_BITS(t);\n"
      "  if (fabs(back) > fabs(d)) b -= 1u;\n"
      "  if (back != d) b |= 1u;\n"
      "  return OPTJIT_BITS_F32(b);\n}}\n",
      device_fn(), u32());
}
std::string Lang::rounded(DType to, DType from, const std::string& x) const {
  return half_rounded(to, from == DType::f64 ? fmt::format("optjit_f32_odd({})", x) : x);
}
std::string Lang::half_rounded(DType to, const std::string& f) const {
  if (to == DType::f16) return fmt::format("OPTJIT_F16_TO_F32(OPTJIT_F32_TO_F16({}))", f);
  return fmt::format("OPTJIT_BF16_TO_F32(OPTJIT_BF16_BITS({}))", f);
}
std::string Lang::sround_helpers() const {
  // ir/stochastic_round.h, line for line.
  return fmt::format(
      "{0} {1} optjit_sr_mix({1} z) {{\n"
      "  z = (z ^ (z >> 30)) * 0x{3:x}ul;\n"
      "  z = (z ^ (z >> 27)) * 0x{4:x}ul;\n"
      "  return z ^ (z >> 31);\n}}\n"
      "{0} {1} optjit_sr_key(double v) {{\n"
      "  return v >= 0.0 && v < 0x1p53 ? ({1})v : ({1})0;\n}}\n"
      "{0} float optjit_sround(float f, double key, double first, {5} e, {2} stream) {{\n"
      "  const {1} s = optjit_sr_mix(optjit_sr_key(key) ^ (({1})stream << 56));\n"
      "  const {2} r = ({2})optjit_sr_mix(s + optjit_sr_key(first) + ({1})e) & 0xffffu;\n"
      "  const {2} bits = OPTJIT_F32_BITS(f);\n"
      "  if ((bits & 0x7f800000u) == 0x7f800000u) return f;\n"
      "  return OPTJIT_BITS_F32((bits + r) & 0xffff0000u);\n}}\n",
      device_fn(), u64(), u32(), ir::kSrMul1, ir::kSrMul2, i64());
}
Expected<std::string> Lang::sround_call(const std::string& x, const F64Operand& key,
                                        const F64Operand& first, const std::string& e,
                                        uint32_t stream) const {
  return fmt::format("optjit_sround({}, (double){}, (double){}, {}, {}u)", x, key.expr, first.expr,
                     e, stream);
}
std::string Lang::uniform(uint32_t k) const { return fmt::format("u[{}]", k); }
namespace {
const char* word_type(int bytes) { return bytes == 2 ? "unsigned short" : "unsigned int"; }
}  // namespace
std::string Lang::code_word(uint32_t b, const std::string& ix, int bytes) const {
  if (bytes == 1) return code_byte(b, ix);
  return fmt::format("((unsigned int)*(const {}{}*)(q{} + ({})))", global(), word_type(bytes), b,
                     ix);
}
std::string Lang::store_code_word(uint32_t b, const std::string& ix, int bytes,
                                  const std::string& value) const {
  if (bytes == 1) return store_codes(b, ix, fmt::format("(unsigned char)({})", value));
  return fmt::format("*({0}{1}*)(q{2} + ({3})) = ({1})({4});", global(), word_type(bytes), b, ix,
                     value);
}
std::string Lang::store_partial(const std::string& ix, const std::string& value) const {
  return fmt::format("partials[{}] = {};", ix, value);
}

namespace {

// Where a chunk's codes start in its tensor's codes: byte `off` (the chunk's first element),
// or off / 2 for 4-bit codes (two to a byte; chunk offsets are even).
std::string code_offset(const plan::Plan& plan, uint32_t b, const std::string& off = "off") {
  return ir::info(plan.buffers[b].quant).bits == 4 ? fmt::format("({} >> 1)", off) : off;
}

// Short names for storage types in CUDA's vector structs.
const char* vec_tag(DType t) {
  switch (t) {
    case DType::f64:
      return "f64";
    case DType::f32:
      return "f32";
    case DType::f16:
    case DType::bf16:
    case DType::u16:
      return "u16";
    case DType::i64:
      return "i64";
    case DType::b1:
    case DType::u8:
      return "u8";
  }
  return "?";
}

std::string small_storage(DType t, const char* u16, const char* u8, const char* i64) {
  switch (t) {
    case DType::f64:
      return "double";
    case DType::f32:
      return "float";
    case DType::f16:
    case DType::bf16:
    case DType::u16:
      return u16;
    case DType::i64:
      return i64;
    case DType::b1:
    case DType::u8:
      return u8;
  }
  return "?";
}

// CUDA C for NVRTC: buffers through a table of device pointers, vectors as aligned structs.
class Cuda final : public Lang {
 public:
  const char* name() const override { return "cuda"; }
  std::string unit_clamp(const std::string& x) const override {
    return fmt::format("fminf(fmaxf({}, -1.0f), 1.0f)", x);
  }
  // The same cell for every x, one instruction instead of two: in [-1, 1] the same arithmetic;
  // above 1 (or +inf) the product is at least 65535.5 and the cell 65535, as for 1; below -1
  // it is under 0.5, and cvt.rzi.u32 (__float2uint_rz) gives 0 for it and for NaN, as for -1.
  std::string lut_cell(const std::string& x) const override {
    return fmt::format("min(__float2uint_rz(({} + 1.0f) * 32767.5f + 0.5f), 65535u)", x);
  }
  // One PRMT.
  std::string byte_of(const std::string& word, int k) const override {
    return fmt::format("__byte_perm({}, 0u, 0x444{}u)", word, k);
  }
  const char* kernel() const override { return "extern \"C\" __global__ void"; }
  const char* device_fn() const override { return "__device__ static "; }
  const char* global() const override { return ""; }
  const char* local() const override { return "__shared__ "; }
  const char* i64() const override { return "long long"; }
  const char* u32() const override { return "unsigned int"; }
  const char* u64() const override { return "unsigned long long"; }
  const char* group_id() const override { return "blockIdx.x"; }
  const char* groups() const override { return "gridDim.x"; }
  const char* local_id() const override { return "threadIdx.x"; }
  const char* local_size() const override { return "blockDim.x"; }
  const char* global_id() const override {
    return "(blockIdx.x * (long long)blockDim.x + threadIdx.x)";
  }
  const char* barrier() const override { return "__syncthreads()"; }
  std::string math(const char* fn, DType t) const override {
    return t == DType::f64 ? fn : std::string(fn) + "f";
  }
  std::string storage_type(DType t) const override {
    return small_storage(t, "unsigned short", "unsigned char", "long long");
  }

  std::string preamble(const plan::Plan& plan, int vec) const override {
    std::string s;
    s += "#define OPTJIT_F32_BITS(x) __float_as_uint(x)\n#define OPTJIT_F64_BITS(x) ((unsigned "
         "long long)__double_as_longlong(x))\n";
    s += "#define OPTJIT_BITS_F32(x) __uint_as_float(x)\n#define OPTJIT_BITS_F64(x) "
         "__longlong_as_double((long long)(x))\n";
    // f16 conversions as the PTX instructions cuda_fp16.h wraps, so a compile needs no CUDA
    // headers (NVRTC from a Python wheel has none beside it).
    s += "__device__ __forceinline__ float optjit_f16_to_f32(unsigned short h) { float f; "
         "asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h)); return f; }\n";
    s += "__device__ __forceinline__ unsigned short optjit_f32_to_f16(float f) { unsigned short h; "
         "asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f)); return h; }\n";
    s += "#define OPTJIT_F16_TO_F32(x) optjit_f16_to_f32(x)\n";
    s += "#define OPTJIT_F32_TO_F16(v) optjit_f32_to_f16(v)\n";
    s += "struct OptjitRow { void* const* buffers; const double* uniforms; };\n";
    if (vec > 1) {
      // Vectors as aligned structs: one wide load or store each (two for 32 bytes and more).
      std::vector<std::string> done;
      for (const auto& buf : plan.buffers) {
        std::string tag = vec_tag(buf.storage);
        if (std::find(done.begin(), done.end(), tag) != done.end()) continue;
        done.push_back(tag);
        s += fmt::format("struct __align__({}) optjit_{}x{} {{ {} v[{}]; }};\n",
                         vec * size_bytes(buf.storage), tag, vec, storage_type(buf.storage), vec);
      }
      // The quantized path keeps a vector's dequantized values and new values in f32 vectors
      // whatever the plan's storage types.
      const bool quantized = std::any_of(plan.buffers.begin(), plan.buffers.end(),
                                         [](const auto& b) { return b.quant != ir::Quant::none; });
      if (quantized && std::find(done.begin(), done.end(), "f32") == done.end())
        s += fmt::format("struct __align__({}) optjit_f32x{} {{ float v[{}]; }};\n", 4 * vec, vec,
                         vec);
    }
    return s;
  }
  std::string pass_signature(const plan::Plan&, size_t k, const GpuLaunch& launch,
                             bool ctl) const override {
    return fmt::format(
        "{} __launch_bounds__({}, {}) optjit_pass_{}(const OptjitRow* __restrict__ rows,\n"
        "    const long long* __restrict__ chunks, const long long nchunks, double* __restrict__ "
        "partials{}) {{\n",
        // By default at least 512 threads resident per SM, the floor the tuner's occupancy
        // pruning keeps (a quarter of sm_80's and sm_90's 2048). Without a minimum, ptxas capped
        // clip+AdamW at 48 registers on sm_80 and spilled; with 1024, 8-wide vectors spilled at
        // 64. `resident` asks for more (or fewer).
        kernel(), launch.block, std::max(1, launch.resident / launch.block), k,
        ctl ? ", const double* __restrict__ ctl" : "");
  }
  std::string buffer_pointers(const plan::Plan& plan,
                              const std::vector<uint32_t>& used) const override {
    std::string s = "    const OptjitRow row = rows[t];\n    const double* u = row.uniforms;\n";
    for (uint32_t b : used)
      s += fmt::format("    {0}* p{1} = ({0}*)row.buffers[{1}] + off;\n",
                       storage_type(plan.buffers[b].storage), b);
    return s;
  }
  std::string quant_pointers(const plan::Plan& plan, uint32_t b) const override {
    return fmt::format(
        "    unsigned char* q{0} = (unsigned char*)row.buffers[{0}] + {2};\n"
        "    float* s{0} = (float*)row.buffers[{1}];\n",
        b, b + 1, code_offset(plan, b));
  }
  std::string no_scales(uint32_t b) const override { return fmt::format("s{} == 0", b); }
  // Global memory through the read-only cache, not __constant__: the code tables are read at
  // a different entry by each thread of a warp, which constant memory serializes.
  const char* constant() const override { return "__device__ const "; }
  std::string module_shared_u32(const std::string& name, size_t n) const override {
    return fmt::format("__shared__ unsigned int {}[{}];\n", name, n);
  }
  std::string warp_xor_u32(const std::string& value, int mask) const override {
    return fmt::format("__shfl_xor_sync(0xffffffffu, {}, {})", value, mask);
  }
  std::string prefetch_l2(const std::string& address) const override {
    return fmt::format("optjit_prefetch_l2({});", address);
  }
  std::string next_chunk(const plan::Plan& plan, const std::vector<uint32_t>& bufs,
                         const std::string& in) const override {
    std::string s = in +
                    "const long long t2 = chunks[3 * c2], off2 = chunks[3 * c2 + 1], len2 = "
                    "chunks[3 * c2 + 2];\n" +
                    in + "void* const* nb = rows[t2].buffers;\n";
    for (uint32_t b : bufs) {
      const ir::Quant q = plan.buffers[b].quant;
      s += in +
           (q != ir::Quant::none
                ? fmt::format("const unsigned char* nq{0} = (const unsigned char*)nb[{0}] + {1};",
                              b, code_offset(plan, b, "off2"))
                : fmt::format("const {0}* np{1} = (const {0}*)nb[{1}] + off2;",
                              storage_type(plan.buffers[b].storage), b)) +
           "\n";
    }
    return s;
  }
  // What ptxas writes for div.rn.f32 and sqrt.rn.f32 (sm_90, CUDA 13) is a fast sequence, a
  // range check and a branch to a slow path: a / b as MUFU.RCP, one Newton step of the
  // reciprocal, q = a * y and Markstein's correction q + (a - b q) y; sqrt(x) as MUFU.RSQ,
  // s = x r and s + (x - s s) r / 2, for x in [2^-101, FLT_MAX]. The same instructions here give
  // the same bits wherever the fast path is taken. Division takes it only where both operands
  // lie in [2^-60, 2^61) (or a is 0, whose quotient a * y is a signed zero), far inside any
  // range check: y, q, the remainder and the quotient are then normal, with no overflow. With
  // the reciprocal and root as correctly rounded as in the CUDA emulator, both sequences are
  // correctly rounded: checked exhaustively for the square root (every x in its range) and the
  // reciprocal (every mantissa), and for divisions on 68 million random and near-midpoint pairs.
  //
  // The root takes its fast path for x in [2^-101, 2^122) only, so that its result lies in
  // [2^-51, 2^61), inside the division's range: optjit_fdiv_by divides such a number (or a
  // constant in that range) and checks only the divisor. The range test is one subtraction
  // and compare of |x|'s bits: 0x21800000 is 2^-60, 0x21800000 + 0x3c7fffff the largest float
  // below 2^61. The checks combine with & and |, not && and ||: short-circuits become branches
  // around each check (ptxas, sm_90), 32 more instructions for four AdamW elements.
  // optjit_fdiv repeats optjit_fdiv_by's sequence rather than calling it: its zero dividend's
  // quotient is a * y, which it already has; calling optjit_fdiv_by costs a product (a * b) or
  // a branch per division (8-bit AdamW + clip: 3640 or 3672 instructions against 3632).
  std::string branch_free_helpers() const override {
    return "__device__ __forceinline__ bool optjit_fdiv_range(float x) {\n"
           "  return (__float_as_uint(x) & 0x7fffffffu) - 0x21800000u <= 0x3c7fffffu;\n"
           "}\n"
           "__device__ __forceinline__ float optjit_fdiv(float a, float b, bool& ok) {\n"
           "  float y;\n"
           "  asm(\"rcp.approx.ftz.f32 %0, %1;\" : \"=f\"(y) : \"f\"(b));\n"
           "  y = __fmaf_rn(y, __fmaf_rn(-b, y, 1.0f), y);\n"
           "  const float q = __fmul_rn(a, y);\n"
           "  ok = ok & optjit_fdiv_range(b) & (optjit_fdiv_range(a) | (a == 0.0f));\n"
           "  return a == 0.0f ? q : __fmaf_rn(__fmaf_rn(-b, q, a), y, q);\n"
           "}\n"
           "__device__ __forceinline__ float optjit_fdiv_by(float a, float b, bool& ok) {\n"
           "  float y;\n"
           "  asm(\"rcp.approx.ftz.f32 %0, %1;\" : \"=f\"(y) : \"f\"(b));\n"
           "  y = __fmaf_rn(y, __fmaf_rn(-b, y, 1.0f), y);\n"
           "  const float q = __fmul_rn(a, y);\n"
           "  ok = ok & optjit_fdiv_range(b);\n"
           "  return __fmaf_rn(__fmaf_rn(-b, q, a), y, q);\n"
           "}\n"
           "__device__ __forceinline__ float optjit_fsqrt(float x, bool& ok) {\n"
           "  float r;\n"
           "  asm(\"rsqrt.approx.ftz.f32 %0, %1;\" : \"=f\"(r) : \"f\"(x));\n"
           "  const float s = __fmul_rn(x, r);\n"
           "  ok = ok & (__float_as_uint(x) - 0x0d000000u <= 0x6f7fffffu);\n"
           "  return __fmaf_rn(__fmaf_rn(-s, s, x), __fmul_rn(r, 0.5f), s);\n"
           "}\n";
  }
  // cp.async from sm_80; before it, the same bytes copied at once (the wait then has nothing to
  // wait for). The 16-byte copies bypass L1 (.cg): each byte is read once.
  std::string async_copy_helpers() const override {
    return "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800\n"
           "__device__ __forceinline__ void optjit_cp_async16(void* s, const void* g) {\n"
           "  for (int i = 0; i < 4; ++i) ((unsigned int*)s)[i] = ((const unsigned int*)g)[i];\n"
           "}\n"
           "__device__ __forceinline__ void optjit_cp_async4(void* s, const void* g) {\n"
           "  *(unsigned int*)s = *(const unsigned int*)g;\n"
           "}\n"
           "__device__ __forceinline__ void optjit_cp_commit() {}\n"
           "template <int N> __device__ __forceinline__ void optjit_cp_wait() {}\n"
           "#else\n"
           "__device__ __forceinline__ void optjit_cp_async16(void* s, const void* g) {\n"
           "  asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16;\" : : "
           "\"r\"((unsigned int)__cvta_generic_to_shared(s)), \"l\"(g) : \"memory\");\n"
           "}\n"
           "__device__ __forceinline__ void optjit_cp_async4(void* s, const void* g) {\n"
           "  asm volatile(\"cp.async.ca.shared.global [%0], [%1], 4;\" : : "
           "\"r\"((unsigned int)__cvta_generic_to_shared(s)), \"l\"(g) : \"memory\");\n"
           "}\n"
           "__device__ __forceinline__ void optjit_cp_commit() {\n"
           "  asm volatile(\"cp.async.commit_group;\" : : : \"memory\");\n"
           "}\n"
           "template <int N> __device__ __forceinline__ void optjit_cp_wait() {\n"
           "  asm volatile(\"cp.async.wait_group %0;\" : : \"n\"(N) : \"memory\");\n"
           "}\n"
           "#endif\n";
  }
  std::string prefetch_l2_helper() const override {
    return "__device__ __forceinline__ void optjit_prefetch_l2(const void* a) {\n"
           "  asm volatile(\"prefetch.global.L2 [%0];\" : : \"l\"(a));\n"
           "}\n";
  }
  std::string group_max_u32(const std::string& shared, const std::string& value,
                            int group) const override {
    if (group % 32 != 0 || group > 1024) return Lang::group_max_u32(shared, value, group);
    auto warp_max = [](const std::string& in) {
      return fmt::format(
          "for (int o = 16; o > 0; o >>= 1) {{\n{0}  const unsigned int k = "
          "__shfl_xor_sync(0xffffffffu, m, o);\n{0}  m = m > k ? m : k;\n{0}}}\n",
          in);
    };
    return fmt::format(
        "        {{\n          unsigned int m = {1};\n          {2}"
        "          if ((threadIdx.x & 31u) == 0u) {{\n            {0}[threadIdx.x >> 5] = m;\n"
        "          }}\n          __syncthreads();\n"
        "          if (threadIdx.x < 32u) {{\n            m = threadIdx.x < {3}u ? "
        "{0}[threadIdx.x] : 0u;\n"
        "            {4}"
        "            if (threadIdx.x == 0u) {{\n              {0}[0] = m;\n            }}\n"
        "          }}\n          __syncthreads();\n        }}\n",
        shared, value, warp_max("          "), group / 32, warp_max("            "));
  }
  std::string vec_type(DType st, int w) const override {
    return w == 1 ? storage_type(st) : fmt::format("optjit_{}x{}", vec_tag(st), w);
  }
  std::string load(uint32_t b, DType st, int w, const std::string& ix) const override {
    return w == 1 ? fmt::format("p{}[{}]", b, ix)
                  : fmt::format("((const {}*)p{})[{}]", vec_type(st, w), b, ix);
  }
  std::string store(uint32_t b, DType st, int w, const std::string& ix) const override {
    return w == 1 ? fmt::format("p{}[{}] = S{};", b, ix, b)
                  : fmt::format("(({}*)p{})[{}] = S{};", vec_type(st, w), b, ix, b);
  }
  std::string lane(const std::string& var, int l, int w) const override {
    return w == 1 ? var : fmt::format("{}.v[{}]", var, l);
  }
  bool half_loads_convert() const override { return false; }
};

// OpenCL C: no pointers in buffers, so each buffer is an arena passed as an argument and each
// tensor's row holds its element offset into every arena; vectors are OpenCL's own.
class Opencl final : public Lang {
 public:
  const char* name() const override { return "opencl"; }
  std::string unit_clamp(const std::string& x) const override {
    return fmt::format("fmin(fmax({}, -1.0f), 1.0f)", x);
  }
  const char* kernel() const override { return "__kernel void"; }
  const char* device_fn() const override { return ""; }
  const char* global() const override { return "__global "; }
  const char* local() const override { return "__local "; }
  const char* i64() const override { return "long"; }
  const char* u32() const override { return "uint"; }
  const char* u64() const override { return "ulong"; }
  const char* group_id() const override { return "get_group_id(0)"; }
  const char* groups() const override { return "get_num_groups(0)"; }
  const char* local_id() const override { return "get_local_id(0)"; }
  const char* local_size() const override { return "get_local_size(0)"; }
  const char* global_id() const override { return "get_global_id(0)"; }
  const char* barrier() const override { return "barrier(CLK_LOCAL_MEM_FENCE)"; }
  std::string math(const char* fn, DType) const override { return fn; }
  std::string storage_type(DType t) const override {
    return small_storage(t, "ushort", "uchar", "long");
  }

  std::string preamble(const plan::Plan&, int) const override {
    std::string s;
    s += "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n";
    // No fused multiply-adds (OpenCL C allows contraction by default), as NVRTC's --fmad=false.
    s += "#pragma OPENCL FP_CONTRACT OFF\n";
    s += "#define OPTJIT_F32_BITS(x) as_uint(x)\n#define OPTJIT_F64_BITS(x) as_ulong(x)\n";
    s += "#define OPTJIT_BITS_F32(x) as_float(x)\n#define OPTJIT_BITS_F64(x) as_double(x)\n";
    return s;
  }
  std::string pass_signature(const plan::Plan& plan, size_t k, const GpuLaunch&,
                             bool ctl) const override {
    std::string args;
    for (size_t b = 0; b < plan.buffers.size(); ++b)
      args += fmt::format("__global {}* restrict b{}, ", storage_type(plan.buffers[b].storage), b);
    return fmt::format(
        "{} optjit_pass_{}({}__global const double* restrict uniforms, __global const long* "
        "restrict rows,\n"
        "    __global const long* restrict chunks, const long nchunks, __global double* restrict "
        "partials{}) {{\n",
        kernel(), k, args, ctl ? ", __global const double* restrict ctl" : "");
  }
  std::string buffer_pointers(const plan::Plan& plan,
                              const std::vector<uint32_t>& used) const override {
    // rows: per tensor, each buffer's first element in its arena, then the uniform row.
    const size_t stride = plan.buffers.size() + 1;
    std::string s = fmt::format("    __global const long* row = rows + {} * t;\n", stride);
    s += fmt::format("    __global const double* u = uniforms + row[{}];\n", stride - 1);
    for (uint32_t b : used)
      s += fmt::format("    __global {0}* p{1} = b{1} + row[{1}] + off;\n",
                       storage_type(plan.buffers[b].storage), b);
    return s;
  }
  std::string quant_pointers(const plan::Plan& plan, uint32_t b) const override {
    // The codes live at the start of the tensor's region of the f32-typed arena.
    return fmt::format(
        "    __global uchar* q{0} = (__global uchar*)(b{0} + row[{0}]) + {2};\n"
        "    __global float* s{0} = b{1} + (row[{1}] < 0 ? 0 : row[{1}]);\n",
        b, b + 1, code_offset(plan, b));
  }
  std::string no_scales(uint32_t b) const override { return fmt::format("row[{}] < 0", b + 1); }
  const char* constant() const override { return "__constant "; }
  // Halves load as floats (vload_half).
  std::string vec_type(DType st, int w) const override {
    std::string e = st == DType::f16 ? "float" : storage_type(st);
    return w == 1 ? e : fmt::format("{}{}", e, w);
  }
  std::string load(uint32_t b, DType st, int w, const std::string& ix) const override {
    if (st == DType::f16)
      return fmt::format("vload_half{}({}, (__global const half*)p{})",
                         w == 1 ? "" : std::to_string(w), ix, b);
    return w == 1 ? fmt::format("p{}[{}]", b, ix) : fmt::format("vload{}({}, p{})", w, ix, b);
  }
  std::string store(uint32_t b, DType st, int w, const std::string& ix) const override {
    if (st == DType::f16)
      return fmt::format("vstore_half{}_rte(S{}, {}, (__global half*)p{});",
                         w == 1 ? "" : std::to_string(w), b, ix, b);
    return w == 1 ? fmt::format("p{}[{}] = S{};", b, ix, b)
                  : fmt::format("vstore{}(S{}, {}, p{});", w, b, ix, b);
  }
  std::string lane(const std::string& var, int l, int w) const override {
    return w == 1 ? var : fmt::format("{}.s{}", var, l);
  }
  bool half_loads_convert() const override { return true; }
  // OpenCL C converts to half only through memory without cl_khr_fp16: a private one.
  std::string rounding_helpers(bool f64_odd, bool f16) const override {
    std::string s = Lang::rounding_helpers(f64_odd, f16);
    if (f16)
      s += "float optjit_round_f16(float x) {\n  ushort h;\n  vstore_half_rte(x, 0, (half*)&h);\n"
           "  return vload_half(0, (half*)&h);\n}\n";
    return s;
  }
  std::string half_rounded(DType to, const std::string& f) const override {
    return to == DType::f16 ? fmt::format("optjit_round_f16({})", f) : Lang::half_rounded(to, f);
  }
};

// WGSL (WebGPU): no pointers, so each buffer is an arena (a storage buffer) and a tensor's row
// holds element offsets into them, as OpenCL's; no f64 and no 64-bit integers, so the tables'
// 64-bit entries are read as their low words, uniforms arrive as f64 bit patterns converted to
// f32 on load, reductions accumulate in f32 and leave as f64 bit patterns (the host combines
// them in f64, as every backend's partials); declarations, casts and the conditional operator
// are spelled the WGSL way, and shared arrays live at module scope.
class Wgsl final : public Lang {
 public:
  const char* name() const override { return "wgsl"; }
  bool ieee_division_by_zero() const override { return false; }
  const char* kernel() const override { return "@compute"; }
  const char* device_fn() const override { return ""; }
  const char* global() const override { return ""; }
  const char* local() const override { return ""; }
  const char* i64() const override { return "i32"; }
  const char* i32() const override { return "i32"; }
  const char* u32() const override { return "u32"; }
  const char* u64() const override { return "u32"; }  // unused: unsupported() refuses f64
  const char* group_id() const override { return "i32(wg.x)"; }
  const char* groups() const override { return "i32(nwg.x)"; }
  const char* local_id() const override { return "i32(lid.x)"; }
  const char* local_size() const override { return "i32(OPTJIT_BLOCK)"; }
  const char* global_id() const override { return "i32(gid.x)"; }
  const char* barrier() const override { return "workgroupBarrier()"; }
  std::string math(const char* fn, DType) const override {
    const std::string f = fn;
    return f == "fabs" ? "abs" : f == "sqrt" ? "optjit_sqrt" : f == "fma" ? "optjit_fma" : fn;
  }
  std::string mul(const std::string& a, const std::string& b) const override {
    return fmt::format("optjit_mul({}, {})", a, b);
  }
  std::string div(const std::string& a, const std::string& b) const override {
    return fmt::format("optjit_div({}, {})", a, b);
  }
  std::string add(const std::string& a, const std::string& b) const override {
    return fmt::format("optjit_add({}, {})", a, b);
  }
  // Elements narrower than a word (16-bit floats, bools, bytes) share words in memory: two or
  // four to a word. 16-bit ones are held as their bits in u32 values, bools as bools.
  static int narrow(DType t) {
    if (t == DType::f16 || t == DType::bf16 || t == DType::u16) return 16;
    return t == DType::b1 || t == DType::u8 ? 8 : 0;
  }
  static bool packed(DType t) { return narrow(t) != 0; }
  std::string storage_type(DType t) const override {
    return t == DType::b1 ? "bool" : packed(t) ? "u32" : value_type(t);
  }
  std::string value_type(DType t) const override {
    switch (t) {
      case DType::b1:
        return "bool";
      case DType::i64:
        return "i32";
      case DType::u16:
        return "u32";
      default:  // f64: only uniforms are (unsupported() checks), converted to f32 on load
        return "f32";
    }
  }
  const char* wide() const override { return "f32"; }
  std::string compare(const char* op, const std::string& a, const std::string& b,
                      DType t) const override {
    if (t != DType::f32 && t != DType::f64) return fmt::format("{} {} {}", a, op, b);
    if (std::string(op) == "!=")
      return fmt::format("(isnan({0}) || isnan({1}) || {0} != {1})", a, b);
    return fmt::format("(!isnan({0}) && !isnan({1}) && {0} {2} {1})", a, b, op);
  }

  std::string unsupported(const plan::Plan& plan, bool device_step) const override {
    if (device_step)
      return "WGSL has no f64, which the device step's scalar program runs in: the webgpu "
             "backend runs it on the host (--step host)";
    for (const auto& buf : plan.buffers) {
      if (buf.storage != DType::f32 && !packed(buf.storage))
        return fmt::format(
            "the webgpu backend stores f32, bf16 and f16 (buffer '{}' is {}, and WGSL has no "
            "{})",
            buf.name, to_string(buf.storage), to_string(buf.storage));
    }
    for (const auto& pass : plan.passes)
      for (const auto& in : pass.body.insts) {
        // Uniforms arrive as f64 and reductions leave as f64 (both converted); nothing else may.
        const bool converted =
            in.op == ir::Op::Uniform || ir::info(in.op).kind == ir::OpKind::reduce;
        if ((in.type == DType::f64 && !converted) || in.type == DType::i64)
          return fmt::format("WGSL has no {}: '{}' in pass {} cannot run on the webgpu backend",
                             to_string(in.type), ir::info(in.op).text, &pass - &plan.passes[0]);
      }
    return {};
  }

  std::string let(const std::string& type, const std::string& name,
                  const std::string& e) const override {
    return fmt::format("let {}: {} = {};", name, type, e);
  }
  std::string var(const std::string& type, const std::string& name,
                  const std::string& init) const override {
    return init.empty() ? fmt::format("var {}: {};", name, type)
                        : fmt::format("var {}: {} = {};", name, type, init);
  }
  std::string for_head(const std::string& type, const std::string& v, const std::string& init,
                       const std::string& cond, const std::string& step) const override {
    return fmt::format("for (var {}: {} = {}; {}; {})", v, type, init, cond, step);
  }
  std::string cast(const std::string& type, const std::string& x) const override {
    return fmt::format("{}({})", type, x);
  }
  std::string select(const std::string& c, const std::string& t,
                     const std::string& f) const override {
    return fmt::format("select({}, {}, {})", f, t, c);
  }
  std::string shared(const std::string& type, const std::string& name, size_t n) const override {
    return fmt::format("var<workgroup> {}: array<{}, {}>;", name, type, n);
  }
  bool shared_at_module_scope() const override { return true; }
  std::string chunk_fields() const override {
    return "let t: i32 = chunks[3 * c].x; let off: i32 = chunks[3 * c + 1].x; let len: i32 = "
           "chunks[3 * c + 2].x;";
  }
  std::string uniform(uint32_t k) const override {
    return fmt::format("optjit_f64_to_f32(uniforms[ub + {}])", k);
  }
  std::string store_partial(const std::string& ix, const std::string& value) const override {
    return fmt::format("partials[{}] = optjit_f32_to_f64({});", ix, value);
  }
  std::string uniform_name(uint32_t k) const override { return fmt::format("u_{}", k); }

  std::string preamble(const plan::Plan& plan, int) const override {
    std::string s;
    // Bindings: the arenas, then the tables; the chunk count in a uniform (WebgpuModule binds
    // the kernel arguments in this order).
    const size_t B = plan.buffers.size();
    for (size_t b = 0; b < B; ++b) {
      if (!packed(plan.buffers[b].storage)) {
        s += fmt::format("@group(0) @binding({0}) var<storage, read_write> b{0}: array<{1}>;\n", b,
                         storage_type(plan.buffers[b].storage));
        if (plan.buffers[b].quant != ir::Quant::none)  // codes: bytes of the f32 words' bits
          s += fmt::format(
              "fn optjit_code_b{0}(i: i32) -> u32 {{\n"
              "  return (bitcast<u32>(b{0}[i >> 2u]) >> (8u * u32(i & 3))) & 255u;\n}}\n",
              b);
        continue;
      }
      // Two or four elements to a word. Invocations store neighbouring elements (vector tails,
      // chunk ends), so a store replaces its part of the word atomically, never the rest.
      const int bits = narrow(plan.buffers[b].storage), per = 32 / bits;
      s += fmt::format(
          "@group(0) @binding({0}) var<storage, read_write> b{0}: array<atomic<u32>>;\n"
          "fn optjit_ld_b{0}(e: i32) -> u32 {{\n"
          "  return (atomicLoad(&b{0}[e >> {1}u]) >> ({2}u * u32(e & {3}))) & {4}u;\n}}\n"
          "fn optjit_st_b{0}(e: i32, v: u32) {{\n"
          "  let sh = {2}u * u32(e & {3});\n"
          "  atomicAnd(&b{0}[e >> {1}u], ~({4}u << sh));\n"
          "  atomicOr(&b{0}[e >> {1}u], (v & {4}u) << sh);\n}}\n",
          b, per == 2 ? 1 : 2, bits, per - 1, bits == 16 ? "0xffff" : "0xff");
    }
    s += fmt::format(
        "@group(0) @binding({}) var<storage, read> uniforms: array<vec2<u32>>;\n"
        "@group(0) @binding({}) var<storage, read> rows: array<vec2<i32>>;\n"
        "@group(0) @binding({}) var<storage, read> chunks: array<vec2<i32>>;\n"
        "@group(0) @binding({}) var<storage, read_write> partials: array<vec2<u32>>;\n"
        "@group(0) @binding({}) var<uniform> args: vec4<i32>;\n",
        B, B + 1, B + 2, B + 3, B + 4);
    if (!constant_tables(plan).empty())
      s += fmt::format("@group(0) @binding({}) var<storage, read> optjit_tables: array<u32>;\n",
                       B + 5);
    s += R"(fn OPTJIT_F32_BITS(x: f32) -> u32 { return bitcast<u32>(x); }
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
)";
    return s;
  }
  // WGSL lets `a / b` be 2.5 ulp off and sqrt inherit inverseSqrt's error, lets a product be
  // fused into the sum it feeds, and lets its `fma` be a product and a sum (lavapipe's is);
  // NVIDIA's Vulkan driver divides and takes roots inexactly (an H200, 2026-11-26: AdamW's and
  // the quantizers' bits parted from the CPU's by an ulp). What the language does promise: +, -
  // and * of f32 rounded correctly. So, unless the adapter's own division and root round
  // correctly (F32Division::hardware: WebgpuDevice probes it, lavapipe's do; the correction
  // costs 1.7x on lavapipe's clip + AdamW step), optjit_div and optjit_sqrt take the hardware's
  // result on the operands' significands (in [1, 2), and [1, 4) for the root), move it by one
  // correction step (then within an ulp of the exact result), and round by the sign and size of
  // the residual x - q * y (x - s * s), computed exactly by one fused multiply-add (::fma, where
  // the adapter's is fused) or Dekker's product of 12-bit halves (::dekker): the correctly
  // rounded result, for normal operands and results (elsewhere the hardware's own; subnormals
  // may be flushed, as WGSL allows). optjit_opaque passes a value through an xor with args.w,
  // which is 0 (the launch never sets it) but unknown to the compiler, so that nothing is fused
  // or rewritten across it: every product (optjit_mul) and every step of the above.
  // OPTJIT_WGSL_INEXACT_ULPS moves the hardware's normal quotients and roots by that many ulps
  // (the probe's too), to test the correction on an adapter that divides exactly (lavapipe);
  // never set otherwise.
  // optjit_hw(x): the hardware's quotient or root x, moved OPTJIT_WGSL_INEXACT_ULPS ulps when
  // it is normal.
  static std::string hardware_hook() {
    int skew = 0;
    if (const char* e = std::getenv("OPTJIT_WGSL_INEXACT_ULPS")) skew = std::atoi(e);
    if (skew == 0) return "fn optjit_hw(x: f32) -> f32 { return x; }\n";
    return fmt::format(
        "fn optjit_hw(x: f32) -> f32 {{\n  let e = (bitcast<u32>(x) >> 23u) & 255u;\n"
        "  if (e < 2u || e > 253u) {{ return x; }}\n"
        "  return bitcast<f32>(bitcast<u32>(x) + {}u);\n}}\n",
        static_cast<uint32_t>(skew));
  }
  // optjit_fma(a, b, c): a * b + c rounded once. The adapter's own `fma` where it is fused
  // (F32Division::fma: the probe saw it fused); elsewhere built from what WGSL promises:
  // Dekker's exact product p + e (Veltkamp's 12-bit halves), c + p summed exactly as s + t
  // (Knuth's two-sum), t + e rounded to odd, and that added to s: correctly rounded (Boldo and
  // Melquiond, "Emulation of FMA and correctly rounded sums", IEEE TC 57(4), 2008) where no step
  // overflows or leaves the normal range. Outside it (zero, Inf or NaN operands, |a| or |b| at
  // or above 2^114, products below 2^-78 or at 2^126 and above, |c| at 2^126 and above) it is
  // the unfused c + a * b: the fused result where a product is zero, Inf or NaN, an ulp at most
  // from it for tiny products, and Inf where only the product overflows (2 * FLT_MAX - FLT_MAX).
  static std::string fma_helper(F32Division division) {
    if (division == F32Division::fma)
      return "fn optjit_fma(a: f32, b: f32, c: f32) -> f32 { return fma(a, b, c); }\n";
    return R"(fn optjit_exponent(x: f32) -> u32 { return (bitcast<u32>(x) >> 23u) & 255u; }
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
)";
  }
  std::string arithmetic_helpers(F32Division division) const override {
    std::string s =
        hardware_hook() +
        R"(fn optjit_opaque(x: f32) -> f32 { return bitcast<f32>(bitcast<u32>(x) ^ u32(args.w)); }
fn optjit_mul(a: f32, b: f32) -> f32 { return optjit_opaque(a * b); }
fn optjit_sub(a: f32, b: f32) -> f32 { return optjit_opaque(a - b); }
fn optjit_add(a: f32, b: f32) -> f32 { return optjit_opaque(a + b); }
)" + fma_helper(division);
    if (division == F32Division::hardware)
      return s + R"(fn optjit_div(a: f32, b: f32) -> f32 { return optjit_hw(a / b); }
fn optjit_sqrt(v: f32) -> f32 { return optjit_hw(sqrt(v)); }
)";
    // x - q * y, exactly where that is an f32 (q near x / y, all of them near 1): one fused
    // multiply-add, or Dekker's product of 12-bit halves (ys: y's, from optjit_split).
    if (division == F32Division::fma)
      s += R"(fn optjit_split(a: f32) -> vec2<f32> { return vec2<f32>(a, 0.0f); }
fn optjit_residual(x: f32, y: f32, ys: vec2<f32>, q: f32) -> f32 { return fma(-q, y, x); }
)";
    else
      s += R"(fn optjit_split(a: f32) -> vec2<f32> {
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
)";
    return s + R"(// The gaps above q (its ulp) and below it (half that at a power of two).
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
)";
  }

  std::string pass_signature(const plan::Plan&, size_t k, const GpuLaunch& launch,
                             bool) const override {
    const int block = launch.block;
    return fmt::format(
        "@compute @workgroup_size({})\n"
        "fn optjit_pass_{}(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: "
        "vec3<u32>,\n    @builtin(local_invocation_id) lid: vec3<u32>) {{\n"
        "  let nchunks: i32 = args.x;\n",
        block, k);
  }
  std::string buffer_pointers(const plan::Plan& plan,
                              const std::vector<uint32_t>& used) const override {
    // rows: per tensor, each buffer's first element in its arena, then the uniform row.
    const size_t stride = plan.buffers.size() + 1;
    std::string s = fmt::format("    let row: i32 = {} * t;\n", stride);
    s += fmt::format("    let ub: i32 = rows[row + {}].x;\n", stride - 1);
    for (uint32_t b : used) s += fmt::format("    let p{0}: i32 = rows[row + {0}].x + off;\n", b);
    return s;
  }
  std::string rounding_helpers(bool, bool) const override { return {}; }  // no f64 here
  // bf16 as the C languages round it; f16 by hand too (WGSL's own conversions need the
  // shader-f16 feature, and pack2x16float need not round to nearest even): IEEE's
  // round-to-nearest-even, overflow to infinity, subnormals, quiet NaNs.
  std::string bf16_helpers() const override {
    return R"(fn OPTJIT_BF16_TO_F32(x: u32) -> f32 { return bitcast<f32>(x << 16u); }
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
)";
  }
  // Stochastic rounding's 64-bit mixer on pairs of u32 (low, high): WGSL has no 64-bit
  // integers. The key and the first element arrive as the f64 bit patterns of their uniforms and
  // are converted to the integers exactly (whole numbers below 2^53).
  std::string sround_helpers() const override {
    auto u64 = [](uint64_t v) {
      return fmt::format("vec2<u32>(0x{:08x}u, 0x{:08x}u)", static_cast<uint32_t>(v),
                         static_cast<uint32_t>(v >> 32));
    };
    return fmt::format(R"(fn optjit_mul32(a: u32, b: u32) -> vec2<u32> {{
  let a0 = a & 0xffffu; let a1 = a >> 16u; let b0 = b & 0xffffu; let b1 = b >> 16u;
  let p00 = a0 * b0; let p01 = a0 * b1; let p10 = a1 * b0; let p11 = a1 * b1;
  let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
  return vec2<u32>((p00 & 0xffffu) | (mid << 16u), p11 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u));
}}
fn optjit_mul64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {{
  let p = optjit_mul32(a.x, b.x);
  return vec2<u32>(p.x, p.y + a.x * b.y + a.y * b.x);
}}
fn optjit_add64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {{
  let lo = a.x + b.x;
  return vec2<u32>(lo, a.y + b.y + select(0u, 1u, lo < a.x));
}}
fn optjit_shr64(a: vec2<u32>, s: u32) -> vec2<u32> {{  // 0 < s < 32
  return vec2<u32>((a.x >> s) | (a.y << (32u - s)), a.y >> s);
}}
fn optjit_sr_mix(z0: vec2<u32>) -> vec2<u32> {{
  var z = optjit_mul64(z0 ^ optjit_shr64(z0, 30u), {0});
  z = optjit_mul64(z ^ optjit_shr64(z, 27u), {1});
  return z ^ optjit_shr64(z, 31u);
}}
// sr_key: a whole number below 2^53 from its f64 bits, truncated (negative, 2^53 and above,
// Inf and NaN: 0).
fn optjit_sr_key(v: vec2<u32>) -> vec2<u32> {{
  if ((v.y & 0x80000000u) != 0u) {{ return vec2<u32>(0u, 0u); }}
  let e = i32((v.y >> 20u) & 0x7ffu) - 1075;
  if (e <= -53 || e > 0) {{ return vec2<u32>(0u, 0u); }}
  let m = vec2<u32>(v.x, (v.y & 0xfffffu) | 0x100000u);
  if (e == 0) {{ return m; }}  // 2^52 up to 2^53
  let s = u32(-e);
  if (s >= 32u) {{ return vec2<u32>(m.y >> (s - 32u), 0u); }}
  return optjit_shr64(m, s);
}}
fn optjit_sround(f: f32, key: vec2<u32>, first: vec2<u32>, e: i32, stream: u32) -> f32 {{
  let s = optjit_sr_mix(optjit_sr_key(key) ^ vec2<u32>(0u, stream << 24u));
  let r = optjit_sr_mix(optjit_add64(optjit_add64(s, optjit_sr_key(first)),
                                     vec2<u32>(u32(e), 0u))).x & 0xffffu;
  let bits = bitcast<u32>(f);
  if ((bits & 0x7f800000u) == 0x7f800000u) {{ return f; }}
  return bitcast<f32>((bits + r) & 0xffff0000u);
}}
)",
                       u64(ir::kSrMul1), u64(ir::kSrMul2));
  }
  Expected<std::string> sround_call(const std::string& x, const F64Operand& key,
                                    const F64Operand& first, const std::string& e,
                                    uint32_t stream) const override {
    if (key.uniform < 0 || first.uniform < 0)
      return make_error(
          "the webgpu backend takes a stochastic rounding key and first element only from the "
          "host");
    return fmt::format("optjit_sround({}, uniforms[ub + {}], uniforms[ub + {}], {}, {}u)", x,
                       key.uniform, first.uniform, e, stream);
  }
  // A block-quantized buffer's codes live at the start of its tensor's region of the f32 arena,
  // read as bytes of its words (optjit_code_b<b>, from the preamble) and written a word at a
  // time: q<b> is the chunk's first code byte, s<b> the tensor's first scale in buffer b + 1
  // (-1 when it has none).
  std::string quant_pointers(const plan::Plan& plan, uint32_t b) const override {
    return fmt::format(
        "    let q{0}: i32 = 4 * rows[row + {0}].x + {2};\n"
        "    let s{0}: i32 = rows[row + {1}].x;\n",
        b, b + 1, code_offset(plan, b));
  }
  std::string no_scales(uint32_t b) const override {
    return fmt::format("rows[row + {}].x < 0", b + 1);
  }
  std::string code_byte(uint32_t b, const std::string& ix) const override {
    return fmt::format("optjit_code_b{0}(q{0} + ({1}))", b, ix);
  }
  std::string scale_at(uint32_t b, const std::string& blk) const override {
    return fmt::format("b{}[s{} + {}]", b + 1, b, blk);
  }
  int code_unit() const override { return 4; }
  std::string store_codes(uint32_t b, const std::string& ix,
                          const std::string& unit) const override {
    return fmt::format("b{0}[(q{0} + ({1})) >> 2u] = bitcast<f32>({2});", b, ix, unit);
  }
  const char* constant() const override { return "const "; }
  std::string const_table(const std::string& name, const std::vector<uint32_t>&,
                          size_t at) const override {
    return fmt::format("const {}: u32 = {}u;\n", name, at);
  }
  std::string table_at(const std::string& name, const std::string& ix) const override {
    return fmt::format("optjit_tables[{} + u32({})]", name, ix);
  }
  std::string function(const std::string& ret, const std::string& name,
                       const std::vector<std::pair<std::string, std::string>>& params,
                       const std::string& body) const override {
    std::string p;
    for (const auto& [type, n] : params) p += (p.empty() ? "" : ", ") + n + ": " + type;
    return fmt::format("fn {}({}) -> {} {{\n{}}}\n", name, p, ret, body);
  }
  std::string vec_type(DType st, int w) const override {
    // WGSL's vectors stop at 4 lanes; wider ones are arrays (lanes index both alike).
    if (w == 1) return storage_type(st);
    return w <= 4 ? fmt::format("vec{}<{}>", w, storage_type(st))
                  : fmt::format("array<{}, {}>", storage_type(st), w);
  }
  // Vectors are built from scalar loads (a storage buffer has one element type).
  std::string load(uint32_t b, DType st, int w, const std::string& ix) const override {
    auto one = [&](const std::string& e) {
      if (st == DType::b1) return fmt::format("(optjit_ld_b{}({}) != 0u)", b, e);
      return packed(st) ? fmt::format("optjit_ld_b{}({})", b, e) : fmt::format("b{}[{}]", b, e);
    };
    if (w == 1) return one(fmt::format("p{} + {}", b, ix));
    std::string s = vec_type(st, w) + "(";
    for (int l = 0; l < w; ++l)
      s += (l == 0 ? "" : ", ") + one(fmt::format("p{} + ({}) * {} + {}", b, ix, w, l));
    return s + ")";
  }
  std::string store(uint32_t b, DType st, int w, const std::string& ix) const override {
    auto one = [&](const std::string& e, const std::string& v) {
      if (st == DType::b1) return fmt::format("optjit_st_b{}({}, select(0u, 1u, {}));", b, e, v);
      return packed(st) ? fmt::format("optjit_st_b{}({}, {});", b, e, v)
                        : fmt::format("b{}[{}] = {};", b, e, v);
    };
    if (w == 1) return one(fmt::format("p{} + {}", b, ix), fmt::format("S{}", b));
    auto at = [&](int l) { return fmt::format("p{} + ({}) * {} + {}", b, ix, w, l); };
    auto lane_of = [&](int l) { return fmt::format("S{}[{}]", b, l); };
    std::string s;
    if (narrow(st) == 16) {
      // Pairs that fill a word (the element index even: arenas and chunks are aligned, a
      // caller's buffer may not be) are one plain store, not two read-modify-writes.
      for (int l = 0; l < w; l += 2)
        s += fmt::format(
            "{}if ((({}) & 1) == 0) {{ atomicStore(&b{}[({}) >> 1u], ({} & 0xffffu) | ({} << "
            "16u)); }} else {{ {} {} }}",
            l == 0 ? "" : " ", at(l), b, at(l), lane_of(l), lane_of(l + 1), one(at(l), lane_of(l)),
            one(at(l + 1), lane_of(l + 1)));
      return s;
    }
    for (int l = 0; l < w; ++l) s += (l == 0 ? "" : " ") + one(at(l), lane_of(l));
    return s;
  }
  std::string lane(const std::string& var, int l, int w) const override {
    return w == 1 ? var : fmt::format("{}[{}]", var, l);
  }
  bool half_loads_convert() const override { return false; }
};

}  // namespace

const Lang& Lang::of(CLanguage language) {
  static const Cuda cuda;
  static const Opencl opencl;
  static const Wgsl wgsl;
  switch (language) {
    case CLanguage::cuda:
      return cuda;
    case CLanguage::wgsl:
      return wgsl;
    default:
      return opencl;
  }
}

std::string float_math(const Lang& L, ir::Op op, DType t, const std::vector<std::string>& a) {
  using ir::Op;
  const std::string one = literal(1.0, t), zero = literal(0.0, t);
  auto fn = [&](const char* name) { return fmt::format("{}({})", L.math(name, t), a[0]); };
  switch (op) {
    case Op::Neg:
      return "-" + a[0];
    case Op::Abs:
      return fn("fabs");
    case Op::Sign:
      return L.select(
          fmt::format("isnan({})", a[0]), a[0],
          "(" +
              L.select(fmt::format("{} > {}", a[0], zero), one,
                       "(" + L.select(fmt::format("{} < {}", a[0], zero), "-" + one, zero) + ")") +
              ")");
    case Op::Sqrt:
      return fn("sqrt");
    case Op::Rsqrt:
      return L.div(one, fmt::format("{}({})", L.math("sqrt", t), a[0]));
    case Op::Exp:
      return fn("exp");
    case Op::Log:
      return fn("log");
    case Op::Floor:
      return fn("floor");
    case Op::Cos:
      return fn("cos");
    case Op::Hi16:  // f32 only (the verifier checks)
      return fmt::format("OPTJIT_BITS_F32(OPTJIT_F32_BITS({}) & 0xffff0000u)", a[0]);
    case Op::Lo16:
      return L.cast(L.value_type(DType::f32), fmt::format("(OPTJIT_F32_BITS({}) & 0xffffu)", a[0]));
    case Op::Join16:
      return fmt::format("OPTJIT_BITS_F32((OPTJIT_F32_BITS({}) & 0xffff0000u) | {})", a[0],
                         L.u16_of(a[1], DType::f32));
    case Op::Pow:
      return fmt::format("{}({}, {})", L.math("pow", t), a[0], a[1]);
    case Op::Add:
      return a[0] + " + " + a[1];
    case Op::Sub:
      return a[0] + " - " + a[1];
    case Op::Mul:
      return L.mul(a[0], a[1]);
    case Op::Div:
      return L.div(a[0], a[1]);
    case Op::Fma:
      return fmt::format("{}({}, {}, {})", L.math("fma", t), a[0], a[1], a[2]);
    case Op::Min:
    case Op::Max:
      // NaN wins (torch's minimum and maximum propagate it).
      return L.select(
          fmt::format("(isnan({0}) || isnan({1}))", a[0], a[1]), fmt::format("{} + {}", a[0], a[1]),
          "(" +
              L.select(fmt::format("{} {} {}", a[0], op == Op::Max ? ">" : "<", a[1]), a[0], a[1]) +
              ")");
    default:
      return "";
  }
}

const char* comparison(ir::Op op) {
  switch (op) {
    case ir::Op::Lt:
      return "<";
    case ir::Op::Le:
      return "<=";
    case ir::Op::Gt:
      return ">";
    case ir::Op::Ge:
      return ">=";
    case ir::Op::Eq:
      return "==";
    case ir::Op::Ne:
      return "!=";
    default:
      return nullptr;
  }
}

}  // namespace optjit::codegen::detail

namespace optjit::codegen {

const char* to_string(F32Division d) {
  switch (d) {
    case F32Division::hardware:
      return "hardware";
    case F32Division::fma:
      return "fma";
    case F32Division::dekker:
      return "dekker";
  }
  return "?";
}

std::string wgsl_rounding_probe(F32Division division) {
  return detail::Lang::of(CLanguage::wgsl).arithmetic_helpers(division) +
         R"(@group(0) @binding(0) var<storage, read_write> io: array<f32>;
@group(0) @binding(1) var<uniform> args: vec4<i32>;
@compute @workgroup_size(64)
fn optjit_probe(@builtin(global_invocation_id) g: vec3<u32>) {
  let i = 2u * g.x;
  if (i + 1u >= arrayLength(&io)) { return; }
  let x = io[i];
  let y = io[i + 1u];
  io[i] = optjit_div(x, y);
  io[i + 1u] = optjit_sqrt(x);
}
)";
}

}  // namespace optjit::codegen
