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

/// Whether NVRTC could be loaded (it is found at run time: $OPTJIT_NVRTC, the loader's path,
/// $CUDA_HOME, the build's toolkit, /usr/local/cuda), its version ("13.0") or "none", and the
/// path of the library that was loaded.
bool have_nvrtc();
std::string nvrtc_version();
std::string nvrtc_path();

/// The exact fingerprint for cubins of `arch`: a cubin depends on the architecture, NVRTC and
/// optjit's code generation, not on a particular card or driver, which is what lets cubins be
/// built ahead of time without a GPU.
std::string cubin_fingerprint(const std::string& arch);
std::string cubin_fingerprint_id(const std::string& arch);

/// Whether `arch` names a CUDA architecture (sm_80, sm_90a), before anything is compiled.
Status check_cuda_arch(const std::string& arch);

/// Compiles `source` for `arch` (sm_XX). IEEE division and square root, no FMA contraction,
/// so results stay comparable with the float64 reference. Errors carry NVRTC's log.
Expected<Cubin> compile_cubin(const std::string& source, const std::string& arch);

}  // namespace optjit::codegen
