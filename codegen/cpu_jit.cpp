#include "codegen/cpu_jit.h"

#include <fmt/format.h>
#include <llvm/ADT/STLExtras.h>
#include <llvm/ADT/StringMap.h>
#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/JITLink/JITLinkMemoryManager.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ObjectLinkingLayer.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Object/ELFObjectFile.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/DynamicLibrary.h>
#include <llvm/Support/Host.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>

#include <xxhash.h>

#include <pthread.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string_view>

#include "cache/kernel_cache.h"
#include "codegen/llvm_emitter.h"
#include "codegen/version.h"
#include "ir/text.h"

namespace optjit::codegen {

namespace {

void init_llvm() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
}

std::string to_string(llvm::Error e) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << e;
  return os.str();
}

Expected<std::unique_ptr<llvm::TargetMachine>> target_machine(const CpuTarget& t) {
  init_llvm();
  std::string err;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(t.triple, err);
  if (!target) return make_error("LLVM has no target for {}: {}", t.triple, err);
  llvm::TargetOptions opts;  // IEEE: no fast-math, no FMA contraction
  opts.AllowFPOpFusion = llvm::FPOpFusion::Strict;
  std::unique_ptr<llvm::TargetMachine> tm(
      target->createTargetMachine(t.triple, t.cpu, t.features, opts, llvm::Reloc::PIC_, llvm::None,
                                  llvm::CodeGenOpt::Aggressive));
  if (!tm) return make_error("LLVM cannot make a target machine for {} ({})", t.triple, t.cpu);
  return tm;
}

// glibc's vector math library (libmvec: powf, expf, logf, cosf 8 lanes at a time with AVX2,
// 4 with SSE), loaded into the process once, so that the JIT's kernels can call it. Without
// it an element's pow, exp, log or cos was a scalar libm call: MADGRAD's cube root made its
// step 1.4x torch_optimizer's instead of the 4-5x of the other examples.
bool have_libmvec() {
  static const bool loaded = !llvm::sys::DynamicLibrary::LoadLibraryPermanently("libmvec.so.1");
  return loaded;
}

// Whether the vectorizer may call libmvec for a target: x86-64 with AVX2 (the 8-lane variants
// use ymm registers).
bool vector_math(const llvm::TargetMachine& tm) {
  return have_libmvec() && tm.getTargetTriple().getArch() == llvm::Triple::x86_64 &&
         tm.getTargetFeatureString().contains("+avx2");
}

void optimize(llvm::Module& m, llvm::TargetMachine& tm) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(&tm);
  // Registered before the defaults, so that this one is used.
  llvm::TargetLibraryInfoImpl tlii(tm.getTargetTriple());
  if (vector_math(tm))
    tlii.addVectorizableFunctionsFromVecLib(llvm::TargetLibraryInfoImpl::LIBMVEC_X86);
  fam.registerPass([&] { return llvm::TargetLibraryAnalysis(tlii); });
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(m, mam);
}

// The features the LLVM emitter chooses its paths by (byte permutes, gathers, vector widths).
constexpr std::string_view kEmitterFeatures[] = {"avx2",       "avx512bw",       "avx512f",
                                                 "avx512vbmi", "prefer-256-bit", "fast-gather"};

// LLVM's model of `cpu` (its features and tunings) with `features` changed, null for a CPU LLVM
// does not know.
std::unique_ptr<llvm::MCSubtargetInfo> subtarget(const std::string& triple, const std::string& cpu,
                                                 const std::string& features = "") {
  std::string err;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple, err);
  if (!target) return nullptr;
  // Asked of the generic CPU first: making an unknown one's prints a warning.
  std::unique_ptr<llvm::MCSubtargetInfo> generic(target->createMCSubtargetInfo(triple, "", ""));
  if (!generic || !generic->isCPUStringValid(cpu)) return nullptr;
  return std::unique_ptr<llvm::MCSubtargetInfo>(
      target->createMCSubtargetInfo(triple, cpu, features));
}

