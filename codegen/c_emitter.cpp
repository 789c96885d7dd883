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
#include <tuple>

#include <fmt/ranges.h>
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

// The block-quantized formats of a plan's buffers, each once, in buffer order.
std::vector<ir::Quant> quant_formats(const plan::Plan& plan) {
  std::vector<ir::Quant> formats;
  for (const auto& buf : plan.buffers)
    if (buf.quant != ir::Quant::none &&
        std::find(formats.begin(), formats.end(), buf.quant) == formats.end())
      formats.push_back(buf.quant);
  return formats;
}

// The name the kernels read constant table `name` by: its copy in shared memory under
// GpuLaunch::shared_tables, or itself.
std::string table_name(const std::string& name, bool shared) { return shared ? name + "_s" : name; }

std::string preamble(const Lang& L, const plan::Plan& plan, const GpuLaunch& launch) {
  const int vec = launch.vec;
  const bool shared_tables = launch.shared_tables;
  std::string s = L.preamble(plan, vec);
  if (launch.ahead > 0 && !quant_formats(plan).empty()) s += L.prefetch_l2_helper();
  if (launch.interleave && !quant_formats(plan).empty()) s += L.branch_free_helpers();
  if (launch.stage > 0 && !quant_formats(plan).empty()) s += L.async_copy_helpers();
  s += L.bf16_helpers();
  bool f64_odd = false, f16 = false;  // what Lang::rounded and f64 stores to halves need
  for (const plan::Pass& pass : plan.passes)
    for (const ir::Inst& in : pass.body.insts) {
      const bool half = in.type == DType::f16 || in.type == DType::bf16;
      if (in.op == Op::Cast && half) {
        f16 = f16 || in.type == DType::f16;
        f64_odd = f64_odd || pass.body.at(in.args[0]).type == DType::f64;
      }
      const DType st = in.op == Op::Store ? plan.buffers[in.attr].storage : DType::f32;
      if ((st == DType::f16 || st == DType::bf16) && pass.body.at(in.args[0]).type == DType::f64)
        f64_odd = true;
    }
  s += L.rounding_helpers(f64_odd, f16);
  // Block-quantized formats: the map, and the quantizer of ir/quant.h line for line: the
  // lookup table in its compact form (quant_lut_index, then CompactLut::code), f8_code, or the
  // thresholds of nearest_code.
  size_t at = 0;
  for (const ConstantTable& t : constant_tables(plan)) {
    s += L.const_table(t.name, t.values, at);
    if (shared_tables) s += L.module_shared_u32(table_name(t.name, true), t.values.size());
    at += t.values.size();
  }
  auto table = [&](const std::string& name) { return table_name(name, shared_tables); };
  const std::vector<ir::Quant> formats = quant_formats(plan);
  const std::string U = L.u32(), F = L.value_type(DType::f32);
  auto ge = [&](const std::string& a, const std::string& b) {
    return L.compare(">=", a, b, DType::f32);
  };
  for (ir::Quant q : formats) {
    const ir::QuantInfo& qi = ir::info(q);
    const std::string name(ir::to_string(q));
    if (ir::linear_thresholds(qi)) {
      // ir::linear_code: the midpoints of a linear map counted by arithmetic, no table.
      const int top = static_cast<int>(qi.thresholds.size());
      const std::string z = L.mul("y", literal(1.0 / static_cast<double>(qi.map[0]), DType::f32));
      s += L.function(
          U, "optjit_quantize_" + name, {{F, "y"}},
          fmt::format("  {}\n  return {};\n", L.let(F, "z", L.add(z, "-0.5f")),
                      L.select(ge("z", literal(top, DType::f32)), fmt::format("{}u", top),
                               "(" + L.select(ge("z", "0.0f"), L.cast(U, "z"), "0u") + ")")));
      continue;
    }
    if (qi.kind == ir::QuantKind::nearest) {
      // The count of ascending thresholds <= y: with 2^bits - 1 of them, by bisection, bit by
      // bit from the highest (c + step - 1 is the threshold that decides the bit), else one by
      // one. NaN compares false everywhere: 0 either way.
      const size_t T = qi.thresholds.size();
      const std::string thr = table("optjit_thr_" + name);
      auto at_least = [&](const std::string& k) {
        return ge("y", "OPTJIT_BITS_F32(" + L.table_at(thr, k) + ")");
      };
      std::string body = "  " + L.var(U, "c", "0u") + "\n";
      if (std::has_single_bit(T + 1) && std::is_sorted(qi.thresholds.begin(), qi.thresholds.end()))
        for (size_t step = (T + 1) / 2; step > 0; step /= 2)
          body += fmt::format("  c += {};\n", L.select(at_least(fmt::format("c + {}u", step - 1)),
                                                       fmt::format("{}u", step), "0u"));
      else
        body += fmt::format("  {} {{\n    c += {};\n  }}\n",
                            L.for_head(L.i32(), "k", "0", fmt::format("k < {}", T), "k += 1"),
                            L.select(at_least("k"), "1u", "0u"));
      s += L.function(U, "optjit_quantize_" + name, {{F, "y"}}, body + "  return c;\n");
      continue;
    }
    if (qi.kind == ir::QuantKind::fp8) {
      if (s.find("optjit_f8_code") == std::string::npos)  // once for every fp8 format
        s += L.function(
            U, "optjit_f8_code", {{F, "y"}},
            // Without branches: both roundings, then the one for |y|'s range (the other's
            // arithmetic is harmless: no traps).
            fmt::format(
                "  {}\n  {}\n  {}\n  {}\n  {}\n"
                "  return ({} & 255u) | (sign >> 24u);\n",
                L.let(U, "sign", "OPTJIT_F32_BITS(y) & 0x80000000u"),
                L.let(U, "bits", "OPTJIT_F32_BITS(y) ^ sign"),
                L.let(U, "sub",
                      "OPTJIT_F32_BITS(OPTJIT_BITS_F32(bits) + OPTJIT_BITS_F32(0x46800000u)) - "
                      "0x46800000u"),
                L.let(U, "nrm", "(bits + 0xc407ffffu + ((bits >> 20u) & 1u)) >> 20u"),
                L.let(U, "r",
                      L.select("bits >= 0x43e80000u", "0x7fu",
                               "(" + L.select("bits < 0x3c800000u", "sub", "nrm") + ")")),
                "r"));
      continue;
    }
    // quant_lut_index and CompactLut::code. (y + 1) * 0.5 * 65535 is (y + 1) * 32767.5: halving
    // is exact (y + 1 is 0 or at least 2^-24).
    const ir::CompactLut& c = *qi.compact;
    const std::string lo = fmt::format("{}u", c.lo()), hi = fmt::format("{}u", c.hi());
    s += L.function(
        U, "optjit_quantize_" + name, {{F, "x"}},
        fmt::format(
            "  {}\n  {}\n  {}\n  {}\n  return ({} + i) >> 5u;\n", L.let(U, "i", L.lut_cell("x")),
            L.let(U, "b", "i >> 5u"), L.let(U, "d", "i - b"),
            L.let(U, "j",
                  "(" +
                      L.select(fmt::format("d > {}", lo),
                               "(" + L.select(fmt::format("d < {}", hi), "d", hi) + ")", lo) +
                      ") + b - " + lo),
            L.table_at(table("optjit_lut_" + name), "j")));
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
        launch_(o.launch),
        device_step_(o.device_step) {}

  Expected<std::string> write() {
    std::string s;
    auto used = buffers_of(pass_.body);
    if (!used) return used.error();
    const size_t R = pass_.reductions.size();
    s += L_.pass_signature(plan_, k_, launch_, device_step_);
    if (device_step_)
      s += "  if (ctl[1] != 0.0) return;  // a skip_if fired: the step writes nothing\n";
    for (size_t r = 0; r < R; ++r)
      shared(acc_type(pass_.body.at(red_inst(r)).op, red_arg_type(r)), red(r), launch_.block);
    for (uint32_t b : *used)
      if (plan_.buffers[b].quant != ir::Quant::none) quant_.push_back(b);
    // The options of the warps' quantized path in vectors.
    for (const auto& [set, option] :
         {std::pair{launch_.recompute, std::string("recompute=1")},
          std::pair{launch_.interleave, std::string("interleave=1")},
          std::pair{launch_.stage > 0, fmt::format("stage={}", launch_.stage)}}) {
      if (quant_.empty() || !set) continue;
      if (!warp_blocks())
        return make_error(
            "{}: blocks of {} threads are not whole warps, so no warp quantizes blocks of its "
            "own",
            option, launch_.block);
      if (warp_vectors() == 1)
        return make_error(
            "{}: vec={} does not divide the {} elements a lane of {}-element quantization "
            "blocks, so the quantized path does not run in vectors",
            option, launch_.vec, ir::quant_block(plan_.buffers) / 32,
            ir::quant_block(plan_.buffers));
    }
    if (!quant_.empty() && !warp_blocks()) {
      for (uint32_t b : stores_)
        if (quantized(b)) shared(L_.value_type(DType::f32), qv(b), ir::quant_block(plan_.buffers));
      shared(L_.u32(), shared_name("qm"), launch_.block);
    }
    s += shared_;
    if (!quant_.empty() && launch_.shared_tables) {
      // The code tables into this block's shared copies, before any thread reads them.
      for (const ConstantTable& t : constant_tables(plan_))
        s += fmt::format("  {} {{\n    {}[k] = {}[k];\n  }}\n",
                         L_.for_head(L_.i32(), "k", L_.cast(L_.i32(), L_.local_id()),
                                     fmt::format("k < {}", t.values.size()),
                                     fmt::format("k += {}", launch_.block)),
                         table_name(t.name, true), t.name);
      s += fmt::format("  {};\n", L_.barrier());
    }
    s += fmt::format("  {} {{\n", L_.for_head(L_.i64(), "c", L_.group_id(), "c < nchunks",
                                              fmt::format("c += {}", L_.groups())));
    s += "    " + L_.chunk_fields() + "\n";
    s += L_.buffer_pointers(plan_, *used);
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
    for (uint32_t b : quant_) s += L_.quant_pointers(plan_, b);
    // The body, or one version of it per value of the pass's guards (plan::Pass::versions),
    // chosen by the tensor's guard uniforms: the same for every work-item of the chunk.
    std::vector<const plan::PassVersion*> versions;
    for (const auto& v : pass_.versions) versions.push_back(&v);
    if (versions.empty()) versions.push_back(nullptr);
    for (size_t i = 0; i < versions.size(); ++i) {
      body_ = versions[i] ? &versions[i]->body : &pass_.body;
      auto own = buffers_of(*body_);
      if (!own) return own.error();
      if (versions[i]) {
        std::vector<std::string> when;
        for (size_t g = 0; g < pass_.guards.size(); ++g)
          when.push_back((versions[i]->when[g] ? "" : "!") + L_.uniform_name(pass_.guards[g]));
        // Which program values the guards are and what the version moves, as optjit plan
        // prints them ("when %58=0 %60=1: ... 36 B/param").
        std::vector<std::string> values;
        for (size_t g = 0; g < pass_.guards.size(); ++g)
          values.push_back(fmt::format("%{}={}", ir::index(pass_.uniforms[pass_.guards[g]]),
                                       versions[i]->when[g] ? 1 : 0));
        const std::string moves = fmt::format("  // when {}: {} B/param", fmt::join(values, " "),
                                              versions[i]->bytes_read + versions[i]->bytes_written);
        s += i == 0 ? fmt::format("    if ({}) {{{}\n", fmt::join(when, " && "), moves)
             : i + 1 < versions.size()
                 ? fmt::format("    }} else if ({}) {{{}\n", fmt::join(when, " && "), moves)
                 : fmt::format("    }} else {{{}\n", moves);
      }
      auto work = body_loops();
      if (!work) return work.error();
      s += *work;
    }
    if (versions.size() > 1) s += "    }\n";
    body_ = &pass_.body;
    if (R > 0) {
      const std::string I = L_.i32();
      s += "    " + L_.let(I, "l", L_.cast(I, L_.local_id())) + "\n";
      for (size_t q = 0; q < R; ++q) s += fmt::format("    {}[l] = acc{};\n", red(q), q);
      s += fmt::format("    {};\n", L_.barrier());
      s += fmt::format("    {} {{\n      if (l < w) {{\n",
                       L_.for_head(I, "w", std::to_string(launch_.block / 2), "w > 0", "w >>= 1"));
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
    const bool wide =
        type.find("double") != std::string::npos || type.find("long") != std::string::npos;
    shared_bytes_ += static_cast<int64_t>(n) * (wide ? 8 : 4);
    if (L_.shared_at_module_scope())
      module_scope_ += L_.shared(type, name, n) + "\n";
    else
      shared_ += "  " + L_.shared(type, name, n) + "\n";
  }
  std::string red(size_t r) const {
    return L_.shared_at_module_scope() ? fmt::format("red{}_{}", r, k_) : fmt::format("red{}", r);
  }

 private:
  // The buffers `body` loads and stores (loads_ and stores_, each in buffer order), and every
  // buffer it uses.
  Expected<std::vector<uint32_t>> buffers_of(const ir::Program& body) {
    std::vector<uint32_t> used;
    std::vector<bool> stored(plan_.buffers.size(), false);
    for (const auto& in : body.insts) {
      if (in.op != Op::Load && in.op != Op::Store) continue;
      if (std::find(used.begin(), used.end(), in.attr) == used.end()) used.push_back(in.attr);
      if (in.op == Op::Store) stored[in.attr] = true;
      // Loads are gathered before the stores of a loop trip, which the planner guarantees.
      if (in.op == Op::Load && stored[in.attr])
        return make_error("pass {} loads buffer {} after storing it", k_, in.attr);
    }
    std::sort(used.begin(), used.end());
    loads_.clear(), stores_.clear();
    for (uint32_t b : used) {
      if (stored[b]) stores_.push_back(b);
      for (const auto& in : body.insts)
        if (in.op == Op::Load && in.attr == b) {
          loads_.push_back(b);
          break;
        }
    }
    return used;
  }

  // The chunk's elements through body_: a quantized tensor's blocks, or the element loops.
  Expected<std::string> body_loops() {
    std::string s;
    if (!quant_.empty()) {
      auto blocks = !warp_blocks()       ? block_loop()
                    : warp_vectors() > 1 ? warp_block_vector_loop()
                                         : warp_block_loop();
      if (!blocks) return blocks.error();
      s += fmt::format("    if (!({})) {{\n", L_.no_scales(quant_[0])) + *blocks + "    } else {\n";
    }
    if (launch_.vec > 1) {
      // Whole vectors (chunks and tensors start aligned), then the tail element by element.
      s += "    " + L_.let(L_.i64(), "nv", fmt::format("len / {}", launch_.vec)) + "\n";
      auto main = loop(launch_.vec, launch_.items, "0", "nv");
      if (!main) return main.error();
      s += *main;
      auto tail = loop(1, 1, fmt::format("nv * {}", launch_.vec), "len");
      if (!tail) return tail.error();
      s += *tail;
    } else {
      auto main = loop(1, launch_.items, "0", "len");
      if (!main) return main.error();
      s += *main;
    }
    if (!quant_.empty()) s += "    }\n";
    return s;
  }

  // One loop over [first, end) in units of w elements: each thread takes `items` vectors a
  // block apart per trip, loads all of them, then computes and stores each one, lane by lane.
  Expected<std::string> loop(int w, int items, const std::string& first, const std::string& end) {
    const std::string I = L_.i64();
    std::string s = fmt::format(
        "    {} {{\n",
        L_.for_head(I, "i0", (first == "0" ? "" : first + " + ") + L_.local_id(),
                    fmt::format("i0 < {}", end), fmt::format("i0 += {}", launch_.block * items)));
    // Loads: the first vector is always in range; the others are guarded.
    for (uint32_t b : loads_)
      s += "      " + L_.let(vec_type(b, w), fmt::format("L{}_0", b), load(b, w, "i0")) + "\n";
    for (int j = 1; j < items; ++j) {
      s += "      " + L_.let(I, fmt::format("i{}", j), fmt::format("i0 + {}", j * launch_.block)) +
           "\n";
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
        for (size_t n = 0; n < body_->insts.size(); ++n) {
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
    const std::string I = L_.i64(), U = L_.u32(), F = L_.value_type(DType::f32),
                      lid = L_.local_id();
    const int64_t QB = ir::quant_block(plan_.buffers);
    std::string s = fmt::format(
        "      {} {{\n        {}\n        {}\n",
        L_.for_head(I, "e0", "0", "e0 < len", fmt::format("e0 += {}", QB)),
        L_.let(I, "n", L_.select(fmt::format("len - e0 < {}", QB), "len - e0", std::to_string(QB))),
        L_.let(I, "blk", block_index("off + e0")));
    for (uint32_t b : loads_)
      if (quantized(b))
        s += "        " + L_.let(F, fmt::format("sc{}", b), L_.scale_at(b, "blk")) + "\n";
    for (uint32_t b : stores_)
      if (quantized(b)) s += "        " + L_.var(U, fmt::format("am{}", b), "0u") + "\n";
    s += fmt::format("        {} {{\n          {}\n",
                     L_.for_head(I, "j", lid, "j < n", fmt::format("j += {}", launch_.block)),
                     L_.let(I, "i0", "e0 + j"));
    for (uint32_t b : loads_) {
      if (!quantized(b)) {
        s +=
            "          " + L_.let(vec_type(b, 1), fmt::format("L{}_0", b), load(b, 1, "i0")) + "\n";
        continue;
      }
      s += "          " +
           L_.let(F, fmt::format("L{}_0", b), dequantized(b, "i0", fmt::format("sc{}", b))) + "\n";
    }
    s += "          {\n";
    for (uint32_t b : stores_)
      s += "            " + L_.var(vec_type(b, 1), fmt::format("S{}", b)) + "\n";
    size_t r = 0;
    for (size_t n = 0; n < body_->insts.size(); ++n) {
      auto line = statement(n, r, 0, 0, 1);
      if (!line) return line.error();
      if (!line->empty()) s += "            " + *line + "\n";
    }
    for (uint32_t b : stores_) {
      if (!quantized(b)) {
        s += "            " + store(b, 1, "i0") + "\n";
        continue;
      }
      // The staged value, and the running absmax.
      s += fmt::format("            {}[j] = S{};\n            {}\n", qv(b), b,
                       absmax_update(b, fmt::format("am{}", b)));
    }
    s += "          }\n        }\n";
    for (uint32_t b : stores_) {
      if (!quantized(b)) continue;
      const std::string qm = shared_name("qm");
      s += L_.group_max_u32(qm, fmt::format("am{}", b), launch_.block) +
           fmt::format("        {}\n        {};\n",
                       L_.let(F, fmt::format("ab{}", b), fmt::format("OPTJIT_BITS_F32({}[0])", qm)),
                       L_.barrier());
      s += fmt::format("        {}\n        if ({} == 0) {{\n          {} = sb{};\n        }}\n",
                       scale_of(b), lid, L_.scale_at(b, "blk"), b);
      // Each invocation writes code_unit() bytes of codes: 1 (C) or 4 (WGSL) per 8-bit format,
      // twice as many codes per 4-bit one, even element high.
      const int per_byte = bits(b) == 4 ? 2 : 1, codes = L_.code_unit() * per_byte;
      std::string unit;
      for (int k = 0; k < codes; ++k) {
        const int shift = 8 * (k / per_byte) + (per_byte == 2 && k % 2 == 0 ? 4 : 0);
        const std::string at = k == 0 ? "j" : fmt::format("j + {}", k);
        std::string term = code_of(b, fmt::format("{}[{}]", qv(b), at), fmt::format("sb{}", b));
        if (shift > 0) term = fmt::format("({} << {}u)", term, shift);
        // Codes past the block's end (a tensor's last, partial block) are zero.
        if (k >= per_byte) term = "(" + L_.select(fmt::format("{} < n", at), term, "0u") + ")";
        unit += (k == 0 ? "" : " | ") + term;
      }
      s += fmt::format("        {} {{\n          {}\n        }}\n",
                       L_.for_head(I, "j", codes == 1 ? lid : fmt::format("{} * {}", codes, lid),
                                   "j < n", fmt::format("j += {}", codes * launch_.block)),
                       L_.store_codes(b, per_byte == 2 ? "(e0 + j) >> 1" : "e0 + j", unit));
    }
    s += fmt::format("        {};\n      }}\n", L_.barrier());
    return s;
  }
  // The larger of two u32 values, and the statement that takes the |x| bits of stored value
  // S<b> into buffer b's running absmax am<b> (NaN's bits are the largest, so NaN wins).
  std::string max_u32(const std::string& a, const std::string& b) const {
    return L_.select(fmt::format("{} > {}", a, b), a, b);
  }
  std::string absmax_update(uint32_t b, const std::string& am) const {
    return fmt::format("{} = {};", am,
                       max_u32(am, fmt::format("(OPTJIT_F32_BITS(S{}) & 0x7fffffffu)", b)));
  }

  // Buffer b's code for staged value x, once the block's scale sb<b> is known (ir/quant.h).
  std::string code_of(uint32_t b, const std::string& x, const std::string& sb) const {
    const std::string q(ir::to_string(plan_.buffers[b].quant));
    switch (ir::info(plan_.buffers[b].quant).kind) {
      case ir::QuantKind::nearest:
        return fmt::format("optjit_quantize_{}({})", q, L_.div(x, sb));
      case ir::QuantKind::fp8:
        return fmt::format("optjit_f8_code({})", L_.div(x, sb));
      case ir::QuantKind::table:
        break;
    }
    // The table: lut[index(x * (1 / absmax))], 0 for a zero block. Where division by zero
    // gives IEEE's infinity, that needs no test: a zero block's values are all zeros, x * (1 /
    // 0) is NaN, NaN's cell is 0 (as -1's: ir::quant_lut_index), and cell 0's code is 0 in
    // every table (Quant.EveryTablesFirstCellIsCodeZero).
    const std::string code = fmt::format("optjit_quantize_{}({})", q, L_.mul(x, "r" + sb));
    if (L_.ieee_division_by_zero()) return code;
    return "(" + L_.select(L_.compare("==", sb, "0.0f", DType::f32), "0u", code) + ")";
  }

  // Element `ix`'s value of quantized buffer b, from its code and its block's scale `sc`.
  std::string dequantized(uint32_t b, const std::string& ix, const std::string& sc) const {
    return value_of(b, code_at(b, ix), sc);
  }
  // Element `ix`'s code of quantized buffer b (4-bit: the even element's code is its byte's
  // high nibble), and the value of code `code` with scale `sc`.
  std::string code_at(uint32_t b, const std::string& ix) const {
    return bits(b) == 4 ? fmt::format("(({} >> ({})) & 15u)", L_.code_byte(b, ix + " >> 1"),
                                      L_.select(fmt::format("({} & 1) != 0", ix), "0u", "4u"))
                        : L_.code_byte(b, ix);
  }
  std::string value_of(uint32_t b, const std::string& code, const std::string& sc) const {
    const ir::QuantInfo& qi = ir::info(plan_.buffers[b].quant);
    if (ir::linear_map(qi.map))  // (code + 1) * map[0]: the map's value, no table read
      return L_.mul(L_.mul(L_.cast(L_.value_type(DType::f32), "(" + code + " + 1u)"),
                           literal(qi.map[0], DType::f32)),
                    sc);
    return L_.mul(fmt::format("OPTJIT_BITS_F32({})",
                              L_.table_at(table_name(fmt::format("optjit_map_{}", qi.name),
                                                     launch_.shared_tables),
                                          code)),
                  sc);
  }

  // The index of the block (its scale's) that holds element `element` (>= 0) of a tensor:
  // blocks divide ir::kQuantBlock (256), so they are powers of two, and this is a shift, not a
  // signed 64-bit division (18 instructions fewer in a trip of 8-bit clip + AdamW at
  // vec=4,interleave=1,stage=2 on sm_90).
  std::string block_index(const std::string& element) const {
    const auto QB = static_cast<uint64_t>(ir::quant_block(plan_.buffers));
    return fmt::format("(({}) >> {}u)", element, std::countr_zero(QB));
  }

  // The block's scale `sb` (sb<b>) from its absmax `ab` (ab<b>) (ir::quant_scale: the absmax,
  // or max(absmax, 1e-12), / 448 for fp8; NaN stays NaN). A table's quantizer multiplies by
  // 1 / absmax (bitsandbytes' order): its reciprocal r<sb> once here, not at every code.
  std::string scale_of(uint32_t b) const {
    return scale_of(b, fmt::format("ab{}", b), fmt::format("sb{}", b));
  }
  std::string scale_of(uint32_t b, const std::string& ab, const std::string& sb) const {
    const ir::QuantKind kind = ir::info(plan_.buffers[b].quant).kind;
    const std::string tiny = literal(static_cast<double>(1e-12f), DType::f32);
    const std::string clipped =
        "(" + L_.select(L_.compare("<=", ab, tiny, DType::f32), tiny, ab) + ")";
    const std::string F = L_.value_type(DType::f32);
    if (kind == ir::QuantKind::table)
      return L_.let(F, sb, ab) + "\n        " + L_.let(F, "r" + sb, L_.div("1.0f", sb));
    return L_.let(F, sb, kind == ir::QuantKind::fp8 ? L_.div(clipped, "448.0f") : clipped);
  }

  // Whether each warp can take quantization blocks of its own: the language exchanges values
  // within a warp, blocks are whole warps' worth of elements, and codes are stored by bytes.
  bool warp_blocks() const {
    const int64_t QB = ir::quant_block(plan_.buffers);
    return !L_.warp_xor_u32("x", 1).empty() && QB % 32 == 0 && launch_.block % 32 == 0 &&
           L_.code_unit() == 1;
  }

  // Names of the warps' quantized path, per block of a trip of G blocks: the block's place in
  // the trip is in the name when a trip has several (one block a trip emits what it always did).
  static std::string trip_name(const char* base, int g, int G) {
    return G == 1 ? std::string(base) : fmt::format("{}_{}", base, g);
  }
  static std::string trip_name(const char* base, uint32_t b, int g, int G) {
    return G == 1 ? fmt::format("{}{}", base, b) : fmt::format("{}{}_{}", base, b, g);
  }
  // A trip's geometry from its first element `base`: per block, n (its elements in the chunk;
  // a later block of the trip may be past the chunk: n <= 0) and blk (its scale's index).
  std::string trip_geometry(const std::string& base, const std::string& pre, const char* in,
                            int G) const {
    const std::string I = L_.i64();
    const int64_t QB = ir::quant_block(plan_.buffers);
    std::string out;
    for (int g = 0; g < G; ++g) {
      const std::string start = g == 0 ? base : fmt::format("({} + {})", base, g * QB);
      out += fmt::format("{0}{1}\n{0}{2}\n", in,
                         L_.let(I, pre + trip_name("n", g, G),
                                L_.select(fmt::format("len - {} < {}", start, QB),
                                          fmt::format("len - {}", start), std::to_string(QB))),
                         L_.let(I, pre + trip_name("blk", g, G), block_index("off + " + start)));
    }
    return out;
  }
  // Quantized buffer b's absmax per block of the trip (am<b>, each lane's so far) reduced across
  // the warp by exchanges (the blocks' chains interleaved), each block's scale sb<b> from it,
  // written by lane 0 where the block is in the chunk.
  std::string trip_scales(const std::vector<uint32_t>& bs, int G) const {
    const std::string U = L_.u32(), F = L_.value_type(DType::f32);
    std::string s;
    // The buffers' exchanges side by side (several: GpuLaunch::interleave), mask by mask.
    for (int m = 16; m > 0; m >>= 1)
      for (uint32_t b : bs)
        for (int g = 0; g < G; ++g) {
          const std::string am = trip_name("am", b, g, G),
                            x = G == 1 ? fmt::format("x{}_{}", b, m)
                                       : fmt::format("x{}_{}_{}", b, g, m);
          s += "        " + L_.let(U, x, L_.warp_xor_u32(am, m)) + "\n        " +
               fmt::format("{} = {};", am, max_u32(am, x)) + "\n";
        }
    for (uint32_t b : bs)
      for (int g = 0; g < G; ++g) {
        s += "        " +
             L_.let(F, trip_name("ab", b, g, G),
                    fmt::format("OPTJIT_BITS_F32({})", trip_name("am", b, g, G))) +
             "\n        " + scale_of(b, trip_name("ab", b, g, G), trip_name("sb", b, g, G)) + "\n";
        s += fmt::format(
            "        if ({}) {{\n          {} = {};\n        }}\n",
            g == 0 ? "lane == 0" : fmt::format("lane == 0 && {} > 0", trip_name("n", g, G)),
            L_.scale_at(b, trip_name("blk", g, G)), trip_name("sb", b, g, G));
      }
    return s;
  }

  // A warp's trip: `items` quantization blocks, the first at element (its warp) * trip_elements
  // of the chunk, the next trip_stride elements later (the work-group's warps take one each).
  int64_t trip_elements() const {
    return ir::quant_block(plan_.buffers) * std::max(1, launch_.items);
  }
  int64_t trip_stride() const { return trip_elements() * (launch_.block / 32); }
  std::string trip_first() const {
    return fmt::format("{} * {}", L_.cast(L_.i64(), std::string("(") + L_.local_id() + " >> 5u)"),
                       trip_elements());
  }

  // With ahead (GpuLaunch::ahead), at the top of a warp's trip (`items` blocks from element
  // `base`; the work-group's warps take a trip each in turn): the lines of the trip `ahead`
  // trips later of every buffer the trip loads, fetched into L2, a line a lane. A trip that
  // starts inside the chunk asks for its lines whose first element is inside the chunk; one
  // past it, for the lines at the same place past the start of the chunk the work-group takes
  // next (the warp's trip there when chunks are whole trips, as all but a tensor's last are),
  // inside that chunk; so that a chunk's first trips are in flight too.
  std::string l2_ahead(const std::string& base, const char* in) const {
    if (launch_.ahead == 0 || loads_.empty()) return {};
    const int64_t n = trip_elements();
    // Per buffer: elements per 128-byte line, the index of its first line among all, and the
    // address of element x of the chunk (pre "n": of the next chunk).
    struct Part {
      uint32_t b;
      int64_t per_line, first;
    };
    std::vector<Part> parts;
    int64_t lines = 0;
    for (uint32_t b : loads_) {
      const int64_t per_line =
          quantized(b) ? 128 * 8 / bits(b)
                       : 128 / static_cast<int64_t>(size_bytes(plan_.buffers[b].storage));
      parts.push_back({b, per_line, lines});
      lines += (n + per_line - 1) / per_line;
    }
    auto address = [&](const Part& p, const std::string& pre) {
      return quantized(p.b)
                 ? fmt::format("(const char*)({}q{} + (x >> {}))", pre, p.b, bits(p.b) == 4 ? 1 : 0)
                 : fmt::format("(const char*)({}p{} + x)", pre, p.b);
    };
    // The lines from element `from` of a chunk of `len` elements.
    auto fetch = [&](const std::string& from, const std::string& len, const std::string& pre,
                     const std::string& pad) {
      std::string s;
      for (int64_t t = 0; t * 32 < lines; ++t) {
        const std::string l = t == 0 ? std::string("lane") : fmt::format("(lane + {})", 32 * t);
        // Line l's first element and address: the last part's, then each earlier part's where
        // l is below the next part's first line.
        auto element = [&](const Part& p) {
          return p.first == 0 ? fmt::format("{} * {}", p.per_line, l)
                              : fmt::format("{} * ({} - {})", p.per_line, l, p.first);
        };
        std::string el = element(parts.back()), at = address(parts.back(), pre);
        for (size_t j = parts.size() - 1; j-- > 0;) {
          const std::string below = fmt::format("{} < {}", l, parts[j + 1].first);
          el = L_.select(below, element(parts[j]), el);
          at = L_.select(below, address(parts[j], pre), at);
        }
        s += fmt::format(
            "{0}{{\n{0}  {1}\n{0}  if ({2} < {3} && x < {4}) {{\n{0}    {5}\n{0}  }}\n{0}}}\n", pad,
            L_.let(L_.i64(), "x", fmt::format("{} + ({})", from, el)), l, lines, len,
            L_.prefetch_l2(at));
      }
      return s;
    };
    const std::string I = L_.i64(),
                      ahead = fmt::format("{} + {}", base, launch_.ahead * trip_stride());
    const std::string in2 = std::string(in) + "  ", in3 = in2 + "  ";
    return fmt::format(
        "{0}if ({1} < len) {{\n{2}{0}}} else {{\n{3}{4}\n{3}if (c2 < nchunks) "
        "{{\n{5}{6}{3}}}\n{0}}}\n",
        in, ahead, fetch(ahead, "len", "", in2), in2,
        L_.let(I, "c2", fmt::format("c + {}", L_.groups())), L_.next_chunk(plan_, loads_, in3),
        fetch(fmt::format("{} - len", ahead), "len2", "n", in3));
  }

  // A chunk of a quantized tensor with quantization blocks per warp (warp_blocks()): each of
  // the work-group's warps steps blocks of its own, `items` blocks a trip (more loads in flight
  // per warp), lane l taking elements l, l + 32, ... of each block (every load and store a warp
  // makes is contiguous); the blocks' values stay in registers, each block's absmax is reduced
  // across the warp by exchanges (the blocks' chains interleaved), and no barrier is needed. A
  // 4-bit byte's two codes are neighbouring lanes': the even lane stores it.
  Expected<std::string> warp_block_loop() {
    const std::string I = L_.i64(), U = L_.u32(), F = L_.value_type(DType::f32),
                      lid = L_.local_id();
    const int64_t QB = ir::quant_block(plan_.buffers);
    const int K = static_cast<int>(QB / 32), G = std::max(1, launch_.items);
    auto at = [&](const char* base, int g) { return trip_name(base, g, G); };
    auto per = [&](const char* base, uint32_t b, int g) { return trip_name(base, b, g, G); };
    auto ix = [](int k) { return fmt::format("i{}", k); };
    // Item k is element lane + 32 (k % K) of the trip's block k / K (names carry `pre`: "f" for
    // the next trip's, when prefetching).
    auto in_block = [&](int k, const std::string& pre = "") {
      return fmt::format("lane + {} < {}{}", 32 * (k % K), pre, at("n", k / K));
    };
    auto geometry = [&](const std::string& base, const std::string& pre, const char* in) {
      return trip_geometry(base, pre, in, G);
    };
    auto indices = [&](const std::string& base, const std::string& pre, int k) {
      return L_.let(I, pre + ix(k),
                    fmt::format("{} + lane + {}", base, (k / K) * QB + 32 * (k % K)));
    };
    // A trip's scales, indices and loads, every load first so that all are in flight at once.
    // Into L, declared here: values, quantized ones dequantized. Raw (prefetching), into
    // `dst` (C: this trip's, N: the next trip's, declared by raw_vars): values of plain buffers,
    // codes and scales of quantized ones, dequantized when the trip computes (a table read
    // right after its load would wait for it).
    auto loads = [&](const std::string& base, const std::string& pre, const char* dst, bool raw,
                     const char* in) {
      std::string out;
      for (uint32_t b : loads_)
        if (quantized(b))
          for (int g = 0; g < G; ++g) {
            // A block past the chunk has no scale to read.
            const std::string scale = g == 0
                                          ? L_.scale_at(b, pre + at("blk", g))
                                          : L_.select(fmt::format("{}{} > 0", pre, at("n", g)),
                                                      L_.scale_at(b, pre + at("blk", g)), "0.0f");
            out += in +
                   (raw ? fmt::format("{}S{}_{} = {};", dst, b, g, scale)
                        : L_.let(F, pre + per("sc", b, g), scale)) +
                   "\n";
          }
      for (int k = 0; k < K * G; ++k) {
        out += in + indices(base, pre, k) + "\n";
        if (!raw)
          for (uint32_t b : loads_)
            out += in +
                   L_.var(quantized(b) ? F : vec_type(b, 1), fmt::format("{}{}_{}", dst, b, k)) +
                   "\n";
        if (loads_.empty()) continue;
        out += fmt::format("{}if ({}) {{\n", in, in_block(k, pre));
        for (uint32_t b : loads_)
          out += fmt::format("{}  {}{}_{} = {};\n", in, dst, b, k,
                             !quantized(b) ? load(b, 1, pre + ix(k))
                             : raw         ? code_at(b, pre + ix(k))
                                   : dequantized(b, pre + ix(k), pre + per("sc", b, k / K)));
        out += std::string(in) + "}\n";
      }
      return out;
    };
    auto raw_vars = [&](const char* dst, const char* in) {
      std::string out;
      for (uint32_t b : loads_)
        if (quantized(b))
          for (int g = 0; g < G; ++g)
            out += in + L_.var(F, fmt::format("{}S{}_{}", dst, b, g)) + "\n";
      for (int k = 0; k < K * G; ++k)
        for (uint32_t b : loads_)
          out += in + L_.var(quantized(b) ? U : vec_type(b, 1), fmt::format("{}{}_{}", dst, b, k)) +
                 "\n";
      return out;
    };
    const std::string first = trip_first(), stride = std::to_string(trip_stride());
    std::string s = "      " + L_.let(I, "lane", L_.cast(I, "(" + lid + " & 31u)")) + "\n";
    if (launch_.prefetch) {
      // Software pipelining: the next trip's loads are issued before this trip computes, so
      // the memory's latency is spent computing (they wait in N, then move to C).
      s += raw_vars("C", "      ");
      s += fmt::format("      {{\n        {}\n        if (e0 < len) {{\n", L_.let(I, "e0", first));
      s += geometry("e0", "", "          ") + loads("e0", "", "C", true, "          ");
      s += "        }\n      }\n";
    }
    s += fmt::format("      {} {{\n",
                     L_.for_head(I, "e0", first, "e0 < len", fmt::format("e0 += {}", stride)));
    s += l2_ahead("e0", "        ");
    s += geometry("e0", "", "        ");
    if (!launch_.prefetch) {
      s += loads("e0", "", "L", false, "        ");
    } else {
      for (int k = 0; k < K * G; ++k) s += "        " + indices("e0", "", k) + "\n";
      s += raw_vars("N", "        ");
      s += fmt::format("        {{\n          {}\n          if (e1 < len) {{\n",
                       L_.let(I, "e1", "e0 + " + stride));
      s += geometry("e1", "f", "            ") + loads("e1", "f", "N", true, "            ");
      s += "          }\n        }\n";
      // This trip's values, from its codes and scales (loaded a trip ago).
      for (int k = 0; k < K * G; ++k) {
        for (uint32_t b : loads_)
          s += "        " + L_.var(quantized(b) ? F : vec_type(b, 1), fmt::format("L{}_{}", b, k)) +
               "\n";
        if (loads_.empty()) continue;
        s += fmt::format("        if ({}) {{\n", in_block(k));
        for (uint32_t b : loads_)
          s += fmt::format("          L{}_{} = {};\n", b, k,
                           quantized(b) ? value_of(b, fmt::format("C{}_{}", b, k),
                                                   fmt::format("CS{}_{}", b, k / K))
                                        : fmt::format("C{}_{}", b, k));
        s += "        }\n";
      }
    }
    for (uint32_t b : stores_)
      if (quantized(b)) {
        for (int g = 0; g < G; ++g) s += "        " + L_.var(U, per("am", b, g), "0u") + "\n";
        for (int k = 0; k < K * G; ++k)
          s += "        " + L_.var(F, fmt::format("Q{}_{}", b, k), "0.0f") + "\n";
      }
    for (int k = 0; k < K * G; ++k) {
      s += fmt::format("        if ({}) {{\n", in_block(k));
      for (uint32_t b : stores_)
        s += "          " + L_.var(vec_type(b, 1), fmt::format("S{}", b)) + "\n";
      size_t r = 0;
      for (size_t n = 0; n < body_->insts.size(); ++n) {
        auto line = statement(n, r, k, 0, 1);
        if (!line) return line.error();
        if (!line->empty()) s += "          " + *line + "\n";
      }
      for (uint32_t b : stores_) {
        if (!quantized(b)) {
          s += "          " + store(b, 1, ix(k)) + "\n";
          continue;
        }
        // The value to quantize, and the running absmax.
        s += fmt::format("          Q{0}_{1} = S{0};\n          {2}\n", b, k,
                         absmax_update(b, per("am", b, k / K)));
      }
      s += "        }\n";
    }
    for (uint32_t b : stores_) {
      if (!quantized(b)) continue;
      s += trip_scales({b}, G);
      for (int k = 0; k < K * G; ++k) {
        const std::string code = code_of(b, fmt::format("Q{}_{}", b, k), per("sb", b, k / K));
        if (bits(b) != 4) {
          s += fmt::format("        if ({}) {{\n          {}\n        }}\n", in_block(k),
                           L_.store_codes(b, ix(k), code));
          continue;
        }
        // Codes past the tensor's end (its last, partial block) are zero.
        const std::string c = fmt::format("c{}_{}", b, k), d = fmt::format("d{}_{}", b, k);
        s += "        " + L_.let(U, c, L_.select(in_block(k), code, "0u")) + "\n        " +
             L_.let(U, d, L_.warp_xor_u32(c, 1)) + "\n";
        s += fmt::format("        if ((lane & 1) == 0 && {}) {{\n          {}\n        }}\n",
                         in_block(k),
                         L_.store_codes(b, ix(k) + " >> 1", fmt::format("({} << 4u) | {}", c, d)));
      }
    }
    if (launch_.prefetch) {  // the next trip's loads become this trip's
      for (uint32_t b : loads_)
        if (quantized(b))
          for (int g = 0; g < G; ++g) s += fmt::format("        CS{0}_{1} = NS{0}_{1};\n", b, g);
      for (int k = 0; k < K * G; ++k)
        for (uint32_t b : loads_) s += fmt::format("        C{0}_{1} = N{0}_{1};\n", b, k);
    }
    s += "      }\n";
    return s;
  }

  // The elements per vector of the warps' quantized path: the launch's vec where a block is
  // whole vectors for every lane (V divides block / 32) and no prefetching; else 1.
  int warp_vectors() const {
    const int64_t QB = ir::quant_block(plan_.buffers);
    return launch_.vec > 1 && !launch_.prefetch && QB % (32 * launch_.vec) == 0 ? launch_.vec : 1;
  }

  // warp_block_loop in vectors of V = warp_vectors() elements: lane l takes the V contiguous
  // elements from V l + 32 V j of each block, so each load and store of a warp moves V times
  // the bytes (16 B a lane for f32 and V = 4), 8-bit codes move as V-byte words and 4-bit ones
  // as V / 2 bytes (a lane packs its own nibbles: no exchange between lanes). Only a tensor's
  // last block can be partial: a vector inside it moves whole, the vector across its end
  // element by element (no code is written past the end; a 4-bit byte's half past it is 0).
  //
  // With recompute (GpuLaunch::recompute), a trip is two sweeps: the first computes the blocks'
  // values only for their absmax (it stores nothing and adds to no reduction, so the compiler
  // drops what the absmax does not need), the second loads the inputs again (from the cache),
  // computes the values again, bit for bit the same, and stores each vector's values and codes
  // at once. No lane holds a block's values across the absmax exchange, which in one sweep
  // takes all of a thread's registers (8-bit AdamW, vec=4: 126 of 128) and so limits
  // occupancy.
  Expected<std::string> warp_block_vector_loop() {
    const std::string I = L_.i64(), U = L_.u32(), F = L_.value_type(DType::f32),
                      lid = L_.local_id();
    const int64_t QB = ir::quant_block(plan_.buffers);
    const int V = warp_vectors(), K = static_cast<int>(QB / (32 * V)),
              G = std::max(1, launch_.items), shift = std::countr_zero(static_cast<unsigned>(V));
    const std::string FV = L_.vec_type(DType::f32, V);
    auto at = [&](const char* base, int g) { return trip_name(base, g, G); };
    auto per = [&](const char* base, uint32_t b, int g) { return trip_name(base, b, g, G); };
    // Item k: the vector from element 32 V (k % K) + V lane of the trip's block k / K; i<k> its
    // first element in the chunk, r<k> how many of its elements the block holds (<= 0: none).
    auto ix = [](int k) { return fmt::format("i{}", k); };
    auto rest = [](int k) { return fmt::format("r{}", k); };
    auto vix = [&](int k) { return fmt::format("({} >> {})", ix(k), shift); };
    // Element e of item k, and the guard of a statement about it (none for the first element,
    // which an item with r > 0 always holds).
    auto el = [&](int k, int e) { return e == 0 ? ix(k) : fmt::format("{} + {}", ix(k), e); };
    auto inside = [&](int k, int e) {
      return e == 0 ? std::string() : fmt::format("if ({} > {}) ", rest(k), e);
    };
    // Code word w of item k's codes: 8-bit codes in words of up to 4 bytes, 4-bit ones in one
    // word of V / 2 bytes; and where code e of the item sits (word, shift).
    auto word_bytes = [&](uint32_t b) { return bits(b) == 4 ? V / 2 : std::min(V, 4); };
    auto words = [&](uint32_t b) { return bits(b) == 4 ? 1 : (V + 3) / 4; };
    auto code_place = [&](uint32_t b, int e) -> std::pair<int, int> {
      if (bits(b) == 4) return {0, 8 * (e / 2) + (e % 2 == 0 ? 4 : 0)};
      return {e / 4, 8 * (e % 4)};
    };
    auto word_byte = [&](uint32_t b, int k, int w) {
      return bits(b) == 4 ? fmt::format("({} >> 1)", ix(k)) : el(k, 4 * w);
    };
    // Staging (GpuLaunch::stage): a warp's trip of inputs in shared memory, at stage_at(b)
    // bytes from the trip's start, then the scales of the quantized ones, each part padded to
    // 16 bytes; staged: the trip is whole inside the chunk (and so was copied), sd: its copy.
    const Staging st = staging();
    if (st.trips > 0) {
      // The kernel's other shared memory: its reductions' arrays and the code tables' copies.
      int64_t other = shared_bytes_;
      if (launch_.shared_tables)
        for (const ConstantTable& t : constant_tables(plan_))
          other += 4 * static_cast<int64_t>(t.values.size());
      if (const int64_t ring = int64_t{st.trips} * st.bytes * (launch_.block / 32);
          ring + other > 48 * 1024)
        return make_error(
            "stage={}: {} trips of {} bytes for each of a block's {} warps take {} bytes of "
            "shared memory, which with the kernel's other {} bytes (code tables, reductions) is "
            "more than the 48 KiB a block declares; stage fewer trips, or take fewer items or "
            "threads",
            st.trips, st.trips, st.bytes, launch_.block / 32, ring, other);
    }
    auto shared_word = [&](uint32_t b, const std::string& byte, int bytes) {
      const std::string address = fmt::format("sd + {} + ({})", st.at.at(b), byte);
      return bytes == 1 ? fmt::format("((unsigned int)*({}))", address)
                        : fmt::format("((unsigned int)*(const {}*)({}))",
                                      bytes == 2 ? "unsigned short" : "unsigned int", address);
    };
    auto staged_byte = [&](uint32_t b, int k, int w) {
      return bits(b) == 4 ? fmt::format("({} - e0) >> 1", ix(k))
                          : fmt::format("{} - e0", el(k, 4 * w));
    };
    // Item k's whole vectors into L<b>_<k>, quantized buffers dequantized: from global memory,
    // or from the trip's copy in shared memory (staged).
    auto whole_vectors = [&](int k, const std::string& in, bool from_stage) {
      std::string s;
      const int g = k / K;
      for (uint32_t b : loads_) {
        const std::string Lb = fmt::format("L{}_{}", b, k);
        if (!quantized(b)) {
          s += fmt::format("{}  {} = {};\n", in, Lb,
                           from_stage ? fmt::format("((const {}*)(sd + {}))[({} - e0) >> {}]",
                                                    vec_type(b, V), st.at.at(b), ix(k), shift)
                                      : load(b, V, vix(k)));
          continue;
        }
        for (int w = 0; w < words(b); ++w)
          s += in + "  " +
               L_.let(U, fmt::format("W{}_{}_{}", b, k, w),
                      from_stage ? shared_word(b, staged_byte(b, k, w), word_bytes(b))
                                 : L_.code_word(b, word_byte(b, k, w), word_bytes(b))) +
               "\n";
        for (int e = 0; e < V; ++e) {
          const auto [w, sh] = code_place(b, e);
          const std::string word = fmt::format("W{}_{}_{}", b, k, w);
          const std::string code = bits(b) == 4 ? fmt::format("(({} >> {}u) & 15u)", word, sh)
                                                : L_.byte_of(word, sh / 8);
          s += fmt::format("{}  {} = {};\n", in, L_.lane(Lb, e, V),
                           value_of(b, code, per("sc", b, g)));
        }
      }
      return s;
    };
    // Item k's loads into L<b>_<k>, quantized buffers dequantized.
    auto loads = [&](int k, const std::string& in) {
      std::string s;
      if (loads_.empty()) return s;
      const int g = k / K;
      for (uint32_t b : loads_)
        s += in + L_.var(quantized(b) ? FV : vec_type(b, V), fmt::format("L{}_{}", b, k)) + "\n";
      // A staged trip's vectors from its copy in shared memory.
      if (st.trips > 0) s += in + "if (staged) {\n" + whole_vectors(k, in, true) + in + "} else ";
      s += fmt::format("{}if ({} >= {}) {{\n", st.trips > 0 ? "" : in, rest(k), V) +
           whole_vectors(k, in, false);
      // The vector across the block's end: its elements inside, one by one (the others 0).
      s += fmt::format("{}}} else if ({} > 0) {{\n", in, rest(k));
      for (uint32_t b : loads_)
        for (int e = 0; e < V; ++e) {
          const std::string lane = L_.lane(fmt::format("L{}_{}", b, k), e, V);
          const std::string value =
              quantized(b) ? dequantized(b, el(k, e), per("sc", b, g)) : load(b, 1, el(k, e));
          s += e == 0 ? fmt::format("{}  {} = {};\n", in, lane, value)
                      : fmt::format("{}  {} = {} > {} ? {} : {};\n", in, lane, rest(k), e, value,
                                    quantized(b) ? "0.0f" : "0");
        }
      s += in + "}\n";
      return s;
    };
    // Item k through the body, each element inside the block (lanes past its end compute
    // nothing: a reduction must not see them): its quantized values kept in Q<b>_<k> and their
    // absmax taken (one sweep); only their absmax (probe: no stores, no reductions); or its
    // values stored, quantized ones kept for their codes (finish).
    enum class Sweep { whole, probe, finish };
    auto body = [&](int k, Sweep sweep, const std::string& in) -> Expected<std::string> {
      std::string s = fmt::format("{}if ({} > 0) {{\n", in, rest(k));
      for (uint32_t b : stores_)
        s += in + "  " + L_.var(quantized(b) ? FV : vec_type(b, V), fmt::format("S{}", b)) + "\n";
      element_indices_ = true;
      probe_ = sweep == Sweep::probe;
      // Element e's quantized values into Q<b>_<k> (kept, unless probing) and into the block's
      // absmax (taken, unless finishing), a buffer at a time.
      auto kept_taken = [&](int e, const std::string& pad, bool keep, bool take) {
        std::string out;
        for (uint32_t b : stores_) {
          if (!quantized(b)) continue;
          const std::string value = L_.lane(fmt::format("S{}", b), e, V);
          if (keep && sweep != Sweep::probe)
            out +=
                fmt::format("{}{} = {};\n", pad, L_.lane(fmt::format("Q{}_{}", b, k), e, V), value);
          if (take && sweep != Sweep::finish)
            out += fmt::format("{}{} = {};\n", pad, per("am", b, k / K),
                               max_u32(per("am", b, k / K),
                                       fmt::format("(OPTJIT_F32_BITS({}) & 0x7fffffffu)", value)));
        }
        return out;
      };
      // Element by element, each inside the block (`pad` before each element's braces).
      auto one_by_one = [&](const std::string& pad) -> Status {
        for (int e = 0; e < V; ++e) {
          s += fmt::format("{}{}{{\n", pad, inside(k, e));
          size_t r = 0;
          for (size_t n = 0; n < body_->insts.size(); ++n) {
            auto line = statement(n, r, k, e, V);
            if (!line) return line.error();
            if (!line->empty()) s += pad + "  " + *line + "\n";
          }
          s += kept_taken(e, pad + "  ", true, true) + pad + "}\n";
        }
        return Status::Ok();
      };
      // Interleaved (a whole vector): statement by statement, the vector's elements side by
      // side, with branch-free divisions and square roots; the reductions and absmax only where
      // all of those were exact (ok), in the elements' order, as one by one adds them.
      // Otherwise, or across the block's end, one by one.
      auto side_by_side = [&](const std::string& pad) -> Status {
        std::vector<std::string> reduced(static_cast<size_t>(V));
        size_t r = 0;
        for (size_t n = 0; n < body_->insts.size(); ++n) {
          const size_t r0 = r;
          const bool reduction = ir::info(body_->insts[n].op).kind == OpKind::reduce;
          for (int e = 0; e < V; ++e) {
            r = r0;
            suffix_ = fmt::format("_{}", e);
            auto line = statement(n, r, k, e, V);
            suffix_.clear();
            if (!line) return line.error();
            if (line->empty()) continue;
            if (reduction)
              reduced[static_cast<size_t>(e)] += pad + "    " + *line + "\n";
            else
              s += pad + "  " + *line + "\n";
          }
        }
        for (int e = 0; e < V; ++e) s += kept_taken(e, pad + "  ", true, false);
        s += pad + "  if (ok) {\n";
        for (int e = 0; e < V; ++e)
          s += reduced[static_cast<size_t>(e)] + kept_taken(e, pad + "    ", false, true);
        s += pad + "    done = true;\n" + pad + "  }\n";
        return Status::Ok();
      };
      Status made = Status::Ok();
      if (launch_.interleave) {
        s += fmt::format(
            "{0}  bool done = false;\n{0}  if ({1} >= {2}) {{\n{0}    bool ok = true;\n", in,
            rest(k), V);
        made = side_by_side(in + "  ");
        s += fmt::format("{0}  }}\n{0}  if (!done) {{\n", in);
        if (made) made = one_by_one(in + "    ");
        s += in + "  }\n";
      } else {
        made = one_by_one(in + "  ");
      }
      element_indices_ = probe_ = false;
      if (!made) return made.error();
      for (uint32_t b : stores_) {
        if (quantized(b) || sweep == Sweep::probe) continue;
        s += fmt::format("{0}  if ({1} >= {2}) {{\n{0}    {3}\n{0}  }} else {{\n", in, rest(k), V,
                         store(b, V, vix(k)));
        for (int e = 0; e < V; ++e)
          s += fmt::format("{}    {}p{}[{}] = {};\n", in, inside(k, e), b, el(k, e),
                           L_.lane(fmt::format("S{}", b), e, V));
        s += in + "  }\n";
      }
      return s + in + "}\n";
    };
    // Item k's codes of quantized buffer b, from Q<b>_<k> and the block's new scale. Whole: the
    // codes as words. Across the end: 8-bit codes one by one; 4-bit ones a byte (two codes) at
    // a time, the half past the end 0 (codes only of elements inside).
    auto codes = [&](uint32_t b, int k, const std::string& in) {
      auto code = [&](int e) {
        return code_of(b, L_.lane(fmt::format("Q{}_{}", b, k), e, V), per("sb", b, k / K));
      };
      std::string s = fmt::format("{}if ({} >= {}) {{\n", in, rest(k), V);
      for (int e = 0; e < V; ++e)
        s += in + "  " + L_.let(U, fmt::format("c{}_{}_{}", b, k, e), code(e)) + "\n";
      for (int w = 0; w < words(b); ++w) {
        std::string word;
        for (int e = 0; e < V; ++e) {
          const auto [we, sh] = code_place(b, e);
          if (we != w) continue;
          const std::string c = fmt::format("c{}_{}_{}", b, k, e);
          word += (word.empty() ? "" : " | ") + (sh == 0 ? c : fmt::format("({} << {}u)", c, sh));
        }
        s += in + "  " + L_.store_code_word(b, word_byte(b, k, w), word_bytes(b), word) + "\n";
      }
      s += fmt::format("{}}} else if ({} > 0) {{\n", in, rest(k));
      const int step = bits(b) == 4 ? 2 : 1;
      for (int e = 0; e < V; e += step) {
        std::string unit = code(e);
        if (bits(b) == 4)
          unit = fmt::format("({} << 4u) | ({})", unit,
                             L_.select(fmt::format("{} > {}", rest(k), e + 1), code(e + 1), "0u"));
        s += fmt::format(
            "{}  {}{}\n", in, inside(k, e),
            L_.store_codes(b, bits(b) == 4 ? "(" + el(k, e) + ") >> 1" : el(k, e), unit));
      }
      return s + in + "}\n";
    };
    // Q<b>_<k>: item k's values of quantized buffer b, kept for their codes.
    auto quantized_values = [&](uint32_t b, int k, const std::string& in) {
      return in + L_.var(FV, fmt::format("Q{}_{}", b, k)) + "\n";
    };

    const std::string first = trip_first(), stride = std::to_string(trip_stride());
    const std::string in = "        ", in2 = "          ";
    std::string s = "      " + L_.let(I, "lane", L_.cast(I, "(" + lid + " & 31u)")) + "\n";
    if (st.trips > 0) {
      // The warp's ring of staged trips; the first `trips` trips' copies issued.
      s += fmt::format(
          "      __align__(16) {}unsigned char optjit_stage[{}];\n"
          "      unsigned char* const stg = optjit_stage + {} * {};\n",
          L_.local(), int64_t{st.trips} * st.bytes * (launch_.block / 32),
          L_.cast(I, "(" + lid + " >> 5u)"), int64_t{st.trips} * st.bytes);
      for (int j = 0; j < st.trips; ++j)
        s += stage_copies(st, fmt::format("{} + {}", first, int64_t{j} * trip_stride()),
                          std::to_string(j), "      ");
      s += "      int sj = 0;\n";
    }
    s += fmt::format("      {} {{\n",
                     L_.for_head(I, "e0", first, "e0 < len", fmt::format("e0 += {}", stride)));
    s += l2_ahead("e0", in.c_str());
    s += trip_geometry("e0", "", in.c_str(), G);
    if (st.trips > 0)
      // This trip's copies have arrived (all but the newest trips - 1 groups), and every
      // lane's are visible to the warp.
      s += fmt::format(
          "{0}optjit_cp_wait<{1}>();\n{0}__syncwarp();\n{0}const bool staged = e0 + {2} <= "
          "len;\n{0}const unsigned char* const sd = stg + sj * {3};\n",
          in, st.trips - 1, trip_elements(), st.bytes);
    for (uint32_t b : loads_)
      if (quantized(b))
        for (int g = 0; g < G; ++g) {
          std::string scale = g == 0 ? L_.scale_at(b, at("blk", g))
                                     : L_.select(fmt::format("{} > 0", at("n", g)),
                                                 L_.scale_at(b, at("blk", g)), "0.0f");
          if (st.trips > 0)
            scale = L_.select(
                "staged",
                fmt::format("((const float*)(sd + {}))[{}]", st.scales, st.first_scale.at(b) + g),
                scale);
          s += in + L_.let(F, per("sc", b, g), scale) + "\n";
        }
    auto place = [&](int k) {
      const std::string within = fmt::format("lane * {} + {}", V, 32 * V * (k % K));
      return in + L_.let(I, ix(k), fmt::format("e0 + {} + {}", (k / K) * QB, within)) + "\n" + in +
             L_.let(I, rest(k), fmt::format("{} - ({})", at("n", k / K), within)) + "\n";
    };
    auto absmaxes = [&](uint32_t b) {
      std::string out;
      for (int g = 0; g < G; ++g) out += in + L_.var(U, per("am", b, g), "0u") + "\n";
      return out;
    };
    // The buffers this pass quantizes; their exchanges all side by side (interleave), else
    // each buffer's by itself (before its codes, in one sweep).
    std::vector<uint32_t> qs;
    for (uint32_t b : stores_)
      if (quantized(b)) qs.push_back(b);
    if (!launch_.recompute) {
      // Every load first, so that all are in flight at once; the values kept for the codes.
      for (int k = 0; k < K * G; ++k) s += place(k) + loads(k, in);
      for (uint32_t b : qs) {
        s += absmaxes(b);
        for (int k = 0; k < K * G; ++k) s += quantized_values(b, k, in);
      }
      for (int k = 0; k < K * G; ++k) {
        auto b = body(k, Sweep::whole, in);
        if (!b) return b.error();
        s += *b;
      }
      if (launch_.interleave) s += trip_scales(qs, G);
      for (uint32_t b : qs) {
        if (!launch_.interleave) s += trip_scales({b}, G);
        for (int k = 0; k < K * G; ++k) s += codes(b, k, in);
      }
    } else {
      for (int k = 0; k < K * G; ++k) s += place(k);
      for (uint32_t b : qs) s += absmaxes(b);
      // The absmax: every load first, then the values, in a scope of their own.
      s += in + "{\n";
      for (int k = 0; k < K * G; ++k) s += loads(k, in2);
      for (int k = 0; k < K * G; ++k) {
        auto b = body(k, Sweep::probe, in2);
        if (!b) return b.error();
        s += *b;
      }
      s += in + "}\n";
      if (launch_.interleave)
        s += trip_scales(qs, G);
      else
        for (uint32_t b : qs) s += trip_scales({b}, G);
      // Each vector again: loaded, computed, stored and quantized.
      for (int k = 0; k < K * G; ++k) {
        s += in + "{\n" + loads(k, in2);
        for (uint32_t b : qs) s += quantized_values(b, k, in2);
        auto finish = body(k, Sweep::finish, in2);
        if (!finish) return finish.error();
        s += *finish;
        for (uint32_t b : qs) s += codes(b, k, in2);
        s += in + "}\n";
      }
    }
    if (st.trips > 0) {
      // Every lane is done with this trip's copy: the trip `trips` ahead into its place.
      s += in + "__syncwarp();\n" +
           stage_copies(st, fmt::format("e0 + {}", int64_t{st.trips} * trip_stride()), "sj", in);
      s += fmt::format("{0}sj = sj == {1} ? 0 : sj + 1;\n", in, st.trips - 1);
    }
    s += "      }\n";
    return s;
  }

  // The shared-memory layout of a warp's staged trip (GpuLaunch::stage): each loaded buffer's
  // bytes of the trip at at[b] (codes for quantized ones), then the quantized ones' scales from
  // `scales`, a float per block of the trip, buffer b's from index first_scale[b]; every part
  // 16-byte aligned, `bytes` in all.
  struct Staging {
    int trips = 0;
    std::map<uint32_t, int64_t> at;
    std::map<uint32_t, int> first_scale;
    int64_t scales = 0, bytes = 0;
  };
  Staging staging() const {
    Staging st;
    if (launch_.stage == 0 || loads_.empty()) return st;
    st.trips = launch_.stage;
    auto pad = [](int64_t n) { return (n + 15) / 16 * 16; };
    for (uint32_t b : loads_) {
      st.at[b] = st.bytes;
      st.bytes += pad(part_bytes(b));
    }
    st.scales = st.bytes;
    int n = 0;
    for (uint32_t b : loads_)
      if (quantized(b)) {
        st.first_scale[b] = n;
        n += std::max(1, launch_.items);
      }
    st.bytes += pad(4 * int64_t{n});
    return st;
  }
  // Bytes of buffer b a trip holds (codes of a quantized one).
  int64_t part_bytes(uint32_t b) const {
    return quantized(b)
               ? trip_elements() * bits(b) / 8
               : trip_elements() * static_cast<int64_t>(size_bytes(plan_.buffers[b].storage));
  }
  // The copies of the trip from element `e` of the chunk into slot `slot` of the warp's ring, in
  // 16-byte pieces spread over the lanes (scales 4 bytes a lane), issued only where the trip is
  // whole inside the chunk; and the group closed either way, so that every trip has one.
  std::string stage_copies(const Staging& st, const std::string& e, const std::string& slot,
                           const std::string& in) const {
    const int64_t QB = ir::quant_block(plan_.buffers);
    std::string s = fmt::format(
        "{0}if ({1} + {2} <= len) {{\n{0}  unsigned char* const d = stg + "
        "({3}) * {4};\n",
        in, e, trip_elements(), slot, st.bytes);
    for (uint32_t b : loads_) {
      const int64_t pieces = part_bytes(b) / 16;
      const std::string from = quantized(b)
                                   ? fmt::format("(const unsigned char*)(q{} + (({}){}))", b, e,
                                                 bits(b) == 4 ? " >> 1" : "")
                                   : fmt::format("(const unsigned char*)(p{} + ({}))", b, e);
      for (int64_t t = 0; t * 32 < pieces; ++t) {
        const std::string piece = t == 0 ? "lane" : fmt::format("(lane + {})", 32 * t);
        const std::string copy = fmt::format("optjit_cp_async16(d + {} + 16 * {}, {} + 16 * {});",
                                             st.at.at(b), piece, from, piece);
        s += pieces - 32 * t >= 32 ? fmt::format("{}  {}\n", in, copy)
                                   : fmt::format("{0}  if ({1} < {2}) {{\n{0}    {3}\n{0}  }}\n",
                                                 in, piece, pieces, copy);
      }
    }
    // Scale j (block g of buffer b) by lane j.
    for (uint32_t b : loads_)
      if (quantized(b))
        for (int g = 0; g < std::max(1, launch_.items); ++g) {
          const int j = st.first_scale.at(b) + g;
          s += fmt::format(
              "{0}  if (lane == {1}) {{\n{0}    optjit_cp_async4(d + {2}, &{3});\n{0}  }}\n", in, j,
              st.scales + 4 * j,
              L_.scale_at(b, block_index(fmt::format("off + {} + {}", e, g * QB))));
        }
    return s + in + "}\n" + in + "optjit_cp_commit();\n";
  }

  // Work-group arrays of the block loop: a buffer's staged values, and the absmax reduction's.
  std::string shared_name(const char* base) const {
    return L_.shared_at_module_scope() ? fmt::format("{}_{}", base, k_) : base;
  }
  std::string qv(uint32_t b) const { return shared_name(fmt::format("qv{}", b).c_str()); }
  int bits(uint32_t b) const { return ir::info(plan_.buffers[b].quant).bits; }

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
    const ir::Inst& in = body_->at(id);
    if (in.op == Op::Uniform) return L_.uniform_name(in.attr);
    if (in.op == Op::Const) return literal(in.imm, in.type);
    return fmt::format("v{}{}", index(id), suffix_);
  }

  std::string convert(const std::string& x, DType from, DType to) const {
    std::string ft = L_.value_type(from), tt = L_.value_type(to);
    if (ft == tt) return x;
    if (to == DType::b1) return fmt::format("({} != 0)", x);
    return L_.cast(tt, x);
  }

  Expected<std::string> statement(size_t n, size_t& r, int item, int lane, int w) {
    const ir::Inst& in = body_->insts[n];
    auto a = [&](int k) { return v(in.args[k]); };
    auto at = [&](int k) { return body_->at(in.args[k]).type; };
    const std::string T = L_.value_type(in.type);
    auto def = [&](const std::string& e) { return L_.let(T, fmt::format("v{}{}", n, suffix_), e); };
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
        // An f64 into f16 or bf16: rounded once, as the reference's (Lang::rounded).
        const bool odd = at(0) == DType::f64 && (st == DType::f16 || st == DType::bf16);
        const std::string x32 =
            odd ? fmt::format("optjit_f32_odd({})", x) : convert(x, at(0), DType::f32);
        if (st == DType::f16 && !L_.half_loads_convert())
          return fmt::format("{} = OPTJIT_F32_TO_F16({});", to, x32);
        if (st == DType::f16) return fmt::format("{} = {};", to, x32);
        if (st == DType::bf16)
          return fmt::format(
              "{} = {};", to,
              L_.cast(L_.storage_type(st), fmt::format("OPTJIT_BF16_BITS({})", x32)));
        if (st == DType::u16)
          return fmt::format("{} = {};", to, L_.cast(L_.storage_type(st), L_.u16_of(x, at(0))));
        return fmt::format("{} = {};", to, convert(x, at(0), st));
      }
      case OpKind::reduce: {
        size_t q = r++;
        if (probe_) return std::string();
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
        // Casts to f16 and bf16 round there (their values live in f32 registers), and casts to
        // i64 saturate (Inf and NaN are 0), as the reference's casts (ir::round_to).
        if (is_float(at(0)) && (in.type == DType::f16 || in.type == DType::bf16))
          return def(L_.rounded(in.type, at(0), a(0)));
        if (is_float(at(0)) && in.type == DType::i64) return def(L_.i64_of(a(0), at(0)));
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
              return def(L_.i64_arithmetic(a(0), '+', a(1)));
            case Op::Sub:
              return def(L_.i64_arithmetic(a(0), '-', a(1)));
            case Op::Mul:
              return def(L_.i64_arithmetic(a(0), '*', a(1)));
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
          const std::string e = element_indices_ ? fmt::format("off + {} + {}", ix, lane)
                                : w > 1          ? fmt::format("off + {} * {} + {}", ix, w, lane)
                                                 : fmt::format("off + {}", ix);
          auto f64 = [&](int k) {
            const ir::Inst& u = body_->at(in.args[k]);
            return Lang::F64Operand{a(k), u.op == Op::Uniform ? static_cast<int>(u.attr) : -1};
          };
          auto call = L_.sround_call(convert(a(0), at(0), DType::f32), f64(1), f64(2), e, in.attr);
          if (!call) return call.error();
          return def(convert(*call, DType::f32, t));
        }
        std::vector<std::string> args;
        for (int k = 0; k < ir::info(in.op).arity; ++k) args.push_back(a(k));
        // Interleaved elements: f32 division and square root without branches (ok: whether
        // they are exact; the vector is computed again where not).
        // A dividend that is a root computed so, or a constant, lies in the division's range
        // where `ok` holds (or always): optjit_fdiv_by checks only the divisor.
        if (!suffix_.empty() && t == DType::f32) {
          if (in.op == Op::Div) {
            const ir::Inst& dividend = body_->at(in.args[0]);
            const bool ranged = dividend.op == Op::Sqrt ||
                                (dividend.op == Op::Const && std::abs(dividend.imm) >= 0x1p-60 &&
                                 std::abs(dividend.imm) < 0x1p61);
            return def(fmt::format("{}({}, {}, ok)", ranged ? "optjit_fdiv_by" : "optjit_fdiv",
                                   a(0), a(1)));
          }
          if (in.op == Op::Sqrt) return def(fmt::format("optjit_fsqrt({}, ok)", a(0)));
          if (in.op == Op::Rsqrt)
            return def(fmt::format("optjit_fdiv_by(1.0f, optjit_fsqrt({}, ok), ok)", a(0)));
        }
        if (std::string e = detail::float_math(L_, in.op, t, args); !e.empty()) return def(e);
        break;
      }
    }
    return make_error("the {} backend cannot compile '{}' on {}", L_.name(), ir::info(in.op).text,
                      to_string(in.type));
  }

  const plan::Plan& plan_;
  const plan::Pass& pass_;
  const ir::Program* body_ = &pass_.body;  // the body (or version of it) being written
  size_t k_;
  const Lang& L_;
  const GpuLaunch& launch_;  // block, items, vec and the quantized path's options
  bool device_step_;
  // Whether i<item> is the index of a vector's first element (warp_block_vector_loop), not of
  // the vector: the element index of lane l is i<item> + l.
  bool element_indices_ = false;
  // Whether statement() writes a sweep that only takes absmax (warp_block_vector_loop with
  // recompute): reductions add nothing in it (the second sweep adds the same values).
  bool probe_ = false;
  // Interleaved elements (GpuLaunch::interleave): "_<lane>" after the names of the lane's
  // values, whose f32 divisions and square roots are then branch-free; empty otherwise.
  std::string suffix_;
  std::vector<uint32_t> loads_, stores_;  // buffers the pass loads / stores
  std::vector<uint32_t> quant_;           // the block-quantized buffers among them
  std::string module_scope_, shared_;     // shared arrays' declarations (see shared())
  int64_t shared_bytes_ = 0;              // and their bytes
};

}  // namespace

