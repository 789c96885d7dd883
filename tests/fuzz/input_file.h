// A libFuzzer input as a file the code under test opens by path: an anonymous memory file
// (memfd), named /proc/self/fd/N, closed when this goes.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace optjit::fuzz {

class InputFile {
 public:
  InputFile(const uint8_t* data, size_t size) : fd_(::memfd_create("fuzz-input", 0)) {
    if (fd_ < 0) __builtin_trap();
    for (size_t done = 0; done < size;) {
      const ssize_t w = ::write(fd_, data + done, size - done);
      if (w <= 0) __builtin_trap();
      done += static_cast<size_t>(w);
    }
  }
  ~InputFile() { ::close(fd_); }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

}  // namespace optjit::fuzz
