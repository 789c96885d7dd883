// The CUDA emulator's NVRTC (tests/cuda_emu/README.md): the entry points optjit's
// codegen/nvrtc.cpp loads, compiling a kernel source as host C++ (device.h ahead of it) into a
// shared object that the emulator's driver loads as the "cubin". The log names each kernel as
// ptxas -v does, with a nominal 32 registers and no spills, so the tuner's pruning reads it.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#ifndef OPTJIT_EMU_CXX
#error "OPTJIT_EMU_CXX: the host C++ compiler kernels are built with"
#endif
#ifndef OPTJIT_EMU_FLAGS
#error "OPTJIT_EMU_FLAGS: the flags kernels are built with"
#endif
#ifndef OPTJIT_EMU_DEVICE_H
#error "OPTJIT_EMU_DEVICE_H: the path of the build tree's copy of tests/cuda_emu/device.h"
#endif
#ifndef OPTJIT_EMU_LINK
#error "OPTJIT_EMU_LINK: the linker flags that give a module the device runtime"
#endif

namespace {

// Real NVRTC's codes, for the ones returned here.
enum : int { kSuccess = 0, kInvalidInput = 3, kInvalidProgram = 4, kCompilation = 6 };

struct Program {
  std::string source, log, image;
};

// The "cubin": a tag, the shared object's size, then its bytes (cuModuleLoadData takes no
// size). driver.cpp reads the same layout.
constexpr char kTag[8] = {'O', 'P', 'T', 'J', 'E', 'M', 'U', '1'};

std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The PTX optjit's preamble writes as inline asm, as host calls (the L2 prefetch as a read of
// its byte, the asynchronous copies as device.h's lazy ones); any other asm is an error naming
// it.
bool replace_asm(std::string& src, std::string& log) {
  const std::pair<std::string, std::string> known[] = {
      {R"(asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));)", "f = optjit_emu_f16_to_f32(h);"},
      {R"(asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));)", "h = optjit_emu_f32_to_f16(f);"},
      {R"(asm volatile("prefetch.global.L2 [%0];" : : "l"(a));)", "optjit_emu_prefetch(a);"},
      {R"(asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(b));)", "y = optjit_emu_rcp(b);"},
      {R"(asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));)", "r = optjit_emu_rsqrt(x);"},
      {R"(asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" : : "r"((unsigned int)__cvta_generic_to_shared(s)), "l"(g) : "memory");)",
       "optjit_emu_cp_async(s, g, 16);"},
      {R"(asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" : : "r"((unsigned int)__cvta_generic_to_shared(s)), "l"(g) : "memory");)",
       "optjit_emu_cp_async(s, g, 4);"},
      {R"(asm volatile("cp.async.commit_group;" : : : "memory");)", "optjit_emu_cp_commit();"},
      {R"(asm volatile("cp.async.wait_group %0;" : : "n"(N) : "memory");)",
       "optjit_emu_cp_wait(N);"},
  };
  for (const auto& [from, to] : known)
    for (size_t at; (at = src.find(from)) != std::string::npos;) src.replace(at, from.size(), to);
  size_t at = std::min(src.find("asm("), src.find("asm volatile("));
  if (at != std::string::npos) {
    log +=
        "the CUDA emulator cannot run this inline PTX: " + src.substr(at, src.find(';', at) - at) +
        "\n";
    return false;
  }
  return true;
}

std::string read_file(const std::string& path) {
  std::stringstream bytes;
  bytes << std::ifstream(path, std::ios::binary).rdbuf();
  return bytes.str();
}

// What a module's build depends on besides its source: device.h, the compiler and its flags
// (the device runtime's code is not built into a module: it is linked, and loaded at its load).
std::string build_inputs() {
  return read_file(OPTJIT_EMU_DEVICE_H) + OPTJIT_EMU_CXX + OPTJIT_EMU_FLAGS + OPTJIT_EMU_LINK;
}

