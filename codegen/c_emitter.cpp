// Algorithm: print a preamble (types, helpers) for the language, then for each pass a kernel:
//   for c in group, group + groups, ... < nchunks:
//     find the tensor's buffers and uniforms; zero the reduction accumulators
//     for i0 in local_id, local_id + block * items, ... < len / vec:   (coalesced)
//       load `items` vectors of every buffer the pass reads (i0, i0 + block, ...)
//       for each of them, for each lane: the pass body, one statement per instruction
//       (v<N> names, in a scope of their own); then store the vectors the pass writes
//     the elements past the last whole vector, the same way one at a time
//     tree-reduce each accumulator in local memory (fixed pairing), thread 0 writes partials
// Float constants are printed as hex floats, so every value survives the trip exactly.
#include "codegen/c_emitter.h"

#include "ir/stochastic_round.h"

#include "cache/kernel_cache.h"
#include "codegen/c_lang.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <span>

#include <xxhash.h>

namespace optjit::codegen {

std::string detail::literal(double x, DType t) {
  if (t == DType::b1) return x != 0 ? "true" : "false";
  if (t == DType::i64) return fmt::format("{}LL", static_cast<long long>(x));
  bool f = t != DType::f64;
  if (std::isnan(x))
    return f ? "OPTJIT_BITS_F32(0x7fc00000u)" : "OPTJIT_BITS_F64(0x7ff8000000000000ul)";
  if (std::isinf(x)) {
    const char* s = x > 0 ? "" : "-";
    return f ? fmt::format("{}OPTJIT_BITS_F32(0x7f800000u)", s)
             : fmt::format("{}OPTJIT_BITS_F64(0x7ff0000000000000ul)", s);
  }
  return fmt::format("{:a}{}", x, f ? "f" : "");
}

namespace {

using detail::Lang;
using detail::literal;
using ir::Op;
using ir::OpKind;

std::string preamble(const Lang& L, const plan::Plan& plan, int vec) {
  std::string s = L.preamble(plan, vec);
  s += L.bf16_helpers();
  // Block-quantized formats: the map, and the quantizer of ir/quant.h line for line: the
  // lookup table in its compact form (quant_lut_index, then CompactLut::code), f8_code, or the
  // thresholds of nearest_code.
  std::vector<ir::Quant> formats;
  for (const auto& buf : plan.buffers)
    if (buf.quant != ir::Quant::none &&
        std::find(formats.begin(), formats.end(), buf.quant) == formats.end())
      formats.push_back(buf.quant);
  for (ir::Quant q : formats) {
    const ir::QuantInfo& qi = ir::info(q);
    // The map as bit patterns (fp8's has NaNs, which no constant initializer spells).
    auto bit_patterns = [](std::span<const float> v) {
      std::string out;
      for (size_t k = 0; k < v.size(); ++k)
        out +=
            fmt::format("{}0x{:08x}u,", k % 8 == 0 ? "\n  " : " ", std::bit_cast<uint32_t>(v[k]));
      return out;
    };
    s += fmt::format("{0}{1} optjit_map_{2}[{3}] = {{{4}\n}};\n", L.constant(), L.u32(),
                     ir::to_string(q), qi.map.size(), bit_patterns(qi.map));
    if (qi.kind == ir::QuantKind::nearest) {
      s += fmt::format("{0}{1} optjit_thr_{2}[{3}] = {{{4}\n}};\n", L.constant(), L.u32(),
                       ir::to_string(q), qi.thresholds.size(), bit_patterns(qi.thresholds));
      s += fmt::format(
          "{0}{1} optjit_quantize_{2}(float y) {{\n"
          "  {1} c = 0;\n"
          "  for (int k = 0; k < {3}; ++k) c += y >= OPTJIT_BITS_F32(optjit_thr_{2}[k]) ? 1u : "
          "0u;\n"
          "  return c;\n}}\n",
          L.device_fn(), L.u32(), ir::to_string(q), qi.thresholds.size());
      continue;
    }
    if (qi.kind == ir::QuantKind::fp8) {
      if (s.find("optjit_f8_code") == std::string::npos)  // once for every fp8 format
        s += fmt::format(
            "{0}{1} optjit_f8_code(float y) {{\n"
            "  {1} bits = OPTJIT_F32_BITS(y);\n"
            "  const {1} sign = bits & 0x80000000u;\n"
            "  bits ^= sign;\n"
            "  {1} r;\n"
            "  if (bits >= 0x43e80000u) r = 0x7fu;\n"
            "  else if (bits < 0x3c800000u)\n"
            "    r = OPTJIT_F32_BITS(OPTJIT_BITS_F32(bits) + OPTJIT_BITS_F32(0x46800000u)) - "
            "0x46800000u;\n"
            "  else r = (bits + 0xc407ffffu + ((bits >> 20) & 1u)) >> 20;\n"
            "  return (r & 255u) | (sign >> 24);\n}}\n",
            L.device_fn(), L.u32());
      continue;
    }
    const ir::CompactLut& c = *qi.compact;
    std::string lut;
    for (size_t k = 0; k < c.entries.size(); ++k)
      lut += fmt::format("{}{}u,", k % 16 == 0 ? "\n  " : " ", c.entries[k]);
    s += fmt::format("{0}{1} optjit_lut_{2}[{3}] = {{{4}\n}};\n", L.constant(), L.u32(),
                     ir::to_string(q), c.entries.size(), lut);
    s += fmt::format(
        "{0}{1} optjit_quantize_{2}(float y) {{\n"
        "  y = y >= -1.0f ? (y > 1.0f ? 1.0f : y) : -1.0f;\n"
        "  const {1} i = ({1})(((y + 1.0f) * 0.5f) * 65535.0f + 0.5f);\n"
        "  const {1} b = i >> 5;\n"
        "  const {1} j = b < {3}u ? b : (b < {4}u ? i - {5}u : b + {6}u);\n"
        "  const {1} e = optjit_lut_{2}[j];\n"
        "  return (e & 255u) + ((i & 31u) >= (e >> 8) ? 1u : 0u);\n}}\n",
        L.device_fn(), L.u32(), ir::to_string(q), c.near_lo, c.near_hi, 32 * c.near_lo - c.near_lo,
        c.near_lo + 32 * (c.near_hi - c.near_lo) - c.near_hi);
  }
  bool sround = false;
  for (const auto& pass : plan.passes)
    for (const auto& in : pass.body.insts) sround = sround || in.op == Op::SRound;
  if (sround) s += L.sround_helpers();
  return s;
}

class KernelWriter {
 public:
  KernelWriter(const plan::Plan& plan, size_t k, const Lang& L, const CEmitOptions& o)
      : plan_(plan),
        pass_(plan.passes[k]),
        k_(k),
        L_(L),
        block_(o.launch.block),
        items_(o.launch.items),
        vec_(o.launch.vec),
        device_step_(o.device_step) {}

