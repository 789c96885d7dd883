// libFuzzer target: any bytes as an optimizer checkpoint (`Optimizer::load`, `optjit run
// --resume`) are imported or give a one-line error, never a crash, and a refused file leaves
// the optimizer's state exactly as it was. What is accepted is a state the optimizer steps, and
// saves and loads back to the same bytes. Three optimizers cover the state kinds: AdamW with
// 8-bit first moments (codes and absmax, on a tensor large enough to hold codes and one too
// small to), bf16 second moments and two parameter groups; ASGD with per-group scalar states;
// the same AdamW with the two 8-bit maps swapped, so that each AdamW's checkpoints hold codes
// of other formats than the other keeps (loaded as values).
//
// The seeds (corpus/checkpoint_import) are these optimizers' own checkpoints after a few steps:
// OPTJIT_FUZZ_WRITE_SEEDS=DIR writes them there and exits.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "api/optimizer.h"
#include "ir/compile.h"
#include "runtime/safetensors.h"
#include "runtime/state.h"
#include "tests/fuzz/input_file.h"

namespace {

using optjit::Optimizer;

struct Subject {
  std::vector<std::vector<float>> params;
  std::vector<std::vector<float>> grads;
  std::unique_ptr<Optimizer> opt;
  // The same optimizer's plan and a state of its own, for runtime::import_state called from
  // here: the copy compiled into this target, instrumented (liboptjit's own calls reach its
  // uninstrumented copy).
  optjit::plan::Plan plan;
  optjit::runtime::OptimizerState state;

  Subject(const char* pipeline, std::vector<int64_t> sizes, optjit::OptimizerOptions options) {
    std::vector<optjit::Param> ps;
    for (size_t i = 0; i < sizes.size(); ++i) {
      params.emplace_back(static_cast<size_t>(sizes[i]));
      grads.emplace_back(static_cast<size_t>(sizes[i]));
      for (size_t e = 0; e < params[i].size(); ++e) {
        params[i][e] = static_cast<float>(std::sin(0.1 * static_cast<double>(e) + i));
        grads[i][e] = static_cast<float>(std::cos(0.3 * static_cast<double>(e) + i));
      }
      ps.push_back({"w" + std::to_string(i), params[i].data(), optjit::DType::f32, {sizes[i]}});
    }
    options.backend = optjit::Backend::reference;
    auto p = optjit::compile_pipeline(pipeline);
    if (!p) __builtin_trap();
    plan = std::move(*p);
    std::vector<optjit::runtime::HostTensor> hosts;
    for (const auto& q : ps)
      hosts.push_back(optjit::runtime::HostTensor::zeros(q.name, q.dtype, q.shape));
    auto st = optjit::runtime::init_state(plan, hosts, options.groups);
    if (!st) __builtin_trap();
    state = std::move(*st);
    auto o = Optimizer::create(pipeline, std::move(ps), std::move(options));
    if (!o) __builtin_trap();
    opt = std::move(*o);
  }
  optjit::Status step() {
    std::vector<const void*> g;
    for (auto& v : grads) g.push_back(v.data());
    auto r = opt->step(g);
    if (!r) return r.error();
    return optjit::Status::Ok();
  }
  // The state as bytes: what a save writes.
  std::vector<uint8_t> saved(const std::string& path) const {
    if (!opt->save(path)) __builtin_trap();
    auto f = optjit::runtime::read_safetensors(path);
    if (!f) __builtin_trap();
    std::vector<uint8_t> bytes;
    for (const auto& t : f->tensors) {
      bytes.insert(bytes.end(), t.name.begin(), t.name.end());
      bytes.insert(bytes.end(), t.data.begin(), t.data.end());
    }
    return bytes;
  }
};

struct Subjects {
  std::string dir = "/dev/shm/optjit-ckpt-fuzz-" + std::to_string(::getpid());
  std::vector<std::unique_ptr<Subject>> all;
  Subjects() {
    optjit::OptimizerOptions two_groups;
    two_groups.groups = {{{"w1"}, {{"lr", 0.03}}}};
    all.push_back(std::make_unique<Subject>(
        "chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-2, weight_decay=0.1, "
        "state_format=\"exp_avg:q8,exp_avg_sq:bf16\"))",
        std::vector<int64_t>{4100, 7}, two_groups));
    all.push_back(
        std::make_unique<Subject>("asgd(lr=0.01, t0=2)", std::vector<int64_t>{5, 3}, two_groups));
    // The first one with its formats swapped (the unsigned map for exp_avg_sq, which is never
    // negative; torchao's formats would keep f32 state here, 4100 not being whole blocks):
    // codes and bf16 of either load into the other as their values.
    all.push_back(std::make_unique<Subject>(
        "chain(clip_grad_norm(max_norm=1.0), adamw(lr=1e-2, weight_decay=0.1, "
        "state_format=\"exp_avg:bf16,exp_avg_sq:q8u\"))",
        std::vector<int64_t>{4100, 7}, two_groups));
    for (auto& s : all)
      for (int k = 0; k < 3; ++k)
        if (!s->step()) __builtin_trap();
    ::mkdir(dir.c_str(), 0700);
  }
  ~Subjects() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

Subjects& subjects() {
  static Subjects s;
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* out = std::getenv("OPTJIT_FUZZ_WRITE_SEEDS")) {
    int i = 0;
    for (auto& s : subjects().all)
      if (!s->opt->save(std::string(out) + "/seed" + std::to_string(i++) + ".safetensors"))
        __builtin_trap();
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace optjit::runtime;
  Subjects& box = subjects();
  const std::string a = box.dir + "/a.safetensors", b = box.dir + "/b.safetensors";
  const optjit::fuzz::InputFile input(data, size);
  const std::string path = input.path();
  auto file = read_safetensors(path);
  for (auto& s : box.all) {
    if (file) {  // the instrumented import, into a copy
      OptimizerState copy = s->state;
      auto imported = import_state(s->plan, copy, *file);
      if (!imported && imported.error().message.empty()) __builtin_trap();
    }
    const std::vector<uint8_t> before = s->saved(a);
    const int64_t steps = s->opt->step_count();
    auto loaded = s->opt->load(path);
    if (!loaded) {
      if (loaded.error().message.empty()) __builtin_trap();  // every error says something
      // All or nothing: a refused file changed nothing.
      if (s->saved(a) != before || s->opt->step_count() != steps) __builtin_trap();
      continue;
    }
    // Accepted: it saves and loads back to the same state, and it steps (whatever its numbers).
    const std::vector<uint8_t> got = s->saved(a);
    if (!s->opt->load(a) || s->saved(b) != got) __builtin_trap();
    auto stepped = s->step();
    if (!stepped && stepped.error().message.empty()) __builtin_trap();
  }
  return 0;
}
