// Algorithm: for each pass, emit
//   for c in [begin, end):                      (chunk loop)
//     row = rows[chunks[c].tensor]; base pointers and uniforms from the row
//     for i in [0, chunks[c].length):           (element loop: one block, branch-free)
//       the pass body, instruction by instruction, in order
//     partials[c * R + r] = accumulator r
// Each buffer is its own alias class (distinct buffers never overlap; see make_alias_scopes),
// so the element loop vectorizes without runtime checks. Element math carries no fast-math flags:
// results stay IEEE and comparable with the float64 reference. Only the reduction adds are
// reassociable, which lets them vectorize; their order is still fixed by the compiled code and the
// chunk. max|x| and any-non-finite reduce the bit patterns of |x| with an unsigned max: for
// non-negative floats integer order is float order, and NaN sorts above Inf, so NaN wins.
#include "codegen/llvm_emitter.h"

#include "ir/stochastic_round.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <functional>

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsX86.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include <map>
#include <optional>

namespace optjit::codegen {

namespace {

using ir::Op;
using ir::OpKind;

// A table quantizer's lut (65536 cells -> codes, never decreasing) as byte tables that 64-lane
// byte permutes look up: the cell i' is split into a bucket h = i' >> 8 and a place
// lo = i' % 256 in it, and
//   code = start[h] + the number of j < steps.size() with lo > steps[j][h],
// where start[h] is the bucket's first code and steps[j][h] + 1 the place where its code steps
// up for the j-th time (255 where it does not: lo never exceeds it). The buckets where the code
// steps more often (around 0, where the map is denser than the cells) are windows, looked up
// cell by cell: code = window[h][lo].
//
// A lut symmetric about its middle (bitsandbytes' signed map: lut[32767 - m] = 254 - lut[32768
// + m], the cells where the positive side gives 255 = 1.0 giving 0) is folded (Fold::mirror):
// i' = m, the distance from the middle (i - 32768 above it, 32767 - i below), in 128 buckets,
// so every table has 128 entries, one permute, not two and a blend; below the middle the code
// is 254 - min(code, 254). In bytes that is cheap: the bucket and place are i's two bytes, each
// xor'ed with 0xff below the middle. A lut constant below its middle (the unsigned map: every
// negative value is code 0) is halved (Fold::half): the upper half's cells in the same 128
// buckets, and the lower half's code where i's top bit is clear. Unfolded (Fold::none), i' = i
// in 256 buckets.
//
// The fold and number of steps are chosen per map to need the fewest instructions; code() is
// what the kernel computes, and build() checks it against the lut for every cell.
struct ByteBuckets {
  enum class Fold { none, mirror, half };
  Fold fold = Fold::none;
  uint8_t below_code = 0;  // half: the code of every cell below the middle
  std::array<uint8_t, 256> start{};
  std::vector<std::array<uint8_t, 256>> steps;
  std::vector<std::pair<uint16_t, std::array<uint8_t, 256>>> windows;

  uint8_t code(uint32_t i) const {
    const bool below = fold != Fold::none && i < 32768u;
    const uint32_t ip = fold == Fold::none ? i : below ? 32767u - i : i - 32768u;
    const uint32_t h = ip >> 8, lo = ip & 255;
    uint32_t c = start[h];
    for (const auto& s : steps) c += lo > s[h] ? 1 : 0;
    for (const auto& [w, cells] : windows)
      if (h == w) c = cells[lo];
    if (below)
      return fold == Fold::half ? below_code : static_cast<uint8_t>(254 - std::min(c, 254u));
    return static_cast<uint8_t>(c);
  }
  // Instructions per 64 cells, roughly: three per table lookup (one folded), two per step, a
  // compare and a blend per window besides its lookup, and four to fold and unfold (two to
  // halve).
  size_t cost() const {
    const size_t lookup = fold == Fold::none ? 3 : 1;
    const size_t folding = fold == Fold::mirror ? 4 : fold == Fold::half ? 2 : 0;
    return lookup * (1 + steps.size()) + 2 * steps.size() + 5 * windows.size() + folding;
  }

  static std::optional<ByteBuckets> build(const std::array<uint8_t, 65536>& lut) {
    std::optional<ByteBuckets> best;
    for (const Fold fold : {Fold::none, Fold::mirror, Fold::half}) {
      // The cells in the cut's order (folded: the upper half; build checks the lower).
      const uint32_t first = fold == Fold::none ? 0u : 32768u, span = 65536u - first;
      auto cell = [&](uint32_t ip) { return lut[first + ip]; };
      // Each bucket's steps (a step by two codes counts twice), at their place.
      const uint32_t buckets = span >> 8;
      std::array<std::vector<uint8_t>, 256> at;
      for (uint32_t ip = 1; ip < span; ++ip)
        if ((ip & 255) != 0)
          for (int d = cell(ip) - cell(ip - 1); d > 0; --d)
            at[ip >> 8].push_back(static_cast<uint8_t>((ip & 255) - 1));
      for (size_t k = 0; k <= 8; ++k) {
        ByteBuckets b;
        b.fold = fold;
        b.below_code = lut[32767];
        b.steps.assign(k, {});
        for (auto& s : b.steps) s.fill(255);
        for (uint32_t h = 0; h < buckets; ++h) {
          b.start[h] = cell(h << 8);
          if (at[h].size() <= k) {
            for (size_t j = 0; j < at[h].size(); ++j) b.steps[j][h] = at[h][j];
            continue;
          }
          std::array<uint8_t, 256> cells{};
          for (uint32_t c = 0; c < 256; ++c) cells[c] = cell(h * 256u + c);
          b.windows.emplace_back(static_cast<uint16_t>(h), cells);
        }
        bool exact = true;
        for (uint32_t i = 0; i < 65536u && exact; ++i) exact = b.code(i) == lut[i];
        if (exact && (!best || b.cost() < best->cost())) best = std::move(b);
      }
    }
    return best;
  }
};

class PassEmitter {
 public:
  PassEmitter(const plan::Plan& plan, size_t k, llvm::Module& m, int interleave)
      : plan_(plan),
        pass_(plan.passes[k]),
        k_(k),
        interleave_(interleave),
        m_(m),
        c_(m.getContext()),
        b_(c_) {}

  Status emit(const std::string& cpu, const std::string& features) {
    auto* ptr = b_.getPtrTy();
    auto* i64 = b_.getInt64Ty();
    auto* fty = llvm::FunctionType::get(b_.getVoidTy(), {ptr, ptr, i64, i64, ptr}, false);
    fn_ = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, pass_symbol(k_), m_);
    fn_->addFnAttr(llvm::Attribute::NoUnwind);
    if (!cpu.empty()) fn_->addFnAttr("target-cpu", cpu);
    if (!features.empty()) fn_->addFnAttr("target-features", features);
    // "+f1,-f2,...", the last mention of a feature winning: the permutes the quantized paths
    // use (VBMI implies BW, so a CPU without BW has neither), whether gathers are fast, and the
    // vector width of f16 passes.
    for (size_t a = 0; a < features.size();) {
      const size_t e = std::min(features.find(',', a), features.size());
      const std::string f = features.substr(a, e - a);
      for (auto [name, flag] : {std::pair{"avx512vbmi", &vbmi_},
                                {"avx512bw", &avx512bw_},
                                {"avx512f", &avx512f_},
                                {"avx2", &avx2_},
                                {"fast-gather", &fast_gather_},
                                {"prefer-256-bit", &prefer256_}})
        if (f.size() > 1 && f.substr(1) == name) *flag = f[0] == '+';
      a = e + 1;
    }
    vbmi_ = vbmi_ && avx512bw_;
    gathers_ = avx2_ && !avx512f_;
    for (unsigned a : {0u, 1u}) fn_->addParamAttr(a, llvm::Attribute::ReadOnly);
    for (unsigned a : {0u, 1u, 4u}) fn_->addParamAttr(a, llvm::Attribute::NoAlias);
    llvm::Value* rows = fn_->getArg(0);
    llvm::Value* chunks = fn_->getArg(1);
    llvm::Value* begin = fn_->getArg(2);
    llvm::Value* end = fn_->getArg(3);
    llvm::Value* partials = fn_->getArg(4);
    rows->setName("rows");
    chunks->setName("chunks");
    partials->setName("partials");
    make_alias_scopes();

    auto* entry = llvm::BasicBlock::Create(c_, "entry", fn_);
    auto* chunk_head = llvm::BasicBlock::Create(c_, "chunk", fn_);
    auto* chunk_body = llvm::BasicBlock::Create(c_, "chunk.body", fn_);
    auto* done = llvm::BasicBlock::Create(c_, "done", fn_);

    b_.SetInsertPoint(entry);
    b_.CreateBr(chunk_head);

    b_.SetInsertPoint(chunk_head);
    llvm::PHINode* c = b_.CreatePHI(i64, 2, "c");
    c->addIncoming(begin, entry);
    b_.CreateCondBr(b_.CreateICmpSLT(c, end), chunk_body, done);

    // Chunk set-up: row, base pointers, uniforms, reduction identities.
    b_.SetInsertPoint(chunk_body);
    auto* chunk_ty = llvm::ArrayType::get(i64, 3);
    llvm::Value* chunk = b_.CreateInBoundsGEP(chunk_ty, chunks, c, "chunk.ptr");
    auto field = [&](int f, const char* name) {
      return table_load(i64, b_.CreateConstInBoundsGEP2_32(chunk_ty, chunk, 0, f), name);
    };
    llvm::Value* tensor = field(0, "tensor");
    llvm::Value* offset = field(1, "offset");
    offset_ = offset;
    llvm::Value* length = field(2, "length");
    auto* row_ty = llvm::StructType::get(c_, {ptr, ptr});
    llvm::Value* row = b_.CreateInBoundsGEP(row_ty, rows, tensor, "row");
    llvm::Value* bufs = table_load(ptr, b_.CreateStructGEP(row_ty, row, 0), "buffers");
    llvm::Value* unis = table_load(ptr, b_.CreateStructGEP(row_ty, row, 1), "uniforms");
    for (const auto& in : pass_.body.insts) {
      if (in.op != Op::Load && in.op != Op::Store) continue;
      if (base_.count(in.attr)) continue;  // a quantized buffer's base: its plain f32 values
      llvm::Value* p = table_load(ptr, b_.CreateConstInBoundsGEP1_64(ptr, bufs, in.attr), "buf");
      base_[in.attr] = b_.CreateInBoundsGEP(storage_type(plan_.buffers[in.attr].storage), p, offset,
                                            plan_.buffers[in.attr].name + ".base");
    }
    uniform_.assign(pass_.uniforms.size(), nullptr);
    for (const auto& in : pass_.body.insts) {
      if (in.op != Op::Uniform) continue;
      llvm::Value* d = table_load(
          b_.getDoubleTy(), b_.CreateConstInBoundsGEP1_64(b_.getDoubleTy(), unis, in.attr), "u");
      uniform_[in.attr] = convert(d, DType::f64, in.type);
    }
    // Reduction accumulators: their identities, carried through the loops below as values.
    std::vector<size_t> acc_inst;
    std::vector<llvm::Value*> acc_init;
    for (size_t n = 0; n < pass_.body.insts.size(); ++n) {
      const auto& in = pass_.body.insts[n];
      if (ir::info(in.op).kind != OpKind::reduce) continue;
      acc_inst.push_back(n);
      acc_init.push_back(llvm::Constant::getNullValue(acc_type(in)));
    }
    // Block-quantized buffers: codes and scales (null for a tensor too small to quantize,
    // whose state is plain f32: every quantized buffer of a tensor is one or the other).
    llvm::Value* plain = nullptr;
    for (const auto& in : pass_.body.insts) {
      if ((in.op != Op::Load && in.op != Op::Store) || quant(in.attr) == ir::Quant::none) continue;
      // A block's staging array in the function's entry, aligned as a vector: whole-vector
      // accesses split no cache line (a split load straight after a split store waits for it:
      // 6% of a 4-bit step when the unpacked codes sat at 0x18(%rsp)).
      auto block_array = [&](llvm::Type* elem, const char* suffix) {
        llvm::IRBuilder<> at_entry(entry, entry->begin());
        auto* a = at_entry.CreateAlloca(llvm::ArrayType::get(elem, static_cast<uint64_t>(block())),
                                        nullptr, plan_.buffers[in.attr].name + suffix);
        a->setAlignment(llvm::Align(64));
        return a;
      };
      if (in.op == Op::Store) tmp_[in.attr] = block_array(b_.getFloatTy(), ".block");
      if (in.op == Op::Load && (byte_planes(in.attr) || gathered(in.attr)) &&
          !dequantized_.count(in.attr))
        dequantized_[in.attr] = block_array(b_.getFloatTy(), ".values");
      if (in.op == Op::Load && bits(in.attr) == 4 && !unpacked_.count(in.attr))
        unpacked_[in.attr] = block_array(b_.getInt8Ty(), ".unpacked");
      if (scales_.count(in.attr)) continue;
      llvm::Value* p = table_load(ptr, b_.CreateConstInBoundsGEP1_64(ptr, bufs, in.attr), "codes");
      // 4-bit codes are two to a byte: the chunk (an even offset) starts at byte offset / 2.
      llvm::Value* at = bits(in.attr) == 4 ? b_.CreateLShr(offset, 1) : offset;
      codes_[in.attr] = b_.CreateInBoundsGEP(b_.getInt8Ty(), p, at, "codes.base");
      llvm::Value* sp =
          table_load(ptr, b_.CreateConstInBoundsGEP1_64(ptr, bufs, in.attr + 1), "scales");
      scales_[in.attr] = sp;
      if (!plain) plain = b_.CreateICmpEQ(sp, llvm::ConstantPointerNull::get(ptr), "plain");
    }
    llvm::Value* nonempty = b_.CreateICmpSGT(length, b_.getInt64(0));
    auto* chunk_end = llvm::BasicBlock::Create(c_, "chunk.end", fn_);
    auto* work = llvm::BasicBlock::Create(c_, "work", fn_, chunk_end);
    std::vector<std::pair<llvm::BasicBlock*, std::vector<llvm::Value*>>> arrivals;
    arrivals.emplace_back(b_.GetInsertBlock(), acc_init);
    b_.CreateCondBr(nonempty, work, chunk_end);
    b_.SetInsertPoint(work);
    // The body, or one version of it per value of the pass's guards (plan::Pass::versions),
    // chosen by the tensor's guard uniforms: bit g of the version is guard g.
    std::vector<const ir::Program*> bodies;
    for (const auto& v : pass_.versions) bodies.push_back(&v.body);
    if (bodies.empty()) bodies.push_back(&pass_.body);
    // A version the same as an earlier one (its guard changed nothing there) jumps to it.
    std::vector<size_t> same(bodies.size());
    for (size_t i = 0; i < bodies.size(); ++i) {
      same[i] = i;
      for (size_t j = 0; j < i && same[i] == i; ++j)
        if (*bodies[j] == *bodies[i]) same[i] = j;
    }
    std::vector<llvm::BasicBlock*> starts;
    for (size_t i = 0; i < bodies.size(); ++i)
      starts.push_back(same[i] != i
                           ? starts[same[i]]
                           : llvm::BasicBlock::Create(
                                 c_, bodies.size() == 1 ? "body" : "version" + std::to_string(i),
                                 fn_, chunk_end));
    if (bodies.size() == 1) {
      b_.CreateBr(starts[0]);
    } else {
      llvm::Value* which = b_.getInt32(0);
      for (size_t g = 0; g < pass_.guards.size(); ++g)
        which = b_.CreateOr(
            which, b_.CreateShl(b_.CreateZExt(uniform_.at(pass_.guards[g]), b_.getInt32Ty()),
                                static_cast<uint64_t>(g)));
      auto* sw = b_.CreateSwitch(which, starts[0], static_cast<unsigned>(bodies.size() - 1));
      for (size_t i = 1; i < bodies.size(); ++i)
        sw->addCase(b_.getInt32(static_cast<uint32_t>(i)), starts[i]);
    }
    for (size_t i = 0; i < bodies.size(); ++i) {
      if (same[i] != i) continue;
      body_ = bodies[i];
      b_.SetInsertPoint(starts[i]);
      auto* plain_pre = llvm::BasicBlock::Create(c_, "plain", fn_, chunk_end);
      if (!plain) {
        b_.CreateBr(plain_pre);
      } else {
        auto* blocks = llvm::BasicBlock::Create(c_, "blocks", fn_, chunk_end);
        b_.CreateCondBr(plain, plain_pre, blocks);
        b_.SetInsertPoint(blocks);
        std::vector<llvm::Value*> accs = acc_init;
        OPTJIT_TRY(block_loops(length, accs));
        arrivals.emplace_back(b_.GetInsertBlock(), accs);
        b_.CreateBr(chunk_end);
      }
      // The plain element loop: every element of the chunk, one block, branch-free.
      b_.SetInsertPoint(plain_pre);
      std::vector<llvm::Value*> accs = acc_init;
      std::map<uint32_t, llvm::Value*> amax;
      OPTJIT_TRY(element_loop(length, b_.getInt64(0), false, accs, amax));
      arrivals.emplace_back(b_.GetInsertBlock(), accs);
      b_.CreateBr(chunk_end);
    }
    body_ = &pass_.body;