  Expected<std::string> write() {
    std::string s;
    std::vector<uint32_t> used;
    std::vector<bool> stored(plan_.buffers.size(), false);
    for (const auto& in : pass_.body.insts) {
      if (in.op != Op::Load && in.op != Op::Store) continue;
      if (std::find(used.begin(), used.end(), in.attr) == used.end()) used.push_back(in.attr);
      if (in.op == Op::Store) stored[in.attr] = true;
      // Loads are gathered before the stores of a loop trip, which the planner guarantees.
      if (in.op == Op::Load && stored[in.attr])
        return make_error("pass {} loads buffer {} after storing it", k_, in.attr);
    }
    std::sort(used.begin(), used.end());
    for (uint32_t b : used) {
      if (stored[b]) stores_.push_back(b);
      for (const auto& in : pass_.body.insts)
        if (in.op == Op::Load && in.attr == b) {
          loads_.push_back(b);
          break;
        }
    }
    const size_t R = pass_.reductions.size();
    s += L_.pass_signature(plan_, k_, block_, device_step_);
    if (device_step_)
      s += "  if (ctl[1] != 0.0) return;  // a skip_if fired: the step writes nothing\n";
    for (size_t r = 0; r < R; ++r)
      shared(acc_type(pass_.body.at(red_inst(r)).op, red_arg_type(r)), red(r), block_);
    for (uint32_t b : used)
      if (plan_.buffers[b].quant != ir::Quant::none) quant_.push_back(b);
    if (!quant_.empty()) {
      for (uint32_t b : stores_)
        if (quantized(b)) shared("float", fmt::format("qv{}", b), ir::quant_block(plan_.buffers));
      shared(L_.u32(), "qm", block_);
    }
    s += shared_;
    s += fmt::format("  {} {{\n", L_.for_head(L_.i64(), "c", L_.group_id(), "c < nchunks",
                                              fmt::format("c += {}", L_.groups())));
    s += "    " + L_.chunk_fields() + "\n";
    s += L_.buffer_pointers(plan_, used);
    for (const auto& in : pass_.body.insts)
      if (in.op == Op::Uniform)
        s += "    " +
             L_.let(L_.value_type(in.type), L_.uniform_name(in.attr),
                    convert(L_.uniform(in.attr), DType::f64, in.type)) +
             "\n";
    for (size_t r = 0; r < R; ++r)
      s += "    " +
           L_.var(acc_type(pass_.body.at(red_inst(r)).op, red_arg_type(r)), fmt::format("acc{}", r),
                  "0") +
           "\n";
    if (!quant_.empty()) {
      for (uint32_t b : quant_) s += L_.quant_pointers(plan_, b);
      auto blocks = block_loop();
      if (!blocks) return blocks.error();
      s += fmt::format("    if (!({})) {{\n", L_.no_scales(quant_[0])) + *blocks + "    } else {\n";
    }
    if (vec_ > 1) {
      // Whole vectors (chunks and tensors start aligned), then the tail element by element.
      s += "    " + L_.let(L_.i64(), "nv", fmt::format("len / {}", vec_)) + "\n";
      auto main = loop(vec_, items_, "0", "nv");
      if (!main) return main.error();
      s += *main;
      auto tail = loop(1, 1, fmt::format("nv * {}", vec_), "len");
      if (!tail) return tail.error();
      s += *tail;
    } else {
      auto main = loop(1, items_, "0", "len");
      if (!main) return main.error();
      s += *main;
    }
    if (!quant_.empty()) s += "    }\n";
    if (R > 0) {
      const std::string I = L_.i32();
      s += "    " + L_.let(I, "l", L_.cast(I, L_.local_id())) + "\n";
      for (size_t q = 0; q < R; ++q) s += fmt::format("    {}[l] = acc{};\n", red(q), q);
      s += fmt::format("    {};\n", L_.barrier());
      s += fmt::format("    {} {{\n      if (l < w) {{\n",
                       L_.for_head(I, "w", std::to_string(block_ / 2), "w > 0", "w >>= 1"));
      for (size_t q = 0; q < R; ++q) s += "        " + combine(q) + "\n";
      s += fmt::format("      }}\n      {};\n    }}\n", L_.barrier());
      s += "    if (l == 0) {\n";
      for (size_t q = 0; q < R; ++q)
        s += "      " + L_.store_partial(fmt::format("c * {} + {}", R, q), finish(q)) + "\n";
      s += fmt::format("    }}\n    {};\n", L_.barrier());
    }
    s += "  }\n}\n";
    return module_scope_ + s;
  }

