#pragma once

#include <string>
#include <vector>

#include "codegen/launch.h"
#include "ir/error.h"

namespace optjit {
class Optimizer;
}

namespace optjit::cli {

/// Where a GPU step's scalar program runs (--step): on the host between passes, on the device
/// as kernels (one queue of launches per step), or as a captured CUDA graph replayed each step.
enum class StepMode { host, device, graph };
/// Checks --step against the backend: device needs cuda or opencl, graph needs cuda. auto is
/// device on cuda and opencl (verified on every fixture there) and host elsewhere.
Expected<StepMode> parse_step(const std::string& step, const std::string& backend);
/// "--step host|device|graph": the help text every command shares.
extern const char* const kStepHelp;

struct RunOptions {
  std::string pipeline, params, grads, state, out, backend = "auto";
  int steps = 1;
  std::vector<std::string> groups, sets;
  bool allow_nonfinite = false, quiet = false;
  int threads = 0;
  long long chunk = 1 << 16;
  std::string launch;  // cuda/opencl launch parameters (default: the cache's tuning, else built-in)
  std::string step = "auto";
  bool no_cache = false, cache_strict = false;
  std::string param_rounding = "nearest";  // bf16 parameters: nearest | stochastic
};
int run(const RunOptions& o);

struct CacheCommand {
  std::string action;  // path | ls | stats | verify | prune | export | import | keygen | coverage
  std::string file;    // export/import: the bundle; keygen: the key path prefix
  std::string key;     // export: secret key to sign with; import: public key to verify with
  std::vector<std::string> devices;  // export: fingerprint ids or sm_XX
  double max_age_days = -1;
  long long max_bytes = -1;
  bool json = false;
};
int cache(const CacheCommand& c);

struct PlanOptions {
  std::string pipeline, dtype = "f32", grad_dtype;
  bool no_bodies = false, json = false;
  // Sharding on paper: a model of `params` parameters in `tensors` tensors over each process
  // count of `processes` (e.g. "8,64,1024"), laid out as `layout`.
  double params = 0;
  int64_t tensors = 0;
  std::string processes = "1,8,64,1024", layout = "by_tensor", order = "by_tensor";
};
int plan(const PlanOptions& o);

int list();

/// Every device on every backend, with exact and performance fingerprints.
int devices(bool json);

struct CompileOptions {
  std::string pipeline, backend = "cuda", arch = "sm_80,sm_90", dtype = "f32", out;
  std::string launch;  // block, items, vec of the kernels (default: the built-in ones)
  std::string step = "host";
  bool no_cache = false;
};
/// Builds kernels ahead of time (CUDA cubins for each sm_XX; no GPU needed).
int compile(const CompileOptions& o);

struct BenchOptions {
  std::string pipeline, backend = "cpu", shapes = "gpt2-small", dtype = "f32";
  long long numel = 0, chunk = 1 << 16;
  int threads = 0, steps = 10, reps = 5;
  std::string launch;  // cuda/opencl: a launch configuration, or "tuned" (the cache's decision)
  std::string step = "auto";
  bool json = false, no_unfused = false;
};
int bench(const BenchOptions& o);

struct TuneCommand {
  std::string pipeline, backend = "cpu", shapes = "gpt2-small", dtype = "f32";
  long long numel = 0;
  double budget_seconds = 10;
  int max_candidates = 24;
};
/// Tunes launch parameters ahead of time and stores the decision in the kernel cache.
int tune(const TuneCommand& o);

struct EmitOptions {
  std::string pipeline, backend = "cpu", dtype = "f32", cpu;
  std::string launch;  // cuda/opencl: block, items, vec (the rest is ignored)
  std::string step = "host";
  int unroll = 0;  // cpu: vector iterations interleaved per loop trip (0: LLVM's choice)
  bool optimized = false;
  bool assembly = false;  // cpu: the machine code (after O3 and code generation), not LLVM IR
};
int emit(const EmitOptions& o);

/// Prints each tensor of a .safetensors file: dtype, shape and summary statistics.
int inspect(const std::string& path, const std::string& match);

struct SynthOptions {
  std::string preset = "tiny-gpt", dtype = "f32", params, grads;
  long long numel = 1 << 20;
  int steps = 1;
  unsigned seed = 0;
};
int synth(const SynthOptions& o);

/// Prints "optjit: <message>" to stderr and returns the exit code for errors (1).
int fail(const std::string& message);
/// The optimizer's warnings not printed before, one "optjit: warning: ..." line each on stderr.
void print_warnings(const Optimizer& opt);

}  // namespace optjit::cli
