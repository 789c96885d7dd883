// The C-family language table: everything the emitters (c_emitter.cpp for pass kernels,
// c_device_step.cpp for the device step) need to know about a language, behind one interface,
// so that the emitters have no per-language branches and a new language is one more entry
// (c_lang.cpp). Internal to codegen/.
#pragma once

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "codegen/c_emitter.h"

namespace optjit::codegen::detail {

class Lang {
 public:
  virtual ~Lang() = default;
  /// The entry for a language.
  static const Lang& of(CLanguage language);

  virtual const char* name() const = 0;  // "cuda", "opencl"
  // Spelling.
  virtual const char* kernel() const = 0;     // a kernel's return type and qualifiers
  virtual const char* device_fn() const = 0;  // a helper function's qualifiers
  virtual const char* global() const = 0;     // a global-memory pointer's qualifier
  virtual const char* local() const = 0;      // a work-group-shared array's qualifier
  virtual const char* i64() const = 0;
  virtual const char* i32() const { return "int"; }
  virtual const char* u32() const = 0;
  virtual const char* u64() const = 0;
  virtual const char* group_id() const = 0;
  virtual const char* groups() const = 0;
  virtual const char* local_id() const = 0;
  virtual const char* local_size() const = 0;
  virtual const char* global_id() const = 0;
  virtual const char* barrier() const = 0;
  /// A math function by name for a value type (OpenCL's are overloaded; CUDA's float ones end
  /// in f).
  virtual std::string math(const char* fn, DType t) const = 0;
  virtual std::string storage_type(DType t) const = 0;
  /// f32 `a * b` and `a / b` rounded once, as IEEE rounds them, where the language's own
  /// operators may do otherwise (WGSL: its `/` is good to 2.5 ulp, and a product may be fused
  /// into the sum it feeds); sqrt through math("sqrt") likewise. C's operators (NVRTC with
  /// --fmad=false --prec-div=true, OpenCL with -cl-fp32-correctly-rounded-divide-sqrt and
  /// FP_CONTRACT OFF) already are.
  virtual std::string mul(const std::string& a, const std::string& b) const {
    return a + " * " + b;
  }
  virtual std::string div(const std::string& a, const std::string& b) const {
    return a + " / " + b;
  }
  /// f32 `a + b` rounded as written, not rewritten with what uses it: NVIDIA's Vulkan driver
  /// compiles WGSL's (x + 1.0f) * 32767.5f as x * 32767.5f + 32767.5f rounded once (an H200,
  /// 2026-11-28: 8-bit codes a cell off the CPU's where x + 1 rounds). C's compilers (no
  /// contraction, no reassociation) keep it as written.
  virtual std::string add(const std::string& a, const std::string& b) const {
    return "(" + a + " + " + b + ")";
  }

