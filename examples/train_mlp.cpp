// Trains a small MLP end to end with optjit: y = sin(3 x0) cos(2 x1) on 1024 points, a 2-64-64-1
// tanh network, full-batch MSE, and
//   chain(clip_grad_norm(max_norm=1.0), adamw(lr=cosine_with_warmup(...), weight_decay=1e-4))
// with biases in a group without weight decay. Forward and backward are plain C++ loops; the
// optimizer updates the network's own arrays in place, on the backend named by the first
// argument: cpu (default), opencl, cuda or auto. Exits 0 when the loss fell 10x.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <optjit/optimizer.h>

namespace {

struct Layer {
  int in, out;
  std::vector<float> w, b, gw, gb;  // w is [out, in]
  Layer(int i, int o, std::mt19937& rng)
      : in(i), out(o), w(size_t(i) * o), b(o, 0.0f), gw(w.size()), gb(o) {
    std::normal_distribution<float> nd(0.0f, 1.0f / std::sqrt(float(i)));
    for (auto& x : w) x = nd(rng);
  }
  void forward(const float* x, float* y, int n) const {
    for (int s = 0; s < n; ++s)
      for (int o = 0; o < out; ++o) {
        float acc = b[o];
        for (int i = 0; i < in; ++i) acc += w[size_t(o) * in + i] * x[size_t(s) * in + i];
        y[size_t(s) * out + o] = acc;
      }
  }
  // dy: [n, out] -> accumulates gw, gb; writes dx: [n, in]
  void backward(const float* x, const float* dy, float* dx, int n) {
    for (int s = 0; s < n; ++s)
      for (int o = 0; o < out; ++o) {
        float d = dy[size_t(s) * out + o];
        gb[o] += d;
        for (int i = 0; i < in; ++i) gw[size_t(o) * in + i] += d * x[size_t(s) * in + i];
      }
    if (!dx) return;
    for (int s = 0; s < n; ++s)
      for (int i = 0; i < in; ++i) {
        float acc = 0;
        for (int o = 0; o < out; ++o) acc += w[size_t(o) * in + i] * dy[size_t(s) * out + o];
        dx[size_t(s) * in + i] = acc;
      }
  }
};

}  // namespace

int main(int argc, char** argv) {
  const std::string backend = argc > 1 ? argv[1] : "cpu";
  if (backend != "cpu" && backend != "opencl" && backend != "cuda" && backend != "auto") {
    std::fprintf(stderr, "usage: train_mlp [cpu|opencl|cuda|auto]\n");
    return 2;
  }
  const int n = 1024, steps = 400;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(size_t(n) * 2), y(n);
  for (int s = 0; s < n; ++s) {
    x[2 * s] = u(rng);
    x[2 * s + 1] = u(rng);
    y[s] = std::sin(3 * x[2 * s]) * std::cos(2 * x[2 * s + 1]);
  }
  std::vector<Layer> layers = {Layer(2, 64, rng), Layer(64, 64, rng), Layer(64, 1, rng)};

  std::vector<optjit::Param> params;
  std::vector<const void*> grads;
  for (size_t l = 0; l < layers.size(); ++l) {
    auto& L = layers[l];
    params.push_back(
        {"l" + std::to_string(l) + ".weight", L.w.data(), optjit::DType::f32, {L.out, L.in}});
    params.push_back({"l" + std::to_string(l) + ".bias", L.b.data(), optjit::DType::f32, {L.out}});
    grads.push_back(L.gw.data());
    grads.push_back(L.gb.data());
  }
  optjit::OptimizerOptions options;
  options.groups = {{{"*.bias"}, {{"weight_decay", 0.0}}}};
  if (backend == "opencl") options.backend = optjit::Backend::opencl;
  if (backend == "cuda") options.backend = optjit::Backend::cuda;
  if (backend == "auto") options.backend = optjit::Backend::automatic;
  auto opt = optjit::Optimizer::create(
      "chain(clip_grad_norm(max_norm=1.0),"
      "      adamw(lr=cosine_with_warmup(base_lr=1e-2, num_warmup_steps=20, "
      "num_training_steps=400),"
      "            weight_decay=1e-4))",
      params, options);
  if (!opt) {
    std::fprintf(stderr, "optjit: %s\n", opt.error().message.c_str());
    return 1;
  }
  std::printf("optimizer: %zu passes, %g bytes per parameter, compiled in %.0f ms, on %s (%s)\n",
              (*opt)->plan().passes.size(), (*opt)->plan().bytes_per_param(),
              1e3 * (*opt)->compile_seconds(), std::string(to_string((*opt)->backend())).c_str(),
              (*opt)->device_name().c_str());

  std::vector<float> h1(size_t(n) * 64), a1(h1.size()), h2(h1.size()), a2(h1.size()), out(n);
  std::vector<float> d_out(n), d_a2(h2.size()), d_a1(h1.size());
  double first = 0, loss = 0;
  for (int step = 0; step < steps; ++step) {
    layers[0].forward(x.data(), h1.data(), n);
    for (size_t i = 0; i < h1.size(); ++i) a1[i] = std::tanh(h1[i]);
    layers[1].forward(a1.data(), h2.data(), n);
    for (size_t i = 0; i < h2.size(); ++i) a2[i] = std::tanh(h2[i]);
    layers[2].forward(a2.data(), out.data(), n);
    loss = 0;
    for (int s = 0; s < n; ++s) {
      float e = out[s] - y[s];
      loss += double(e) * e / n;
      d_out[s] = 2 * e / n;
    }
    if (step == 0) first = loss;
    if (step % 50 == 0 || step == steps - 1) std::printf("step %3d  loss %.5f\n", step, loss);
    for (auto& L : layers)
      std::fill(L.gw.begin(), L.gw.end(), 0.0f), std::fill(L.gb.begin(), L.gb.end(), 0.0f);
    layers[2].backward(a2.data(), d_out.data(), d_a2.data(), n);
    for (size_t i = 0; i < d_a2.size(); ++i) d_a2[i] *= 1 - a2[i] * a2[i];
    layers[1].backward(a1.data(), d_a2.data(), d_a1.data(), n);
    for (size_t i = 0; i < d_a1.size(); ++i) d_a1[i] *= 1 - a1[i] * a1[i];
    layers[0].backward(x.data(), d_a1.data(), nullptr, n);
    auto r = (*opt)->step(grads);
    if (!r) {
      std::fprintf(stderr, "optjit: %s\n", r.error().message.c_str());
      return 1;
    }
  }
  std::printf("loss %.5f -> %.5f after %lld optimizer steps\n", first, loss,
              static_cast<long long>((*opt)->step_count()));
  return loss < 0.1 * first ? 0 : 1;
}
