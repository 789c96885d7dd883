// The optjit command line, run as a user would: exit codes, messages, and files.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include <gtest/gtest.h>

#include "test_dir.h"

#include <nlohmann/json.hpp>

#include "runtime/devices.h"
#include "runtime/safetensors.h"

namespace optjit {
namespace {

namespace fs = std::filesystem;
using runtime::HostTensor;
using runtime::TensorFile;

struct Result {
  int code;
  std::string output;  // stdout and stderr
};

Result optjit_cli_prefixed(const std::string& prefix, const std::string& args) {
  std::string cmd = prefix + std::string(OPTJIT_CLI) + " " + args + " 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

Result optjit_cli(const std::string& args) { return optjit_cli_prefixed("", args); }

Result optjit_cli_limited(const std::string& args) {
  return optjit_cli_prefixed("ulimit -v 1048576; ", args);
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::fresh_test_dir("cli"); }
  void TearDown() override { test::remove_test_dir(dir_); }
  std::string p(const std::string& n) const { return (dir_ / n).string(); }
  void write(const std::string& name, std::vector<HostTensor> ts) {
    TensorFile f;
    f.tensors = std::move(ts);
    ASSERT_TRUE(runtime::write_safetensors(p(name), f));
  }
  static HostTensor filled(const std::string& name, DType t, std::vector<int64_t> shape,
                           double base) {
    HostTensor h = HostTensor::zeros(name, t, std::move(shape));
    for (int64_t i = 0; i < h.numel(); ++i)
      h.set(i, base + 0.01 * static_cast<double>(i % 17) - 0.05);
    return h;
  }
  fs::path dir_;
};

// NVRTC is loaded at run time: where it is not, a CUDA compile says where it looked, and the
// CLI (and the library) still start.
TEST_F(Cli, MissingNvrtcIsAClearErrorNamingWhereItLooked) {
  auto r = optjit_cli_prefixed("OPTJIT_NVRTC=/nonexistent/libnvrtc.so.13 ",
                               "compile 'adamw()' --backend cuda --arch sm_90 --out " + p("k"));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("NVRTC not found (tried /nonexistent/libnvrtc.so.13); install the CUDA "
                          "toolkit or the nvidia-cuda-nvrtc wheel, or set OPTJIT_NVRTC"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(p("k"))) << "nothing is written when the compile fails";
  auto plan = optjit_cli_prefixed("OPTJIT_NVRTC=/nonexistent/libnvrtc.so.13 ", "plan 'adamw()'");
  EXPECT_EQ(plan.code, 0) << plan.output;
}

TEST_F(Cli, SynthRunAndResumeEqualsOneLongRun) {
  auto s =
      optjit_cli("synth --preset mlp --steps 4 --params " + p("p.st") + " --grads " + p("g.st"));
  ASSERT_EQ(s.code, 0) << s.output;
  // Slices 1-4 in one run, versus the same gradients split into two runs of two.
  auto grads = *runtime::read_safetensors(p("g.st"));
  TensorFile first, second;
  for (const auto& g : grads.tensors) {
    std::vector<int64_t> shape(g.shape.begin() + 1, g.shape.end());
    std::vector<int64_t> two = shape;
    two.insert(two.begin(), 2);
    HostTensor a{g.name, g.dtype, two, {}}, b{g.name, g.dtype, two, {}};
    size_t half = g.data.size() / 2;
    a.data.assign(g.data.begin(), g.data.begin() + static_cast<std::ptrdiff_t>(half));
    b.data.assign(g.data.begin() + static_cast<std::ptrdiff_t>(half), g.data.end());
    first.tensors.push_back(a);
    second.tensors.push_back(b);
  }
  ASSERT_TRUE(runtime::write_safetensors(p("g1.st"), first));
  ASSERT_TRUE(runtime::write_safetensors(p("g2.st"), second));
  const std::string pipe =
      "'chain(clip_grad_norm(max_norm=0.01), nadam(lr=0.01, weight_decay=0.1))'";
  auto all = optjit_cli("run " + pipe + " --params " + p("p.st") + " --grads " + p("g.st") +
                        " --steps 4 --out " + p("all.st"));
  ASSERT_EQ(all.code, 0) << all.output;
  EXPECT_NE(all.output.find("ran 4 steps (0 skipped) on 6 tensors, 535818 parameters (f32)"),
            std::string::npos)
      << all.output;
  auto r1 = optjit_cli("run " + pipe + " --params " + p("p.st") + " --grads " + p("g1.st") +
                       " --steps 2 --out " + p("half.st"));
  ASSERT_EQ(r1.code, 0) << r1.output;
  auto r2 = optjit_cli("run " + pipe + " --params " + p("half.st") + " --state " + p("half.st") +
                       " --grads " + p("g2.st") + " --steps 2 --out " + p("resumed.st"));
  ASSERT_EQ(r2.code, 0) << r2.output;
  EXPECT_EQ(r2.output.find("warning"), std::string::npos) << r2.output;
  // An earlier run's OUT as --params alone gives its parameters and fresh state, and says so.
  auto fresh = optjit_cli("run " + pipe + " --params " + p("half.st") + " --grads " + p("g2.st") +
                          " --steps 2 --out " + p("fresh.st"));
  ASSERT_EQ(fresh.code, 0) << fresh.output;
  EXPECT_NE(fresh.output.find("optjit: warning: " + p("half.st") +
                              " also holds an earlier run's optimizer state (step 2), which "
                              "--params does not resume: this run starts from fresh state "
                              "(--state " +
                              p("half.st") + " resumes it)\n"),
            std::string::npos)
      << fresh.output;
  EXPECT_EQ(runtime::read_safetensors(p("fresh.st"))->find("step")->get(0), 2.0);
  auto a = *runtime::read_safetensors(p("all.st"));
  auto b = *runtime::read_safetensors(p("resumed.st"));
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (const auto& t : a.tensors) {
    const HostTensor* u = b.find(t.name);
    ASSERT_TRUE(u) << t.name;
    EXPECT_EQ(u->data, t.data) << t.name;
  }
  // Names, dtypes and state as documented.
  EXPECT_TRUE(a.find("fc1.weight") && a.find("fc1.weight")->dtype == DType::f32);
  EXPECT_TRUE(a.find("fc1.weight.exp_avg_sq"));
  ASSERT_TRUE(a.find("fc1.weight.mu_product"));
  EXPECT_EQ(a.find("fc1.weight.mu_product")->shape.size(), 0u);
  ASSERT_TRUE(a.find("step"));
  EXPECT_EQ(a.find("step")->get(0), 4.0);
}

TEST_F(Cli, ErrorsAreOneLineAndWriteNothing) {
  write("p.st", {filled("w", DType::f32, {2, 3}, 1), filled("b", DType::f32, {3}, 0)});
  write("g.st", {filled("w", DType::f32, {2, 3}, 0.1), filled("b", DType::f32, {3}, 0.2)});
  write("g_missing.st", {filled("w", DType::f32, {2, 3}, 0.1)});
  write("g_shape.st", {filled("w", DType::f32, {3, 2}, 0.1), filled("b", DType::f32, {3}, 0.2)});
  write("g_extra.st", {filled("w", DType::f32, {2, 3}, 0.1), filled("b", DType::f32, {3}, 0.2),
                       filled("c", DType::f32, {1}, 0)});
  HostTensor nan = filled("w", DType::f32, {2, 3}, 0.1);
  nan.set(4, std::nan(""));
  write("g_nan.st", {nan, filled("b", DType::f32, {3}, 0.2)});
  write("p_mixed.st", {filled("w", DType::f32, {2, 3}, 1), filled("b", DType::f16, {3}, 0)});
  // Parameters of several dtypes are one optimizer; gradients in neither their parameters'
  // dtypes nor one dtype are not.
  write("g_crossed.st", {filled("w", DType::f16, {2, 3}, 0.1), filled("b", DType::f32, {3}, 0.2)});
  std::ofstream(p("corrupt.st")) << "not a safetensors file";
  std::ofstream(p("existing.st")) << "precious";

  auto run = [&](const std::string& pipeline, const std::string& params, const std::string& grads,
                 const std::string& extra = "") {
    return optjit_cli("run '" + pipeline + "' --params " + p(params) + " --grads " + p(grads) +
                      " --steps 2 --out " + p("existing.st") + " " + extra);
  };
  struct Case {
    Result r;
    std::string message;
  };
  // Without a GPU, asking for CUDA is a clear error (with one, the run would succeed).
  const std::string cuda_error =
      "optjit: no CUDA driver on this machine (libcuda.so.1 not found), so no NVIDIA GPU can "
      "be used; optjit compile --backend cuda still builds cubins\n";
  std::vector<Case> cases = {
      {run("adamw(lr=1e-3", "p.st", "g.st"),
       "optjit: pipeline: line 1, column 14: expected ',' or ')', found end of input\n"},
      {run("adamw()", "p.st", "g_missing.st"),
       "optjit: " + p("g_missing.st") + ": no gradient for parameter 'b'\n"},
      {run("adamw()", "p.st", "g_shape.st"),
       "optjit: " + p("g_shape.st") +
           ": gradient 'w' has shape [3, 2], expected [2, 3] or [2, 2, 3]\n"},
      {run("adamw()", "p.st", "g_extra.st"),
       "optjit: " + p("g_extra.st") + ": gradient 'c' has no parameter\n"},
      {run("adamw()", "p.st", "g_nan.st"),
       "optjit: " + p("g_nan.st") +
           ": gradient 'w' has a non-finite value (nan) at element 4; add grad_scaler(...) to skip "
           "such steps, or pass --allow-nonfinite\n"},
      {run("adamw()", "p_mixed.st", "g_crossed.st"),
       "optjit: " + p("g_crossed.st") +
           ": gradients mix f32 and f16; give each parameter's gradient in its own dtype, or all "
           "in one\n"},
      {run("adamw()", "corrupt.st", "g.st"),
       "optjit: " + p("corrupt.st") +
           ": not a valid safetensors file: header length 7021991845529153390 does not fit in a "
           "file of 22 bytes\n"},
      {run("adamw()", "p.st", "g.st", "--set lrr=1"),
       "optjit: --set: no hyperparameter 'lrr' (this pipeline has: adamw.weight_decay, adamw.lr, "
       "adamw.betas.0, adamw.betas.1, adamw.eps)\n"},
      {run("adamw()", "p.st", "g.st", "--group 'b:weight_decay'"),
       "optjit: --group 'b:weight_decay': 'weight_decay' is not name=value\n"},
      {run("adamw()", "p.st", "g.st", "--state " + p("corrupt.st")),
       "optjit: " + p("corrupt.st") +
           ": not a valid safetensors file: header length 7021991845529153390 does not fit in a "
           "file of 22 bytes\n"},
      {run("adamw()", "p.st", "g.st", "--state " + p("p.st")),
       "optjit: " + p("p.st") + ": state file has no 0-d 'step' tensor\n"},
      {run("adamw()", "p.st", "g.st", "--backend cuda"), cuda_error},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(c.r.code, 1) << c.r.output;
    EXPECT_EQ(c.r.output, c.message);
  }
  std::ifstream in(p("existing.st"));
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "precious");
}

TEST_F(Cli, GradScalerSkipsStepsWithInfAndGroupsOverride) {
  write("p.st", {filled("w", DType::f32, {4}, 1), filled("b", DType::f32, {2}, 0.5)});
  HostTensor g = filled("w", DType::f32, {3, 4}, 10);
  g.set(5, std::numeric_limits<double>::infinity());  // step 2
  write("g.st", {g, filled("b", DType::f32, {3, 2}, 10)});
  auto r = optjit_cli("run 'chain(grad_scaler(scale=1024), adamw(lr=0.1))' --params " + p("p.st") +
                      " --grads " + p("g.st") + " --steps 3 --group 'b:lr=0' --out " + p("o.st"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("ran 3 steps (1 skipped)"), std::string::npos) << r.output;
  auto o = *runtime::read_safetensors(p("o.st"));
  EXPECT_EQ(o.find("step")->get(0), 2.0);
  // lr = 0 in b's group: AdamW's decoupled decay and update are both scaled by lr.
  EXPECT_EQ(o.find("b")->data, filled("b", DType::f32, {2}, 0.5).data);
  EXPECT_NE(o.find("w")->data, filled("w", DType::f32, {4}, 1).data);
}

TEST_F(Cli, OutOfMemoryIsAClearError) {
  // A 1 GiB address-space limit and a 16 GiB parameter set: the allocation fails cleanly.
  auto r = optjit_cli_limited("synth --preset one --numel 4000000000 --params " + p("p.st") +
                              " --grads " + p("g.st"));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_EQ(
      r.output,
      "optjit: out of memory (the tensors or the state do not fit in this machine's memory)\n");
  EXPECT_FALSE(fs::exists(p("p.st")));
}

// Counts a user gives are bounded, and sizes computed from them are checked for overflow, before
// anything is allocated or written: these crashed (SIGSEGV) or hung before.
TEST_F(Cli, BadCountsAndArgumentsAreOneLineErrors) {
  const std::string huge = "4611686018427387904";  // 2^62
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"bench 'sgd()' --threads 100000 --numel 1000",
       "optjit: --threads: '100000' is not a whole number from 0 to 1024\n"},
      {"bench 'sgd()' --threads 1000000000 --numel 1000",
       "optjit: --threads: '1000000000' is not a whole number from 0 to 1024\n"},
      {"bench 'sgd()' --numel " + huge,
       "optjit: --numel: '" + huge + "' is not a whole number from 1 to 281474976710656\n"},
      {"tune 'sgd()' --numel " + huge,
       "optjit: --numel: '" + huge + "' is not a whole number from 1 to 281474976710656\n"},
      {"synth --preset one --numel " + huge + " --params " + p("p.st") + " --grads " + p("g.st"),
       "optjit: --numel: '" + huge + "' is not a whole number from 1 to 281474976710656\n"},
      {"synth --preset one --numel 281474976710656 --steps 2 --params " + p("p.st") + " --grads " +
           p("g.st"),
       "optjit: 'weight' with 2 gradient steps has more than 281474976710656 elements, optjit's "
       "limit\n"},
      // CLI11's own argument errors: exit code 1 and one line too (they were 104/105 and two
      // lines, one with a 309-digit bound).
      {"run x --params a --grads b --out c --steps 0",
       "optjit: --steps: '0' is not a whole number from 1 to 1000000000\n"},
      {"run x --params a --grads b --out c --steps 1.5",
       "optjit: --steps: '1.5' is not a whole number from 1 to 1000000000\n"},
      {"bench 'sgd()' --chunk 0",
       "optjit: --chunk: '0' is not a whole number from 1 to "
       "281474976710656\n"},
      {"run x --params a --grads b", "optjit: --steps is required\n"},
      {"run x --params a --grads b --out c --steps 1 --backend tpu",
       "optjit: --backend: 'tpu' is not a backend (cpu, opencl, cuda, webgpu, reference or "
       "auto)\n"},
      {"bench 'sgd()' --backend tpu",
       "optjit: --backend: 'tpu' is not a backend (cpu, opencl, cuda or webgpu)\n"},
      {"rnu x",
       "optjit: 'rnu' is not a command (run, cache, emit, plan, compile, tune, bench, "
       "devices, list, inspect, synth; --help explains each)\n"},
      // Sharding on paper: checked before anything is printed (the plan came first, then the
      // error; --params -7 named CLI11's 309-digit bound; --processes 0 printed an empty table).
      {"plan 'sgd()' --params -7 --tensors 3",
       "optjit: --params: '-7' is not a finite number of at least 1\n"},
      {"plan 'sgd()' --params 7e9", "optjit: --params needs --tensors: the model's tensor count\n"},
      {"plan 'sgd()' --tensors 100",
       "optjit: --tensors goes with --params: the model's parameter count\n"},
      {"plan 'sgd()' --params 10 --tensors 100",
       "optjit: --tensors 100 is more than --params 10: every tensor holds at least one "
       "parameter\n"},
      {"plan 'sgd()' --params 7e9 --tensors 100 --processes 8,0",
       "optjit: --processes: '0' is not a process count (a whole number from 1 to 2^40)\n"},
      {"synth --preset one --numel 1000000000 --steps 1000000 --params " + p("p.st") + " --grads " +
           p("g.st"),
       "optjit: 'weight' with 1000000 gradient steps has more than 281474976710656 elements, "
       "optjit's limit\n"},
  };
  for (const auto& [args, message] : cases) {
    auto r = optjit_cli(args);
    EXPECT_EQ(r.code, 1) << args << "\n" << r.output;
    EXPECT_EQ(r.output, message) << args;
  }
  EXPECT_FALSE(fs::exists(p("p.st")));
  EXPECT_FALSE(fs::exists(p("g.st")));
}