  /// What every kernel source starts with: extensions, bit casts (OPTJIT_F32_BITS, ...), f16
  /// conversions (OPTJIT_F16_TO_F32, OPTJIT_F32_TO_F16), vector types for `vec`.
  virtual std::string preamble(const plan::Plan& plan, int vec) const = 0;
  /// Pass k's signature up to and including its opening brace (codegen/c_emitter.h gives each
  /// language's arguments), for the launch's blocks (CUDA: and its resident threads per SM);
  /// `ctl` with the device step.
  virtual std::string pass_signature(const plan::Plan& plan, size_t k, const GpuLaunch& launch,
                                     bool ctl) const = 0;
  /// Inside the chunk loop (tensor t, offset off): `u`, the tensor's uniform row, and p<b>, the
  /// chunk's first element of each buffer b in `used`.
  virtual std::string buffer_pointers(const plan::Plan& plan,
                                      const std::vector<uint32_t>& used) const = 0;
  /// Vectors of w elements of a storage type: the type a load gives, a load of element (or
  /// vector) `ix` of p<b>, a store of S<b> there, and one lane of a vector variable.
  virtual std::string vec_type(DType storage, int w) const = 0;
  virtual std::string load(uint32_t b, DType storage, int w, const std::string& ix) const = 0;
  virtual std::string store(uint32_t b, DType storage, int w, const std::string& ix) const = 0;
  virtual std::string lane(const std::string& var, int lane, int w) const = 0;
  /// Block-quantized buffer b (ir/quant.h), inside the chunk loop: q<b>, the chunk's first code
  /// (bytes), and s<b>, the tensor's scales; and the condition under which the tensor has no
  /// scales (too small to quantize: its state is plain f32 in p<b>).
  virtual std::string quant_pointers(const plan::Plan& plan, uint32_t b) const = 0;
  virtual std::string no_scales(uint32_t b) const = 0;
  /// Buffer b's code byte `ix` past q<b>, as an unsigned value; and block `blk`'s scale in s<b>
  /// (an lvalue: the block loop reads and writes it).
  virtual std::string code_byte(uint32_t b, const std::string& ix) const {
    return fmt::format("q{}[{}]", b, ix);
  }
  virtual std::string scale_at(uint32_t b, const std::string& blk) const {
    return fmt::format("s{}[{}]", b, blk);
  }
  /// Codes are written code_unit() bytes at a time by one invocation: a byte in C, a word in
  /// WGSL (which has no byte stores). `unit` holds them, the first byte lowest; byte `ix` past
  /// q<b> is a multiple of code_unit().
  virtual int code_unit() const { return 1; }
  virtual std::string store_codes(uint32_t b, const std::string& ix,
                                  const std::string& unit) const {
    return fmt::format("q{}[{}] = {};", b, ix, unit);
  }
  /// `bytes` (1, 2 or 4) code bytes of buffer b from byte `ix` past q<b> (a multiple of
  /// `bytes`) as one unsigned value, the first byte lowest, and a store of `value` there (the
  /// vectorized quantized path of CUDA's warps).
  virtual std::string code_word(uint32_t b, const std::string& ix, int bytes) const;
  virtual std::string store_code_word(uint32_t b, const std::string& ix, int bytes,
                                      const std::string& value) const;
  /// The qualifier of a constant table at program scope.
  virtual const char* constant() const = 0;
  /// Statements that leave the largest of every invocation's u32 `value` in `shared`[0] for
  /// the whole work-group of `group` invocations (`shared` has `group` entries), after a
  /// barrier. The default halves the active half of the array per barrier; CUDA reduces each
  /// warp with shuffles first (two barriers in all).
  virtual std::string group_max_u32(const std::string& shared, const std::string& value,
                                    int group) const;
  /// u32 `value` of the invocation whose index in its aligned run of 32 (a CUDA warp) is this
  /// one's xor `mask`, read by every invocation of the run at once (all 32 must reach it); empty
  /// where the language has no such exchange. With it the block loop gives each warp a
  /// quantization block of its own and reduces the block's absmax in registers, with no barrier
  /// (c_emitter.cpp's warp_block_loop); without it the work-group shares one block at a time.
  virtual std::string warp_xor_u32(const std::string& /*value*/, int /*mask*/) const { return {}; }
  /// A statement asking the cache to fetch the line that holds the byte at `address` (a global
  /// pointer) into L2, a hint with no result (GpuLaunch::ahead); empty where the language has
  /// none. prefetch_l2_helper: what it calls, for the preamble.
  virtual std::string prefetch_l2(const std::string& /*address*/) const { return {}; }
  virtual std::string prefetch_l2_helper() const { return {}; }
  /// optjit_fdiv(a, b, ok) and optjit_fsqrt(x, ok): f32 a / b and sqrt(x) without a branch
  /// (GpuLaunch::interleave), the same bits as the language's own where `ok` stays true; they
  /// clear it where they may not be. Empty where the language has none.
  virtual std::string branch_free_helpers() const { return {}; }
  /// Asynchronous copies from global into work-group-shared memory (GpuLaunch::stage), each
  /// thread's in groups: optjit_cp_async16(dst, src) and optjit_cp_async4(dst, src) copy 16
  /// and 4 bytes (both addresses aligned to that), optjit_cp_commit() closes the thread's
  /// current group, optjit_cp_wait<N>() returns once all but its newest N groups have arrived,
  /// visible to the thread itself (to the warp after a __syncwarp). Empty where the language
  /// has none.
  virtual std::string async_copy_helpers() const { return {}; }
  /// Inside the chunk loop, with c2 (< nchunks) the chunk this work-group takes next: its
  /// fields t2, off2 and len2, and for each buffer b of `bufs` a pointer at its first element
  /// (np<b>, or nq<b> at the first code of a quantized buffer), each statement after `in`; so
  /// that the L2 prefetch can reach into the next chunk. Empty where prefetch_l2 is.
  virtual std::string next_chunk(const plan::Plan& /*plan*/, const std::vector<uint32_t>& /*bufs*/,
                                 const std::string& /*in*/) const {
    return {};
  }
  /// A u32 array of n entries in work-group-shared memory at program scope, which helper
  /// functions can read (GpuLaunch::shared_tables); empty where the language has none (OpenCL
  /// and WGSL: their shared arrays belong to one kernel).
  virtual std::string module_shared_u32(const std::string& /*name*/, size_t /*n*/) const {
    return {};
  }
  /// Constant table `name` (codegen::constant_tables) at program scope: an array of u32 with
  /// `values` in C; in WGSL its offset `at` in the tables' storage buffer. table_at reads entry
  /// `ix` (an unsigned value).
  virtual std::string const_table(const std::string& name, const std::vector<uint32_t>& values,
                                  size_t at) const;
  virtual std::string table_at(const std::string& name, const std::string& ix) const {
    return fmt::format("{}[{}]", name, ix);
  }
  /// A helper function: its return type, name, parameters as (type, name), and body.
  virtual std::string function(const std::string& ret, const std::string& name,
                               const std::vector<std::pair<std::string, std::string>>& params,
                               const std::string& body) const {
    std::string p;
    for (const auto& [type, n] : params) p += (p.empty() ? "" : ", ") + type + " " + n;
    return fmt::format("{}{} {}({}) {{\n{}}}\n", device_fn(), ret, name, p, body);
  }
  /// Whether loads and stores of f16 convert to and from float themselves (OpenCL's
  /// vload_half); otherwise the emitter converts with OPTJIT_F16_TO_F32 / OPTJIT_F32_TO_F16.
  virtual bool half_loads_convert() const = 0;