  // Work-group-shared arrays: in the kernel, or at module scope under names of this kernel's.
  void shared(const std::string& type, const std::string& name, size_t n) {
    if (L_.shared_at_module_scope())
      module_scope_ += L_.shared(type, name, n) + "\n";
    else
      shared_ += "  " + L_.shared(type, name, n) + "\n";
  }
  std::string red(size_t r) const {
    return L_.shared_at_module_scope() ? fmt::format("red{}_{}", r, k_) : fmt::format("red{}", r);
  }

 private:
  // One loop over [first, end) in units of w elements: each thread takes `items` vectors a
  // block apart per trip, loads all of them, then computes and stores each one, lane by lane.
  Expected<std::string> loop(int w, int items, const std::string& first, const std::string& end) {
    const std::string I = L_.i64();
    std::string s = fmt::format(
        "    {} {{\n",
        L_.for_head(I, "i0", (first == "0" ? "" : first + " + ") + L_.local_id(),
                    fmt::format("i0 < {}", end), fmt::format("i0 += {}", block_ * items)));
    // Loads: the first vector is always in range; the others are guarded.
    for (uint32_t b : loads_)
      s += "      " + L_.let(vec_type(b, w), fmt::format("L{}_0", b), load(b, w, "i0")) + "\n";
    for (int j = 1; j < items; ++j) {
      s += "      " + L_.let(I, fmt::format("i{}", j), fmt::format("i0 + {}", j * block_)) + "\n";
      for (uint32_t b : loads_)
        s += "      " + L_.var(vec_type(b, w), fmt::format("L{}_{}", b, j)) + "\n";
      if (loads_.empty()) continue;
      s += fmt::format("      if (i{} < {}) {{\n", j, end);
      for (uint32_t b : loads_)
        s += fmt::format("        L{}_{} = {};\n", b, j, load(b, w, fmt::format("i{}", j)));
      s += "      }\n";
    }
    // Then the math and the stores, vector by vector and lane by lane.
    for (int j = 0; j < items; ++j) {
      const std::string ix = j == 0 ? "i0" : fmt::format("i{}", j);
      s += j == 0 ? "      {\n" : fmt::format("      if ({} < {}) {{\n", ix, end);
      for (uint32_t b : stores_)
        s += "        " + L_.var(vec_type(b, w), fmt::format("S{}", b)) + "\n";
      for (int lane = 0; lane < w; ++lane) {
        const char* indent = w > 1 ? "          " : "        ";
        if (w > 1) s += "        {\n";
        size_t r = 0;
        for (size_t n = 0; n < pass_.body.insts.size(); ++n) {
          auto line = statement(n, r, j, lane, w);
          if (!line) return line.error();
          if (!line->empty()) s += indent + *line + "\n";
        }
        if (w > 1) s += "        }\n";
      }
      for (uint32_t b : stores_) s += "        " + store(b, w, ix) + "\n";
      s += "      }\n";
    }
    s += "    }\n";
    return s;
  }