    // Partials, then the next chunk.
    b_.SetInsertPoint(chunk_end);
    const auto R = static_cast<uint64_t>(acc_inst.size());
    std::vector<llvm::PHINode*> finals;  // all PHIs first: LLVM wants them at the top of the block
    for (size_t r = 0; r < R; ++r) {
      llvm::PHINode* final = b_.CreatePHI(acc_init[r]->getType(), 2, "acc.final");
      for (const auto& [from, vals] : arrivals) final->addIncoming(vals[r], from);
      finals.push_back(final);
    }
    for (size_t r = 0; r < R; ++r) {
      const auto& in = pass_.body.insts[acc_inst[r]];
      llvm::Value* slot =
          b_.CreateInBoundsGEP(b_.getDoubleTy(), partials,
                               b_.CreateAdd(b_.CreateMul(c, b_.getInt64(R)), b_.getInt64(r)));
      b_.CreateStore(finish(in.op, finals[r], pass_.body.at(in.args[0]).type), slot);
    }
    llvm::Value* c_next = b_.CreateAdd(c, b_.getInt64(1), "c.next");
    c->addIncoming(c_next, b_.GetInsertBlock());
    b_.CreateBr(chunk_head);

    b_.SetInsertPoint(done);
    b_.CreateRetVoid();
    std::string err;
    llvm::raw_string_ostream os(err);
    if (llvm::verifyFunction(*fn_, &os))
      return make_error("internal: LLVM rejected pass {}: {}", k_, os.str());
    return Status::Ok();
  }

 private:
  ir::Quant quant(uint32_t buf) const { return plan_.buffers[buf].quant; }
  int bits(uint32_t buf) const { return ir::info(quant(buf)).bits; }
  // The elements of a quantization block: every quantized buffer of a plan shares it.
  int64_t block() const { return ir::quant_block(plan_.buffers); }

  // for (j = 0; j < n; ++j) the pass body on element first + j of the chunk; n >= 1. In
  // `blocked` mode quantized loads dequantize and quantized stores go to the block's f32
  // staging array, with |x| bits max-reduced into amax[buffer] (NaN wins). Leaves the builder
  // in the loop's exit block; accs and amax hold the values there.
  Status element_loop(llvm::Value* n, llvm::Value* first, bool blocked,
                      std::vector<llvm::Value*>& accs, std::map<uint32_t, llvm::Value*>& amax) {
    auto* i64 = b_.getInt64Ty();
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    auto* loop = llvm::BasicBlock::Create(c_, blocked ? "elem.q" : "elem", fn_);
    auto* exit = llvm::BasicBlock::Create(c_, blocked ? "elem.q.exit" : "elem.exit", fn_);
    b_.CreateBr(loop);
    b_.SetInsertPoint(loop);
    llvm::PHINode* j = b_.CreatePHI(i64, 2, "j");
    j->addIncoming(b_.getInt64(0), pre);
    std::vector<llvm::PHINode*> acc_phi;
    for (auto* a : accs) {
      acc_phi.push_back(b_.CreatePHI(a->getType(), 2, "acc"));
      acc_phi.back()->addIncoming(a, pre);
    }
    std::map<uint32_t, llvm::PHINode*> amax_phi;
    for (auto& [buf, a] : amax) {
      amax_phi[buf] = b_.CreatePHI(a->getType(), 2, "amax");
      amax_phi[buf]->addIncoming(a, pre);
    }
    llvm::Value* i = first == nullptr ? j : b_.CreateAdd(first, j, "e", true, true);
    std::vector<llvm::Value*> v(body_->insts.size(), nullptr);
    std::vector<llvm::Value*> acc_next(accs.size(), nullptr);
    std::map<uint32_t, llvm::Value*> amax_next;
    size_t acc_index = 0;
    for (size_t n_ = 0; n_ < body_->insts.size(); ++n_) {
      const ir::Inst& in = body_->insts[n_];
      auto arg = [&](int a) { return v[index(in.args[a])]; };
      auto arg_type = [&](int a) { return body_->at(in.args[a]).type; };
      const bool q =
          blocked && (in.op == Op::Load || in.op == Op::Store) && quant(in.attr) != ir::Quant::none;
      switch (ir::info(in.op).kind) {
        case OpKind::leaf:
          if (in.op == Op::Uniform)
            v[n_] = uniform_[in.attr];
          else if (in.op == Op::Const)
            v[n_] = constant(in.imm, in.type);
          else if (in.op == Op::Load)
            v[n_] = q ? dequantize(in.attr, i, j, in.type) : load(in.attr, i, in.type);
          else
            return unsupported(in);
          break;
        case OpKind::effect:
          if (in.op != Op::Store) return unsupported(in);
          if (q) {
            llvm::Value* f = convert(arg(0), arg_type(0), DType::f32);
            auto* arr = llvm::cast<llvm::AllocaInst>(tmp_.at(in.attr));
            b_.CreateStore(f,
                           b_.CreateInBoundsGEP(arr->getAllocatedType(), arr, {b_.getInt64(0), j}));
            amax_next[in.attr] =
                call(llvm::Intrinsic::umax, {amax_phi.at(in.attr), abs_bits(f, DType::f32)});
          } else {
            store(in.attr, i, arg(0), arg_type(0));
          }
          break;
        case OpKind::reduce: {
          const size_t r = acc_index++;
          acc_next[r] = accumulate(in.op, acc_phi[r], arg(0), arg_type(0));
          break;
        }
        default: {
          if (in.op == Op::SRound) {
            v[n_] = sround(in, arg(0), arg_type(0), arg(1), arg(2), b_.CreateAdd(offset_, i));
            break;
          }
          llvm::Value* r = arith(in, arg, arg_type);
          if (!r) return unsupported(in);
          v[n_] = r;
        }
      }
      if (v[n_] && !v[n_]->hasName() && !llvm::isa<llvm::Constant>(v[n_]))
        v[n_]->setName("v" + std::to_string(n_));
    }
    llvm::Value* j_next =
        b_.CreateAdd(j, b_.getInt64(1), "j.next", /*HasNUW=*/true, /*HasNSW=*/true);
    j->addIncoming(j_next, loop);
    for (size_t r = 0; r < accs.size(); ++r) acc_phi[r]->addIncoming(acc_next[r], loop);
    for (auto& [buf, phi] : amax_phi) phi->addIncoming(amax_next.at(buf), loop);
    auto* back = b_.CreateCondBr(b_.CreateICmpSLT(j_next, n), loop, exit);
    loop_metadata(back);
    b_.SetInsertPoint(exit);
    accs = acc_next;
    for (auto& [buf, a] : amax) a = amax_next.at(buf);
    return Status::Ok();
  }

  // The interleave knob: how many vector iterations the vectorizer interleaves. And where a
  // pass moves f16 buffers and does arithmetic that costs per instruction (a division, square
  // root, exp, log, cos, pow) or reduces, the vector width of f32 registers: LLVM 15's cost model
  // prices f16 <-> f32 conversions of wide vectors so high that it picked 4 lanes, and clip + AdamW
  // with f16 parameters and state ran at 0.44 of the memory roofline (0.29 ms/step at 256K
  // parameters in cache, one thread; 0.14 with 16 lanes, as f32). A loop of loads, adds and
  // stores keeps LLVM's choice: 4 lanes interleaved streamed f16 faster (0.083 ms) than 16
  // (0.110).
  void loop_metadata(llvm::Instruction* back) {
    std::vector<llvm::Metadata*> ops;
    auto self = llvm::MDNode::getTemporary(c_, {});  // replaced by the node itself
    ops.push_back(self.get());
    auto hint = [&](const char* name, int value) {
      llvm::Metadata* kv[] = {
          llvm::MDString::get(c_, name),
          llvm::ConstantAsMetadata::get(b_.getInt32(static_cast<uint32_t>(value)))};
      ops.push_back(llvm::MDNode::get(c_, kv));
    };
    if (interleave_ > 0) hint("llvm.loop.interleave.count", interleave_);
    const bool f16 = std::any_of(plan_.buffers.begin(), plan_.buffers.end(),
                                 [](const ir::BufferDecl& b) { return b.storage == DType::f16; });
    const bool costly =
        std::any_of(body_->insts.begin(), body_->insts.end(), [](const ir::Inst& in) {
          switch (in.op) {
            case Op::Div:
            case Op::Sqrt:
            case Op::Rsqrt:
            case Op::Exp:
            case Op::Log:
            case Op::Cos:
            case Op::Pow:
              return in.rank == Rank::element;
            case Op::Sum:
            case Op::SumSq:
            case Op::MaxAbs:
            case Op::AnyNonFinite:
              return true;
            default:
              return false;
          }
        });
    if (f16 && costly && (avx512f_ || avx2_))
      hint("llvm.loop.vectorize.width", avx512f_ && !prefer256_ ? 16 : 8);
    if (ops.size() == 1) return;
    llvm::MDNode* id = llvm::MDNode::getDistinct(c_, ops);
    id->replaceOperandWith(0, id);
    back->setMetadata(llvm::LLVMContext::MD_loop, id);
  }