uint64_t fnv1a(const std::string& text) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Built modules by what they were built from, in $OPTJIT_EMU_CACHE (unset: none), under a
// folder named by the hash of the build's inputs (device.h, the compiler, its flags):
// <key>.cpp, the source with those inputs after it, and <key>.so. A module is taken only when
// its recorded text equals this compile's, so a hash collision is a miss. The first module a
// process stores removes the other inputs' folders: no build of this NVRTC can take those, and
// each is about 185 MB (the emulated suites' 389 modules). The same kernel source is built over
// and over by the emulated suites (56 compiles of 32 distinct sources in CudaParity and
// CudaDeviceStep's Adam cases, whose executors pass no kernel cache), and by every later run.
// Files are written under temporary names and renamed, so processes sharing the folder never
// read half of one.
class ModuleCache {
 public:
  explicit ModuleCache(const std::string& source) {
    const char* dir = std::getenv("OPTJIT_EMU_CACHE");
    if (!dir || !*dir) return;
    const std::string inputs = build_inputs();
    text_ = source + "\n// " + inputs;
    root_ = dir;
    folder_ = hex(fnv1a(inputs));
    base_ = root_ + "/" + folder_ + "/" + hex(fnv1a(text_));
  }
  // The module built from this text before, or empty.
  std::string find() const {
    if (base_.empty() || read_file(base_ + ".cpp") != text_) return {};
    return read_file(base_ + ".so");
  }
  void store(const std::string& object) const {
    if (base_.empty()) return;
    namespace fs = std::filesystem;
    std::error_code ec;
    {  // once per cache folder and process
      static std::mutex mutex;
      static std::set<std::string> pruned;
      std::lock_guard<std::mutex> lock(mutex);
      if (pruned.insert(root_).second)
        for (const auto& e : fs::directory_iterator(root_, ec))
          if (e.is_directory(ec) && e.path().filename() != folder_) fs::remove_all(e.path(), ec);
    }
    fs::create_directories(fs::path(base_).parent_path(), ec);
    static std::atomic<unsigned> stores{0};  // threads of one process storing at once
    const std::string tmp =
        base_ + "." + std::to_string(::getpid()) + "." + std::to_string(stores++);
    // The module first: a reader takes it only once the text that names it is in place.
    if (!write(tmp + ".so", object) || !write(tmp + ".cpp", text_)) return;
    fs::rename(tmp + ".so", base_ + ".so", ec);
    if (!ec) fs::rename(tmp + ".cpp", base_ + ".cpp", ec);
    fs::remove(tmp + ".so", ec);
    fs::remove(tmp + ".cpp", ec);
  }

 private:
  static bool write(const std::string& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary);
    f << bytes;
    return static_cast<bool>(f.flush());
  }
  static std::string hex(uint64_t h) {
    char s[17];
    std::snprintf(s, sizeof(s), "%016llx", static_cast<unsigned long long>(h));
    return s;
  }
  std::string text_, root_, folder_, base_;
};

}  // namespace

