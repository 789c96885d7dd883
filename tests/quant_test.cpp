// Block-quantized state (ir/quant.h): the quantizer, the IR and planner entries, and the CPU
// backend against the reference, across threads and chunk sizes, with checkpoints.
// tests/../python/tests/test_quantized_state.py checks the same against bitsandbytes itself.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include <gtest/gtest.h>

#include "api/optimizer.h"
#include "codegen/c_emitter.h"
#include "codegen/nvrtc.h"
#include "ir/compile.h"
#include "ir/quant.h"
#include "ir/text.h"
#include "ir/verify.h"
#include "quant_model.h"

namespace optjit {
namespace {

using ir::Quant;
using testing::quant::check_every_code;
using testing::quant::kPipelines;
using testing::quant::Model;
using testing::quant::run;

TEST(Quant, TheLookupTablePicksTheNearestCodeOfEachGridPoint) {
  for (Quant q : {Quant::q8, Quant::q8u}) {
    const auto map = ir::info(q).map;
    const auto& lut = *ir::info(q).lut;
    EXPECT_EQ(map.back(), 1.0f);
    EXPECT_TRUE(std::is_sorted(map.begin(), map.end()));
    for (int i = 0; i < ir::kQuantLutSize; ++i) {
      const double v = -1.0 + 2.0 * i / (ir::kQuantLutSize - 1);
      double best = 1e9;
      for (float m : map) best = std::min(best, std::fabs(v - m));
      // f32 midpoints decide: the chosen code is the nearest up to f32 rounding.
      ASSERT_LE(std::fabs(v - map[lut[i]]), best + 1e-7) << ir::to_string(q) << " at " << i;
    }
  }
}

// A block of zeros quantizes to codes 0 (bitsandbytes' rule, ir/quant.h). The CUDA and OpenCL
// kernels take that from the table: x * (1 / 0) is NaN there, NaN's cell is -1's, cell 0, and
// every table's cell 0 must be code 0 (c_emitter: code_of).
TEST(Quant, EveryTablesFirstCellIsCodeZero) {
  EXPECT_EQ(ir::quant_lut_index(std::numeric_limits<float>::quiet_NaN()), 0);
  EXPECT_EQ(ir::quant_lut_index(-1.0f), 0);
  int tables = 0;
  for (Quant q : ir::quant_formats()) {
    if (ir::info(q).kind != ir::QuantKind::table) continue;
    ++tables;
    EXPECT_EQ((*ir::info(q).lut)[0], 0) << ir::to_string(q);
    EXPECT_EQ(ir::info(q).compact->code(0), 0) << ir::to_string(q);
  }
  EXPECT_EQ(tables, 2);  // q8 and q8u
}

TEST(Quant, BlocksRoundTripWithinTheirCodeSpacingAndKeepNaNVisible) {
  std::vector<float> x(ir::kQuantBlock);
  for (size_t j = 0; j < x.size(); ++j) x[j] = std::sin(0.37f * static_cast<float>(j)) * 3.0f;
  std::vector<uint8_t> codes(x.size());
  const float absmax = ir::quantize_block(Quant::q8, x.data(), ir::kQuantBlock, codes.data());
  float want = 0;
  for (float v : x) want = std::max(want, std::fabs(v));
  EXPECT_EQ(absmax, want);
  const auto map = ir::info(Quant::q8).map;
  for (size_t j = 0; j < x.size(); ++j) {
    const float back = ir::dequantize(Quant::q8, codes[j], absmax);
    // Within the larger gap next to its code, plus the table's resolution (2 / 65535).
    const int c = codes[j];
    const float gap =
        std::max(c > 0 ? map[c] - map[c - 1] : 0.0f, c < 255 ? map[c + 1] - map[c] : 0.0f);
    EXPECT_LE(std::fabs(back - x[j]), (gap + 2.0f / 65535) * absmax) << j;
  }
  // A zero block: absmax 0, every code 0, every value 0.
  std::vector<float> zeros(10, 0.0f);
  EXPECT_EQ(ir::quantize_block(Quant::q8u, zeros.data(), 10, codes.data()), 0.0f);
  EXPECT_EQ(codes[3], 0);
  EXPECT_EQ(ir::dequantize(Quant::q8u, codes[3], 0.0f), 0.0f);
  // A NaN makes the whole block NaN (bitsandbytes would hide it in some code).
  x[7] = std::numeric_limits<float>::quiet_NaN();
  const float nan_absmax = ir::quantize_block(Quant::q8, x.data(), 20, codes.data());
  EXPECT_TRUE(std::isnan(nan_absmax));
  EXPECT_TRUE(std::isnan(ir::dequantize(Quant::q8, codes[0], nan_absmax)));
}

// torchao's 4-bit rounding (quantize_4bit_with_qmap) written as it is, in f32: a branchless
// binary search, then up when the residual reaches half the gap.
uint8_t torchao_4bit(std::span<const float> q, float y) {
  int c = y >= q[8] ? 8 : 0;
  c += y >= q[c + 4] ? 4 : 0;
  c += y >= q[c + 2] ? 2 : 0;
  c += y >= q[c + 1] ? 1 : 0;
  const int up = std::min(c + 1, 15);
  const float residual = y - q[c];
  return static_cast<uint8_t>(residual >= (q[up] - q[c]) * 0.5f ? up : c);
}

// The thresholds are torchao's rule, exactly: at each threshold and the float below it, at every
// map value and midpoint, and at a million values spread over [-1.1, 1.1].
TEST(Quant, FourBitThresholdsAreTorchaosRoundingExactly) {
  for (Quant q : {Quant::q4, Quant::q4u}) {
    const auto map = ir::info(q).map;
    const auto thr = ir::info(q).thresholds;
    ASSERT_EQ(map.size(), 16u);
    ASSERT_EQ(thr.size(), 15u);
    EXPECT_EQ(ir::info(q).block, 128);
    std::vector<float> probes;
    for (float t : thr)
      probes.insert(probes.end(), {t, std::nextafter(t, -2.0f), std::nextafter(t, 2.0f)});
    for (size_t c = 0; c + 1 < map.size(); ++c)
      probes.insert(probes.end(), {map[c], 0.5f * (map[c] + map[c + 1]), map[c + 1]});
    uint32_t state = 12345;
    for (int k = 0; k < 1000000; ++k) {
      state = state * 1664525u + 1013904223u;
      probes.push_back(-1.1f + 2.2f * static_cast<float>(state >> 8) / 16777216.0f);
    }
    for (float y : probes) {
      ASSERT_EQ(ir::nearest_code(q, y), torchao_4bit(map, y)) << ir::to_string(q) << " " << y;
      // The reference's f64 rule agrees wherever f32 arithmetic is exact (the map's own values).
    }
    for (size_t c = 0; c < map.size(); ++c) EXPECT_EQ(ir::nearest_code_exact(q, map[c]), c);
    // A midpoint rounds up (torchao's residual >= half gap), in f32 and in f64.
    const double mid = 0.5 * (static_cast<double>(map[3]) + map[4]);
    EXPECT_EQ(ir::nearest_code_exact(q, mid), 4);
  }
  // NaN takes code 0 (its block's scale is NaN, so it reads back NaN).
  EXPECT_EQ(ir::nearest_code(Quant::q4, std::numeric_limits<float>::quiet_NaN()), 0);
  // Two codes a byte, the even element high; a zero block's scale is torchao's 1e-12.
  std::vector<float> x(128, 0.0f);
  x[0] = 1.0f, x[1] = -1.0f;
  std::vector<uint8_t> codes(64);
  std::vector<float> scale(1);
  ir::quantize(Quant::q4, x.data(), 128, codes.data(), scale.data());
  EXPECT_EQ(scale[0], 1.0f);
  EXPECT_EQ(codes[0], 0xf0);  // 1.0 is code 15, -1.0 (below the map's -0.89) code 0
  EXPECT_EQ(codes[1], 0x77);  // 0 is code 7
  std::fill(x.begin(), x.end(), 0.0f);
  ir::quantize(Quant::q4u, x.data(), 128, codes.data(), scale.data());
  EXPECT_EQ(scale[0], 1e-12f);
  EXPECT_EQ(codes[5], 0x00);  // q4u has no zero: 1/16 of 1e-12
}

// torch's float -> float8_e4m3fn conversion, against the exact rounding of the same value.
// torchao's unsigned 4-bit map is linear ((c + 1) / 16) with its midpoints as thresholds, so
// every backend counts them by arithmetic (ir::linear_code) instead of searching: the same code
// as the count (ir::nearest_code) for every f32 within 4096 ulps of each threshold, of 0, of 1
// and of the largest values, for NaN and the infinities, and for a million random bit patterns.
// The other formats keep the search.
TEST(Quant, LinearThresholdsAreCountedByArithmetic) {
  const ir::QuantInfo& q4u = ir::info(Quant::q4u);
  ASSERT_TRUE(ir::linear_thresholds(q4u));
  EXPECT_FALSE(ir::linear_thresholds(ir::info(Quant::q4)));
  EXPECT_FALSE(ir::linear_thresholds(ir::info(Quant::q8u)));
  EXPECT_TRUE(ir::linear_map(q4u.map));
  EXPECT_FALSE(ir::linear_map(ir::info(Quant::q4).map));
  const int top = static_cast<int>(q4u.thresholds.size());
  auto check = [&](float y) {
    ASSERT_EQ(ir::linear_code(y, q4u.map[0], top), ir::nearest_code(Quant::q4u, y))
        << y << " (bits " << std::hex << std::bit_cast<uint32_t>(y) << ")";
  };
  std::vector<float> centres(q4u.thresholds.begin(), q4u.thresholds.end());
  for (float c : {0.0f, 1.0f, -1.0f, std::numeric_limits<float>::max(),
                  -std::numeric_limits<float>::max(), std::numeric_limits<float>::min()})
    centres.push_back(c);
  for (float c : centres) {
    float up = c, down = c;
    for (int k = 0; k < 4096; ++k) {
      check(up), check(down);
      up = std::nextafter(up, std::numeric_limits<float>::infinity());
      down = std::nextafter(down, -std::numeric_limits<float>::infinity());
    }
  }
  for (float y : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()})
    check(y);
  std::mt19937 rng(12);
  for (int k = 0; k < 1000000; ++k) check(std::bit_cast<float>(static_cast<uint32_t>(rng())));
}

TEST(Quant, Fp8CodesRoundToNearestEvenLikeTorch) {
  const auto map = ir::info(Quant::f8).map;
  EXPECT_EQ(map[0x7e], 448.0f);
  EXPECT_EQ(map[0x01], std::ldexp(1.0f, -9));  // the smallest subnormal
  EXPECT_TRUE(std::isnan(map[0x7f]) && std::isnan(map[0xff]));
  for (float x : {0.0f, -0.0f, 1.0f, -1.0f, 448.0f, 463.9f, 0.001f, 1.0625f, 1.1875f, 3e-3f, -17.3f,
                  240.0f, 0.0009765625f}) {
    const uint8_t c = ir::f8_code(x);
    EXPECT_EQ(c, ir::f8_code_exact(x)) << x;
    EXPECT_EQ(std::signbit(map[c]), std::signbit(x)) << x;
  }
  EXPECT_EQ(ir::f8_code(464.0f), 0x7f);  // torch: NaN from 464 up
  EXPECT_EQ(ir::f8_code(-1e9f), 0xff);
  EXPECT_EQ(ir::f8_code(std::numeric_limits<float>::quiet_NaN()) & 0x7f, 0x7f);
  EXPECT_EQ(ir::f8_code(1.0625f), ir::f8_code(1.0f));   // a tie goes to the even mantissa
  EXPECT_EQ(ir::f8_code(1.1875f), ir::f8_code(1.25f));  // and up to the next even one
  // Every f32 from 2^-12 to 464 in steps of 1/4096 of each binade: same as the exact rounding.
  for (int e = -12; e < 9; ++e)
    for (int k = 0; k < 4096; ++k) {
      const float x = std::ldexp(1.0f + static_cast<float>(k) / 4096, e);
      if (x >= 464.0f) break;
      ASSERT_EQ(ir::f8_code(x), ir::f8_code_exact(x)) << x;
    }
}

TEST(Quant, QuantizedBuffersRoundTripThroughTheIrTextAndAreVerified) {
  auto plan = compile_pipeline(R"(adamw(lr=1e-3, state_format="8bit"))");
  ASSERT_TRUE(plan) << plan.error().message;
  const ir::Program& p = plan->program;
  auto m = p.find_buffer("exp_avg"), v = p.find_buffer("exp_avg_sq");
  ASSERT_TRUE(m && v);
  EXPECT_EQ(p.buffers[*m].quant, Quant::q8);
  EXPECT_EQ(p.buffers[*v].quant, Quant::q8u);  // 8bit: bitsandbytes' unsigned map for v
  EXPECT_TRUE(p.buffers[*m + 1].per_block);
  EXPECT_EQ(p.buffers[*m + 1].name, "exp_avg.absmax");
  const std::string text = ir::print(p);
  EXPECT_NE(text.find("buffer \"exp_avg\" f32 state init 0 quant q8\n"), std::string::npos) << text;
  EXPECT_NE(text.find("buffer \"exp_avg.absmax\" f32 state per_block\n"), std::string::npos);
  auto back = ir::parse_ir(text);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(*back, p);

  // A quantized buffer without its scales, scales without a quantized buffer, a direct load
  // of scales: each refused with the rule.
  ir::Program broken = p;
  broken.buffers[*m + 1].per_block = false;
  auto e = ir::verify(broken);
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message.find("must be an f32 state followed by its per_block scales"),
            std::string::npos)
      << e.error().message;
  auto bad = ir::parse_ir(R"(optjit-ir 1
buffer "param" f32 param
buffer "grad" f32 grad
buffer "s" f32 state per_block
%0 = load "grad" : f32
store "param", %0
)");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("must be f32 and follow a quantized buffer"),
            std::string::npos)
      << bad.error().message;
  auto mixed = compile_pipeline(R"(adam(state_format="exp_avg:q8,exp_avg_sq:f8"))");
  ASSERT_FALSE(mixed);
  EXPECT_NE(mixed.error().message.find("quantized formats q8 and f8 quantize different tensors"),
            std::string::npos)
      << mixed.error().message;
  auto unknown = ir::parse_ir(R"(optjit-ir 1
buffer "param" f32 param
buffer "grad" f32 grad
buffer "s" f32 state init 0 quant q3
)");
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find(
                "unknown quantized format 'q3' (q8, q8u, f8, q4, q4u, q4_b256, q4u_b256)"),
            std::string::npos)
      << unknown.error().message;
}

