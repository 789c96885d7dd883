// Deterministic stochastic rounding on a device backend draws the CPU backend's bits
// (ir/stochastic_round.h): bf16_sr state, and stochastically rounded bf16 parameters, over
// several steps (the key moves with the step), two tensors (the tensor index enters the bits),
// keys near 2^52 (the largest seed), and vector tails. WebGPU and CUDA run it.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "api/optimizer.h"
#include "runtime/safetensors.h"

namespace optjit::testing {

// `device`: the device's options (backend, launch, step mode); the CPU runs with the defaults.
// `state`: AdamW's state format; a block-quantized one ("8bit") rounds the bf16 parameters in
// the quantized pass, on a tensor large enough to quantize (5003 elements: a partial last block).
inline void check_stochastic_rounding_draws_the_cpus_bits(const OptimizerOptions& device,
                                                          const std::string& state = "bf16_sr") {
  for (bool params_too : {false, true}) {
    SCOPED_TRACE(params_too ? "bf16 parameters" : state + " state");
    const DType pt = params_too ? DType::bf16 : DType::f32;
    const size_t n[2] = {state == "bf16_sr" ? size_t{3001} : size_t{5003}, 77};
    std::vector<std::vector<uint8_t>> p[2], st[2];
    for (int k = 0; k < 2; ++k) {
      for (size_t t = 0; t < 2; ++t) {
        p[k].emplace_back(n[t] * size_bytes(pt));
        for (size_t e = 0; e < n[t]; ++e)
          runtime::store_element(p[k][t].data(), pt, static_cast<int64_t>(e),
                                 std::sin(0.01 * static_cast<double>(e) + static_cast<double>(t)));
      }
      OptimizerOptions o = k == 0 ? device : OptimizerOptions{};
      o.stochastic_param_rounding = params_too;
      o.cache.reset();
      auto made = Optimizer::create(
          "adamw(lr=1e-2, weight_decay=0.1, state_format=\"" + state + "\")",
          {{.name = "a", .data = p[k][0].data(), .dtype = pt, .shape = {int64_t(n[0])}},
           {.name = "b", .data = p[k][1].data(), .dtype = pt, .shape = {int64_t(n[1])}}},
          o);
      ASSERT_TRUE(made) << made.error().message;
      std::unique_ptr<Optimizer> opt = std::move(*made);
      if (state == "bf16_sr" || params_too) {                // (8-bit state alone rounds nothing)
        ASSERT_TRUE(opt->set_hyper("state_seed", 1048575));  // the key near 2^52
      }
      for (int step = 0; step < 3; ++step) {
        std::vector<std::vector<uint8_t>> g;
        for (size_t t = 0; t < 2; ++t) {
          g.emplace_back(n[t] * size_bytes(pt));
          for (size_t e = 0; e < n[t]; ++e)
            runtime::store_element(g[t].data(), pt, static_cast<int64_t>(e),
                                   std::cos(0.37 * static_cast<double>(e) + step) * 1e-3);
        }
        ASSERT_TRUE(opt->step({g[0].data(), g[1].data()}));
      }
      auto file = opt->export_state();
      ASSERT_TRUE(file) << file.error().message;
      for (const auto& tensor : file->tensors) st[k].push_back(tensor.data);
    }
    EXPECT_EQ(p[0], p[1]);
    ASSERT_EQ(st[0].size(), st[1].size());
    for (size_t i = 0; i < st[0].size(); ++i) EXPECT_EQ(st[0][i], st[1][i]) << i;
  }
}

}  // namespace optjit::testing