// Values that would run and make nonsense: errors (or, for a group pattern that matches
// nothing, a warning) that name them, and the output file is not written.
TEST_F(Cli, NonsenseValuesAreErrorsOrWarningsNamingThem) {
  write("p.st", {filled("w", DType::f32, {2, 3}, 1), filled("b", DType::f32, {3}, 0)});
  write("g.st", {filled("w", DType::f32, {2, 3}, 0.1), filled("b", DType::f32, {3}, 0.2)});
  auto run = [&](const std::string& pipeline, const std::string& extra) {
    return optjit_cli("run '" + pipeline + "' --params " + p("p.st") + " --grads " + p("g.st") +
                      " --steps 1 --quiet --out " + p("out.st") + " " + extra);
  };
  const std::vector<std::pair<Result, std::string>> errors = {
      {run("adamw()", "--set lr=nan"),
       "optjit: --set: adamw.lr = nan is invalid: the learning rate must be in [0, inf]\n"},
      {run("adamw()", "--set eps=nan"),
       "optjit: --set: adamw.eps = nan is invalid: epsilon must be in [0, inf]\n"},
      {run("adamw()", "--set weight_decay=nan"),
       "optjit: --set: adamw.weight_decay = nan is invalid: weight_decay must be in [0, inf]\n"},
      {run("adamw()", "--set betas=1.0,1.0"),
       "optjit: --set: adamw.betas.0 = 1 is invalid: each beta must be in [0, 1)\n"},
      {run("adamw()", "--set lr=-1"),
       "optjit: --set: adamw.lr = -1 is invalid: the learning rate must be in [0, inf]\n"},
      {run("adamw()", "--set lr=1e999"),
       "optjit: --set 'lr=1e999': '1e999' is too large for a double (write inf for infinity)\n"},
      {run("adamw()", "--set lr=1 --set lr=2"), "optjit: --set: 'lr' is given twice\n"},
      {run("adamw()", "--group 'w:lr=1,lr=2'"),
       "optjit: --group 'w:lr=1,lr=2': 'lr' is given twice\n"},
      {run("adamw()", "--group 'w:lr=-0.5'"),
       "optjit: parameter group 1: adamw.lr = -0.5 is invalid: the learning rate must be in "
       "[0, inf]\n"},
      {run("adamw(betas=(0.9, 1.0))", ""),
       "optjit: pipeline: line 1, column 1: transform 'adamw': betas[1] = 1 is invalid: each "
       "beta must be in [0, 1)\n"},
      {run("sgd(lr=linear_lr(base_lr=0.1, total_iters=2.5))", ""),
       "optjit: pipeline: line 1, column 8: schedule 'linear_lr': total_iters = 2.5 is invalid: "
       "total_iters must be a whole number\n"},
      {run("adamw()", "--launch block=128"),
       "optjit: --launch is for --backend cuda and opencl; the cpu backend takes --threads and "
       "--chunk\n"},
  };
  for (const auto& [r, message] : errors) {
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_EQ(r.output, message);
  }
  EXPECT_FALSE(fs::exists(p("out.st")));
  auto warned = run("adamw()", "--group '*.bais:weight_decay=0'");
  EXPECT_EQ(warned.code, 0) << warned.output;
  EXPECT_EQ(warned.output,
            "optjit: warning: parameter group 1: pattern '*.bais' matches no parameter\n");
  // Bundles: empty, not SQLite, SQLite but not a bundle.
  std::ofstream(p("empty.bundle")).close();
  std::ofstream(p("text.bundle")) << "not a bundle at all, but long enough";
  auto made = optjit_cli("cache export " + p("real.bundle"));
  ASSERT_EQ(made.code, 0) << made.output;
  {
    std::ifstream in(p("real.bundle"), std::ios::binary);
    std::string head(16, '\0');
    in.read(head.data(), 16);
    std::ofstream(p("other.sqlite"), std::ios::binary) << head << std::string(4080, '\0');
  }
  const std::vector<std::pair<std::string, std::string>> bundles = {
      {"empty.bundle", "not a kernel bundle (the file is empty)"},
      {"text.bundle", "not a kernel bundle (not an SQLite database)"},
      {"other.sqlite", "not a kernel bundle (an SQLite database without optjit's tables)"},
  };
  for (const auto& [file, why] : bundles) {
    auto r = optjit_cli("cache import " + p(file));
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_EQ(r.output, "optjit: " + p(file) + ": " + why + "\n");
  }
}