  bool quantized(uint32_t b) const { return plan_.buffers[b].quant != ir::Quant::none; }

  // A chunk of a quantized tensor, a quantization block at a time (chunks start on blocks):
  // the work-group computes the block's elements (quantized stores go to local memory, with
  // their |x| bits max-reduced per thread, NaN winning), reduces each stored buffer's absmax
  // across the group, then writes the scale and the codes.
  Expected<std::string> block_loop() {
    const std::string I = L_.i64(), U = L_.u32(), lid = L_.local_id();
    std::string s = fmt::format(
        "      for ({0} b0 = 0; b0 < len; b0 += {1}) {{\n"
        "        const {0} n = len - b0 < {1} ? len - b0 : {1};\n"
        "        const {0} blk = (off + b0) / {1};\n",
        I, ir::quant_block(plan_.buffers));
    for (uint32_t b : loads_)
      if (quantized(b)) s += fmt::format("        const float sc{0} = s{0}[blk];\n", b);
    for (uint32_t b : stores_)
      if (quantized(b)) s += fmt::format("        {} am{} = 0;\n", U, b);
    s += fmt::format("        for ({} j = {}; j < n; j += {}) {{\n", I, lid, block_);
    s += fmt::format("          const {} i0 = b0 + j;\n", I);
    for (uint32_t b : loads_) {
      if (quantized(b))  // 4-bit: the even element's code is its byte's high nibble
        s += fmt::format(
            "          const float L{0}_0 = OPTJIT_BITS_F32(optjit_map_{1}[{2}]) * sc{0};\n", b,
            ir::to_string(plan_.buffers[b].quant),
            ir::info(plan_.buffers[b].quant).bits == 4
                ? fmt::format("(q{}[i0 >> 1] >> ((i0 & 1) != 0 ? 0 : 4)) & 15", b)
                : fmt::format("q{}[i0]", b));
      else
        s += fmt::format("          const {} L{}_0 = {};\n", vec_type(b, 1), b, load(b, 1, "i0"));
    }
    s += "          {\n";
    for (uint32_t b : stores_) s += fmt::format("            {} S{};\n", vec_type(b, 1), b);
    size_t r = 0;
    for (size_t n = 0; n < pass_.body.insts.size(); ++n) {
      auto line = statement(n, r, 0, 0, 1);
      if (!line) return line.error();
      if (!line->empty()) s += "            " + *line + "\n";
    }
    for (uint32_t b : stores_) {
      if (!quantized(b)) {
        s += "            " + store(b, 1, "i0") + "\n";
        continue;
      }
      s += fmt::format(
          "            qv{0}[j] = S{0};\n"
          "            am{0} = am{0} > (OPTJIT_F32_BITS(S{0}) & 0x7fffffffu) ? am{0} : "
          "(OPTJIT_F32_BITS(S{0}) & 0x7fffffffu);\n",
          b);
    }
    s += "          }\n        }\n";
    for (uint32_t b : stores_) {
      if (!quantized(b)) continue;
      const ir::QuantKind kind = ir::info(plan_.buffers[b].quant).kind;
      s += fmt::format(
          "        qm[{1}] = am{0};\n        {2};\n"
          "        for (int w = {3}; w > 0; w >>= 1) {{\n"
          "          if ((int){1} < w) qm[{1}] = qm[{1}] > qm[{1} + w] ? qm[{1}] : qm[{1} + w];\n"
          "          {2};\n        }}\n"
          "        const float ab{0} = OPTJIT_BITS_F32(qm[0]);\n        {2};\n",
          b, lid, L_.barrier(), block_ / 2);
      // ir::quant_scale: the absmax, or max(absmax, 1e-12) (/ 448 for fp8); NaN stays NaN.
      const std::string clipped = fmt::format("(ab{0} <= {1} ? {1} : ab{0})", b,
                                              literal(static_cast<double>(1e-12f), DType::f32));
      s += fmt::format(
          "        const float sb{0} = {1};\n        if ({2} == 0) s{0}[blk] = sb{0};\n", b,
          kind == ir::QuantKind::table ? fmt::format("ab{}", b)
          : kind == ir::QuantKind::fp8 ? clipped + " / 448.0f"
                                       : clipped,
          lid);
      const std::string q = std::string(ir::to_string(plan_.buffers[b].quant));
      if (kind == ir::QuantKind::nearest)  // codes two to a byte (n is even)
        s += fmt::format(
            "        for ({2} j = 2 * {1}; j < n; j += {3})\n"
            "          q{0}[(b0 + j) >> 1] = (optjit_quantize_{4}(qv{0}[j] / sb{0}) << 4) | "
            "optjit_quantize_{4}(qv{0}[j + 1] / sb{0});\n",
            b, lid, I, 2 * block_, q);
      else if (kind == ir::QuantKind::fp8)  // ir::f8_code of x / scale
        s += fmt::format(
            "        for ({2} j = {1}; j < n; j += {3}) q{0}[b0 + j] = optjit_f8_code(qv{0}[j] / "
            "sb{0});\n",
            b, lid, I, block_);
      else  // the table: lut[index(x / absmax)], 0 for a zero block
        s += fmt::format(
            "        for ({2} j = {1}; j < n; j += {3})\n"
            "          q{0}[b0 + j] = sb{0} == 0.0f ? 0 : optjit_quantize_{4}(qv{0}[j] * (1.0f / "
            "sb{0}));\n",
            b, lid, I, block_, q);
    }
    s += fmt::format("        {};\n      }}\n", L_.barrier());
    return s;
  }

