#include "codegen/cuda_kernels.h"

#include <chrono>
#include <cstdlib>
#include <set>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cache/kernel_cache.h"
#include "codegen/c_emitter.h"
#include "ir/text.h"
#include "support/input_file.h"

namespace optjit::codegen {

namespace {
// An edited source is the emitted one with changes: a few hundred KiB at most.
constexpr uintmax_t kMaxSourceBytes = 64 << 20;
}  // namespace

Expected<std::string> edited_source(const std::string& path, const std::string& emitted) {
  auto text = support::read_file(path, kMaxSourceBytes);
  if (!text) return make_error("OPTJIT_CUDA_SOURCE: {}", text.error().message);
  const std::string& edited = *text;
  auto first = [](const std::string& s) { return s.substr(0, s.find('\n')); };
  if (first(edited) != first(emitted))
    return make_error(
        "OPTJIT_CUDA_SOURCE: '{}' was not written by optjit emit for these kernels: its first "
        "line is '{}', theirs '{}'",
        path, first(edited), first(emitted));
  // Every kernel the executor looks up must be there (a source emitted with another --step
  // has other kernels).
  auto kernels = [](const std::string& s) {
    std::set<std::string> names;
    for (size_t at = s.find("__global__"); at != std::string::npos;
         at = s.find("__global__", at + 1)) {
      const size_t open = s.find('(', at), name = s.rfind(' ', open) + 1;
      if (open != std::string::npos && name > at) names.insert(s.substr(name, open - name));
    }
    return names;
  };
  std::vector<std::string> missing;
  const std::set<std::string> have = kernels(edited);
  for (const std::string& k : kernels(emitted))
    if (!have.count(k)) missing.push_back(k);
  if (!missing.empty())
    return make_error("OPTJIT_CUDA_SOURCE: '{}' has no kernel {} (emitted with another --step?)",
                      path, fmt::join(missing, ", "));
  return edited;
}

Expected<CubinResult> plan_cubin(const plan::Plan& plan, const std::string& arch,
                                 const GpuLaunch& launch, cache::KernelCache* cache,
                                 bool device_step) {
  OPTJIT_TRY(launch.validate());
  auto t0 = std::chrono::steady_clock::now();
  // The source is cheap to write and keys the cubin, so an emitter change never loads a stale one.
  auto src = emit_c(plan, {CLanguage::cuda, launch, device_step});
  if (!src) return src.error();
  if (const char* path = std::getenv("OPTJIT_CUDA_SOURCE"); path && *path) {
    auto edited = edited_source(path, *src);
    if (!edited) return edited.error();
    src = std::move(*edited);
  }
  cache::KernelKey key{cubin_fingerprint_id(arch),
                       fmt::format("{:016x}", ir::structural_hash(plan.program)),
                       source_variant(device_step ? "cuda-step" : "cuda", launch, *src)};
  auto built = cache::cached_compile(
      cache, key, "cubin", fmt::format("the {} kernels", arch), [&]() -> Expected<cache::Compiled> {
        auto cubin = compile_cubin(*src, arch);
        if (!cubin) return cubin.error();
        nlohmann::json res = nlohmann::json::array();
        for (const auto& k : cubin->kernels)
          res.push_back({{"name", k.name},
                         {"registers", k.registers},
                         {"spill_stores", k.spill_stores},
                         {"spill_loads", k.spill_loads},
                         {"shared_bytes", k.shared_bytes}});
        return cache::Compiled{std::vector<uint8_t>(cubin->image.begin(), cubin->image.end()),
                               res.dump()};
      });
  if (!built) return built.error();
  CubinResult r;
  r.from_cache = built->from_cache;
  r.not_stored = built->not_stored;
  r.cubin.arch = arch;
  r.cubin.image.assign(built->payload.begin(), built->payload.end());
  auto j = nlohmann::json::parse(built->resources, nullptr, false);
  if (j.is_array())
    for (const auto& k : j)
      r.cubin.kernels.push_back({k.value("name", ""), k.value("registers", 0),
                                 k.value("spill_stores", 0), k.value("spill_loads", 0),
                                 k.value("shared_bytes", 0)});
  r.cubin.compile_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace optjit::codegen
