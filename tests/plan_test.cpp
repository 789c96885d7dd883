#include "ir/plan.h"

#include "api/communicator.h"

#include <pthread.h>

#include <algorithm>
#include <optional>
#include <regex>

#include <fmt/format.h>

#include <gtest/gtest.h>

#include "examples.h"
#include "ir/builtins.h"
#include "ir/compile.h"
#include "ir/dsl.h"
#include "ir/pipeline_text.h"
#include "ir/text.h"
#include "ir/verify.h"
#include "runtime/reference.h"

namespace optjit {
namespace {

struct Expect {
  const char* pipeline;
  size_t passes;
  size_t bytes;
};

class PlanBytes : public ::testing::TestWithParam<Expect> {};

TEST_P(PlanBytes, FewestPassesAndBytes) {
  auto p = compile_pipeline(GetParam().pipeline);
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_EQ(p->passes.size(), GetParam().passes) << plan::describe(*p, false);
  EXPECT_EQ(p->bytes_per_param(), GetParam().bytes) << plan::describe(*p, false);
}

INSTANTIATE_TEST_SUITE_P(
    Pipelines, PlanBytes,
    ::testing::Values(
        // The two numbers the design promises: PyTorch moves 40 B for clip + AdamW.
        Expect{"chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-3, betas=(0.9, 0.999), "
               "weight_decay=0.01))",
               2, 32},
        Expect{"adamw()", 1, 28}, Expect{"adam(amsgrad=true)", 1, 36}, Expect{"sgd(lr=0.1)", 1, 12},
        Expect{"sgd(lr=0.1, momentum=0.9)", 1, 20},
        Expect{"chain(clip_grad_value(clip_value=1), adam())", 1, 28},
        Expect{"chain(grad_scaler(scale=1024), adamw())", 2, 32},
        Expect{"chain(grad_scaler(), clip_grad_norm(max_norm=1), adamw())", 2, 32},
        // LAMB: ||p|| and ||adam_step|| per tensor, then the update reads m and v back.
        Expect{"lamb()", 2, 40}, Expect{"chain(clip_grad_norm(max_norm=1.0), lamb())", 3, 44},
        // bf16 state: the update pass computes m and v again from the old state (8 B read,
        // 4 written) rather than read them back rounded.
        Expect{"lamb(state_format=\"bf16\")", 2, 32}, Expect{"rprop()", 1, 28},
        Expect{"asgd()", 1, 20}, Expect{"nadam()", 1, 28}));

// A later pass reads a state's new value back only from storage that holds it exactly; else
// the store waits for that pass, which computes it again, and the description says so.
TEST(Plan, ANarrowStateIsComputedAgainNotReadBackRounded) {
  struct Case {
    const char* pipeline;
    DType dt;
    const char* state;  // computed again, or (says == nullptr) read back
    const char* says;   // nullptr: read back, no delayed store
  };
  const Case cases[] = {
      {"lamb()", DType::f32, "exp_avg", nullptr},
      {"lamb(state_format=\"bf16\")", DType::f32, "exp_avg",
       "  store exp_avg: in pass 1, not 0: pass 1 reads its old value (bf16 would give its new "
       "f32 value back rounded: pass 1 computes it again)\n"},
      {"chain(clip_grad_norm(max_norm=1), lamb(state_format=\"exp_avg_sq:f16\"))", DType::f32,
       "exp_avg_sq",
       "  store exp_avg_sq: in pass 2, not 1: pass 2 reads its old value (f16 would give its new "
       "f32 value back rounded: pass 2 computes it again)\n"},
      {"lamb(state_format=\"f32\")", DType::f64, "exp_avg",
       "  store exp_avg: in pass 1, not 0: pass 1 reads its old value (f32 would give its new "
       "f64 value back rounded: pass 1 computes it again)\n"},
      {"lamb(state_format=\"8bit\")", DType::f32, "exp_avg_sq",
       "  store exp_avg_sq: in pass 1, not 0: pass 1 reads its old value (q8u codes would give "
       "its new value back quantized: pass 1 computes it again)\n"},
  };
  for (const Case& c : cases) {
    auto p = compile_pipeline(c.pipeline, {c.dt, c.dt, c.dt});
    ASSERT_TRUE(p) << p.error().message;
    const std::string d = plan::describe(*p, false);
    const uint32_t m = *p->program.find_buffer(c.state);
    const bool read_back = std::any_of(p->carries.begin(), p->carries.end(), [&](auto& k) {
      return k.how == plan::Carry::forward && k.buffer == m;
    });
    if (!c.says) {
      EXPECT_TRUE(read_back) << d;
      EXPECT_TRUE(p->delayed_stores.empty()) << d;
      continue;
    }
    EXPECT_FALSE(read_back) << d;
    EXPECT_NE(d.find(c.says), std::string::npos) << c.says << d;
  }
}

TEST(Plan, Bf16StorageHalvesTheBytes) {
  auto p = compile_pipeline("chain(clip_grad_norm(max_norm=1.0), adamw())",
                            {DType::bf16, DType::bf16, DType::bf16});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->bytes_per_param(), 16u);
}

TEST(Plan, MixedGradientTypeIsCountedPerBuffer) {
  auto p = compile_pipeline("adamw()", {DType::f32, DType::bf16, DType::f32});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->bytes_per_param(), 26u);
}