// q8u and q4u (unsigned maps) hold only values >= 0. A state in one that may become negative
// lost its sign silently (adam(state_format="exp_avg:q4u") ended 0.95 from torch.optim.Adam
// after 5 steps of lr 0.01; "q8u" 0.027, "q8" 0.0016): it is refused, naming the state, while
// every built-in's second moments are accepted (ir/sign.h proves them >= 0 by induction).
TEST(Quant, UnsignedFormatsRefuseAStateThatMayBecomeNegative) {
  // Why: the hyperparameters that let the state be negative (those that, held at their given
  // values, let the proof through), or none (its data may be negative); and whether the message
  // says to bound them (a custom transform's own, not a built-in's).
  const std::string data = "whatever the hyperparameters (as a first moment or a momentum may)";
  const std::string bound = ", or narrow what ";
  struct Case {
    std::string pipeline;
    const char* refused;  // the state named in the error; nullptr where the pipeline compiles
    std::string because = "";
    bool hint = false;  // the message says to bound the hyperparameters named
  };
  const Case cases[] = {
      {R"(adam(state_format="q8u"))", "exp_avg", "(its new value, %24) " + data},
      {R"(adamw(state_format="exp_avg:q4u"))", "exp_avg", data},
      {R"(adam(amsgrad=true, maximize=true, weight_decay=0.1,
               state_format="exp_avg_sq:q8u,max_exp_avg_sq:q8u"))",
       nullptr},
      {R"(adamw(amsgrad=true, state_format="4bit"))", nullptr},
      {R"(nadam(state_format="exp_avg_sq:q8u"))", nullptr},
      {R"(radam(decoupled_weight_decay=true, weight_decay=0.1, state_format="exp_avg_sq:q4u"))",
       nullptr},
      {R"(adamax(state_format="exp_inf:q8u"))", nullptr},
      {R"(adamax(state_format="q8u"))", "exp_avg", data},
      {R"(adagrad(initial_accumulator_value=0.5, lr_decay=0.1, state_format="q8u"))", nullptr},
      {R"(adadelta(state_format="q8u"))", nullptr},
      {R"(lamb(state_format="4bit"))", nullptr},
      {R"(ademamix(state_format="8bit"))", nullptr},
      {R"(ademamix(state_format="exp_avg_slow:q8u"))", "exp_avg_slow", data},
      {R"(sgd(momentum=0.9, state_format="q8u"))", "momentum_buffer", data},
      {R"(lion(state_format="q4u"))", "exp_avg", data},
      {R"(rmsprop(centered=true, state_format="grad_avg:q8u"))", "grad_avg", data},
      // torch.optim.RMSprop allows alpha > 1, where alpha * v + (1 - alpha) * g^2 can be < 0;
      // its bounds are torch's, not the user's to narrow.
      {R"(rmsprop(state_format="square_avg:q8u"))", "square_avg",
       "may become negative (its new value, %17) for some allowed values of 'rmsprop.alpha' in "
       "[0, inf] (at its given value, 0.99, it cannot)"},
      {R"(chain(master_weights(), grad_scaler(), clip_grad_norm(max_norm=1),
                adamw(lr=cosine_annealing_lr(base_lr=0.1, T_max=5), state_format="8bit",
                      peer="bitsandbytes_8bit")))",
       nullptr},
      // A custom transform's hyperparameter without bounds may make 1 - beta negative: the
      // message names the transform's second instance's and says to bound it.
      {"transform ema(lr=0.01, beta=0.9) {\n  state v = 0\n"
       "  v = beta * v + (1 - beta) * grad * grad\n  param = param - lr * grad / (sqrt(v) + 1)\n}"
       "\nchain(ema(), ema(state_format=\"v:q8u\"))",
       "ema#2.v",
       "for some allowed values of 'ema#2.beta' (declared without bounds) (at its given value, "
       "0.9, "
       "it cannot)",
       true},
      {"transform ema(lr=0.01, beta=0.9 in [0, 1)) {\n  state v = 0\n"
       "  v = beta * v + (1 - beta) * grad * grad\n  param = param - lr * grad / (sqrt(v) + 1)\n}"
       "\nema(state_format=\"v:q8u\")",
       nullptr},
      // Neither alone: both named (a tuple's element among them), the learning rate not.
      {"transform t(lr=0.01, a=0.9, b=(0.9, 0.1)) {\n  state v = 0\n"
       "  v = a * v + b[1] * grad * grad\n  param = param - lr * v\n}\nt(state_format=\"q8u\")",
       "v",
       "for some allowed values of 't.a' (declared without bounds) and 't.b.1' (declared without "
       "bounds) (at their given values, 0.9 and 0.1, it cannot)",
       true},
      // A schedule's hyperparameters are the schedule's: bounded by it, not the user.
      {"transform t(lr=0.01) {\n  state v = 0\n  v = (1 - lr) * v + lr * grad * grad\n"
       "  param = param - 0.1 * v\n}\nt(lr=step_lr(base_lr=0.1, step_size=2), "
       "state_format=\"q8u\")",
       "v",
       "for some allowed values of 't.lr.gamma' (declared without bounds) and 't.lr.base_lr' "
       "(declared without bounds) (at their given values, 0.1 and 0.1, it cannot)"},
      {"transform t(lr=0.01) {\n  state v = -1\n  v = abs(v)\n  param = param - lr * v\n}\n"
       "t(state_format=\"v:q4u\")",
       "v", "starts negative (-1)"},
      {"transform t(lr=0.01, init=0.5) {\n  state v = init\n  v = v * v\n"
       "  param = param - lr * v\n}\nt(state_format=\"q8u\")",
       "v", "may start negative (from 't.init' (declared without bounds))", true},
  };
  for (const Case& c : cases) {
    auto plan = compile_pipeline(c.pipeline);
    if (!c.refused) {
      EXPECT_TRUE(plan) << c.pipeline << ": " << plan.error().message;
      continue;
    }
    ASSERT_FALSE(plan) << c.pipeline;
    const std::string& m = plan.error().message;
    EXPECT_NE(m.find(fmt::format("state_format: state '{}' ", c.refused)), std::string::npos)
        << c.pipeline << ": " << m;
    EXPECT_NE(m.find("holds only values >= 0 (a second moment's format): store it in a signed "
                     "format (q8, q4, f8)"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find(c.because), std::string::npos) << c.because << "\n" << m;
    EXPECT_EQ(m.find(bound) != std::string::npos, c.hint) << m;
  }
  // The verifier refuses it in IR text too.
  auto text = ir::parse_ir(R"(optjit-ir 1
buffer "param" f32 param
buffer "grad" f32 grad
buffer "s" f32 state init 0 quant q8u
buffer "s.absmax" f32 state per_block
%0 = load "grad" : f32
%1 = mul %0, %0 : f32
%2 = neg %1 : f32
store "s", %2
)");
  ASSERT_FALSE(text);
  EXPECT_NE(text.error().message.find(
                "IR: state 's' may become negative (its new value, %2) whatever the "
                "hyperparameters (as a first moment or a momentum may), and q8u holds only"),
            std::string::npos)
      << text.error().message;
  // In IR text every hyperparameter's bounds are the text's: the message says to narrow them.
  auto unbounded = ir::parse_ir(R"(optjit-ir 1
hyper "b" = 0.5 "b"
buffer "param" f32 param
buffer "grad" f32 grad
buffer "s" f32 state init 0 quant q8u
buffer "s.absmax" f32 state per_block
%0 = load "grad" : f32
%1 = mul %0, %0 : f32
%2 = hyper "b" : f64
%3 = const 1 : f64
%4 = sub %3, %2 : f64
%5 = cast %4 : f32
%6 = mul %5, %1 : f32
store "s", %6
)");
  ASSERT_FALSE(unbounded);
  EXPECT_NE(unbounded.error().message.find(
                "IR: state 's' may become negative (its new value, %6) for some allowed values of "
                "'b' (declared without bounds) (at its given value, 0.5, it cannot), and q8u holds "
                "only values >= 0 (a second moment's format): store it in a signed format (q8, "
                "q4, f8), or narrow what 'b' may be where it is declared"),
            std::string::npos)
      << unbounded.error().message;
}

