// libFuzzer target: any bytes as a .safetensors file give tensors or a one-line error, never a
// crash, a hang or an allocation the file does not justify. What is accepted is consistent
// (each tensor's bytes match its shape) and writes back to a file that reads back the same.
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "runtime/safetensors.h"
#include "tests/fuzz/input_file.h"

namespace {

// A directory in memory for the round trip, removed when the run ends (/dev/shm is RAM).
struct ScratchDir {
  std::string path = "/dev/shm/optjit-st-fuzz-" + std::to_string(::getpid());
  ScratchDir() { ::mkdir(path.c_str(), 0700); }
  ~ScratchDir() { std::filesystem::remove_all(path); }
};

std::string scratch_dir() {
  static const ScratchDir dir;
  return dir.path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace optjit::runtime;
  auto file = read_safetensors(optjit::fuzz::InputFile(data, size).path());
  if (!file) {
    if (file.error().message.empty()) __builtin_trap();  // every error says something
    return 0;
  }
  for (const auto& t : file->tensors)
    if (t.data.size() != static_cast<size_t>(t.numel()) * optjit::size_bytes(t.dtype))
      __builtin_trap();
  const std::string out = scratch_dir() + "/roundtrip.safetensors";
  if (!write_safetensors(out, *file)) __builtin_trap();
  auto back = read_safetensors(out);
  if (!back || back->tensors.size() != file->tensors.size() || back->metadata != file->metadata)
    __builtin_trap();
  for (const auto& t : file->tensors) {
    const HostTensor* u = back->find(t.name);
    if (!u || u->data != t.data || u->shape != t.shape || u->dtype != t.dtype) __builtin_trap();
  }
  return 0;
}
