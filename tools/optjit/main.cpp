// optjit: the command-line driver. Each subcommand stops at a stage of the compiler (plan,
// list) or runs a pipeline end to end (run).
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <new>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "runtime/device.h"
#include "tools/optjit/commands.h"

namespace {

// --backend: any registered kind of device (runtime/device.h), and `extra` names.
CLI::Validator device_kinds_and(std::vector<std::string> extra) {
  return CLI::Validator(
      [extra](std::string& v) -> std::string {
        if (optjit::runtime::find_device_kind(v)) return "";
        for (const auto& e : extra)
          if (v == e) return "";
        std::vector<std::string> names;
        for (const auto& k : optjit::runtime::device_kinds()) names.push_back(k.name);
        names.insert(names.end(), extra.begin(), extra.end());
        std::string list;  // "cpu, opencl, cuda, webgpu, reference or auto"
        for (size_t i = 0; i < names.size(); ++i)
          list += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
        return "'" + v + "' is not a backend (" + list + ")";
      },
      "BACKEND");
}

// A whole number in [lo, hi], checked on the text before CLI11 converts it, so that every
// count the user gives has one bound and one message ("1.5", "0" and "1e99" alike).
CLI::Validator whole(long long lo, long long hi) {
  return CLI::Validator(
      [lo, hi](std::string& v) -> std::string {
        errno = 0;
        char* end = nullptr;
        long long n = std::strtoll(v.c_str(), &end, 10);
        bool number = !v.empty() && end == v.c_str() + v.size();
        if (!number || errno == ERANGE || n < lo || n > hi)
          return "'" + v + "' is not a whole number from " + std::to_string(lo) + " to " +
                 std::to_string(hi);
        return "";
      },
      "INT");
}

// A finite number >= lo.
CLI::Validator at_least(double lo) {
  return CLI::Validator(
      [lo](std::string& v) -> std::string {
        char* end = nullptr;
        double x = std::strtod(v.c_str(), &end);
        if (v.empty() || end != v.c_str() + v.size() || !std::isfinite(x) || x < lo)
          return "'" + v + "' is not a finite number of at least " + fmt::format("{}", lo);
        return "";
      },
      "NUMBER");
}

constexpr long long kMaxSteps = 1'000'000'000;
constexpr long long kMaxThreads = 1024;
constexpr long long kMaxElements = 1LL << 48;  // ir/types.h: element_count's bound

}  // namespace

