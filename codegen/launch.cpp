#include "codegen/launch.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <set>
#include <tuple>

namespace optjit::codegen {

namespace {
constexpr const char* kSharedTables = ",tables=shared";
constexpr const char* kPrefetch = ",prefetch=1";
constexpr const char* kRecompute = ",recompute=1";
constexpr const char* kInterleave = ",interleave=1";
constexpr const char* kAhead = ",ahead=";
constexpr const char* kStage = ",stage=";
constexpr const char* kResident = ",resident=";

// Whether a stored flag `key` starts `rest` (then `rest` is past it).
bool take_flag(std::string& rest, std::string_view key) {
  if (!rest.starts_with(key)) return false;
  rest = rest.substr(key.size());
  return true;
}
// A stored option "<key><integer>" at the start of `rest`: its value into `out` and `rest` past
// it. False where `rest` starts with `key` but no integer follows.
bool take_int(std::string& rest, std::string_view key, int& out) {
  if (!rest.starts_with(key)) return true;
  int n = 0;
  if (std::sscanf(rest.c_str() + key.size(), "%d%n", &out, &n) != 1) return false;
  rest = rest.substr(key.size() + static_cast<size_t>(n));
  return true;
}
}  // namespace

// The optional parameters' suffix, each only where it is not its default.
std::string GpuLaunch::options_suffix() const {
  return fmt::format("{}{}{}{}{}{}{}", shared_tables ? kSharedTables : "",
                     prefetch ? kPrefetch : "", recompute ? kRecompute : "",
                     interleave ? kInterleave : "",
                     ahead != 0 ? fmt::format("{}{}", kAhead, ahead) : "",
                     stage != 0 ? fmt::format("{}{}", kStage, stage) : "",
                     resident != kDefaultResident ? fmt::format("{}{}", kResident, resident) : "");
}

std::string GpuLaunch::to_string() const {
  return fmt::format("block={},items={},vec={},grid={},chunk={}{}", block, items, vec,
                     groups_per_unit, chunk_elements, options_suffix());
}

std::string GpuLaunch::code_variant() const {
  return fmt::format("block={},items={},vec={}{}", block, items, vec, options_suffix());
}

std::optional<GpuLaunch> GpuLaunch::parse(const std::string& s) {
  GpuLaunch g;
  long long chunk = 0;
  int used = 0;
  if (std::sscanf(s.c_str(), "block=%d,items=%d,vec=%d,grid=%d,chunk=%lld%n", &g.block, &g.items,
                  &g.vec, &g.groups_per_unit, &chunk, &used) != 5)
    return std::nullopt;
  // The options, each where set, in options_suffix's order; decisions stored before an option
  // existed lack it, and get its default.
  std::string rest = s.substr(static_cast<size_t>(used));
  g.shared_tables = take_flag(rest, kSharedTables);
  g.prefetch = take_flag(rest, kPrefetch);
  g.recompute = take_flag(rest, kRecompute);
  g.interleave = take_flag(rest, kInterleave);
  // ",ahead=0" and ",stage=0" are never stored (0 is the default), so they are no decision.
  const bool ahead = rest.starts_with(kAhead);
  if (!take_int(rest, kAhead, g.ahead) || (ahead && g.ahead == 0)) return std::nullopt;
  const bool stage = rest.starts_with(kStage);
  if (!take_int(rest, kStage, g.stage) || (stage && g.stage == 0)) return std::nullopt;
  if (!take_int(rest, kResident, g.resident) || !rest.empty()) return std::nullopt;
  g.chunk_elements = chunk;
  if (!g.validate()) return std::nullopt;
  return g;
}

GpuLaunch GpuLaunch::device_default(bool gpu) {
  GpuLaunch g;
  if (!gpu) g.block = 1;
  return g;
}

Expected<GpuLaunch> GpuLaunch::from_text(const std::string& s, const GpuLaunch& base) {
  GpuLaunch g = base;
  std::set<std::string> seen;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t comma = s.find(',', pos);
    if (comma == std::string::npos) comma = s.size();
    const std::string item = s.substr(pos, comma - pos);
    pos = comma + 1;
    const size_t eq = item.find('=');
    if (eq == std::string::npos)
      return make_error(
          "launch parameter '{}' is not name=value (block, items, vec, grid, chunk, tables, "
          "prefetch, recompute, interleave, ahead, stage, resident)",
          item);
    const std::string name = item.substr(0, eq), value = item.substr(eq + 1);
    static const std::set<std::string> kNames = {"block",      "items",  "vec",      "grid",
                                                 "chunk",      "tables", "prefetch", "recompute",
                                                 "interleave", "ahead",  "stage",    "resident"};
    if (!kNames.count(name))
      return make_error(
          "unknown launch parameter '{}' (block, items, vec, grid, chunk, tables, prefetch, "
          "recompute, interleave, ahead, stage, resident)",
          name);
    if (!seen.insert(name).second) return make_error("launch parameter {} is given twice", name);
    if (name == "tables") {
      if (value != "global" && value != "shared")
        return make_error("launch parameter tables: '{}' is not global or shared", value);
      g.shared_tables = value == "shared";
      continue;
    }
    if (name == "prefetch" || name == "recompute" || name == "interleave") {
      if (value != "0" && value != "1")
        return make_error("launch parameter {}: '{}' is not 0 or 1", name, value);
      (name == "prefetch"    ? g.prefetch
       : name == "recompute" ? g.recompute
                             : g.interleave) = value == "1";
      continue;
    }
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0')
      return make_error("launch parameter {}: '{}' is not an integer", name, value);
    // The value as given, in every message: never a wrapped or clamped one.
    constexpr long long kMaxChunk = 1LL << 40;
    if (errno == ERANGE || v > kMaxChunk ||
        (name != "chunk" &&
         (v > std::numeric_limits<int>::max() || v < std::numeric_limits<int>::min())))
      return make_error("launch parameter {}={} is out of range ({})", name, value,
                        name == "block"      ? "a power of two between 1 and 1024"
                        : name == "items"    ? "1..8"
                        : name == "vec"      ? "1, 2, 4 or 8"
                        : name == "grid"     ? "1..2147483647 blocks per unit"
                        : name == "resident" ? "a multiple of 32 in 32..2048 threads per SM"
                        : name == "ahead"    ? "0..8 trips"
                        : name == "stage"    ? "0..4 trips"
                                             : "1..2^40 elements");
    if (name == "block")
      g.block = static_cast<int>(v);
    else if (name == "items")
      g.items = static_cast<int>(v);
    else if (name == "vec")
      g.vec = static_cast<int>(v);
    else if (name == "grid")
      g.groups_per_unit = static_cast<int>(v);
    else if (name == "resident")
      g.resident = static_cast<int>(v);
    else if (name == "ahead")
      g.ahead = static_cast<int>(v);
    else if (name == "stage")
      g.stage = static_cast<int>(v);
    else
      g.chunk_elements = v;
  }
  OPTJIT_TRY(g.validate());
  return g;
}