TEST(Plan, NothingIsWrittenBeforeAGuard) {
  auto p = compile_pipeline("chain(grad_scaler(), adamw())");
  ASSERT_TRUE(p);
  ASSERT_EQ(p->passes.size(), 2u);
  EXPECT_TRUE(p->passes[0].writes.empty());
  bool guard_before_pass1 = false;
  for (auto v : p->host[1]) guard_before_pass1 |= p->program.at(v).op == ir::Op::SkipIf;
  EXPECT_TRUE(guard_before_pass1);
}

TEST(Plan, OldValueStaysReadableUntilItsLastReader) {
  // m's new value is stored, but a later pass needs the old m: the store must wait.
  auto p = compile_pipeline(R"(
    transform t(lr=0.1) {
      state m = 0
      let old = m
      m = 0.9 * m + grad
      let s = sum(m)
      param = param - lr * (old + m) / (abs(s) + 1)
    }
    t())");
  ASSERT_TRUE(p) << p.error().message;
  ASSERT_EQ(p->passes.size(), 2u);
  const uint32_t m = *p->program.find_buffer("m");
  for (uint32_t w : p->passes[0].writes) EXPECT_NE(w, m) << plan::describe(*p);
}

TEST(Plan, UsesScratchWhenRecomputingCostsMoreBytes) {
  // x needs three state buffers that the second pass would not otherwise read: storing x
  // (4 B written + 4 B read) beats reloading 12 B.
  auto p = compile_pipeline(R"(
    transform t(lr=0.1) {
      state a = 1
      state b = 2
      state c = 3
      let x = a * b + c
      let s = sum(x * grad)
      param = param - lr * x * s
    }
    t())");
  ASSERT_TRUE(p) << p.error().message;
  bool scratch = false;
  for (const auto& b : p->buffers) scratch |= b.role == ir::BufferRole::scratch;
  EXPECT_TRUE(scratch) << plan::describe(*p);
  EXPECT_EQ(p->bytes_per_param(), 32u)
      << plan::describe(*p);  // pass 0: a b c grad + x; pass 1: x param grad + param
}

TEST(Plan, BodiesUseOnlyElementCodeAndUniforms) {
  auto p = compile_pipeline("chain(clip_grad_norm(max_norm=1.0), lamb(weight_decay=0.1))");
  ASSERT_TRUE(p);
  for (const auto& pass : p->passes)
    for (const auto& in : pass.body.insts) {
      EXPECT_NE(in.op, ir::Op::Hyper);
      EXPECT_NE(in.op, ir::Op::Step);
      EXPECT_NE(in.op, ir::Op::SLoad);
      if (in.op == ir::Op::Uniform) {
        EXPECT_LT(in.attr, pass.uniforms.size());
      }
    }
}

TEST(Plan, DescribeNamesPassesAndBytes) {
  auto p = compile_pipeline("chain(clip_grad_norm(max_norm=1.0), adamw())");
  ASSERT_TRUE(p);
  std::string d = plan::describe(*p, false);
  EXPECT_NE(d.find("plan: 2 passes, 32 bytes per parameter"), std::string::npos) << d;
  EXPECT_NE(d.find("pass 0: reads grad:f32 | writes - | 4 B read + 0 B written = 4 B/param"),
            std::string::npos)
      << d;
}

