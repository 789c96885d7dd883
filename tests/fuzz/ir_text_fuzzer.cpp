// libFuzzer target: any bytes as the IR's text form (`ir::parse_ir`, which a library user hands
// to `plan::make_plan` and `Optimizer::create(plan, ...)`) give a verified program or a one-line
// error, never a crash or a hang; and what the verifier accepts, the printer (round-trip), the
// planner and every stage after it take or refuse with an error (plan_stages.h: the emitters
// and the reference interpreter).
//
// Bytes mutated at random seldom make a program the verifier accepts, so a custom mutator also
// edits the text as IR: an op for another of its arity, a result type, an operand, a reduction's
// scope, a constant or hyperparameter value for an edge case (NaN, infinities, -0, the
// extremes), a buffer's storage, role or format; lines moved, dropped or duplicated, and new
// instructions over the values defined so far. libFuzzer's byte mutations still take a share.
//
// The seeds (corpus/ir_text) are `optjit plan`'s IR of the built-ins, quantized and
// low-precision state, clipping and the grad scaler, the custom transforms of
// examples/pipelines, and parameters of each storage type.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "ir/plan.h"
#include "ir/text.h"
#include "tests/fuzz/plan_stages.h"

namespace {

using namespace optjit;
using fuzz::check_message;

struct OpWord {
  const char* text;
  int arity;
};
constexpr OpWord kOps[] = {
#define OPTJIT_OP(name, text, arity, kind, synopsis) {text, arity},
#include "ir/ops.def"
#undef OPTJIT_OP
};
constexpr const char* kTypes[] = {"f64", "f32", "f16", "bf16", "i64", "b1"};
constexpr const char* kNumbers[] = {"0", "-0", "1", "-1", "nan", "inf", "-inf", "0.5", "2",
                                    "1e-300", "5e-324", "1e308", "-1e308", "65504", "1e-08",
                                    "0.999", "4096", "3",
                                    // i64's edges (kI64Limit; 94906266^2 passes it), f32's
                                    "9007199254740992", "-9007199254740992", "9007199254740994",
                                    "94906266", "3.4028235e38", "3.5e38"};
constexpr const char* kFormats[] = {"q8", "q8u", "f8", "q4", "q4u", "q4_b256", "q4u_b256"};
constexpr const char* kRoles[] = {"param", "grad", "state init 0", "scratch", "state per_block"};

std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> lines;
  std::string line;
  std::istringstream in{std::string(text)};
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

// One edit of the text as IR; false when the chosen edit found nothing to change.
bool mutate_as_ir(std::vector<std::string>& lines, std::minstd_rand& rng) {
  if (lines.empty()) return false;
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  const size_t at = pick(lines.size());
  std::string& line = lines[at];
  static const std::regex value_line(R"(^(%\d+) = ([a-z0-9_]+)(.*?)( : )([a-z0-9]+)(.*)$)");
  static const std::regex operand(R"(%\d+)");
  // The values defined above line `at` (the seeds number them %0, %1, ... in order).
  size_t defined = 0;
  for (size_t i = 0; i < at; ++i)
    if (lines[i].rfind('%', 0) == 0) ++defined;
  std::smatch m;
  switch (pick(10)) {
    case 0:  // an op for another of the same arity
      if (std::regex_match(line, m, value_line)) {
        int arity = -1;
        for (const auto& op : kOps)
          if (m[2] == op.text) arity = op.arity;
        std::vector<const char*> same;
        for (const auto& op : kOps)
          if (op.arity == arity) same.push_back(op.text);
        if (same.empty()) return false;
        line = m[1].str() + " = " + same[pick(same.size())] + m[3].str() + m[4].str() + m[5].str() +
               m[6].str();
        return true;
      }
      return false;
    case 1:  // a result type
      if (std::regex_match(line, m, value_line)) {
        line = m[1].str() + " = " + m[2].str() + m[3].str() + m[4].str() +
               kTypes[pick(std::size(kTypes))] + m[6].str();
        return true;
      }
      return false;
    case 2: {  // an operand for another value defined before this line
      std::vector<std::pair<size_t, size_t>> refs;  // operands after the definition's '='
      const size_t from = line.find('=') == std::string::npos ? 0 : line.find('=');
      for (auto it =
               std::sregex_iterator(line.begin() + static_cast<long>(from), line.end(), operand);
           it != std::sregex_iterator(); ++it)
        refs.emplace_back(from + static_cast<size_t>(it->position()),
                          static_cast<size_t>(it->length()));
      if (refs.empty() || defined == 0) return false;
      const auto [pos, len] = refs[pick(refs.size())];
      line.replace(pos, len, "%" + std::to_string(pick(defined)));
      return true;
    }
    case 3: {  // a reduction's scope
      for (const char* w : {" all ", " tensor "})
        if (auto p = line.find(w); p != std::string::npos) {
          line.replace(p, std::strlen(w), std::strcmp(w, " all ") == 0 ? " tensor " : " all ");
          return true;
        }
      return false;
    }
    case 4: {  // a constant's or a hyperparameter's value
      static const std::regex number(R"((const |\" = )(-?[0-9][0-9.e+-]*|nan|inf|-inf))");
      if (std::regex_search(line, m, number)) {
        line =
            m.prefix().str() + m[1].str() + kNumbers[pick(std::size(kNumbers))] + m.suffix().str();
        return true;
      }
      return false;
    }
    case 5: {  // a buffer's storage, role or quantized format
      if (line.rfind("buffer ", 0) != 0) return false;
      static const std::regex decl(R"(^(buffer \"[^\"]*\" )([a-z0-9]+) (.*)$)");
      if (!std::regex_match(line, m, decl)) return false;
      switch (pick(3)) {
        case 0:
          line = m[1].str() + kTypes[pick(std::size(kTypes))] + " " + m[3].str();
          break;
        case 1:
          line = m[1].str() + m[2].str() + " " + kRoles[pick(std::size(kRoles))];
          break;
        default:
          line = m[1].str() + m[2].str() + " state init 0 quant " +
                 kFormats[pick(std::size(kFormats))];
      }
      return true;
    }
    case 6:  // a line dropped
      lines.erase(lines.begin() + static_cast<long>(at));
      return true;
    case 7: {  // a line moved
      std::string moved = line;
      lines.erase(lines.begin() + static_cast<long>(at));
      lines.insert(lines.begin() + static_cast<long>(pick(lines.size() + 1)), moved);
      return true;
    }
    case 8: {  // a store (or any effect) duplicated elsewhere
      if (line.rfind("store", 0) != 0 && line.rfind("sstore", 0) != 0 &&
          line.rfind("skip_if", 0) != 0)
        return false;
      std::string copy = line;
      lines.insert(lines.begin() + static_cast<long>(pick(lines.size() + 1)), copy);
      return true;
    }
    default: {  // a new instruction over values defined before it
      if (defined == 0) return false;
      const OpWord& op = kOps[pick(std::size(kOps))];
      std::string args;
      for (int k = 0; k < op.arity; ++k) args += (k ? ", %" : " %") + std::to_string(pick(defined));
      lines.insert(lines.begin() + static_cast<long>(at),
                   "%" + std::to_string(100000 + rng() % 1000) + " = " + op.text + args + " : " +
                       kTypes[pick(std::size(kTypes))]);
      return true;
    }
  }
}

}  // namespace

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size,
                                          unsigned int seed) {
  std::minstd_rand rng(seed);
  if (rng() % 4 == 0) return LLVMFuzzerMutate(data, size, max_size);
  auto lines = split_lines(std::string_view(reinterpret_cast<const char*>(data), size));
  bool changed = false;
  for (int edits = 1 + static_cast<int>(rng() % 3); edits > 0; --edits)
    changed = mutate_as_ir(lines, rng) || changed;
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  if (!changed || out.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
  std::memcpy(data, out.data(), out.size());
  return out.size();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto program = ir::parse_ir(text);
  if (!program) {
    check_message("parse", program.error());
    return 0;
  }
  // What parses prints and parses back to the same text.
  const std::string printed = ir::print(*program);
  auto back = ir::parse_ir(printed);
  if (!back || ir::print(*back) != printed) __builtin_trap();

  auto plan = plan::make_plan(*program);
  if (!plan) {
    check_message("plan", plan.error());
    return 0;
  }
  fuzz::check_plan_stages(std::move(*plan));
  return 0;
}
