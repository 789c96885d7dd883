// Each optimizer follows torch.optim's _single_tensor_<name> line by line (torch 2.x), so the
// order of floating-point operations matches PyTorch's CPU path: Python-float scalar math in
// f64, tensor math in the element compute type, and a fused multiply-add (fma) wherever
// PyTorch's vectorized CPU kernels (AVX2, AVX-512, NEON) and its CUDA kernels fuse one:
// `x.add(y, alpha=a)`, `x.addcmul(t1, t2, value=v)` and `x.lerp(y, w)` (add_alpha, addcmul and
// dsl::lerp below). addcdiv divides, so it stays a product, a quotient and a sum.
// `if weight_decay != 0` and similar runtime tests on hyperparameters become selects, so
// changing a value never needs a recompile.
#include "ir/builtins.h"

#include <cmath>
#include <limits>
#include <numbers>

namespace optjit::dsl {

namespace {

using H = HyperSpec;
using O = OptionSpec;
using DefPtr = std::shared_ptr<const Def>;
constexpr double kInf = std::numeric_limits<double>::infinity();

// Bounds, as the constructors of torch.optim (and lion_pytorch, torch_optimizer) check them.
// NaN is outside every interval, also where torch's comparison happens to let it through
// (SGD's `lr < 0.0`): a NaN hyperparameter only ever makes NaN parameters.
HyperBounds nonneg(std::string rule) { return {{{0, kInf}}, false, std::move(rule)}; }
HyperBounds positive(std::string rule) { return {{{0, kInf, true}}, false, std::move(rule)}; }
// A count of steps that torch divides by or takes modulo (so not 0), any sign.
HyperBounds nonzero_count(std::string rule) {
  return {{{-kInf, 0, false, true}, {0, kInf, true, false}}, true, std::move(rule)};
}
HyperBounds count(std::string rule) { return {{}, true, std::move(rule)}; }
H bounded(H h, std::vector<HyperBounds> b) {
  h.bounds = std::move(b);
  return h;
}

H lr(double d, HyperBounds b = nonneg("the learning rate")) {
  return bounded({"lr", {d}, "learning rate (may be a schedule)", true}, {std::move(b)});
}
H betas(double b1, double b2, double hi_closed = false) {
  return bounded({"betas", {b1, b2}, "coefficients of the running averages", false, 2},
                 {{{{0, 1, false, !hi_closed}}, false, "each beta"}});
}
// AdEMAMix's: the fast average, the second moment, the slow average.
H betas3(double b1, double b2, double b3) {
  H h = betas(b1, b2);
  h.defaults.push_back(b3);
  h.arity = 3;
  h.doc = "coefficients of the fast average, the second moment and the slow average";
  return h;
}
H num(std::string name, double d, std::string doc) {
  return {std::move(name), {d}, std::move(doc)};
}
H required(std::string name, std::string doc) { return {std::move(name), {}, std::move(doc)}; }
O flag(std::string name, std::string doc) { return {std::move(name), false, std::move(doc), {}}; }
O maximize() { return flag("maximize", "maximize the objective instead of minimizing"); }
// A string option: one of `values`, `values[0]` by default.
O choice(std::string name, std::string doc, std::vector<std::string> values) {
  std::string first = values.front();
  return {std::move(name), std::move(first), std::move(doc), std::move(values)};
}

DefPtr transform(std::string name, std::string doc, std::vector<H> hypers, std::vector<O> options,
                 std::function<void(Ctx&)> apply) {
  auto d = std::make_shared<Def>();
  d->name = std::move(name);
  d->doc = std::move(doc);
  d->hypers = std::move(hypers);
  d->options = std::move(options);
  d->apply = std::move(apply);
  return d;
}

DefPtr schedule(std::string name, std::string doc, std::vector<H> hypers, std::vector<O> options,
                std::function<Value(Ctx&)> value) {
  auto d = std::make_shared<Def>();
  d->name = std::move(name);
  d->kind = DefKind::schedule;
  d->doc = std::move(doc);
  d->hypers = std::move(hypers);
  d->options = std::move(options);
  d->value = std::move(value);
  return d;
}

// torch's `x.add(y, alpha=a)`: y * a + x, rounded once.
Value add_alpha(Value x, Value y, Value a) { return fma(y, a, x); }

// torch's `x.addcmul(t1, t2, value=v)`: (v * t1) * t2 + x, the last product and sum fused.
Value addcmul(Value x, Value t1, Value t2, Value v) { return fma(v * t1, t2, x); }

// A value torch keeps in a 0-dim tensor of its scalar dtype (torch.optim's _get_scalar_dtype:
// f64 where torch's default dtype is f64, else f32), as the transform's scalar_dtype option
// says; "auto" guesses it from the parameters (f64 for f64 parameters). optjit.torch says
// which, from torch's default dtype.
Value torch_scalar(Ctx& c, Value x) {
  const std::string dtype = c.option("scalar_dtype");
  if (dtype == "f64" || (dtype == "auto" && c.element_type() == DType::f64)) return x;
  return cast(cast(x, DType::f32), DType::f64);
}
O scalar_dtype_option() {
  return choice("scalar_dtype",
                "the dtype torch keeps this optimizer's 0-dim states in (torch.optim's scalar "
                "dtype: f64 where torch's default dtype is f64, else f32); auto: f64 for f64 "
                "parameters, else f32",
                {"auto", "f32", "f64"});
}

// grad, negated under maximize=True.
Value signed_grad(Ctx& c) { return c.flag("maximize") ? -c.grad() : c.grad(); }

// torch: `if weight_decay != 0: grad = grad.add(param, alpha=weight_decay)`.
Value l2_decay(Ctx& c, Value g) {
  Value wd = c.hyper("weight_decay");
  return select(wd != 0.0, add_alpha(g, c.param(), wd), g);
}

// torch: `if weight_decay != 0: param.mul_(1 - lr * weight_decay)`.
void decoupled_decay(Ctx& c) {
  Value wd = c.hyper("weight_decay");
  c.set_param(select(wd != 0.0, c.param() * (1.0 - c.hyper("lr") * wd), c.param()));
}

// exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
Value ema_sq(Value v, Value g, Value beta) { return addcmul(v * beta, g, g, 1.0 - beta); }

// exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1) (torch-optimizer, lion-pytorch, bitsandbytes;
// torch.optim's own lerps)
Value ema(Value m, Value g, Value beta) { return add_alpha(m * beta, g, 1.0 - beta); }

void sgd(Ctx& c) {
  Value g = l2_decay(c, signed_grad(c));
  bool nesterov = c.flag("nesterov");
  if (nesterov && (c.initial("momentum") <= 0 || c.initial("dampening") != 0))
    return c.fail(make_error("Nesterov momentum requires a momentum and zero dampening"));
  if (nesterov) {  // and stays so when they are set later
    c.constrain("momentum", {{{0, kInf, true, false}}, false, "nesterov=true's momentum"});
    c.constrain("dampening", {{{0, 0}}, false, "nesterov=true's dampening"});
  }
  // With momentum 0 there is no buffer, and no `momentum` to set later: setting it is an
  // error, not a silent no-op.
  if (c.initial("momentum") != 0) {
    Value momentum = c.hyper("momentum");
    Value buf = c.state("momentum_buffer");
    Value first = c.step() == 1.0;
    Value next = select(first, g, add_alpha(buf * momentum, g, 1.0 - c.hyper("dampening")));
    Value on = momentum != 0.0;
    c.set_state("momentum_buffer", select(on, next, buf));
    g = select(on, nesterov ? add_alpha(g, next, momentum) : next, g);
  }
  c.set_param(add_alpha(c.param(), g, -c.hyper("lr")));
}

// peer="bitsandbytes_8bit" or "bitsandbytes_32bit": the floating-point operations of
// bitsandbytes' CPU kernels for 8-bit and for 32-bit state (bitsandbytes/backends/cpu/ops.py),
// which its drop-ins (optjit.bitsandbytes) step by. Both compute exp_avg as
// `mul_(beta1).add_(grad, alpha=1 - beta1)`, not torch's lerp; the 32-bit one also divides by
// `sqrt(v) + eps * sqrt(bc2)` and steps by `add_(update, alpha=-lr * sqrt(bc2) / bc1)`, and
// RMSprop's and Adagrad's by `add_(grad / (sqrt(v) + eps), alpha=-lr)`.
// bitsandbytes steps a tensor that keeps 32-bit state (under min_8bit_size) with its 32-bit
// kernel also in an 8-bit optimizer: "bitsandbytes_8bit" takes the 32-bit formula where the
// tensor's state holds no codes (Ctx::holds_codes).
// `what` (a variant the transform is asked for) where bitsandbytes has none: an error.
std::string peer(Ctx& c, const char* what = nullptr) {
  std::string p = c.option("peer");
  if (p != "torch" && what) c.fail(make_error("peer=\"{}\": bitsandbytes has no {}", p, what));
  return p;
}
O peer_option() {
  return choice("peer",
                "whose floating-point operations to follow: torch.optim's, or bitsandbytes' CPU "
                "kernels for 8-bit or 32-bit state",
                {"torch", "bitsandbytes_8bit", "bitsandbytes_32bit"});
}

// The parameter as `follow` steps it, from `own` (torch's formula, which bitsandbytes' 8-bit
// kernels share) and `kernel32` (bitsandbytes' 32-bit kernel's): "bitsandbytes_32bit" takes
// kernel32, "bitsandbytes_8bit" takes it for the tensors whose `state` holds no codes, "torch"
// takes `own`. Each is built only where it is taken.
template <typename Own, typename Kernel32>
Value peer_param(Ctx& c, const std::string& follow, std::string_view state, Own own,
                 Kernel32 kernel32) {
  if (follow == "bitsandbytes_32bit") return kernel32();
  Value p = own();
  return follow == "bitsandbytes_8bit" ? select(c.holds_codes(state), p, kernel32()) : p;
}

void adam(Ctx& c, bool decoupled) {
  Value g = signed_grad(c);
  if (decoupled)
    decoupled_decay(c);
  else
    g = l2_decay(c, g);
  const std::string follow = peer(c, c.flag("amsgrad") ? "AMSGrad" : nullptr);
  Value beta1 = c.hyper("betas", 0), beta2 = c.hyper("betas", 1), t = c.step();
  Value m = follow == "torch" ? lerp(c.state("exp_avg"), g, 1.0 - beta1)
                              : ema(c.state("exp_avg"), g, beta1);
  Value v = ema_sq(c.state("exp_avg_sq"), g, beta2);
  c.set_state("exp_avg", m);
  c.set_state("exp_avg_sq", v);
  Value bc1 = 1.0 - pow(beta1, t), bc2 = 1.0 - pow(beta2, t);
  Value step_size = c.hyper("lr") / bc1;
  // torch: bias_correction2**0.5; bitsandbytes: math.sqrt(1 - beta2**step).
  Value bc2_sqrt = follow == "torch" ? pow(bc2, 0.5) : sqrt(bc2);
  auto update32 = [&] {
    Value update = m / (sqrt(v) + c.hyper("eps") * bc2_sqrt);
    return add_alpha(c.param(), update, -c.hyper("lr") * bc2_sqrt / bc1);
  };
  // (bitsandbytes' 8-bit kernel: addcdiv_ by value=-lr / bc1, the same number as torch's.)
  auto own = [&] {
    if (c.flag("amsgrad")) {  // torch's alone: peer() refuses it for bitsandbytes
      v = max(c.state("max_exp_avg_sq"), v);
      c.set_state("max_exp_avg_sq", v);
    }
    Value denom = sqrt(v) / bc2_sqrt + c.hyper("eps");
    return c.param() + (-step_size) * m / denom;
  };
  c.set_param(peer_param(c, follow, "exp_avg", own, update32));
}

void adamax(Ctx& c) {
  Value g = l2_decay(c, signed_grad(c));
  Value beta1 = c.hyper("betas", 0), beta2 = c.hyper("betas", 1);
  Value m = lerp(c.state("exp_avg"), g, 1.0 - beta1);
  Value u = max(c.state("exp_inf") * beta2, abs(g) + c.hyper("eps"));
  c.set_state("exp_avg", m);
  c.set_state("exp_inf", u);
  Value clr = c.hyper("lr") / (1.0 - pow(beta1, c.step()));
  c.set_param(c.param() + (-clr) * m / u);
}

void nadam(Ctx& c) {
  Value g = signed_grad(c);
  Value t = c.step(), beta1 = c.hyper("betas", 0), beta2 = c.hyper("betas", 1);
  Value lr = c.hyper("lr"), md = c.hyper("momentum_decay");
  Value bc2 = 1.0 - pow(beta2, t);
  if (c.flag("decoupled_weight_decay"))
    decoupled_decay(c);
  else
    g = l2_decay(c, g);
  Value mu = beta1 * (1.0 - 0.5 * pow(0.96, t * md));
  Value mu_next = beta1 * (1.0 - 0.5 * pow(0.96, (t + 1.0) * md));
  // torch keeps mu_product in a 0-dim tensor of its scalar dtype (f64 where the default dtype
  // is, else f32) and multiplies it there by mu rounded to that dtype.
  Value mu_product = torch_scalar(c, c.scalar_state("mu_product", 1.0) * torch_scalar(c, mu));
  c.set_scalar_state("mu_product", mu_product);
  Value m = lerp(c.state("exp_avg"), g, 1.0 - beta1);
  Value v = ema_sq(c.state("exp_avg_sq"), g, beta2);
  c.set_state("exp_avg", m);
  c.set_state("exp_avg_sq", v);
  Value denom = sqrt(v / bc2) + c.hyper("eps");
  Value mu_product_next = mu_product * mu_next;
  Value p = c.param() + ((-lr) * (1.0 - mu) / (1.0 - mu_product)) * g / denom;
  c.set_param(p + ((-lr) * mu_next / (1.0 - mu_product_next)) * m / denom);
}

void radam(Ctx& c) {
  Value g = signed_grad(c);
  if (c.flag("decoupled_weight_decay"))
    decoupled_decay(c);
  else
    g = l2_decay(c, g);
  Value t = c.step(), beta1 = c.hyper("betas", 0), beta2 = c.hyper("betas", 1), lr = c.hyper("lr");
  Value m = lerp(c.state("exp_avg"), g, 1.0 - beta1);
  Value v = ema_sq(c.state("exp_avg_sq"), g, beta2);
  c.set_state("exp_avg", m);
  c.set_state("exp_avg_sq", v);
  Value bc1 = 1.0 - pow(beta1, t), bc2 = 1.0 - pow(beta2, t);
  Value corrected = m / bc1;
  Value rho_inf = 2.0 / (1.0 - beta2) - 1.0;
  Value rho_t = rho_inf - 2.0 * t * pow(beta2, t) / bc2;
  Value rect = pow(
      (rho_t - 4.0) * (rho_t - 2.0) * rho_inf / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_t), 0.5);
  // `bias_correction2**0.5 / t` is torch's t.reciprocal() * bias_correction2**0.5.
  Value adaptive = (1.0 / (sqrt(v) + c.hyper("eps"))) * pow(bc2, 0.5);
  Value rectified = corrected * lr * adaptive * rect;
  c.set_param(c.param() + (-1.0) * select(rho_t > 5.0, rectified, corrected * lr));
}

void rmsprop(Ctx& c) {
  const std::string follow = peer(c, c.flag("centered")          ? "centered RMSprop"
                                     : c.initial("momentum") > 0 ? "RMSprop with momentum"
                                                                 : nullptr);
  Value g = l2_decay(c, signed_grad(c));
  Value alpha = c.hyper("alpha"), lr = c.hyper("lr");
  Value sq = ema_sq(c.state("square_avg"), g, alpha);
  c.set_state("square_avg", sq);
  Value avg;
  if (c.flag("centered")) {
    Value ga = lerp(c.state("grad_avg"), g, 1.0 - alpha);
    c.set_state("grad_avg", ga);
    avg = sqrt(addcmul(sq, ga, ga, c.constant(-1.0)));
  } else {
    avg = sqrt(sq);
  }
  avg = avg + c.hyper("eps");
  Value plain = peer_param(
      c, follow, "square_avg", [&] { return c.param() + (-lr) * g / avg; },
      [&] { return add_alpha(c.param(), g / avg, -lr); });
  if (c.initial("momentum") > 0) {
    Value momentum = c.hyper("momentum"), buf = c.state("momentum_buffer");
    Value on = momentum > 0.0;
    Value next = buf * momentum + g / avg;
    c.set_state("momentum_buffer", select(on, next, buf));
    c.set_param(select(on, add_alpha(c.param(), next, -lr), plain));
  } else {
    c.set_param(plain);
  }
}

void adagrad(Ctx& c) {
  Value g = l2_decay(c, signed_grad(c));
  Value clr = c.hyper("lr") / (1.0 + (c.step() - 1.0) * c.hyper("lr_decay"));
  Value sum = addcmul(c.state("sum", StateInit::from_hyper("initial_accumulator_value")), g, g,
                      c.constant(1.0));
  c.set_state("sum", sum);
  Value std = sqrt(sum) + c.hyper("eps");
  c.set_param(peer_param(
      c, peer(c), "sum", [&] { return c.param() + (-clr) * g / std; },
      [&] { return add_alpha(c.param(), g / std, -clr); }));
}

void adadelta(Ctx& c) {
  Value g = l2_decay(c, signed_grad(c));
  Value rho = c.hyper("rho"), eps = c.hyper("eps");
  Value sq = ema_sq(c.state("square_avg"), g, rho);
  Value acc = c.state("acc_delta");
  Value delta = sqrt(acc + eps) / sqrt(sq + eps) * g;
  c.set_state("square_avg", sq);
  c.set_state("acc_delta", ema_sq(acc, delta, rho));
  c.set_param(add_alpha(c.param(), delta, -c.hyper("lr")));
}

void rprop(Ctx& c) {
  Value g = signed_grad(c);
  Value etaminus = c.hyper("etas", 0), etaplus = c.hyper("etas", 1);
  Value prev = c.state("prev");
  Value step_size = c.state("step_size", StateInit::from_hyper("lr"));
  Value s = sign(g * prev);
  DType t = c.element_type();
  Value one = cast(c.constant(1.0), t);
  s = select(s > 0.0, cast(etaplus, t),
             select(s < 0.0, cast(etaminus, t), select(s == 0.0, one, s)));
  step_size = clamp(step_size * s, c.hyper("step_sizes", 0), c.hyper("step_sizes", 1));
  g = select(s == etaminus, cast(c.constant(0.0), t), g);
  c.set_state("step_size", step_size);
  c.set_state("prev", g);
  c.set_param(c.param() + (-1.0) * sign(g) * step_size);
}

void asgd(Ctx& c) {
  Value g = l2_decay(c, signed_grad(c));
  Value lr = c.hyper("lr"), lambd = c.hyper("lambd"), t = c.step();
  // torch keeps eta and mu in 0-dim tensors of its scalar dtype, eta starting from lr.
  Value eta = torch_scalar(c, c.scalar_state("eta", StateInit::from_hyper("lr")));
  Value mu = c.scalar_state("mu", 1.0);
  Value p = c.param() * (1.0 - lambd * eta);
  p = add_alpha(p, g, -eta);
  c.set_param(p);
  Value ax = c.state("ax");
  c.set_state("ax", select(mu != 1.0, ax + (p - ax) * mu, p));
  c.set_scalar_state("eta", torch_scalar(c, lr / pow(1.0 + lambd * lr * t, c.hyper("alpha"))));
  c.set_scalar_state("mu", torch_scalar(c, 1.0 / max(c.constant(1.0), t - c.hyper("t0"))));
}

// lion-pytorch's update_fn.
void lion(Ctx& c) {
  Value lr = c.hyper("lr"), beta1 = c.hyper("betas", 0), beta2 = c.hyper("betas", 1);
  Value g = c.grad(), m = c.state("exp_avg");
  Value p = c.param() * (1.0 - lr * c.hyper("weight_decay"));
  Value update = sign(ema(m, g, beta1));
  c.set_param(add_alpha(p, update, -lr));
  c.set_state("exp_avg", ema(m, g, beta2));
}

// AdEMAMix (Pagliardini et al., 2024) as bitsandbytes' CPU kernels step it, 32-bit and 8-bit
// state alike: a fast (beta1) and a slow (beta3) average of the gradient mixed by alpha, over
// Adam's bias-corrected second moment; weight decay decoupled (the authors' reference adds
// weight_decay * param to the update instead: the same value, rounded otherwise). alpha and
// beta3 warm up over t_alpha and t_beta3 steps, as bitsandbytes' update_step computes them in
// Python floats; 0 (bitsandbytes' None) is no warmup.
void ademamix(Ctx& c) {
  Value g = c.grad(), t = c.step();
  Value beta1 = c.hyper("betas", 0), beta2 = c.hyper("betas", 1), beta3 = c.hyper("betas", 2);
  Value alpha = c.hyper("alpha"), t_alpha = c.hyper("t_alpha"), t_beta3 = c.hyper("t_beta3");
  alpha = select(t_alpha > 0.0, min(t * alpha / t_alpha, alpha), alpha);
  Value ln1 = log(beta1), ln3 = log(beta3), s = t / t_beta3;
  beta3 = select(t_beta3 > 0.0, min(exp(ln1 * ln3 / ((1.0 - s) * ln3 + s * ln1)), beta3), beta3);
  Value m1 = ema(c.state("exp_avg"), g, beta1);
  Value m2 = ema(c.state("exp_avg_slow"), g, beta3);
  Value nu = ema_sq(c.state("exp_avg_sq"), g, beta2);
  c.set_state("exp_avg", m1);
  c.set_state("exp_avg_slow", m2);
  c.set_state("exp_avg_sq", nu);
  Value bc1 = 1.0 - pow(beta1, t), bc2_sqrt = sqrt(1.0 - pow(beta2, t));
  decoupled_decay(c);
  Value update = (m1 / bc1 + alpha * m2) / (sqrt(nu) / bc2_sqrt + c.hyper("eps"));
  c.set_param(add_alpha(c.param(), update, -c.hyper("lr")));
}

// torch-optimizer's Lamb.step: per-tensor trust ratio ||p|| / ||adam_step||.
void lamb(Ctx& c) {
  Value g = c.grad(), t = c.step();
  Value beta1 = c.hyper("betas", 0), beta2 = c.hyper("betas", 1);
  Value m = ema(c.state("exp_avg"), g, beta1);
  Value v = ema_sq(c.state("exp_avg_sq"), g, beta2);
  c.set_state("exp_avg", m);
  c.set_state("exp_avg_sq", v);
  Value step_size = c.hyper("lr");
  if (c.flag("debias")) step_size = step_size * (sqrt(1.0 - pow(beta2, t)) / (1.0 - pow(beta1, t)));
  // torch.norm's results, the trust ratio and the step's alpha are 0-dim tensors of the
  // parameter's dtype: each rounded to it.
  const DType dt = c.element_type();
  auto rounded = [dt](Value x) { return cast(cast(x, dt), DType::f64); };
  Value weight_norm = clamp(rounded(sqrt(sumsq(c.param(), ir::Scope::tensor))), c.constant(0.0),
                            c.hyper("clamp_value"));
  Value adam_step = m / (sqrt(v) + c.hyper("eps"));
  Value wd = c.hyper("weight_decay");
  adam_step = select(wd != 0.0, add_alpha(adam_step, c.param(), wd), adam_step);
  Value adam_norm = rounded(sqrt(sumsq(adam_step, ir::Scope::tensor)));
  Value trust = select((weight_norm == 0.0) || (adam_norm == 0.0), c.constant(1.0),
                       rounded(weight_norm / adam_norm));
  // With trust a Python 1 (adam=True, or a norm of 0), alpha is a Python float.
  Value neg = dt == DType::f64 ? -step_size : cast(cast(-step_size, DType::f32), DType::f64);
  Value alpha =
      select((weight_norm == 0.0) || (adam_norm == 0.0), -step_size, rounded(neg * trust));
  if (c.flag("adam")) alpha = -step_size;
  c.set_param(add_alpha(c.param(), adam_step, alpha));
}

// torch.nn.utils.clip_grad_norm_: the norm of all gradients together; coef clamped at 1.
void clip_grad_norm(Ctx& c) {
  double p = c.initial("norm_type");
  Value g = c.grad(), total;
  if (std::isinf(p) && p > 0)
    total = max_abs(g);
  else if (p == 2)
    total = sqrt(sumsq(g));
  else if (std::isfinite(p) && p != 0)  // negative orders too, as torch's vector_norm
    total = pow(sum(pow(abs(g), p)), 1.0 / p);
  else  // torch's 0 (a count of nonzeros) and -inf (the least |g|) are not provided
    return c.fail(make_error("norm_type must be a nonzero number or inf, got {}", p));
  Value coef = min(c.hyper("max_norm") / (total + 1e-6), 1.0);
  c.set_grad(g * coef);
}

void clip_grad_value(Ctx& c) {
  Value v = c.hyper("clip_value");
  c.set_grad(clamp(c.grad(), -v, v));
}

// torch.amp.GradScaler: unscale, and skip the whole step if any gradient is Inf or NaN.
void grad_scaler(Ctx& c) {
  Value inv = cast(cast(1.0 / c.hyper("scale"), DType::f32), DType::f64);
  Value g = c.grad() * inv;
  c.skip_step_if(any_nonfinite(g));
  c.set_grad(g);
}

// Schedules: the lr for step t is what torch's scheduler reports after t - 1 calls of step().
Value epoch(Ctx& c) { return c.step() - 1.0; }
H base_lr() { return required("base_lr", "the optimizer's initial learning rate"); }
constexpr double kPi = std::numbers::pi;

// torch decays where `epoch % step_size == 0`; Python's % makes a negative step_size act as
// its absolute value, and 0 raises (a bound, above).
Value step_lr(Ctx& c) {
  return c.hyper("base_lr") * pow(c.hyper("gamma"), floor(epoch(c) / abs(c.hyper("step_size"))));
}

Value multi_step_lr(Ctx& c) {
  Value e = epoch(c), passed = c.constant(0.0);
  for (size_t k = 0; k < c.hyper_size("milestones"); ++k)
    passed = passed + select(c.hyper("milestones", k) <= e, c.constant(1.0), c.constant(0.0));
  return c.hyper("base_lr") * pow(c.hyper("gamma"), passed);
}

Value exponential_lr(Ctx& c) { return c.hyper("base_lr") * pow(c.hyper("gamma"), epoch(c)); }

Value cosine_annealing_lr(Ctx& c) {
  Value eta_min = c.hyper("eta_min");
  return eta_min +
         (c.hyper("base_lr") - eta_min) * (1.0 + cos(kPi * epoch(c) / c.hyper("T_max"))) / 2.0;
}

// total_iters <= 0: torch never leaves start_factor (every epoch is past the end).
Value linear_lr(Ctx& c) {
  Value start = c.hyper("start_factor"), end = c.hyper("end_factor");
  Value total = c.hyper("total_iters");
  Value ramp = (end - start) * min(epoch(c), total) / max(total, c.constant(1.0));
  return c.hyper("base_lr") * (start + select(total > 0.0, ramp, c.constant(0.0)));
}

// total_iters <= 0: torch keeps base_lr (every epoch is past the end).
Value polynomial_lr(Ctx& c) {
  Value total = c.hyper("total_iters");
  Value decayed = pow(1.0 - min(total, epoch(c)) / max(total, c.constant(1.0)), c.hyper("power"));
  return c.hyper("base_lr") * select(total > 0.0, decayed, c.constant(1.0));
}

// torch.optim.lr_scheduler.OneCycleLR.get_lr (momentum cycling is not part of an lr value).
Value one_cycle_lr(Ctx& c) {
  Value max_lr = c.hyper("max_lr"), total = c.hyper("total_steps"), pct = c.hyper("pct_start");
  Value initial = max_lr / c.hyper("div_factor");
  Value min_lr = initial / c.hyper("final_div_factor");
  bool cosine = c.option("anneal_strategy") == "cos";
  auto anneal = [&](Value start, Value end, Value frac) {
    return cosine ? end + (start - end) / 2.0 * (cos(kPi * frac) + 1.0)
                  : (end - start) * frac + start;
  };
  struct Phase {
    Value end_step, start, end;
  };
  std::vector<Phase> phases;
  if (c.flag("three_phase")) {
    phases = {{pct * total - 1.0, initial, max_lr},
              {2.0 * pct * total - 2.0, max_lr, initial},
              {total - 1.0, initial, min_lr}};
  } else {
    phases = {{pct * total - 1.0, initial, max_lr}, {total - 1.0, max_lr, min_lr}};
  }
  Value e = epoch(c);
  // Walk the phases backwards so the earliest phase whose end is not passed wins.
  Value lr;
  for (size_t i = phases.size(); i-- > 0;) {
    Value start_step = i == 0 ? c.constant(0.0) : phases[i - 1].end_step;
    Value here = anneal(phases[i].start, phases[i].end,
                        (e - start_step) / (phases[i].end_step - start_step));
    lr = i + 1 == phases.size() ? here : select(e <= phases[i].end_step, here, lr);
  }
  return lr;
}

// transformers.get_cosine_schedule_with_warmup.
Value cosine_with_warmup(Ctx& c) {
  Value e = epoch(c), warm = c.hyper("num_warmup_steps"), total = c.hyper("num_training_steps");
  Value one = c.constant(1.0);
  Value warming = e / max(one, warm);
  Value progress = (e - warm) / max(one, total - warm);
  Value decay =
      max(c.constant(0.0), 0.5 * (1.0 + cos(kPi * c.hyper("num_cycles") * 2.0 * progress)));
  return c.hyper("base_lr") * select(e < warm, warming, decay);
}

std::vector<DefPtr> make_builtins() {
  H wd0 = bounded(num("weight_decay", 0, "weight decay (L2 penalty)"), {nonneg("weight_decay")});
  H eps8 = bounded(num("eps", 1e-8, "term added to the denominator for numerical stability"),
                   {nonneg("epsilon")});
  return {
      transform("sgd", "torch.optim.SGD",
                {lr(1e-3), bounded(num("momentum", 0, "momentum factor"), {nonneg("momentum")}),
                 num("dampening", 0, "dampening for momentum"), wd0},
                {flag("nesterov", "Nesterov momentum"), maximize()}, sgd),
      transform("adam", "torch.optim.Adam", {lr(1e-3), betas(0.9, 0.999), eps8, wd0},
                {flag("amsgrad", "the AMSGrad variant"), maximize(),
                 flag("decoupled_weight_decay", "AdamW-style decay"), peer_option()},
                [](Ctx& c) { adam(c, c.flag("decoupled_weight_decay")); }),
      transform(
          "adamw", "torch.optim.AdamW",
          {lr(1e-3), betas(0.9, 0.999), eps8,
           bounded(num("weight_decay", 1e-2, "decoupled weight decay"), {nonneg("weight_decay")})},
          {flag("amsgrad", "the AMSGrad variant"), maximize(), peer_option()},
          [](Ctx& c) { adam(c, true); }),
      transform("adamax", "torch.optim.Adamax", {lr(2e-3), betas(0.9, 0.999), eps8, wd0},
                {maximize()}, adamax),
      transform(
          "nadam", "torch.optim.NAdam",
          {lr(2e-3), betas(0.9, 0.999), eps8, wd0,
           bounded(num("momentum_decay", 4e-3, "momentum decay"), {nonneg("momentum_decay")})},
          {flag("decoupled_weight_decay", "AdamW-style decay"), maximize(), scalar_dtype_option()},
          nadam),
      transform("radam", "torch.optim.RAdam", {lr(1e-3), betas(0.9, 0.999), eps8, wd0},
                {flag("decoupled_weight_decay", "AdamW-style decay"), maximize()}, radam),
      transform(
          "rmsprop", "torch.optim.RMSprop",
          {lr(1e-2), bounded(num("alpha", 0.99, "smoothing constant"), {nonneg("alpha")}), eps8,
           wd0, bounded(num("momentum", 0, "momentum factor"), {nonneg("momentum")})},
          {flag("centered", "normalize by the estimated variance"), maximize(), peer_option()},
          rmsprop),
      transform(
          "adagrad", "torch.optim.Adagrad",
          {lr(1e-2), bounded(num("lr_decay", 0, "learning rate decay"), {nonneg("lr_decay")}), wd0,
           bounded(num("initial_accumulator_value", 0, "initial value of the sum of squares"),
                   {nonneg("initial_accumulator_value")}),
           bounded(num("eps", 1e-10, "term added to the denominator"), {nonneg("epsilon")})},
          {maximize(), peer_option()}, adagrad),
      transform(
          "adadelta", "torch.optim.Adadelta",
          {lr(1.0),
           bounded(num("rho", 0.9, "running average coefficient"), {{{{0, 1}}, false, "rho"}}),
           bounded(num("eps", 1e-6, "term added inside the square roots"), {nonneg("epsilon")}),
           wd0},
          {maximize()}, adadelta),
      transform("rprop", "torch.optim.Rprop",
                {lr(1e-2),
                 // torch: 0 < etaminus < 1 < etaplus
                 bounded({"etas", {0.5, 1.2}, "(etaminus, etaplus) step size factors", false, 2},
                         {{{{0, 1, true, true}}, false, "etaminus"},
                          {{{1, kInf, true, false}}, false, "etaplus"}}),
                 {"step_sizes", {1e-6, 50}, "(min, max) step sizes", false, 2}},
                {maximize()}, rprop),
      transform("asgd", "torch.optim.ASGD",
                {lr(1e-2), bounded(num("lambd", 1e-4, "decay term"), {nonneg("lambd")}),
                 bounded(num("alpha", 0.75, "power for eta update"), {nonneg("alpha")}),
                 num("t0", 1e6, "point at which to start averaging"), wd0},
                {maximize(), scalar_dtype_option()}, asgd),
      transform("lion", "lion_pytorch.Lion",
                // lion_pytorch: lr > 0, 0 <= beta <= 1
                {lr(1e-4, positive("the learning rate")), betas(0.9, 0.99, true),
                 num("weight_decay", 0, "decoupled weight decay")},
                {}, lion),
      transform(
          "ademamix", "bitsandbytes.optim.AdEMAMix",
          // bitsandbytes: lr >= 0, eps >= 0, 0 <= beta < 1, weight_decay >= 0
          {lr(1e-3), betas3(0.9, 0.999, 0.9999), num("alpha", 5.0, "weight of the slow average"),
           bounded(num("t_alpha", 0, "steps over which alpha warms up (0: none)"),
                   {nonneg("t_alpha")}),
           bounded(num("t_beta3", 0, "steps over which beta3 warms up (0: none)"),
                   {nonneg("t_beta3")}),
           eps8,
           bounded(num("weight_decay", 1e-2, "decoupled weight decay"), {nonneg("weight_decay")})},
          {}, ademamix),
      transform(
          "lamb", "torch_optimizer.Lamb",
          // torch_optimizer: lr > 0, eps >= 0, 0 <= beta < 1, weight_decay >= 0,
          // clamp_value >= 0
          {lr(1e-3, positive("the learning rate")), betas(0.9, 0.999),
           bounded(num("eps", 1e-6, "term added to the denominator"), {nonneg("epsilon")}), wd0,
           bounded(num("clamp_value", 10, "clamp on the weight norm"), {nonneg("clamp_value")})},
          {flag("adam", "use trust ratio 1 (plain Adam)"), flag("debias", "bias correction")},
          lamb),
      transform("clip_grad_norm", "torch.nn.utils.clip_grad_norm_ over all tensors together",
                {required("max_norm", "max norm of the gradients"),
                 num("norm_type", 2.0, "2.0, inf or another p (structural)")},
                {}, clip_grad_norm),
      transform("clip_grad_value", "torch.nn.utils.clip_grad_value_",
                {required("clip_value", "gradients are clamped to [-clip_value, clip_value]")}, {},
                clip_grad_value),
      transform("master_weights",
                "an exact f32 master copy of the parameters as state ('master'): the transforms "
                "after it update the master, and the parameters (bf16, f16) are stored rounded "
                "from it. low16=true (bf16 parameters, as Transformer Engine): only the master's "
                "16 low bits as state ('master_lo', 2 bytes), the parameters its high half",
                {}, {flag("low16", "keep the master's low 16 bits beside bf16 parameters")},
                [](Ctx& c) { c.use_master_weights(c.flag("low16")); }),
      transform("grad_scaler", "torch.amp.GradScaler: unscale, skip the step on Inf/NaN",
                {num("scale", 65536.0, "the loss scale the gradients carry")}, {}, grad_scaler),
      schedule("step_lr", "torch.optim.lr_scheduler.StepLR",
               {base_lr(),
                bounded(required("step_size", "period of decay"), {nonzero_count("step_size")}),
                num("gamma", 0.1, "decay factor")},
               {}, step_lr),
      schedule("multi_step_lr", "torch.optim.lr_scheduler.MultiStepLR",
               {base_lr(),
                bounded({"milestones", {}, "epochs at which to decay", false, 0},
                        {count("each milestone")}),
                num("gamma", 0.1, "decay factor")},
               {}, multi_step_lr),
      schedule("exponential_lr", "torch.optim.lr_scheduler.ExponentialLR",
               {base_lr(), required("gamma", "decay factor")}, {}, exponential_lr),
      schedule("cosine_annealing_lr", "torch.optim.lr_scheduler.CosineAnnealingLR",
               {base_lr(), bounded(required("T_max", "half period"), {nonzero_count("T_max")}),
                num("eta_min", 0, "minimum lr")},
               {}, cosine_annealing_lr),
      schedule(
          "linear_lr", "torch.optim.lr_scheduler.LinearLR",
          {base_lr(),
           bounded(num("start_factor", 1.0 / 3, "factor at the start"),
                   {{{{0, 1, true, false}}, false, "start_factor"}}),
           bounded(num("end_factor", 1.0, "factor at the end"), {{{{0, 1}}, false, "end_factor"}}),
           bounded(num("total_iters", 5, "steps to reach end_factor (0 or less: never)"),
                   {count("total_iters")})},
          {}, linear_lr),
      schedule("one_cycle_lr",
               "torch.optim.lr_scheduler.OneCycleLR (lr only; torch ignores the optimizer's lr)",
               {required("max_lr", "peak lr"),
                bounded(required("total_steps", "length of the cycle"),
                        {{{{0, kInf, true, false}}, true, "total_steps", true}}),
                bounded(num("pct_start", 0.3, "fraction spent increasing"),
                        {{{{0, 1}}, false, "pct_start"}}),
                num("div_factor", 25, "initial = max_lr/div_factor"),
                num("final_div_factor", 1e4, "min = initial/final_div_factor")},
               {{"anneal_strategy", std::string("cos"), "cos or linear", {"cos", "linear"}},
                flag("three_phase", "three phases as in fastai")},
               one_cycle_lr),
      schedule("polynomial_lr", "torch.optim.lr_scheduler.PolynomialLR",
               {base_lr(),
                bounded(num("total_iters", 5, "steps of decay (0 or less: none)"),
                        {count("total_iters")}),
                num("power", 1.0, "power of the polynomial")},
               {}, polynomial_lr),
      schedule(
          "cosine_with_warmup",
          "linear warmup, then cosine decay to 0 (transformers.get_cosine_schedule_with_warmup)",
          {base_lr(), required("num_warmup_steps", "warmup length"),
           required("num_training_steps", "total length"), num("num_cycles", 0.5, "cosine waves")},
          {}, cosine_with_warmup),
  };
}

}  // namespace

const std::vector<DefPtr>& builtins() {
  static const std::vector<DefPtr> all = make_builtins();
  return all;
}

DefPtr find_builtin(std::string_view name) {
  for (const auto& d : builtins())
    if (d->name == name) return d;
  return nullptr;
}

Expected<std::shared_ptr<const Bound>> make(std::string_view name, Args args) {
  auto d = find_builtin(name);
  if (!d) return make_error("unknown transform or schedule '{}'", name);
  return bind(d, std::move(args));
}

}  // namespace optjit::dsl
