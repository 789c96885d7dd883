#include <cmath>

#include <gtest/gtest.h>

#include "ir/builtins.h"
#include "ir/compile.h"
#include "ir/dsl.h"
#include "ir/simplify.h"
#include "ir/text.h"
#include "ir/verify.h"

namespace optjit {
namespace {

using ir::Op;

// Every built-in transform, with every boolean option on, lowered at each dtype.
std::vector<ir::Program> all_builtin_programs() {
  std::vector<ir::Program> out;
  for (const auto& d : dsl::builtins()) {
    if (d->kind != dsl::DefKind::transform) continue;
    for (bool options_on : {false, true}) {
      dsl::Args args;
      for (const auto& h : d->hypers)
        if (h.defaults.empty()) args.emplace(h.name, 1.0);
      if (d->name == "sgd" || d->name == "rmsprop") args.insert_or_assign("momentum", 0.9);
      for (const auto& o : d->options)
        if (o.default_value.index() == 0) args.emplace(o.name, options_on);
      auto b = dsl::bind(d, args);
      EXPECT_TRUE(b) << d->name << ": " << b.error().message;
      for (DType t : {DType::f32, DType::bf16, DType::f64}) {
        // master_weights(low16=true) is for bf16 parameters only (refused otherwise).
        if (d->name == "master_weights" && options_on && t != DType::bf16) continue;
        auto p = dsl::lower({*b}, {t, t, t});
        EXPECT_TRUE(p) << d->name << ": " << p.error().message;
        if (p) out.push_back(std::move(*p));
      }
    }
  }
  return out;
}

TEST(IrText, EveryBuiltinRoundTripsExactly) {
  auto programs = all_builtin_programs();
  ASSERT_GT(programs.size(), 60u);
  for (const auto& p : programs) {
    std::string text = ir::print(p);
    auto back = ir::parse_ir(text);
    ASSERT_TRUE(back) << back.error().message << "\n" << text;
    EXPECT_EQ(*back, p);
    EXPECT_EQ(ir::print(*back), text);
    EXPECT_EQ(ir::structural_hash(*back), ir::structural_hash(p));
  }
}

// Stochastic rounding's stream (the buffer it stores to) and operands (the key and the tensor's
// `first` element) print and parse back, for bf16_sr state and stochastically rounded bf16
// parameters; `first` is a tensor value. (The stream was once not printed: it parsed back as 0.)
TEST(IrText, StochasticRoundingRoundTrips) {
  auto plan = compile_pipeline("adamw(lr=1e-3, state_format=\"bf16_sr\")",
                               {DType::bf16, DType::bf16, DType::bf16, true});
  ASSERT_TRUE(plan) << plan.error().message;
  const std::string text = ir::print(plan->program);
  EXPECT_NE(text.find(" first"), std::string::npos) << text;
  EXPECT_NE(text.find("sround"), std::string::npos) << text;
  auto back = ir::parse_ir(text);
  ASSERT_TRUE(back) << back.error().message << "\n" << text;
  EXPECT_EQ(*back, plan->program);
  EXPECT_EQ(ir::print(*back), text);
  EXPECT_EQ(ir::structural_hash(*back), ir::structural_hash(plan->program));
  EXPECT_TRUE(ir::verify(*back)) << text;
  for (const auto& in : back->insts) {
    if (in.op == ir::Op::First) {
      EXPECT_EQ(in.rank, Rank::tensor);
    }
  }
  // A stream that names no buffer is refused.
  ir::Program bad = plan->program;
  for (auto& in : bad.insts)
    if (in.op == ir::Op::SRound) in.attr = static_cast<uint32_t>(bad.buffers.size());
  Status st = ir::verify(bad);
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("sround's stream is not a buffer"), std::string::npos)
      << st.error().message;
}

// u8 and u16 are storage types (codes, a master's low half): no value has them, since the
// backends compute in f32, f64, i64 and b1 (a cast to u8 was a no-op there, and truncated and
// clamped in the reference).
// holds_codes names its buffer in the text form and parses back; it is a b1 tensor value; a
// buffer past the device step's table or of another program is refused.
TEST(IrText, HoldsCodesRoundTrips) {
  auto plan = compile_pipeline(R"(adamw(lr=1e-3, state_format="8bit", peer="bitsandbytes_8bit"))");
  ASSERT_TRUE(plan) << plan.error().message;
  const std::string text = ir::print(plan->program);
  EXPECT_NE(text.find(R"(holds_codes "exp_avg" : b1)"), std::string::npos) << text;
  auto back = ir::parse_ir(text);
  ASSERT_TRUE(back) << back.error().message << "\n" << text;
  EXPECT_EQ(*back, plan->program);
  EXPECT_EQ(ir::print(*back), text);
  size_t seen = 0;
  for (const auto& in : back->insts)
    if (in.op == ir::Op::HoldsCodes) {
      EXPECT_EQ(in.rank, Rank::tensor);
      ++seen;
    }
  EXPECT_EQ(seen, 1u);
  ir::Program bad = plan->program;
  for (auto& in : bad.insts)
    if (in.op == ir::Op::HoldsCodes) in.attr = static_cast<uint32_t>(bad.buffers.size());
  Status st = ir::verify(bad);
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("buffer index out of range"), std::string::npos)
      << st.error().message;
  // torch's formula needs no such test.
  auto torch = compile_pipeline(R"(adamw(lr=1e-3, state_format="8bit"))");
  ASSERT_TRUE(torch);
  EXPECT_EQ(ir::print(torch->program).find("holds_codes"), std::string::npos);
}

