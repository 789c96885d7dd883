// libFuzzer target: any bytes given to the pipeline parser (and, when they parse, the lowering,
// the planner and the IR printer/parser) give a value or an error, never a crash or a hang; a
// plan goes on through every stage after the planner (plan_stages.h: the emitters and the
// reference interpreter).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ir/dsl.h"
#include "ir/pipeline_text.h"
#include "ir/plan.h"
#include "ir/text.h"
#include "tests/fuzz/plan_stages.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto pipeline = optjit::dsl::parse_pipeline(text);
  if (!pipeline) return 0;
  auto program = optjit::dsl::lower(*pipeline);
  if (!program) return 0;
  auto printed = optjit::ir::print(*program);
  auto back = optjit::ir::parse_ir(printed);
  // The text form must round-trip. Compared as text: Program's == compares doubles, and a
  // NaN hyperparameter (lr=nan parses, then fails its bound) is never equal to itself.
  if (!back || optjit::ir::print(*back) != printed) __builtin_trap();
  // The IR parser gets the same bytes too.
  auto ir = optjit::ir::parse_ir(text);
  (void)ir;
  auto plan = optjit::plan::make_plan(*program);
  if (plan) optjit::fuzz::check_plan_stages(std::move(*plan));
  return 0;
}
