// libFuzzer target: the optjit command line, in-process, with an argument vector made of the
// input's NUL-separated strings. Every vector ends in an exit code and at most a one-line
// error: never a crash, an abort or an uncaught exception.
//
// It runs in a sandbox directory (parameters, gradients and a pipeline file are there): an
// argument naming a path outside it ('/' or '..') is not run, nor are commands that time or
// tune (bench, tune) or need a device (devices, compile, an OpenCL backend), nor sizes beyond
// 999 (so a step count or a tensor stays small). The bounds of sizes are the CLI tests' job.
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/safetensors.h"

namespace optjit::cli {
int main_with_args(int argc, char** argv);
}

namespace {

struct Sandbox {
  std::string dir = "/dev/shm/optjit-cli-fuzz-" + std::to_string(::getpid());
  Sandbox() {
    ::mkdir(dir.c_str(), 0700);
    if (::chdir(dir.c_str()) != 0) __builtin_trap();
    ::setenv("OPTJIT_CACHE_DIR", (dir + "/kc").c_str(), 1);
    using optjit::runtime::HostTensor;
    optjit::runtime::TensorFile p, g;
    p.tensors.push_back(HostTensor::zeros("w", optjit::DType::f32, {8}));
    p.tensors.push_back(HostTensor::zeros("b", optjit::DType::bf16, {3}));
    g = p;
    for (int i = 0; i < 8; ++i) g.tensors[0].set(i, 0.25 * i - 1);
    if (!optjit::runtime::write_safetensors("p.st", p) ||
        !optjit::runtime::write_safetensors("g.st", g))
      __builtin_trap();
    FILE* f = std::fopen("a.opt", "w");
    std::fputs("chain(clip_grad_norm(max_norm=1.0), adamw(lr=0.01))\n", f);
    std::fclose(f);
  }
  ~Sandbox() {  // /dev/shm is RAM: nothing stays behind a run
    if (::chdir("/") == 0) std::filesystem::remove_all(dir);
  }
};

bool allowed(const std::vector<std::string>& args) {
  if (args.empty() || args.size() > 24) return false;
  static const char* kCommands[] = {"run", "plan", "emit", "list", "inspect", "synth", "cache"};
  bool known = false;
  for (const char* c : kCommands) known = known || args[0] == c;
  if (!known) return false;
  for (const auto& a : args) {
    if (a.size() > 200 || a.find('/') != std::string::npos || a.rfind("..", 0) == 0) return false;
    if (a.find("opencl") != std::string::npos || a.find("gpt") != std::string::npos ||
        a.find("mlp") != std::string::npos)
      return false;
    size_t digits = 0;
    for (char c : a) {
      digits = (c >= '0' && c <= '9') ? digits + 1 : 0;
      if (digits > 3) return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Sandbox box;
  std::vector<std::string> args;
  std::string cur;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      args.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(static_cast<char>(data[i]));
    }
  }
  if (!cur.empty()) args.push_back(cur);
  if (!allowed(args)) return 0;
  std::vector<std::string> storage = {"optjit"};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : storage) argv.push_back(s.data());
  argv.push_back(nullptr);
  int rc = optjit::cli::main_with_args(static_cast<int>(storage.size()), argv.data());
  if (rc != 0 && rc != 1) __builtin_trap();  // 0: done, 1: an error that says why
  return 0;
}