  // A chunk of a quantized tensor, a block at a time (chunks start on block boundaries):
  //   for b0 in [0, length) step block:
  //     n = min(block, length - b0) (two copies of what follows: n = block, a constant, and not)
  //     the element loop over the block (loads dequantize with the block's scale; quantized
  //       stores stage their f32 values and reduce their absmax)
  //     for each quantized store: its scale, then its codes (ir/quant.h's quantizer)
  Status block_loops(llvm::Value* length, std::vector<llvm::Value*>& accs) {
    auto* i64 = b_.getInt64Ty();
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    auto* head = llvm::BasicBlock::Create(c_, "block", fn_);
    b_.CreateBr(head);
    b_.SetInsertPoint(head);
    llvm::PHINode* b0 = b_.CreatePHI(i64, 2, "b0");
    b0->addIncoming(b_.getInt64(0), pre);
    std::vector<llvm::PHINode*> acc_phi;
    for (auto* a : accs) {
      acc_phi.push_back(b_.CreatePHI(a->getType(), 2, "acc.b"));
      acc_phi.back()->addIncoming(a, pre);
    }
    llvm::Value* left = b_.CreateSub(length, b0);
    llvm::Value* bs = b_.getInt64(block());
    // The block's index in the tensor: chunk offsets are multiples of kQuantBlock, so of block.
    OPTJIT_CHECK(std::has_single_bit(static_cast<uint64_t>(block())) &&
                 ir::kQuantBlock % block() == 0);
    llvm::Value* blk = b_.CreateLShr(b_.CreateAdd(offset_, b0),
                                     std::countr_zero(static_cast<uint64_t>(block())), "blk");
    scale_.clear();
    for (const auto& [buf, sp] : scales_) {
      auto* l = b_.CreateLoad(b_.getFloatTy(), b_.CreateInBoundsGEP(b_.getFloatTy(), sp, blk),
                              plan_.buffers[buf].name + ".scale");
      tag(l, buf + 1);
      scale_[buf] = l;
    }
    prefetch_ahead(b0);
    // Codes this body (version) reads: a version may leave a buffer's old values unread.
    auto loads = [&](uint32_t buf) {
      return std::any_of(body_->insts.begin(), body_->insts.end(),
                         [&](const ir::Inst& in) { return in.op == Op::Load && in.attr == buf; });
    };
    // The block's work for `count` elements, from the accumulators `acc` (updated).
    auto work = [&](llvm::Value* count, std::vector<llvm::Value*>& acc) -> Status {
      for (const auto& [buf, arr] : unpacked_)
        if (loads(buf)) unpack_block(buf, b0, count);
      for (const auto& [buf, arr] : dequantized_)
        if (loads(buf))
          byte_planes(buf) ? dequantize_block(buf, b0, count) : gather_block(buf, b0, count);
      std::map<uint32_t, llvm::Value*> amax;
      for (const auto& [buf, t] : tmp_) amax[buf] = b_.getInt32(0);
      OPTJIT_TRY(element_loop(count, b0, true, acc, amax));
      for (const auto& [buf, t] : tmp_) quantize_block(buf, amax.at(buf), blk, b0, count);
      return Status::Ok();
    };
    // A whole block (all but perhaps a chunk's last) has its own copy of the work, where its
    // count is a constant: its loops lose their masks, bounds and remainders (3-4% of an 8-bit,
    // 4-bit or fp8 AdamW step in cache).
    std::vector<llvm::Value*> cur(acc_phi.begin(), acc_phi.end());
    auto* whole = llvm::BasicBlock::Create(c_, "block.whole", fn_);
    auto* part = llvm::BasicBlock::Create(c_, "block.part", fn_);
    auto* join = llvm::BasicBlock::Create(c_, "block.join", fn_);
    b_.CreateCondBr(b_.CreateICmpSLT(left, bs), part, whole);
    const std::pair<llvm::BasicBlock*, llvm::Value*> arms[] = {{whole, bs}, {part, left}};
    std::vector<llvm::Value*> out[2];
    llvm::BasicBlock* ends[2];
    for (int k = 0; k < 2; ++k) {
      b_.SetInsertPoint(arms[k].first);
      out[k] = cur;
      OPTJIT_TRY(work(arms[k].second, out[k]));
      ends[k] = b_.GetInsertBlock();
      b_.CreateBr(join);
    }
    b_.SetInsertPoint(join);
    for (size_t r = 0; r < cur.size(); ++r) {
      llvm::PHINode* phi = b_.CreatePHI(cur[r]->getType(), 2, "acc.j");
      for (int k = 0; k < 2; ++k) phi->addIncoming(out[k][r], ends[k]);
      cur[r] = phi;
    }
    llvm::Value* b_next = b_.CreateAdd(b0, bs, "b0.next", true, true);
    b0->addIncoming(b_next, b_.GetInsertBlock());
    for (size_t r = 0; r < accs.size(); ++r) acc_phi[r]->addIncoming(cur[r], b_.GetInsertBlock());
    auto* exit = llvm::BasicBlock::Create(c_, "block.exit", fn_);
    b_.CreateCondBr(b_.CreateICmpSLT(b_next, length), head, exit);
    b_.SetInsertPoint(exit);
    accs = cur;
    return Status::Ok();
  }

  // Software prefetches of the block kPrefetchAhead elements on, every line of every buffer the
  // body reads or writes there (its codes where quantized), into L1. The quantized block loop
  // is compute-heavy (about 1900 instructions a block of 256 with 8-bit AdamW): the hardware's
  // prefetchers alone left memory and arithmetic overlapping poorly (clip + 8-bit AdamW at 64M
  // parameters, 2 threads, Xeon: 0.49-0.53 of the streaming roofline without, 0.54-0.58 with;
  // bench/results/cpu-2026-11-30-prefetch.md). Prefetches past a tensor's end do not fault.
  static constexpr int64_t kPrefetchAhead = 512;
  void prefetch_ahead(llvm::Value* b0) {
    auto* i8 = b_.getInt8Ty();
    llvm::Function* prefetch =
        llvm::Intrinsic::getDeclaration(&m_, llvm::Intrinsic::prefetch, {b_.getPtrTy()});
    llvm::Value* at = b_.CreateAdd(b0, b_.getInt64(std::max(kPrefetchAhead, block())), "ahead");
    std::map<uint32_t, bool> read;  // buffer -> whether the body reads it (else only writes)
    for (const auto& in : body_->insts)
      if (in.op == Op::Load || in.op == Op::Store) read[in.attr] |= in.op == Op::Load;
    for (const auto& [buf, reads] : read) {
      const bool codes = quant(buf) != ir::Quant::none;
      const int64_t width = codes ? bits(buf)
                                  : 8 * static_cast<int64_t>(m_.getDataLayout().getTypeAllocSize(
                                            storage_type(plan_.buffers[buf].storage)));
      // Not in bounds (the last blocks' lines lie past the tensor): a plain GEP.
      llvm::Value* line = b_.CreateGEP(i8, codes ? codes_.at(buf) : base_.at(buf),
                                       b_.CreateLShr(b_.CreateMul(at, b_.getInt64(width)), 3));
      for (int64_t o = 0; o < block() * width / 8; o += 64)
        b_.CreateCall(prefetch, {b_.CreateGEP(i8, line, b_.getInt64(o)), b_.getInt32(reads ? 0 : 1),
                                 b_.getInt32(3), b_.getInt32(1)});
    }
  }

  // A block's 4-bit codes, one a byte, into its staging array before the element loop: there
  // the element loop reads them at consecutive addresses and vectorizes (a load of byte i / 2
  // per element would be 16 scalar loads a vector). Byte k holds element 2k high, 2k + 1 low.
  void unpack_block(uint32_t buf, llvm::Value* b0, llvm::Value* n) {
    auto* i8 = b_.getInt8Ty();
    auto* arr = llvm::cast<llvm::AllocaInst>(unpacked_.at(buf));
    // n is even: 4-bit formats quantize whole blocks only.
    counted_loop("unpack", b_.CreateLShr(n, 1), 1, [&](llvm::Value* k) {
      auto* byte = b_.CreateLoad(
          i8, b_.CreateInBoundsGEP(i8, codes_.at(buf), b_.CreateAdd(b_.CreateLShr(b0, 1), k)));
      tag(byte, buf);
      llvm::Value* two_k = b_.CreateShl(k, 1);
      auto slot = [&](llvm::Value* e) {
        return b_.CreateInBoundsGEP(arr->getAllocatedType(), arr, {b_.getInt64(0), e});
      };
      b_.CreateStore(b_.CreateLShr(byte, 4), slot(two_k));
      b_.CreateStore(b_.CreateAnd(byte, b_.getInt8(15)), slot(b_.CreateOr(two_k, b_.getInt64(1))));
    });
  }

  // for (k = 0; k < limit; k += step) body(k), for limit >= step (a block is never empty);
  // body adds no blocks. Leaves the builder after the loop. `plain`: LLVM neither vectorizes
  // nor unrolls it (a rare path, kept cheap to compile).
  template <class Body>
  void counted_loop(const std::string& name, llvm::Value* limit, int64_t step, Body body,
                    bool plain = false) {
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    auto* loop = llvm::BasicBlock::Create(c_, name, fn_);
    auto* exit = llvm::BasicBlock::Create(c_, name + ".exit", fn_);
    b_.CreateBr(loop);
    b_.SetInsertPoint(loop);
    llvm::PHINode* k = b_.CreatePHI(b_.getInt64Ty(), 2, name + ".k");
    k->addIncoming(b_.getInt64(0), pre);
    body(k);
    llvm::Value* next = b_.CreateAdd(k, b_.getInt64(step), name + ".next", true, true);
    k->addIncoming(next, loop);
    auto* back = b_.CreateCondBr(b_.CreateICmpSLT(next, limit), loop, exit);
    if (plain) {
      auto hint = [&](const char* key) {
        llvm::Metadata* kv[] = {llvm::MDString::get(c_, key),
                                llvm::ConstantAsMetadata::get(b_.getInt1(false))};
        return llvm::MDNode::get(c_, kv);
      };
      auto self = llvm::MDNode::getTemporary(c_, {});
      llvm::Metadata* ops[] = {
          self.get(), hint("llvm.loop.vectorize.enable"),
          llvm::MDNode::get(c_, llvm::MDString::get(c_, "llvm.loop.unroll.disable"))};
      llvm::MDNode* id = llvm::MDNode::getDistinct(c_, ops);
      id->replaceOperandWith(0, id);
      back->setMetadata(llvm::LLVMContext::MD_loop, id);
    }
    b_.SetInsertPoint(exit);
  }

  // Whether buffer buf's codes are dequantized a block at a time by byte permutes
  // (dequantize_block): codes of a map that is not linear (bitsandbytes' 8-bit maps, e4m3,
  // torchao's signed 4-bit map), on a CPU with AVX-512 VBMI whose gathers LLVM does not call
  // fast. Where it does (Intel's AVX-512 cores), the element loop's table lookups, which LLVM
  // vectorizes as 16-lane gathers, are the faster: clip + 8-bit AdamW in cache (262144
  // parameters, one thread) 0.43-0.47 -> 0.38-0.39 ms/step on a Xeon whose permutes issue on
  // one port (vpermt2b: 2 cycles), 4-bit 0.44-0.45 -> 0.40-0.43, e4m3 the same; on the Zen 4
  // (znver3 to LLVM 15, no fast-gather tuning) the permutes were 1.4x faster than gathers
  // (bench/results/cpu-2026-11-30-prefetch.md). OPTJIT_CPU_FEATURES=-fast-gather or
  // +fast-gather chooses.
  bool byte_planes(uint32_t buf) const {
    const ir::QuantInfo& q = ir::info(quant(buf));
    return vbmi_ && !fast_gather_ && block() % 64 == 0 && !ir::linear_map(q.map);
  }

  // Whether buffer buf's codes are dequantized a block at a time by gathers (gather_block), and
  // quantized by them (gather_codes): bitsandbytes' 8-bit maps on a CPU with AVX2 but not
  // AVX-512. LLVM 15 vectorizes a table lookup with gathers only where the target has AVX-512 or
  // fast gathers (not Zen 2 or 3, nor Haswell); elsewhere it loads each element by itself. A
  // gather of 8 lanes takes 4.3-5.0 ns on a Zen 3 (0.55-0.62 ns a lane), 8 scalar lookups 7.1
  // ns; the 8-bit AdamW step is 15% faster at 16M parameters on 2 threads, 6% in cache
  // (bench/results/cpu-2026-11-28-zen3.md). torchao's 16-value 4-bit map is left to LLVM:
  // gathering it was 5% slower.
  bool gathered(uint32_t buf) const {
    const ir::QuantInfo& q = ir::info(quant(buf));
    return gathers_ && q.map.size() == 256 && q.kind == ir::QuantKind::table;
  }

  // The byte of element k of the block at b0 among buffer buf's 8-bit codes in this chunk.
  llvm::Value* code_byte(uint32_t buf, llvm::Value* b0, llvm::Value* k) {
    return b_.CreateInBoundsGEP(b_.getInt8Ty(), codes_.at(buf), b_.CreateAdd(b0, k));
  }

  // body() where cond holds, else nothing.
  void when(llvm::Value* cond, const char* name, const std::function<void()>& body) {
    auto* then = llvm::BasicBlock::Create(c_, name, fn_);
    auto* done = llvm::BasicBlock::Create(c_, std::string(name) + ".done", fn_);
    b_.CreateCondBr(cond, then, done);
    b_.SetInsertPoint(then);
    body();
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
  }

  // A block's n elements as AVX2 takes them: eight(k) for each whole vector of 8 (k = 0, 8, ...),
  // then one(k) for each of the last n % 8 (a partial block's); `name` labels the loops.
  void by_eights(const std::string& name, llvm::Value* n,
                 const std::function<void(llvm::Value*)>& eight,
                 const std::function<void(llvm::Value*)>& one) {
    llvm::Value* n8 = b_.CreateAnd(n, b_.getInt64(~int64_t{7}));
    when(b_.CreateICmpSGT(n8, b_.getInt64(0)), name.c_str(),
         [&] { counted_loop(name + ".loop", n8, 8, eight); });
    const std::string rest = name + ".rest";
    when(b_.CreateICmpSGT(n, n8), rest.c_str(), [&] {
      counted_loop(
          rest + ".loop", b_.CreateSub(n, n8), 1, [&](llvm::Value* r) { one(b_.CreateAdd(n8, r)); },
          /*plain=*/true);
    });
  }