GpuLaunch GpuLaunch::scalar() const {
  GpuLaunch g = *this;
  g.vec = 1;
  g.recompute = g.interleave = false;
  g.stage = 0;
  return g;
}

Status GpuLaunch::validate() const {
  if (block < 1 || block > 1024 || (block & (block - 1)) != 0)
    return make_error("block size {} is not a power of two between 1 and 1024", block);
  if (items < 1 || items > 8) return make_error("items per thread {} is not in 1..8", items);
  if (vec != 1 && vec != 2 && vec != 4 && vec != 8)
    return make_error("vector width {} is not 1, 2, 4 or 8", vec);
  if (groups_per_unit < 1)
    return make_error("grid cap {} blocks per unit is below 1", groups_per_unit);
  if (chunk_elements < 1) return make_error("chunk size must be at least 1 element");
  if (resident < 32 || resident > 2048 || resident % 32 != 0)
    return make_error("resident threads {} per SM is not a multiple of 32 in 32..2048", resident);
  if (ahead < 0 || ahead > 8) return make_error("trips ahead {} is not in 0..8", ahead);
  if (stage < 0 || stage > 4) return make_error("trips staged {} is not in 0..4", stage);
  // The options of CUDA's quantized path in vectors.
  const std::string staged = fmt::format("stage={}", stage);
  for (const auto& [set, option, doing] :
       {std::tuple{recompute, std::string("recompute=1"), "recomputing"},
        std::tuple{interleave, std::string("interleave=1"), "interleaving"},
        std::tuple{stage > 0, staged, "staging"}}) {
    if (set && prefetch)
      return make_error(
          "{} and prefetch=1 exclude each other: prefetching takes one element a lane, {} "
          "works in vectors",
          option, doing);
    if (set && vec == 1)
      return make_error("{} needs vec=2, 4 or 8 (CUDA's quantized path in vectors)", option);
  }
  if (chunk_elements % vec != 0)
    return make_error("chunk size {} is not a multiple of the vector width {}", chunk_elements,
                      vec);
  return Status::Ok();
}

int64_t GpuLaunch::grid(int64_t chunks, int units) const {
  return std::max<int64_t>(
      1, std::min<int64_t>(chunks, int64_t{std::max(units, 1)} * groups_per_unit));
}

}  // namespace optjit::codegen