TEST(Quant, ThePlanCountsCodesAndScalesAndNeverReadsAValueBackFromCodes) {
  auto plan = compile_pipeline(
      R"(chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-3, state_format="8bit")))");
  ASSERT_TRUE(plan) << plan.error().message;
  // grad in the norm pass (4); param, grad read and param written (12); each state 1 byte of
  // code and 4/256 of scale, read and written.
  EXPECT_EQ(plan->bytes_per_param(), 4 + 12 + 4 * (1 + 4.0 / 256));
  // 4-bit: half a byte of code and 4/128 of scale per state, read and written.
  auto four = compile_pipeline(
      R"(chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-3, state_format="4bit")))");
  ASSERT_TRUE(four) << four.error().message;
  EXPECT_EQ(four->bytes_per_param(), 4 + 12 + 4 * (0.5 + 4.0 / 128));
  EXPECT_EQ(four->buffers[*four->program.find_buffer("exp_avg_sq")].quant, Quant::q4u);
  // In blocks of 256 (torchao's AdamW4bit(block_size=256)): half the scales.
  auto four256 = compile_pipeline(
      R"(chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-3, state_format="4bit_b256")))");
  ASSERT_TRUE(four256) << four256.error().message;
  EXPECT_EQ(four256->bytes_per_param(), 4 + 12 + 4 * (0.5 + 4.0 / 256));
  EXPECT_EQ(four256->buffers[*four256->program.find_buffer("exp_avg")].quant, Quant::q4_b256);
  EXPECT_EQ(four256->buffers[*four256->program.find_buffer("exp_avg_sq")].quant, Quant::q4u_b256);
  // "fp8" (torchao's AdamWFp8) names f8 for every state: the same program.
  auto f8 = compile_pipeline(R"(adamw(lr=1e-3, state_format="f8"))");
  auto fp8 = compile_pipeline(R"(adamw(lr=1e-3, state_format="fp8"))");
  ASSERT_TRUE(f8 && fp8) << (f8 ? fp8.error() : f8.error()).message;
  EXPECT_EQ(fp8->buffers[*fp8->program.find_buffer("exp_avg_sq")].quant, Quant::f8);
  EXPECT_EQ(ir::print(fp8->program), ir::print(f8->program));
  // One block size per pipeline: 8-bit (256) and 4-bit (128) formats do not mix.
  auto mixed = compile_pipeline(R"(adamw(lr=1e-3, state_format="exp_avg:q8,exp_avg_sq:q4u"))");
  ASSERT_FALSE(mixed);
  EXPECT_NE(mixed.error().message.find("quantized formats q8 and q4u quantize different tensors"),
            std::string::npos)
      << mixed.error().message;
  // LAMB needs its new moments after a global reduction: from 8-bit codes they would come back
  // quantized, so the update pass recomputes them from the old state instead.
  auto lamb = compile_pipeline(R"(lamb(lr=1e-3, state_format="8bit"))");
  ASSERT_TRUE(lamb) << lamb.error().message;
  const auto& last = lamb->passes.back();
  const uint32_t m = *lamb->program.find_buffer("exp_avg");
  EXPECT_NE(std::find(last.writes.begin(), last.writes.end(), m), last.writes.end())
      << plan::describe(*lamb, false);
  EXPECT_NE(std::find(last.writes.begin(), last.writes.end(), m + 1), last.writes.end());
}