  // A block's map values into its array before the element loop, as dequantize_block, on AVX2:
  // eight at a time by vgatherdps from the map (1 KiB: it stays in L1), the rest (a partial
  // block's last n % 8) one by one. The same bits as map[code]. 8-bit codes only (gathered).
  void gather_block(uint32_t buf, llvm::Value* b0, llvm::Value* n) {
    auto* v8i8 = llvm::FixedVectorType::get(b_.getInt8Ty(), 8);
    auto* v8i32 = llvm::FixedVectorType::get(b_.getInt32Ty(), 8);
    auto* v8f = llvm::FixedVectorType::get(b_.getFloatTy(), 8);
    llvm::GlobalVariable* map = quant_table(quant(buf), false);
    llvm::Function* gather =
        llvm::Intrinsic::getDeclaration(&m_, llvm::Intrinsic::x86_avx2_gather_d_ps_256);
    auto* arr = llvm::cast<llvm::AllocaInst>(dequantized_.at(buf));
    auto value_at = [&](llvm::Value* k) {
      return b_.CreateInBoundsGEP(arr->getAllocatedType(), arr, {b_.getInt64(0), k});
    };
    llvm::Value* all = b_.CreateBitCast(llvm::Constant::getAllOnesValue(v8i32), v8f);
    by_eights(
        "dequantize.gather", n,
        [&](llvm::Value* k) {
          auto* codes = b_.CreateAlignedLoad(v8i8, code_byte(buf, b0, k), llvm::Align(1));
          tag(codes, buf);
          llvm::Value* values =
              b_.CreateCall(gather, {llvm::ConstantAggregateZero::get(v8f), map,
                                     b_.CreateZExt(codes, v8i32), all, b_.getInt8(4)});
          b_.CreateAlignedStore(values, value_at(k), llvm::Align(32));
        },
        [&](llvm::Value* k) {
          auto* code = b_.CreateLoad(b_.getInt8Ty(), code_byte(buf, b0, k));
          tag(code, buf);
          llvm::Value* m = b_.CreateLoad(
              b_.getFloatTy(),
              b_.CreateInBoundsGEP(map->getValueType(), map,
                                   {b_.getInt64(0), b_.CreateZExt(code, b_.getInt64Ty())}));
          b_.CreateStore(m, value_at(k));
        });
  }

  // A block's map values, map[code] for each of its n codes, into its array before the element
  // loop, 64 codes at a time without a gather (this CPU's gathers cost ~1 cycle per element,
  // most of an 8-bit step): the map is four tables of bytes (byte p of each f32 entry), each
  // looked up by two 128-entry byte permutes (vpermi2b) chosen by the code's top bit, and the
  // four byte planes interleaved back into f32s. The same bits as map[code]; the element loop
  // reads them at consecutive addresses. The last 64 codes of a short block are read by a
  // masked load (nothing past the tensor's codes).
  void dequantize_block(uint32_t buf, llvm::Value* b0, llvm::Value* n) {
    auto* i8 = b_.getInt8Ty();
    auto* v64 = llvm::FixedVectorType::get(i8, 64);
    const std::span<const float> map = ir::info(quant(buf)).map;
    // plane[p][q]: bytes p of entries 64q .. 64q + 63.
    llvm::Value* plane[4][4];
    for (int p = 0; p < 4; ++p)
      for (int q = 0; q < 4; ++q) {
        std::vector<uint8_t> bytes(64);
        for (size_t e = 0; e < 64 && 64 * static_cast<size_t>(q) + e < map.size(); ++e)
          bytes[e] =
              static_cast<uint8_t>(map_bits(map[64 * static_cast<size_t>(q) + e]) >> (8 * p));
        plane[p][q] = llvm::ConstantDataVector::get(c_, llvm::ArrayRef<uint8_t>(bytes));
      }
    llvm::Function* permute =
        llvm::Intrinsic::getDeclaration(&m_, llvm::Intrinsic::x86_avx512_vpermi2var_qi_512);
    auto* arr = llvm::cast<llvm::AllocaInst>(dequantized_.at(buf));
    // Interleaving masks: bytes of two planes into 16-bit pairs, then pairs into f32s.
    std::vector<int> pairs(128), words(128);
    for (int e = 0; e < 64; ++e) pairs[2 * e] = e, pairs[2 * e + 1] = 64 + e;
    for (int e = 0; e < 64; ++e) words[2 * e] = e, words[2 * e + 1] = 64 + e;
    counted_loop("dequantize", n, 64, [&](llvm::Value* k) {
      // 8-bit codes from the chunk's codes, 4-bit ones from the block's unpacked array.
      llvm::Value* at =
          bits(buf) == 4 ? b_.CreateInBoundsGEP(
                               llvm::cast<llvm::AllocaInst>(unpacked_.at(buf))->getAllocatedType(),
                               unpacked_.at(buf), {b_.getInt64(0), k})
                         : code_byte(buf, b0, k);
      auto* codes = b_.CreateMaskedLoad(v64, at, llvm::Align(1), tail_mask(n, k, 64),
                                        llvm::ConstantAggregateZero::get(v64), "codes64");
      if (bits(buf) == 8) tag(codes, buf);
      llvm::Value* high = b_.CreateICmpSLT(codes, llvm::ConstantAggregateZero::get(v64));
      llvm::Value* bytes[4];
      for (int p = 0; p < 4; ++p) {
        llvm::Value* lo = b_.CreateCall(permute, {plane[p][0], codes, plane[p][1]});
        llvm::Value* hi = b_.CreateCall(permute, {plane[p][2], codes, plane[p][3]});
        bytes[p] = b_.CreateSelect(high, hi, lo);
      }
      auto* i16s = llvm::FixedVectorType::get(b_.getInt16Ty(), 64);
      llvm::Value* p01 = b_.CreateBitCast(b_.CreateShuffleVector(bytes[0], bytes[1], pairs), i16s);
      llvm::Value* p23 = b_.CreateBitCast(b_.CreateShuffleVector(bytes[2], bytes[3], pairs), i16s);
      llvm::Value* values = b_.CreateBitCast(b_.CreateShuffleVector(p01, p23, words),
                                             llvm::FixedVectorType::get(b_.getFloatTy(), 64));
      b_.CreateAlignedStore(values,
                            b_.CreateInBoundsGEP(arr->getAllocatedType(), arr, {b_.getInt64(0), k}),
                            llvm::Align(64));
    });
  }

  // A map value's bits as the kernels produce it: e4m3's NaN codes (0x7f, 0xff) give the
  // canonical quiet NaN, as f8_value computes them.
  static uint32_t map_bits(float v) { return v != v ? 0x7fc00000u : std::bit_cast<uint32_t>(v); }

  // A quantized load: map[code] * the block's scale, in f32 as bitsandbytes dequantizes.
  // 4-bit codes come from the block's unpacked array (element j of the block).
  llvm::Value* dequantize(uint32_t buf, llvm::Value* i, llvm::Value* j, DType want) {
    if (dequantized_.count(buf)) {  // the block's map values, from dequantize_block
      auto* arr = llvm::cast<llvm::AllocaInst>(dequantized_.at(buf));
      llvm::Value* m = b_.CreateLoad(
          b_.getFloatTy(), b_.CreateInBoundsGEP(arr->getAllocatedType(), arr, {b_.getInt64(0), j}),
          plan_.buffers[buf].name + ".value");
      return convert(b_.CreateFMul(m, scale_.at(buf)), DType::f32, want);
    }
    llvm::Value* code;
    if (bits(buf) == 4) {
      auto* arr = llvm::cast<llvm::AllocaInst>(unpacked_.at(buf));
      code = b_.CreateLoad(b_.getInt8Ty(),
                           b_.CreateInBoundsGEP(arr->getAllocatedType(), arr, {b_.getInt64(0), j}),
                           plan_.buffers[buf].name + ".code");
    } else {
      auto* l =
          b_.CreateLoad(b_.getInt8Ty(), b_.CreateInBoundsGEP(b_.getInt8Ty(), codes_.at(buf), i),
                        plan_.buffers[buf].name + ".code");
      tag(l, buf);
      code = l;
    }
    llvm::Value* m;
    const std::span<const float> values = ir::info(quant(buf)).map;
    if (ir::info(quant(buf)).kind == ir::QuantKind::fp8) {
      m = f8_value(code);                 // the map's value, computed: no gather
    } else if (ir::linear_map(values)) {  // q4u: map[c] = (c + 1) / 16 exactly, no gather
      m = b_.CreateFMul(
          b_.CreateUIToFP(b_.CreateAdd(b_.CreateZExt(code, b_.getInt32Ty()), b_.getInt32(1)),
                          b_.getFloatTy()),
          llvm::ConstantFP::get(b_.getFloatTy(), values[0]));
    } else {
      llvm::GlobalVariable* map = quant_table(quant(buf), false);
      m = b_.CreateLoad(
          b_.getFloatTy(),
          b_.CreateInBoundsGEP(map->getValueType(), map,
                               {b_.getInt64(0), b_.CreateZExt(code, b_.getInt64Ty())}));
    }
    return convert(b_.CreateFMul(m, scale_.at(buf)), DType::f32, want);
  }

  // The e4m3fn value of a code (ir/quant.cpp's table, computed): normal codes by their bits,
  // subnormal ones as m * 2^-9, 0x7f and 0xff NaN.
  llvm::Value* f8_value(llvm::Value* code) {
    auto* i32 = b_.getInt32Ty();
    auto* f32 = b_.getFloatTy();
    llvm::Value* c = b_.CreateZExt(code, i32);
    llvm::Value* sign = b_.CreateShl(b_.CreateAnd(c, b_.getInt32(0x80)), 24);
    llvm::Value* e = b_.CreateAnd(b_.CreateLShr(c, 3), b_.getInt32(15));
    llvm::Value* m = b_.CreateAnd(c, b_.getInt32(7));
    llvm::Value* normal =
        b_.CreateOr(b_.CreateOr(sign, b_.CreateShl(b_.CreateAdd(e, b_.getInt32(120)), 23)),
                    b_.CreateShl(m, 20));
    llvm::Value* sub = b_.CreateOr(
        sign, b_.CreateBitCast(b_.CreateFMul(b_.CreateUIToFP(m, f32),
                                             llvm::ConstantFP::get(f32, std::ldexp(1.0, -9))),
                               i32));
    llvm::Value* bits = b_.CreateSelect(b_.CreateICmpEQ(e, b_.getInt32(0)), sub, normal);
    llvm::Value* nan = b_.CreateICmpEQ(b_.CreateAnd(c, b_.getInt32(0x7f)), b_.getInt32(0x7f));
    return b_.CreateSelect(nan, llvm::ConstantFP::getNaN(f32), b_.CreateBitCast(bits, f32));
  }

  // The block's scale, then each staged value's code (ir/quant.h's quantize_block): table
  // formats lut[index(x / absmax)], fp8 f8_code(x / scale), nearest the thresholds <= x / scale.
  // 4-bit codes are stored two to a byte (the even element high), a pair per iteration.
  void quantize_block(uint32_t buf, llvm::Value* amax_bits, llvm::Value* blk, llvm::Value* b0,
                      llvm::Value* n) {
    auto* f32 = b_.getFloatTy();
    auto cf = [&](double d) { return llvm::ConstantFP::get(f32, d); };
    const ir::QuantKind kind = ir::info(quant(buf)).kind;
    llvm::Value* absmax = b_.CreateBitCast(amax_bits, f32, plan_.buffers[buf].name + ".absmax");
    // ir::quant_scale: the absmax, or max(absmax, 1e-12) (/ 448 for fp8); NaN stays NaN.
    llvm::Value* clipped =
        b_.CreateSelect(b_.CreateFCmpOLE(absmax, cf(1e-12f)), cf(1e-12f), absmax);
    llvm::Value* scale = kind == ir::QuantKind::fp8       ? b_.CreateFDiv(clipped, cf(448.0))
                         : kind == ir::QuantKind::nearest ? clipped
                                                          : absmax;
    auto* st = b_.CreateStore(scale, b_.CreateInBoundsGEP(f32, scales_.at(buf), blk));
    tag(st, buf + 1);
    // The table quantizer's loop invariants: 1 / absmax, and whether the block is all zeros.
    const bool table = kind == ir::QuantKind::table;
    llvm::Value* inv = table ? b_.CreateFDiv(cf(1.0), absmax) : nullptr;
    llvm::Value* zero = table ? b_.CreateFCmpOEQ(absmax, cf(0.0)) : nullptr;
    auto code_of = [&](llvm::Value* x) -> llvm::Value* {
      switch (kind) {
        case ir::QuantKind::fp8:
          return f8_code(b_.CreateFDiv(x, scale));
        case ir::QuantKind::nearest:
          return nearest_code(quant(buf), b_.CreateFDiv(x, scale));
        case ir::QuantKind::table:
          break;
      }
      return table_code(quant(buf), x, inv, zero);
    };
    const bool nibble = bits(buf) == 4;
    auto* arr = llvm::cast<llvm::AllocaInst>(tmp_.at(buf));
    if (kind == ir::QuantKind::nearest && nibble && block() % 32 == 0) {
      nibble_codes(buf, arr, b0, n, scale);
      return;
    }
    // The table quantizer by vectors, without a gather: byte buckets (VBMI) or a 16-bit search
    // (BW), for blocks whose absmax is in [2^-126, 2^126] (lut_index_in_range); an all-zero block
    // stores zeros, and the rest (NaN, Inf, subnormal or huge absmax) take the scalar loop below.
    std::function<void()> vector_codes;
    if (table && vbmi_ && block() % 64 == 0) {
      if (const ByteBuckets* tables = byte_buckets(quant(buf)))
        vector_codes = [=, this] { bucket_codes(buf, arr, *tables, b0, n, inv); };
    }
    if (!vector_codes && table && avx512bw_ && !nibble && block() % 32 == 0) {
      if (std::vector<uint16_t> bound = code_bounds(quant(buf)); !bound.empty())
        vector_codes = [=, this] { search_codes(buf, arr, bound, b0, n, inv); };
    }
    if (!vector_codes && table && gathered(buf))
      vector_codes = [=, this] { gather_codes(buf, arr, b0, n, inv); };
    llvm::BasicBlock* join = nullptr;
    if (vector_codes) {
      auto* fast = llvm::BasicBlock::Create(c_, "q.vector", fn_);
      auto* other = llvm::BasicBlock::Create(c_, "q.other", fn_);
      auto* zeros = llvm::BasicBlock::Create(c_, "q.zeros", fn_);
      auto* scalar = llvm::BasicBlock::Create(c_, "q.scalar", fn_);
      join = llvm::BasicBlock::Create(c_, "q.join", fn_);
      llvm::Value* normal = b_.CreateAnd(b_.CreateFCmpOGE(absmax, cf(0x1p-126)),
                                         b_.CreateFCmpOLE(absmax, cf(0x1p126)), "normal");
      b_.CreateCondBr(normal, fast, other);
      b_.SetInsertPoint(fast);
      vector_codes();
      b_.CreateBr(join);
      b_.SetInsertPoint(other);
      b_.CreateCondBr(zero, zeros, scalar);
      b_.SetInsertPoint(zeros);
      auto* i8x64 = llvm::FixedVectorType::get(b_.getInt8Ty(), 64);
      counted_loop("zeros", n, 64, [&](llvm::Value* k) {
        auto* none =
            b_.CreateMaskedStore(llvm::ConstantAggregateZero::get(i8x64), code_byte(buf, b0, k),
                                 llvm::Align(1), tail_mask(n, k, 64));
        tag(none, buf);
      });
      b_.CreateBr(join);
      b_.SetInsertPoint(scalar);
    }
    auto staged = [&](llvm::Value* k) {
      return b_.CreateLoad(f32,
                           b_.CreateInBoundsGEP(arr->getAllocatedType(), arr, {b_.getInt64(0), k}));
    };
    // Beside the vector paths only the rare blocks come here: a plain loop, cheap to compile.
    counted_loop(
        "quantize", n, nibble ? 2 : 1,
        [&](llvm::Value* j) {
          llvm::Value* code = code_of(staged(j));
          llvm::Value* at = b_.CreateAdd(b0, j);
          if (nibble) {  // n is even: 4-bit formats quantize whole blocks only
            llvm::Value* low = code_of(staged(b_.CreateAdd(j, b_.getInt64(1))));
            code = b_.CreateOr(b_.CreateShl(code, 4), low);
            at = b_.CreateLShr(at, 1);
          }
          auto* s = b_.CreateStore(code, b_.CreateInBoundsGEP(b_.getInt8Ty(), codes_.at(buf), at));
          tag(s, buf);
        },
        /*plain=*/join != nullptr);
    if (join) {
      b_.CreateBr(join);
      b_.SetInsertPoint(join);
    }
  }

