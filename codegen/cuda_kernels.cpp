#include "codegen/cuda_kernels.h"

#include <chrono>

#include <nlohmann/json.hpp>

#include "cache/kernel_cache.h"
#include "codegen/c_emitter.h"
#include "ir/text.h"

namespace optjit::codegen {

Expected<CubinResult> plan_cubin(const plan::Plan& plan, const std::string& arch,
                                 const GpuLaunch& launch, cache::KernelCache* cache,
                                 bool device_step) {
  OPTJIT_TRY(launch.validate());
  auto t0 = std::chrono::steady_clock::now();
  // The source is cheap to write and keys the cubin, so an emitter change never loads a stale one.
  auto src = emit_c(plan, {CLanguage::cuda, launch, device_step});
  if (!src) return src.error();
  cache::KernelKey key{cubin_fingerprint_id(arch),
                       fmt::format("{:016x}", ir::structural_hash(plan.program)),
                       source_variant(device_step ? "cuda-step" : "cuda", launch, *src)};
  if (cache) {
    if (auto e = cache->get(key)) {
      CubinResult r;
      r.from_cache = true;
      r.cubin.arch = arch;
      r.cubin.image.assign(e->payload.begin(), e->payload.end());
      auto j = nlohmann::json::parse(e->resources, nullptr, false);
      if (j.is_array())
        for (const auto& k : j)
          r.cubin.kernels.push_back({k.value("name", ""), k.value("registers", 0),
                                     k.value("spill_stores", 0), k.value("spill_loads", 0),
                                     k.value("shared_bytes", 0)});
      r.cubin.compile_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return r;
    }
    if (cache->strict())
      return make_error("kernel cache miss in strict mode for the {} kernels of this pipeline: {}",
                        arch, cache->explain_miss(key));
  }
  auto cubin = compile_cubin(*src, arch);
  if (!cubin) return cubin.error();
  if (cache) {
    nlohmann::json res = nlohmann::json::array();
    for (const auto& k : cubin->kernels)
      res.push_back({{"name", k.name},
                     {"registers", k.registers},
                     {"spill_stores", k.spill_stores},
                     {"spill_loads", k.spill_loads},
                     {"shared_bytes", k.shared_bytes}});
    cache::KernelEntry e{key,
                         "cubin",
                         std::vector<uint8_t>(cubin->image.begin(), cubin->image.end()),
                         res.dump(),
                         cubin->compile_seconds,
                         0,
                         0,
                         ""};
    (void)cache->put(e);
    if (auto winner = cache->get(key))
      cubin->image.assign(winner->payload.begin(), winner->payload.end());
  }
  return CubinResult{std::move(*cubin), false};
}

}  // namespace optjit::codegen
