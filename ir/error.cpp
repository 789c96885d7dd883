#include "ir/error.h"

#include <cstdio>
#include <cstdlib>

namespace optjit {

void internal_error(const char* file, int line, const std::string& what) {
  std::fprintf(stderr, "optjit internal error at %s:%d: %s (this is a bug in optjit)\n", file, line,
               what.c_str());
  std::abort();
}

}  // namespace optjit