// A step that leaves a buffer as it was need not move it: the planner gives a pass one version
// per value of the per-tensor booleans that decide it (Lookahead's sync and its slow weights'
// first step; a state that starts from the parameters, written at the first step only; SGD's
// momentum buffer under momentum 0), with what each version reads and writes, and none where
// no condition saves bytes (the built-ins' kernels stay one body).
TEST(Plan, VersionsMoveOnlyWhatAStepChanges) {
  const std::string lookahead = testing::example_transforms("lookahead.opt") +
                                "chain(adamw(lr=1e-3), lookahead(k=5, alpha=0.5))";
  auto la = compile_pipeline(lookahead);
  ASSERT_TRUE(la) << la.error().message;
  ASSERT_EQ(la->passes.size(), 1u);
  const plan::Pass& pass = la->passes[0];
  EXPECT_EQ(pass.bytes_read + pass.bytes_written, 36);
  ASSERT_EQ(pass.guards.size(), 2u);
  ASSERT_EQ(pass.versions.size(), 4u);
  const uint32_t slow = *la->program.find_buffer("slow_param");
  auto moves = [&](const plan::PassVersion& v, uint32_t b) {
    return std::count(v.reads.begin(), v.reads.end(), b) +
           std::count(v.writes.begin(), v.writes.end(), b);
  };
  std::vector<double> bytes;
  int untouched = 0;
  for (const auto& v : pass.versions) {
    bytes.push_back(v.bytes_read + v.bytes_written);
    if (moves(v, slow) == 0) {
      ++untouched;
      EXPECT_EQ(v.bytes_read + v.bytes_written, 28);  // AdamW's own bytes
    }
    for (size_t i = 0; i < v.body.insts.size(); ++i)  // SSA: operands come first
      for (int a = 0; a < ir::info(v.body.insts[i].op).arity; ++a)
        EXPECT_LT(index(v.body.insts[i].args[a]), i);
  }
  EXPECT_EQ(untouched, 1) << "only a step that neither syncs nor starts leaves them alone";
  std::sort(bytes.begin(), bytes.end());
  EXPECT_EQ(bytes, (std::vector<double>{28, 32, 32, 36}));
  const std::string d = plan::describe(*la, false);
  EXPECT_NE(d.find("=0: reads param:f32 grad:f32 exp_avg:f32 exp_avg_sq:f32 | writes param:f32 "
                   "exp_avg:f32 exp_avg_sq:f32 | 28 B/param"),
            std::string::npos)
      << d;

  auto from_first = compile_pipeline(R"(
transform drift() {
  state p0 = param
  param = param - 0.1 * grad + 0.01 * (p0 - param)
}
drift()
)");
  ASSERT_TRUE(from_first) << from_first.error().message;
  const plan::Pass& fp = from_first->passes[0];
  const uint32_t p0 = *from_first->program.find_buffer("p0");
  ASSERT_EQ(fp.versions.size(), 2u);
  for (const auto& v : fp.versions) {
    // The first step writes p0 (from the parameters, so it reads none); the others read it.
    EXPECT_EQ(std::count(v.writes.begin(), v.writes.end(), p0), v.when[0] ? 1 : 0);
    EXPECT_EQ(std::count(v.reads.begin(), v.reads.end(), p0), v.when[0] ? 0 : 1);
  }

  auto sgd = compile_pipeline("sgd(lr=0.1, momentum=0.9)");
  ASSERT_TRUE(sgd);
  double fewest = 1e9;
  for (const auto& v : sgd->passes[0].versions)
    fewest = std::min(fewest, v.bytes_read + v.bytes_written);
  EXPECT_EQ(fewest, 12) << "momentum 0: parameter and gradient only";

  for (const char* builtin : {"adamw()", "chain(clip_grad_norm(max_norm=1.0), lamb())",
                              "adamw(state_format=\"8bit\")", "nadam()"}) {
    auto p = compile_pipeline(builtin);
    ASSERT_TRUE(p) << builtin;
    for (const auto& ps : p->passes) EXPECT_TRUE(ps.versions.empty()) << builtin;
  }
}

