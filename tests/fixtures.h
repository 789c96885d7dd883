// Loading the PyTorch fixtures (tests/fixtures/torch_fixtures.json) and comparing numbers.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace optjit::testing {

inline double json_number(const nlohmann::json& v) {
  if (v.is_string()) {
    std::string s = v.get<std::string>();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
  }
  return v.get<double>();
}

inline std::vector<double> json_numbers(const nlohmann::json& a) {
  std::vector<double> out;
  for (const auto& v : a) out.push_back(json_number(v));
  return out;
}

/// The source tree: where the build saw it, or $OPTJIT_SOURCE_DIR (test binaries that were
/// packed and run elsewhere, see tools/gpu/pack.sh).
inline std::string source_dir() {
  const char* env = std::getenv("OPTJIT_SOURCE_DIR");
  return env && *env ? env : OPTJIT_SOURCE_DIR;
}

#ifdef OPTJIT_CLI
/// The optjit binary: where the build put it, or $OPTJIT_CLI (packed test binaries, as above).
inline std::string cli_path() {
  const char* env = std::getenv("OPTJIT_CLI");
  return env && *env ? env : OPTJIT_CLI;
}
#endif

inline const nlohmann::json& torch_fixtures() {
  static const nlohmann::json j = [] {
    const std::string path = source_dir() + "/tests/fixtures/torch_fixtures.json";
    std::ifstream in(path);
    if (!in) {
      std::fprintf(stderr, "cannot read %s (set OPTJIT_SOURCE_DIR to the source tree)\n",
                   path.c_str());
      std::exit(2);
    }
    return nlohmann::json::parse(in);
  }();
  return j;
}

/// |actual - expected| <= rtol * max|expected over the tensor| + floor, elementwise; NaN and
/// Inf must match exactly. Scale-relative, since an f64 oracle and f32 PyTorch differ by
/// rounding that follows the tensor's magnitude.
inline ::testing::AssertionResult close(const std::vector<double>& actual,
                                        const std::vector<double>& expected, double rtol,
                                        double floor) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure() << "size " << actual.size() << " vs " << expected.size();
  double scale = 0;
  for (double e : expected)
    if (std::isfinite(e)) scale = std::max(scale, std::fabs(e));
  for (size_t i = 0; i < actual.size(); ++i) {
    double a = actual[i], e = expected[i];
    if (std::isnan(e) || std::isinf(e)) {
      if (!(std::isnan(e) ? std::isnan(a) : a == e))
        return ::testing::AssertionFailure() << "element " << i << ": " << a << " vs " << e;
      continue;
    }
    if (!(std::fabs(a - e) <= rtol * scale + floor))
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << a << ", torch " << e << " (diff " << std::fabs(a - e)
             << ", allowed " << rtol * scale + floor << ")";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace optjit::testing