// The target's features with the emitter's (kEmitterFeatures) as LLVM resolves them, spelled
// last so that they win the emitter's parse: taking a feature away takes what implies it, so
// OPTJIT_CPU_FEATURES=-avx512f leaves no AVX-512 BW or VBMI (and -fma no AVX-512 at all; the
// emitter read the string alone, chose its VBMI permutes for a target without AVX-512, and LLVM
// stopped the process: "Do not know how to split the result of this operator"), and the CPU's
// tunings the host's feature list does not carry come from LLVM's model of it (prefer-256-bit:
// Skylake-SP, where 512-bit code lowers the clock; fast-gather).
std::string emitter_features(const CpuTarget& t) {
  const auto sti = subtarget(t.triple, t.cpu, t.features);
  if (!sti) return t.features;
  std::string f;  // the rest, in their order (each of the emitter's is spelled once, below)
  for (llvm::StringRef rest = t.features; !rest.empty();) {
    auto [entry, tail] = rest.split(',');
    rest = tail;
    if (!entry.empty() &&
        !llvm::is_contained(kEmitterFeatures, std::string_view(entry.drop_front())))
      f += fmt::format("{}{}", f.empty() ? "" : ",", std::string_view(entry));
  }
  for (std::string_view name : kEmitterFeatures)
    f += fmt::format("{}{}{}", f.empty() ? "" : ",",
                     sti->checkFeatures(std::string("+").append(name)) ? "+" : "-", name);
  return f;
}

Expected<std::unique_ptr<llvm::Module>> build_module(const plan::Plan& plan, llvm::LLVMContext& ctx,
                                                     llvm::TargetMachine& tm, const CpuTarget& t,
                                                     bool optimized, int interleave) {
  auto m = std::make_unique<llvm::Module>("optjit", ctx);
  m->setTargetTriple(t.triple);
  m->setDataLayout(tm.createDataLayout());
  OPTJIT_TRY(emit_llvm(plan, *m, t.cpu, emitter_features(t), interleave));
  if (optimized) optimize(*m, tm);
  return m;
}

}  // namespace

std::string llvm_version() { return LLVM_VERSION_STRING; }

CpuTarget CpuTarget::host() {
  init_llvm();
  CpuTarget t;
  t.triple = llvm::sys::getProcessTriple();
  t.cpu = llvm::sys::getHostCPUName().str();
  llvm::StringMap<bool> features;
  std::vector<std::string> on;
  if (llvm::sys::getHostCPUFeatures(features))
    for (const auto& f : features) on.push_back((f.second ? "+" : "-") + f.first().str());
  std::sort(on.begin(), on.end());  // deterministic: the feature string is part of cache keys
  for (const auto& f : on) t.features += (t.features.empty() ? "" : ",") + f;
  // Features to change, after the host's (the last mention wins): "-avx512bw" compiles for a
  // CPU without it (the paths it takes there, a cache for such CPUs). Part of the cache key.
  if (const char* more = std::getenv("OPTJIT_CPU_FEATURES"); more && *more)
    t.features += (t.features.empty() ? "" : ",") + std::string(more);
  return t;
}

Status check_cpu_feature_changes() {
  const char* env = std::getenv("OPTJIT_CPU_FEATURES");
  if (!env || !*env) return Status::Ok();
  init_llvm();
  // The host reports every instruction set LLVM detects on this architecture, had or lacked.
  // (LLVM 15 has no list of all a target's features that would not print a warning for a name
  // it lacks; tunings other than the emitter's own are not taken.)
  llvm::StringMap<bool> host;
  llvm::sys::getHostCPUFeatures(host);
  std::string_view rest = env;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view entry = rest.substr(0, comma);
    const std::string_view name = entry.empty() ? entry : entry.substr(1);
    const auto it = host.find(llvm::StringRef(name.data(), name.size()));
    const bool known = it != host.end() || llvm::is_contained(kEmitterFeatures, name);
    if (entry.empty() || (entry[0] != '+' && entry[0] != '-') || !known) {
      std::vector<std::string_view> tunings;
      for (std::string_view f : kEmitterFeatures)
        if (!host.count(llvm::StringRef(f.data(), f.size()))) tunings.push_back(f);
      return make_error(
          "OPTJIT_CPU_FEATURES='{}': '{}' is not '+' or '-' and an instruction set LLVM {} "
          "detects on {} (or {}); entries are separated by commas, e.g. '-avx512bw,-avx512vbmi'",
          env, entry, llvm_version(), llvm::sys::getProcessTriple(), fmt::join(tunings, ", "));
    }
    if (entry[0] == '+' && it != host.end() && !it->second)
      return make_error(
          "OPTJIT_CPU_FEATURES='{}': this CPU ({}) has no '{}', and code using it would stop the "
          "process with an illegal instruction; only what it has can be added (anything can be "
          "taken away)",
          env, llvm::sys::getHostCPUName().str(), name);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return Status::Ok();
}

