// A small model for block-quantized state tests (tests/quant_test.cpp, tests/webgpu_test.cpp):
// its parameters, gradients per step, and the pipelines that cover every format.
#pragma once

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "api/optimizer.h"

namespace optjit::testing::quant {

// Parameters of three sizes: two quantized (one with a partial last block), one small enough
// to keep f32 state (bitsandbytes' min_8bit_size).
struct Model {
  std::vector<float> a = std::vector<float>(64 * 100), b = std::vector<float>(5000),
                     c = std::vector<float>(300);
  std::vector<float> ga = a, gb = b, gc = c;
  Model() {
    for (size_t i = 0; i < a.size(); ++i) a[i] = std::sin(0.01f * static_cast<float>(i));
    for (size_t i = 0; i < b.size(); ++i) b[i] = std::cos(0.02f * static_cast<float>(i));
    for (size_t i = 0; i < c.size(); ++i) c[i] = 0.1f * static_cast<float>(i % 7);
  }
  void grads(int step) {
    auto fill = [&](std::vector<float>& g, float k) {
      for (size_t i = 0; i < g.size(); ++i)
        g[i] = std::sin(k * static_cast<float>(i) + static_cast<float>(step)) *
               std::exp(-0.001f * static_cast<float>(i % 3000));
    };
    fill(ga, 0.13f);
    fill(gb, 0.07f);
    fill(gc, 0.3f);
  }
  std::vector<Param> params() {
    return {{"a", a.data(), DType::f32, {64, 100}},
            {"b", b.data(), DType::f32, {5000}},
            {"c", c.data(), DType::f32, {300}}};
  }
  std::vector<const void*> grad_ptrs() const { return {ga.data(), gb.data(), gc.data()}; }
};

inline const char* const kPipelines[] = {
    R"(chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-2, weight_decay=0.1, state_format="8bit")))",
    R"(lamb(lr=1e-2, state_format="8bit"))",
    R"(sgd(lr=1e-2, momentum=0.9, state_format="q8"))",
    R"(adam(lr=1e-2, state_format="exp_avg:q8,exp_avg_sq:bf16"))",
    R"(chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-2, weight_decay=0.1, state_format="f8")))",
    R"(chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-2, weight_decay=0.1, state_format="4bit")))",
    R"(lamb(lr=1e-2, state_format="4bit"))",
};

inline Model run(const char* pipeline, OptimizerOptions options, int steps) {
  Model m;
  auto opt = Optimizer::create(pipeline, m.params(), options);
  EXPECT_TRUE(opt) << opt.error().message;
  if (!opt) return m;
  for (int s = 0; s < steps; ++s) {
    m.grads(s);
    EXPECT_TRUE((*opt)->step(m.grad_ptrs()));
  }
  return m;
}

}  // namespace optjit::testing::quant