namespace optjit::cli {

// The whole command line, callable in-process (the CLI fuzzer calls it; main() below).
int main_with_args(int argc, char** argv) {
  CLI::App app{"optjit: optimizer pipelines compiled to fused kernels"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "help for every subcommand");

  optjit::cli::RunOptions run;
  auto* run_cmd = app.add_subcommand("run", "run a pipeline for some steps on tensors from files");
  run_cmd->add_option("pipeline", run.pipeline, "pipeline text, or a file that holds it")
      ->required();
  run_cmd->add_option("--params", run.params, "parameters (.safetensors)")->required();
  run_cmd
      ->add_option("--grads", run.grads,
                   "gradients: each parameter's name, same shape (every step) or with a leading "
                   "dimension of --steps (slice k at step k+1)")
      ->required();
  run_cmd->add_option("--steps", run.steps, "optimizer steps to take")
      ->required()
      ->check(whole(1, kMaxSteps));
  run_cmd
      ->add_option(
          "--backend", run.backend,
          "auto (default: the best available, now cpu) | cpu | reference | opencl | cuda | webgpu")
      ->check(device_kinds_and({"reference", "auto"}));
  run_cmd->add_option("--state", run.state, "resume from a state file written by an earlier run");
  run_cmd->add_option("--out", run.out, "where to write parameters, state and step count")
      ->required();
  run_cmd->add_option("--group", run.groups,
                      "a parameter group: 'PATTERN[,PATTERN...]:name=value[,name=value...]', e.g. "
                      "'*.bias,*norm*:weight_decay=0' (first matching group wins)");
  run_cmd->add_option("--set", run.sets, "set a hyperparameter for every group: name=value");
  run_cmd->add_flag("--allow-nonfinite", run.allow_nonfinite,
                    "accept Inf/NaN gradients (they then reach the parameters, as in torch)");
  run_cmd->add_flag("--quiet", run.quiet, "print nothing on success");
  run_cmd->add_option("--threads", run.threads, "cpu backend threads (default 0: all cores)")
      ->check(whole(0, kMaxThreads));
  run_cmd->add_option("--chunk", run.chunk, "cpu backend chunk size in elements")
      ->check(whole(1, kMaxElements));
  run_cmd->add_option("--launch", run.launch,
                      "cuda/opencl launch parameters, e.g. block=128,vec=4 (default: the kernel "
                      "cache's tuning decision, else built-in defaults)");
  run_cmd->add_option("--step", run.step, optjit::cli::kStepHelp)->capture_default_str();
  run_cmd->add_flag("--no-cache", run.no_cache, "neither read nor write the kernel cache");
  run_cmd
      ->add_option("--param-rounding", run.param_rounding,
                   "bf16 parameters: nearest (default) or stochastic (unbiased, deterministic: "
                   "keyed by state_seed, step and element)")
      ->check(CLI::IsMember({"nearest", "stochastic"}));
  run_cmd->add_flag("--cache-strict", run.cache_strict,
                    "a kernel cache miss is an error instead of a compile");

  optjit::cli::CacheCommand cache;
  auto* cache_cmd = app.add_subcommand(
      "cache",
      "the kernel cache: path | ls | stats | verify | prune | export | import | keygen | coverage");
  cache_cmd
      ->add_option("action", cache.action,
                   "path | ls | stats | verify | prune | export | import | keygen | coverage")
      ->required()
      ->check(CLI::IsMember(
          {"path", "ls", "stats", "verify", "prune", "export", "import", "keygen", "coverage"}));
  cache_cmd->add_option("file", cache.file,
                        "export/import: the bundle file; keygen: the key path prefix");
  cache_cmd->add_option("--sign", cache.key, "export: sign the bundle with this secret key");
  cache_cmd->add_option("--verify", cache.key, "import: require a signature by this public key");
  cache_cmd->add_option("--device", cache.devices,
                        "export: only these devices (fingerprint ids, or sm_XX)");
  cache_cmd
      ->add_option("--max-age-days", cache.max_age_days,
                   "prune: remove kernels unused for this long")
      ->check(at_least(0));
  cache_cmd
      ->add_option("--max-bytes", cache.max_bytes,
                   "prune: then keep at most this many bytes (least recently used go)")
      ->check(whole(0, std::numeric_limits<long long>::max()));
  cache_cmd->add_flag("--json", cache.json, "machine-readable output");

  optjit::cli::EmitOptions emit;
  auto* emit_cmd = app.add_subcommand("emit", "print the code a backend generates for a pipeline");
  emit_cmd->add_option("pipeline", emit.pipeline, "pipeline text, or a file that holds it")
      ->required();
  emit_cmd
      ->add_option("--backend", emit.backend,
                   "cpu (LLVM IR) | cuda (CUDA C) | opencl (OpenCL C) | webgpu (WGSL)")
      ->check(CLI::IsMember({"cpu", "cuda", "opencl", "webgpu"}));
  emit_cmd->add_option("--dtype", emit.dtype, "parameter and state storage type");
  emit_cmd->add_flag("--optimized", emit.optimized, "after LLVM's O3 pipeline for the target");
  emit_cmd->add_flag("--asm", emit.assembly,
                     "cpu: the machine code the JIT runs, as assembly, instead of LLVM IR");
  emit_cmd->add_option("--cpu", emit.cpu, "target CPU (default: this machine's), e.g. haswell");
  emit_cmd
      ->add_option("--unroll", emit.unroll,
                   "cpu: vector iterations interleaved per loop trip (0: LLVM's choice)")
      ->check(whole(0, 16));
  emit_cmd->add_option("--launch", emit.launch, "cuda/opencl/webgpu: e.g. block=128,items=2,vec=4");
  emit_cmd->add_option("--step", emit.step, optjit::cli::kStepHelp);

  optjit::cli::PlanOptions plan;
  auto* plan_cmd = app.add_subcommand("plan", "print a pipeline's IR and its passes over memory");
  plan_cmd->add_option("pipeline", plan.pipeline, "pipeline text, or a file that holds it")
      ->required();
  plan_cmd->add_option("--dtype", plan.dtype,
                       "parameter and state storage type (f32, f16, bf16, f64)");
  plan_cmd->add_option("--grad-dtype", plan.grad_dtype, "gradient storage type (default: --dtype)");
  plan_cmd->add_flag("--no-bodies", plan.no_bodies, "omit each pass's element code");
  plan_cmd->add_flag("--json", plan.json, "print the passes and bytes as JSON");
  plan_cmd
      ->add_option("--params", plan.params,
                   "sharding on paper: the model's parameter count (e.g. 7e9), per process "
                   "state, bytes moved and bytes all-reduced per step")
      ->check(at_least(1));
  plan_cmd->add_option("--tensors", plan.tensors, "with --params: the model's tensor count")
      ->check(whole(1, kMaxElements));
  plan_cmd->add_option("--processes", plan.processes,
                       "with --params: process counts, comma-separated (default 1,8,64,1024)");
  plan_cmd
      ->add_option("--layout", plan.layout,
                   "with --params: by_tensor (ZeRO-1 by tensor) | flat (ZeRO/FSDP1 flat shards) | "
                   "dim0 (FSDP2: every tensor cut on dimension 0)")
      ->check(CLI::IsMember({"by_tensor", "flat", "dim0"}));
  plan_cmd
      ->add_option("--order", plan.order,
                   "with --params: the all-reduce's slots: by_tensor (one per piece; the "
                   "unsharded step's bits) | by_process (one per process for all-tensor "
                   "reductions)")
      ->check(CLI::IsMember({"by_tensor", "by_process"}));

  optjit::cli::CompileOptions compile;
  auto* compile_cmd =
      app.add_subcommand("compile", "build kernels ahead of time (CUDA cubins need no GPU)");
  compile_cmd->add_option("pipeline", compile.pipeline, "pipeline text, or a file that holds it")
      ->required();
  compile_cmd->add_option("--backend", compile.backend, "cuda")->check(CLI::IsMember({"cuda"}));
  compile_cmd->add_option("--arch", compile.arch,
                          "comma-separated sm_XX list (default sm_80,sm_90)");
  compile_cmd->add_option("--dtype", compile.dtype, "parameter and state storage type");
  compile_cmd->add_option("--launch", compile.launch, "kernel shape, e.g. block=128,items=2,vec=4");
  compile_cmd->add_option("--step", compile.step, optjit::cli::kStepHelp);
  compile_cmd->add_option("--out", compile.out,
                          "write <out>/optjit_<hash>_<arch>.cubin files here");

  optjit::cli::TuneCommand tune;
  auto* tune_cmd = app.add_subcommand(
      "tune", "tune launch parameters ahead of time (stored in the kernel cache)");
  tune_cmd->add_option("pipeline", tune.pipeline, "pipeline text, or a file that holds it")
      ->required();
  tune_cmd->add_option("--backend", tune.backend, "cpu (default) | cuda | opencl | webgpu")
      ->check(device_kinds_and({}));
  tune_cmd->add_option("--shapes", tune.shapes,
                       "gpt2-small (default) | resnet50 | many-small | FILE.json");
  tune_cmd->add_option("--numel", tune.numel, "one tensor of this many elements")
      ->check(whole(1, kMaxElements));
  tune_cmd->add_option("--dtype", tune.dtype, "parameter, gradient and state type");
  tune_cmd
      ->add_option("--budget-seconds", tune.budget_seconds,
                   "stop trying candidates after this long")
      ->check(at_least(0));
  tune_cmd
      ->add_option("--max-candidates", tune.max_candidates, "try at most this many configurations")
      ->check(whole(1, 1'000'000));

  optjit::cli::BenchOptions bench;
  auto* bench_cmd = app.add_subcommand(
      "bench", "time a pipeline against the memory roofline and an unfused baseline");
  bench_cmd->add_option("pipeline", bench.pipeline, "pipeline text, or a file that holds it")
      ->required();
  bench_cmd->add_option("--backend", bench.backend, "cpu (default) | cuda | opencl | webgpu")
      ->check(device_kinds_and({}));
  bench_cmd->add_option("--numel", bench.numel, "one tensor of this many elements")
      ->check(whole(1, kMaxElements));
  bench_cmd->add_option("--shapes", bench.shapes,
                        "gpt2-small (default) | resnet50 | many-small | FILE.json");
  bench_cmd->add_option("--dtype", bench.dtype, "parameter, gradient and state type (default f32)");
  bench_cmd->add_option("--threads", bench.threads, "threads (default 0: all cores)")
      ->check(whole(0, kMaxThreads));
  bench_cmd->add_option("--chunk", bench.chunk, "chunk size in elements")
      ->check(whole(1, kMaxElements));
  bench_cmd->add_option("--steps", bench.steps, "steps per timed repetition")
      ->check(whole(1, kMaxSteps));
  bench_cmd->add_option("--reps", bench.reps, "timed repetitions (the median is reported)")
      ->check(whole(1, 1'000'000));
  bench_cmd->add_option("--launch", bench.launch,
                        "cuda/opencl: e.g. block=128,items=2,vec=4,grid=8,chunk=65536 (any "
                        "subset), or 'tuned' for the kernel cache's decision");
  bench_cmd->add_option("--step", bench.step, optjit::cli::kStepHelp);
  bench_cmd->add_flag("--json", bench.json, "machine-readable output");
  bench_cmd->add_flag("--no-unfused", bench.no_unfused, "skip the unfused baseline");

  bool devices_json = false;
  auto* devices_cmd =
      app.add_subcommand("devices", "list every device on every backend, with fingerprints");
  devices_cmd->add_flag("--json", devices_json, "machine-readable output");

  auto* list_cmd = app.add_subcommand("list", "list the built-in transforms and schedules");

  std::string inspect_path, inspect_match;
  auto* inspect_cmd = app.add_subcommand("inspect", "summarize the tensors of a .safetensors file");
  inspect_cmd->add_option("file", inspect_path, "a .safetensors file")->required();
  inspect_cmd->add_option("--match", inspect_match, "only tensors whose names match this glob");

  optjit::cli::SynthOptions synth;
  auto* synth_cmd = app.add_subcommand("synth", "write a generated parameter set and gradients");
  synth_cmd->add_option("--preset", synth.preset, "tiny-gpt (default) | mlp | one")
      ->check(CLI::IsMember({"tiny-gpt", "mlp", "one"}));
  synth_cmd->add_option("--numel", synth.numel, "elements for --preset one")
      ->check(whole(1, kMaxElements));
  synth_cmd->add_option("--steps", synth.steps, "gradient slices (leading dimension)")
      ->check(whole(1, kMaxSteps));
  synth_cmd->add_option("--dtype", synth.dtype, "f32 | f16 | bf16 | f64");
  synth_cmd->add_option("--seed", synth.seed, "random seed")
      ->check(whole(0, std::numeric_limits<unsigned>::max()));
  synth_cmd->add_option("--params", synth.params, "output parameters (.safetensors)")->required();
  synth_cmd->add_option("--grads", synth.grads, "output gradients (.safetensors)")->required();

  // CLI11 reports a misspelt command as a missing one; name it, and what would do.
  std::string names;
  bool known = false;
  for (const auto* sub : app.get_subcommands({})) {
    names += (names.empty() ? "" : ", ") + sub->get_name();
    known = known || (argc >= 2 && sub->get_name() == argv[1]);
  }
  if (argc < 2 || (argv[1][0] != '-' && !known)) {
    return optjit::cli::fail((argc < 2 ? std::string("a command is required")
                                       : "'" + std::string(argv[1]) + "' is not a command") +
                             " (" + names + "; --help explains each)");
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and friends print as CLI11 prints them; every argument error is one line and
    // exit code 1, like every other error (CLI11's own codes are 100 and up).
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    return optjit::cli::fail(e.what());
  }
  // Errors come back as values; what can still throw is the allocator (a file or a tensor set
  // too large for memory) and the standard library. Either way: one line, exit 1.
  try {
    if (*run_cmd) return optjit::cli::run(run);
    if (*plan_cmd) return optjit::cli::plan(plan);
    if (*emit_cmd) return optjit::cli::emit(emit);
    if (*bench_cmd) return optjit::cli::bench(bench);
    if (*tune_cmd) return optjit::cli::tune(tune);
    if (*cache_cmd) return optjit::cli::cache(cache);
    if (*compile_cmd) return optjit::cli::compile(compile);
    if (*list_cmd) return optjit::cli::list();
    if (*devices_cmd) return optjit::cli::devices(devices_json);
    if (*inspect_cmd) return optjit::cli::inspect(inspect_path, inspect_match);
    if (*synth_cmd) return optjit::cli::synth(synth);
  } catch (const std::bad_alloc&) {
    return optjit::cli::fail(
        "out of memory (the tensors or the state do not fit in this machine's memory)");
  } catch (const std::exception& e) {
    return optjit::cli::fail(std::string("unexpected error: ") + e.what());
  }
  return 2;
}

}  // namespace optjit::cli

#ifndef OPTJIT_CLI_NO_MAIN
int main(int argc, char** argv) { return optjit::cli::main_with_args(argc, argv); }
#endif