std::string CpuTarget::exact() const {
  // Kernels may call libmvec where it was loaded: a machine without it needs its own.
  return fmt::format("cpu|{}|{}|{}|llvm {}|codegen {}{}", triple, cpu, features, llvm_version(),
                     kCodegenVersion, have_libmvec() ? "|libmvec" : "");
}

std::string CpuTarget::exact_id() const {
  std::string e = exact();
  return fmt::format("{:016x}", XXH3_64bits(e.data(), e.size()));
}

Expected<CpuTarget> CpuTarget::named(const std::string& cpu) {
  init_llvm();
  CpuTarget t{llvm::sys::getProcessTriple(), cpu, ""};
  if (!subtarget(t.triple, cpu))
    return make_error(
        "'{}' is not a CPU LLVM {} knows for {} (e.g. haswell, skylake-avx512, "
        "znver3; this machine's is '{}')",
        cpu, llvm_version(), t.triple, llvm::sys::getHostCPUName().str());
  // The features the emitter chooses its paths by (byte permutes, gathers, vector widths)
  // spelled out as the host's are, that CPU's: `optjit emit --cpu icelake-server` shows the
  // code that CPU runs (the target-cpu attribute brings the rest).
  t.features = emitter_features(t);
  return t;
}

Expected<std::string> emit_cpu_ir(const plan::Plan& plan, bool optimized, const CpuTarget& target,
                                  int interleave) {
  auto tm = target_machine(target);
  if (!tm) return tm.error();
  llvm::LLVMContext ctx;
  auto m = build_module(plan, ctx, **tm, target, optimized, interleave);
  if (!m) return m.error();
  std::string s;
  llvm::raw_string_ostream os(s);
  (*m)->print(os, nullptr);
  return os.str();
}

CpuKernels::~CpuKernels() = default;

namespace {

// The machine code of a plan as the JIT loads it (an ELF object) or as assembly text: the same
// module and target machine either way.
Expected<std::vector<char>> machine_code(const plan::Plan& plan, const CpuTarget& target,
                                         int interleave, llvm::CodeGenFileType kind) {
  auto tm = target_machine(target);
  if (!tm) return tm.error();
  llvm::LLVMContext ctx;
  auto m = build_module(plan, ctx, **tm, target, true, interleave);
  if (!m) return m.error();
  llvm::SmallVector<char, 0> buf;
  llvm::raw_svector_ostream os(buf);
  llvm::legacy::PassManager pm;
  if ((*tm)->addPassesToEmitFile(pm, os, nullptr, kind))
    return make_error("LLVM cannot emit {} for {}",
                      kind == llvm::CGFT_ObjectFile ? "object code" : "assembly", target.cpu);
  pm.run(**m);
  return std::vector<char>(buf.begin(), buf.end());
}

Expected<std::vector<char>> object_code(const plan::Plan& plan, const CpuTarget& target,
                                        int interleave) {
  return machine_code(plan, target, interleave, llvm::CGFT_ObjectFile);
}

// With OPTJIT_PERF_MAP set, each JIT'd pass is appended to /tmp/perf-<pid>.map, the file
// `perf report` reads for a process's JIT code, as "optjit_pass_<k> <program hash>", so a
// profile names the kernels instead of showing bare addresses. Sizes come from the object's
// symbol table. A map that cannot be written is skipped: profiling is never a reason to fail.
void write_perf_map(const std::vector<uint8_t>& object, const std::vector<PassFn>& passes,
                    const std::string& program) {
  const char* env = std::getenv("OPTJIT_PERF_MAP");
  if (!env || !*env || std::string(env) == "0") return;
  auto obj = llvm::object::ObjectFile::createObjectFile(llvm::MemoryBufferRef(
      llvm::StringRef(reinterpret_cast<const char*>(object.data()), object.size()), "kernels"));
  if (!obj) {
    llvm::consumeError(obj.takeError());
    return;
  }
  const auto* elf = llvm::dyn_cast<llvm::object::ELFObjectFileBase>(obj->get());
  if (!elf) return;
  std::vector<uint64_t> sizes(passes.size(), 0);
  for (const llvm::object::ELFSymbolRef sym : elf->symbols()) {
    auto name = sym.getName();
    if (!name) {
      llvm::consumeError(name.takeError());
      continue;
    }
    for (size_t p = 0; p < passes.size(); ++p)
      if (*name == pass_symbol(p)) sizes[p] = sym.getSize();
  }
  static std::mutex m;
  std::lock_guard<std::mutex> lock(m);
  std::FILE* f = std::fopen(fmt::format("/tmp/perf-{}.map", ::getpid()).c_str(), "a");
  if (!f) return;
  for (size_t p = 0; p < passes.size(); ++p)
    std::fputs(fmt::format("{:x} {:x} {} {}\n", reinterpret_cast<uintptr_t>(passes[p]), sizes[p],
                           pass_symbol(p), program)
                   .c_str(),
               f);
  std::fclose(f);
}

// The process's JIT'd kernels: one LLJIT per target, and in it one JITDylib per distinct object
// (by its bytes), loaded by the first CpuKernels that runs it and kept for the life of the
// process, shared by every optimizer that runs the same program. LLVM 15's JITLink leaves an
// object's pages mapped when it is removed (its resource tracker removed, or its LLJIT
// destroyed: two mappings of 4 KiB stayed per object, measured), so an LLJIT per optimizer
// mapped pages at every optimizer made (optjit.torch makes one per set of parameters with
// gradients: with layers dropped at random, nearly every step) until the process reached its
// limit of mappings (vm.max_map_count, 65530), where every mmap fails. Kept objects are
// bounded by the distinct programs a process runs (hyperparameters are not in the code).
class Loader {
 public:
  static Loader& get() {
    // Never destroyed: an LLJIT destroyed among the process's static destructors can outlive
    // the LLVM objects it uses.
    static Loader* loader = new Loader();
    return *loader;
  }