  // Syntax the C languages share and WGSL spells its own way (the defaults are C's).
  /// Why this language cannot run `plan` (a type or operation it lacks), or empty.
  virtual std::string unsupported(const plan::Plan&, bool /*device_step*/) const { return {}; }
  /// A value type's name: float, double, long, bool (WGSL: f32, i32, bool).
  virtual std::string value_type(DType t) const;
  /// The type of reduction accumulators and partials (double; WGSL has none: f32).
  virtual const char* wide() const { return "double"; }
  /// `name` bound once to `e`; a mutable variable, uninitialized when `init` is empty.
  virtual std::string let(const std::string& type, const std::string& name,
                          const std::string& e) const;
  virtual std::string var(const std::string& type, const std::string& name,
                          const std::string& init = {}) const;
  /// The head of a counted loop: for (type v = init; cond; step).
  virtual std::string for_head(const std::string& type, const std::string& v,
                               const std::string& init, const std::string& cond,
                               const std::string& step) const;
  virtual std::string cast(const std::string& type, const std::string& x) const;
  /// c ? t : f (both sides are evaluated where the language has no conditional operator).
  virtual std::string select(const std::string& c, const std::string& t,
                             const std::string& f) const;
  /// A work-group-shared array: declared in the kernel (C) or at module scope (WGSL, where
  /// names must then be unique across the module's kernels: `shared_name`).
  virtual std::string shared(const std::string& type, const std::string& name, size_t n) const;
  virtual bool shared_at_module_scope() const { return false; }
  /// The chunk loop's first line: t, off, len of chunk c.
  virtual std::string chunk_fields() const;
  /// Pass uniform k of the tensor's row, as a value of type f64 (WGSL: already f32).
  virtual std::string uniform(uint32_t k) const;
  /// a op b ("<", "==", ...) on values of type t, false for NaN operands but true for "!=",
  /// as IEEE has it (WGSL compilers may assume no NaNs, so WGSL tests for them by their bits).
  virtual std::string compare(const char* op, const std::string& a, const std::string& b,
                              DType) const {
    return fmt::format("{} {} {}", a, op, b);
  }
  /// Whether f32 division by zero gives IEEE's infinity (0 / 0 NaN). WGSL's is an
  /// indeterminate value.
  virtual bool ieee_division_by_zero() const { return true; }
  /// f32 value x clamped to [-1, 1], NaN to -1 (ir::quant_lut_index's clamp). The default
  /// compares; C's fmin and fmax give NaN's other operand, so CUDA and OpenCL use them.
  virtual std::string unit_clamp(const std::string& x) const;
  /// Value x of type t (a float type or i64) as a u16's value, an unsigned 32-bit integer:
  /// truncated, saturated at 0 and 65535, NaN 0, as ir::round_to (a C conversion out of range
  /// is undefined). The comparisons keep NaN out, as compare() does.
  std::string u16_of(const std::string& x, DType t) const;
  /// Float value x of type t as an i64: truncated, saturated at kI64Limit (2^53), Inf and
  /// NaN 0, as ir::round_to. (WGSL has no i64.)
  std::string i64_of(const std::string& x, DType t) const;
  /// i64 values a op b (+, - or *) saturated at kI64Limit, as the reference's doubles: in
  /// f64, exact up to the limit and at or past it where the exact result is, then clamped.
  std::string i64_arithmetic(const std::string& a, char op, const std::string& b) const;
  /// The lookup table's cell of f32 value x (ir::quant_lut_index): (u32)((clamp(x) + 1) *
  /// 32767.5 + 0.5), clamp as unit_clamp. The default clamps first; CUDA clamps the cell.
  virtual std::string lut_cell(const std::string& x) const;
  /// Byte k (0 lowest) of u32 value `word`, as an unsigned value.
  virtual std::string byte_of(const std::string& word, int k) const {
    return fmt::format("(({} >> {}u) & 255u)", word, 8 * k);
  }
  /// An f64 operand that WGSL must read as its uniform's bits: the expression, and the index of
  /// its pass uniform (-1 when it is not one).
  struct F64Operand {
    std::string expr;
    int uniform = -1;
  };
  /// ir/stochastic_round.h: optjit_sround(f, key, first, e, stream) and its mixer, and a call of
  /// it for value `x` (f32), key `key`, the tensor's first element `first` (both whole f64
  /// values), element index `e` in the tensor, buffer `stream`.
  virtual std::string sround_helpers() const;
  virtual Expected<std::string> sround_call(const std::string& x, const F64Operand& key,
                                            const F64Operand& first, const std::string& e,
                                            uint32_t stream) const;
  /// OPTJIT_BF16_TO_F32(bits) and OPTJIT_BF16_BITS(f32), the latter rounding to nearest even.
  virtual std::string bf16_helpers() const;
  /// What `rounded` and f64 stores to f16 and bf16 need beyond bf16_helpers, where a plan has
  /// them: optjit_f32_odd, an f64 rounded to f32 by round-to-odd (`f64_odd`: an f64 value cast
  /// or stored to f16 or bf16), and a register's rounding to f16 where the language has none
  /// (`f16`: a cast to f16). Empty where nothing is needed.
  virtual std::string rounding_helpers(bool f64_odd, bool f16) const;
  /// Float value x (of type `from`) rounded to `to` (f16 or bf16), as an f32 value: the cast
  /// op, which rounds where the reference's does. An f64 goes through optjit_f32_odd, so that
  /// it rounds once, as the reference's; then half_rounded.
  std::string rounded(DType to, DType from, const std::string& x) const;
  /// f32 value f rounded to `to` (f16 or bf16), as an f32 value.
  virtual std::string half_rounded(DType to, const std::string& f) const;
  /// The functions mul(), div() and math("sqrt") call, if any, dividing as `division` says.
  virtual std::string arithmetic_helpers(F32Division /*division*/) const { return {}; }
  /// The local that holds pass uniform k ("u3"; WGSL's must not spell a type, as u32 does).
  virtual std::string uniform_name(uint32_t k) const { return fmt::format("u{}", k); }
  /// Writes partial `ix`, a value of type wide().
  virtual std::string store_partial(const std::string& ix, const std::string& value) const;
};

/// A constant of type t, exactly (hex floats for floats).
std::string literal(double x, DType t);

/// One C expression printer for the ops both emitters share, so the pass kernels (element
/// values) and the device step (the scalar program, in double) spell each op the same way:
/// a float math op (Neg ... Max, Min) on operands `a` of type t (f32 or f64), or empty when
/// `op` is not one.
std::string float_math(const Lang& L, ir::Op op, DType t, const std::vector<std::string>& a);
/// A comparison's C operator ("<", "<=", ">", ">=", "==", "!="), or null.
const char* comparison(ir::Op op);

/// The device-step kernels (DeviceStepLayout), appended to the pass kernels' source.
Expected<std::string> emit_device_step(const plan::Plan& plan, const Lang& L);

}  // namespace optjit::codegen::detail