// A plan with pass versions (Lookahead's sync steps): plan --json lists each version's bytes,
// and bench counts what the timed steps moved where the host step saw them. Its 2 warm-up steps
// take steps 1-2; the 5 timed ones, steps 3-7, sync once (step 6): (4 x 28 + 36) / 5 = 29.6 bytes
// per parameter.
TEST_F(Cli, PlanAndBenchCountTheBytesOfPassVersions) {
  const std::string file = std::string(OPTJIT_SOURCE_DIR) + "/examples/pipelines/lookahead.opt";
  auto plan = optjit_cli("plan " + file + " --json");
  ASSERT_EQ(plan.code, 0) << plan.output;
  auto j = nlohmann::json::parse(plan.output);
  EXPECT_EQ(j["bytes_per_param"], 36);
  ASSERT_EQ(j["passes"][0]["versions"].size(), 4u);
  int alone = 0;
  for (const auto& v : j["passes"][0]["versions"]) {
    EXPECT_EQ(v["when"].size(), 2u);
    if (v["bytes_read"].get<double>() + v["bytes_written"].get<double>() == 28) {
      ++alone;
      EXPECT_EQ(v["reads"], nlohmann::json({"param", "grad", "exp_avg", "exp_avg_sq"}));
    }
  }
  EXPECT_EQ(alone, 1);
  auto bench =
      optjit_cli("bench " + file + " --numel 10000 --steps 5 --reps 1 --json --no-unfused");
  ASSERT_EQ(bench.code, 0) << bench.output;
  auto b = nlohmann::json::parse(bench.output);
  EXPECT_EQ(b["bytes_per_param"], 36);
  EXPECT_NEAR(b["moved_bytes_per_param"].get<double>(), 29.6, 1e-9);
  EXPECT_NEAR(b["effective_gbs"].get<double>(),
              29.6 * 10000 / b["step_seconds"].get<double>() / 1e9,
              1e-6 * b["effective_gbs"].get<double>());
  EXPECT_EQ(b["moved_bytes_known"], true);
  // The device step chooses the versions on the device: the host counts whole passes and says
  // so.
  auto device = optjit_cli("bench " + file +
                           " --backend opencl --step device --numel 10000 --steps 5 --reps 1 "
                           "--json --no-unfused");
  ASSERT_EQ(device.code, 0) << device.output;
  auto d = nlohmann::json::parse(device.output);
  EXPECT_EQ(d["moved_bytes_known"], false);
  EXPECT_EQ(d["moved_bytes_per_param"], 36);
}

// bench is a benchmark, not a test: this only checks that it runs and reports consistent numbers.
TEST_F(Cli, BenchReportsRooflineAndUnfusedBaseline) {
  auto r = optjit_cli(
      "bench 'chain(clip_grad_norm(max_norm=1.0), adamw())' --numel 100000 --steps 1 --reps 1 "
      "--json");
  ASSERT_EQ(r.code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["bytes_per_param"], 32);
  EXPECT_EQ(j["unfused_bytes_per_param"], 40);
  EXPECT_EQ(j["passes"], 2);
  EXPECT_GT(j["step_seconds"].get<double>(), 0);
  EXPECT_GT(j["roofline_gbs"].get<double>(), 0);
  EXPECT_NEAR(j["effective_gbs"].get<double>(),
              32.0 * 100000 / j["step_seconds"].get<double>() / 1e9,
              1e-6 * j["effective_gbs"].get<double>());
  // The in-cache step: 65536 parameters a thread, its time per parameter at this step's 200000;
  // none for a step that small itself.
  auto cached = optjit_cli(
      "bench 'chain(clip_grad_norm(max_norm=1.0), adamw())' --numel 200000 --threads 1 --steps 1 "
      "--reps 1 --json --no-unfused");
  ASSERT_EQ(cached.code, 0) << cached.output;
  auto c = nlohmann::json::parse(cached.output);
  EXPECT_EQ(c["in_cache_parameters"], 65536);
  EXPECT_NEAR(
      c["in_cache_scaled_step_seconds"].get<double>(),
      c["in_cache_step_seconds"].get<double>() * 200000 / c["in_cache_parameters"].get<double>(),
      1e-9 * c["in_cache_scaled_step_seconds"].get<double>());
  EXPECT_NEAR(c["vs_in_cache"].get<double>(),
              c["step_seconds"].get<double>() / c["in_cache_scaled_step_seconds"].get<double>(),
              1e-9 * c["vs_in_cache"].get<double>());
  auto small = optjit_cli("bench 'sgd()' --numel 65536 --threads 1 --steps 1 --reps 1 --json");
  ASSERT_EQ(small.code, 0) << small.output;
  EXPECT_FALSE(nlohmann::json::parse(small.output).contains("in_cache_step_seconds"));
  auto shapes =
      optjit_cli("bench 'sgd(lr=0.1)' --shapes resnet50 --steps 1 --reps 1 --json --no-unfused");
  ASSERT_EQ(shapes.code, 0) << shapes.output;
  auto k = nlohmann::json::parse(shapes.output);
  EXPECT_EQ(k["tensors"], 161);
  EXPECT_EQ(k["parameters"], 25557032);
  // The report's plan line counts passes in English.
  for (auto [pipeline, line] :
       {std::pair{"sgd(lr=0.1)", "plan         1 pass, 12 bytes per parameter;"},
        {"chain(clip_grad_norm(max_norm=1.0), sgd(lr=0.1))",
         "plan         2 passes, 16 bytes per parameter;"},
        {"sgd(lr=0.1)",
         " ms/step  (the step over 65536 parameters, staying in cache, scaled) -> "
         "fused takes "}}) {
    auto text = optjit_cli(fmt::format(
        "bench '{}' --numel 70000 --steps 1 --reps 1 --no-unfused --threads 1", pipeline));
    ASSERT_EQ(text.code, 0) << text.output;
    EXPECT_NE(text.output.find(line), std::string::npos) << text.output;
  }
  // A device backend also times the per-step overhead with the scalar program in the other
  // place, in the same run: the default on OpenCL is the device step, so the other is the host.
  auto ocl = optjit_cli(
      "bench 'chain(clip_grad_norm(max_norm=1.0), adamw())' --backend opencl --numel 4096 "
      "--steps 1 --reps 1 --json --no-unfused");
  ASSERT_EQ(ocl.code, 0) << ocl.output;
  auto m = nlohmann::json::parse(ocl.output);
  EXPECT_EQ(m["step"], "device");
  EXPECT_EQ(m["f32_division"], "hardware");  // OpenCL's, built correctly rounded
  EXPECT_EQ(m["overhead_other_step"], "host");
  EXPECT_GT(m["overhead_other_step_seconds"].get<double>(), 0);
  EXPECT_GT(m["fraction_of_copy_bandwidth"].get<double>(), 0);
  EXPECT_FALSE(m.contains("in_cache_step_seconds"));  // a CPU measure
  auto bad = optjit_cli("bench 'adamw()' --shapes nosuch.json");
  EXPECT_EQ(bad.code, 1);
  EXPECT_EQ(bad.output,
            "optjit: --shapes 'nosuch.json' is not a preset (gpt2-small, resnet50, many-small) or "
            "a readable file\n");
}