TEST(IrVerify, StorageTypesAreNoValueTypes) {
  for (const char* t : {"u8", "u16"}) {
    auto p = ir::parse_ir(fmt::format(R"(optjit-ir 1
buffer "param" f32 param
buffer "grad" f32 grad
%0 = load "param" : f32
%1 = cast %0 : {0}
%2 = cast %1 : f32
store "param", %2
)",
                                      t));
    ASSERT_FALSE(p) << t;  // parse_ir verifies what it reads
    EXPECT_EQ(p.error().message,
              fmt::format("IR %1 (cast): {} is a storage type: values are f64, f32, f16, bf16, "
                          "i64 or b1",
                          t));
  }
}

TEST(IrText, SpecialNumbersRoundTrip) {
  auto p = ir::parse_ir(R"(optjit-ir 1
hyper "h" = -inf
buffer "param" f32 param
buffer "grad" f32 grad
buffer "m" f32 state init nan
state "s" f64 init hyper "h"
%0 = load "param" : f32
%1 = const -0 : f32
%2 = const 1e-300 : f64
%3 = add %0, %1 : f32
store "param", %3
)");
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_TRUE(std::signbit(p->insts[1].imm));
  EXPECT_EQ(ir::print(*ir::parse_ir(ir::print(*p))), ir::print(*p));
}

TEST(IrText, ParseErrorsNameLineAndProblem) {
  auto e1 = ir::parse_ir(
      "optjit-ir 1\nbuffer \"param\" f32 param\nbuffer \"grad\" f32 grad\n%0 = frobnicate %1 : "
      "f32\n");
  ASSERT_FALSE(e1);
  EXPECT_EQ(e1.error().message, "line 4, column 6: unknown op 'frobnicate'");
  auto e2 = ir::parse_ir(
      "optjit-ir 1\nbuffer \"param\" f32 param\nbuffer \"grad\" f32 grad\n%0 = load \"param\" : "
      "f32\n%1 = add %0, %7 : f32\n");
  ASSERT_FALSE(e2);
  EXPECT_EQ(e2.error().message, "line 5, column 14: %7 is not defined");
  auto e3 = ir::parse_ir("optjit-ir 2\n");
  ASSERT_FALSE(e3);
  EXPECT_EQ(e3.error().message, "line 1, column 11: expected IR version 1, found number 2");
  auto e4 = ir::parse_ir(
      "optjit-ir 1\nbuffer \"param\" f32 param\nbuffer \"grad\" f32 grad\n%0 = load \"gradient\" : "
      "f32\n");
  ASSERT_FALSE(e4);
  EXPECT_EQ(e4.error().message, "line 4, column 11: unknown buffer \"gradient\"");
  // A buffer's role and quantized format are words like the rest: named with their place.
  auto e5 = ir::parse_ir("optjit-ir 1\nbuffer \"param\" f32 param\nbuffer \"grad\" f32 st\n");
  ASSERT_FALSE(e5);
  EXPECT_EQ(e5.error().message,
            "line 3, column 19: unknown buffer role 'st' (param, grad, state, scratch)");
  auto e6 = ir::parse_ir(
      "optjit-ir 1\nbuffer \"param\" f32 param\nbuffer \"grad\" f32 grad\nbuffer \"m\" f32 "
      "state init 0 quant q3\n");
  ASSERT_FALSE(e6);
  EXPECT_EQ(e6.error().message,
            "line 4, column 35: unknown quantized format 'q3' (q8, q8u, f8, q4, q4u, q4_b256, "
            "q4u_b256)");
}