TEST(Quant, CpuStepsAreTheSameBitsOnAnyThreadsChunksAndUnroll) {
  for (const char* pipeline : kPipelines) {
    OptimizerOptions base;
    base.cpu.threads = 1;
    const Model want = run(pipeline, base, 6);
    for (auto [threads, chunk, unroll] :
         {std::tuple{2, int64_t{1000}, 0}, {2, int64_t{256}, 2}, {1, int64_t{1} << 20, 4}}) {
      OptimizerOptions o;
      o.cpu = {threads, chunk, unroll};
      const Model got = run(pipeline, o, 6);
      EXPECT_EQ(got.a, want.a) << pipeline << " threads " << threads << " chunk " << chunk;
      EXPECT_EQ(got.b, want.b) << pipeline;
      EXPECT_EQ(got.c, want.c) << pipeline;
    }
  }
}

// The CPU kernels' quantizers give the scalar quantizer's codes (ir::quantize) at every
// decision edge: for the table formats (byte permutes with AVX-512 VBMI, a 16-bit search with
// BW only, gathers without: the ctest variants run each) every one of the 65536 lut cells at
// its centre and 1 and 2 f32 steps either side; for the 4-bit formats (a permute search with
// AVX-512, 15 compares without) each threshold and its 4 f32 neighbours. The values fill the
// blocks beside a +-1 that makes each block's scale 1, stored by a transform that keeps the
// gradient as state of the format.
// The codes the CPU backend stores for `grad` kept as a state of format q (got), and the scalar
// quantizer's codes and scales for it (ir::quantize). An unsigned format keeps |grad| (it holds
// no state that may be negative), and `grad` becomes |grad|.
struct KeptCodes {
  std::vector<uint8_t> got, want;
  std::vector<float> scales;
};
void keep_codes(Quant q, std::vector<float>& grad, KeptCodes* out) {
  const std::string format(ir::to_string(q));
  const auto n = static_cast<int64_t>(grad.size());
  const bool unsigned_map = ir::unsigned_map(q);
  if (unsigned_map)
    for (float& g : grad) g = std::fabs(g);
  std::vector<float> param(grad.size(), 0.0f);
  auto opt = Optimizer::create(std::string("transform keep() {\n  state m = 0\n  m = ") +
                                   (unsigned_map ? "abs(grad)" : "grad") +
                                   "\n}\nkeep(state_format=\"" + format + "\")",
                               {{"w", param.data(), DType::f32, {n}}});
  ASSERT_TRUE(opt) << opt.error().message;
  ASSERT_TRUE((*opt)->step({grad.data()}));
  auto st = (*opt)->export_state();
  ASSERT_TRUE(st) << st.error().message;
  const runtime::HostTensor* codes = st->find("w.m");
  ASSERT_TRUE(codes && codes->dtype == DType::u8) << format;
  out->got = codes->data;
  out->want.assign(static_cast<size_t>(ir::code_bytes(q, n)), 0);
  out->scales.assign(static_cast<size_t>(ir::scale_count(q, n)), 0.0f);
  ir::quantize(q, grad.data(), n, out->want.data(), out->scales.data());
  ASSERT_EQ(out->got.size(), out->want.size()) << format;
}