  Expected<std::vector<PassFn>> load(const std::vector<uint8_t>& object, const CpuTarget& target,
                                     size_t passes) {
    const XXH128_hash_t h = XXH3_128bits(object.data(), object.size());
    const std::string name =
        fmt::format("optjit-{:016x}{:016x}-{}", h.high64, h.low64, object.size());
    const std::string where = target.triple + "|" + target.cpu + "|" + target.features;
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = loaded_.find({where, name}); it != loaded_.end()) return it->second;
    auto jit = this->jit(where, target);
    if (!jit) return jit.error();
    auto jd = (*jit)->createJITDylib(name);
    if (!jd) return make_error("the LLVM JIT: {}", to_string(jd.takeError()));
    jd->addToLinkOrder((*jit)->getMainJITDylib());  // (libm, libmvec)
    // An object that fails takes its JITDylib with it: the next try makes the name again.
    auto failed = [&](Error e) {
      llvm::consumeError((*jit)->getExecutionSession().removeJITDylib(*jd));
      return e;
    };
    auto buffer = llvm::MemoryBuffer::getMemBufferCopy(
        llvm::StringRef(reinterpret_cast<const char*>(object.data()), object.size()),
        "optjit-kernels");
    if (auto e = (*jit)->addObjectFile(*jd, std::move(buffer)))
      return failed(make_error("the LLVM JIT rejected the kernels' object code: {}",
                               to_string(std::move(e))));
    std::vector<PassFn> fns;
    for (size_t p = 0; p < passes; ++p) {
      auto sym = (*jit)->lookup(*jd, pass_symbol(p));
      if (!sym)
        return failed(
            make_error("JIT linking of pass {} failed: {}", p, to_string(sym.takeError())));
      fns.push_back(sym->toPtr<void(const TensorRow*, const Chunk*, int64_t, int64_t, double*)>());
    }
    loaded_[{where, name}] = fns;
    return fns;
  }

 private:
  Loader() {
    // A fork taken while another thread loads would leave the child's lock held: forks wait.
    pthread_atfork([] { get().mu_.lock(); }, [] { get().mu_.unlock(); },
                   [] { get().mu_.unlock(); });
  }

