#include "ir/compile.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "ir/pipeline_text.h"

namespace optjit {

Expected<std::string> read_pipeline_text(const std::string& s) {
  // Pipeline text always has '('; a path to a file never needs one.
  std::error_code ec;
  if (s.find('(') == std::string::npos || std::filesystem::is_regular_file(s, ec)) {
    std::ifstream in(s);
    if (!in) return make_error("'{}' is neither pipeline text nor a readable file", s);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  return s;
}

Expected<plan::Plan> compile_pipeline(std::string_view text, dsl::DTypes dtypes) {
  auto pipeline = dsl::parse_pipeline(text);
  if (!pipeline) return make_error("pipeline: {}", pipeline.error().message);
  auto program = dsl::lower(*pipeline, dtypes);
  if (!program) return make_error("pipeline: {}", program.error().message);
  return plan::make_plan(*program);
}

}  // namespace optjit