TEST(Quant, CpuCodesAreTheScalarQuantizersAtEveryEdge) {
  auto around = [](float y, std::vector<float>& out) {
    const float d1 = std::nextafter(y, -2.0f), u1 = std::nextafter(y, 2.0f);
    for (float v : {std::nextafter(d1, -2.0f), d1, y, u1, std::nextafter(u1, 2.0f)})
      if (std::fabs(v) < 1.0f) out.push_back(v);
  };
  for (Quant q : {Quant::q8, Quant::q8u, Quant::q4, Quant::q4u, Quant::q4_b256, Quant::q4u_b256}) {
    const std::string format(ir::to_string(q));
    std::vector<float> values;
    if (ir::info(q).lut) {
      for (int i = 0; i < ir::kQuantLutSize; ++i)
        around(static_cast<float>(-1.0 + 2.0 * i / (ir::kQuantLutSize - 1)), values);
    } else {
      for (float t : ir::info(q).thresholds) around(t, values);
    }
    const int64_t block = ir::info(q).block;
    std::vector<float> grad;
    for (size_t k = 0; k < values.size(); ++k) {
      if (static_cast<int64_t>(grad.size()) % block == 0) grad.push_back(k % 2 == 0 ? 1.0f : -1.0f);
      grad.push_back(values[k]);
    }
    while (static_cast<int64_t>(grad.size()) % block != 0 || grad.size() < 8192)
      grad.push_back(values[grad.size() % values.size()]);  // whole blocks, quantized
    KeptCodes c;
    ASSERT_NO_FATAL_FAILURE(keep_codes(q, grad, &c));
    size_t wrong = 0, first = 0;
    for (size_t e = 0; e < c.want.size(); ++e)
      if (c.got[e] != c.want[e] && wrong++ == 0) first = e;
    EXPECT_EQ(wrong, 0u) << format << ": first at byte " << first << ": " << int(c.got[first])
                         << ", scalar " << int(c.want[first]);
  }
}

// The vector quantizers' lut index (codegen's lut_index_in_range): t = y + 1 rounded, then
// (uint32)fma(t, 32767.5, 0.5), one rounding where ir::quant_lut_index has three. Both depend on
// y only through t, and the t that y + 1 can round to for an f32 y in [-1, 1] are the multiples
// of 2^-24 below 0.5 and every f32 in [0.5, 2] (where y = t - 1 exactly): all of them, here.
TEST(Quant, TheVectorLutIndexIsTheScalarOneForEveryValue) {
  auto same = [](float t) {
    const float y = t - 1.0f;  // exact: t is a multiple of ulp(y)
    const auto fast = static_cast<uint32_t>(std::fma(t, 32767.5f, 0.5f));
    return fast == ir::quant_lut_index(y);
  };
  size_t wrong = 0, checked = 0;
  float first = 0;
  for (uint32_t k = 0; k < (1u << 23); ++k, ++checked)  // t = k * 2^-24 in [0, 0.5)
    if (const float t = std::ldexp(static_cast<float>(k), -24); !same(t) && wrong++ == 0) first = t;
  for (uint32_t bits = std::bit_cast<uint32_t>(0.5f); bits <= std::bit_cast<uint32_t>(2.0f);
       ++bits, ++checked)
    if (const float t = std::bit_cast<float>(bits); !same(t) && wrong++ == 0) first = t;
  EXPECT_EQ(checked, (1u << 23) + (2u << 23) + 1);
  EXPECT_EQ(wrong, 0u) << "first at t = " << first;
}

// The vector quantizers take the blocks whose absmax lies in [2^-126, 2^126] (no clamp: |x / a|
// rounds to at most 1 there), zero blocks store zeros, and the rest take the scalar loop: every
// kind of block, at every scale, gets the scalar quantizer's codes and scales.
TEST(Quant, CpuCodesAreTheScalarQuantizersAtAnyBlockScale) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // A huge absmax whose reciprocal is subnormal, so that a * RN(1 / a) exceeds 1: outside the
  // range the vector quantizers' proof covers, it takes the scalar loop.
  float huge = 0;
  for (uint32_t bits = 0x7e800001u; bits < 0x7f7fffffu && huge == 0; bits += 977u) {
    const float a = std::bit_cast<float>(bits);
    volatile float inv = 1.0f / a;
    if (a * inv > 1.0f) huge = a;
  }
  ASSERT_NE(huge, 0.0f);
  const std::vector<float> scales = {
      1.0f,        3.0f,     0.1f,   7.3e-3f, 1e-30f, 0x1p-126f,
      0x1.8p-126f, 0x1p126f, 1e-40f, 1e-45f,  huge,   std::numeric_limits<float>::max()};
  for (Quant q : {Quant::q8, Quant::q8u}) {
    const std::string format(ir::to_string(q));
    const int64_t block = ir::info(q).block;
    std::vector<float> grad;
    uint32_t seed = 12345;
    auto uniform = [&] {  // in [-1, 1)
      seed = seed * 1664525u + 1013904223u;
      return static_cast<float>(seed >> 8) / 8388608.0f - 1.0f;
    };
    auto add_block = [&](float scale, float special) {
      const size_t at = grad.size();
      for (int64_t e = 0; e < block; ++e) grad.push_back(scale * uniform());
      grad[at + 7] = (seed & 1) != 0 ? scale : -scale;  // the absmax, either sign
      if (special != 0) grad[at + 100] = special;
    };
    for (float s : scales) add_block(s, 0);
    add_block(0.0f, 0);    // all zeros
    add_block(2.0f, inf);  // an Inf: absmax Inf
    add_block(2.0f, -inf);
    add_block(2.0f, nan);       // a NaN: absmax NaN
    add_block(1e-40f, 1e-44f);  // subnormal absmax
    while (static_cast<int64_t>(grad.size()) < 8192) add_block(0.5f + uniform(), 0);
    KeptCodes c;
    ASSERT_NO_FATAL_FAILURE(keep_codes(q, grad, &c));
    for (size_t e = 0; e < c.want.size(); ++e)
      ASSERT_EQ(int(c.got[e]), int(c.want[e]))
          << format << ": element " << e << " (" << grad[e] << ") of the block of scale "
          << c.scales[e / static_cast<size_t>(block)];
  }
}

// The reference computes in f64 with the same quantizer: a code may land one entry apart where
// f32 and f64 round a value to opposite sides of a table cell, so the results agree to the
// quantization's own resolution, not bit for bit.
TEST(Quant, CpuFollowsTheReference) {
  for (const char* pipeline : kPipelines) {
    OptimizerOptions ref;
    ref.backend = Backend::reference;
    const Model want = run(pipeline, ref, 8);
    const Model got = run(pipeline, {}, 8);
    auto close = [&](const std::vector<float>& x, const std::vector<float>& y, double tol) {
      size_t far = 0;
      double worst = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        const double d = std::fabs(double(x[i]) - y[i]);
        worst = std::max(worst, d);
        far += d > 1e-5;
      }
      EXPECT_LE(worst, tol) << pipeline;
      EXPECT_LE(far, x.size() / 100) << pipeline;  // at most 1% beyond f32 noise
    };
    close(got.a, want.a, 8 * 1e-2);  // no element moves more than its 8 steps of lr apart
    close(got.b, want.b, 8 * 1e-2);
    close(got.c, want.c, 1e-5);  // f32 state: f32 noise only
    // Every element the reference moved, the backend moved most of the way: the bounds above
    // allow an element left out (a block's tail) as one of the 1%.
    const Model start;
    auto moved = [&](const std::vector<float>& x, const std::vector<float>& oracle,
                     const std::vector<float>& from, const char* name) {
      double least = 1;
      for (size_t i = 0; i < x.size(); ++i) {
        const double theirs = std::fabs(double(oracle[i]) - from[i]);
        if (theirs > 1e-4) least = std::min(least, std::fabs(double(x[i]) - from[i]) / theirs);
      }
      EXPECT_GE(least, 0.5) << pipeline << ", parameter " << name;  // 0.94 or more here
    };
    moved(got.a, want.a, start.a, "a");
    moved(got.b, want.b, start.b, "b");
  }
}