TEST_F(Cli, DevicesListsEveryBackendWithFingerprints) {
  auto r = optjit_cli("devices --json");
  ASSERT_EQ(r.code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  bool cpu = false, opencl = false;
  for (const auto& d : j["devices"]) {
    cpu |= d["backend"] == "cpu";
    opencl |= d["backend"] == "opencl";
    EXPECT_EQ(d["exact_fingerprint"].get<std::string>().size(), 16u);
    EXPECT_NE(
        d["exact"].get<std::string>().find(fmt::format("codegen {}", runtime::kCodegenVersion)),
        std::string::npos);
  }
  EXPECT_TRUE(cpu);
  EXPECT_TRUE(opencl) << "PoCL (pocl-opencl-icd) should provide an OpenCL device";
  // No GPU here: the CUDA line says so instead of failing.
  bool cuda_device = false;
  for (const auto& d : j["devices"]) cuda_device |= d["backend"] == "cuda";
  if (!cuda_device) {
    ASSERT_FALSE(j["unavailable"].empty());
    EXPECT_NE(j["unavailable"].dump().find("cuda: "), std::string::npos);
  }
  auto text = optjit_cli("devices");
  EXPECT_NE(text.output.find("auto: "), std::string::npos) << text.output;
}

// A second process compiles nothing: its kernels come from the first one's cache, and the
// results are the same bytes.
TEST_F(Cli, WarmStartLoadsKernelsFromTheCache) {
  write("p.st", {filled("w", DType::f32, {1000}, 1), filled("b", DType::f32, {10}, 0)});
  write("g.st", {filled("w", DType::f32, {1000}, 0.1), filled("b", DType::f32, {10}, 0.2)});
  const std::string env = "OPTJIT_CACHE_DIR=" + p("kcache") + " ";
  const std::string args =
      "run 'chain(clip_grad_norm(max_norm=1.0), adamw())' --backend cpu --params " + p("p.st") +
      " --grads " + p("g.st") + " --steps 3 --out ";
  auto cold = optjit_cli_prefixed(env, args + p("cold.st"));
  ASSERT_EQ(cold.code, 0) << cold.output;
  EXPECT_NE(cold.output.find("compiling kernels"), std::string::npos) << cold.output;
  auto warm = optjit_cli_prefixed(env, args + p("warm.st"));
  ASSERT_EQ(warm.code, 0) << warm.output;
  EXPECT_NE(warm.output.find("loading kernels from the cache"), std::string::npos) << warm.output;
  EXPECT_EQ(runtime::read_safetensors(p("cold.st"))->find("w")->data,
            runtime::read_safetensors(p("warm.st"))->find("w")->data);
  auto stats = optjit_cli_prefixed(env, "cache stats --json");
  EXPECT_NE(stats.output.find("\"kernels\": 1"), std::string::npos) << stats.output;
  EXPECT_EQ(optjit_cli_prefixed(env, "cache verify").code, 0);
  // Strict: a pipeline that was never compiled is an error, not a compile.
  auto strict = optjit_cli_prefixed(
      env, "run 'sgd(lr=0.1)' --backend cpu --cache-strict --params " + p("p.st") + " --grads " +
               p("g.st") + " --steps 1 --out " + p("s.st"));
  EXPECT_EQ(strict.code, 1);
  EXPECT_NE(
      strict.output.find(
          "kernel cache miss in strict mode for the cpu kernels of this pipeline: nearest cached "
          "kernel differs in program"),
      std::string::npos)
      << strict.output;
  EXPECT_FALSE(fs::exists(p("s.st")));
}

// A cache on a full disk (a 32 KiB file size limit: room for the database as it is, not for a
// cubin): compile said "(stored in the kernel cache)" and exited 0 while nothing was stored, so
// a cache meant to ship warm shipped cold. Now it says so and fails (with --out, whose files
// are then the product, it warns); tune fails when its decision cannot be stored.
TEST_F(Cli, KernelsAndDecisionsACacheCannotStoreAreSaidNotStored) {
  const std::string env = "OPTJIT_CACHE_DIR=" + p("c") + " ";
  ASSERT_EQ(optjit_cli_prefixed(env, "cache stats").code, 0);  // the schema, with room
  const std::string full = "trap '' XFSZ; ulimit -f 64; " + env;
  const std::string pipe = "'chain(clip_grad_norm(max_norm=1.0), adamw())'";
  auto built = optjit_cli_prefixed(full, "compile " + pipe + " --arch sm_90");
  EXPECT_EQ(built.code, 1) << built.output;
  EXPECT_NE(built.output.find("sm_90: "), std::string::npos) << built.output;
  EXPECT_NE(built.output.find("(NOT stored in the kernel cache)"), std::string::npos)
      << built.output;
  EXPECT_NE(built.output.find("optjit: the kernels were compiled but not stored: kernel cache " +
                              p("c") + "/kernels.sqlite: "),
            std::string::npos)
      << built.output;
  // The same limit lets the CPU kernels in but not the tuning decision after them.
  auto tuned = optjit_cli_prefixed(full, "tune " + pipe + " --numel 5000 --max-candidates 2");
  EXPECT_EQ(tuned.code, 1) << tuned.output;
  EXPECT_NE(tuned.output.find("optjit: the decision was not stored: kernel cache " + p("c") +
                              "/kernels.sqlite: "),
            std::string::npos)
      << tuned.output;
  auto stats = optjit_cli_prefixed(env, "cache ls");
  EXPECT_EQ(stats.output.find("cubin"), std::string::npos) << stats.output;
  // A bundle is read through a copy in the temporary directory: where there is none (TMPDIR
  // names no directory) the import ended in "unexpected error: filesystem error".
  ASSERT_EQ(optjit_cli_prefixed(env, "cache export " + p("b.sqlite")).code, 0);
  auto im = optjit_cli_prefixed("TMPDIR=" + p("gone") + " " + env, "cache import " + p("b.sqlite"));
  EXPECT_EQ(im.code, 1);
  EXPECT_EQ(im.output, "optjit: " + p("b.sqlite") +
                           ": no temporary directory to read it through (No such file or "
                           "directory)\n");
  // A bundle path that cannot be examined (EACCES for a user; here a file used as a directory,
  // ENOTDIR) ended the same way.
  auto hidden = optjit_cli_prefixed(env, "cache import " + p("b.sqlite") + "/b.sqlite");
  EXPECT_EQ(hidden.output,
            "optjit: " + p("b.sqlite") + "/b.sqlite: cannot be examined (Not a directory)\n");
  // Nor was there a default cache then, without HOME: now the system's /tmp (one per user).
  auto where = optjit_cli_prefixed(
      "env -u HOME -u XDG_CACHE_HOME -u OPTJIT_CACHE_DIR TMPDIR=" + p("gone") + " ", "cache path");
  EXPECT_EQ(where.code, 0) << where.output;
  EXPECT_EQ(where.output, fmt::format("/tmp/optjit-cache-{}/kernels.sqlite\n", ::geteuid()));
  // XDG_CACHE_HOME when it is absolute; a relative one is ignored, as the XDG spec says (the
  // cache went wherever the command was started).
  for (const auto& [xdg, want] :
       {std::pair{p("xdg"), p("xdg") + "/optjit"}, {"relative", p("home") + "/.cache/optjit"}}) {
    auto at = optjit_cli_prefixed("cd " + dir_.string() +
                                      " && env -u OPTJIT_CACHE_DIR XDG_CACHE_HOME=" + xdg +
                                      " HOME=" + p("home") + " ",
                                  "cache path");
    EXPECT_EQ(at.code, 0) << at.output;
    EXPECT_EQ(at.output, want + "/kernels.sqlite\n") << xdg;
  }
  EXPECT_FALSE(fs::exists(p("relative"))) << "a cache made in the working directory";
}

// Shipping a warm cache: build cubins ahead of time (no GPU), export them signed, import them
// elsewhere with the signature checked, or use the bundle directly as a read-only layer.
TEST_F(Cli, SignedBundlesShipAWarmCache) {
  const std::string a = "OPTJIT_CACHE_DIR=" + p("a") + " ", b = "OPTJIT_CACHE_DIR=" + p("b") + " ";
  const std::string pipe = "'chain(clip_grad_norm(max_norm=1.0), adamw())'";
  auto built = optjit_cli_prefixed(a, "compile " + pipe + " --arch sm_80,sm_90");
  ASSERT_EQ(built.code, 0) << built.output;
  EXPECT_NE(built.output.find("sm_80: "), std::string::npos);
  EXPECT_NE(built.output.find("(stored in the kernel cache)"), std::string::npos) << built.output;
  // The tuning decision travels with the kernels of its program.
  ASSERT_EQ(optjit_cli_prefixed(a, "tune " + pipe + " --numel 5000 --max-candidates 2").code, 0);
  ASSERT_EQ(optjit_cli_prefixed(a, "cache keygen " + p("k")).code, 0);
  auto ex = optjit_cli_prefixed(
      a, "cache export " + p("bundle.sqlite") + " --device sm_80 --sign " + p("k.key"));
  ASSERT_EQ(ex.code, 0) << ex.output;
  EXPECT_NE(ex.output.find("exported 1 kernel and 1 tuning decision to"), std::string::npos)
      << ex.output;
  auto im =
      optjit_cli_prefixed(b, "cache import " + p("bundle.sqlite") + " --verify " + p("k.pub"));
  ASSERT_EQ(im.code, 0) << im.output;
  EXPECT_NE(im.output.find("imported 1 kernel and 1 tuning decision from"), std::string::npos)
      << im.output;
  auto warm = optjit_cli_prefixed(b, "compile " + pipe + " --arch sm_80");
  EXPECT_NE(warm.output.find("(from the kernel cache)"), std::string::npos) << warm.output;
  auto coverage = optjit_cli_prefixed(b, "cache coverage");
  EXPECT_NE(coverage.output.find("cuda sm_80 (ahead of time)"), std::string::npos)
      << coverage.output;
  EXPECT_NE(coverage.output.find("  tuned on cpu|"), std::string::npos) << coverage.output;
  EXPECT_NE(coverage.output.find(" for 2^12 elements: threads="), std::string::npos)
      << coverage.output;
  write("p.st", {filled("weight", DType::f32, {5000}, 1)});
  write("g.st", {filled("weight", DType::f32, {5000}, 0.1)});
  auto tuned_run =
      optjit_cli_prefixed(b, "run " + pipe + " --backend cpu --params " + p("p.st") + " --grads " +
                                 p("g.st") + " --steps 1 --out " + p("o.st"));
  ASSERT_EQ(tuned_run.code, 0) << tuned_run.output;
  EXPECT_NE(tuned_run.output.find("launch parameters from the kernel cache's tuning"),
            std::string::npos)
      << tuned_run.output;
  // As a read-only layer, without importing.
  auto layered = optjit_cli_prefixed(
      "OPTJIT_CACHE_DIR=" + p("c") + " OPTJIT_CACHE_SHIPPED=" + p("bundle.sqlite") + " ",
      "compile " + pipe + " --arch sm_80");
  EXPECT_NE(layered.output.find("(from the kernel cache)"), std::string::npos) << layered.output;
  // A changed bundle fails its signature.
  {
    std::fstream f(p("bundle.sqlite"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(5000);
    f.put('x');
  }
  auto bad =
      optjit_cli_prefixed(b, "cache import " + p("bundle.sqlite") + " --verify " + p("k.pub"));
  EXPECT_EQ(bad.code, 1);
  EXPECT_EQ(
      bad.output,
      "optjit: " + p("bundle.sqlite") +
          ": the signature does not match (the bundle was changed, or signed with another key)\n");
}

// Outputs are regular files, replaced whole or not at all: a device, a FIFO, a link or a
// directory given as an output is refused before any work, and a command that fails leaves
// every file as it was and no temporaries.
TEST_F(Cli, FailedCommandsLeaveNoFilesAndOutputsAreRegularFiles) {
  write("p.st", {filled("weight", DType::f32, {64}, 1)});
  write("g.st", {filled("weight", DType::f32, {64}, 0.1)});
  auto entries = [&] {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  };
  const std::string run = "run 'adamw()' --backend reference --params " + p("p.st") + " --grads " +
                          p("g.st") + " --steps 1 --out ";
  ASSERT_EQ(::mkfifo(p("fifo").c_str(), 0644), 0);
  auto fifo = optjit_cli(run + p("fifo"));
  EXPECT_EQ(fifo.code, 1);
  EXPECT_EQ(fifo.output,
            "optjit: --out " + p("fifo") + ": is a FIFO; optjit writes only regular files\n");
  EXPECT_TRUE(fs::is_fifo(p("fifo")));
  fs::create_symlink(p("p.st"), p("link.st"));
  auto link = optjit_cli(run + p("link.st"));
  EXPECT_EQ(link.code, 1);
  EXPECT_EQ(link.output, "optjit: --out " + p("link.st") + ": is a symbolic link (to " + p("p.st") +
                             "); optjit replaces only regular files, so give the file it points "
                             "to\n");
  EXPECT_TRUE(fs::is_symlink(p("link.st")));
  auto missing = optjit_cli(run + p("nodir/o.st"));
  EXPECT_EQ(missing.output, "optjit: --out " + p("nodir/o.st") + ": the directory " + p("nodir") +
                                " does not exist\n");
  // The output never replaces the gradients, by their name or another link to them.
  std::ifstream gin(p("g.st"), std::ios::binary);
  const std::string gradients((std::istreambuf_iterator<char>(gin)), {});
  fs::create_hard_link(p("g.st"), p("g2.st"));
  for (const std::string out : {"g.st", "g2.st"}) {
    auto over = optjit_cli(run + p(out));
    EXPECT_EQ(over.code, 1);
    EXPECT_EQ(over.output, "optjit: --out " + p(out) + " is the gradients file (--grads " +
                               p("g.st") + "): the output would replace the gradients\n");
  }
  fs::remove(p("g2.st"));
  std::ifstream gafter(p("g.st"), std::ios::binary);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(gafter)), {}), gradients);
  const auto before = entries();
  EXPECT_EQ(before, (std::vector<std::string>{"fifo", "g.st", "link.st", "p.st"}));

  // synth writes both files or neither.
  auto synth = optjit_cli("synth --preset one --numel 100 --params " + p("new_p.st") + " --grads " +
                          p("nodir/g.st"));
  EXPECT_EQ(synth.code, 1);
  EXPECT_EQ(synth.output, "optjit: --grads " + p("nodir/g.st") + ": the directory " + p("nodir") +
                              " does not exist\n");
  auto same =
      optjit_cli("synth --preset one --numel 100 --params " + p("x.st") + " --grads " + p("x.st"));
  EXPECT_EQ(same.output, "optjit: --params and --grads are the same file\n");

  // compile checks every architecture before it compiles or writes anything.
  auto arch = optjit_cli("compile 'adamw()' --arch sm_80,,sm_90 --out " + p("cubins"));
  EXPECT_EQ(arch.code, 1);
  EXPECT_NE(arch.output.find("optjit: --arch: '' is not a CUDA architecture (e.g. sm_80, sm_90)"),
            std::string::npos)
      << arch.output;
  auto twice = optjit_cli("compile 'adamw()' --arch sm_80,sm_80 --out " + p("cubins"));
  EXPECT_NE(twice.output.find("optjit: --arch: 'sm_80' is given twice"), std::string::npos)
      << twice.output;
  auto file_out = optjit_cli("compile 'adamw()' --arch sm_80 --out " + p("p.st"));
  EXPECT_NE(file_out.output.find("optjit: --out " + p("p.st") + ": not a directory"),
            std::string::npos)
      << file_out.output;

  // cache export with a bad key: the key is read first, the old bundle stays.
  const std::string env = "OPTJIT_CACHE_DIR=" + p("kc") + " ";
  ASSERT_EQ(optjit_cli_prefixed(env, "cache export " + p("b.bundle")).code, 0);
  std::ifstream in(p("b.bundle"), std::ios::binary);
  const std::string bundle((std::istreambuf_iterator<char>(in)), {});
  std::ofstream(p("bad.key")) << "not a key";
  auto key = optjit_cli_prefixed(env, "cache export " + p("b.bundle") + " --sign " + p("bad.key"));
  EXPECT_EQ(key.code, 1);
  EXPECT_EQ(key.output, "optjit: " + p("bad.key") + ": not an optjit signing key\n");
  std::ifstream again(p("b.bundle"), std::ios::binary);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(again)), {}), bundle);
  EXPECT_EQ(entries(), (std::vector<std::string>{"b.bundle", "bad.key", "fifo", "g.st", "kc",
                                                 "link.st", "p.st"}))
      << "nothing else was written";
  EXPECT_EQ(optjit_cli_prefixed(env, "cache keygen " + p("b.bundle")).code, 0);
  EXPECT_EQ(fs::file_size(p("b.bundle.key")), 64u);
  EXPECT_EQ(fs::status(p("b.bundle.key")).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  // A second keygen with the prefix replaced the key silently; now it is kept.
  std::ifstream first_key(p("b.bundle.key"), std::ios::binary);
  const std::string secret((std::istreambuf_iterator<char>(first_key)), {});
  auto again_key = optjit_cli_prefixed(env, "cache keygen " + p("b.bundle"));
  EXPECT_EQ(again_key.code, 1);
  EXPECT_EQ(again_key.output, "optjit: " + p("b.bundle") +
                                  ".key exists: keygen does not replace a signing key (move it "
                                  "away first, or give another prefix)\n");
  std::ifstream kept_key(p("b.bundle.key"), std::ios::binary);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(kept_key)), {}), secret);
}

