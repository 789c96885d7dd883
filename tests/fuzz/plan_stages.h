// What a fuzz target checks of a plan it got from its input: every stage after the planner
// takes it or refuses it with an error, and none crashes, trips a sanitizer or an assertion,
// or calls its error internal. The stages: the C emitters (CUDA and OpenCL, host and device
// step; WGSL), the CPU emitter's LLVM IR (run through LLVM's verifier), and two steps of the
// float64 reference interpreter on a small tensor and on one of whole quantization blocks.
// OPTJIT_FUZZ_JIT=1 also compiles and steps it on the CPU backend (tens of milliseconds an
// input: for long runs, not the smoke tests).
//
// OPTJIT_FUZZ_STATS=1 prints each input's furthest stage on stderr, so that `TARGET -runs=0
// CORPUS` tells how much of a corpus gets how far.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "api/optimizer.h"
#include "codegen/c_emitter.h"
#include "codegen/cpu_jit.h"
#include "ir/plan.h"
#include "runtime/safetensors.h"

namespace optjit::fuzz {

inline void stage(const char* what, const Error* e = nullptr) {
  static const bool stats = std::getenv("OPTJIT_FUZZ_STATS") != nullptr;
  if (stats)
    std::fprintf(stderr, "stage: %s%s%s\n", what, e ? ": " : "", e ? e->message.c_str() : "");
}

/// An error is a message, one line (optjit's errors are shown as they are), and not an
/// internal one: those say that a stage made what a later one rejects (LLVM's verifier, say).
inline void check_message(const char* where, const Error& e) {
  stage(where, &e);
  if (e.message.empty() || e.message.find('\n') != std::string::npos ||
      e.message.rfind("internal", 0) == 0)
    __builtin_trap();
}

/// Two steps on `backend`, with the plan's parameter and gradient dtypes: values of both signs
/// from 1e-3 to 1e3, and some zeros.
inline void step_on(plan::Plan plan, const Backend& backend) {
  const DType dtype = plan.program.buffers[plan.program.param_buffer()].storage;
  const DType gtype = plan.program.buffers[plan.program.grad_buffer()].storage;
  const std::vector<int64_t> sizes = {3, 4096 + 256};
  std::vector<std::vector<uint8_t>> params, grads;
  std::vector<Param> ps;
  for (size_t t = 0; t < sizes.size(); ++t) {
    const auto n = static_cast<size_t>(sizes[t]);
    params.emplace_back(n * size_bytes(dtype));
    grads.emplace_back(n * size_bytes(gtype));
    for (size_t i = 0; i < n; ++i) {
      const double scale = i % 11 == 0 ? 0.0 : std::pow(10.0, static_cast<double>(i % 7) - 3);
      runtime::store_element(params.back().data(), dtype, static_cast<int64_t>(i),
                             std::sin(0.37 * i + t) * scale);
      runtime::store_element(grads.back().data(), gtype, static_cast<int64_t>(i),
                             std::cos(0.53 * i + t) * scale);
    }
    ps.push_back({"w" + std::to_string(t), params.back().data(), dtype, {sizes[t]}});
  }
  OptimizerOptions options;
  options.backend = backend;
  options.cache.reset();  // no kernel cache: nothing written to disk
  auto opt = Optimizer::create(std::move(plan), std::move(ps), options);
  if (!opt) return check_message("create", opt.error());
  const std::vector<const void*> g = {grads[0].data(), grads[1].data()};
  for (int s = 0; s < 2; ++s) {
    auto r = (*opt)->step(g);
    if (!r) return check_message("step", r.error());
  }
  stage("stepped");
}

inline void check_plan_stages(plan::Plan plan) {
  for (auto language :
       {codegen::CLanguage::cuda, codegen::CLanguage::opencl, codegen::CLanguage::wgsl})
    for (bool device_step : {false, true}) {
      if (device_step && language == codegen::CLanguage::wgsl) continue;  // host step only
      codegen::CEmitOptions options;
      options.language = language;
      options.device_step = device_step;
      auto src = codegen::emit_c(plan, options);
      if (!src) check_message("emit_c", src.error());
    }
  auto llvm_ir = codegen::emit_cpu_ir(plan, /*optimized=*/false);
  if (!llvm_ir) check_message("emit_cpu_ir", llvm_ir.error());
  static const bool jit = std::getenv("OPTJIT_FUZZ_JIT") != nullptr;
  if (jit) step_on(plan, Backend::cpu);
  step_on(std::move(plan), Backend::reference);
}

}  // namespace optjit::fuzz
