// A small model for block-quantized state tests (tests/quant_test.cpp, tests/webgpu_test.cpp,
// tests/cuda_test.cpp): its parameters, gradients per step, the pipelines that cover every
// format, and every code of every format through a backend's kernels.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "api/optimizer.h"
#include "ir/quant.h"

namespace optjit::testing::quant {

// Zeros elements 512-767 of a tensor's values or gradients: a quantization block whose absmax
// is 0 (8-bit tables: codes 0, not the code of 0; 4-bit and fp8: their scale's floor, 1e-12).
inline void zero_block(std::vector<float>& v) { std::fill(v.begin() + 512, v.begin() + 768, 0.0f); }

// Parameters of three sizes: two quantized (one with a partial last block), one small enough
// to keep f32 state (bitsandbytes' min_8bit_size). b has a block of zeros (zero_block), its
// gradients too.
struct Model {
  std::vector<float> a = std::vector<float>(64 * 100), b = std::vector<float>(5000),
                     c = std::vector<float>(300);
  std::vector<float> ga = a, gb = b, gc = c;
  std::vector<std::vector<uint8_t>> state;  // run(): the optimizer's state as saved (codes, scales)
  Model() {
    for (size_t i = 0; i < a.size(); ++i) a[i] = std::sin(0.01f * static_cast<float>(i));
    for (size_t i = 0; i < b.size(); ++i) b[i] = std::cos(0.02f * static_cast<float>(i));
    zero_block(b);
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
    zero_block(gb);
    fill(gc, 0.3f);
  }
  std::vector<Param> params() {
    return {{"a", a.data(), DType::f32, {64, 100}},
            {"b", b.data(), DType::f32, {5000}},
            {"c", c.data(), DType::f32, {300}}};
  }
  std::vector<const void*> grad_ptrs() const { return {ga.data(), gb.data(), gc.data()}; }
};

// "" where got and want hold the same bits; else how many elements part, and the first one's
// index and both values (gtest prints only a vector's first 32 elements, and so would hide
// where a difference is).
template <typename T>
std::string bit_difference(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) return fmt::format("{} elements, not {}", got.size(), want.size());
  size_t n = 0, first = 0;
  for (size_t i = got.size(); i-- > 0;)
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) ++n, first = i;
  if (n == 0) return "";
  return fmt::format("{} of {} elements part, the first at {}: {} where {} was wanted", n,
                     got.size(), first, +got[first], +want[first]);
}

inline const char* const kPipelines[] = {
    R"(chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-2, weight_decay=0.1, state_format="8bit")))",
    R"(lamb(lr=1e-2, state_format="8bit"))",
    R"(sgd(lr=1e-2, momentum=0.9, state_format="q8"))",
    R"(adam(lr=1e-2, state_format="exp_avg:q8,exp_avg_sq:bf16"))",
    R"(chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-2, weight_decay=0.1, state_format="f8")))",
    R"(chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-2, weight_decay=0.1, state_format="4bit")))",
    R"(lamb(lr=1e-2, state_format="4bit"))",
    R"(chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-2, weight_decay=0.1, state_format="4bit_b256")))",
    // Formats of one block and rule mix: an fp8 first moment beside a 4-bit second moment.
    R"(adamw(lr=1e-2, state_format="exp_avg:f8,exp_avg_sq:q4u_b256"))",
    // Three quantized states in one pass (two signed, one unsigned), alpha and beta3 warming up.
    R"(ademamix(lr=1e-2, t_alpha=3, t_beta3=4, state_format="8bit"))",
    // bitsandbytes' formulas: the 8-bit kernel's where the state holds codes (a, b), its
    // 32-bit kernel's for the small tensor that keeps f32 state (c): holds_codes per tensor.
    R"(adamw(lr=1e-2, weight_decay=0.1, state_format="8bit", peer="bitsandbytes_8bit"))",
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
  auto file = (*opt)->export_state();
  EXPECT_TRUE(file) << file.error().message;
  if (file)
    for (const auto& t : file->tensors) m.state.push_back(t.data);
  return m;
}