// An output is never a file the command reads by another name: `cache export` onto the cache's
// own database replaced the cache with the bundle (with --device, every other device's kernels
// were gone), and synth's two outputs were compared as strings ("./p" and "p" differ).
TEST_F(Cli, OutputsAreNeverTheFilesTheCommandReads) {
  const std::string env = "OPTJIT_CACHE_DIR=" + p("kc") + " ";
  ASSERT_EQ(optjit_cli_prefixed(env, "compile 'adamw()' --arch sm_80").code, 0);
  ASSERT_EQ(optjit_cli_prefixed(env, "compile 'sgd(lr=0.1)' --arch sm_90").code, 0);
  const std::string before = optjit_cli_prefixed(env, "cache ls").output;
  ASSERT_EQ(std::count(before.begin(), before.end(), '\n'), 2) << before;  // (one a device)
  const std::string db = p("kc") + "/../kc/kernels.sqlite";
  auto onto = optjit_cli_prefixed(env, "cache export " + db + " --device sm_90");
  EXPECT_EQ(onto.code, 1);
  EXPECT_EQ(onto.output, "optjit: " + db +
                             " is the kernel cache's own database (optjit cache path): a bundle "
                             "written there would replace the cache; give another file\n");
  EXPECT_EQ(optjit_cli_prefixed(env, "cache ls").output, before);
  auto same = optjit_cli("synth --preset one --numel 8 --params " + p("s.st") + " --grads " +
                         p("kc") + "/../s.st");
  EXPECT_EQ(same.code, 1);
  EXPECT_EQ(same.output, "optjit: --params and --grads are the same file\n");
  EXPECT_FALSE(fs::exists(p("s.st")));
}

// Every file a command reads whole is read only when it is a regular file: a FIFO as a signing
// key, a public key or a --shapes list was waited on forever, /dev/zero read until memory ran
// out, a directory of shapes was "unexpected error: basic_filebuf::underflow ...".
TEST_F(Cli, InputsThatAreNotRegularFilesAreRefusedNotWaitedOn) {
  ASSERT_EQ(::mkfifo(p("fifo").c_str(), 0644), 0);
  const std::string env = "OPTJIT_CACHE_DIR=" + p("kc") + " ";
  ASSERT_EQ(optjit_cli_prefixed(env, "cache export " + p("b.bundle")).code, 0);
  const std::string fifo = p("fifo") + ": is a FIFO; optjit reads only regular files\n";
  const std::string zero = "/dev/zero: is a character device; optjit reads only regular files\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"cache export " + p("c.bundle") + " --sign " + p("fifo"), fifo},
      {"cache export " + p("c.bundle") + " --sign /dev/zero", zero},
      {"cache import " + p("b.bundle") + " --verify " + p("fifo"), fifo},
      {"cache import " + p("b.bundle") + " --verify /dev/zero", zero},
      {"cache import " + p("fifo"), fifo},
      {"cache import /dev/zero", zero},
      {"cache import " + p("kc"), p("kc") + ": is a directory; optjit reads only regular files\n"},
      {"tune 'adamw()' --shapes " + p("fifo"), "--shapes " + fifo},
      {"bench 'adamw()' --shapes " + p("kc"),
       "--shapes " + p("kc") + ": is a directory; optjit reads only regular files\n"},
  };
  for (const auto& [args, message] : cases) {
    // (timeout: a command that waits on the FIFO fails the test instead of hanging it)
    auto r = optjit_cli_prefixed(env + "timeout 60 ", args);
    EXPECT_EQ(r.code, 1) << args;
    EXPECT_EQ(r.output, "optjit: " + message) << args;
  }
  EXPECT_FALSE(fs::exists(p("c.bundle")));
}

