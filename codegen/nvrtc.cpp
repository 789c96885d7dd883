#include "codegen/nvrtc.h"

#include <chrono>
#include <regex>

#include <xxhash.h>

#include "codegen/version.h"

#include <dlfcn.h>
#include <fmt/ranges.h>
#include <link.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>

namespace optjit::codegen {

std::string cubin_fingerprint(const std::string& arch) {
  return fmt::format("cuda|{}|nvrtc {}|codegen {}", arch, nvrtc_version(), kCodegenVersion);
}

std::string cubin_fingerprint_id(const std::string& arch) {
  std::string f = cubin_fingerprint(arch);
  return fmt::format("{:016x}", XXH3_64bits(f.data(), f.size()));
}

namespace {

// NVRTC's C API, resolved at run time like the CUDA driver: liboptjit loads on machines
// without the CUDA toolkit, and NVRTC is found where it is, not where it was at build time.
using nvrtcResult = int;
using nvrtcProgram = struct _nvrtcProgram*;
struct NvrtcApi {
  std::string path;  // the library that was loaded
  const char* (*GetErrorString)(nvrtcResult);
  nvrtcResult (*Version)(int*, int*);
  nvrtcResult (*CreateProgram)(nvrtcProgram*, const char*, const char*, int, const char* const*,
                               const char* const*);
  nvrtcResult (*DestroyProgram)(nvrtcProgram*);
  nvrtcResult (*CompileProgram)(nvrtcProgram, int, const char* const*);
  nvrtcResult (*GetCUBINSize)(nvrtcProgram, size_t*);
  nvrtcResult (*GetCUBIN)(nvrtcProgram, char*);
  nvrtcResult (*GetProgramLogSize)(nvrtcProgram, size_t*);
  nvrtcResult (*GetProgramLog)(nvrtcProgram, char*);
};

// Where NVRTC is looked for, in this order: $OPTJIT_NVRTC (a file; nothing else is tried when
// it is set), the loader's own search (LD_LIBRARY_PATH, ldconfig), $CUDA_HOME and $CUDA_PATH,
// the toolkit found at build time, /usr/local/cuda.
std::vector<std::string> nvrtc_candidates() {
  if (const char* forced = std::getenv("OPTJIT_NVRTC"); forced && *forced) return {forced};
  const char* names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
  std::vector<std::string> out(std::begin(names), std::end(names));
  std::vector<std::string> dirs;
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* d = std::getenv(var); d && *d) dirs.push_back(std::string(d) + "/lib64");
#ifdef OPTJIT_CUDA_LIBDIR
  dirs.push_back(OPTJIT_CUDA_LIBDIR);
#endif
  dirs.push_back("/usr/local/cuda/lib64");
  for (const auto& d : dirs)
    for (const char* n : names) out.push_back(d + "/" + n);
  return out;
}

Expected<const NvrtcApi*> nvrtc() {
  static NvrtcApi a{};
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = nullptr;
    std::vector<std::string> tried = nvrtc_candidates();
    for (const auto& c : tried)
      if ((lib = ::dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL))) break;
    if (!lib) {
      error = fmt::format(
          "NVRTC not found (tried {}); install the CUDA toolkit or the nvidia-cuda-nvrtc wheel, "
          "or set OPTJIT_NVRTC to the path of libnvrtc.so",
          fmt::join(tried, ", "));
      return;
    }
    if (link_map* map = nullptr; ::dlinfo(lib, RTLD_DI_LINKMAP, &map) == 0 && map)
      a.path = map->l_name;
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(lib, name));
      if (!fn && error.empty()) error = fmt::format("{} lacks {}", a.path, name);
    };
    sym(a.GetErrorString, "nvrtcGetErrorString");
    sym(a.Version, "nvrtcVersion");
    sym(a.CreateProgram, "nvrtcCreateProgram");
    sym(a.DestroyProgram, "nvrtcDestroyProgram");
    sym(a.CompileProgram, "nvrtcCompileProgram");
    sym(a.GetCUBINSize, "nvrtcGetCUBINSize");
    sym(a.GetCUBIN, "nvrtcGetCUBIN");
    sym(a.GetProgramLogSize, "nvrtcGetProgramLogSize");
    sym(a.GetProgramLog, "nvrtcGetProgramLog");
  });
  if (!error.empty()) return make_error("{}", error);
  return &a;
}

}  // namespace

bool have_nvrtc() { return static_cast<bool>(nvrtc()); }

std::string nvrtc_version() {
  auto n = nvrtc();
  if (!n) return "none";
  int major = 0, minor = 0;
  (*n)->Version(&major, &minor);
  return fmt::format("{}.{}", major, minor);
}

std::string nvrtc_path() {
  auto n = nvrtc();
  return n ? (*n)->path : std::string();
}

namespace {

// ptxas -v: "Compiling entry function 'optjit_pass_1' for 'sm_90'" then
// "Used 40 registers, ..." and "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads".
std::vector<KernelResources> parse_resources(const std::string& log) {
  std::vector<KernelResources> out;
  std::regex entry(R"(Compiling entry function '(\w+)')"), regs(R"(Used (\d+) registers)"),
      spill(R"((\d+) bytes spill stores, (\d+) bytes spill loads)"), smem(R"((\d+) bytes smem)");
  std::smatch m;
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
  }
  return out;
}

}  // namespace

Status check_cuda_arch(const std::string& arch) {
  if (!std::regex_match(arch, std::regex(R"(sm_\d{2,3}a?)")))
    return make_error("'{}' is not a CUDA architecture (e.g. sm_80, sm_90)", arch);
  return Status::Ok();
}

Expected<Cubin> compile_cubin(const std::string& source, const std::string& arch) {
  OPTJIT_TRY(check_cuda_arch(arch));
  auto api = nvrtc();
  if (!api) return api.error();
  const NvrtcApi& N = **api;
  auto t0 = std::chrono::steady_clock::now();
  nvrtcProgram prog;
  if (N.CreateProgram(&prog, source.c_str(), "optjit.cu", 0, nullptr, nullptr) != 0)
    return make_error("NVRTC could not create a program");
  std::string arch_opt = "--gpu-architecture=" + arch;
  // The source includes no headers (codegen/c_emitter.cpp), so no include path is needed.
  const char* opts[] = {arch_opt.c_str(),  "--std=c++17",      "--fmad=false",
                        "--prec-div=true", "--prec-sqrt=true", "--ptxas-options=-v"};
  nvrtcResult r = N.CompileProgram(prog, static_cast<int>(std::size(opts)), opts);
  size_t log_size = 0;
  N.GetProgramLogSize(prog, &log_size);
  std::string log(log_size, '\0');
  if (log_size > 0) N.GetProgramLog(prog, log.data());
  if (r != 0) {
    N.DestroyProgram(&prog);
    return make_error("NVRTC failed for {}: {}\n{}", arch, N.GetErrorString(r), log);
  }
  size_t size = 0;
  if (N.GetCUBINSize(prog, &size) != 0 || size == 0) {
    N.DestroyProgram(&prog);
    return make_error("NVRTC produced no cubin for {}", arch);
  }
  Cubin c;
  c.arch = arch;
  c.image.resize(size);
  N.GetCUBIN(prog, c.image.data());
  N.DestroyProgram(&prog);
  c.kernels = parse_resources(log);
  c.compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return c;
}

}  // namespace optjit::codegen
