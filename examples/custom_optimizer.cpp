// A custom optimizer declared with optjit's C++ DSL: AdaBelief (Zhuang et al., 2020), which
// divides by the running variance of the gradient around its mean instead of Adam's second
// moment. Chained after gradient clipping; the plan shows the fused passes.
#include <cstdio>
#include <random>

#include <optjit/ir/builtins.h>
#include <optjit/optimizer.h>

using namespace optjit;
using dsl::Value;

std::shared_ptr<dsl::Def> adabelief() {
  auto d = std::make_shared<dsl::Def>();
  d->name = "adabelief";
  d->doc = "AdaBelief with decoupled weight decay";
  d->hypers = {{"lr", {1e-3}, "learning rate", true},
               {"betas", {0.9, 0.999}, "running average coefficients", false, 2},
               {"eps", {1e-16}, "added to the variance"},
               {"weight_decay", {0.0}, "decoupled weight decay"}};
  d->apply = [](dsl::Ctx& c) {
    Value b1 = c.hyper("betas", 0), b2 = c.hyper("betas", 1), lr = c.hyper("lr"), t = c.step();
    Value g = c.grad();
    Value m = c.state("exp_avg") * b1 + (1.0 - b1) * g;
    Value diff = g - m;
    Value s = c.state("exp_avg_var") * b2 + (1.0 - b2) * diff * diff + c.hyper("eps");
    c.set_state("exp_avg", m);
    c.set_state("exp_avg_var", s);
    Value step_size = lr / (1.0 - pow(b1, t));
    Value denom = sqrt(s) / sqrt(1.0 - pow(b2, t)) + c.hyper("eps");
    Value p = c.param() * (1.0 - lr * c.hyper("weight_decay"));
    c.set_param(p - step_size * m / denom);
  };
  return d;
}

int main() {
  auto clip = dsl::make("clip_grad_norm", {{"max_norm", 1.0}});
  auto opt_def = dsl::bind(adabelief(), {{"lr", 1e-2}, {"weight_decay", 1e-4}});
  if (!clip || !opt_def) return 1;

  // Minimise f(w) = sum((w - target)^2) / 2 over a 1000-element parameter.
  const int n = 1000;
  std::vector<float> w(n, 0.0f), grad(n), target(n);
  std::mt19937 rng(0);
  std::normal_distribution<float> nd;
  for (auto& x : target) x = nd(rng);
  auto opt = Optimizer::create(dsl::Pipeline{*clip, *opt_def}, {{"w", w.data(), DType::f32, {n}}});
  if (!opt) {
    std::fprintf(stderr, "%s\n", opt.error().message.c_str());
    return 1;
  }
  std::string d = plan::describe((*opt)->plan(), false);
  std::printf("%s\n", d.substr(d.find("plan:")).c_str());
  double first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    double loss = 0;
    for (int i = 0; i < n; ++i) {
      grad[i] = w[i] - target[i];
      loss += 0.5 * grad[i] * grad[i];
    }
    if (step == 0) first = loss;
    last = loss;
    if (step % 50 == 0) std::printf("step %3d  loss %.6f\n", step, loss);
    auto r = (*opt)->step({grad.data()});
    if (!r) return 1;
  }
  std::printf("loss %.6f -> %.6f\n", first, last);
  return last < 0.01 * first ? 0 : 1;
}