  // The table quantizer on AVX2 (see gathered): eight staged values at a time, each one's lut
  // index as lut_index_in_range computes it (the block's absmax is in [2^-126, 2^126]), its code
  // the low byte of a vpgatherdd at that byte of the lut (3 bytes of padding past its end); the
  // rest (a partial block's last n % 8) by table_code. lut[index] bit for bit.
  void gather_codes(uint32_t buf, llvm::AllocaInst* staged, llvm::Value* b0, llvm::Value* n,
                    llvm::Value* inv) {
    auto* f32 = b_.getFloatTy();
    auto* v8f = llvm::FixedVectorType::get(f32, 8);
    auto* v8i32 = llvm::FixedVectorType::get(b_.getInt32Ty(), 8);
    auto* v8i8 = llvm::FixedVectorType::get(b_.getInt8Ty(), 8);
    llvm::GlobalVariable* lut = quant_table(quant(buf), true);
    llvm::Function* gather =
        llvm::Intrinsic::getDeclaration(&m_, llvm::Intrinsic::x86_avx2_gather_d_d_256);
    auto value_at = [&](llvm::Value* k) {
      return b_.CreateInBoundsGEP(staged->getAllocatedType(), staged, {b_.getInt64(0), k});
    };
    llvm::Value* inv8 = b_.CreateVectorSplat(8, inv);
    by_eights(
        "q.gather", n,
        [&](llvm::Value* k) {
          llvm::Value* x = b_.CreateAlignedLoad(v8f, value_at(k), llvm::Align(32));
          // lut_index_in_range, converted signed: the index is below 2^16 (AVX2 has no unsigned
          // conversion; fptoui would take several instructions a vector).
          llvm::Value* t = b_.CreateFAdd(b_.CreateFMul(x, inv8), llvm::ConstantFP::get(v8f, 1.0));
          llvm::Value* u = b_.CreateIntrinsic(
              llvm::Intrinsic::fma, {v8f},
              {t, llvm::ConstantFP::get(v8f, 32767.5), llvm::ConstantFP::get(v8f, 0.5)});
          llvm::Value* cells = b_.CreateCall(
              gather, {llvm::ConstantAggregateZero::get(v8i32), lut, b_.CreateFPToSI(u, v8i32),
                       llvm::Constant::getAllOnesValue(v8i32), b_.getInt8(1)});
          auto* st = b_.CreateAlignedStore(b_.CreateTrunc(cells, v8i8), code_byte(buf, b0, k),
                                           llvm::Align(1));
          tag(st, buf);
        },
        [&](llvm::Value* k) {
          llvm::Value* code =
              table_code(quant(buf), b_.CreateLoad(f32, value_at(k)), inv, b_.getFalse());
          tag(b_.CreateStore(code, code_byte(buf, b0, k)), buf);
        });
  }

  // The table quantizer's lut as the cells where each code starts: bound[c] = the first cell i
  // with lut[i] >= c (bound[0] = 0), so lut[i] = the number of codes c >= 1 with bound[c] <= i
  // (the lut never decreases). Empty when some code is never reached (then the lut stays).
  static std::vector<uint16_t> code_bounds(ir::Quant q) {
    const auto& lut = *ir::info(q).lut;
    std::vector<uint16_t> bound(256, 0);
    size_t i = 0;
    for (int c = 1; c < 256; ++c) {
      while (i < lut.size() && lut[i] < c) ++i;
      if (i == lut.size()) return {};
      bound[static_cast<size_t>(c)] = static_cast<uint16_t>(i);
    }
    for (size_t k = 1; k < lut.size(); ++k)
      if (lut[k] < lut[k - 1]) return {};
    return bound;
  }

  // The table quantizer without a gather (this CPU's gathers cost about a cycle per element;
  // two per element were half of an 8-bit AdamW step): 32 staged values at a time, each
  // value's lut index (lut_index_in_range: the same index as table_code's) as 16 bits, then its
  // code as a branch-free binary search over code_bounds: step s adds s to the code where the bound
  // at code + s is <= the index; the bounds a step can ask for are at most 128, looked up by 16-bit
  // permutes (vpermw, vpermi2w) of the step's own table, on CPUs with BW but not VBMI (else
  // bucket_codes). The codes are lut[index] bit for bit
  // (Quant.CpuCodesAreTheScalarQuantizersAtEveryEdge, ctest's quant_test.without_avx512vbmi).
  void search_codes(uint32_t buf, llvm::AllocaInst* staged, const std::vector<uint16_t>& bound,
                    llvm::Value* b0, llvm::Value* n, llvm::Value* inv) {
    auto* f32 = b_.getFloatTy();
    auto* i16 = b_.getInt16Ty();
    auto* vf = llvm::FixedVectorType::get(f32, 32);
    auto* vi16 = llvm::FixedVectorType::get(i16, 32);
    auto* vi8 = llvm::FixedVectorType::get(b_.getInt8Ty(), 32);
    llvm::Function* perm32 =
        llvm::Intrinsic::getDeclaration(&m_, llvm::Intrinsic::x86_avx512_permvar_hi_512);
    llvm::Function* perm64 =
        llvm::Intrinsic::getDeclaration(&m_, llvm::Intrinsic::x86_avx512_vpermi2var_hi_512);
    auto table = [&](int step, int from) {  // the bounds step `step` asks for, from entry `from`
      std::vector<uint16_t> t(32, 0);
      for (int m = 0; m < 32 && (m + from) * 2 * step + step < 256; ++m)
        t[static_cast<size_t>(m)] = bound[static_cast<size_t>((m + from) * 2 * step + step)];
      return llvm::ConstantDataVector::get(c_, llvm::ArrayRef<uint16_t>(t));
    };
    counted_loop("search", n, 32, [&](llvm::Value* k) {
      llvm::Value* x = b_.CreateAlignedLoad(
          vf, b_.CreateInBoundsGEP(staged->getAllocatedType(), staged, {b_.getInt64(0), k}),
          llvm::Align(4));
      llvm::Value* idx =
          b_.CreateTrunc(lut_index_in_range(x, b_.CreateVectorSplat(32, inv),
                                            llvm::FixedVectorType::get(b_.getInt32Ty(), 32)),
                         vi16);
      llvm::Value* c = llvm::ConstantAggregateZero::get(vi16);
      auto bound_at = [&](int code) {
        return b_.CreateVectorSplat(32, b_.getInt16(bound[static_cast<size_t>(code)]));
      };
      for (int step = 128; step >= 1; step /= 2) {
        // The decided bits of the code, as the index of the step's candidate bounds.
        auto decided = [&] {
          const int shift = std::countr_zero(static_cast<unsigned>(2 * step));
          return b_.CreateLShr(c,
                               b_.CreateVectorSplat(32, b_.getInt16(static_cast<uint16_t>(shift))));
        };
        llvm::Value* cand;
        if (step == 128) {  // one bound, then two: constants, no permute
          cand = bound_at(128);
        } else if (step == 64) {
          cand = b_.CreateSelect(b_.CreateICmpNE(c, llvm::ConstantAggregateZero::get(vi16)),
                                 bound_at(192), bound_at(64));
        } else if (step >= 4) {  // at most 32 bounds
          cand = b_.CreateCall(perm32, {table(step, 0), decided()});
        } else if (step == 2) {  // 64
          cand = b_.CreateCall(perm64, {table(2, 0), decided(), table(2, 32)});
        } else {  // 128: two lookups of 64, chosen by bit 6 of the index
          llvm::Value* m = decided();
          llvm::Value* lo = b_.CreateCall(perm64, {table(1, 0), m, table(1, 32)});
          llvm::Value* hi = b_.CreateCall(perm64, {table(1, 64), m, table(1, 96)});
          llvm::Value* upper = b_.CreateICmpUGE(m, b_.CreateVectorSplat(32, b_.getInt16(64)));
          cand = b_.CreateSelect(upper, hi, lo);
        }
        llvm::Value* take = b_.CreateICmpULE(cand, idx);
        c = b_.CreateAdd(
            c, b_.CreateSelect(take,
                               b_.CreateVectorSplat(32, b_.getInt16(static_cast<uint16_t>(step))),
                               llvm::ConstantAggregateZero::get(vi16)));
      }
      llvm::Value* codes = b_.CreateTrunc(c, vi8);
      auto* st =
          b_.CreateMaskedStore(codes, code_byte(buf, b0, k), llvm::Align(1), tail_mask(n, k, 32));
      tag(st, buf);
    });
  }

  // Lanes from, from + stride, ... (count of them): a shuffle's mask.
  static std::vector<int> lanes(int from, int count, int stride) {
    std::vector<int> l(static_cast<size_t>(count));
    for (int e = 0; e < count; ++e) l[static_cast<size_t>(e)] = from + stride * e;
    return l;
  }

  // The ByteBuckets of a table format's lut, built once per process; null if none is exact.
  static const ByteBuckets* byte_buckets(ir::Quant q) {
    static const std::map<ir::Quant, std::optional<ByteBuckets>> tables = [] {
      std::map<ir::Quant, std::optional<ByteBuckets>> t;
      for (ir::Quant f : {ir::Quant::q8, ir::Quant::q8u})
        if (ir::info(f).lut) t[f] = ByteBuckets::build(*ir::info(f).lut);
      return t;
    }();
    const auto it = tables.find(q);
    return it == tables.end() || !it->second ? nullptr : &*it->second;
  }