// Param::quantize overrides the format's size rule per parameter, both ways (bitsandbytes'
// per-parameter optim_bits=32 and its min_8bit_size: optjit.bitsandbytes uses it).
TEST(Quant, EachParameterMayKeepItsStateInF32OrQuantizeItBelowTheMinimum) {
  const char* pipeline = kPipelines[0];
  auto steps = [&](Model& m, const OptimizerOptions& o, std::optional<bool> qa,
                   std::optional<bool> qc) {
    std::vector<Param> ps = m.params();
    ps[0].quantize = qa;  // a: 6400 elements, quantized by the rule
    ps[2].quantize = qc;  // c: 300 elements, f32 by the rule
    auto opt = Optimizer::create(pipeline, ps, o);
    EXPECT_TRUE(opt) << opt.error().message;
    for (int s = 0; opt && s < 8; ++s) {
      m.grads(s);
      EXPECT_TRUE((*opt)->step(m.grad_ptrs()));
    }
    return opt ? (*opt)->export_state() : Expected<runtime::TensorFile>(opt.error());
  };
  Model got, want, rule;
  OptimizerOptions ref;
  ref.backend = Backend::reference;
  auto file = steps(got, {}, false, true);
  ASSERT_TRUE(file) << file.error().message;
  ASSERT_TRUE(steps(want, ref, false, true));
  ASSERT_TRUE(steps(rule, {}, std::nullopt, std::nullopt));
  EXPECT_EQ(file->find("a.exp_avg")->dtype, DType::f32);
  EXPECT_FALSE(file->find("a.exp_avg.absmax"));
  EXPECT_EQ(file->find("b.exp_avg")->dtype, DType::u8);  // unset: as the rule
  EXPECT_EQ(file->find("c.exp_avg")->dtype, DType::u8);
  EXPECT_EQ(file->find("c.exp_avg_sq.absmax")->shape, (std::vector<int64_t>{2}));  // 256 + 44
  // The reference steps the same choice: f32 state within f32 noise of it, quantized state
  // within the quantization's few steps of lr (as in CpuFollowsTheReference).
  for (size_t i = 0; i < got.a.size(); ++i) ASSERT_NEAR(got.a[i], want.a[i], 1e-5) << i;
  for (size_t i = 0; i < got.c.size(); ++i) ASSERT_NEAR(got.c[i], want.c[i], 8e-2) << i;
  // Each choice changes the steps of its own parameter only (b's state is 8-bit either way),
  // and quantizing c moves it (its 8-bit moments are not its f32 ones).
  EXPECT_EQ(got.b, rule.b);
  EXPECT_NE(got.c, rule.c);
  EXPECT_NE(got.a, rule.a);

  // The same choice by parameter group (runtime::kQuantizeState; the CLI's
  // --group 'c:quantize_state=1'): the same steps, bit for bit.
  Model by_group;
  OptimizerOptions go;
  go.groups = {{{"a"}, {{"quantize_state", 0}}}, {{"c"}, {{"quantize_state", 1}}}};
  ASSERT_TRUE(steps(by_group, go, std::nullopt, std::nullopt));
  EXPECT_EQ(by_group.a, got.a);
  EXPECT_EQ(by_group.b, got.b);
  EXPECT_EQ(by_group.c, got.c);
  go.groups = {{{"c"}, {{"quantize_state", 2}}}};
  auto two = Optimizer::create(pipeline, Model().params(), go);
  ASSERT_FALSE(two);
  EXPECT_EQ(two.error().message,
            "parameter group 1: quantize_state is 2: 1 quantizes its tensors' state, 0 keeps it "
            "in f32");

  // A format of whole blocks refuses a parameter not made of them.
  Model m;
  std::vector<Param> ps = m.params();
  ps[2].quantize = true;
  go.groups = {{{"c"}, {{"quantize_state", 1}}}};
  for (bool in_group : {false, true}) {
    auto four = in_group ? Optimizer::create(kPipelines[5], m.params(), go)
                         : Optimizer::create(kPipelines[5], ps);
    ASSERT_FALSE(four) << in_group;
    EXPECT_EQ(four.error().message,
              "parameter 'c' (300 elements) cannot keep its state 'exp_avg' quantized: format "
              "q4 (4-bit blockwise (128), torchao's AdamW4bit signed dynamic map) quantizes "
              "whole blocks of 128 elements only");
  }
}

