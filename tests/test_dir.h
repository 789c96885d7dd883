// A directory of its own for each test case: /tmp/optjit_PREFIX_PID_TEST, empty when the test
// starts and removed when it ends (permissions a test took away are given back first).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

namespace optjit::test {

inline std::filesystem::path fresh_test_dir(std::string_view prefix) {
  auto dir = std::filesystem::temp_directory_path() /
             ("optjit_" + std::string(prefix) + "_" + std::to_string(::getpid()) + "_" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline void remove_test_dir(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::add, ec);
  std::filesystem::remove_all(dir, ec);
}

}  // namespace optjit::test