// state_format: every transform's per-element state stored in bf16 or f16. The plan counts
// its bytes; the reference, the CPU and OpenCL agree (CPU and OpenCL bit for bit, the
// reference within f32 rounding: it computes in float64); the file holds bf16 state.
TEST_F(Cli, StateFormatStoresStateInBf16OnEveryBackend) {
  const std::string pipe =
      "'chain(clip_grad_norm(max_norm=1.0), adamw(lr=0.01, state_format=\"bf16,exp_avg_sq:f16\"))'";
  auto plan = optjit_cli("plan " + pipe + " --no-bodies");
  ASSERT_EQ(plan.code, 0) << plan.output;
  EXPECT_NE(plan.output.find("exp_avg:bf16 exp_avg_sq:f16 | writes param:f32 exp_avg:bf16 "
                             "exp_avg_sq:f16 | 12 B read + 8 B written = 20 B/param"),
            std::string::npos)
      << plan.output;
  write("p.st", {filled("a", DType::f32, {257}, 1), filled("b", DType::f32, {3, 5}, -1)});
  write("g.st", {filled("a", DType::f32, {4, 257}, 0.1), filled("b", DType::f32, {4, 3, 5}, 0.2)});
  std::map<std::string, TensorFile> out;
  for (const char* b : {"reference", "cpu", "opencl"}) {
    auto r =
        optjit_cli("run " + pipe + " --backend " + b + " --params " + p("p.st") + " --grads " +
                   p("g.st") + " --steps 4 --chunk 64 --quiet --out " + p(std::string(b) + ".st"));
    ASSERT_EQ(r.code, 0) << b << ": " << r.output;
    out[b] = *runtime::read_safetensors(p(std::string(b) + ".st"));
  }
  for (const auto& t : out["cpu"].tensors) {
    const HostTensor* ocl = out["opencl"].find(t.name);
    const HostTensor* ref = out["reference"].find(t.name);
    ASSERT_TRUE(ocl && ref) << t.name;
    EXPECT_EQ(t.dtype, ocl->dtype);
    EXPECT_EQ(t.dtype, ref->dtype);
    if (t.name.find("exp_avg_sq") != std::string::npos) {
      EXPECT_EQ(t.dtype, DType::f16);
    } else if (t.name.find("exp_avg") != std::string::npos) {
      EXPECT_EQ(t.dtype, DType::bf16);
    }
    EXPECT_EQ(t.data, ocl->data) << t.name << ": cpu and opencl differ";
    for (int64_t i = 0; i < t.numel(); ++i)
      EXPECT_NEAR(t.get(i), ref->get(i),
                  1e-6 * std::max(1.0, std::fabs(ref->get(i))) +
                      (t.dtype == DType::f32 ? 0 : std::fabs(ref->get(i)) / 64))
          << t.name << "[" << i << "]";
  }
  // Resuming converts: an f32-state file into bf16 state and back.
  auto f32 = optjit_cli("run 'adamw(lr=0.01)' --params " + p("p.st") + " --grads " + p("g.st") +
                        " --steps 4 --quiet --out " + p("f32.st"));
  ASSERT_EQ(f32.code, 0) << f32.output;
  auto resumed = optjit_cli("run " + pipe + " --params " + p("f32.st") + " --state " + p("f32.st") +
                            " --grads " + p("g.st") + " --steps 4 --quiet --out " + p("r.st"));
  EXPECT_EQ(resumed.code, 0) << resumed.output;
  auto bad = optjit_cli("plan 'nadam(state_format=\"mu_product:bf16\")'");
  EXPECT_EQ(bad.code, 1);
  EXPECT_EQ(bad.output,
            "optjit: pipeline: nadam: state_format: 'mu_product' is a per-group scalar, kept in "
            "f64 (its per-element states: exp_avg, exp_avg_sq)\n");
}

// Quantized state through the command line: the state file holds 8-bit codes, their scales
// and their format; 2 steps, then a resume from that file for 2 more, equal 4 steps; a resume
// into another state format (4-bit, unquantized) takes the codes' values; codes whose file does
// not say their format are refused, saying so.
TEST_F(Cli, QuantizedStateResumesInItsOwnFormatAndConvertsToAnother) {
  const auto adamw = [](const std::string& format) {
    return "'chain(clip_grad_norm(max_norm=1.0), adamw(lr=0.01" +
           (format.empty() ? std::string() : ", state_format=\"" + format + "\"") + "))'";
  };
  write("p.st", {filled("w", DType::f32, {40, 128}, 1), filled("b", DType::f32, {300}, -1)});
  write("g.st", {filled("w", DType::f32, {40, 128}, 0.1), filled("b", DType::f32, {300}, 0.2)});
  auto run = [&](const std::string& pipe, const std::string& params, const std::string& out,
                 int steps, const std::string& state = "") {
    return optjit_cli("run " + pipe + " --params " + p(params) + " --grads " + p("g.st") +
                      " --steps " + std::to_string(steps) + " --quiet --out " + p(out) +
                      (state.empty() ? "" : " --state " + p(state)));
  };
  for (auto [name, steps, params, state] : {std::tuple{"four.st", 4, "p.st", ""},
                                            {"two.st", 2, "p.st", ""},
                                            {"resumed.st", 2, "two.st", "two.st"}}) {
    auto r = run(adamw("8bit"), params, name, steps, state);
    ASSERT_EQ(r.code, 0) << name << ": " << r.output;
  }
  const TensorFile four = *runtime::read_safetensors(p("four.st"));
  const TensorFile resumed = *runtime::read_safetensors(p("resumed.st"));
  EXPECT_EQ(four.find("w.exp_avg")->dtype, DType::u8);
  EXPECT_EQ(four.find("w.exp_avg.absmax")->numel(), 20);  // 5120 / 256
  EXPECT_EQ(four.metadata.at("optjit.quant.exp_avg"), "q8");
  EXPECT_EQ(four.find("b.exp_avg")->dtype, DType::f32);  // under 4096 elements
  for (const auto& t : four.tensors) {
    ASSERT_TRUE(resumed.find(t.name)) << t.name;
    EXPECT_EQ(resumed.find(t.name)->data, t.data) << t.name;
  }
  for (auto [format, dtype, numel] :
       {std::tuple{"4bit", DType::u8, 2560}, {"", DType::f32, 5120}}) {
    auto r = run(adamw(format), "two.st", "other.st", 2, "two.st");
    ASSERT_EQ(r.code, 0) << format << ": " << r.output;
    const TensorFile other = *runtime::read_safetensors(p("other.st"));
    EXPECT_EQ(other.find("w.exp_avg")->dtype, dtype) << format;
    EXPECT_EQ(other.find("w.exp_avg")->numel(), numel) << format;
  }
  TensorFile unnamed = *runtime::read_safetensors(p("two.st"));
  unnamed.metadata.erase("optjit.quant.exp_avg_sq");
  ASSERT_TRUE(runtime::write_safetensors(p("unnamed.st"), unnamed));
  auto r = run(adamw(""), "two.st", "x.st", 2, "unnamed.st");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.output, "optjit: " + p("unnamed.st") +
                          ": state 'w.exp_avg_sq' holds codes, but the file does not say their "
                          "format (no 'optjit.quant.exp_avg_sq' metadata); this optimizer keeps "
                          "it as f32\n");
  EXPECT_FALSE(fs::exists(p("x.st")));
}

// bf16_sr: the random bits depend on (state_seed, step, element, buffer) only: the
// CPU with any thread count and chunk size and OpenCL with any launch shape give the same
// bits, the reference (float64 math) the same state here, and 2 steps + resume + 2 steps equal
// 4 steps. Another seed gives other bits; a seed out of range is an error.
TEST_F(Cli, StochasticRoundingIsTheSameOnEveryBackendAndAfterAResume) {
  const std::string pipe =
      "'chain(clip_grad_norm(max_norm=1.0), adamw(lr=0.01, state_format=\"bf16_sr\"))'";
  write("p.st", {filled("a", DType::f32, {1000}, 1), filled("b", DType::f32, {3, 77}, -1)});
  write("g.st", {filled("a", DType::f32, {1000}, 0.1), filled("b", DType::f32, {3, 77}, 0.2)});
  auto run = [&](const std::string& extra, const std::string& out, int steps = 4,
                 const std::string& params = "p.st") {
    auto r =
        optjit_cli("run " + pipe + " " + extra + " --params " + p(params) + " --grads " +
                   p("g.st") + " --steps " + std::to_string(steps) + " --quiet --out " + p(out));
    EXPECT_EQ(r.code, 0) << extra << ": " << r.output;
    return *runtime::read_safetensors(p(out));
  };
  auto base = run("--backend cpu", "cpu.st");
  const std::vector<std::pair<std::string, std::string>> same = {
      {"--backend cpu --threads 1 --chunk 100", "cpu1.st"},
      {"--backend opencl", "ocl.st"},
      {"--backend opencl --launch block=32,items=3,vec=4,chunk=128", "ocl2.st"},
  };
  for (const auto& [extra, out] : same) {
    auto other = run(extra, out);
    for (const auto& t : base.tensors)
      EXPECT_EQ(other.find(t.name)->data, t.data) << extra << ": " << t.name;
  }
  auto ref = run("--backend reference", "ref.st");
  for (const char* name : {"a.exp_avg", "a.exp_avg_sq", "b.exp_avg", "b.exp_avg_sq"}) {
    const HostTensor* t = base.find(name);
    ASSERT_TRUE(t) << name;
    EXPECT_EQ(t->dtype, DType::bf16);
    int differ = 0;
    for (int64_t i = 0; i < t->numel(); ++i) differ += t->get(i) != ref.find(name)->get(i);
    EXPECT_LE(differ, t->numel() / 100) << name << ": the reference rounds its f64 math to f32 "
                                        << "first, so a value may differ in its last f32 bit";
  }
  run("--backend cpu", "half.st", 2);
  auto r2 = optjit_cli("run " + pipe + " --backend cpu --params " + p("half.st") + " --state " +
                       p("half.st") + " --grads " + p("g.st") + " --steps 2 --quiet --out " +
                       p("resumed.st"));
  ASSERT_EQ(r2.code, 0) << r2.output;
  auto resumed = *runtime::read_safetensors(p("resumed.st"));
  for (const auto& t : base.tensors)
    EXPECT_EQ(resumed.find(t.name)->data, t.data) << "resumed: " << t.name;
  auto seeded = run("--backend cpu --set state_seed=7", "seed.st");
  EXPECT_NE(seeded.find("a.exp_avg")->data, base.find("a.exp_avg")->data);
  auto bad = optjit_cli("run " + pipe + " --set state_seed=-1 --params " + p("p.st") + " --grads " +
                        p("g.st") + " --steps 1 --out " + p("x.st"));
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.output.find("state_seed = -1 is invalid: the stochastic rounding seed must be a "
                            "whole number in [0, 1048575]"),
            std::string::npos)
      << bad.output;
}

