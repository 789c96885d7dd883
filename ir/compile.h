// Pipeline text (or a file holding it) to a plan, in one call.
#pragma once

#include <string>
#include <string_view>

#include "ir/dsl.h"
#include "ir/plan.h"

namespace optjit {

/// `text_or_path` is pipeline text, or the path of a file that holds it.
Expected<std::string> read_pipeline_text(const std::string& text_or_path);
/// Parses, lowers and plans pipeline text.
Expected<plan::Plan> compile_pipeline(std::string_view text, dsl::DTypes dtypes = {});

}  // namespace optjit
