#include "runtime/reference.h"

#include "ir/reductions.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ir/eval.h"
#include "ir/stochastic_round.h"

namespace optjit::runtime {

using ir::Op;
using ir::OpKind;
using ir::ValueId;

double reduce_identity(Op op) { return ir::reduction(op).identity; }
double reduce_step(Op op, double acc, double x) { return ir::reduction(op).accumulate(acc, x); }
double combine_two(Op op, double acc, double p) { return ir::reduction(op).combine(acc, p); }

double combine(Op op, const std::vector<double>& partials) {
  return combine_range(op, partials.size(), [&](size_t i) { return partials[i]; });
}

HostProgram::HostProgram(const plan::Plan& plan, const OptimizerState& s)
    : plan_(plan), s_(s), slot_(plan.program.insts.size(), 0) {
  for (size_t i = 0; i < slot_.size(); ++i) {
    Rank r = plan.program.insts[i].rank;
    if (r == Rank::scalar)
      slot_[i] = static_cast<uint32_t>(n_scalar_++);
    else if (r == Rank::tensor)
      slot_[i] = static_cast<uint32_t>(n_tensor_++);
  }
  scalar_.assign(s.groups.size() * n_scalar_, 0.0);
  tensor_.assign(s.tensors.size() * n_tensor_, 0.0);
}

double& HostProgram::slot(ValueId v, size_t group, size_t tensor) {
  return plan_.program.at(v).rank == Rank::scalar ? scalar_[group * n_scalar_ + slot_[index(v)]]
                                                  : tensor_[tensor * n_tensor_ + slot_[index(v)]];
}

double HostProgram::get(ValueId v, size_t group, size_t tensor) const {
  return plan_.program.at(v).rank == Rank::scalar ? scalar_[group * n_scalar_ + slot_[index(v)]]
                                                  : tensor_[tensor * n_tensor_ + slot_[index(v)]];
}

bool HostProgram::run_segment(size_t k) {
  const ir::Program& p = plan_.program;
  bool skip = false;
  for (ValueId v : plan_.host[k]) {
    const ir::Inst& in = p.at(v);
    auto eval = [&](size_t g, size_t t) {
      switch (in.op) {
        case Op::Const:
          return in.imm;
        case Op::Hyper:
          return s_.groups[g].hypers[in.attr];
        case Op::Step:
          return static_cast<double>(s_.step + 1);
        case Op::Numel:
          return static_cast<double>(s_.tensors[t].whole);
        case Op::First:
          return static_cast<double>(s_.tensors[t].first);
        case Op::HoldsCodes:
          return holds_codes(plan_, in.attr, s_.tensors[t]) ? 1.0 : 0.0;
        case Op::SLoad: {
          // An i64 or b1 state set from outside (a checkpoint's double, an init hyper) as a
          // value of its type: saturated, or 0 and 1, as a kernel's conversion of it is.
          const double x = s_.groups[g].states[in.attr];
          return in.type == DType::i64 || in.type == DType::b1 ? round_to(in.type, x) : x;
        }
        default:
          break;
      }
      double a[3] = {0, 0, 0};
      for (int i = 0; i < ir::info(in.op).arity; ++i) a[i] = get(in.args[i], g, t);
      return ir::eval_op(in.op, in.type, a[0], a[1], a[2]);
    };
    if (in.op == Op::SkipIf || in.op == Op::SStore) {
      for (size_t g = 0; g < s_.groups.size(); ++g) {
        double x = get(in.args[0], g, 0);
        if (in.op == Op::SkipIf)
          skip |= x != 0;
        else
          pending_.emplace_back(static_cast<uint32_t>(g), in.attr, x);
      }
      continue;
    }
    if (in.rank == Rank::scalar) {
      for (size_t g = 0; g < s_.groups.size(); ++g) slot(v, g, 0) = eval(g, 0);
    } else {
      for (size_t t = 0; t < s_.tensors.size(); ++t)
        slot(v, s_.tensors[t].group, t) = eval(s_.tensors[t].group, t);
    }
  }
  return skip;
}

void HostProgram::uniforms(size_t k, size_t t, std::vector<double>& out) const {
  const auto& u = plan_.passes[k].uniforms;
  out.resize(u.size());
  for (size_t i = 0; i < u.size(); ++i) out[i] = get(u[i], s_.tensors[t].group, t);
}

std::vector<double> HostProgram::uniform_table(size_t k, size_t stride) const {
  std::vector<double> table(s_.tensors.size() * stride), u;
  for (size_t t = 0; t < s_.tensors.size(); ++t) {
    uniforms(k, t, u);
    std::copy(u.begin(), u.end(), table.begin() + static_cast<std::ptrdiff_t>(t * stride));
  }
  return table;
}

void HostProgram::finish_reductions(size_t k, const std::vector<std::vector<double>>& partial) {
  const auto& reds = plan_.passes[k].reductions;
  for (size_t r = 0; r < reds.size(); ++r) {
    const ir::Inst& in = plan_.program.at(reds[r]);
    if (static_cast<ir::Scope>(in.attr) == ir::Scope::tensor) {
      for (size_t t = 0; t < s_.tensors.size(); ++t) slot(reds[r], 0, t) = partial[r][t];
    } else {
      double v = combine(in.op, partial[r]);
      for (size_t g = 0; g < s_.groups.size(); ++g) slot(reds[r], g, 0) = v;
    }
  }
}

// The pass body is interpreted a block of elements at a time: each instruction runs over the
// block before the next one, so the dispatch on the op is paid once per block, not per element.
// Every element sees the same operations in the same order as one at a time (a pass loads
// before it stores), and reductions still take the elements in order.
std::vector<std::vector<double>> ReferenceBackend::run_pass(size_t k, OptimizerState& s,
                                                            HostProgram& host) const {
  constexpr int64_t kBlock = ir::kQuantBlock;  // a quantized store sees whole blocks
  const plan::Pass& pass = plan_.passes[k];
  const auto& body = pass.body.insts;
  std::vector<std::vector<double>> partial(pass.reductions.size(),
                                           std::vector<double>(s.tensors.size()));
  std::vector<double> uni, val(body.size() * kBlock);
  const std::vector<double> zeros(kBlock, 0.0);
  auto column = [&](ValueId v) { return val.data() + index(v) * kBlock; };
  for (size_t t = 0; t < s.tensors.size(); ++t) {
    TensorState& ts = s.tensors[t];
    host.uniforms(k, t, uni);
    std::vector<double> acc;
    for (size_t r = 0; r < pass.reductions.size(); ++r)
      acc.push_back(reduce_identity(plan_.program.at(pass.reductions[r]).op));
    for (int64_t e0 = 0; e0 < ts.numel; e0 += kBlock) {
      const int64_t n = std::min(kBlock, ts.numel - e0);
      size_t r = 0;
      for (size_t i = 0; i < body.size(); ++i) {
        const ir::Inst& in = body[i];
        double* out = val.data() + i * kBlock;
        switch (in.op) {
          case Op::Const:
            std::fill(out, out + n, in.imm);
            break;
          case Op::Uniform:
            std::fill(out, out + n, uni[in.attr]);
            break;
          case Op::Load: {
            const uint8_t* base = ts.data(in.attr);
            const DType st = plan_.buffers[in.attr].storage;
            if (holds_codes(plan_, in.attr, ts)) {
              const ir::Quant q = plan_.buffers[in.attr].quant;
              const int64_t qb = ir::info(q).block;
              const uint8_t* scales = ts.data(in.attr + 1);
              for (int64_t j = 0; j < n; ++j) {
                float scale;
                std::memcpy(&scale, scales + 4 * ((e0 + j) / qb), 4);
                out[j] = ir::dequantize(q, ir::code_at(q, base, e0 + j), scale);
              }
            } else if (st == DType::f32) {  // the common types without a per-element dispatch
              for (int64_t j = 0; j < n; ++j) {
                float f;
                std::memcpy(&f, base + 4 * (e0 + j), 4);
                out[j] = f;
              }
            } else if (st == DType::f64) {
              std::memcpy(out, base + 8 * e0, static_cast<size_t>(8 * n));
            } else {
              for (int64_t j = 0; j < n; ++j) out[j] = load_element(base, st, e0 + j);
            }
            break;
          }
          case Op::Store: {
            uint8_t* base = ts.data(in.attr);
            const DType st = plan_.buffers[in.attr].storage;
            const double* x = column(in.args[0]);
            if (holds_codes(plan_, in.attr, ts)) {
              // Whole quantization blocks: each block's absmax is known here, in this pass.
              ir::quantize(plan_.buffers[in.attr].quant, x, n, base,
                           reinterpret_cast<float*>(ts.data(in.attr + 1)), e0);
            } else if (st == DType::f64)
              std::memcpy(base + 8 * e0, x, static_cast<size_t>(8 * n));
            else
              for (int64_t j = 0; j < n; ++j) store_element(base, st, e0 + j, x[j]);
            break;
          }
          case Op::SRound: {
            const double* x = column(in.args[0]);
            const double* key = column(in.args[1]);
            const double* first = column(in.args[2]);
            for (int64_t j = 0; j < n; ++j)
              out[j] = ir::sround_element(x[j], key[j], first[j], in.attr, e0 + j);
            break;
          }
          default:
            if (ir::info(in.op).kind == OpKind::reduce) {
              const double* x = column(in.args[0]);
              for (int64_t j = 0; j < n; ++j) acc[r] = reduce_step(in.op, acc[r], x[j]);
              ++r;
            } else {
              const int arity = ir::info(in.op).arity;
              const double* a0 = arity > 0 ? column(in.args[0]) : zeros.data();
              const double* a1 = arity > 1 ? column(in.args[1]) : zeros.data();
              const double* a2 = arity > 2 ? column(in.args[2]) : zeros.data();
              for (int64_t j = 0; j < n; ++j)
                out[j] = ir::eval_op(in.op, in.type, a0[j], a1[j], a2[j]);
            }
        }
      }
    }
    for (size_t r = 0; r < pass.reductions.size(); ++r) partial[r][t] = acc[r];
  }
  return partial;
}

Expected<StepResult> drive_step(const plan::Plan& plan, OptimizerState& s,
                                const std::function<Status(size_t, HostProgram&)>& run_pass,
                                const std::function<Status()>& finish) {
  HostProgram host(plan, s);
  for (size_t k = 0; k <= plan.passes.size(); ++k) {
    if (host.run_segment(k)) return StepResult{true};
    if (k < plan.passes.size()) OPTJIT_TRY(run_pass(k, host));
  }
  if (finish) OPTJIT_TRY(finish());
  for (auto [g, st, v] : host.pending_states()) s.groups[g].states[st] = v;
  ++s.step;
  return StepResult{false};
}

StepResult ReferenceBackend::step(OptimizerState& s) const {
  return drive_step(plan_, s,
                    [&](size_t k, HostProgram& host) {
                      auto partial = run_pass(k, s, host);
                      if (!plan_.passes[k].reductions.empty()) host.finish_reductions(k, partial);
                      return Status::Ok();
                    })
      .value();
}

}  // namespace optjit::runtime