  // The table quantizer by byte permutes (AVX-512 VBMI), 64 staged values at a time: each
  // value's lut index (lut_index_in_range: the block's absmax is in range), then its code as
  // ByteBuckets::code computes it, every table of 256 bytes looked up by two 128-entry permutes
  // (vpermi2b) chosen by the index's top bit, or of 128 (folded) by one. About a third fewer
  // instructions than search_codes' eight 16-bit steps unfolded, two thirds folded.
  void bucket_codes(uint32_t buf, llvm::AllocaInst* staged, const ByteBuckets& t, llvm::Value* b0,
                    llvm::Value* n, llvm::Value* inv) {
    auto* i8 = b_.getInt8Ty();
    auto* vf = llvm::FixedVectorType::get(b_.getFloatTy(), 64);
    auto* vi8 = llvm::FixedVectorType::get(i8, 64);
    llvm::Function* permute =
        llvm::Intrinsic::getDeclaration(&m_, llvm::Intrinsic::x86_avx512_vpermi2var_qi_512);
    auto quarter = [&](const std::array<uint8_t, 256>& table, int q) {
      return llvm::ConstantDataVector::get(
          c_, llvm::ArrayRef<uint8_t>(table.data() + 64 * q, static_cast<size_t>(64)));
    };
    auto* vi32 = llvm::FixedVectorType::get(b_.getInt32Ty(), 64);
    auto splat8 = [&](uint32_t v) {
      return b_.CreateVectorSplat(64, b_.getInt8(static_cast<uint8_t>(v)));
    };
    counted_loop("buckets", n, 64, [&](llvm::Value* k) {
      llvm::Value* x = b_.CreateAlignedLoad(
          vf, b_.CreateInBoundsGEP(staged->getAllocatedType(), staged, {b_.getInt64(0), k}),
          llvm::Align(4));
      // The cell i' as 32 bits, then its bytes: no 16-bit stage (the index's conversion is the
      // bulk of the work; bytes of four vectors are gathered by two-source byte permutes).
      llvm::Value* v = lut_index_in_range(x, b_.CreateVectorSplat(64, inv), vi32);
      // Bytes 0 and 1 of each 32-bit lane: two-source byte permutes take both from 32 lanes at
      // once, and the halves of their results join.
      llvm::Value* part[4];
      for (int q = 0; q < 4; ++q)
        part[q] = b_.CreateBitCast(b_.CreateShuffleVector(v, lanes(16 * q, 16, 1)), vi8);
      std::vector<uint8_t> pick(64);
      for (int e = 0; e < 32; ++e) {
        pick[static_cast<size_t>(e)] = static_cast<uint8_t>(e < 16 ? 4 * e : 64 + 4 * (e - 16));
        pick[static_cast<size_t>(32 + e)] = static_cast<uint8_t>(pick[static_cast<size_t>(e)] + 1);
      }
      llvm::Value* pk = llvm::ConstantDataVector::get(c_, llvm::ArrayRef<uint8_t>(pick));
      llvm::Value* x01 = b_.CreateCall(permute, {part[0], pk, part[1]});
      llvm::Value* x23 = b_.CreateCall(permute, {part[2], pk, part[3]});
      std::vector<int> first(64), second(64);
      for (int e = 0; e < 64; ++e) {
        first[static_cast<size_t>(e)] = e < 32 ? e : 32 + e;
        second[static_cast<size_t>(e)] = first[static_cast<size_t>(e)] + 32;
      }
      llvm::Value* lo = b_.CreateShuffleVector(x01, x23, first);
      llvm::Value* h = b_.CreateShuffleVector(x01, x23, second);
      // Folded, the cells below the middle have h < 128. Mirrored, both bytes flip there, making
      // h the bucket of 32767 - i in its low 7 bits (all a 128-entry permute reads) with its top
      // bit set, as above it. Halved, they take one code at the end.
      const bool folded = t.fold != ByteBuckets::Fold::none;
      llvm::Value* below = nullptr;
      if (folded) below = b_.CreateICmpSGE(h, llvm::ConstantAggregateZero::get(vi8));
      if (t.fold == ByteBuckets::Fold::mirror) {
        llvm::Value* flip = b_.CreateSExt(below, vi8);
        h = b_.CreateXor(h, flip);
        lo = b_.CreateXor(lo, flip);
      }
      auto lookup = [&](const std::array<uint8_t, 256>& table, llvm::Value* idx) {
        llvm::Value* low = b_.CreateCall(permute, {quarter(table, 0), idx, quarter(table, 1)});
        llvm::Value* high = b_.CreateCall(permute, {quarter(table, 2), idx, quarter(table, 3)});
        return b_.CreateSelect(b_.CreateICmpSLT(idx, llvm::ConstantAggregateZero::get(vi8)), high,
                               low);
      };
      auto bucket = [&](const std::array<uint8_t, 256>& table) {  // table[h]
        return folded ? b_.CreateCall(permute, {quarter(table, 0), h, quarter(table, 1)})
                      : lookup(table, h);
      };
      llvm::Value* code = bucket(t.start);
      for (const auto& s : t.steps)
        code =
            b_.CreateSelect(b_.CreateICmpUGT(lo, bucket(s)), b_.CreateAdd(code, splat8(1)), code);
      // Window w is bucket w (folded, h has its top bit set; the halved lanes without it are
      // replaced below).
      for (const auto& [w, cells] : t.windows)
        code = b_.CreateSelect(b_.CreateICmpEQ(h, splat8(w | (folded ? 128u : 0u))),
                               lookup(cells, lo), code);
      if (t.fold == ByteBuckets::Fold::half)
        code = b_.CreateSelect(below, splat8(t.below_code), code);
      if (t.fold == ByteBuckets::Fold::mirror)
        code = b_.CreateSelect(
            below,
            b_.CreateSub(splat8(254),
                         b_.CreateBinaryIntrinsic(llvm::Intrinsic::umin, code, splat8(254))),
            code);
      auto* st =
          b_.CreateMaskedStore(code, code_byte(buf, b0, k), llvm::Align(1), tail_mask(n, k, 64));
      tag(st, buf);
    });
  }

  // The 4-bit quantizer (ir::nearest_code of x / scale) 32 staged values at a time, as
  // vectors (element by element, the pairs of nibbles kept LLVM from vectorizing it): the
  // count of thresholds <= y as a branch-free binary search whose candidates come from 16-entry
  // permutes (vpermps) with AVX-512, else as the sum of the 15 compares. A NaN compares false
  // either way (code 0). Then element 2m's code is byte m's high nibble, element 2m + 1's low.
  void nibble_codes(uint32_t buf, llvm::AllocaInst* staged, llvm::Value* b0, llvm::Value* n,
                    llvm::Value* scale) {
    auto* f32 = b_.getFloatTy();
    auto* i32 = b_.getInt32Ty();
    auto* vf = llvm::FixedVectorType::get(f32, 32);
    auto* vi32 = llvm::FixedVectorType::get(i32, 32);
    const ir::QuantInfo& qi = ir::info(quant(buf));
    const std::span<const float> t = qi.thresholds;
    llvm::Function* permute =
        llvm::Intrinsic::getDeclaration(&m_, llvm::Intrinsic::x86_avx512_permvar_sf_512);
    counted_loop("nibbles", n, 32, [&](llvm::Value* k) {
      llvm::Value* x = b_.CreateAlignedLoad(
          vf, b_.CreateInBoundsGEP(staged->getAllocatedType(), staged, {b_.getInt64(0), k}),
          llvm::Align(4));
      llvm::Value* y = b_.CreateFDiv(x, b_.CreateVectorSplat(32, scale));
      llvm::Value* c = llvm::ConstantAggregateZero::get(vi32);
      auto splat = [&](int v) {
        return b_.CreateVectorSplat(32, b_.getInt32(static_cast<uint32_t>(v)));
      };
      if (ir::linear_thresholds(qi)) {  // ir::linear_code, no search
        auto splat_f = [&](double v) { return llvm::ConstantFP::get(vf, v); };
        llvm::Value* z = b_.CreateFSub(b_.CreateFMul(y, splat_f(1.0 / qi.map[0])), splat_f(0.5));
        const auto top = static_cast<double>(qi.thresholds.size());
        // Both compares are false for NaN: 0, as its count is.
        llvm::Value* in = b_.CreateSelect(b_.CreateFCmpOGE(z, splat_f(0.0)), z, splat_f(0.0));
        in = b_.CreateSelect(b_.CreateFCmpOGE(z, splat_f(top)), splat_f(top), in);
        c = b_.CreateFPToUI(in, vi32);
      } else if (avx512bw_ && t.size() == 15) {
        for (int step = 8; step >= 1; step /= 2) {
          // cand[m] = t[m + step - 1]: the search only asks where m + step - 1 <= 14.
          std::vector<float> table(16, 0.0f);
          for (size_t m = 0; m + static_cast<size_t>(step) - 1 < t.size(); ++m)
            table[m] = t[m + static_cast<size_t>(step) - 1];
          llvm::Value* tv = llvm::ConstantDataVector::get(c_, llvm::ArrayRef<float>(table));
          llvm::Value* half[2];
          for (int q = 0; q < 2; ++q)
            half[q] = b_.CreateCall(permute, {tv, b_.CreateShuffleVector(c, lanes(16 * q, 16, 1))});
          llvm::Value* cand = b_.CreateShuffleVector(half[0], half[1], lanes(0, 32, 1));
          c = b_.CreateSelect(b_.CreateFCmpOGE(y, cand), b_.CreateAdd(c, splat(step)), c);
        }
      } else {
        for (float th : t)
          c = b_.CreateAdd(c,
                           b_.CreateZExt(b_.CreateFCmpOGE(y, llvm::ConstantFP::get(vf, th)), vi32));
      }
      llvm::Value* codes = b_.CreateTrunc(c, llvm::FixedVectorType::get(b_.getInt8Ty(), 32));
      llvm::Value* high = b_.CreateShuffleVector(codes, lanes(0, 16, 2));
      llvm::Value* low = b_.CreateShuffleVector(codes, lanes(1, 16, 2));
      llvm::Value* packed =
          b_.CreateOr(b_.CreateShl(high, b_.CreateVectorSplat(16, b_.getInt8(4))), low);
      llvm::Value* byte = b_.CreateLShr(b_.CreateAdd(b0, k), 1);
      auto* st = b_.CreateMaskedStore(
          packed, b_.CreateInBoundsGEP(b_.getInt8Ty(), codes_.at(buf), byte), llvm::Align(1),
          tail_mask(b_.CreateLShr(n, 1), b_.CreateLShr(k, 1), 16));
      tag(st, buf);
    });
  }

  // ir::f8_code, instruction by instruction.
  llvm::Value* f8_code(llvm::Value* y) {
    auto* i32 = b_.getInt32Ty();
    llvm::Value* bits = b_.CreateBitCast(y, i32);
    llvm::Value* sign = b_.CreateAnd(bits, b_.getInt32(0x80000000u));
    llvm::Value* a = b_.CreateXor(bits, sign);
    const uint32_t magic = 141u << 23;
    llvm::Value* sum =
        b_.CreateBitCast(b_.CreateFAdd(b_.CreateBitCast(a, b_.getFloatTy()),
                                       b_.CreateBitCast(b_.getInt32(magic), b_.getFloatTy())),
                         i32);
    llvm::Value* sub = b_.CreateSub(sum, b_.getInt32(magic));
    llvm::Value* odd = b_.CreateAnd(b_.CreateLShr(a, 20), b_.getInt32(1));
    llvm::Value* normal = b_.CreateLShr(
        b_.CreateAdd(
            b_.CreateAdd(a, b_.getInt32((static_cast<uint32_t>(7 - 127) << 23) + 0x7ffffu)), odd),
        20);
    llvm::Value* r = b_.CreateSelect(
        b_.CreateICmpUGE(a, b_.getInt32(0x43e80000u)), b_.getInt32(0x7f),
        b_.CreateSelect(b_.CreateICmpULT(a, b_.getInt32(0x3c800000u)), sub, normal));
    return b_.CreateTrunc(b_.CreateOr(b_.CreateAnd(r, b_.getInt32(0xff)), b_.CreateLShr(sign, 24)),
                          b_.getInt8Ty());
  }

  // ir::nearest_code: the number of the format's thresholds <= y (NaN: none), as a byte.
  llvm::Value* nearest_code(ir::Quant q, llvm::Value* y) {
    llvm::Value* c = b_.getInt8(0);
    for (float t : ir::info(q).thresholds)
      c = b_.CreateAdd(c,
                       b_.CreateZExt(b_.CreateFCmpOGE(y, llvm::ConstantFP::get(b_.getFloatTy(), t)),
                                     b_.getInt8Ty()));
    return c;
  }

  // ir/quant.h's table quantizer: lut[index(x * inv)], 0 for a zero block.
  // ir::quant_lut_index of x * inv: clamped to [-1, 1], then (y + 1) * 0.5 * 65535 + 0.5
  // truncated, as `index_type` (i32, or a vector of integers for a vector x and inv). The two
  // products are one here: y + 1 >= 0 is 0 or at least 2^-24, so halving it is exact, and
  // (y + 1) * 32767.5 is the same real number as ((y + 1) * 0.5) * 65535, rounded once.
  llvm::Value* lut_index(llvm::Value* x, llvm::Value* inv, llvm::Type* index_type) {
    auto cf = [&](double d) { return llvm::ConstantFP::get(x->getType(), d); };  // splat
    llvm::Value* y = b_.CreateFMul(x, inv);
    y = b_.CreateSelect(b_.CreateFCmpOGE(y, cf(-1.0)),
                        b_.CreateSelect(b_.CreateFCmpOGT(y, cf(1.0)), cf(1.0), y), cf(-1.0));
    llvm::Value* u = b_.CreateFMul(b_.CreateFAdd(y, cf(1.0)), cf(32767.5));
    return b_.CreateFPToUI(b_.CreateFAdd(u, cf(0.5)), index_type);
  }

  // lut_index for a block whose absmax a lies in [2^-126, 2^126], so that inv = RN(1 / a) is
  // normal and within a factor 1 + 2^-24 of 1 / a: then |x * inv| <= a * (1 + 2^-24) / a rounds to
  // at most 1 (1 + 2^-24 is the tie between 1 and its successor; it goes to even), and the clamp
  // does nothing. (y + 1) * 32767.5 + 0.5 is then one fma: adding 0.5 is exact below 2^16, and the
  // fma's index equals the two roundings' for every f32 y in [-1, 1] (every t = y + 1 is checked:
  // Quant.TheVectorLutIndexIsTheScalarOneForEveryValue).
  llvm::Value* lut_index_in_range(llvm::Value* x, llvm::Value* inv, llvm::Type* index_type) {
    auto cf = [&](double d) { return llvm::ConstantFP::get(x->getType(), d); };  // splat
    llvm::Value* t = b_.CreateFAdd(b_.CreateFMul(x, inv), cf(1.0));
    llvm::Value* u =
        b_.CreateIntrinsic(llvm::Intrinsic::fma, {x->getType()}, {t, cf(32767.5), cf(0.5)});
    return b_.CreateFPToUI(u, index_type);
  }

