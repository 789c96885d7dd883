// OpenCL (PoCL in CI) against the reference on random pipelines, storage types and launch shapes
// (tests/gpu_property.h). Each case builds an OpenCL program, so this property runs 15 cases
// unless RC_PARAMS says otherwise.
#include <cstdlib>

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "gpu_property.h"

namespace optjit {
namespace {

// Before rapidcheck reads its configuration (on first use, after static initialization).
const int kCases = ::setenv("RC_PARAMS", "max_success=15", /*overwrite=*/0);

RC_GTEST_PROP(OpenclProperty, EveryLaunchShapeMatchesTheReference, ()) {
  (void)kCases;
  check_launch_shape_matches_reference("opencl");
}

}  // namespace
}  // namespace optjit