std::vector<ConstantTable> constant_tables(const plan::Plan& plan) {
  const std::vector<ir::Quant> formats = quant_formats(plan);
  // Floats as their bit patterns (fp8's map has NaNs, which no constant initializer spells).
  auto bits = [](std::span<const float> v) {
    std::vector<uint32_t> out;
    for (float f : v) out.push_back(std::bit_cast<uint32_t>(f));
    return out;
  };
  std::vector<ConstantTable> tables;
  for (ir::Quant q : formats) {
    const ir::QuantInfo& qi = ir::info(q);
    const std::string name(ir::to_string(q));
    // A linear map and its midpoints are computed (dequantized, ir::linear_code), not read.
    if (!ir::linear_map(qi.map)) tables.push_back({"optjit_map_" + name, bits(qi.map)});
    if (qi.kind == ir::QuantKind::nearest && !ir::linear_thresholds(qi))
      tables.push_back({"optjit_thr_" + name, bits(qi.thresholds)});
    if (qi.kind == ir::QuantKind::table)
      tables.push_back({"optjit_lut_" + name, qi.compact->entries});
  }
  return tables;
}

Expected<std::string> emit_c(const plan::Plan& plan, CEmitOptions o) {
  OPTJIT_TRY(o.launch.validate());
  const Lang& L = Lang::of(o.language);
  if (std::string why = L.unsupported(plan, o.device_step); !why.empty())
    return make_error("{}", why);
  std::string s = fmt::format(
      "// optjit: {} passes, {} bytes per parameter, block {}, items {}, vector {}\n",
      plan.passes.size(), plan.bytes_per_param(), o.launch.block, o.launch.items, o.launch.vec);
  if (o.launch.shared_tables && L.module_shared_u32("t", 1).empty())
    return make_error(
        "the {} backend reads its code tables from constant memory: tables=shared is CUDA's",
        L.name());
  if (o.launch.resident != GpuLaunch::kDefaultResident && o.language != CLanguage::cuda)
    return make_error("the {} backend has no launch bounds: resident={} (threads per SM) is CUDA's",
                      L.name(), o.launch.resident);
  // The options of CUDA's warps' quantized path, where a language quantizes a block per
  // work-group instead.
  const bool warps = !L.warp_xor_u32("x", 1).empty();
  for (const auto& [set, there, option, path] :
       {std::tuple{o.launch.recompute, warps, "recompute", "its warps' quantized path"},
        std::tuple{o.launch.interleave, !L.branch_free_helpers().empty(), "interleave",
                   "its warps' quantized path in vectors"},
        std::tuple{o.launch.prefetch, warps, "prefetch", "its warps' quantized path"}})
    if (set && !there)
      return make_error(
          "the {} backend quantizes a block per work-group through local memory: {}=1 is CUDA's "
          "({})",
          L.name(), option, path);
  if (o.launch.stage > 0 && L.async_copy_helpers().empty())
    return make_error(
        "the {} backend has no asynchronous copies into shared memory: stage={} is CUDA's",
        L.name(), o.launch.stage);
  if (o.launch.ahead > 0 && L.prefetch_l2("a").empty())
    return make_error("the {} backend has no L2 prefetch: ahead={} is CUDA's", L.name(),
                      o.launch.ahead);
  s += preamble(L, plan, o.launch);
  s += L.arithmetic_helpers(o.division);
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
