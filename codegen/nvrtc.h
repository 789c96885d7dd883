// CUDA C -> cubin with NVRTC. No GPU needed: this is how cubins are built ahead of time.
#pragma once

#include <string>
#include <vector>

#include "ir/error.h"

namespace optjit::codegen {

struct KernelResources {
  std::string name;
  int registers = 0;
  int spill_stores = 0, spill_loads = 0;  // bytes
  int shared_bytes = 0;
};

struct Cubin {
  std::string arch;  // "sm_90"
  std::vector<char> image;
  std::vector<KernelResources> kernels;
  double compile_seconds = 0;
};

/// Whether this build has NVRTC, and its version ("13.0").
bool have_nvrtc();
std::string nvrtc_version();

/// Compiles `source` for `arch` (sm_XX). IEEE division and square root, no FMA contraction,
/// so results stay comparable with the float64 reference. Errors carry NVRTC's log.
Expected<Cubin> compile_cubin(const std::string& source, const std::string& arch);

}  // namespace optjit::codegen