  // The type that holds w elements of buffer b as loaded, its loads and stores, and lanes.
  std::string vec_type(uint32_t b, int w) const { return L_.vec_type(plan_.buffers[b].storage, w); }
  std::string load(uint32_t b, int w, const std::string& ix) const {
    return L_.load(b, plan_.buffers[b].storage, w, ix);
  }
  std::string store(uint32_t b, int w, const std::string& ix) const {
    return L_.store(b, plan_.buffers[b].storage, w, ix);
  }
  std::string lane_of(const std::string& var, int lane, int w) const {
    return L_.lane(var, lane, w);
  }

  ir::ValueId red_inst(size_t r) const {
    size_t seen = 0;
    for (size_t n = 0; n < pass_.body.insts.size(); ++n)
      if (ir::info(pass_.body.insts[n].op).kind == OpKind::reduce && seen++ == r)
        return static_cast<ir::ValueId>(n);
    return ir::kNoValue;
  }
  DType red_arg_type(size_t r) const {
    return pass_.body.at(pass_.body.at(red_inst(r)).args[0]).type;
  }
  std::string acc_type(Op op, DType arg) const {
    if (op == Op::Sum || op == Op::SumSq) return L_.wide();
    return arg == DType::f64 ? L_.u64() : L_.u32();
  }
  std::string combine(size_t q) const {
    Op op = pass_.body.at(red_inst(q)).op;
    const std::string r = red(q);
    if (op == Op::Sum || op == Op::SumSq) return fmt::format("{0}[l] += {0}[l + w];", r);
    return fmt::format("{0}[l] = {1};", r,
                       L_.select(fmt::format("{0}[l] > {0}[l + w]", r), fmt::format("{}[l]", r),
                                 fmt::format("{}[l + w]", r)));
  }
  std::string finish(size_t q) const {
    Op op = pass_.body.at(red_inst(q)).op;
    bool wide = red_arg_type(q) == DType::f64;
    const std::string r = red(q);
    if (op == Op::Sum || op == Op::SumSq) return fmt::format("{}[0]", r);
    if (op == Op::MaxAbs)
      return wide ? fmt::format("OPTJIT_BITS_F64({}[0])", r)
                  : L_.cast(L_.wide(), fmt::format("OPTJIT_BITS_F32({}[0])", r));
    return "(" +
           L_.select(fmt::format("{}[0] >= {}", r, wide ? "0x7ff0000000000000ull" : "0x7f800000u"),
                     "1.0", "0.0") +
           ")";
  }