  // Lanes [0, min(n - k, width)) of a masked access of `width` lanes (k < n).
  llvm::Value* tail_mask(llvm::Value* n, llvm::Value* k, unsigned width) {
    llvm::Value* left = b_.CreateSub(n, k);
    llvm::Value* w = b_.getInt64(width);
    llvm::Value* cap = b_.CreateVectorSplat(
        width, b_.CreateTrunc(b_.CreateSelect(b_.CreateICmpSLT(left, w), left, w), b_.getInt8Ty()));
    std::vector<uint8_t> lanes(width);
    for (unsigned e = 0; e < width; ++e) lanes[e] = static_cast<uint8_t>(e);
    return b_.CreateICmpULT(llvm::ConstantDataVector::get(c_, llvm::ArrayRef<uint8_t>(lanes)), cap);
  }

  llvm::Value* table_code(ir::Quant q, llvm::Value* x, llvm::Value* inv, llvm::Value* zero) {
    llvm::Value* idx = lut_index(x, inv, b_.getInt32Ty());
    // The code is read as the low byte of a 32-bit load at its byte (the table has 3 bytes of
    // padding): x86 gathers 32-bit lanes natively, where a byte gather is 16 scalar loads.
    llvm::GlobalVariable* lut = quant_table(q, true);
    llvm::Value* at = b_.CreateInBoundsGEP(lut->getValueType(), lut,
                                           {b_.getInt64(0), b_.CreateSExt(idx, b_.getInt64Ty())});
    llvm::Value* code = b_.CreateTrunc(
        b_.CreateAlignedLoad(b_.getInt32Ty(), at, llvm::MaybeAlign(1)), b_.getInt8Ty());
    return b_.CreateSelect(zero, b_.getInt8(0), code);
  }

  // A format's map (256 f32) or lookup table (65536 codes) as a constant of the module.
  llvm::GlobalVariable* quant_table(ir::Quant q, bool lut) {
    const std::string name = fmt::format("optjit.{}.{}", lut ? "lut" : "map", ir::to_string(q));
    if (auto* g = m_.getGlobalVariable(name, true)) return g;
    llvm::Constant* init;
    if (lut) {
      const auto& t = *ir::info(q).lut;
      std::vector<uint8_t> padded(t.begin(), t.end());
      padded.resize(t.size() + 3, t.back());
      init = llvm::ConstantDataArray::get(c_, llvm::ArrayRef<uint8_t>(padded));
    } else {
      const std::span<const float> t = ir::info(q).map;
      init = llvm::ConstantDataArray::get(c_, llvm::ArrayRef<float>(t.data(), t.size()));
    }
    return new llvm::GlobalVariable(m_, init->getType(), true, llvm::GlobalValue::PrivateLinkage,
                                    init, name);
  }

  Status unsupported(const ir::Inst& in) {
    return make_error("the cpu backend cannot compile '{}' on {}", ir::info(in.op).text,
                      to_string(in.type));
  }

  // Alias classes: one per buffer, and one for the tables. Naming each class's scope and
  // listing every other class's as noalias makes each access carry O(classes) metadata and
  // each alias query cost O(classes): compiles grew with the cube of the buffer count (1,000
  // states took 28 s). Instead a class is a number written in binary: bit j is a scope domain
  // with two scopes, the class takes scope bit_j(c) of each domain and lists the other as
  // noalias. Two different classes differ in some bit, so the one's scope in that domain is in
  // the other's noalias list (ScopedNoAliasAA answers NoAlias); a class never excludes itself.
  // Each access carries 2·log2(classes) scopes.
  void make_alias_scopes() {
    llvm::MDBuilder md(c_);
    const size_t classes = plan_.buffers.size() + 1;  // the last: the tables
    int bits = 1;
    while ((size_t{1} << bits) < classes) ++bits;
    std::vector<std::array<llvm::MDNode*, 2>> scope(bits);
    for (int j = 0; j < bits; ++j) {
      llvm::MDNode* domain = md.createAnonymousAliasScopeDomain(fmt::format("optjit.bit{}", j));
      for (int v = 0; v < 2; ++v)
        scope[j][v] = md.createAnonymousAliasScope(domain, fmt::format("bit{}={}", j, v));
    }
    for (size_t c = 0; c < classes; ++c) {
      std::vector<llvm::Metadata*> own, others;
      for (int j = 0; j < bits; ++j) {
        const int v = static_cast<int>((c >> j) & 1);
        own.push_back(scope[j][v]);
        others.push_back(scope[j][1 - v]);
      }
      alias_scope_.push_back(llvm::MDNode::get(c_, own));
      noalias_.push_back(llvm::MDNode::get(c_, others));
    }
    table_class_ = classes - 1;
  }

  void tag(llvm::Instruction* inst, size_t alias_class) {
    inst->setMetadata(llvm::LLVMContext::MD_alias_scope, alias_scope_[alias_class]);
    inst->setMetadata(llvm::LLVMContext::MD_noalias, noalias_[alias_class]);
  }

  // ir/stochastic_round.h, instruction by instruction.
  llvm::Value* sr_mix(llvm::Value* z) {
    z = b_.CreateMul(b_.CreateXor(z, b_.CreateLShr(z, 30)), b_.getInt64(ir::kSrMul1));
    z = b_.CreateMul(b_.CreateXor(z, b_.CreateLShr(z, 27)), b_.getInt64(ir::kSrMul2));
    return b_.CreateXor(z, b_.CreateLShr(z, 31));
  }
  // A whole f64 below 2^53 (a key, a first element) as the integer, truncated; anything else
  // 0 (ir::sr_key). The select keeps fptoui's poison out of range from being chosen.
  llvm::Value* sr_key(llvm::Value* d) {
    llvm::Value* in_range =
        b_.CreateAnd(b_.CreateFCmpOGE(d, llvm::ConstantFP::get(b_.getDoubleTy(), 0.0)),
                     b_.CreateFCmpOLT(d, llvm::ConstantFP::get(b_.getDoubleTy(), 0x1p53)));
    return b_.CreateSelect(in_range, b_.CreateFPToUI(d, b_.getInt64Ty()), b_.getInt64(0));
  }
  llvm::Value* sround(const ir::Inst& in, llvm::Value* x, DType have, llvm::Value* key_f64,
                      llvm::Value* first_f64, llvm::Value* element) {
    llvm::Value* f = convert(x, have, DType::f32);
    llvm::Value* stream =
        sr_mix(b_.CreateXor(sr_key(key_f64), b_.getInt64(static_cast<uint64_t>(in.attr) << 56)));
    llvm::Value* h = sr_mix(b_.CreateAdd(stream, b_.CreateAdd(sr_key(first_f64), element)));
    llvm::Value* r = b_.CreateAnd(b_.CreateTrunc(h, b_.getInt32Ty()), b_.getInt32(0xffff));
    llvm::Value* bits = b_.CreateBitCast(f, b_.getInt32Ty());
    llvm::Value* finite =
        b_.CreateICmpNE(b_.CreateAnd(bits, b_.getInt32(0x7f800000)), b_.getInt32(0x7f800000));
    llvm::Value* rounded = b_.CreateBitCast(
        b_.CreateAnd(b_.CreateAdd(bits, r), b_.getInt32(0xffff0000u)), b_.getFloatTy());
    return convert(b_.CreateSelect(finite, rounded, f), DType::f32, in.type);
  }

  llvm::Value* table_load(llvm::Type* t, llvm::Value* p, const char* name) {
    llvm::LoadInst* l = b_.CreateLoad(t, p, name);
    tag(l, table_class_);
    return l;
  }

  llvm::Type* storage_type(DType t) {
    switch (t) {
      case DType::f64:
        return b_.getDoubleTy();
      case DType::f32:
        return b_.getFloatTy();
      case DType::f16:
      case DType::bf16:
      case DType::u16:
        return b_.getInt16Ty();
      case DType::i64:
        return b_.getInt64Ty();
      case DType::b1:
      case DType::u8:
        return b_.getInt8Ty();
    }
    return nullptr;
  }

  llvm::Type* value_type(DType t) {
    switch (t) {
      case DType::f64:
        return b_.getDoubleTy();
      case DType::i64:
        return b_.getInt64Ty();
      case DType::b1:
        return b_.getInt1Ty();
      default:
        return b_.getFloatTy();  // f32, and half types computed in f32
    }
  }

  llvm::Value* constant(double x, DType t) {
    if (t == DType::b1) return b_.getInt1(x != 0);
    if (t == DType::i64) return b_.getInt64(static_cast<int64_t>(x));
    return llvm::ConstantFP::get(value_type(t), x);
  }

  // Converts between value types, rounding to nearest on narrowing like the reference's casts.
  llvm::Value* convert(llvm::Value* x, DType from, DType to) {
    llvm::Type* from_ty = value_type(from);
    llvm::Type* to_ty = value_type(to);
    if (from_ty == to_ty) return x;
    if (to == DType::b1)
      return is_float(from) ? b_.CreateFCmpUNE(x, llvm::ConstantFP::get(from_ty, 0.0))
                            : b_.CreateICmpNE(x, llvm::ConstantInt::get(from_ty, 0));
    if (from == DType::b1)
      return is_float(to) ? b_.CreateUIToFP(x, to_ty) : b_.CreateZExt(x, to_ty);
    if (to == DType::i64) {  // truncated and saturated at 2^53, Inf and NaN 0 (ir::round_to)
      llvm::Value* finite = b_.CreateFCmpOLT(call(llvm::Intrinsic::fabs, {x}),
                                             llvm::ConstantFP::getInfinity(from_ty));
      llvm::Value* sat = b_.CreateIntrinsic(llvm::Intrinsic::fptosi_sat, {to_ty, from_ty}, {x});
      return b_.CreateSelect(finite, i64_saturated(sat), b_.getInt64(0));
    }
    if (from == DType::i64) return b_.CreateSIToFP(x, to_ty);
    return from_ty->getPrimitiveSizeInBits() < to_ty->getPrimitiveSizeInBits()
               ? b_.CreateFPExt(x, to_ty)
               : b_.CreateFPTrunc(x, to_ty);
  }

  llvm::Value* load(uint32_t buf, llvm::Value* i, DType want) {
    DType st = plan_.buffers[buf].storage;
    llvm::Type* sty = storage_type(st);
    llvm::LoadInst* l =
        b_.CreateLoad(sty, b_.CreateInBoundsGEP(sty, base_.at(buf), i), plan_.buffers[buf].name);
    tag(l, buf);
    llvm::Value* x = l;
    DType have = st;
    if (st == DType::f16) {
      x = b_.CreateFPExt(b_.CreateBitCast(x, b_.getHalfTy()), b_.getFloatTy());
      have = DType::f32;
    } else if (st == DType::bf16) {
      x = b_.CreateBitCast(b_.CreateShl(b_.CreateZExt(x, b_.getInt32Ty()), 16), b_.getFloatTy());
      have = DType::f32;
    } else if (st == DType::u16) {
      x = b_.CreateUIToFP(x, b_.getFloatTy());
      have = DType::f32;
    } else if (st == DType::b1) {  // a byte in memory (a scratch buffer's carried condition)
      x = b_.CreateICmpNE(x, b_.getInt8(0));
    }
    return convert(x, have, want);
  }

  // An f32's bf16 bits (in the low 16 of an i32): rounded to nearest even on the top 16 bits;
  // NaN stays a quiet NaN.
  llvm::Value* bf16_bits(llvm::Value* f) {
    llvm::Value* bits = b_.CreateBitCast(f, b_.getInt32Ty());
    llvm::Value* lsb = b_.CreateAnd(b_.CreateLShr(bits, 16), b_.getInt32(1));
    llvm::Value* rounded =
        b_.CreateLShr(b_.CreateAdd(b_.CreateAdd(bits, b_.getInt32(0x7fff)), lsb), 16);
    llvm::Value* quiet = b_.CreateOr(b_.CreateLShr(bits, 16), b_.getInt32(0x40));
    return b_.CreateSelect(b_.CreateFCmpUNO(f, f), quiet, rounded);
  }

  // An f64 as the f32 nearest it rounding to odd: toward zero, with the last bit set where
  // that was inexact. Rounding that to bf16 or f16 (to nearest even) is the f64's own rounding
  // to them, as the reference's; through the f32 nearest it, a value just past a halfway point
  // of theirs could land on it and round to even the wrong way (1 + 2^-8 + 2^-30: bf16 1 +
  // 2^-7, but its nearest f32 is 1 + 2^-8, whose bf16 is 1). NaN stays NaN.
  llvm::Value* f32_odd(llvm::Value* d) {
    llvm::Value* t = b_.CreateFPTrunc(d, b_.getFloatTy());
    llvm::Value* back = b_.CreateFPExt(t, b_.getDoubleTy());
    llvm::Value* bits = b_.CreateBitCast(t, b_.getInt32Ty());
    llvm::Value* above =
        b_.CreateFCmpOGT(call(llvm::Intrinsic::fabs, {back}), call(llvm::Intrinsic::fabs, {d}));
    bits = b_.CreateSelect(above, b_.CreateSub(bits, b_.getInt32(1)), bits);
    bits = b_.CreateSelect(b_.CreateFCmpUNE(back, d), b_.CreateOr(bits, b_.getInt32(1)), bits);
    return b_.CreateBitCast(bits, b_.getFloatTy());
  }

  // Value x of type `have` as a u16 (i16): truncated, saturated at 0 and 65535, NaN 0, as
  // ir::round_to (fptoui.sat; fptoui is poison out of range).
  llvm::Value* to_u16(llvm::Value* x, DType have) {
    if (!is_float(have)) x = convert(x, have, DType::f64);
    return b_.CreateIntrinsic(llvm::Intrinsic::fptoui_sat, {b_.getInt16Ty(), x->getType()}, {x});
  }

  // i64 value x held within kI64Limit.
  llvm::Value* i64_saturated(llvm::Value* x) {
    const auto limit = static_cast<int64_t>(kI64Limit);
    x = call(llvm::Intrinsic::smax, {x, b_.getInt64(-limit)});
    return call(llvm::Intrinsic::smin, {x, b_.getInt64(limit)});
  }