// Planning time: a chain of clips adds a pass per clip. The planner once replanned the whole
// program for every (reduction, pass) pair and every scratch candidate: 40 clips took 4 s,
// 100 over a minute. Now a delay that adds a pass is rejected from the levels alone and a
// scratch trial re-analyses only the passes it touches (bench/scaling.py shows the growth),
// and pipelines beyond the documented limits are one-line errors.
TEST(Plan, PassAndBufferLimitsAreOneLineErrors) {
  auto chain = [](int clips) {
    std::string s = "chain(";
    for (int i = 0; i < clips; ++i) s += "clip_grad_norm(max_norm=1.0), ";
    return s + "sgd(lr=0.1))";
  };
  auto at_limit = compile_pipeline(chain(plan::kMaxPasses - 1));
  ASSERT_TRUE(at_limit) << at_limit.error().message;
  EXPECT_EQ(at_limit->passes.size(), static_cast<size_t>(plan::kMaxPasses));
  auto over = compile_pipeline(chain(200));
  ASSERT_FALSE(over);
  EXPECT_EQ(over.error().message,
            "the pipeline needs at least 201 passes over memory (one more per level of global "
            "reductions, such as each clip_grad_norm in a chain); optjit plans at most 64");
  auto states = [](int n) {
    std::string s = "transform many(lr=0.001) {\n";
    for (int i = 0; i < n; ++i)
      s += fmt::format("  state s{0} = 0\n  s{0} = 0.9 * s{0} + grad\n", i);
    return s + "  param = param - lr * s0\n}\nmany()";
  };
  auto fits = compile_pipeline(states(static_cast<int>(plan::kMaxBuffers) - 2));
  ASSERT_TRUE(fits) << fits.error().message;
  auto too_many = compile_pipeline(states(2000));
  ASSERT_FALSE(too_many);
  EXPECT_EQ(too_many.error().message,
            "the pipeline has 2002 buffers (parameter, gradient and one per state); optjit plans "
            "at most 256");
  // A chain of 20,000 SGDs (a 240 KB pipeline file) took 2 minutes to plan and more than 5 to
  // compile: each SGD's hyperparameters are values the kernel keeps through its loop.
  auto sgds = [](int n) {
    std::string s = "chain(sgd(lr=0.1)";
    for (int i = 1; i < n; ++i) s += ", sgd(lr=0.1)";
    return s + ")";
  };
  auto plenty = compile_pipeline(sgds(300));
  ASSERT_TRUE(plenty) << plenty.error().message;
  EXPECT_GT(plenty->passes[0].uniforms.size(), plan::kMaxUniforms * 3 / 4);
  auto too_many_values = compile_pipeline(sgds(2000));
  ASSERT_FALSE(too_many_values);
  EXPECT_EQ(too_many_values.error().message,
            "pass 0 takes 6000 values from the host (hyperparameters and what the host computes "
            "from them); optjit compiles at most 1024 (the largest chains of built-ins take "
            "under a hundred)");
  auto statements = [](int n) {  // one buffer, a long body (bench/scaling.py's "statements")
    std::string s = "transform big(lr=0.001) {\n  state x = 0\n";
    for (int i = 0; i < n; ++i) s += fmt::format("  x = x + {} * grad\n", i % 7 + 1);
    return s + "  param = param - lr * x\n}\nbig()";
  };
  auto long_body = compile_pipeline(statements(20000));
  ASSERT_TRUE(long_body) << long_body.error().message;
  auto too_long = compile_pipeline(statements(40000));
  ASSERT_FALSE(too_long);
  EXPECT_TRUE(std::regex_match(
      too_long.error().message,
      std::regex("the pipeline is [0-9]+ instructions \\(simplified\\); optjit plans at most "
                 "32768 \\(the largest chains of built-ins are a few hundred\\)")))
      << too_long.error().message;
}

// A chain of dependent values as long as the limits allow plans on a small thread stack. The
// planner walked a pass's values by recursion, once per value of a chain: 20,000 statements
// overflowed the main thread's 8 MiB under ASan, and a host program's worker threads may have
// far less (musl's default is 128 KiB, Python's threading.stack_size may set 32 KiB).
TEST(Plan, LongChainsPlanOnASmallThreadStack) {
  std::string text = "transform big(lr=0.001) {\n  state x = 0\n";
  for (int i = 0; i < 20000; ++i) text += fmt::format("  x = x + {} * grad\n", i % 7 + 1);
  text += "  param = param - lr * x\n}\nbig()";
  auto program = dsl::lower(*dsl::parse_pipeline(text));  // the parser's own depth is bounded
  ASSERT_TRUE(program) << program.error().message;
  struct Job {
    const ir::Program* program;
    std::optional<Expected<plan::Plan>> plan;
  } job{&*program, std::nullopt};
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, 256 * 1024), 0);
  pthread_t thread;
  ASSERT_EQ(pthread_create(
                &thread, &attr,
                [](void* p) -> void* {
                  auto* j = static_cast<Job*>(p);
                  j->plan = plan::make_plan(*j->program);
                  return nullptr;
                },
                &job),
            0);
  ASSERT_EQ(pthread_join(thread, nullptr), 0);
  pthread_attr_destroy(&attr);
  ASSERT_TRUE(job.plan.has_value());
  ASSERT_TRUE(*job.plan) << job.plan->error().message;
  EXPECT_EQ((*job.plan)->passes.size(), 1u);
}

