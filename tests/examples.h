// The shipped example pipelines (examples/pipelines), for tests that step what users read.
#pragma once

#include <fstream>
#include <iterator>
#include <string>

namespace optjit::testing {

/// The transforms example `file` declares, without the pipeline line it ends with: a test
/// chains them in a pipeline of its own ("" when the file cannot be read, which the test's
/// compile then reports).
inline std::string example_transforms(const std::string& file) {
  std::ifstream in(std::string(OPTJIT_SOURCE_DIR) + "/examples/pipelines/" + file);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text.substr(0, text.rfind('\n') + 1);
}

}  // namespace optjit::testing