  // The cast op: convert (which saturates to i64, as the reference's casts), where casts to
  // bf16 and f16 round there (their values are computed in f32 registers; the reference rounds
  // a cast, ir::round_to).
  llvm::Value* cast(llvm::Value* x, DType from, DType to) {
    if (is_float(from) && (to == DType::bf16 || to == DType::f16)) {
      llvm::Value* f = from == DType::f64 ? f32_odd(x) : x;
      if (to == DType::f16)
        return b_.CreateFPExt(b_.CreateFPTrunc(f, b_.getHalfTy()), b_.getFloatTy());
      return b_.CreateBitCast(b_.CreateShl(bf16_bits(f), 16), b_.getFloatTy());
    }
    return convert(x, from, to);
  }

  void store(uint32_t buf, llvm::Value* i, llvm::Value* x, DType have) {
    DType st = plan_.buffers[buf].storage;
    llvm::Type* sty = storage_type(st);
    // f64 values (f64 parameters' state) through f32_odd: one rounding, as the reference's.
    auto as_f32 = [&] { return have == DType::f64 ? f32_odd(x) : convert(x, have, DType::f32); };
    if (st == DType::f16) {
      x = b_.CreateBitCast(b_.CreateFPTrunc(as_f32(), b_.getHalfTy()), b_.getInt16Ty());
    } else if (st == DType::bf16) {
      x = b_.CreateTrunc(bf16_bits(as_f32()), b_.getInt16Ty());
    } else if (st == DType::u16) {  // an integer 0..65535 (the low half of an f32 master)
      x = to_u16(x, have);
    } else if (st == DType::b1) {  // 0 or 1 in a byte: an i1 store leaves the other bits open
      x = b_.CreateZExt(convert(x, have, DType::b1), b_.getInt8Ty());
    } else {
      x = convert(x, have, st);
    }
    llvm::StoreInst* s = b_.CreateStore(x, b_.CreateInBoundsGEP(sty, base_.at(buf), i));
    tag(s, buf);
  }

  llvm::Value* call(llvm::Intrinsic::ID id, std::vector<llvm::Value*> args) {
    llvm::Function* f = llvm::Intrinsic::getDeclaration(&m_, id, {args[0]->getType()});
    return b_.CreateCall(f, args);
  }

  // max(a, b) as the reference computes it: NaN if either is NaN, else a > b ? a : b.
  llvm::Value* float_minmax(bool is_max, llvm::Value* a, llvm::Value* b) {
    llvm::Value* pick =
        b_.CreateSelect(is_max ? b_.CreateFCmpOGT(a, b) : b_.CreateFCmpOLT(a, b), a, b);
    return b_.CreateSelect(b_.CreateFCmpUNO(a, b), b_.CreateFAdd(a, b), pick);
  }

  template <typename Arg, typename ArgType>
  llvm::Value* arith(const ir::Inst& in, Arg arg, ArgType arg_type) {
    const OpKind kind = ir::info(in.op).kind;
    if (kind == OpKind::select) return b_.CreateSelect(arg(0), arg(1), arg(2));
    if (kind == OpKind::cast) return cast(arg(0), arg_type(0), in.type);
    if (kind == OpKind::logic) {
      if (in.op == Op::Not) return b_.CreateNot(arg(0));
      return in.op == Op::And ? b_.CreateAnd(arg(0), arg(1)) : b_.CreateOr(arg(0), arg(1));
    }
    if (kind == OpKind::compare) {
      DType t = arg_type(0);
      if (in.op == Op::IsFinite)
        return b_.CreateFCmpONE(call(llvm::Intrinsic::fabs, {arg(0)}),
                                llvm::ConstantFP::getInfinity(value_type(t)));
      if (is_float(t)) {
        switch (in.op) {
          case Op::Lt:
            return b_.CreateFCmpOLT(arg(0), arg(1));
          case Op::Le:
            return b_.CreateFCmpOLE(arg(0), arg(1));
          case Op::Gt:
            return b_.CreateFCmpOGT(arg(0), arg(1));
          case Op::Ge:
            return b_.CreateFCmpOGE(arg(0), arg(1));
          case Op::Eq:
            return b_.CreateFCmpOEQ(arg(0), arg(1));
          case Op::Ne:
            return b_.CreateFCmpUNE(arg(0), arg(1));
          default:
            return nullptr;
        }
      }
      switch (in.op) {
        case Op::Lt:
          return b_.CreateICmpSLT(arg(0), arg(1));
        case Op::Le:
          return b_.CreateICmpSLE(arg(0), arg(1));
        case Op::Gt:
          return b_.CreateICmpSGT(arg(0), arg(1));
        case Op::Ge:
          return b_.CreateICmpSGE(arg(0), arg(1));
        case Op::Eq:
          return b_.CreateICmpEQ(arg(0), arg(1));
        case Op::Ne:
          return b_.CreateICmpNE(arg(0), arg(1));
        default:
          return nullptr;
      }
    }
    if (kind != OpKind::math) return nullptr;
    if (in.type == DType::i64) {
      switch (in.op) {
        case Op::Neg:
          return b_.CreateNeg(arg(0));
        case Op::Abs:
          return call(llvm::Intrinsic::abs, {arg(0), b_.getFalse()});
        // Saturated at kI64Limit, as the reference's doubles: a sum of two values within
        // it cannot overflow; a product is taken in f64 (exact up to the limit, and at or past
        // it where the exact one is) and clamped there.
        case Op::Add:
          return i64_saturated(b_.CreateAdd(arg(0), arg(1)));
        case Op::Sub:
          return i64_saturated(b_.CreateSub(arg(0), arg(1)));
        case Op::Mul: {
          auto* f64 = b_.getDoubleTy();
          llvm::Value* p =
              b_.CreateFMul(b_.CreateSIToFP(arg(0), f64), b_.CreateSIToFP(arg(1), f64));
          p = call(llvm::Intrinsic::maxnum, {p, llvm::ConstantFP::get(f64, -kI64Limit)});
          p = call(llvm::Intrinsic::minnum, {p, llvm::ConstantFP::get(f64, kI64Limit)});
          return b_.CreateFPToSI(p, b_.getInt64Ty());
        }
        case Op::Min:
          return call(llvm::Intrinsic::smin, {arg(0), arg(1)});
        case Op::Max:
          return call(llvm::Intrinsic::smax, {arg(0), arg(1)});
        default:
          return nullptr;
      }
    }
    llvm::Type* t = value_type(in.type);
    auto one = llvm::ConstantFP::get(t, 1.0);
    auto zero = llvm::ConstantFP::get(t, 0.0);
    switch (in.op) {
      case Op::Neg:
        return b_.CreateFNeg(arg(0));
      case Op::Abs:
        return call(llvm::Intrinsic::fabs, {arg(0)});
      case Op::Sign: {
        llvm::Value* x = arg(0);
        llvm::Value* s = b_.CreateSelect(
            b_.CreateFCmpOGT(x, zero), one,
            b_.CreateSelect(b_.CreateFCmpOLT(x, zero), llvm::ConstantFP::get(t, -1.0), zero));
        return b_.CreateSelect(b_.CreateFCmpUNO(x, x), x, s);
      }
      case Op::Sqrt:
        return call(llvm::Intrinsic::sqrt, {arg(0)});
      case Op::Rsqrt:
        return b_.CreateFDiv(one, call(llvm::Intrinsic::sqrt, {arg(0)}));
      case Op::Exp:
        return call(llvm::Intrinsic::exp, {arg(0)});
      case Op::Log:
        return call(llvm::Intrinsic::log, {arg(0)});
      case Op::Floor:
        return call(llvm::Intrinsic::floor, {arg(0)});
      case Op::Cos:
        return call(llvm::Intrinsic::cos, {arg(0)});
      case Op::Hi16:
      case Op::Lo16:
      case Op::Join16: {  // f32 bit patterns (the verifier checks the type)
        auto* i32 = b_.getInt32Ty();
        llvm::Value* bits = b_.CreateBitCast(arg(0), i32);
        if (in.op == Op::Lo16) return b_.CreateUIToFP(b_.CreateAnd(bits, b_.getInt32(0xffff)), t);
        bits = b_.CreateAnd(bits, b_.getInt32(0xffff0000u));
        if (in.op == Op::Join16)
          bits = b_.CreateOr(bits, b_.CreateZExt(to_u16(arg(1), arg_type(1)), i32));
        return b_.CreateBitCast(bits, t);
      }
      case Op::Add:
        return b_.CreateFAdd(arg(0), arg(1));
      case Op::Sub:
        return b_.CreateFSub(arg(0), arg(1));
      case Op::Mul:
        return b_.CreateFMul(arg(0), arg(1));
      case Op::Div:
        return b_.CreateFDiv(arg(0), arg(1));
      case Op::Pow:
        return call(llvm::Intrinsic::pow, {arg(0), arg(1)});
      case Op::Fma:  // one rounding (vfmadd where the CPU has FMA, else libm's fmaf)
        return call(llvm::Intrinsic::fma, {arg(0), arg(1), arg(2)});
      case Op::Min:
        return float_minmax(false, arg(0), arg(1));
      case Op::Max:
        return float_minmax(true, arg(0), arg(1));
      default:
        return nullptr;
    }
  }

  // Accumulators: f64 sums for sum/sumsq; |x| bit patterns (i32 or i64) for maxabs/anynonfinite.
  llvm::Type* acc_type(const ir::Inst& in) {
    if (in.op == Op::Sum || in.op == Op::SumSq) return b_.getDoubleTy();
    return pass_.body.at(in.args[0]).type == DType::f64 ? b_.getInt64Ty() : b_.getInt32Ty();
  }

  llvm::Value* abs_bits(llvm::Value* x, DType t) {
    bool wide = t == DType::f64;
    llvm::Type* it = wide ? b_.getInt64Ty() : b_.getInt32Ty();
    llvm::Value* bits = b_.CreateBitCast(x, it);
    return b_.CreateAnd(bits,
                        llvm::ConstantInt::get(it, wide ? 0x7fffffffffffffffull : 0x7fffffffull));
  }

  llvm::Value* accumulate(Op op, llvm::Value* acc, llvm::Value* x, DType t) {
    if (op == Op::Sum || op == Op::SumSq) {
      llvm::Value* d = convert(x, t, DType::f64);
      if (op == Op::SumSq) d = b_.CreateFMul(d, d);
      llvm::FastMathFlags fmf;
      fmf.setAllowReassoc();
      auto* add = llvm::cast<llvm::Instruction>(b_.CreateFAdd(acc, d));
      add->setFastMathFlags(fmf);
      return add;
    }
    return call(llvm::Intrinsic::umax, {acc, abs_bits(x, t)});
  }

  llvm::Value* finish(Op op, llvm::Value* acc, DType t) {
    if (op == Op::Sum || op == Op::SumSq) return acc;
    bool wide = t == DType::f64;
    if (op == Op::MaxAbs) {
      llvm::Value* f = b_.CreateBitCast(acc, wide ? b_.getDoubleTy() : b_.getFloatTy());
      return wide ? f : b_.CreateFPExt(f, b_.getDoubleTy());
    }
    llvm::Value* inf = wide ? b_.getInt64(0x7ff0000000000000ull) : b_.getInt32(0x7f800000u);
    return b_.CreateUIToFP(b_.CreateICmpUGE(acc, inf), b_.getDoubleTy());
  }

  const plan::Plan& plan_;
  const plan::Pass& pass_;
  const ir::Program* body_ = &pass_.body;  // the body (or version of it) being emitted
  size_t k_;
  int interleave_;
  llvm::Module& m_;
  llvm::LLVMContext& c_;
  llvm::IRBuilder<> b_;
  llvm::Function* fn_ = nullptr;
  std::vector<llvm::MDNode*> alias_scope_, noalias_;  // per alias class
  size_t table_class_ = 0;
  llvm::Value* offset_ = nullptr;  // the chunk's first element
  std::map<uint32_t, llvm::Value*> base_;
  std::vector<llvm::Value*> uniform_;             // per uniform slot, in its value type
  std::map<uint32_t, llvm::Value*> codes_;        // quantized buffer -> its codes in this chunk
  std::map<uint32_t, llvm::Value*> scales_;       // quantized buffer -> its tensor's scales
  std::map<uint32_t, llvm::Value*> scale_;        // quantized loaded buffer -> this block's scale
  std::map<uint32_t, llvm::Value*> tmp_;          // quantized stored buffer -> staging array
  std::map<uint32_t, llvm::Value*> dequantized_;  // quantized loaded buffer -> map values
  std::map<uint32_t, llvm::Value*> unpacked_;     // 4-bit loaded buffer -> its block's codes
  bool vbmi_ = false;                             // AVX-512 VBMI: dequantize_block
  bool avx512bw_ = false;                         // AVX-512 BW: search_codes
  bool avx512f_ = false, avx2_ = false;           // f32 lanes of a vector register: 16, 8
  bool gathers_ = false;                          // AVX2 without AVX-512: gather_block, ...
  bool prefer256_ = false;                        // LLVM's tuning: 256-bit vectors (8 lanes)
  bool fast_gather_ = false;                      // LLVM's tuning: gathers beat byte permutes
};

}  // namespace

Status emit_llvm(const plan::Plan& plan, llvm::Module& m, const std::string& cpu,
                 const std::string& features, int interleave) {
  if (interleave < 0 || interleave > 16)
    return make_error("unroll (interleave count) {} is not in 0..16", interleave);
  for (size_t k = 0; k < plan.passes.size(); ++k)
    OPTJIT_TRY(PassEmitter(plan, k, m, interleave).emit(cpu, features));
  return Status::Ok();
}

}  // namespace optjit::codegen
