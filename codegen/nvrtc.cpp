#include "codegen/nvrtc.h"

#include <chrono>
#include <regex>

#include <xxhash.h>

#include "runtime/devices.h"

#ifdef OPTJIT_HAVE_NVRTC
#include <nvrtc.h>
#endif

namespace optjit::codegen {

std::string cubin_fingerprint(const std::string& arch) {
  return fmt::format("cuda|{}|nvrtc {}|codegen {}", arch, nvrtc_version(),
                     runtime::kCodegenVersion);
}

std::string cubin_fingerprint_id(const std::string& arch) {
  std::string f = cubin_fingerprint(arch);
  return fmt::format("{:016x}", XXH3_64bits(f.data(), f.size()));
}

#ifdef OPTJIT_HAVE_NVRTC

bool have_nvrtc() { return true; }

std::string nvrtc_version() {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return fmt::format("{}.{}", major, minor);
}

namespace {

// ptxas -v: "Compiling entry function 'optjit_pass_1' for 'sm_90'" then
// "Used 40 registers, ..." and "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads".
std::vector<KernelResources> parse_resources(const std::string& log) {
  std::vector<KernelResources> out;
  std::regex entry(R"(Compiling entry function '(\w+)')"), regs(R"(Used (\d+) registers)"),
      spill(R"((\d+) bytes spill stores, (\d+) bytes spill loads)"), smem(R"((\d+) bytes smem)");
  std::smatch m;
  size_t pos = 0;
  std::string rest = log;
  while (std::regex_search(rest, m, entry)) {
    KernelResources k;
    k.name = m[1];
    std::string after = m.suffix();
    size_t next = after.find("Compiling entry function");
    std::string block = after.substr(0, next);
    if (std::regex_search(block, m, regs)) k.registers = std::stoi(m[1]);
    if (std::regex_search(block, m, spill))
      k.spill_stores = std::stoi(m[1]), k.spill_loads = std::stoi(m[2]);
    if (std::regex_search(block, m, smem)) k.shared_bytes = std::stoi(m[1]);
    out.push_back(k);
    rest = next == std::string::npos ? "" : after.substr(next);
    (void)pos;
  }
  return out;
}

}  // namespace

Expected<Cubin> compile_cubin(const std::string& source, const std::string& arch) {
  if (!std::regex_match(arch, std::regex(R"(sm_\d{2,3}a?)")))
    return make_error("'{}' is not a CUDA architecture (e.g. sm_80, sm_90)", arch);
  auto t0 = std::chrono::steady_clock::now();
  nvrtcProgram prog;
  if (nvrtcCreateProgram(&prog, source.c_str(), "optjit.cu", 0, nullptr, nullptr) != NVRTC_SUCCESS)
    return make_error("NVRTC could not create a program");
  std::string arch_opt = "--gpu-architecture=" + arch;
  std::string include = "--include-path=" OPTJIT_CUDA_INCLUDE;
  const char* opts[] = {arch_opt.c_str(),  include.c_str(),    "--std=c++17",       "--fmad=false",
                        "--prec-div=true", "--prec-sqrt=true", "--ptxas-options=-v"};
  nvrtcResult r = nvrtcCompileProgram(prog, static_cast<int>(std::size(opts)), opts);
  size_t log_size = 0;
  nvrtcGetProgramLogSize(prog, &log_size);
  std::string log(log_size, '\0');
  if (log_size > 0) nvrtcGetProgramLog(prog, log.data());
  if (r != NVRTC_SUCCESS) {
    nvrtcDestroyProgram(&prog);
    return make_error("NVRTC failed for {}: {}\n{}", arch, nvrtcGetErrorString(r), log);
  }
  size_t size = 0;
  if (nvrtcGetCUBINSize(prog, &size) != NVRTC_SUCCESS || size == 0) {
    nvrtcDestroyProgram(&prog);
    return make_error("NVRTC produced no cubin for {}", arch);
  }
  Cubin c;
  c.arch = arch;
  c.image.resize(size);
  nvrtcGetCUBIN(prog, c.image.data());
  nvrtcDestroyProgram(&prog);
  c.kernels = parse_resources(log);
  c.compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return c;
}

#else

bool have_nvrtc() { return false; }
std::string nvrtc_version() { return "none"; }
Expected<Cubin> compile_cubin(const std::string&, const std::string&) {
  return make_error(
      "this optjit was built without NVRTC (the CUDA toolkit was not found at build time)");
}

#endif

}  // namespace optjit::codegen