// IR with a hyperparameter "lr" and the two buffers every program has, then `body`.
std::string with_declarations(const std::string& body) {
  return "optjit-ir 1\nhyper \"lr\" = 1\nbuffer \"param\" f32 param\nbuffer \"grad\" f32 grad\n" +
         body;
}

// parse_ir (which verifies) refuses `body` with exactly `message`.
void expect_refused(const std::string& body, const std::string& message) {
  auto p = ir::parse_ir(with_declarations(body));
  ASSERT_FALSE(p) << body;
  EXPECT_EQ(p.error().message, message);
}

TEST(Verify, RejectsTypeAndRankErrorsWithMessages) {
  const auto check = expect_refused;
  check("%0 = load \"param\" : f32\n%1 = hyper \"lr\" : f64\n%2 = add %0, %1 : f32\n",
        "IR %2 (add): operand types differ (insert a cast)");
  check("%0 = hyper \"lr\" : f64\nstore \"param\", %0\n",
        "IR %1 (store): stores an element-rank value");
  check("%0 = load \"grad\" : f32\nstore \"grad\", %0\n",
        "IR %1 (store): the gradient is read-only");
  check("%0 = hyper \"lr\" : f64\n%1 = sumsq all %0 : f64\n",
        "IR %1 (sumsq): reduces an element-rank value");
  check("%0 = load \"param\" : f32\n%1 = sqrt %0 : f64\n",
        "IR %1 (sqrt): result type differs from the operands'");
  check("%0 = load \"param\" : f32\n%1 = select %0, %0, %0 : f32\n",
        "IR %1 (select): the condition must be b1");
  check("%0 = load \"param\" : f32\nstore \"param\", %0\nstore \"param\", %0\n",
        "IR %2: buffer 'param' is stored twice");
  check("%0 = load \"grad\" : f32\n%1 = anynonfinite all %0 : f64\n",
        "IR %1 (anynonfinite): sum/sumsq/maxabs give f64, anynonfinite gives b1");
}

// A constant is a value of its type, as the backends' literals are: an i64 one a whole number
// within 2^53 (a C or LLVM literal of 1e30 or 0.5 as an integer was undefined or another value
// than the reference's), a b1 one 0 or 1, a float one within its type's range (1e300 as f32 is
// Inf in a kernel, 1e300 in the reference). So is an i64 state's starting value.
TEST(Verify, ConstantsAndI64StatesAreValuesOfTheirType) {
  const auto check = expect_refused;
  check("%0 = const 1e30 : i64\n",
        "IR %0 (const): an i64 constant is a whole number from -2^53 to 2^53, not 1e+30");
  check("%0 = const 0.5 : i64\n",
        "IR %0 (const): an i64 constant is a whole number from -2^53 to 2^53, not 0.5");
  check("%0 = const nan : i64\n",
        "IR %0 (const): an i64 constant is a whole number from -2^53 to 2^53, not nan");
  check("%0 = const 9007199254740994 : i64\n",
        "IR %0 (const): an i64 constant is a whole number from -2^53 to 2^53, not "
        "9007199254740994");
  check("%0 = const 2 : b1\n", "IR %0 (const): a b1 constant is 0 or 1, not 2");
  check("%0 = const 1e300 : f32\n", "IR %0 (const): 1e+300 is past f32's largest value");
  check("%0 = const -70000 : f16\n", "IR %0 (const): -70000 is past f16's largest value");
  check("state \"n\" i64 init 0.5\n",
        "IR: i64 state 'n' starts at 0.5, not a whole number from -2^53 to 2^53");
  check("state \"b\" b1 init -0.5\n", "IR: b1 state 'b' starts at -0.5, not 0 or 1");
  // The edges, and what a float type's literal holds: its Inf, NaN, values that round to its
  // largest (3.4028235e38 is FLT_MAX's shortest spelling) and to 0.
  auto edges = ir::parse_ir(with_declarations(
      "state \"n\" i64 init -7\nstate \"b\" b1 init 1\n%0 = const -9007199254740992 : i64\n"
      "%1 = const 9007199254740992 : i64\n%2 = const 1 : b1\n%3 = const inf : f32\n%4 = const "
      "nan : f16\n%5 = const 3.4028235e38 : f32\n%6 = const 1e-300 : f32\n%7 = const 1e300 : "
      "f64\n"));
  EXPECT_TRUE(edges) << edges.error().message;
}

