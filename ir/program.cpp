#include "ir/program.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ir/error.h"

namespace optjit::ir {

namespace {
constexpr OpInfo kOps[] = {
#define OPTJIT_OP(name, text, arity, kind, synopsis) {text, arity, OpKind::kind, synopsis},
#include "ir/ops.def"
};
}  // namespace

const OpInfo& info(Op op) { return kOps[static_cast<size_t>(op)]; }

std::optional<Op> parse_op(std::string_view text) {
  for (size_t i = 0; i < std::size(kOps); ++i)
    if (kOps[i].text == text) return static_cast<Op>(i);
  return std::nullopt;
}

double element_bytes(const std::vector<BufferDecl>& buffers, size_t i) {
  const BufferDecl& b = buffers[i];
  if (b.per_block) return i > 0 ? scale_bytes_per_element(buffers[i - 1].quant) : 0.0;
  if (b.quant != Quant::none) return code_bytes_per_element(b.quant);
  return static_cast<double>(size_bytes(b.storage));
}

int64_t quant_block(const std::vector<BufferDecl>& buffers) {
  for (const auto& b : buffers)
    if (b.quant != Quant::none) return info(b.quant).block;
  return kQuantBlock;
}

std::string_view to_string(BufferRole r) {
  switch (r) {
    case BufferRole::param:
      return "param";
    case BufferRole::grad:
      return "grad";
    case BufferRole::state:
      return "state";
    case BufferRole::scratch:
      return "scratch";
  }
  return "?";
}

bool has_result(Op op) { return info(op).kind != OpKind::effect; }
bool is_pure(Op op) { return info(op).kind != OpKind::effect; }

Rank result_rank(Op op, uint32_t attr, Rank max_operand_rank) {
  switch (op) {
    case Op::Const:
    case Op::Hyper:
    case Op::Step:
    case Op::SLoad:
      return Rank::scalar;
    case Op::Numel:
    case Op::First:
    case Op::HoldsCodes:
    case Op::Uniform:
      return Rank::tensor;
    case Op::Load:
      return Rank::element;
    default:
      break;
  }
  if (info(op).kind == OpKind::reduce)
    return static_cast<Scope>(attr) == Scope::all ? Rank::scalar : Rank::tensor;
  return max_operand_rank;
}

template <typename Decls>
static std::optional<uint32_t> find_named(const Decls& decls, std::string_view name) {
  for (size_t i = 0; i < decls.size(); ++i)
    if (decls[i].name == name) return static_cast<uint32_t>(i);
  return std::nullopt;
}

std::optional<uint32_t> Program::find_hyper(std::string_view n) const {
  return find_named(hypers, n);
}
std::optional<uint32_t> Program::find_buffer(std::string_view n) const {
  return find_named(buffers, n);
}
std::optional<uint32_t> Program::find_state(std::string_view n) const {
  return find_named(states, n);
}

static uint32_t find_role(const Program& p, BufferRole role) {
  for (size_t i = 0; i < p.buffers.size(); ++i)
    if (p.buffers[i].role == role) return static_cast<uint32_t>(i);
  OPTJIT_CHECK(false && "program without a param or grad buffer");
  return 0;
}
uint32_t Program::param_buffer() const { return find_role(*this, BufferRole::param); }
uint32_t Program::grad_buffer() const { return find_role(*this, BufferRole::grad); }

Builder::Builder(Program decls) : p_(std::move(decls)) { p_.insts.clear(); }

std::string to_string(const std::vector<Interval>& allowed) {
  std::string out;
  for (const auto& i : allowed)
    out += fmt::format("{}{}{}, {}{}", out.empty() ? "" : " or ", i.lo_open ? '(' : '[', i.lo, i.hi,
                       i.hi_open ? ')' : ']');
  return out;
}

std::string check_hyper(const HyperDecl& h, double value) {
  bool ok = h.allowed.empty() && !(h.whole && std::isnan(value));
  for (const auto& i : h.allowed) ok = ok || i.contains(value);
  if (ok && (!h.whole || std::isinf(value) || value == std::floor(value))) return "";
  std::vector<std::string> must;
  if (h.whole) must.push_back("a whole number");
  if (!h.allowed.empty()) must.push_back("in " + to_string(h.allowed));
  return fmt::format("{} = {} is invalid: {} must be {}", h.name, value,
                     h.rule.empty() ? "it" : h.rule, fmt::join(must, " "));
}

uint32_t Builder::add_hyper(std::string name, double value) {
  if (auto i = p_.find_hyper(name)) return *i;
  p_.hypers.push_back({std::move(name), value});
  return static_cast<uint32_t>(p_.hypers.size() - 1);
}

void Builder::set_hyper_bounds(uint32_t index, std::vector<Interval> allowed, bool whole,
                               std::string rule, bool step_limit) {
  p_.hypers.at(index).allowed = std::move(allowed);
  p_.hypers.at(index).whole = whole;
  p_.hypers.at(index).rule = std::move(rule);
  p_.hypers.at(index).step_limit = step_limit;
}

uint32_t Builder::add_buffer(BufferDecl decl) {
  p_.buffers.push_back(std::move(decl));
  return static_cast<uint32_t>(p_.buffers.size() - 1);
}

uint32_t Builder::add_state(StateDecl decl) {
  p_.states.push_back(std::move(decl));
  return static_cast<uint32_t>(p_.states.size() - 1);
}

size_t Builder::KeyHash::operator()(const Inst& i) const {
  uint64_t h = static_cast<uint64_t>(i.op) * 0x9E3779B97F4A7C15ull;
  auto mix = [&h](uint64_t x) { h = (h ^ x) * 0x100000001B3ull + (h >> 29); };
  mix(static_cast<uint64_t>(i.type));
  mix(i.attr);
  mix(std::bit_cast<uint64_t>(i.imm));
  for (ValueId a : i.args) mix(index(a));
  return static_cast<size_t>(h);
}

bool Builder::KeyEq::operator()(const Inst& a, const Inst& b) const {
  return a.op == b.op && a.type == b.type && a.attr == b.attr && a.args == b.args &&
         std::bit_cast<uint64_t>(a.imm) == std::bit_cast<uint64_t>(b.imm);
}

ValueId Builder::emit(Op op, DType type, std::array<ValueId, 3> args, uint32_t attr, double imm) {
  Inst inst;
  inst.op = op;
  inst.type = has_result(op) ? type : DType::b1;
  inst.attr = attr;
  inst.imm = imm;
  inst.args = args;
  for (int k = info(op).arity; k < 3; ++k) inst.args[k] = kNoValue;  // callers may pass {}
  Rank max_rank = Rank::scalar;
  for (int k = 0; k < info(op).arity; ++k) {
    OPTJIT_CHECK(index(args[k]) < p_.insts.size());
    max_rank = std::max(max_rank, p_.insts[index(args[k])].rank);
  }
  inst.rank = result_rank(op, attr, max_rank);
  if (is_pure(op)) {
    if (auto it = interned_.find(inst); it != interned_.end()) return it->second;
  }
  auto id = static_cast<ValueId>(p_.insts.size());
  p_.insts.push_back(inst);
  if (is_pure(op)) interned_.emplace(inst, id);
  return id;
}

Program Builder::finish() && { return std::move(p_); }

}  // namespace optjit::ir
