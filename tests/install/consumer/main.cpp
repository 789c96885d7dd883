// Built against an installed optjit: a custom optimizer in the C++ DSL, chained after a
// built-in clip, planned and stepped with the reference backend.
#include <cstdio>

#include <optjit/ir/builtins.h>
#include <optjit/ir/plan.h>
#include <optjit/runtime/reference.h>

using namespace optjit;

int main() {
  // Signum: sign of a momentum buffer (Bernstein et al.), declared with the public DSL.
  auto def = std::make_shared<dsl::Def>();
  def->name = "signum";
  def->hypers = {{"lr", {0.1}, "learning rate", true}, {"momentum", {0.9}, "momentum"}};
  def->apply = [](dsl::Ctx& c) {
    dsl::Value m = c.state("momentum_buffer");
    dsl::Value beta = c.hyper("momentum");
    m = m * beta + (1.0 - beta) * c.grad();
    c.set_state("momentum_buffer", m);
    c.set_param(c.param() - c.hyper("lr") * dsl::sign(m));
  };
  auto clip = dsl::make("clip_grad_norm", {{"max_norm", 1.0}});
  auto signum = dsl::bind(def, {{"lr", 0.5}});
  if (!clip || !signum) return 1;
  auto program = dsl::lower({*clip, *signum});
  if (!program) return 1;
  auto plan = plan::make_plan(*program);
  if (!plan) return 1;
  runtime::HostTensor w = runtime::HostTensor::zeros("w", DType::f32, {3});
  auto state = runtime::init_state(*plan, {w}, {});
  if (!state) return 1;
  runtime::HostTensor g = runtime::HostTensor::zeros("w", DType::f32, {3});
  g.set(0, 3);
  g.set(1, -4);
  if (!runtime::set_grads(*plan, *state, {&g})) return 1;
  runtime::ReferenceBackend(*plan).step(*state);
  const uint8_t* p = state->tensors[0].data(plan->program.param_buffer());
  std::printf("passes=%zu bytes=%g w=%g %g %g\n", plan->passes.size(), plan->bytes_per_param(),
              runtime::load_element(p, DType::f32, 0), runtime::load_element(p, DType::f32, 1),
              runtime::load_element(p, DType::f32, 2));
  return 0;
}