// SGD with learning rate lr and momentum k, its momentum stored in `format`; for a format that
// holds no negative values (q8u, q4u: it refuses a state that may be negative), a transform that
// stores |k * m + grad| instead, the same numbers for the values >= 0 the tests give it. The
// state's tensor is "w." + state.
struct MomentumPipeline {
  std::string text, state;
};
inline MomentumPipeline momentum_pipeline(const char* format, double lr, double k) {
  if (!ir::unsigned_map(*ir::parse_quant(format)))
    return {fmt::format(R"(sgd(lr={}, momentum={}, state_format="{}"))", lr, k, format),
            "momentum_buffer"};
  return {fmt::format("transform hold(lr=1, k=1) {{\n  state m = 0\n  m = abs(k * m + grad)\n"
                      "  param = param - lr * m\n}}\nhold(lr={}, k={}, state_format=\"{}\")",
                      lr, k, format),
          "m"};
}

// Every code of every format, dequantized by a backend's kernels (options o: the backend, its
// launch): momentum 1 (momentum_pipeline) from loaded codes and a zero gradient, so each
// parameter becomes -(map[code] * its block's scale), bit for bit; a NaN code (e4m3's 0x7f and
// 0xff) gives NaN.
inline void check_every_code(const OptimizerOptions& o) {
  constexpr int64_t n = 8192;
  for (const char* format : {"q8", "q8u", "f8", "q4", "q4u", "q4_b256", "q4u_b256"}) {
    const ir::QuantInfo& info = ir::info(*ir::parse_quant(format));
    const int64_t codes = int64_t{1} << info.bits;
    auto code_of = [&](int64_t i) { return (i * 7 + i / codes) % codes; };  // all, in any order
    auto scale_of = [&](int64_t blk) { return 0.37f + 0.25f * static_cast<float>(blk % 5); };
    const MomentumPipeline pipeline = momentum_pipeline(format, 1, 1);
    std::vector<float> w(n, 0.5f), g(n, 0.0f);
    auto opt = Optimizer::create(pipeline.text, {{"w", w.data(), DType::f32, {n}}}, o);
    ASSERT_TRUE(opt) << opt.error().message;
    ASSERT_TRUE((*opt)->step({g.data()}));  // makes the momentum buffer
    auto file = (*opt)->export_state();
    ASSERT_TRUE(file) << file.error().message;
    for (auto& t : file->tensors) {
      if (t.name == "w." + pipeline.state) {
        ASSERT_EQ(t.dtype, DType::u8) << format;
        ASSERT_EQ(static_cast<int64_t>(t.data.size()), n * info.bits / 8) << format;
        for (int64_t b = 0; b < static_cast<int64_t>(t.data.size()); ++b)
          t.data[static_cast<size_t>(b)] =
              info.bits == 8 ? static_cast<uint8_t>(code_of(b))
                             : static_cast<uint8_t>(code_of(2 * b) << 4 | code_of(2 * b + 1));
      } else if (t.name == "w." + pipeline.state + ".absmax") {
        ASSERT_EQ(t.numel(), n / info.block) << format;
        for (int64_t blk = 0; blk < t.numel(); ++blk) t.set(blk, scale_of(blk));
      }
    }
    ASSERT_TRUE((*opt)->import_state(*file));
    std::fill(w.begin(), w.end(), 0.0f);
    ASSERT_TRUE((*opt)->step({g.data()}));
    for (int64_t i = 0; i < n; ++i) {
      const float got = w[static_cast<size_t>(i)];
      const float value = info.map[static_cast<size_t>(code_of(i))] * scale_of(i / info.block);
      if (std::isnan(value)) {
        EXPECT_TRUE(std::isnan(got)) << format << " element " << i;
      } else {
        ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(0.0f - value))
            << format << " " << to_string(o.backend) << " element " << i << " code " << code_of(i)
            << ": " << got << ", not " << -value;
      }
    }
  }
}