extern "C" {

using nvrtcProgram = Program*;

const char* nvrtcGetErrorString(int r) {
  switch (r) {
    case kSuccess:
      return "NVRTC_SUCCESS";
    case kInvalidInput:
      return "NVRTC_ERROR_INVALID_INPUT";
    case kInvalidProgram:
      return "NVRTC_ERROR_INVALID_PROGRAM";
    case kCompilation:
      return "NVRTC_ERROR_COMPILATION";
    default:
      return "NVRTC_ERROR unknown";
  }
}

// Version 0.<hash of device.h, the compiler and the flags>: kernel caches key cubins by NVRTC's
// version, so the emulator's never meet a GPU's, nor those built against another device.h, by
// another compiler or with other flags (a module built without the alignment checks).
int nvrtcVersion(int* major, int* minor) {
  *major = 0;
  *minor = static_cast<int>(fnv1a(build_inputs()) % 1000000u);
  return kSuccess;
}

int nvrtcCreateProgram(nvrtcProgram* prog, const char* src, const char*, int num_headers,
                       const char* const*, const char* const*) {
  if (!prog || !src) return kInvalidInput;
  if (num_headers != 0) return kInvalidInput;  // optjit's sources include nothing
  *prog = new Program{src, {}, {}};
  return kSuccess;
}

int nvrtcDestroyProgram(nvrtcProgram* prog) {
  if (!prog || !*prog) return kInvalidProgram;
  delete *prog;
  *prog = nullptr;
  return kSuccess;
}

int nvrtcCompileProgram(nvrtcProgram p, int num_options, const char* const* options) {
  if (!p) return kInvalidProgram;
  std::string arch = "sm_90";
  for (int i = 0; i < num_options; ++i)
    if (std::strncmp(options[i], "--gpu-architecture=", 19) == 0) arch = options[i] + 19;
  std::string src = p->source;
  if (!replace_asm(src, p->log)) return kCompilation;
  std::vector<std::string> kernels;
  const std::regex entry(
      R"(extern "C" __global__ void\s+(?:__launch_bounds__\([^)]*\)\s*)?(\w+)\s*\()");
  for (auto it = std::sregex_iterator(src.begin(), src.end(), entry); it != std::sregex_iterator();
       ++it)
    kernels.push_back((*it)[1]);
  src += "\n";
  for (const auto& k : kernels) src += "OPTJIT_EMU_KERNEL(" + k + ")\n";
  // The "cubin" and ptxas' lines for each kernel.
  auto built = [&](const std::string& object) {
    const uint64_t size = object.size();
    p->image.assign(kTag, sizeof(kTag));
    p->image.append(reinterpret_cast<const char*>(&size), sizeof(size));
    p->image += object;
    for (const auto& k : kernels)
      p->log += "ptxas info    : Compiling entry function '" + k + "' for '" + arch +
                "'\nptxas info    : Used 32 registers, 0 bytes stack frame, 0 bytes spill "
                "stores, 0 bytes spill loads\n";
  };
  const ModuleCache cache(src);
  if (std::string object = cache.find(); !object.empty()) {
    built(object);
    return kSuccess;
  }

  char dir_template[] = "/tmp/optjit-cuda-emu-XXXXXX";
  const char* dir = ::mkdtemp(dir_template);
  if (!dir) {
    p->log += "the CUDA emulator could not make a temporary directory\n";
    return kCompilation;
  }
  const std::string base = dir, cpp = base + "/kernel.cpp", so = base + "/kernel.so",
                    out = base + "/compiler.log";
  std::ofstream(cpp) << src;
  // OPTJIT_EMU_CXX and OPTJIT_EMU_FLAGS (tests/CMakeLists.txt, which precompiles device.h with
  // them): -ffp-contract=off is NVRTC's --fmad=false; clang at -O0 (GCC at -O1 where there is
  // no clang) keeps compiles short, the emulator being for correctness, not speed; GCC's
  // -fno-gnu-unique keeps each module's objects its own (GNU "unique" symbols are shared by
  // every library loaded, RTLD_LOCAL or not; clang makes none).
  // The module links the device runtime (device_runtime.cpp), which runs its threads.
  const std::string cmd = std::string(OPTJIT_EMU_CXX) + " " + OPTJIT_EMU_FLAGS +
                          " -shared -include " + quoted(OPTJIT_EMU_DEVICE_H) + " -o " + quoted(so) +
                          " " + quoted(cpp) + " " + OPTJIT_EMU_LINK + " > " + quoted(out) + " 2>&1";
  const int status = std::system(cmd.c_str());
  bool ok = status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (ok) {
    const std::string object = read_file(so);
    built(object);
    cache.store(object);
  } else {
    p->log += "the CUDA emulator's host compile failed (" + cmd + "):\n" + read_file(out);
  }
  std::error_code ec;
  if (!std::getenv("OPTJIT_EMU_KEEP")) std::filesystem::remove_all(base, ec);
  return ok ? kSuccess : kCompilation;
}

int nvrtcGetCUBINSize(nvrtcProgram p, size_t* size) {
  if (!p || !size) return kInvalidInput;
  *size = p->image.size();
  return kSuccess;
}

int nvrtcGetCUBIN(nvrtcProgram p, char* out) {
  if (!p || !out) return kInvalidInput;
  std::memcpy(out, p->image.data(), p->image.size());
  return kSuccess;
}

int nvrtcGetProgramLogSize(nvrtcProgram p, size_t* size) {
  if (!p || !size) return kInvalidInput;
  *size = p->log.size() + 1;
  return kSuccess;
}

int nvrtcGetProgramLog(nvrtcProgram p, char* out) {
  if (!p || !out) return kInvalidInput;
  std::memcpy(out, p->log.c_str(), p->log.size() + 1);
  return kSuccess;
}

}  // extern "C"