  Expected<llvm::orc::LLJIT*> jit(const std::string& where, const CpuTarget& target) {
    if (auto it = jits_.find(where); it != jits_.end()) return it->second.get();
    auto jtmb = llvm::orc::JITTargetMachineBuilder(llvm::Triple(target.triple));
    jtmb.setCPU(target.cpu);
    jtmb.setCodeGenOptLevel(llvm::CodeGenOpt::Aggressive);
    jtmb.getOptions().AllowFPOpFusion = llvm::FPOpFusion::Strict;
    if (!target.features.empty()) jtmb.getFeatures().AddFeature(target.features);
    // JITLink with one in-process slab per object: code, constants and tables are allocated
    // together, so the small code model's 32-bit PC-relative references always reach. (The
    // default RuntimeDyld maps each section on its own; in a process with a big address space,
    // such as Python with torch loaded, a constant table could land more than 2 GiB from the
    // code and its loads read wild addresses.)
    auto jit =
        llvm::orc::LLJITBuilder()
            .setJITTargetMachineBuilder(std::move(jtmb))
            .setObjectLinkingLayerCreator(
                [](llvm::orc::ExecutionSession& es,
                   const llvm::Triple&) -> llvm::Expected<std::unique_ptr<llvm::orc::ObjectLayer>> {
                  auto mm = llvm::jitlink::InProcessMemoryManager::Create();
                  if (!mm) return mm.takeError();
                  return std::make_unique<llvm::orc::ObjectLinkingLayer>(es, std::move(*mm));
                })
            .create();
    if (!jit) return make_error("cannot start the LLVM JIT: {}", to_string(jit.takeError()));
    // libm (expf, powf, ...) and libmvec (their vector forms) for the few ops LLVM lowers to
    // calls; every object's JITDylib links against the main one, which finds them.
    (void)have_libmvec();
    auto gen = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
        (*jit)->getDataLayout().getGlobalPrefix());
    if (!gen)
      return make_error("cannot search this process's symbols: {}", to_string(gen.takeError()));
    (*jit)->getMainJITDylib().addGenerator(std::move(*gen));
    return (jits_[where] = std::move(*jit)).get();
  }

  std::mutex mu_;
  std::map<std::string, std::unique_ptr<llvm::orc::LLJIT>> jits_;              // by target
  std::map<std::pair<std::string, std::string>, std::vector<PassFn>> loaded_;  // (target, object)
};

}  // namespace

Expected<std::string> emit_cpu_asm(const plan::Plan& plan, const CpuTarget& target,
                                   int interleave) {
  auto text = machine_code(plan, target, interleave, llvm::CGFT_AssemblyFile);
  if (!text) return text.error();
  return std::string(text->begin(), text->end());
}

Expected<std::unique_ptr<CpuKernels>> CpuKernels::compile(const plan::Plan& plan,
                                                          cache::KernelCache* cache,
                                                          int interleave) {
  auto t0 = std::chrono::steady_clock::now();
  OPTJIT_TRY(check_cpu_feature_changes());
  CpuTarget target = CpuTarget::host();
  // The key carries a hash of the module as emitted (before optimization), as the CUDA and
  // OpenCL keys carry their source's, so an emitter change never loads stale object code.
  auto ir = emit_cpu_ir(plan, false, target, interleave);
  if (!ir) return ir.error();
  cache::KernelKey key{
      target.exact_id(), fmt::format("{:016x}", ir::structural_hash(plan.program)),
      cache::source_variant(
          interleave > 0 ? fmt::format("cpu-o3-interleave={}", interleave) : "cpu-o3", *ir)};
  auto built = cache::cached_compile(
      cache, key, "elf-object", "the cpu kernels", [&]() -> Expected<cache::Compiled> {
        auto o = object_code(plan, target, interleave);
        if (!o) return o.error();
        return cache::Compiled{std::vector<uint8_t>(o->begin(), o->end()), "{}"};
      });
  if (!built) return built.error();
  const bool hit = built->from_cache;
  const std::vector<uint8_t>& object = built->payload;

  auto passes = Loader::get().load(object, target, plan.passes.size());
  if (!passes) return passes.error();
  write_perf_map(object, *passes, key.program);
  std::unique_ptr<CpuKernels> k(new CpuKernels());
  k->passes_ = std::move(*passes);
  k->from_cache_ = hit;
  k->seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return k;
}

}  // namespace optjit::codegen