TEST(Plan, RejectsAnInvalidProgram) {
  ir::Program bad;
  auto p = plan::make_plan(bad);
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().message, "IR: needs exactly one param and one grad buffer (has 0 and 0)");
}

}  // namespace
}  // namespace optjit

namespace optjit {
namespace {

// `optjit plan` prints every built-in's plan with its pass bodies (a pass body shares its
// program's buffers, whose state may start from a hyperparameter the body does not have:
// printing adagrad's once read past the end of the body's hyperparameters and crashed).
TEST(PlanText, EveryBuiltinDescribesWithItsBodies) {
  int described = 0;
  for (const auto& d : dsl::builtins()) {
    if (d->kind != dsl::DefKind::transform) continue;
    dsl::Args args;
    for (const auto& h : d->hypers)
      if (h.defaults.empty()) args.emplace(h.name, 1.0);
    auto b = dsl::bind(d, args);
    ASSERT_TRUE(b) << b.error().message;
    auto program = dsl::lower({*b});
    ASSERT_TRUE(program) << d->name << ": " << program.error().message;
    auto plan = plan::make_plan(*program);
    ASSERT_TRUE(plan) << d->name;
    const std::string text = plan::describe(*plan, true);
    EXPECT_NE(text.find("\nplan: "), std::string::npos) << d->name << "\n" << text;
    if (d->name.find("clip") == std::string::npos && d->name != "grad_scaler") {
      EXPECT_NE(text.find("store \"param\""), std::string::npos) << d->name << "\n" << text;
    }
    ++described;
  }
  EXPECT_EQ(described, 18);  // every transform (schedules have no bodies)
}

}  // namespace
}  // namespace optjit

namespace optjit {
namespace {

// Sharding on paper: state and bytes split by the process count; each pass with reductions is
// one all-reduce of 8 bytes per reduction per piece (clip + AdamW: one sumsq in the first pass).
TEST(Plan, ShardCostCountsStateBytesAndAllReducedPartials) {
  auto p = compile_pipeline("chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-3))");
  ASSERT_TRUE(p) << p.error().message;
  const ShardCost c = shard_cost(*p, 7e9, 291, 8, ShardKind::by_tensor);
  EXPECT_DOUBLE_EQ(c.params_per_process, 7e9 / 8);
  EXPECT_DOUBLE_EQ(c.state_bytes, 8 * 7e9 / 8);         // exp_avg and exp_avg_sq in f32
  EXPECT_DOUBLE_EQ(c.bytes_moved, (4 + 28) * 7e9 / 8);  // the norm pass reads grad once more
  EXPECT_EQ(c.allreduces, 1);
  EXPECT_DOUBLE_EQ(c.allreduce_bytes, 8.0 * 291);
  EXPECT_DOUBLE_EQ(shard_cost(*p, 7e9, 291, 8, ShardKind::flat).allreduce_bytes, 8.0 * 298);
  EXPECT_DOUBLE_EQ(shard_cost(*p, 7e9, 291, 8, ShardKind::dim0).allreduce_bytes, 8.0 * 291 * 8);
  // 8-bit state: 2.03 bytes of state per parameter.
  auto q = compile_pipeline(R"(adamw(lr=1e-3, state_format="8bit"))");
  ASSERT_TRUE(q);
  EXPECT_DOUBLE_EQ(shard_cost(*q, 1024, 1, 1, ShardKind::by_tensor).state_bytes,
                   1024 * 2 * (1 + 4.0 / 256));
  EXPECT_EQ(shard_cost(*q, 1024, 1, 1, ShardKind::by_tensor).allreduces, 0);
}

}  // namespace
}  // namespace optjit