// --param-rounding stochastic: bf16 parameters rounded like bf16_sr state, the same bits on
// the CPU (any threads) and OpenCL; f32 parameters in the same file are untouched by it.
TEST_F(Cli, StochasticParamRoundingIsTheSameOnEveryBackend) {
  write("p.st", {filled("w", DType::bf16, {3000}, 1), filled("b", DType::f32, {40}, -1)});
  write("g.st", {filled("w", DType::bf16, {3000}, 0.1), filled("b", DType::f32, {40}, 0.2)});
  auto run = [&](const std::string& extra, const std::string& out) {
    auto r = optjit_cli("run 'sgd(lr=0.001)' " + extra + " --params " + p("p.st") + " --grads " +
                        p("g.st") + " --steps 3 --quiet --out " + p(out));
    EXPECT_EQ(r.code, 0) << extra << ": " << r.output;
    return *runtime::read_safetensors(p(out));
  };
  auto cpu = run("--backend cpu --param-rounding stochastic", "cpu.st");
  auto cpu1 = run("--backend cpu --threads 1 --chunk 64 --param-rounding stochastic", "cpu1.st");
  auto ocl = run("--backend opencl --param-rounding stochastic", "ocl.st");
  auto nearest = run("--backend cpu", "nearest.st");
  EXPECT_EQ(cpu.find("w")->data, cpu1.find("w")->data);
  EXPECT_EQ(cpu.find("w")->data, ocl.find("w")->data);
  EXPECT_NE(cpu.find("w")->data, nearest.find("w")->data);
  EXPECT_EQ(cpu.find("b")->data, nearest.find("b")->data) << "f32 parameters are not affected";
  auto bad = optjit_cli("run 'sgd()' --param-rounding up --params " + p("p.st") + " --grads " +
                        p("g.st") + " --steps 1 --out " + p("x.st"));
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.output.find("--param-rounding: up not in {nearest,stochastic}"), std::string::npos)
      << bad.output;
}

TEST_F(Cli, TuneStoresADecisionThatRunUses) {
  const std::string env = "OPTJIT_CACHE_DIR=" + p("kc") + " ";
  const std::string pipe = "'chain(clip_grad_norm(max_norm=1.0), adamw())'";
  auto t = optjit_cli_prefixed(
      env, "tune " + pipe + " --numel 100000 --budget-seconds 2 --max-candidates 4");
  ASSERT_EQ(t.code, 0) << t.output;
  EXPECT_NE(t.output.find("tuned / default = "), std::string::npos) << t.output;
  auto again = optjit_cli_prefixed(env, "tune " + pipe + " --numel 100000");
  EXPECT_NE(again.output.find("decision from the kernel cache: threads="), std::string::npos)
      << again.output;
  write("p.st", {filled("weight", DType::f32, {100000}, 1)});
  write("g.st", {filled("weight", DType::f32, {100000}, 0.1)});
  auto run =
      optjit_cli_prefixed(env, "run " + pipe + " --backend cpu --params " + p("p.st") +
                                   " --grads " + p("g.st") + " --steps 1 --out " + p("o.st"));
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_NE(run.output.find("launch parameters from the kernel cache's tuning: threads="),
            std::string::npos)
      << run.output;
}

// OpenCL (PoCL): tune, then run uses the decision and matches the CPU backend; launch
// parameters that no kernel can use, and tuning decisions that do not exist, are clear errors.
TEST_F(Cli, OpenclTuningAndLaunchParameters) {
  const std::string env = "OPTJIT_CACHE_DIR=" + p("kc") + " ";
  const std::string pipe = "'chain(clip_grad_norm(max_norm=1.0), adamw())'";
  write("p.st", {filled("weight", DType::f32, {100000}, 1), filled("bias", DType::f32, {7}, 0)});
  write("g.st", {filled("weight", DType::f32, {100000}, 0.1), filled("bias", DType::f32, {7}, 0)});
  auto run = [&](const std::string& extra, const std::string& out) {
    return optjit_cli_prefixed(env, "run " + pipe + " --params " + p("p.st") + " --grads " +
                                        p("g.st") + " --steps 3 --out " + p(out) + " " + extra);
  };
  auto bench_tuned = optjit_cli_prefixed(
      env, "bench " + pipe + " --backend opencl --numel 100007 --launch tuned --reps 1");
  EXPECT_EQ(bench_tuned.code, 1);
  EXPECT_EQ(bench_tuned.output,
            "optjit: --launch tuned: the kernel cache has no tuning decision for this pipeline on "
            "opencl at this size (run optjit tune first)\n");
  auto t = optjit_cli_prefixed(
      env,
      "tune " + pipe + " --backend opencl --numel 100007 --max-candidates 5 --budget-seconds 600");
  ASSERT_EQ(t.code, 0) << t.output;
  EXPECT_NE(t.output.find("tuned 5 candidates"), std::string::npos) << t.output;
  auto tuned = run("--backend opencl", "ocl.st");
  ASSERT_EQ(tuned.code, 0) << tuned.output;
  EXPECT_NE(tuned.output.find("launch parameters from the kernel cache's tuning: block="),
            std::string::npos)
      << tuned.output;
  auto given = run("--backend opencl --launch block=16,items=2,vec=4", "ocl2.st");
  ASSERT_EQ(given.code, 0) << given.output;
  // (run's default on opencl is the device step; the host-driven step, explicitly)
  auto host_step = run("--backend opencl --step host --launch block=4,chunk=4096", "ocl3.st");
  ASSERT_EQ(host_step.code, 0) << host_step.output;
  ASSERT_EQ(run("--backend cpu", "cpu.st").code, 0);
  auto a = runtime::read_safetensors(p("ocl.st")), b = runtime::read_safetensors(p("ocl2.st")),
       d = runtime::read_safetensors(p("ocl3.st")), c = runtime::read_safetensors(p("cpu.st"));
  ASSERT_TRUE(a && b && c && d);
  EXPECT_EQ(d->find("step")->get(0), 3);
  for (const auto* f : {&*a, &*b, &*d}) {
    const HostTensor* w = nullptr;
    const HostTensor* w_cpu = nullptr;
    for (const auto& x : f->tensors)
      if (x.name == "weight") w = &x;
    for (const auto& x : c->tensors)
      if (x.name == "weight") w_cpu = &x;
    ASSERT_TRUE(w && w_cpu);
    double worst = 0;
    for (int64_t i = 0; i < w->numel(); ++i)
      worst = std::max(worst, std::fabs(w->get(i) - w_cpu->get(i)));
    EXPECT_LT(worst, 1e-6);
  }
  struct Case {
    std::string args, message;
  };
  const Case cases[] = {
      {"--backend opencl --launch vec=3", "optjit: --launch: vector width 3 is not 1, 2, 4 or 8\n"},
      {"--backend opencl --launch warp=32",
       "optjit: --launch: unknown launch parameter 'warp' (block, items, vec, grid, chunk, "
       "tables, prefetch, recompute, interleave, ahead, stage, resident)\n"},
      {"--backend opencl --launch block=8192",
       "optjit: --launch: block size 8192 is not a power of two between 1 and 1024\n"},
      {"--backend cpu --launch vec=4",
       "optjit: --launch is for --backend cuda and opencl; the cpu backend takes --threads and "
       "--chunk\n"},
      {"--backend opencl --step graph", "optjit: --step graph is for --backend cuda, not opencl\n"},
      {"--backend cpu --step device",
       "optjit: --step device is for --backend opencl or cuda, not cpu\n"},
      {"--backend opencl --step later",
       "optjit: --step: 'later' is not host, device, graph or auto\n"},
  };
  for (const auto& k : cases) {
    auto r = run(k.args, "bad.st");
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_EQ(r.output, k.message);
  }
  EXPECT_FALSE(fs::exists(p("bad.st")));
  auto no_gpu = optjit_cli_prefixed(env, "tune " + pipe + " --backend cuda --numel 1000");
  EXPECT_EQ(no_gpu.code, 1);
  EXPECT_EQ(no_gpu.output,
            "optjit: no CUDA driver on this machine (libcuda.so.1 not found), so no NVIDIA GPU "
            "can be used; optjit compile --backend cuda still builds cubins\n");
  auto emitted = optjit_cli("emit " + pipe + " --backend cuda --launch block=128,items=2,vec=4");
  ASSERT_EQ(emitted.code, 0) << emitted.output;
  EXPECT_NE(emitted.output.find("struct __align__(16) optjit_f32x4"), std::string::npos);
  EXPECT_NE(emitted.output.find("__launch_bounds__(128, 4)"), std::string::npos);
  // The CPU's machine code as assembly: a label per pass (clip + AdamW: the norm pass and the
  // update; Ice Lake-SP prefers 256-bit vectors), each returning; a GPU backend's --asm is an error
  // that says what it emits.
  auto assembly = optjit_cli("emit " + pipe + " --asm --cpu icelake-server");
  ASSERT_EQ(assembly.code, 0) << assembly.output;
  for (const char* label : {"\noptjit_pass_0:", "\noptjit_pass_1:", "\tvsqrtps\t%ymm", "\tretq"})
    EXPECT_NE(assembly.output.find(label), std::string::npos) << label;
  EXPECT_EQ(assembly.output.find("optjit_pass_2:"), std::string::npos);
  EXPECT_EQ(assembly.output.find("define void"), std::string::npos) << "LLVM IR, not assembly";
  auto asm_gpu = optjit_cli("emit " + pipe + " --backend opencl --asm");
  EXPECT_EQ(asm_gpu.code, 1);
  EXPECT_EQ(asm_gpu.output,
            "optjit: --asm is the cpu backend's machine code; --backend opencl emits OpenCL C\n");
  // The device step: pass kernels that honour the skip flag, then the scalar-program kernels.
  auto step_src = optjit_cli("emit " + pipe + " --backend opencl --step device");
  ASSERT_EQ(step_src.code, 0) << step_src.output;
  for (const char* kernel : {"optjit_segment_0(", "optjit_combine_0(", "optjit_fold_0(",
                             "optjit_segment_2(", "optjit_commit(", "if (ctl[1] != 0.0) return;"})
    EXPECT_NE(step_src.output.find(kernel), std::string::npos) << kernel;
  auto cubins = optjit_cli_prefixed(env, "compile " + pipe + " --arch sm_90 --step graph");
  ASSERT_EQ(cubins.code, 0) << cubins.output;
  EXPECT_NE(cubins.output.find("optjit_commit"), std::string::npos) << cubins.output;
}