// Values on the edges of the 8-bit tables' cells, for each k where the table's code changes
// between cells k and k + 1 (x >= 0 for the unsigned table), each block's first element 1 (so
// its absmax is 1 and the quantizer's x is the value itself), of two kinds:
// - ties: f32 x with (x + 1) * 32767.5 = k + 0.5 exactly, x + 1 exact. ir::quant_lut_index
//   takes cell k + 1 there, as (u32)(u + 0.5) does; a conversion that rounds to nearest even
//   would take k for even k.
// - sums: x + 1 rounded, where the cell of (x + 1) * 32767.5 + 0.5 with x + 1 rounded first (the
//   quantizer's order) is not the cell of x * 32767.5 + 32767.5 + 0.5 with the product exact.
//   NVIDIA's Vulkan driver compiled WGSL's (x + 1.0f) * 32767.5f so, and its 8-bit codes parted
//   from the CPU's at one element in 6400 of 8-bit AdamW's second moment (H200, 2026-11-28).
struct CellEdges {
  std::vector<float> ties, sums;
};
inline CellEdges lut_cell_edges(ir::Quant q) {
  const ir::QuantInfo& info = ir::info(q);
  const auto& lut = *info.lut;
  auto cell = [](float u) { return static_cast<uint32_t>(u + 0.5f); };
  CellEdges e;
  for (uint32_t k = 0; k + 1 < 65536; ++k) {
    if (lut[k] == lut[k + 1]) continue;
    const float x0 = static_cast<float>((2.0 * k + 1.0) / 65535.0 - 1.0);
    if (x0 < 0.0f && info.map[0] >= 0.0f) continue;
    float x = x0;
    for (int d = 0; d < 8; ++d) x = std::nextafter(x, -2.0f);
    for (int d = 0; d < 16; ++d, x = std::nextafter(x, 2.0f))
      if (static_cast<double>(x) + 1.0 == static_cast<double>(x + 1.0f) &&
          (x + 1.0f) * 32767.5f == static_cast<float>(k) + 0.5f) {
        e.ties.push_back(x);
        break;
      }
    x = x0;
    for (int d = 0; d < 2048; ++d) x = std::nextafter(x, -2.0f);
    for (int d = 0; d < 4096; ++d, x = std::nextafter(x, 2.0f)) {
      const float t = x + 1.0f;
      const uint32_t quantizer = cell(t * 32767.5f), fused = cell(std::fma(x, 32767.5f, 32767.5f));
      if (std::fabs(x) <= 1.0f && quantizer == ir::quant_lut_index(x) &&
          lut[quantizer] != lut[fused]) {
        e.sums.push_back(x);
        break;
      }
    }
  }
  return e;
}

// The 8-bit tables' cell edges (lut_cell_edges) quantized by a backend (options o) as by the
// CPU backend: momentum 0.5 (momentum_pipeline) stores its first step's gradient as the momentum.
inline void check_lut_cell_edges(const OptimizerOptions& o) {
  for (const char* format : {"q8", "q8u"}) {
    const ir::Quant q = *ir::parse_quant(format);
    const CellEdges edges = lut_cell_edges(q);
    ASSERT_GT(edges.ties.size(), 100u) << format;
    ASSERT_GT(edges.sums.size(), 50u) << format;
    std::vector<float> values = edges.ties;
    values.insert(values.end(), edges.sums.begin(), edges.sums.end());
    std::vector<float> g;  // the values, over again up to the quantized tensors' least size
    for (size_t i = 0; i < values.size() || g.size() < ir::kQuantMinElements; ++i) {
      if (g.size() % 256 == 0) g.push_back(1.0f);
      g.push_back(values[i % values.size()]);
    }
    const auto n = static_cast<int64_t>(g.size());
    const MomentumPipeline pipeline = momentum_pipeline(format, 0, 0.5);
    std::vector<std::vector<uint8_t>> codes;
    for (const OptimizerOptions& options : {OptimizerOptions{}, o}) {
      std::vector<float> w(g.size(), 0.0f);
      auto opt = Optimizer::create(pipeline.text, {{"w", w.data(), DType::f32, {n}}}, options);
      ASSERT_TRUE(opt) << opt.error().message;
      ASSERT_TRUE((*opt)->step({g.data()}));
      auto file = (*opt)->export_state();
      ASSERT_TRUE(file) << file.error().message;
      for (auto& t : file->tensors)
        if (t.name == "w." + pipeline.state) {
          ASSERT_EQ(t.dtype, DType::u8) << format;
          codes.push_back(t.data);
        }
    }
    ASSERT_EQ(codes.size(), 2u);
    // Not vacuous: the CPU's codes are the table's at ir::quant_lut_index, which rounds the ties
    // up, to codes a round to even would not give.
    size_t even = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      if (i % 256 == 0) continue;
      const uint16_t cell = ir::quant_lut_index(g[i]);
      EXPECT_EQ(codes[0][i], (*ir::info(q).lut)[cell]) << format << " element " << i;
      even += std::fmod(static_cast<double>((g[i] + 1.0f) * 32767.5f), 2.0) == 0.5;
    }
    EXPECT_GT(even, 50u) << format;
    EXPECT_EQ(bit_difference(codes[1], codes[0]), "")
        << format << " codes of " << edges.ties.size() << " ties and " << edges.sums.size()
        << " rounded sums at the table's cells' edges";
  }
}

}  // namespace optjit::testing::quant
