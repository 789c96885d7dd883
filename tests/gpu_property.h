// The launch-shape property for a GPU-style backend (OpenCL, CUDA): random pipelines (built-ins
// and custom transforms with nested reductions), storage types and launch shapes (block, items
// per work-item, vector width, grid cap, chunk size), with the scalar program on the host or
// on the device (the device step), each against the reference.
#pragma once

#include <rapidcheck.h>

#include "codegen/launch.h"
#include "executors.h"
#include "ir/compile.h"
#include "property_gens.h"

namespace optjit {

// A launch shape: block, items, vector width, grid cap, and a chunk of 1..5 vectors.
inline codegen::GpuLaunch gen_gpu_launch() {
  codegen::GpuLaunch launch;
  launch.block = *rc::gen::elementOf(std::vector<int>{1, 2, 4, 8, 16, 64});
  launch.items = *rc::gen::inRange(1, 5);
  launch.vec = *rc::gen::elementOf(std::vector<int>{1, 2, 4, 8});
  launch.groups_per_unit = *rc::gen::inRange(1, 9);
  launch.chunk_elements = launch.vec * *rc::gen::inRange(1, 6);
  return launch;
}

inline void check_launch_shape_matches_reference(const char* backend) {
  const bool custom = *rc::gen::arbitrary<bool>();
  std::string text = custom ? *gen_custom_pipeline() : *gen_builtin_pipeline();
  DType t = custom ? *rc::gen::elementOf(std::vector<DType>{DType::f32, DType::f64})
                   : *rc::gen::elementOf(
                         std::vector<DType>{DType::f32, DType::f64, DType::bf16, DType::f16});
  RC_TAG(custom ? "custom" : "builtins", to_string(t));
  auto plan = compile_pipeline(text, {t, t, t});
  RC_ASSERT(plan.ok());
  const codegen::GpuLaunch launch = gen_gpu_launch();
  const bool device_step = *rc::gen::arbitrary<bool>();
  RC_TAG(device_step ? "device step" : "host step");
  RC_LOG() << text << " on " << to_string(t) << ", " << launch.to_string()
           << (device_step ? ", device step" : "") << "\n";
  runtime::ExecutorOptions options;
  options.launch = launch;
  options.step = device_step ? runtime::StepMode::device : runtime::StepMode::host;
  auto gpu = testing::executor(*plan, backend, options);
  RC_ASSERT(gpu.ok());
  check_backend_matches_reference(*plan, t, random_params(t, 40), [&](runtime::OptimizerState& s) {
    auto r = (*gpu)->step(s);
    RC_ASSERT(r.ok());
    return r->skipped;
  });
}

}  // namespace optjit
