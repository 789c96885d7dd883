// libFuzzer target: any bytes as a kernel bundle (`optjit cache import`) are imported or give
// a one-line error, never a crash; the user's cache stays usable either way.
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "cache/bundle.h"
#include "cache/kernel_cache.h"

namespace {

struct Sandbox {
  std::string dir = "/dev/shm/optjit-bundle-fuzz-" + std::to_string(::getpid());
  std::unique_ptr<optjit::cache::KernelCache> cache;
  Sandbox() {
    ::mkdir(dir.c_str(), 0700);
    ::setenv("OPTJIT_CACHE_DIR", (dir + "/cache").c_str(), 1);
    ::setenv("TMPDIR", dir.c_str(), 1);
    auto c = optjit::cache::KernelCache::open();
    if (!c) __builtin_trap();
    cache = std::move(*c);
  }
  ~Sandbox() {  // /dev/shm is RAM: nothing stays behind a run
    cache.reset();
    std::filesystem::remove_all(dir);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Sandbox box;
  const std::string path = box.dir + "/input.bundle";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  auto n = optjit::cache::import_bundle(*box.cache, path);
  if (!n && n.error().message.empty()) __builtin_trap();
  // The cache itself still answers.
  auto stats = box.cache->prune(-1, -1);
  (void)stats;
  return 0;
}