TEST(Quant, CheckpointsHoldCodesAndScalesAndResumeExactly) {
  const char* pipeline = kPipelines[0];
  Model m;
  auto opt = Optimizer::create(pipeline, m.params());
  ASSERT_TRUE(opt) << opt.error().message;
  for (int s = 0; s < 3; ++s) {
    m.grads(s);
    ASSERT_TRUE((*opt)->step(m.grad_ptrs()));
  }
  auto file = (*opt)->export_state();
  ASSERT_TRUE(file) << file.error().message;
  const runtime::HostTensor* codes = file->find("a.exp_avg");
  const runtime::HostTensor* scales = file->find("a.exp_avg.absmax");
  ASSERT_TRUE(codes && scales);
  EXPECT_EQ(codes->dtype, DType::u8);
  EXPECT_EQ(codes->shape, (std::vector<int64_t>{64, 100}));
  EXPECT_EQ(scales->shape, (std::vector<int64_t>{25}));  // 6400 / 256
  EXPECT_EQ(file->metadata.at("optjit.quant.exp_avg_sq"), "q8u");
  ASSERT_TRUE(file->find("c.exp_avg"));
  EXPECT_EQ(file->find("c.exp_avg")->dtype, DType::f32);  // too small to quantize
  EXPECT_FALSE(file->find("c.exp_avg.absmax"));

  // Resume in a second optimizer from the checkpoint; both take three more steps.
  Model r = m;
  auto again = Optimizer::create(pipeline, r.params());
  ASSERT_TRUE(again) << again.error().message;
  ASSERT_TRUE((*again)->import_state(*file));
  for (int s = 3; s < 6; ++s) {
    m.grads(s);
    r.grads(s);
    ASSERT_TRUE((*opt)->step(m.grad_ptrs()));
    ASSERT_TRUE((*again)->step(r.grad_ptrs()));
  }
  EXPECT_EQ(r.a, m.a);
  EXPECT_EQ(r.b, m.b);
  EXPECT_EQ(r.c, m.c);

  // An f32-state checkpoint resumes into 8-bit state, quantized block by block; codes of one
  // map do not load into another.
  Model f;
  auto f32 = Optimizer::create("adamw(lr=1e-2, weight_decay=0.1)", f.params());
  ASSERT_TRUE(f32) << f32.error().message;
  f.grads(0);
  ASSERT_TRUE((*f32)->step(f.grad_ptrs()));
  auto values = (*f32)->export_state();
  ASSERT_TRUE(values);
  Model q = f;
  auto into =
      Optimizer::create(R"(adamw(lr=1e-2, weight_decay=0.1, state_format="8bit"))", q.params());
  ASSERT_TRUE(into);
  ASSERT_TRUE((*into)->import_state(*values)) << "f32 values quantize on import";
  // A negative second moment cannot be this optimizer's (it is never negative), and q8u would
  // quantize it to 0: refused, naming the element. f32 state loads it as it is.
  {
    runtime::TensorFile negative = *values;
    for (auto& t : negative.tensors)
      if (t.name == "a.exp_avg_sq") t.set(9, -0.25);
    auto into_q8u =
        Optimizer::create(R"(adamw(lr=1e-2, weight_decay=0.1, state_format="8bit"))", q.params());
    ASSERT_TRUE(into_q8u);
    auto status = (*into_q8u)->import_state(negative);
    ASSERT_FALSE(status);
    EXPECT_EQ(status.error().message,
              "state 'a.exp_avg_sq' is -0.25 at element 9, and this optimizer keeps it as q8u, "
              "which holds only values >= 0: the file does not hold this optimizer's state (it "
              "is never negative)");
    Model g = f;
    auto into_f32 = Optimizer::create("adamw(lr=1e-2, weight_decay=0.1)", g.params());
    ASSERT_TRUE(into_f32);
    EXPECT_TRUE((*into_f32)->import_state(negative));
  }
  // A negative scale would flip a block's values: refused, naming the tensor and block. A NaN
  // one (a diverged run's) loads.
  for (auto [value, ok] : {std::pair{-0.5f, false}, {std::nanf(""), true}, {-0.0f, true}}) {
    runtime::TensorFile bad = *file;
    for (auto& t : bad.tensors)
      if (t.name == "b.exp_avg_sq.absmax") t.set(7, value);
    auto into_bad = Optimizer::create(pipeline, Model().params());
    ASSERT_TRUE(into_bad);
    auto status = (*into_bad)->import_state(bad);
    EXPECT_EQ(static_cast<bool>(status), ok) << value;
    if (!ok) {
      EXPECT_EQ(status.error().message,
                "state 'b.exp_avg_sq.absmax' is -0.5 at block 7: a block's scale is never "
                "negative");
    }
  }
  // Codes whose format the file does not name, or names but optjit does not know: refused,
  // saying so (conversions below).
  for (const char* format : {"", "q9"}) {
    runtime::TensorFile unnamed = *file;
    if (*format == 0)
      unnamed.metadata.erase("optjit.quant.exp_avg");
    else
      unnamed.metadata["optjit.quant.exp_avg"] = format;
    auto into_unnamed = Optimizer::create(pipeline, Model().params());
    ASSERT_TRUE(into_unnamed);
    auto status = (*into_unnamed)->import_state(unnamed);
    ASSERT_FALSE(status) << format;
    EXPECT_EQ(status.error().message,
              *format == 0 ? "state 'a.exp_avg' holds codes, but the file does not say their "
                             "format (no 'optjit.quant.exp_avg' metadata); this optimizer keeps "
                             "it as q8"
                           : "state 'a.exp_avg' holds codes of format 'q9', which optjit does not "
                             "know (" +
                                 ir::quant_names() + ")");
  }
}

namespace {

// A state file's codes as their values, in f32 tensors of the parameters' shapes, computed here
// from the formats' maps (map[code] times the block's scale; 4-bit codes two to a byte, the
// first in the high nibble): what a checkpoint of those values in unquantized state holds.
runtime::TensorFile as_values(const runtime::TensorFile& file, const std::vector<Param>& params) {
  runtime::TensorFile out;
  out.metadata = file.metadata;
  for (const runtime::HostTensor& t : file.tensors) {
    if (t.name.ends_with(".absmax")) continue;
    if (t.dtype != DType::u8) {
      out.tensors.push_back(t);
      continue;
    }
    const std::string state = t.name.substr(t.name.find('.') + 1);
    const ir::QuantInfo& q = ir::info(*ir::parse_quant(file.metadata.at("optjit.quant." + state)));
    const runtime::HostTensor* scales = file.find(t.name + ".absmax");
    const Param& param = *std::find_if(params.begin(), params.end(), [&](const Param& each) {
      return t.name.starts_with(each.name + ".");
    });
    runtime::HostTensor v = runtime::HostTensor::zeros(t.name, DType::f32, param.shape);
    for (int64_t e = 0; e < v.numel(); ++e) {
      const uint8_t byte = t.data[static_cast<size_t>(q.bits == 8 ? e : e / 2)];
      const int code = q.bits == 8 ? byte : e % 2 == 0 ? byte >> 4 : byte & 15;
      v.set(e, q.map[static_cast<size_t>(code)] * static_cast<float>(scales->get(e / q.block)));
    }
    out.tensors.push_back(std::move(v));
  }
  return out;
}

}  // namespace

// A checkpoint of one state format resumes in another (or in unquantized state) as its values,
// as the Python bridge loads it: the same state, bit for bit, as a checkpoint of those values
// in f32 gives, and the same steps after. What the CLI's --state does with a checkpoint of
// another format.
TEST(Quant, CheckpointsOfAnotherStateFormatLoadAsTheirValues) {
  struct Case {
    const char* saved;
    const char* loaded;
  };
  // a: 6400 elements, whole blocks of 128 and 256; s: 300, too small to quantize.
  std::vector<float> a0(6400), s0(300);
  for (size_t i = 0; i < a0.size(); ++i) a0[i] = std::sin(0.01f * static_cast<float>(i));
  for (size_t i = 0; i < s0.size(); ++i) s0[i] = 0.1f * static_cast<float>(i % 7);
  auto params = [](std::vector<float>& a, std::vector<float>& s) {
    return std::vector<Param>{{"a", a.data(), DType::f32, {64, 100}},
                              {"s", s.data(), DType::f32, {300}}};
  };
  auto grads = [](int step) {
    std::vector<float> ga(6400), gs(300);
    for (size_t i = 0; i < ga.size(); ++i)
      ga[i] = std::sin(0.13f * static_cast<float>(i) + static_cast<float>(step)) *
              std::exp(-0.001f * static_cast<float>(i));
    for (size_t i = 0; i < gs.size(); ++i) gs[i] = std::cos(0.3f * static_cast<float>(i + step));
    return std::pair{ga, gs};
  };
  auto pipeline = [](std::string format) {
    return "adamw(lr=1e-2, weight_decay=0.1" +
           (format.empty() ? std::string() : ", state_format=\"" + format + "\"") + ")";
  };
  for (auto [saved, loaded] :
       {Case{"8bit", "4bit"}, Case{"4bit", "8bit"}, Case{"f8", "8bit"}, Case{"8bit", ""},
        Case{"4bit", "bf16"}, Case{"8bit", "exp_avg:bf16,exp_avg_sq:q8"}}) {
    SCOPED_TRACE(std::string(saved) + " -> " + loaded);
    std::vector<float> a = a0, s = s0;
    auto opt = Optimizer::create(pipeline(saved), params(a, s));
    ASSERT_TRUE(opt) << opt.error().message;
    for (int k = 0; k < 3; ++k) {
      auto [ga, gs] = grads(k);
      ASSERT_TRUE((*opt)->step({ga.data(), gs.data()}));
    }
    auto file = (*opt)->export_state();
    ASSERT_TRUE(file) << file.error().message;
    ASSERT_EQ(file->find("a.exp_avg")->dtype, DType::u8);
    const runtime::TensorFile values = as_values(*file, params(a, s));

    std::vector<float> a1 = a, s1 = s, a2 = a, s2 = s;
    auto from_codes = Optimizer::create(pipeline(loaded), params(a1, s1));
    auto from_values = Optimizer::create(pipeline(loaded), params(a2, s2));
    ASSERT_TRUE(from_codes && from_values);
    ASSERT_TRUE((*from_codes)->import_state(*file));
    ASSERT_TRUE((*from_values)->import_state(values));
    auto got = (*from_codes)->export_state(), want = (*from_values)->export_state();
    ASSERT_TRUE(got && want);
    ASSERT_EQ(got->tensors.size(), want->tensors.size());
    for (size_t k = 0; k < got->tensors.size(); ++k) {
      EXPECT_EQ(got->tensors[k].name, want->tensors[k].name);
      EXPECT_EQ(got->tensors[k].dtype, want->tensors[k].dtype) << got->tensors[k].name;
      EXPECT_EQ(got->tensors[k].data, want->tensors[k].data) << got->tensors[k].name;
    }
    if (*loaded == 0) {  // unquantized: the values themselves
      EXPECT_EQ(got->find("a.exp_avg_sq")->data, values.find("a.exp_avg_sq")->data);
    }
    for (int k = 3; k < 5; ++k) {
      auto [ga, gs] = grads(k);
      ASSERT_TRUE((*from_codes)->step({ga.data(), gs.data()}));
      ASSERT_TRUE((*from_values)->step({ga.data(), gs.data()}));
    }
    EXPECT_EQ(a1, a2);
    EXPECT_EQ(s1, s2);
    EXPECT_NE(a1, a);  // the steps moved the parameters
  }
}

