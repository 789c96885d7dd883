// Random pipelines, parameters and the comparison of a backend with the reference, shared by
// the property tests (rapidcheck; call these inside a property).
#pragma once

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <rapidcheck.h>

#include "ir/builtins.h"
#include "ir/plan.h"
#include "runtime/reference.h"
#include "runtime/state.h"

namespace optjit {

// A random pipeline: 1-3 built-in transforms with random options, peers, state formats and
// (for lr) schedules.
inline rc::Gen<std::string> gen_builtin_pipeline() {
  return rc::gen::exec([] {
    std::vector<std::string> transforms, schedules;
    for (const auto& d : dsl::builtins())
      if (d->name != "master_weights")  // first or nowhere; placed below
        (d->kind == dsl::DefKind::transform ? transforms : schedules).push_back(d->name);
    // State formats: the 16-bit ones, and one family of block-quantized formats per pipeline
    // (the verifier refuses two rules); 8bit and 4bit store second moments in unsigned maps.
    // The tensors of these properties are small, so a quantized state keeps f32 there, as
    // bitsandbytes' min_8bit_size does (the quantized kernels have their own tests).
    std::vector<std::string> formats = {"f32", "bf16", "f16", "bf16_sr"};
    for (const char* f : *rc::gen::elementOf(
             std::vector<std::vector<const char*>>{{"8bit", "q8"}, {"4bit", "q4"}, {"f8"}}))
      formats.push_back(f);
    int n = *rc::gen::inRange(1, 4);
    std::vector<std::string> parts;
    if (*rc::gen::inRange(0, 4) == 0) parts.push_back("master_weights()");
    for (int i = 0; i < n; ++i) {
      std::string name = *rc::gen::elementOf(transforms);
      auto def = dsl::find_builtin(name);
      std::vector<std::string> args;
      // A peer (bitsandbytes' kernels' formulas) now and then; they have none of the variants
      // the boolean options and momentum ask for (AMSGrad, RMSprop's momentum), so those stay off.
      bool other_peer = false;
      for (const auto& o : def->options)
        if (o.default_value.index() == 1 && !o.choices.empty() && *rc::gen::inRange(0, 4) == 0) {
          const std::string c = *rc::gen::elementOf(o.choices);
          other_peer |= c != std::get<1>(o.default_value);
          args.push_back(o.name + "=\"" + c + "\"");
        }
      for (const auto& h : def->hypers) {
        if (h.name == "lr" && *rc::gen::inRange(0, 3) == 0) {
          const char* sched[] = {
              "step_lr(base_lr=0.01, step_size=2)",
              "cosine_annealing_lr(base_lr=0.01, T_max=3)",
              "one_cycle_lr(max_lr=0.01, total_steps=10)",
              "cosine_with_warmup(base_lr=0.01, num_warmup_steps=1, num_training_steps=5)",
              "multi_step_lr(base_lr=0.01, milestones=(1, 2))",
              "linear_lr(base_lr=0.01)"};
          args.push_back(std::string("lr=") + *rc::gen::elementOf(std::vector<std::string>(
                                                  std::begin(sched), std::end(sched))));
        } else if (h.defaults.empty()) {
          args.push_back(h.name + "=" + std::to_string(*rc::gen::inRange(1, 5) * 0.5));
        } else if (h.name == "momentum") {
          args.push_back(h.name + "=" + (!other_peer && *rc::gen::arbitrary<bool>() ? "0.9" : "0"));
        }
      }
      for (const auto& o : def->options)
        if (o.default_value.index() == 0 && o.name != "nesterov" && !other_peer &&
            *rc::gen::arbitrary<bool>())
          args.push_back(o.name + "=true");
      if (*rc::gen::inRange(0, 3) == 0)
        args.push_back("state_format=\"" + *rc::gen::elementOf(formats) + "\"");
      std::string joined;
      for (size_t k = 0; k < args.size(); ++k) joined += (k ? ", " : "") + args[k];
      parts.push_back(name + "(" + joined + ")");
    }
    std::string out = "chain(";
    for (size_t k = 0; k < parts.size(); ++k) out += (k ? ", " : "") + parts[k];
    return out + ")";
  });
}

// A random custom transform: element expressions with global and per-tensor reductions
// nested in each other, so the planner sees many pass structures.
inline rc::Gen<std::string> gen_expr(int depth) {
  std::vector<std::string> leaves = {"grad", "param", "m", "lr", "step", "0.5", "numel"};
  if (depth <= 0) return rc::gen::elementOf(leaves);
  return rc::gen::oneOf(
      rc::gen::elementOf(leaves), rc::gen::exec([depth] {
        auto a = *gen_expr(depth - 1), b = *gen_expr(depth - 1);
        std::string op = *rc::gen::elementOf(std::vector<std::string>{"+", "-", "*"});
        return "(" + a + " " + op + " " + b + ")";
      }),
      rc::gen::exec([depth] {
        auto a = *gen_expr(depth - 1);
        std::string f = *rc::gen::elementOf(
            std::vector<std::string>{"sqrt(abs(", "tensor_norm((", "norm((", "max_abs((",
                                     "tensor_sum((", "sign((", "exp(-abs("});
        return f + a + " * grad))";
      }),
      rc::gen::exec([depth] {
        auto a = *gen_expr(depth - 1), b = *gen_expr(depth - 1), c = *gen_expr(depth - 1);
        return "(" + a + " > " + b + " ? " + c + " : " + b + ")";
      }));
}

// A custom transform whose state m, new or old, feeds reductions, a scalar state and the
// update, so the planner carries m across passes; m in a random state format half the time
// (signed ones: m may be negative; quantized formats keep f32 in the small tensors used here).
inline rc::Gen<std::string> gen_custom_pipeline() {
  return rc::gen::exec([] {
    std::string e1 = *gen_expr(3), e2 = *gen_expr(3);
    std::string skip =
        *rc::gen::arbitrary<bool>() ? "  skip_if any_nonfinite(grad) || sum(grad) > 1e30\n" : "";
    std::string format;
    if (*rc::gen::arbitrary<bool>())
      format = "state_format=\"" +
               *rc::gen::elementOf(
                   std::vector<std::string>{"f32", "bf16", "f16", "bf16_sr", "q8", "q4", "f8"}) +
               "\"";
    return "transform t(lr=0.01) {\n  state m = 0.25\n  scalar k = 1\n" + skip +
           "  m = 0.9 * m + " + e1 + " * 0.001\n  k = k * 0.5 + norm(m)\n  param = param - lr * (" +
           e2 + ") * 0.001\n}\nt(" + format + ")";
  });
}

/// 1 to 3 tensors of 0 to `max_numel` elements.
inline std::vector<runtime::HostTensor> random_params(DType t, int max_numel = 8) {
  int count = *rc::gen::inRange(1, 4);
  std::vector<runtime::HostTensor> out;
  for (int i = 0; i < count; ++i) {
    int64_t numel = *rc::gen::inRange(0, max_numel + 1);
    auto h = runtime::HostTensor::zeros("p" + std::to_string(i), t, {numel});
    for (int64_t e = 0; e < numel; ++e) h.set(e, *rc::gen::inRange(-100, 100) / 37.0);
    out.push_back(std::move(h));
  }
  return out;
}

/// Random gradients for `params` in type t (each element one of -50/13 .. 49/13), and the
/// pointers set_grads takes.
struct RandomGrads {
  std::vector<runtime::HostTensor> grads;
  std::vector<const runtime::HostTensor*> ptrs;
};
inline RandomGrads random_grads(const std::vector<runtime::HostTensor>& params, DType t) {
  RandomGrads r;
  for (const auto& p : params) {
    auto g = runtime::HostTensor::zeros(p.name, t, p.shape);
    for (int64_t e = 0; e < g.numel(); ++e) g.set(e, *rc::gen::inRange(-50, 50) / 13.0);
    r.grads.push_back(std::move(g));
  }
  for (const auto& g : r.grads) r.ptrs.push_back(&g);
  return r;
}

/// The spacing of a storage type's subnormals: its precision near zero.
inline double subnormal_step(DType t) {
  switch (t) {
    case DType::f16:
      return std::ldexp(1.0, -24);
    case DType::bf16:
      return std::ldexp(1.0, -133);
    case DType::f32:
      return std::ldexp(1.0, -149);
    default:
      return std::numeric_limits<double>::denorm_min();
  }
}

/// Three steps of random gradients on `step` (it returns whether the step was skipped) and on
/// the reference: skips, step counts, every buffer and every scalar state agree, within
/// rounding of the storage type.
inline void check_backend_matches_reference(
    const plan::Plan& plan, DType t, const std::vector<runtime::HostTensor>& params,
    const std::function<bool(runtime::OptimizerState&)>& step) {
  auto a = runtime::init_state(plan, params, {});
  auto b = runtime::init_state(plan, params, {});
  RC_ASSERT(a.ok() && b.ok());
  runtime::ReferenceBackend ref(plan);
  const double rtol = t == DType::f64 ? 1e-9 : t == DType::f32 ? 1e-4 : 2e-2;
  // Each element's largest magnitude over the steps, of each buffer of the reference's state:
  // a 16-bit state's rounding at one step is a step of the magnitude it had then.
  std::vector<std::vector<std::vector<double>>> peak(a->tensors.size());
  for (int k = 0; k < 3; ++k) {
    const RandomGrads g = random_grads(params, t);
    RC_ASSERT(runtime::set_grads(plan, *a, g.ptrs).ok() &&
              runtime::set_grads(plan, *b, g.ptrs).ok());
    RC_ASSERT(step(*a) == ref.step(*b).skipped);
    for (size_t i = 0; i < b->tensors.size(); ++i) {
      peak[i].resize(plan.program.buffers.size());
      for (size_t buf = 0; buf < plan.program.buffers.size(); ++buf) {
        if (plan.buffers[buf].per_block) continue;
        peak[i][buf].resize(static_cast<size_t>(b->tensors[i].numel), 0.0);
        for (int64_t e = 0; e < b->tensors[i].numel; ++e) {
          const double y = std::fabs(
              runtime::load_element(b->tensors[i].data(buf), plan.buffers[buf].storage, e));
          if (std::isfinite(y)) peak[i][buf][e] = std::max(peak[i][buf][e], y);
        }
      }
    }
  }
  RC_ASSERT(a->step == b->step);
  for (size_t i = 0; i < a->tensors.size(); ++i)
    for (size_t k = 0; k < plan.program.buffers.size(); ++k) {
      // A quantized state's scales (none for the small tensors here, which keep f32 state).
      if (plan.buffers[k].per_block) continue;
      RC_ASSERT(plan.buffers[k].quant == ir::Quant::none ||
                !ir::quantized_tensor(plan.buffers[k].quant, a->tensors[i].numel));
      DType st = plan.buffers[k].storage;
      double scale = 0;
      for (int64_t e = 0; e < a->tensors[i].numel; ++e)
        scale = std::max(scale, std::fabs(runtime::load_element(b->tensors[i].data(k), st, e)));
      for (int64_t e = 0; e < a->tensors[i].numel; ++e) {
        double x = runtime::load_element(a->tensors[i].data(k), st, e);
        double y = runtime::load_element(b->tensors[i].data(k), st, e);
        if (std::isnan(x) || std::isnan(y)) {
          RC_ASSERT(std::isnan(x) == std::isnan(y));
          continue;
        }
        if (std::isinf(y)) {
          RC_ASSERT(x == y);
          continue;
        }
        // The reference computes in f64 and rounds once, the backend in f32 and then to the
        // storage type: that can differ by one step of the storage type, which for subnormal
        // halves is large next to a tensor of tiny values (found by this property). A 16-bit
        // state can round the other way at each of the 3 steps, and its recurrence carries the
        // earlier differences on: up to 3 of its steps at the largest magnitude it had (found
        // by this property too: RAdam's bf16 exp_avg 3 steps from the reference's, 2.2% of it;
        // and Adam's bf16 exp_avg, -0.190 after 2 steps, rounded a step apart (f32 then bf16
        // against once from f64, as torch rounds its f32 lerp), then -0.0166 against -0.0175
        // after a third gradient of the other sign: 7 steps of the final value, 1 of -0.190).
        const double peak16 = peak[i][k][static_cast<size_t>(e)];  // |y| among them
        const double steps16 = st == DType::bf16 || st == DType::f16
                                   ? 3 * std::ldexp(1.0, std::ilogb(std::max(peak16, 1e-30)) -
                                                             (st == DType::bf16 ? 7 : 10))
                                   : 0.0;
        const double allowed = rtol * scale + subnormal_step(st) + steps16;
        if (!(std::fabs(x - y) <= allowed))
          RC_LOG() << plan.buffers[k].name << " of tensor " << i << ", element " << e << ": " << x
                   << " vs the reference's " << y << " (" << to_string(st) << ")\n";
        RC_ASSERT(std::fabs(x - y) <= allowed);
      }
    }
  for (size_t g = 0; g < a->groups.size(); ++g)
    for (size_t k = 0; k < a->groups[g].states.size(); ++k) {
      double x = a->groups[g].states[k], y = b->groups[g].states[k];
      RC_ASSERT(
          (std::fabs(x - y) <= rtol * std::fabs(y) + 1e-30 || (std::isnan(x) && std::isnan(y))));
    }
}

}  // namespace optjit