TEST(Verify, NeedsOneParamAndOneGrad) {
  auto p = ir::parse_ir("optjit-ir 1\nbuffer \"param\" f32 param\n");
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().message, "IR: needs exactly one param and one grad buffer (has 1 and 0)");
}

TEST(Hash, IsPinnedAcrossBuildsAndIgnoresRuntimeValues) {
  auto adamw = [](double lr) { return *dsl::lower({*dsl::make("adamw", {{"lr", lr}})}); };
  // A fixed value: the hash keys kernel caches that outlive processes and machines. If the
  // text form changes on purpose, update this constant (and the cache's code-gen version).
  EXPECT_EQ(ir::structural_hash(adamw(1e-3)), 0x0e6b2a1286f76b50ull)
      << std::hex << ir::structural_hash(adamw(1e-3));
  EXPECT_EQ(ir::structural_hash(adamw(1e-3)), ir::structural_hash(adamw(0.5)));
  auto ams = *dsl::lower({*dsl::make("adamw", {{"amsgrad", true}})});
  EXPECT_NE(ir::structural_hash(adamw(1e-3)), ir::structural_hash(ams));
  auto f16 = *dsl::lower({*dsl::make("adamw")}, {DType::f16, DType::f16, DType::f16});
  EXPECT_NE(ir::structural_hash(adamw(1e-3)), ir::structural_hash(f16));
}

TEST(Builder, HashConsingSharesEqualValues) {
  ir::Builder b;
  b.add_buffer({"param", ir::BufferRole::param, DType::f32, {}});
  auto x = b.emit(Op::Load, DType::f32, {}, 0);
  auto one = b.constant(1.0, DType::f32);
  auto a1 = b.emit(Op::Add, DType::f32, {x, one});
  auto a2 = b.emit(Op::Add, DType::f32, {x, one});
  EXPECT_EQ(a1, a2);
  EXPECT_NE(b.constant(0.0), b.constant(-0.0));  // bitwise: -0 is a different constant
  auto s1 = b.emit(Op::Store, DType::b1, {a1}, 0);
  auto s2 = b.emit(Op::Store, DType::b1, {a1}, 0);
  EXPECT_NE(s1, s2);  // effects are never merged
}

TEST(Simplify, FoldsAndAppliesRulesAndDropsDeadCode) {
  auto p = ir::parse_ir(R"(optjit-ir 1
buffer "param" f32 param
buffer "grad" f32 grad
%0 = load "param" : f32
%1 = const 1 : f32
%2 = mul %0, %1 : f32
%3 = const 2 : f64
%4 = const 3 : f64
%5 = mul %3, %4 : f64
%6 = cast %5 : f32
%7 = add %2, %6 : f32
%8 = load "grad" : f32
%9 = sqrt %8 : f32
%10 = const 1 : b1
%11 = select %10, %7, %9 : f32
store "param", %11
)");
  ASSERT_TRUE(p) << p.error().message;
  ir::Program s = ir::simplify(*p);
  EXPECT_TRUE(ir::verify(s));
  EXPECT_EQ(ir::print(s, {.values = true, .ranks = false}), R"(optjit-ir 1
buffer "param" f32 param
buffer "grad" f32 grad
%0 = load "param" : f32
%1 = const 6 : f32
%2 = add %0, %1 : f32
store "param", %2
)");
  // The input is not modified.
  EXPECT_EQ(p->insts.size(), 13u);
}

TEST(Simplify, KeepsRulesThatWouldChangeIeeeResults) {
  // x + 0 is not x for x = -0, and x * 0 is not 0 for Inf/NaN: neither is rewritten.
  auto p = ir::parse_ir(R"(optjit-ir 1
buffer "param" f32 param
buffer "grad" f32 grad
%0 = load "param" : f32
%1 = const 0 : f32
%2 = add %0, %1 : f32
%3 = mul %2, %1 : f32
store "param", %3
)");
  ASSERT_TRUE(p);
  EXPECT_EQ(ir::simplify(*p).insts.size(), p->insts.size());
}

}  // namespace
}  // namespace optjit