// The CPU dequantizes by byte permutes where it has AVX-512 VBMI (8-bit, fp8 and q4 codes), by
// arithmetic (e4m3, q4u) or a table load elsewhere (ctest's quant_test.without_avx512vbmi).
TEST(Quant, CpuDequantizesEveryCodeToItsMapValue) { check_every_code({.backend = Backend::cpu}); }

TEST(Quant, OpenclDequantizesEveryCodeToItsMapValue) {
  check_every_code({.backend = Backend::opencl});
}

// The 8-bit tables' cells' edges quantize on OpenCL as on the CPU (quant_model.h).
TEST(Quant, OpenclTableCellEdgesQuantizeAsOnTheCpu) {
  testing::quant::check_lut_cell_edges({.backend = Backend::opencl});
}

// The OpenCL kernels (PoCL here) quantize a block per work-group iteration: the same codes,
// scales and parameters as the CPU's, bit for bit, whatever the launch shape and step mode.
TEST(Quant, OpenclStepsTheSameBitsAsTheCpu) {
  for (const char* pipeline : kPipelines) {
    const Model want = run(pipeline, {}, 5);
    for (auto [block, items, vec, device_step] :
         {std::tuple{256, 1, 1, false}, {64, 2, 4, true}, {128, 1, 2, false}}) {
      OptimizerOptions o;
      o.backend = Backend::opencl;
      o.gpu_launch = codegen::GpuLaunch{block, items, vec};
      o.device_step = device_step;
      const Model got = run(pipeline, o, 5);
      EXPECT_EQ(got.a, want.a) << pipeline << " block " << block << " vec " << vec;
      EXPECT_EQ(got.b, want.b) << pipeline;
      EXPECT_EQ(got.c, want.c) << pipeline;
      // The codes too: a zero block's (Model's b) dequantize to 0 whatever they are.
      EXPECT_TRUE(got.state == want.state) << pipeline << " block " << block << ": the state";
    }
  }
}

TEST(Quant, CudaKernelsCompileWithoutSpills) {
  ASSERT_TRUE(codegen::have_nvrtc())
      << "this build has no NVRTC; the CUDA toolkit is expected at /usr/local/cuda";
  {  // master_weights(low16=true): u16 state and the f32 bit-pattern ops
    auto plan = compile_pipeline(R"(chain(master_weights(low16=true), adamw(state_format="8bit")))",
                                 {DType::bf16, DType::bf16, DType::bf16});
    ASSERT_TRUE(plan) << plan.error().message;
    auto src = codegen::emit_c(*plan, {codegen::CLanguage::cuda});
    ASSERT_TRUE(src) << src.error().message;
    auto cubin = codegen::compile_cubin(*src, "sm_90");
    ASSERT_TRUE(cubin) << cubin.error().message;
  }
  for (const char* pipeline : kPipelines) {
    auto plan = compile_pipeline(pipeline);
    ASSERT_TRUE(plan) << plan.error().message;
    for (bool device_step : {false, true}) {
      codegen::CEmitOptions o{codegen::CLanguage::cuda};
      o.device_step = device_step;
      // The code tables in shared memory with the device step, in global memory without.
      o.launch.shared_tables = device_step;
      // Three quantized states (AdEMAMix's) need more than the 128 registers a thread gets
      // with the default two blocks resident (sm_90: 4-8 B of spills, 152 B at the CUDA
      // default launch vec=4,interleave=1,stage=2); one block resident gives them room.
      const bool three = std::count_if(plan->buffers.begin(), plan->buffers.end(),
                                       [](auto& b) { return b.quant != ir::Quant::none; }) >= 3;
      if (three) o.launch.resident = o.launch.block;
      auto src = codegen::emit_c(*plan, o);
      ASSERT_TRUE(src) << src.error().message;
      EXPECT_TRUE(src->find("optjit_quantize_q") != std::string::npos ||
                  src->find("optjit_f8_code") != std::string::npos);
      for (const char* arch : {"sm_80", "sm_90"}) {
        auto cubin = codegen::compile_cubin(*src, arch);
        ASSERT_TRUE(cubin) << pipeline << " " << arch << ": " << cubin.error().message;
        for (const auto& k : cubin->kernels)
          EXPECT_EQ(k.spill_stores + k.spill_loads, 0) << pipeline << " " << k.name;
      }
    }
  }
  // Shared code tables are CUDA's (OpenCL's helper functions cannot see a kernel's arrays).
  auto plan = compile_pipeline(kPipelines[0]);
  ASSERT_TRUE(plan) << plan.error().message;
  codegen::CEmitOptions o{codegen::CLanguage::opencl};
  o.launch.shared_tables = true;
  auto src = codegen::emit_c(*plan, o);
  ASSERT_FALSE(src);
  EXPECT_EQ(src.error().message,
            "the opencl backend reads its code tables from constant memory: tables=shared is "
            "CUDA's");
  // So is prefetching, which only CUDA's warp path does.
  o.launch.shared_tables = false;
  o.launch.prefetch = true;
  src = codegen::emit_c(*plan, o);
  ASSERT_FALSE(src);
  EXPECT_EQ(src.error().message,
            "the opencl backend quantizes a block per work-group through local memory: "
            "prefetch=1 is CUDA's (its warps' quantized path)");
}

}  // namespace
}  // namespace optjit
