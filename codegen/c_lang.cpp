// The C-family languages: CUDA C and OpenCL C as entries of the table in c_lang.h.
#include "codegen/c_lang.h"

#include <algorithm>

#include "ir/quant.h"

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

namespace {

// Where a chunk's codes start in its tensor's codes: byte `off`, or off / 2 for 4-bit codes
// (two to a byte; chunk offsets are even).
std::string code_offset(const plan::Plan& plan, uint32_t b) {
  return ir::info(plan.buffers[b].quant).bits == 4 ? "(off >> 1)" : "off";
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
    }
    return s;
  }
  std::string pass_signature(const plan::Plan&, size_t k, int block, bool ctl) const override {
    return fmt::format(
        "{} __launch_bounds__({}, {}) optjit_pass_{}(const OptjitRow* __restrict__ rows,\n"
        "    const long long* __restrict__ chunks, const long long nchunks, double* __restrict__ "
        "partials{}) {{\n",
        // At least 512 threads resident per SM, the floor the tuner's occupancy pruning keeps
        // (a quarter of sm_80's and sm_90's 2048). Without a minimum, ptxas capped clip+AdamW
        // at 48 registers on sm_80 and spilled; with 1024, 8-wide vectors spilled at 64.
        kernel(), block, std::max(1, 512 / block), k,
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
  const char* constant() const override { return "__constant__ "; }
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
  std::string pass_signature(const plan::Plan& plan, size_t k, int, bool ctl) const override {
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
};

}  // namespace

const Lang& Lang::of(CLanguage language) {
  static const Cuda cuda;
  static const Opencl opencl;
  return language == CLanguage::cuda ? static_cast<const Lang&>(cuda) : opencl;
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
      return fmt::format("isnan({0}) ? {0} : ({0} > {1} ? {2} : ({0} < {1} ? -{2} : {1}))", a[0],
                         zero, one);
    case Op::Sqrt:
      return fn("sqrt");
    case Op::Rsqrt:
      return fmt::format("{} / {}({})", one, L.math("sqrt", t), a[0]);
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
      return fmt::format("(float)(OPTJIT_F32_BITS({}) & 0xffffu)", a[0]);
    case Op::Join16:
      return fmt::format("OPTJIT_BITS_F32((OPTJIT_F32_BITS({}) & 0xffff0000u) | ({}){})", a[0],
                         L.u32(), a[1]);
    case Op::Pow:
      return fmt::format("{}({}, {})", L.math("pow", t), a[0], a[1]);
    case Op::Add:
      return a[0] + " + " + a[1];
    case Op::Sub:
      return a[0] + " - " + a[1];
    case Op::Mul:
      return a[0] + " * " + a[1];
    case Op::Div:
      return a[0] + " / " + a[1];
    case Op::Min:
    case Op::Max:
      // NaN wins (torch's minimum and maximum propagate it).
      return fmt::format("(isnan({0}) || isnan({1})) ? {0} + {1} : ({0} {2} {1} ? {0} : {1})", a[0],
                         a[1], op == Op::Max ? ">" : "<");
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