  std::string v(ir::ValueId id) const {
    const ir::Inst& in = pass_.body.at(id);
    if (in.op == Op::Uniform) return L_.uniform_name(in.attr);
    if (in.op == Op::Const) return literal(in.imm, in.type);
    return fmt::format("v{}", index(id));
  }

  std::string convert(const std::string& x, DType from, DType to) const {
    std::string ft = L_.value_type(from), tt = L_.value_type(to);
    if (ft == tt) return x;
    if (to == DType::b1) return fmt::format("({} != 0)", x);
    return L_.cast(tt, x);
  }

  Expected<std::string> statement(size_t n, size_t& r, int item, int lane, int w) {
    const ir::Inst& in = pass_.body.insts[n];
    auto a = [&](int k) { return v(in.args[k]); };
    auto at = [&](int k) { return pass_.body.at(in.args[k]).type; };
    const std::string T = L_.value_type(in.type);
    auto def = [&](const std::string& e) { return L_.let(T, fmt::format("v{}", n), e); };
    switch (ir::info(in.op).kind) {
      case OpKind::leaf: {
        if (in.op == Op::Uniform || in.op == Op::Const) return std::string();
        if (in.op != Op::Load) break;
        DType st = plan_.buffers[in.attr].storage;
        std::string x = lane_of(fmt::format("L{}_{}", in.attr, item), lane, w);
        if (st == DType::f16 && !L_.half_loads_convert())
          x = fmt::format("OPTJIT_F16_TO_F32({})", x);
        else if (st == DType::bf16)
          x = fmt::format("OPTJIT_BF16_TO_F32({})", x);
        DType have = (st == DType::f16 || st == DType::bf16) ? DType::f32 : st;
        return def(convert(x, have, in.type));
      }
      case OpKind::effect: {
        if (in.op != Op::Store) break;
        DType st = plan_.buffers[in.attr].storage;
        std::string x = a(0), to = lane_of(fmt::format("S{}", in.attr), lane, w);
        if (st == DType::f16 && !L_.half_loads_convert())
          return fmt::format("{} = OPTJIT_F32_TO_F16({});", to, convert(x, at(0), DType::f32));
        if (st == DType::f16) return fmt::format("{} = {};", to, convert(x, at(0), DType::f32));
        if (st == DType::bf16)
          return fmt::format(
              "{} = {};", to,
              L_.cast(L_.storage_type(st),
                      fmt::format("OPTJIT_BF16_BITS({})", convert(x, at(0), DType::f32))));
        return fmt::format("{} = {};", to, convert(x, at(0), st));
      }
      case OpKind::reduce: {
        size_t q = r++;
        DType t = at(0);
        std::string x = a(0);
        const std::string wx = L_.cast(L_.wide(), x);
        if (in.op == Op::Sum) return fmt::format("acc{} += {};", q, wx);
        if (in.op == Op::SumSq) return fmt::format("acc{0} += {1} * {1};", q, wx);
        std::string bits = t == DType::f64
                               ? fmt::format("(OPTJIT_F64_BITS({}) & 0x7fffffffffffffffull)", x)
                               : fmt::format("(OPTJIT_F32_BITS({}) & 0x7fffffffu)", x);
        return fmt::format(
            "acc{0} = {1};", q,
            L_.select(fmt::format("acc{} > {}", q, bits), fmt::format("acc{}", q), bits));
      }
      case OpKind::select:
        return def(L_.select(a(0), a(1), a(2)));
      case OpKind::cast:
        return def(convert(a(0), at(0), in.type));
      case OpKind::logic:
        if (in.op == Op::Not) return def("!" + a(0));
        return def(fmt::format("{} {} {}", a(0), in.op == Op::And ? "&&" : "||", a(1)));
      case OpKind::compare: {
        if (in.op == Op::IsFinite) return def(fmt::format("isfinite({})", a(0)));
        return def(L_.compare(detail::comparison(in.op), a(0), a(1), at(0)));
      }
      case OpKind::math: {
        const DType t = in.type;
        if (t == DType::i64) {
          switch (in.op) {
            case Op::Neg:
              return def("-" + a(0));
            case Op::Abs:
              return def("(" + L_.select(a(0) + " < 0", "-" + a(0), a(0)) + ")");
            case Op::Add:
              return def(a(0) + " + " + a(1));
            case Op::Sub:
              return def(a(0) + " - " + a(1));
            case Op::Mul:
              return def(a(0) + " * " + a(1));
            case Op::Min:
              return def("(" + L_.select(a(0) + " < " + a(1), a(0), a(1)) + ")");
            case Op::Max:
              return def("(" + L_.select(a(0) + " > " + a(1), a(0), a(1)) + ")");
            default:
              break;
          }
          break;
        }
        if (in.op == Op::SRound) {
          // The element's index in its tensor: the chunk's offset plus the loop's index (in
          // vectors of w lanes in the vector loop, in elements otherwise).
          const std::string ix = item == 0 ? "i0" : fmt::format("i{}", item);
          const std::string e =
              w > 1 ? fmt::format("off + {} * {} + {}", ix, w, lane) : fmt::format("off + {}", ix);
          const ir::Inst& key = pass_.body.at(in.args[1]);
          auto call =
              L_.sround_call(convert(a(0), at(0), DType::f32), a(1),
                             key.op == Op::Uniform ? static_cast<int>(key.attr) : -1, e, in.attr);
          if (!call) return call.error();
          return def(convert(*call, DType::f32, t));
        }
        std::vector<std::string> args;
        for (int k = 0; k < ir::info(in.op).arity; ++k) args.push_back(a(k));
        if (std::string e = detail::float_math(L_, in.op, t, args); !e.empty()) return def(e);
        break;
      }
    }
    return make_error("the {} backend cannot compile '{}' on {}", L_.name(), ir::info(in.op).text,
                      to_string(in.type));
  }