// Eight processes compile and tune into one cache at once: none fails, they agree on the
// decision, every kernel is stored once, and the database checks out.
TEST_F(Cli, EightProcessesCompileAndTuneIntoOneCache) {
  write("p.st", {filled("weight", DType::f32, {50000}, 1)});
  write("g.st", {filled("weight", DType::f32, {50000}, 0.1)});
  const std::string env = "OPTJIT_CACHE_DIR=" + p("kc") + " ";
  const std::string pipe = "'chain(clip_grad_norm(max_norm=1.0), lamb())'";
  std::string script;
  for (int i = 0; i < 8; ++i)
    script +=
        "(" + env + OPTJIT_CLI + " tune " + pipe +
        " --numel 50000 --budget-seconds 1 --max-candidates 3 > " + p("tune" + std::to_string(i)) +
        " 2>&1 && " + env + OPTJIT_CLI + " run " + pipe + " --backend cpu --params " + p("p.st") +
        " --grads " + p("g.st") + " --steps 2 --out " + p("o" + std::to_string(i) + ".st") + " > " +
        p("run" + std::to_string(i)) + " 2>&1; echo $? > " + p("rc" + std::to_string(i)) + ") & ";
  script += "wait";
  ASSERT_EQ(std::system(("bash -c \"" + script + "\"").c_str()), 0);
  std::string decision;
  for (int i = 0; i < 8; ++i) {
    std::ifstream rc(p("rc" + std::to_string(i)));
    int code = -1;
    rc >> code;
    std::ifstream log(p("run" + std::to_string(i)));
    std::string out((std::istreambuf_iterator<char>(log)), {});
    EXPECT_EQ(code, 0) << "process " << i << ": " << out;
    size_t at = out.find("tuning: ");
    ASSERT_NE(at, std::string::npos) << out;
    std::string d = out.substr(at, out.find('\n', at) - at);
    if (decision.empty()) decision = d;
    EXPECT_EQ(d, decision) << "process " << i << " used another decision";
    EXPECT_EQ(runtime::read_safetensors(p("o" + std::to_string(i) + ".st"))->find("weight")->data,
              runtime::read_safetensors(p("o0.st"))->find("weight")->data);
  }
  auto stats = optjit_cli_prefixed(env, "cache stats --json");
  EXPECT_NE(stats.output.find("\"kernels\": 1"), std::string::npos) << stats.output;
  auto verify = optjit_cli_prefixed(env, "cache verify");
  EXPECT_EQ(verify.code, 0) << verify.output;
}

// inspect: each tensor (in the file's order) with its dtype, shape, and min, max and l2 norm of
// its finite values, its NaNs and infinities counted (a diverged checkpoint shows where; min and
// max used to skip NaNs); "-" where nothing is finite; a name pattern picks tensors.
TEST_F(Cli, InspectCountsNansAndInfinitiesBesideTheFiniteValues) {
  const double inf = std::numeric_limits<double>::infinity();
  HostTensor mixed = HostTensor::zeros("w.exp_avg", DType::f32, {2, 3});
  const double values[] = {3, -4, std::nan(""), inf, -inf, 0};
  for (int i = 0; i < 6; ++i) mixed.set(i, values[i]);
  HostTensor broken = HostTensor::zeros("w.exp_avg_sq", DType::bf16, {2});
  broken.set(0, std::nan("")), broken.set(1, inf);
  write("s.st", {HostTensor::zeros("step", DType::i64, {}), mixed, broken,
                 HostTensor::zeros("empty", DType::f16, {0})});
  auto r = optjit_cli("inspect " + p("s.st"));
  ASSERT_EQ(r.code, 0) << r.output;
  auto row = [](const char* name, const char* dtype, const char* shape, const char* lo,
                const char* hi, const char* norm, const char* nans, const char* infs) {
    return fmt::format("{:<34} {:>5} {:>14} {:>13} {:>13} {:>13} {:>7} {:>7}\n", name, dtype, shape,
                       lo, hi, norm, nans, infs);
  };
  EXPECT_EQ(r.output, row("tensor", "dtype", "shape", "min", "max", "l2 norm", "nan", "inf") +
                          row("empty", "f16", "[0]", "-", "-", "-", "0", "0") +
                          row("step", "i64", "[]", "0", "0", "0", "0", "0") +
                          row("w.exp_avg", "f32", "[2,3]", "-4", "3", "5", "1", "2") +
                          row("w.exp_avg_sq", "bf16", "[2]", "-", "-", "-", "1", "1"));
  auto picked = optjit_cli("inspect " + p("s.st") + " --match 'w.*sq'");
  EXPECT_EQ(picked.code, 0) << picked.output;
  EXPECT_NE(picked.output.find("w.exp_avg_sq"), std::string::npos) << picked.output;
  EXPECT_EQ(picked.output.find("w.exp_avg "), std::string::npos) << picked.output;
}

TEST_F(Cli, PlanAndList) {
  auto plan = optjit_cli(
      "plan 'chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-3, betas=(0.9, 0.999), "
      "weight_decay=0.01))'");
  ASSERT_EQ(plan.code, 0);
  EXPECT_NE(plan.output.find("plan: 2 passes, 32 bytes per parameter"), std::string::npos)
      << plan.output;
  EXPECT_NE(plan.output.find("optjit-ir 1"), std::string::npos);
  auto json = optjit_cli("plan 'adamw()' --json");
  EXPECT_NE(json.output.find("\"bytes_per_param\": 28"), std::string::npos) << json.output;
  std::ofstream(p("pipe.txt")) << "transform t(lr=0.1) {\n  param = param - lr * "
                                  "grad\n}\nchain(clip_grad_value(clip_value=1), t())\n";
  auto from_file = optjit_cli("plan " + p("pipe.txt") + " --no-bodies");
  EXPECT_EQ(from_file.code, 0) << from_file.output;
  EXPECT_NE(from_file.output.find("plan: 1 pass, 12 bytes per parameter"), std::string::npos)
      << from_file.output;
  // Written on Windows: a UTF-8 byte order mark and CRLF line ends are text; UTF-16 is named.
  std::ofstream(p("bom.opt"), std::ios::binary)
      << "\xEF\xBB\xBF"
         "chain(\r\n  clip_grad_value(clip_value=1),\r\n  sgd(lr=0.1)\r\n)\r\n";
  auto bom = optjit_cli("plan " + p("bom.opt") + " --no-bodies");
  EXPECT_EQ(bom.code, 0) << bom.output;
  EXPECT_NE(bom.output.find("plan: 1 pass, 12 bytes per parameter"), std::string::npos)
      << bom.output;
  // So is the text itself with the mark (Python's open(path).read() keeps it).
  auto inline_bom = optjit_cli("plan '\xEF\xBB\xBFsgd(lr=0.1)' --no-bodies");
  EXPECT_EQ(inline_bom.code, 0) << inline_bom.output;
  EXPECT_NE(inline_bom.output.find("plan: 1 pass, 12 bytes per parameter"), std::string::npos)
      << inline_bom.output;
  std::ofstream(p("utf16.opt"), std::ios::binary) << std::string("\xFF\xFEs\0g\0d\0(\0)\0", 12);
  // A pipeline file is a regular file of text: /dev/zero filled memory until the machine ran
  // out, a FIFO waited forever, a directory read as empty text.
  ASSERT_EQ(mkfifo(p("fifo").c_str(), 0600), 0);
  std::ofstream(p("huge.opt")) << std::string(2 << 20, ' ');
  const std::vector<std::pair<std::string, std::string>> not_text = {
      {"/dev/zero",
       "optjit: '/dev/zero' is not a regular file (a pipeline is text, or a file "
       "that holds it)\n"},
      {p("fifo"), "optjit: '" + p("fifo") +
                      "' is not a regular file (a pipeline is text, or a file that holds it)\n"},
      {dir_.string(), "optjit: '" + dir_.string() +
                          "' is not a regular file (a pipeline is text, or a file that holds "
                          "it)\n"},
      {p("huge.opt"), "optjit: '" + p("huge.opt") +
                          "' is 2097152 bytes: a pipeline file holds at most 1048576 bytes of "
                          "text\n"},
      {p("missing.opt"),
       "optjit: '" + p("missing.opt") + "' is neither pipeline text nor a readable file\n"},
      {p("utf16.opt"),
       "optjit: '" + p("utf16.opt") + "' is UTF-16 text: a pipeline file is UTF-8 (or ASCII)\n"},
      // A transform's bare name: the call without its parentheses.
      {"adamw",
       "optjit: 'adamw' is neither pipeline text nor a readable file (did you mean "
       "'adamw()'?)\n"}};
  for (const auto& [path, message] : not_text) {
    auto r = optjit_cli("plan " + path);
    EXPECT_EQ(r.code, 1) << path;
    EXPECT_EQ(r.output, message);
  }
  // Text without '(' is taken for a path and echoed: 100 KB of it was 100 KB of message, and
  // control bytes went out raw.
  auto long_text = optjit_cli("plan " + std::string(100000, 'a'));
  EXPECT_EQ(long_text.output, "optjit: '" + std::string(200, 'a') +
                                  "... (100000 bytes)' is neither pipeline text nor a readable "
                                  "file\n");
  auto control = optjit_cli("plan \"$(printf 'sgd\\001\\177')\"");  // (popen's sh is dash)
  EXPECT_EQ(control.output,
            "optjit: 'sgd\\x01\\x7f' is neither pipeline text nor a readable file\n");
  auto list = optjit_cli("list");
  ASSERT_EQ(list.code, 0);
  EXPECT_NE(list.output.find("adamw(lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=0.01, "
                             "amsgrad=false, maximize=false, peer=\"torch\")"),
            std::string::npos)
      << list.output;
  EXPECT_NE(list.output.find("state: exp_avg, exp_avg_sq"), std::string::npos);
  EXPECT_NE(list.output.find("mu_product (scalar)"), std::string::npos) << list.output;
  EXPECT_NE(list.output.find("cosine_with_warmup(base_lr=<required>"), std::string::npos);
}

}  // namespace
}  // namespace optjit