  const plan::Plan& plan_;
  const plan::Pass& pass_;
  size_t k_;
  const Lang& L_;
  int block_, items_, vec_;
  bool device_step_;
  std::vector<uint32_t> loads_, stores_;  // buffers the pass loads / stores
  std::vector<uint32_t> quant_;           // the block-quantized buffers among them
  std::string module_scope_, shared_;     // shared arrays' declarations (see shared())
};

}  // namespace

Expected<std::string> emit_c(const plan::Plan& plan, CEmitOptions o) {
  OPTJIT_TRY(o.launch.validate());
  const Lang& L = Lang::of(o.language);
  if (std::string why = L.unsupported(plan, o.device_step); !why.empty())
    return make_error("{}", why);
  std::string s = fmt::format(
      "// optjit: {} passes, {} bytes per parameter, block {}, items {}, vector {}\n",
      plan.passes.size(), plan.bytes_per_param(), o.launch.block, o.launch.items, o.launch.vec);
  s += preamble(L, plan, o.launch.vec);
  for (size_t k = 0; k < plan.passes.size(); ++k) {
    auto kernel = KernelWriter(plan, k, L, o).write();
    if (!kernel) return kernel.error();
    s += "\n" + *kernel;
  }
  if (o.device_step) {
    auto step = detail::emit_device_step(plan, L);
    if (!step) return step.error();
    s += "\n" + *step;
  }
  return s;
}

std::string source_variant(const std::string& language, const GpuLaunch& launch,
                           const std::string& source) {
  return cache::source_variant(language + "-" + launch.code_variant(), source);
}

}  // namespace optjit::codegen
